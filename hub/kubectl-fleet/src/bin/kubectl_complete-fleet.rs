//! `kubectl_complete-fleet`: kubectl (1.26 and later) runs it to complete `kubectl fleet …` in
//! the shell. It asks `kubectl-fleet __complete` (beside it, else on PATH) for the answer.
#![forbid(unsafe_code)]

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("kubectl-fleet"))
        .filter(|p| p.is_file());
    let program = beside.map_or_else(|| "kubectl-fleet".into(), |p| p.into_os_string());
    match Command::new(program)
        .arg("__complete")
        .args(std::env::args_os().skip(1))
        .status()
    {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        // No completions rather than an error in the middle of someone's command line.
        _ => {
            println!(":4");
            ExitCode::SUCCESS
        }
    }
}
