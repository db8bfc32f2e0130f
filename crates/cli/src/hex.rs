//! Hex byte strings as the command line takes them: `--mem-hex`, and the memory and
//! program of the bpf_conformance plugin protocol ("01  02  ff  "). Whitespace anywhere
//! is ignored, so both the packed form and the runner's spaced form parse.

/// Errors parsing a hex byte string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HexError {
    /// A character that is neither a hex digit nor whitespace.
    BadDigit { ch: char, idx: usize },
    /// An odd number of hex digits.
    OddLength { digits: usize },
}

impl std::fmt::Display for HexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HexError::BadDigit { ch, idx } => {
                write!(f, "character {ch:?} at offset {idx} is not a hex digit")
            }
            HexError::OddLength { digits } => {
                write!(f, "{digits} hex digits is not a whole number of bytes")
            }
        }
    }
}

impl std::error::Error for HexError {}

/// Parses hex digit pairs, ignoring whitespace (and one leading `0x`).
pub fn parse(text: &str) -> Result<Vec<u8>, HexError> {
    let trimmed = text.trim_start();
    let body = trimmed.strip_prefix("0x").unwrap_or(trimmed);
    let skipped = text.len() - body.len();
    let mut bytes = Vec::with_capacity(body.len() / 2);
    let mut high: Option<u8> = None;
    let mut digits = 0usize;
    for (idx, ch) in body.char_indices() {
        if ch.is_whitespace() {
            continue;
        }
        let nibble = ch.to_digit(16).ok_or(HexError::BadDigit {
            ch,
            idx: idx + skipped,
        })? as u8;
        digits += 1;
        match high.take() {
            None => high = Some(nibble),
            Some(h) => bytes.push((h << 4) | nibble),
        }
    }
    if high.is_some() {
        return Err(HexError::OddLength { digits });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse("01  02  ff  "), Ok(vec![1, 2, 0xff]));
        assert_eq!(parse("0102FF"), Ok(vec![1, 2, 0xff]));
        assert_eq!(parse("0x0a0b"), Ok(vec![10, 11]));
        assert_eq!(parse(" \n"), Ok(vec![]));
        assert_eq!(parse(""), Ok(vec![]));
    }

    #[test]
    fn errors() {
        assert_eq!(parse("012"), Err(HexError::OddLength { digits: 3 }));
        assert_eq!(parse("01 zz"), Err(HexError::BadDigit { ch: 'z', idx: 3 }));
    }
}
