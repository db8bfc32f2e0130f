//! Byte sizes as people write them (`64KiB`, `1GiB`) and read them, for every csx tool's
//! command line and reports.

/// Why a size did not parse; names the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    #[error("size {text:?} does not start with a number")]
    NoNumber { text: String },
    #[error("size {text:?} is too large (at most {} bytes)", u64::MAX)]
    TooLarge { text: String },
    #[error("size {text:?} has unknown unit {unit:?} (use KiB, MiB, GiB or TiB)")]
    UnknownUnit { text: String, unit: String },
}

/// Parses a byte size: a number with an optional binary unit, `4096`, `64KiB`, `256MiB`,
/// `1GiB`, `2TiB` (`K`, `M`, `G`, `T`, with or without `iB`/`B`, all powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let too_large = || SizeError::TooLarge {
        text: text.to_string(),
    };
    if digits.is_empty() {
        return Err(SizeError::NoNumber {
            text: text.to_string(),
        });
    }
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(SizeError::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
            })
        }
    };
    n.checked_mul(1u64 << shift).ok_or_else(too_large)
}

/// A size for people: the largest binary unit that divides it, else bytes with one
/// decimal of the nearest unit.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (name, shift) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {name}", bytes >> shift);
        }
    }
    for (name, shift) in UNITS {
        if bytes >= 1 << shift {
            return format!("{:.1} {name}", bytes as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_size("2 TiB").unwrap(), 2 << 40);
        assert!(matches!(parse_size("GiB"), Err(SizeError::NoNumber { .. })));
        assert!(matches!(
            parse_size("1PiB"),
            Err(SizeError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_size("99999999999TiB"),
            Err(SizeError::TooLarge { .. })
        ));
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(100), "100 B");
    }
}
