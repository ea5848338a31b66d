//! Kubernetes resource quantities (`8`, `500m`, `32Gi`, `1.5e3`), parsed exactly so that the
//! nodes' allocatable resources can be summed for the MemberCluster's status.

use std::fmt;

/// How a quantity is written: with powers of 1024 (`Ki`, `Mi`, …) or of 10 (`m`, `k`, `M`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Binary,
    Decimal,
}

/// A quantity as an exact number of nano-units, and the format it was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not of the form `<number><suffix>`.
    #[error("{0:?} is not a Kubernetes quantity (e.g. 500m, 8, 32Gi)")]
    Malformed(String),
    /// Too large to add up.
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

const NANO: i128 = 1_000_000_000;
const BINARY: [(&str, u32); 6] = [
    ("Ei", 6),
    ("Pi", 5),
    ("Ti", 4),
    ("Gi", 3),
    ("Mi", 2),
    ("Ki", 1),
];
const DECIMAL: [(&str, i32); 10] = [
    ("E", 18),
    ("P", 15),
    ("T", 12),
    ("G", 9),
    ("M", 6),
    ("k", 3),
    ("", 0),
    ("m", -3),
    ("u", -6),
    ("n", -9),
];

impl Quantity {
    /// Parses a quantity. Fractions of a nano-unit are rounded up, as Kubernetes does.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let malformed = || QuantityError::Malformed(s.to_string());
        let overflow = || QuantityError::Overflow(s.to_string());
        let (negative, rest) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(end);
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let digits = format!("{int_part}{frac_part}");
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed());
        }
        if digits.len() > 30 {
            return Err(overflow());
        }
        let mantissa: i128 = digits.parse().map_err(|_| overflow())?;

        let (multiplier, exp10, format) =
            if let Some((_, pow)) = BINARY.iter().find(|(sfx, _)| *sfx == suffix) {
                (1024i128.pow(*pow), 0, Format::Binary)
            } else if let Some((_, exp)) = DECIMAL.iter().find(|(sfx, _)| *sfx == suffix) {
                (1, *exp, Format::Decimal)
            } else if let Some(exp) = suffix.strip_prefix(['e', 'E']).filter(|e| !e.is_empty()) {
                let exp: i32 = exp.parse().map_err(|_| malformed())?;
                (1, exp, Format::Decimal)
            } else {
                return Err(malformed());
            };

        let value = mantissa.checked_mul(multiplier).ok_or_else(overflow)?;
        let shift = i64::from(exp10) + 9 - frac_part.len() as i64;
        let nanos = if shift >= 0 {
            u32::try_from(shift)
                .ok()
                .and_then(|e| 10i128.checked_pow(e))
                .and_then(|p| value.checked_mul(p))
                .ok_or_else(overflow)?
        } else {
            match u32::try_from(-shift)
                .ok()
                .and_then(|e| 10i128.checked_pow(e))
            {
                // Round up to a whole nano-unit.
                Some(p) => value / p + i128::from(value % p != 0),
                None => i128::from(value != 0),
            }
        };
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// The sum of both, in the format of `self` (as Kubernetes adds quantities).
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        Some(Quantity {
            nanos: self.nanos.checked_add(other.nanos)?,
            format: self.format,
        })
    }
}

impl fmt::Display for Quantity {
    /// The canonical form: the largest suffix that keeps the number whole (`96Gi`, `24`, `1500m`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let whole = abs / NANO as u128;
        if abs.is_multiple_of(NANO as u128) && whole != 0 && self.format == Format::Binary {
            for (suffix, pow) in BINARY {
                let unit = 1024u128.pow(pow);
                if whole.is_multiple_of(unit) {
                    return write!(f, "{sign}{}{suffix}", whole / unit);
                }
            }
        }
        if abs == 0 {
            return write!(f, "0");
        }
        for (suffix, exp) in DECIMAL {
            let unit = 10u128.pow((exp + 9) as u32);
            if abs.is_multiple_of(unit) {
                return write!(f, "{sign}{}{suffix}", abs / unit);
            }
        }
        write!(f, "{sign}{abs}n")
    }
}

/// The sum of `quantities` in canonical form, in the format of the first one; `0` for none.
pub fn sum<'a>(quantities: impl IntoIterator<Item = &'a str>) -> Result<String, QuantityError> {
    let mut total: Option<Quantity> = None;
    for q in quantities {
        let q = Quantity::parse(q)?;
        total = Some(match total {
            None => q,
            Some(t) => t
                .checked_add(q)
                .ok_or_else(|| QuantityError::Overflow(q.to_string()))?,
        });
    }
    Ok(total.map_or_else(|| "0".to_string(), |t| t.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_like_kubernetes_prints_them() {
        let cases: &[(&[&str], &str)] = &[
            (&["8", "8", "8"], "24"),
            (&["32Gi", "32Gi", "32Gi"], "96Gi"),
            (&["110", "110", "110"], "330"),
            (&["500m", "1"], "1500m"),
            (&["250m", "750m"], "1"),
            (&["16266820Ki", "16266820Ki"], "32533640Ki"),
            (&["1Gi", "512Mi"], "1536Mi"),
            (&["1.5", "0.5"], "2"),
            (&["1e3"], "1k"),
            (&["2000"], "2k"),
            (&["1E"], "1E"),
            (&["100u", "1n"], "100001n"),
            (&["0.1m"], "100u"),
            (&["+5", "-2"], "3"),
            (&[], "0"),
            (&["0Gi"], "0"),
        ];
        for (input, want) in cases {
            assert_eq!(
                sum(input.iter().copied()).as_deref(),
                Ok(*want),
                "{input:?}"
            );
        }
    }

    #[test]
    fn fractions_below_a_nano_unit_round_up() {
        assert_eq!(Quantity::parse("0.1n").unwrap().nanos, 1);
        assert_eq!(Quantity::parse("1e-30").unwrap().nanos, 1);
        assert_eq!(Quantity::parse("0e-50").unwrap().nanos, 0);
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        for bad in ["", "Gi", "1.2.3", "1Qi", "1 Gi", "abc", "1e", "1ex", "--1"] {
            assert_eq!(
                Quantity::parse(bad),
                Err(QuantityError::Malformed(bad.to_string())),
                "{bad:?}"
            );
        }
        assert!(matches!(
            Quantity::parse("99999999999999999999999999999999"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            Quantity::parse("1e40"),
            Err(QuantityError::Overflow(_))
        ));
    }
}
