//! The constants of a filter: exact decimal numbers of any size, dates (years 1 to
//! 9999, as Python's `datetime.date`), strings and intervals, with the arithmetic the
//! grammar allows (numbers plus numbers, dates plus intervals).

use crate::calendar::{civil_from_days, days_from_civil, days_in_month};

/// An exact decimal number: `digits` (most significant first, no leading zeros; empty
/// for zero) divided by `10^frac`, negative when `neg`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Num {
    neg: bool,
    digits: Vec<u8>,
    frac: usize,
}

/// Magnitudes past this are outside every column's domain: floors and ceilings
/// saturate here (the sign and the comparison with any domain bound stay right).
const SATURATE: i128 = 1 << 100;

impl Num {
    /// Parses `[-]digits[.digits]`, `[-].digits` or `[-]digits.`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Num> {
        let (neg, t) = text.strip_prefix('-').map_or((false, text), |r| (true, r));
        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
        let ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !ok(int) || !ok(frac) {
            return None;
        }
        let digits = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
        Some(Num::new(neg, digits, frac.len()))
    }

    /// The integer `v`.
    pub fn int(v: i128) -> Num {
        Num::new(
            v < 0,
            v.unsigned_abs()
                .to_string()
                .bytes()
                .map(|b| b - b'0')
                .collect(),
            0,
        )
    }

    fn new(neg: bool, mut digits: Vec<u8>, frac: usize) -> Num {
        let lead = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..lead);
        Num {
            neg: neg && !digits.is_empty(),
            digits,
            frac,
        }
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// The magnitude's digits with `frac` fraction digits (`frac >= self.frac`).
    fn widened(&self, frac: usize) -> Vec<u8> {
        let mut d = self.digits.clone();
        d.resize(d.len() + frac - self.frac, 0);
        d
    }

    /// `self + other`, or `self - other` when `minus`.
    pub fn add(&self, other: &Num, minus: bool) -> Num {
        let frac = self.frac.max(other.frac);
        let (mut a, mut b) = (self.widened(frac), other.widened(frac));
        let len = a.len().max(b.len());
        for d in [&mut a, &mut b] {
            d.splice(0..0, std::iter::repeat_n(0, len - d.len()));
        }
        let b_neg = other.neg != minus && !other.is_zero();
        if self.neg == b_neg {
            return Num::new(self.neg, add_digits(&a, &b), frac);
        }
        match cmp_digits(&a, &b) {
            std::cmp::Ordering::Less => Num::new(b_neg, sub_digits(&b, &a), frac),
            _ => Num::new(self.neg, sub_digits(&a, &b), frac),
        }
    }

    /// `-self`.
    pub fn negated(&self) -> Num {
        Num::new(!self.neg, self.digits.clone(), self.frac)
    }

    /// `self * 10^places`.
    pub fn shifted(&self, places: u32) -> Num {
        let places = places as usize;
        if places <= self.frac {
            return Num::new(self.neg, self.digits.clone(), self.frac - places);
        }
        Num::new(self.neg, self.widened(places), 0)
    }

    /// Whether the number is a whole number.
    pub fn is_integer(&self) -> bool {
        let cut = self.digits.len().saturating_sub(self.frac);
        self.digits[cut..].iter().all(|&d| d == 0)
    }

    /// The magnitude's whole part, saturated at [`SATURATE`].
    fn whole(&self) -> i128 {
        let cut = self.digits.len().saturating_sub(self.frac);
        let mut v: i128 = 0;
        for &d in &self.digits[..cut] {
            v = v * 10 + i128::from(d);
            if v >= SATURATE {
                return SATURATE;
            }
        }
        v
    }

    /// The largest integer at most the number (saturated far outside every domain).
    pub fn floor(&self) -> i128 {
        let w = self.whole();
        match (self.neg, self.is_integer()) {
            (false, _) => w,
            (true, true) => -w,
            (true, false) => -w - 1,
        }
    }

    /// The smallest integer at least the number (saturated far outside every domain).
    pub fn ceil(&self) -> i128 {
        -self.negated().floor()
    }

    /// Whether the number lies in `lo ..= hi`.
    pub fn within(&self, lo: i128, hi: i128) -> bool {
        self.is_integer() && lo <= self.floor() && self.floor() <= hi
    }

    /// The number as decimal text, `-12.3400` (every fraction digit kept; what Python's
    /// `Fraction` parses back exactly).
    pub fn text(&self) -> String {
        let mut d: String = self.digits.iter().map(|&x| char::from(b'0' + x)).collect();
        if d.len() <= self.frac {
            d = format!("{}{d}", "0".repeat(self.frac + 1 - d.len()));
        }
        if self.frac > 0 {
            d.insert(d.len() - self.frac, '.');
        }
        if self.neg {
            d.insert(0, '-');
        }
        d
    }
}

