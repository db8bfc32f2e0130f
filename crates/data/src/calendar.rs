//! Proleptic Gregorian dates as days since 1970-01-01 (Arrow's date32, DuckDB's DATE),
//! by Howard Hinnant's days-from-civil algorithm, and the `yyyymmdd` integers SSB keys
//! its DATE table with.

/// Days since 1970-01-01 of `y-m-d`.
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i32 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = (y - era * 400) as u32;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe as i32 - 719_468
}

/// `(y, m, d)` of days since 1970-01-01.
pub fn civil_from_days(z: i32) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = (z - era * 146_097) as u32;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe as i32 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `yyyymmdd` of days since 1970-01-01.
pub fn yyyymmdd(days: i32) -> i32 {
    let (y, m, d) = civil_from_days(days);
    y * 10_000 + m as i32 * 100 + d as i32
}

/// Days since 1970-01-01 of a `yyyymmdd` integer.
pub fn days_of_yyyymmdd(v: i32) -> i32 {
    days_from_civil(v / 10_000, (v / 100 % 100) as u32, (v % 100) as u32)
}

/// Day of the week, 0 = Sunday (1970-01-01 was a Thursday).
pub fn weekday(days: i32) -> u32 {
    (days + 4).rem_euclid(7) as u32
}

pub fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

pub fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `yyyy-mm-dd` into days since 1970-01-01.
pub fn parse_iso(s: &str) -> Option<i32> {
    let mut parts = s.trim().split('-');
    let y: i32 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

/// `yyyy-mm-dd` of days since 1970-01-01.
pub fn iso(days: i32) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1992, 1, 1), 8035);
        assert_eq!(days_from_civil(1998, 12, 31), 10591);
        assert_eq!(weekday(days_from_civil(1992, 1, 1)), 3); // a Wednesday
        assert_eq!(yyyymmdd(days_from_civil(1995, 6, 17)), 19950617);
        assert_eq!(parse_iso("1994-01-01"), Some(days_from_civil(1994, 1, 1)));
        assert_eq!(parse_iso("1994-02-30"), None);
        assert_eq!(iso(8035), "1992-01-01");
    }

    #[test]
    fn round_trips_over_the_benchmarks_range() {
        for z in 7000..12000 {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
            assert_eq!(days_of_yyyymmdd(yyyymmdd(z)), z);
        }
    }
}
