//! CPU time and memory of the fleet's processes (the hub above all), read from `/proc`: the pid
//! comes from the fleet's pid file (`$FLEET_DIR/run/<name>.pid`), re-read on every sample so a
//! restarted hub is followed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

/// One reading of one process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The process id.
    pub pid: u32,
    /// User + system CPU time so far.
    pub cpu: Duration,
    /// Resident memory now, in KiB.
    pub rss_kib: u64,
}

/// Clock ticks per second for `/proc/<pid>/stat` times (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// utime + stime in ticks from the text of `/proc/<pid>/stat` (fields 14 and 15; the command
/// name in field 2 may hold spaces, so fields are counted after its closing parenthesis).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// starttime in ticks since boot from the text of `/proc/<pid>/stat` (field 22).
pub fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): starttime is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// When process `pid` started, as an `Instant` of this process (to the clock tick, 10 ms).
pub fn started_at(pid: u32) -> Option<std::time::Instant> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let now = std::time::Instant::now();
    let uptime: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    let started = start_ticks(&stat)? as f64 / clock_ticks() as f64;
    now.checked_sub(Duration::from_secs_f64((uptime - started).max(0.0)))
}

/// The value in KiB of line `key:` of `/proc/<pid>/status` (e.g. `VmRSS`).
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Reads process `pid` now.
pub fn read(pid: u32, ticks_per_second: u64) -> Option<Reading> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ticks = cpu_ticks(&stat)?;
    Some(Reading {
        pid,
        cpu: Duration::from_millis(ticks * 1000 / ticks_per_second.max(1)),
        rss_kib: status_kib(&status, "VmRSS")?,
    })
}

/// The pid in the fleet's pid file of component `name`.
pub fn fleet_pid(fleet_dir: &Path, name: &str) -> Option<u32> {
    std::fs::read_to_string(fleet_dir.join("run").join(format!("{name}.pid")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The folder of the binary that fleet component `name` runs (from `/proc/<pid>/exe`): a
/// restart starts the same build.
pub fn fleet_bins(fleet_dir: &Path, name: &str) -> Option<PathBuf> {
    let pid = fleet_pid(fleet_dir, name)?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    // A binary rebuilt since the process started reads "<path> (deleted)".
    let exe = exe.to_str()?.trim_end_matches(" (deleted)");
    Path::new(exe).parent().map(Path::to_path_buf)
}

/// What a process used over a measured interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Usage {
    /// CPU seconds (user + system) used in the interval, summed over restarts.
    pub cpu_seconds: f64,
    /// The largest resident memory seen (sampled every 100 ms), in MiB.
    pub peak_rss_mib: f64,
    /// Resident memory at the end, in MiB.
    pub end_rss_mib: f64,
}

#[derive(Default)]
struct Acc {
    cpu: Duration,
    last: Option<Reading>,
    peak_kib: u64,
}

/// Samples one fleet component every 100 ms until dropped.
pub struct Sampler {
    acc: Arc<Mutex<Acc>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling component `name` of the fleet in `fleet_dir`.
    pub fn start(fleet_dir: &Path, name: &str) -> Sampler {
        let acc = Arc::new(Mutex::new(Acc::default()));
        let (dir, name, shared) = (PathBuf::from(fleet_dir), name.to_string(), acc.clone());
        let ticks = clock_ticks();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let reading = fleet_pid(&dir, &name).and_then(|pid| read(pid, ticks));
                if let Ok(mut acc) = shared.lock() {
                    acc.observe(reading);
                }
            }
        });
        Sampler { acc, task }
    }

    /// Starts a new interval: CPU from zero, peak memory from the current reading.
    pub fn reset(&self) {
        if let Ok(mut acc) = self.acc.lock() {
            acc.cpu = Duration::ZERO;
            acc.peak_kib = acc.last.map_or(0, |r| r.rss_kib);
        }
    }

    /// What the component used since the sampler started (or was last reset).
    pub fn usage(&self) -> Usage {
        let Ok(acc) = self.acc.lock() else {
            return Usage::default();
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        Usage {
            cpu_seconds: acc.cpu.as_secs_f64(),
            peak_rss_mib: mib(acc.peak_kib),
            end_rss_mib: mib(acc.last.map_or(0, |r| r.rss_kib)),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Acc {
    fn observe(&mut self, reading: Option<Reading>) {
        let Some(r) = reading else { return };
        match self.last {
            // The same process: add the CPU it used since the last sample.
            Some(last) if last.pid == r.pid => self.cpu += r.cpu.saturating_sub(last.cpu),
            // A new process (the first sample, or a restart): its CPU so far is not ours to count
            // on the first sample, but after a restart all of it happened in this interval.
            Some(_) => self.cpu += r.cpu,
            None => {}
        }
        self.peak_kib = self.peak_kib.max(r.rss_kib);
        self.last = Some(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_and_status() {
        let stat =
            "4242 (fleethub hub) S 1 4242 4242 0 -1 4194560 9 0 0 0 150 37 0 0 20 0 12 0 99 1 2";
        assert_eq!(cpu_ticks(stat), Some(187));
        assert_eq!(start_ticks(stat), Some(99));
        assert_eq!(cpu_ticks("garbage"), None);
        let status = "Name:\thub\nVmHWM:\t  90000 kB\nVmRSS:\t   81234 kB\n";
        assert_eq!(status_kib(status, "VmRSS"), Some(81234));
        assert_eq!(status_kib(status, "VmHWM"), Some(90000));
        assert_eq!(status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn usage_follows_a_restarted_process() {
        let r = |pid, ms, rss| {
            Some(Reading {
                pid,
                cpu: Duration::from_millis(ms),
                rss_kib: rss,
            })
        };
        let mut acc = Acc::default();
        acc.observe(r(1, 5_000, 100));
        acc.observe(r(1, 5_300, 400));
        acc.observe(None); // killed
        acc.observe(r(2, 200, 50)); // restarted: all of its CPU is in the interval
        acc.observe(r(2, 250, 60));
        assert_eq!(acc.cpu, Duration::from_millis(300 + 200 + 50));
        assert_eq!(acc.peak_kib, 400);
        assert_eq!(acc.last.map(|l| l.rss_kib), Some(60));
    }
}