/// Compares two magnitudes of equal length.
fn cmp_digits(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.cmp(b)
}

/// The digits of `a + b` (equal lengths).
fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; a.len() + 1];
    let mut carry = 0;
    for i in (0..a.len()).rev() {
        let s = a[i] + b[i] + carry;
        out[i + 1] = s % 10;
        carry = s / 10;
    }
    out[0] = carry;
    out
}

/// The digits of `a - b` (equal lengths, `a >= b`).
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; a.len()];
    let mut borrow = 0;
    for i in (0..a.len()).rev() {
        let (x, y) = (a[i], b[i] + borrow);
        (out[i], borrow) = if x >= y { (x - y, 0) } else { (x + 10 - y, 1) };
    }
    out
}

/// An interval's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Day,
    Month,
    Year,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Day => "DAY",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// `DAY`, `DAYS`, `MONTH`, ... in any case.
    pub fn parse(word: &str) -> Option<Unit> {
        let w = word.to_ascii_uppercase();
        match w.strip_suffix('S').unwrap_or(&w) {
            "DAY" => Some(Unit::Day),
            "MONTH" => Some(Unit::Month),
            "YEAR" => Some(Unit::Year),
            _ => None,
        }
    }
}

/// A constant of a filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constant {
    Number(Num),
    Str(String),
    /// Days since 1970-01-01, within years 1 to 9999.
    Date(i32),
    /// `INTERVAL 'count' unit` (the count saturates at the i64 range).
    Interval(i64, Unit),
    /// Something that is none of these (a value handed in from elsewhere), named for
    /// errors.
    Other(String),
}

/// Days since 1970-01-01 of 0001-01-01 and 9999-12-31 (the dates a filter holds).
pub const DATE_MIN: i32 = -719_162;
pub const DATE_MAX: i32 = 2_932_896;

/// Days since 1970-01-01 of `y-m-d`, `None` outside years 1 to 9999 or the month.
pub fn date(y: i64, m: i64, d: i64) -> Option<i32> {
    if !(1..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 {
        return None;
    }
    let (y, m) = (y as i32, m as u32);
    (d <= i64::from(days_in_month(y, m))).then(|| days_from_civil(y, m, d as u32))
}

/// An ISO 8601 date as Python's `date.fromisoformat` reads one (after trimming):
/// `yyyy-mm-dd`, `yyyymmdd`, or a week date `yyyy-Www[-d]` / `yyyyWww[d]`.
pub fn parse_date(text: &str) -> Option<i32> {
    let s = super::trim(text).as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |v, &b| v * 10 + i64::from(b - b'0')))
    };
    let year = num(0..4)?;
    match s.len() {
        10 if s[4] == b'-' && s[7] == b'-' => date(year, num(5..7)?, num(8..10)?),
        8 if s[4].is_ascii_digit() => date(year, num(4..6)?, num(6..8)?),
        _ => week_date(s, year, num),
    }
}

