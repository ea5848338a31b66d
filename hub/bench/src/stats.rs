//! Latency samples and their summary (count, p50, p90, p99, max).

use std::time::Duration;

use serde::Serialize;

/// The summary of a set of latency samples, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// How many samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// 99th percentile (nearest rank).
    pub p99_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// The nearest-rank percentile `p` (0..=100) of sorted `samples`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarizes `samples` (any order).
pub fn summarize(samples: &[Duration]) -> Summary {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Summary {
        count: sorted.len(),
        p50_ms: ms(percentile(&sorted, 50.0)),
        p90_ms: ms(percentile(&sorted, 90.0)),
        p99_ms: ms(percentile(&sorted, 99.0)),
        max_ms: ms(sorted.last().copied().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let s = summarize(&samples);
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p90_ms, 90.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.max_ms, 100.0);
        let one = summarize(&[ms(7)]);
        assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (7.0, 7.0, 7.0));
        assert_eq!(summarize(&[]), Summary::default());
    }

    #[test]
    fn p99_of_few_samples_is_the_maximum() {
        let s = summarize(&[ms(1), ms(2), ms(3), ms(40)]);
        assert_eq!((s.p50_ms, s.p99_ms), (2.0, 40.0));
    }
}
