//! `maxConcurrency`: how many clusters of a stage update at once, as an integer (`2`) or a
//! percentage of the stage's clusters (`"50%"`).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A parsed `maxConcurrency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxConcurrency {
    /// At most this many clusters at once (≥ 1).
    Count(u32),
    /// At most this percentage (1–100) of the stage's clusters at once, rounded down, but never
    /// fewer than one.
    Percent(u32),
}

impl Default for MaxConcurrency {
    /// One cluster at a time.
    fn default() -> Self {
        MaxConcurrency::Count(1)
    }
}

/// Why a `maxConcurrency` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConcurrencyError {
    /// An integer below one.
    #[error("maxConcurrency {0} must be at least 1")]
    TooSmall(i32),
    /// A string that is not a percentage from 1% to 100%.
    #[error(
        "maxConcurrency {0:?} must be an integer of at least 1 or a percentage from 1% to 100%"
    )]
    BadPercent(String),
}

impl MaxConcurrency {
    /// Parses the API value; `None` means the default of one cluster at a time.
    pub fn parse(value: Option<&IntOrString>) -> Result<Self, ConcurrencyError> {
        match value {
            None => Ok(Self::default()),
            Some(IntOrString::Int(n)) if *n >= 1 => Ok(Self::Count(*n as u32)),
            Some(IntOrString::Int(n)) => Err(ConcurrencyError::TooSmall(*n)),
            Some(IntOrString::String(s)) => s
                .strip_suffix('%')
                .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse::<u32>().ok())
                .filter(|p| (1..=100).contains(p))
                .map(Self::Percent)
                .ok_or_else(|| ConcurrencyError::BadPercent(s.clone())),
        }
    }

    /// How many of a stage's `clusters` may update at once: at least one (so a stage always
    /// makes progress), at most `clusters` (or one for an empty stage).
    pub fn resolve(self, clusters: usize) -> usize {
        let limit = match self {
            Self::Count(n) => n as usize,
            Self::Percent(p) => clusters * p as usize / 100,
        };
        limit.clamp(1, clusters.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.to_string())
    }

    #[test]
    fn parses_counts_and_percentages() {
        assert_eq!(MaxConcurrency::parse(None), Ok(MaxConcurrency::Count(1)));
        assert_eq!(
            MaxConcurrency::parse(Some(&IntOrString::Int(3))),
            Ok(MaxConcurrency::Count(3))
        );
        assert_eq!(
            MaxConcurrency::parse(Some(&s("50%"))),
            Ok(MaxConcurrency::Percent(50))
        );
        assert_eq!(
            MaxConcurrency::parse(Some(&s("100%"))),
            Ok(MaxConcurrency::Percent(100))
        );
        assert_eq!(
            MaxConcurrency::parse(Some(&s("1%"))),
            Ok(MaxConcurrency::Percent(1))
        );
    }

    #[test]
    fn refuses_out_of_range() {
        assert_eq!(
            MaxConcurrency::parse(Some(&IntOrString::Int(0))),
            Err(ConcurrencyError::TooSmall(0))
        );
        assert_eq!(
            MaxConcurrency::parse(Some(&IntOrString::Int(-2))),
            Err(ConcurrencyError::TooSmall(-2))
        );
        for bad in ["0%", "101%", "%", "50", "5.5%", "-5%", "abc", "", "+5%"] {
            assert!(
                MaxConcurrency::parse(Some(&s(bad))).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn resolves_against_stage_size() {
        let cases = [
            (MaxConcurrency::Count(1), 10, 1),
            (MaxConcurrency::Count(3), 10, 3),
            (MaxConcurrency::Count(30), 10, 10),
            (MaxConcurrency::Percent(50), 10, 5),
            (MaxConcurrency::Percent(50), 3, 1),
            (MaxConcurrency::Percent(25), 3, 1),
            (MaxConcurrency::Percent(100), 7, 7),
            (MaxConcurrency::Percent(1), 1000, 10),
            (MaxConcurrency::Count(2), 0, 1),
            (MaxConcurrency::Percent(50), 0, 1),
        ];
        for (mc, clusters, want) in cases {
            assert_eq!(mc.resolve(clusters), want, "{mc:?} of {clusters}");
        }
    }
}