fn week_date(
    s: &[u8],
    year: i64,
    num: impl Fn(std::ops::Range<usize>) -> Option<i64>,
) -> Option<i32> {
    let (week, day) = match (s.len(), s.get(4..6)?) {
        (8, b"-W") => (num(6..8)?, 1),
        (10, b"-W") if s[8] == b'-' => (num(6..8)?, num(9..10)?),
        (7, [b'W', _]) => (num(5..7)?, 1),
        (8, [b'W', _]) => (num(5..7)?, num(7..8)?),
        _ => return None,
    };
    let jan4 = date(year, 1, 4)?;
    // Monday of ISO week 1: the week holding January 4th.
    let monday = jan4 - (crate::calendar::weekday(jan4) as i32 + 6) % 7;
    let weeks = if long_iso_year(year) { 53 } else { 52 };
    if !(1..=weeks).contains(&week) || !(1..=7).contains(&day) {
        return None;
    }
    let days = monday + (week as i32 - 1) * 7 + day as i32 - 1;
    (DATE_MIN..=DATE_MAX).contains(&days).then_some(days)
}

/// Whether ISO year `y` has 53 weeks (it starts on a Thursday, or a Wednesday in a
/// leap year).
fn long_iso_year(y: i64) -> bool {
    let Some(jan1) = date(y, 1, 1) else {
        return false;
    };
    let wd = crate::calendar::weekday(jan1);
    wd == 4 || (wd == 3 && crate::calendar::is_leap(y as i32))
}

/// `days + count unit`, `None` outside years 1 to 9999. Months keep the day of the
/// month, or the month's last day when it is shorter.
pub fn add_interval(days: i32, count: i64, unit: Unit) -> Option<i32> {
    let months = match unit {
        Unit::Day => {
            let d = i64::from(days).checked_add(count)?;
            return (i64::from(DATE_MIN)..=i64::from(DATE_MAX))
                .contains(&d)
                .then_some(d as i32);
        }
        Unit::Month => count,
        Unit::Year => count.checked_mul(12)?,
    };
    let (y, m, d) = civil_from_days(days);
    let m0 = (i64::from(m) - 1).checked_add(months)?;
    let (y, m) = (i64::from(y) + m0.div_euclid(12), m0.rem_euclid(12) + 1);
    if !(1..=9999).contains(&y) {
        return None;
    }
    let last = i64::from(days_in_month(y as i32, m as u32));
    date(y, m, i64::from(d).min(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(t: &str) -> Num {
        Num::parse(t).unwrap()
    }

    #[test]
    fn decimal_arithmetic_is_exact() {
        assert_eq!(n("0.06").add(&n("0.01"), true).text(), "0.05");
        assert_eq!(n("0.06").add(&n("0.07"), true).text(), "-0.01");
        assert_eq!(n("-1.5").add(&n("2"), false).text(), "0.5");
        assert_eq!(n("99.9").add(&n(".1"), false).text(), "100.0");
        assert_eq!(n("0.055").shifted(2).floor(), 5);
        assert_eq!(n("0.055").shifted(2).ceil(), 6);
        assert_eq!(n("-0.055").shifted(2).floor(), -6);
        assert_eq!(n("-0.055").shifted(2).ceil(), -5);
        assert!(n("12.000").is_integer() && !n("12.001").is_integer());
        assert_eq!(n("1".repeat(60).as_str()).floor(), SATURATE);
        assert_eq!(n("1".repeat(60).as_str()).negated().ceil(), -SATURATE);
        assert_eq!(Num::int(-42).text(), "-42");
        assert!(Num::parse(".").is_none() && Num::parse("1e5").is_none());
    }

    #[test]
    fn dates_as_python_reads_them() {
        assert_eq!(parse_date("1994-01-01"), Some(8766));
        assert_eq!(parse_date(" 19940101 "), Some(8766));
        assert_eq!(parse_date("1994-W01-1"), parse_date("1994-01-03"));
        assert_eq!(parse_date("2020-W53-7"), parse_date("2021-01-03"));
        for bad in [
            "1994-W53-1",
            "1994-1-1",
            "0000-01-01",
            "1994-02-29",
            "1994-001",
        ] {
            assert_eq!(parse_date(bad), None, "{bad}");
        }
        let d = parse_date("2000-01-31").unwrap();
        assert_eq!(add_interval(d, 1, Unit::Month), parse_date("2000-02-29"));
        assert_eq!(add_interval(d, -1, Unit::Year), parse_date("1999-01-31"));
        assert_eq!(add_interval(DATE_MAX, 1, Unit::Day), None);
    }
}
