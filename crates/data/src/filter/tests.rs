use std::collections::HashMap;

use super::*;
use crate::columnar::{ColumnSchema, ColumnType, Schema};

fn schema() -> Schema {
    Schema::new(
        "t",
        0,
        vec![
            ColumnSchema::decimal("d", 2),
            ColumnSchema::new("s", ColumnType::Date),
            ColumnSchema::new("i", ColumnType::Int32),
            ColumnSchema::new("c", ColumnType::Dict),
        ],
    )
}

fn dicts() -> HashMap<String, Vec<String>> {
    let entries = ["AIR", "MAIL", "SHIP"].map(String::from).to_vec();
    HashMap::from([("c".to_string(), entries)])
}

/// (column, lo, hi, excluded) of a range.
type Bounds = (String, i128, i128, Vec<i128>);

/// The bounds of each range, or the error's message.
fn bound_text(text: &str) -> Result<Vec<Bounds>, String> {
    let cmps = parse(text).map_err(|e| e.to_string())?;
    let ranges = bind(&cmps, &schema(), &dicts()).map_err(|e| e.to_string())?;
    Ok(ranges
        .into_iter()
        .map(|r| (r.column, r.lo, r.hi, r.excluded))
        .collect())
}

const I32: (i128, i128) = (i32::MIN as i128, i32::MAX as i128);

#[test]
fn decimals_with_more_places_than_the_scale_round_per_operator() {
    let r = bound_text("d > 0.055 and d <= 0.07 and s < '1970-01-11' and i != 3 and i >= -2");
    assert_eq!(
        r.unwrap(),
        vec![
            ("d".into(), 6, 7, vec![]),
            ("s".into(), I32.0, 9, vec![]),
            ("i".into(), -2, I32.1, vec![3]),
        ]
    );
    let (lo, hi) = (i64::MIN as i128, i64::MAX as i128);
    assert_eq!(bound_text("d >= 0.055").unwrap()[0].1, 6);
    assert_eq!(bound_text("d < 0.055").unwrap()[0].2, 5);
    assert_eq!(bound_text("d <= -0.055").unwrap()[0].2, -6);
    assert_eq!(bound_text("d > -0.055").unwrap()[0].1, -5);
    assert_eq!(
        bound_text("d != 0.055").unwrap()[0],
        ("d".into(), lo, hi, vec![])
    );
    let cmps = parse("d = 0.055").unwrap();
    assert!(bind(&cmps, &schema(), &dicts()).unwrap()[0].is_empty());
    let sum = bound_text("d between 0.06 - 0.01 and 0.06 + 0.01").unwrap();
    assert_eq!(sum[0], ("d".into(), 5, 7, vec![]));
}

#[test]
fn strings_absent_from_the_dictionary_order_against_its_entries() {
    let codes = |t: &str| bound_text(t).map(|r| (r[0].1, r[0].2, r[0].3.clone()));
    assert_eq!(codes("c < 'zzz'").unwrap(), (0, 2, vec![]));
    assert_eq!(codes("c > 'B'").unwrap(), (1, 2, vec![]));
    assert_eq!(codes("c <= 'MAIL'").unwrap(), (0, 1, vec![]));
    assert_eq!(codes("c >= 'MAIL'").unwrap(), (1, 2, vec![]));
    assert_eq!(codes("c != 'MAIL'").unwrap(), (0, 2, vec![1]));
    assert_eq!(codes("c != 'RAIL'").unwrap(), (0, 2, vec![]));
    assert_eq!(codes("'A' > c").unwrap(), (0, -1, vec![]));
    let cmps = parse("c = 'TRUCK'").unwrap();
    assert!(bind(&cmps, &schema(), &dicts()).unwrap()[0].is_empty());
}

#[test]
fn dates_intervals_and_mirrors() {
    let c = parse("s >= date '2000-01-31' + interval '1' month").unwrap();
    let want = value::parse_date("2000-02-29").unwrap();
    assert_eq!(c[0].values, vec![Constant::Date(want)]);
    assert_eq!(c[0].text, "s >= date '2000-01-31' + interval '1' month");
    let m = parse("24 > I").unwrap();
    assert_eq!((m[0].column.as_str(), m[0].op), ("i", Op::Lt));
    let q = parse("(i = 1 AND (d <> 2)) and c == 'it''s'").unwrap();
    assert_eq!(q.len(), 3);
    assert_eq!(q[2].values, vec![Constant::Str("it's".into())]);
    assert!(parse("  ").unwrap().is_empty());
}

