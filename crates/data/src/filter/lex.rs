//! The tokens of a filter string.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `12`, `12.5`, `12.`, `.5`.
    Num,
    /// `'text'` with `''` for a quote.
    Str,
    /// `=`, `==`, `!=`, `<>`, `<`, `<=`, `>`, `>=`.
    Op,
    /// A word: a column name or a keyword.
    Ident,
    /// One of `- + ( ) , * / % |`.
    Punct,
    /// Any other character (an error).
    Other,
}

/// A token: its kind and its byte range in the filter.
#[derive(Clone, Copy, Debug)]
pub struct Tok {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// Whether `c` is white space (Python's `str.isspace`: Unicode white space and the
/// ASCII separators 0x1c to 0x1f).
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The tokens of `text`, white space between them skipped.
pub fn tokens(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let rest = &text[pos..];
        let skip = rest.find(|c: char| !is_space(c)).unwrap_or(rest.len());
        let start = pos + skip;
        let Some((kind, len)) = token_at(&text[start..]) else {
            return out;
        };
        out.push(Tok {
            kind,
            start,
            end: start + len,
        });
        pos = start + len;
    }
}

/// The kind and byte length of the token at the start of `s` (no leading space).
fn token_at(s: &str) -> Option<(Kind, usize)> {
    let b = s.as_bytes();
    let c = s.chars().next()?;
    let digits = |from: usize| from + b[from..].iter().take_while(|x| x.is_ascii_digit()).count();
    if c.is_ascii_digit() {
        let int = digits(0);
        let len = if b.get(int) == Some(&b'.') {
            digits(int + 1)
        } else {
            int
        };
        return Some((Kind::Num, len));
    }
    if c == '.' && b.get(1).is_some_and(u8::is_ascii_digit) {
        return Some((Kind::Num, digits(1)));
    }
    if c == '\'' {
        if let Some(len) = string_len(b) {
            return Some((Kind::Str, len));
        }
    }
    for op in ["<=", ">=", "<>", "!=", "==", "=", "<", ">"] {
        if s.starts_with(op) {
            return Some((Kind::Op, op.len()));
        }
    }
    if c.is_ascii_alphabetic() || c == '_' {
        let len = b
            .iter()
            .take_while(|x| x.is_ascii_alphanumeric() || **x == b'_')
            .count();
        return Some((Kind::Ident, len));
    }
    if "-+(),*/%|".contains(c) {
        return Some((Kind::Punct, 1));
    }
    Some((Kind::Other, c.len_utf8()))
}

/// The length of the quoted string at the start of `b` (`b[0]` is a quote): a doubled
/// quote inside is a quote, unless no later quote closes the string, when the first
/// quote of the last doubled pair closes it. `None` when no quote closes it.
fn string_len(b: &[u8]) -> Option<usize> {
    let mut i = 1;
    let mut last_pair = None;
    while i < b.len() {
        if b[i] == b'\'' {
            if b.get(i + 1) == Some(&b'\'') {
                last_pair = Some(i);
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    last_pair.map(|p| p + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(Kind, &str)> {
        tokens(text)
            .iter()
            .map(|t| (t.kind, &text[t.start..t.end]))
            .collect()
    }

    #[test]
    fn tokens_of_a_filter() {
        use Kind::*;
        assert_eq!(
            kinds(" a<=1.5 AND b <> 'it''s' OR .5 7. é"),
            vec![
                (Ident, "a"),
                (Op, "<="),
                (Num, "1.5"),
                (Ident, "AND"),
                (Ident, "b"),
                (Op, "<>"),
                (Str, "'it''s'"),
                (Ident, "OR"),
                (Num, ".5"),
                (Num, "7."),
                (Other, "é"),
            ]
        );
        // An unclosed string: the last doubled quote closes it, else it is no string.
        assert_eq!(
            kinds("'a''b"),
            vec![(Str, "'a'"), (Other, "'"), (Ident, "b")]
        );
        assert_eq!(kinds("'ab"), vec![(Other, "'"), (Ident, "ab")]);
        assert_eq!(kinds("x.y"), vec![(Ident, "x"), (Other, "."), (Ident, "y")]);
    }
}
