//! Filter strings: the one parser and binder of the conjunctions a device scan
//! evaluates (the Python package's `csx.filter` calls these through its native module).
//!
//! A filter is a conjunction (`AND`) of comparisons between a column and a constant:
//!
//! ```text
//! l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR
//! AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 AND l_quantity < 24
//! ```
//!
//! Comparisons: `=`, `==`, `!=`, `<>`, `<`, `<=`, `>`, `>=` and `BETWEEN a AND b`
//! (inclusive), with the column on the left (or on the right, which is mirrored).
//! Constants: integers, decimals, `'strings'` (`''` is a quote), `DATE 'yyyy-mm-dd'`, a
//! date plus or minus `INTERVAL 'n' DAY|MONTH|YEAR`, and sums and differences of
//! numbers. Parentheses group conjunctions. Anything else (`OR`, `NOT`, `IN`, `LIKE`,
//! `IS NULL`, functions, arithmetic on a column, two columns) is
//! [`FilterError::Unsupported`], naming the part and its byte offset.
//!
//! [`parse`] gives [`Comparison`]s with exact constants; [`bind`] turns them, against a
//! table's schema and its dictionaries, into one inclusive [`Range`] of stored values
//! per column (days for dates, scaled integers for decimals, codes for strings). A
//! decimal constant with more places than the column's scale rounds the way each
//! operator needs (`d >= 0.055` on two places is `d >= 6`; `d = 0.055` matches
//! nothing), and a string absent from a dictionary still orders against its entries
//! (`s < 'zzz'` keeps the codes of the entries before it).

mod bind;
mod lex;
mod parse;
mod value;

pub use bind::{bind, bound, Range};
pub use value::{parse_date, Constant, Num, Unit, DATE_MAX, DATE_MIN};

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Inclusive at both ends (two values).
    Between,
    /// Any of a list of values (built by callers; the grammar has no `IN`).
    In,
}

impl Op {
    /// The operator of a comparison token (`==` is `=`, `<>` is `!=`).
    fn of_symbol(s: &str) -> Op {
        match s {
            "=" | "==" => Op::Eq,
            "!=" | "<>" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            _ => Op::Ge,
        }
    }

    /// The operator with its sides swapped (`3 < x` is `x > 3`).
    fn mirrored(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            other => other,
        }
    }

    /// `=`, `!=`, `<`, `<=`, `>`, `>=`, `between`, `in`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Between => "between",
            Op::In => "in",
        }
    }

    /// The operator named by [`Op::name`].
    pub fn of_name(name: &str) -> Option<Op> {
        [
            Op::Eq,
            Op::Ne,
            Op::Lt,
            Op::Le,
            Op::Gt,
            Op::Ge,
            Op::Between,
            Op::In,
        ]
        .into_iter()
        .find(|o| o.name() == name)
    }
}

/// `column op values` (one value, two for `Between`, any number for `In`); `text` is
/// the comparison as written, for errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comparison {
    pub column: String,
    pub op: Op,
    pub values: Vec<Constant>,
    pub text: String,
}

/// Why a filter does not parse or bind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// A part of the filter the device cannot evaluate, or that is malformed; `at` is
    /// its byte offset in the filter.
    #[error("unsupported filter part {}: {why}; the device evaluates conjunctions (AND) of comparisons and BETWEENs of a column with constants", py_repr(.part))]
    Unsupported {
        part: String,
        why: String,
        at: usize,
    },
    /// A comparison's constant is not of its column's kind.
    #[error("unsupported filter part {}: {why}", py_repr(.part))]
    Mismatch { part: String, why: String },
    /// A date column compared with a string that is no date.
    #[error("{part}: {text} is not a yyyy-mm-dd date", text = py_repr(.text))]
    BadDate { part: String, text: String },
    /// A comparison names a column the table does not have.
    #[error("filter {}: table {table} has no column {}; columns: {known}", py_repr(.part), py_repr(.column))]
    UnknownColumn {
        part: String,
        table: String,
        column: String,
        known: String,
    },
    /// A string column's dictionary was not given to the binder.
    #[error("filter {}: no dictionary given for column {column}", py_repr(.part))]
    NoDictionary { part: String, column: String },
}

impl FilterError {
    /// The text of the filter at fault.
    pub fn part(&self) -> &str {
        match self {
            FilterError::Unsupported { part, .. }
            | FilterError::Mismatch { part, .. }
            | FilterError::BadDate { part, .. }
            | FilterError::UnknownColumn { part, .. }
            | FilterError::NoDictionary { part, .. } => part,
        }
    }
}

/// The comparisons of a filter string (none for an empty or blank one).
pub fn parse(text: &str) -> Result<Vec<Comparison>, FilterError> {
    if trim(text).is_empty() {
        return Ok(Vec::new());
    }
    parse::Parser::new(text).filter()
}

/// `s` without leading and trailing white space ([`lex::is_space`]).
fn trim(s: &str) -> &str {
    s.trim_matches(lex::is_space)
}

/// `s` quoted as Python's `repr` quotes a string (error messages name parts so).
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => out.push_str(&escape(c)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Whether Python prints `c` as itself in a repr (not a control, format, separator
/// other than the space, or private character).
fn printable(c: char) -> bool {
    let u = c as u32;
    !(c.is_control()
        || (is_space_sep(c) && c != ' ')
        || matches!(u, 0xad | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x206f | 0xfeff)
        || (0xe000..=0xf8ff).contains(&u))
}

fn is_space_sep(c: char) -> bool {
    c.is_whitespace() && !c.is_ascii_control() && c != '\u{85}'
}

fn escape(c: char) -> String {
    match c as u32 {
        u @ 0..=0xff => format!("\\x{u:02x}"),
        u @ 0x100..=0xffff => format!("\\u{u:04x}"),
        u => format!("\\U{u:08x}"),
    }
}

#[cfg(test)]
mod tests;
