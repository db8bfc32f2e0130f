//! The parser: a filter string into [`Comparison`]s.

use super::lex::{tokens, Kind, Tok};
use super::value::{add_interval, parse_date, Constant, Num, Unit};
use super::{py_repr, trim, Comparison, FilterError, Op};

const KEYWORDS: [&str; 10] = [
    "AND", "BETWEEN", "DATE", "INTERVAL", "OR", "NOT", "IN", "LIKE", "IS", "NULL",
];

type Res<T> = Result<T, FilterError>;

/// Most parentheses nested in a filter (the parser recurses once per level).
pub const NESTING_MAX: usize = 100;
/// Most digits in one number of a filter.
pub const DIGITS_MAX: usize = 1000;

pub(super) struct Parser<'a> {
    text: &'a str,
    toks: Vec<Tok>,
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str) -> Parser<'a> {
        Parser {
            text,
            toks: tokens(text),
            i: 0,
            depth: 0,
        }
    }

    fn s(&self, t: Tok) -> &'a str {
        &self.text[t.start..t.end]
    }

    /// A keyword's upper-case spelling ("" for a token that is not a word).
    fn word(&self, t: Tok) -> String {
        match t.kind {
            Kind::Ident => self.s(t).to_ascii_uppercase(),
            _ => String::new(),
        }
    }

    fn is_keyword(&self, t: Tok) -> bool {
        KEYWORDS.contains(&self.word(t).as_str())
    }

    fn peek(&self, k: usize) -> Option<Tok> {
        self.toks.get(self.i + k).copied()
    }

    fn take(&mut self) -> Res<Tok> {
        let n = self.text.len();
        let t = self
            .peek(0)
            .ok_or_else(|| self.unsupported(n, n, "the filter ends too early"))?;
        self.i += 1;
        Ok(t)
    }

    fn unsupported(&self, start: usize, end: usize, why: &str) -> FilterError {
        let mut part = trim(&self.text[start..end]);
        if part.is_empty() {
            part = trim(self.text);
        }
        FilterError::Unsupported {
            at: part.as_ptr() as usize - self.text.as_ptr() as usize,
            part: part.to_string(),
            why: why.to_string(),
        }
    }

    /// The error for the part from `start` to the end of the current predicate.
    fn unsupported_from(&self, start: usize, why: &str) -> FilterError {
        let mut depth = 0usize;
        let mut end = self.text.len();
        for j in self.i..self.toks.len() {
            let t = self.toks[j];
            match self.s(t) {
                "(" => depth += 1,
                ")" if depth == 0 => {
                    end = t.start;
                    break;
                }
                ")" => depth -= 1,
                _ if depth == 0 && self.word(t) == "AND" && !self.between_and(j) => {
                    end = t.start;
                    break;
                }
                _ => {}
            }
        }
        self.unsupported(start, end, why)
    }

    /// Whether the AND at token `j` is a BETWEEN's (a BETWEEN shortly before it, no AND
    /// between).
    fn between_and(&self, j: usize) -> bool {
        let floor = self.i as isize - 5;
        let mut k = j as isize - 1;
        while k >= floor.max(0) {
            match self.word(self.toks[k as usize]).as_str() {
                "BETWEEN" => return true,
                "AND" => return false,
                _ => k -= 1,
            }
        }
        false
    }

    pub(super) fn filter(&mut self) -> Res<Vec<Comparison>> {
        for &t in &self.toks {
            if t.kind == Kind::Other {
                let why = format!("unexpected character {}", py_repr(self.s(t)));
                return Err(self.unsupported(t.start, t.end, &why));
            }
            if t.kind == Kind::Num && t.end - t.start > DIGITS_MAX {
                let why = format!(
                    "a number of {} characters is longer than the limit of {DIGITS_MAX}",
                    t.end - t.start
                );
                return Err(self.unsupported(t.start, t.end, &why));
            }
        }
        let preds = self.conjunction()?;
        if let Some(rest) = self.peek(0) {
            let why = format!("unexpected {}", py_repr(self.s(rest)));
            return Err(self.unsupported(rest.start, self.text.len(), &why));
        }
        Ok(preds)
    }

    fn conjunction(&mut self) -> Res<Vec<Comparison>> {
        let mut preds = self.predicate()?;
        loop {
            let Some(t) = self.peek(0) else {
                return Ok(preds);
            };
            if self.s(t) == ")" {
                return Ok(preds);
            }
            match self.word(t).as_str() {
                "AND" => {
                    self.take()?;
                    preds.extend(self.predicate()?);
                }
                "OR" => return Err(self.or_error()),
                _ => {
                    let why = format!("unexpected {}", py_repr(self.s(t)));
                    return Err(self.unsupported_from(t.start, &why));
                }
            }
        }
    }

    fn or_error(&self) -> FilterError {
        self.unsupported(0, self.text.len(), "OR is not supported")
    }

    fn predicate(&mut self) -> Res<Vec<Comparison>> {
        let n = self.text.len();
        let t = self
            .peek(0)
            .ok_or_else(|| self.unsupported(n, n, "a predicate is missing"))?;
        let start = t.start;
        if self.s(t) == "(" {
            if self.depth == NESTING_MAX {
                let why = format!("parentheses nest deeper than the limit of {NESTING_MAX}");
                return Err(self.unsupported(start, t.end, &why));
            }
            self.take()?;
            self.depth += 1;
            let inner = self.conjunction()?;
            self.depth -= 1;
            match self.peek(0) {
                Some(c) if self.s(c) == ")" => {}
                _ => return Err(self.unsupported(start, n, "a parenthesis is not closed")),
            }
            self.take()?;
            return Ok(inner);
        }
        let w = self.word(t);
        if w == "NOT" || w == "OR" {
            return Err(self.unsupported_from(start, &format!("{w} is not supported")));
        }
        match self.column_ref()? {
            None => self.mirrored(start),
            Some(col) => self.after_column(start, col),
        }
    }

    /// `constant op column`, as `column op' constant`.
    fn mirrored(&mut self, start: usize) -> Res<Vec<Comparison>> {
        let value = self.value(start)?;
        let op_t = self.take()?;
        if op_t.kind != Kind::Op {
            let why = format!("expected a comparison, found {}", py_repr(self.s(op_t)));
            return Err(self.unsupported_from(start, &why));
        }
        let Some(col) = self.column_ref()? else {
            return Err(self.unsupported_from(start, "a comparison needs a column on one side"));
        };
        let op = Op::of_symbol(self.s(op_t)).mirrored();
        self.end_of_predicate(start)?;
        Ok(vec![self.comparison(start, col, op, vec![value])])
    }

    fn after_column(&mut self, start: usize, col: String) -> Res<Vec<Comparison>> {
        let Some(t) = self.peek(0) else {
            let n = self.text.len();
            return Err(self.unsupported(start, n, "a column alone is not a predicate"));
        };
        let w = self.word(t);
        if w == "BETWEEN" {
            self.take()?;
            let lo = self.value(start)?;
            let and_t = self.take()?;
            if self.word(and_t) != "AND" {
                return Err(self.unsupported_from(start, "BETWEEN needs AND"));
            }
            let hi = self.value(start)?;
            self.end_of_predicate(start)?;
            return Ok(vec![self.comparison(start, col, Op::Between, vec![lo, hi])]);
        }
        if t.kind == Kind::Op {
            self.take()?;
            if let Some(nxt) = self.peek(0) {
                if nxt.kind == Kind::Ident && !self.is_keyword(nxt) {
                    let why = "comparing two columns is not supported";
                    return Err(self.unsupported_from(start, why));
                }
            }
            let value = self.value(start)?;
            self.end_of_predicate(start)?;
            let op = Op::of_symbol(self.s(t));
            return Ok(vec![self.comparison(start, col, op, vec![value])]);
        }
        let why = match w.as_str() {
            "IN" | "LIKE" | "IS" | "NOT" => format!("{w} is not supported"),
            _ if t.kind == Kind::Punct && "+-*/%|".contains(self.s(t)) => {
                "arithmetic on a column is not supported".to_string()
            }
            _ => format!("unexpected {} after column {col}", py_repr(self.s(t))),
        };
        Err(self.unsupported_from(start, &why))
    }

    fn comparison(
        &self,
        start: usize,
        column: String,
        op: Op,
        values: Vec<Constant>,
    ) -> Comparison {
        let end = if self.i > 0 {
            self.toks[self.i - 1].end
        } else {
            0
        };
        Comparison {
            column,
            op,
            values,
            text: trim(&self.text[start..end]).to_string(),
        }
    }

    fn end_of_predicate(&self, start: usize) -> Res<()> {
        let Some(t) = self.peek(0) else {
            return Ok(());
        };
        match self.word(t).as_str() {
            "AND" => Ok(()),
            "OR" => Err(self.or_error()),
            _ if self.s(t) == ")" => Ok(()),
            _ => {
                let why = format!("unexpected {}", py_repr(self.s(t)));
                Err(self.unsupported_from(start, &why))
            }
        }
    }

    fn column_ref(&mut self) -> Res<Option<String>> {
        let Some(t) = self.peek(0) else {
            return Ok(None);
        };
        if t.kind != Kind::Ident || self.is_keyword(t) {
            return Ok(None);
        }
        if self.peek(1).is_some_and(|n| self.s(n) == "(") {
            let why = format!("function {}() is not supported", self.s(t));
            return Err(self.unsupported_from(t.start, &why));
        }
        self.take()?;
        Ok(Some(self.s(t).to_ascii_lowercase()))
    }

    /// A constant: terms joined by `+` and `-`.
    fn value(&mut self, start: usize) -> Res<Constant> {
        let mut v = self.term(start)?;
        while let Some(t) = self.peek(0) {
            let minus = match self.s(t) {
                "+" => false,
                "-" => true,
                _ => break,
            };
            self.take()?;
            let w = self.term(start)?;
            v = self.add(start, v, w, minus)?;
        }
        Ok(v)
    }

    fn add(&self, start: usize, a: Constant, b: Constant, minus: bool) -> Res<Constant> {
        let a = match (a, &b) {
            (Constant::Str(s), Constant::Interval(..)) => Constant::Date(self.date(start, &s)?),
            (a, _) => a,
        };
        match (a, b) {
            (Constant::Date(d), Constant::Interval(n, unit)) => {
                let n = if minus { n.saturating_neg() } else { n };
                add_interval(d, n, unit).map(Constant::Date).ok_or_else(|| {
                    self.unsupported_from(start, "the date is outside the years 1 to 9999")
                })
            }
            (Constant::Number(x), Constant::Number(y)) => Ok(Constant::Number(x.add(&y, minus))),
            _ => {
                Err(self
                    .unsupported_from(start, "only numbers add to numbers and intervals to dates"))
            }
        }
    }

    fn date(&self, start: usize, text: &str) -> Res<i32> {
        parse_date(text).ok_or_else(|| {
            let why = format!("{} is not a yyyy-mm-dd date", py_repr(text));
            self.unsupported_from(start, &why)
        })
    }

    fn term(&mut self, start: usize) -> Res<Constant> {
        let t = self.take()?;
        let s = self.s(t);
        if t.kind == Kind::Num {
            return Ok(Constant::Number(number(s)));
        }
        if s == "-" {
            let n = self.take()?;
            if n.kind != Kind::Num {
                return Err(self.unsupported_from(start, "a minus sign needs a number"));
            }
            return Ok(Constant::Number(number(self.s(n)).negated()));
        }
        if t.kind == Kind::Str {
            return Ok(Constant::Str(s[1..s.len() - 1].replace("''", "'")));
        }
        match self.word(t).as_str() {
            "DATE" => {
                let d = self.take()?;
                if d.kind != Kind::Str {
                    return Err(self.unsupported_from(start, "DATE needs a 'yyyy-mm-dd' string"));
                }
                let text = self.s(d);
                Ok(Constant::Date(self.date(start, &text[1..text.len() - 1])?))
            }
            "INTERVAL" => self.interval(start),
            _ if t.kind == Kind::Ident && !self.is_keyword(t) => {
                let why = format!("{s} is not a constant (arithmetic on columns is not supported)");
                Err(self.unsupported_from(start, &why))
            }
            _ => {
                let why = format!("unexpected {} where a constant belongs", py_repr(s));
                Err(self.unsupported_from(start, &why))
            }
        }
    }

    /// `INTERVAL 'n' unit` (after the INTERVAL).
    fn interval(&mut self, start: usize) -> Res<Constant> {
        let s = self.take()?;
        let unit_t = self.take()?;
        if s.kind != Kind::Str && s.kind != Kind::Num {
            return Err(self.unsupported_from(start, "INTERVAL needs a count"));
        }
        let unit = match self.word(unit_t).as_str() {
            "DAY" | "DAYS" | "MONTH" | "MONTHS" | "YEAR" | "YEARS" => Unit::parse(self.s(unit_t)),
            _ => None,
        };
        let Some(unit) = unit else {
            let why = format!(
                "INTERVAL unit {} is not DAY, MONTH or YEAR",
                py_repr(self.s(unit_t))
            );
            return Err(self.unsupported_from(start, &why));
        };
        let text = self.s(s);
        let count = python_int(trim(text.trim_matches('\''))).ok_or_else(|| {
            self.unsupported_from(start, &format!("INTERVAL count {text} is not an integer"))
        })?;
        Ok(Constant::Interval(count, unit))
    }
}

fn number(text: &str) -> Num {
    Num::parse(text).expect("the lexer's numbers are decimal numbers")
}

/// An integer as Python's `int()` reads text: a sign, then digits with single
/// underscores between them; saturated at the i64 range.
fn python_int(text: &str) -> Option<i64> {
    let (neg, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let ok = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    if !ok {
        return None;
    }
    let v = digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .fold(0i64, |v, b| {
            v.saturating_mul(10).saturating_add(i64::from(b - b'0'))
        });
    Some(if neg { -v } else { v })
}