#[test]
fn unsupported_parts_are_named_with_their_offset() {
    let err = |t: &str| parse(t).unwrap_err();
    let cases = [
        (
            "a < 24 or b > 0.05",
            "a < 24 or b > 0.05",
            "OR is not supported",
        ),
        (
            "a < 24 and b in (1, 2)",
            "b in (1, 2)",
            "IN is not supported",
        ),
        ("a < b", "a < b", "comparing two columns is not supported"),
        (
            "year(a) = 1994",
            "year(a) = 1994",
            "function year() is not supported",
        ),
        (
            "a between 1 and 3 and b ~ 2",
            "~",
            "unexpected character '~'",
        ),
        ("a = 1 and", "a = 1 and", "a predicate is missing"),
        ("(a = 1", "(a = 1", "a parenthesis is not closed"),
        (
            "a = date '1994-13-01'",
            "a = date '1994-13-01'",
            "'1994-13-01' is not a yyyy-mm-dd date",
        ),
        (
            "a = interval '1' week",
            "a = interval '1' week",
            "INTERVAL unit 'week' is not DAY, MONTH or YEAR",
        ),
        (
            "a = 1 + date '1994-01-01'",
            "a = 1 + date '1994-01-01'",
            "only numbers add",
        ),
        (
            "a = date '9999-12-31' + interval '1' day",
            "a = date '9999-12-31' + interval '1' day",
            "outside the years 1 to 9999",
        ),
    ];
    for (text, part, why) in cases {
        let e = err(text);
        assert_eq!(e.part(), part, "{text}");
        assert!(e.to_string().contains(why), "{text}: {e}");
        let FilterError::Unsupported { at, .. } = e else {
            panic!("{text}: {e:?}");
        };
        assert_eq!(&text[at..at + part.len()], part);
    }
}

#[test]
fn binding_errors_name_the_comparison_and_column() {
    let e = bound_text("i < 3 and nosuch > 3").unwrap_err();
    assert_eq!(
        e,
        "filter 'nosuch > 3': table t has no column 'nosuch'; columns: d, s, i, c"
    );
    let e = bound_text("s > 5").unwrap_err();
    assert!(
        e.contains("column s is a date; compare it with DATE"),
        "{e}"
    );
    let e = bound_text("s > 'May 1st'").unwrap_err();
    assert_eq!(e, "s > 'May 1st': 'May 1st' is not a yyyy-mm-dd date");
    let e = bound_text("c = 3").unwrap_err();
    assert!(e.contains("column c holds strings"), "{e}");
    let e = bound_text("i = 'x'").unwrap_err();
    assert!(
        e.contains("column i is int32; compare it with a number"),
        "{e}"
    );
}

#[test]
fn python_reprs() {
    assert_eq!(py_repr("a'b"), "\"a'b\"");
    assert_eq!(py_repr("a'\"b"), "'a\\'\"b'");
    assert_eq!(py_repr("\u{1c}\té\u{2028}"), "'\\x1c\\té\\u2028'");
}

#[test]
fn deep_nesting_and_long_numbers_are_errors_naming_the_limit() {
    let deep = format!("{}i = 1{}", "(".repeat(100_000), ")".repeat(100_000));
    let e = parse(&deep).unwrap_err().to_string();
    assert!(e.contains("nest deeper than the limit of 100"), "{e}");
    let ok = format!("{}i = 1{}", "(".repeat(100), ")".repeat(100));
    assert_eq!(parse(&ok).unwrap().len(), 1);
    let long = format!("i < {}", "9".repeat(1001));
    let e = parse(&long).unwrap_err();
    assert!(e
        .to_string()
        .contains("a number of 1001 characters is longer than the limit of 1000"));
    assert_eq!(e.part().len(), 1001);
    assert!(parse(&format!("i < {}", "9".repeat(1000))).is_ok());
}
