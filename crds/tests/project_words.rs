//! The project's own words: no tracked file (document, code, manifest, script) refers to the
//! working session it was written in, i.e. the word "session" followed by a number, in any case.
//! Such a note means nothing to a reader of the project. Needs no fleet: it reads the files
//! `git ls-files` lists, skipping those that are not UTF-8 text.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The word, put together from pieces so that this file does not match itself.
const WORD: &str = concat!("ses", "sion");

/// The workspace root (this crate is `crds/`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file git tracks, relative to the workspace root.
fn tracked_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("running `git ls-files` in {}: {e}", root.display()));
    assert!(
        out.status.success(),
        "`git ls-files` in {} failed: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let list = String::from_utf8(out.stdout).expect("`git ls-files` printed UTF-8 paths");
    list.split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether `line` has the word (not inside a longer word: "session" but not "subsession"),
/// in any case, followed by a number, with at most spaces, tabs, '#' or '-' between them.
fn names_a_session(line: &str) -> bool {
    // ASCII lower-casing keeps every byte where it was, so indices carry over to `line`.
    let lower = line.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    lower.match_indices(WORD).any(|(at, _)| {
        let starts_word = at == 0 || {
            let before = bytes[at - 1];
            !(before.is_ascii_alphanumeric() || before == b'_')
        };
        let rest = &bytes[at + WORD.len()..];
        let gap = rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'#' | b'-'))
            .count();
        starts_word && rest.get(gap).is_some_and(u8::is_ascii_digit)
    })
}

#[test]
fn no_tracked_file_names_a_working_session() {
    let root = workspace_root();
    let files = tracked_files(&root);
    assert!(!files.is_empty(), "`git ls-files` listed no file");
    let mut found = Vec::new();
    for path in &files {
        // Not UTF-8 text (an image, a binary), or deleted in the work tree: nothing to read.
        let Ok(text) = std::fs::read_to_string(root.join(path)) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if names_a_session(line) {
                let line: String = line.trim().chars().take(120).collect();
                found.push(format!("{path}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) name a working session (\"{WORD}\" and a number); say what the text means \
         without it:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_word_counts_only_with_a_number_after_it() {
    let capital = format!("{}{}", WORD[..1].to_ascii_uppercase(), &WORD[1..]);
    for hit in [
        format!("done in {capital} 33."),
        format!("{WORD} 4"),
        format!("({} #12)", WORD.to_ascii_uppercase()),
        format!("{WORD}-7 notes"),
        format!("{WORD}9"),
    ] {
        assert!(names_a_session(&hit), "{hit:?} should match");
    }
    for miss in [
        format!("the {WORD} cookie"),
        format!("{WORD}s 3"),
        format!("sub{WORD} 3"),
        format!("{WORD}_id 5"),
        format!("{WORD}: 3"),
        "nothing here".to_string(),
    ] {
        assert!(!names_a_session(&miss), "{miss:?} should not match");
    }
}
