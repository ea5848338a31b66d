//! Exponential backoff for retrying a step that failed (joining, installing CRDs, applying).

use std::time::Duration;

/// The delay before retry number `attempt` (0-based): `base · 2^attempt`, at most `max`.
pub fn delay(attempt: u32, base: Duration, max: Duration) -> Duration {
    base.saturating_mul(2u32.saturating_pow(attempt)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let s = Duration::from_secs;
        let delays: Vec<_> = (0..7).map(|a| delay(a, s(1), s(30))).collect();
        assert_eq!(delays, [s(1), s(2), s(4), s(8), s(16), s(30), s(30)]);
        assert_eq!(delay(u32::MAX, s(1), s(30)), s(30));
    }
}
