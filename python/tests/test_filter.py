"""csx.filter: filter strings parsed and bound by csx-data (through the native module),
with the errors and values the package has always given."""

import datetime as dt
from fractions import Fraction

import pytest

import csx
import csx.filter as cf
from csx.arrow import Column, TableSchema

SCHEMA = TableSchema(
    "t",
    0,
    [Column("d", "decimal", scale=2), Column("s", "date"), Column("i", "int32"), Column("c", "dict", entries=3)],
    "/t",
)
DICTS = {"c": ["AIR", "MAIL", "SHIP"]}
I32 = (-(1 << 31), (1 << 31) - 1)
I64 = (-(1 << 63), (1 << 63) - 1)


def ranges(text):
    return [(r.column, r.lo, r.hi, r.excluded, r.values) for r in cf.bind(cf.parse(text), SCHEMA, DICTS)]


def test_parse_gives_comparisons_with_exact_constants():
    got = cf.parse("d between 0.06 - 0.01 and 0.06 + 0.01 and 24 > I and c == 'it''s' and s <> date '1994-W01-1'")
    assert [(c.column, c.op, c.value) for c in got] == [
        ("d", "between", (Fraction(5, 100), Fraction(7, 100))),
        ("i", "<", Fraction(24)),
        ("c", "=", "it's"),
        ("s", "!=", dt.date(1994, 1, 3)),
    ]
    assert got[1].text == "24 > I"
    assert cf.parse("s = interval '2' days")[0].value == ("interval", 2, "DAY")
    assert cf.parse("   ") == []
    with pytest.raises(TypeError, match="filter must be a str"):
        cf.parse(3)


@pytest.mark.parametrize(
    "text, lo, hi",
    [
        ("d >= 0.055", 6, I64[1]),
        ("d > 0.055", 6, I64[1]),
        ("d <= 0.055", I64[0], 5),
        ("d < 0.055", I64[0], 5),
        ("d <= -0.055", I64[0], -6),
        ("d >= -0.055", -5, I64[1]),
        ("d between 0.055 and 0.075", 6, 7),
        ("d < 1000000000000000000000000", I64[0], I64[1]),
    ],
)
def test_decimals_past_the_scale_round_per_operator(text, lo, hi):
    assert ranges(text) == [("d", lo, hi, (), None)]


def test_decimals_past_the_scale_never_equal():
    assert cf.bind(cf.parse("d = 0.055"), SCHEMA, DICTS)[0].empty
    assert ranges("d != 0.055") == [("d", *I64, (), None)]
    assert ranges("d != 0.05") == [("d", *I64, (5,), None)]


@pytest.mark.parametrize(
    "text, lo, hi, excluded",
    [
        ("c < 'zzz'", 0, 2, ()),
        ("c <= 'B'", 0, 0, ()),
        ("c > 'B'", 1, 2, ()),
        ("c >= 'MAIL'", 1, 2, ()),
        ("c != 'MAIL'", 0, 2, (1,)),
        ("c != 'RAIL'", 0, 2, ()),
        ("'RAIL' < c", 2, 2, ()),
    ],
)
def test_strings_absent_from_the_dictionary_order_between_its_entries(text, lo, hi, excluded):
    assert ranges(text) == [("c", lo, hi, excluded, None)]


def test_comparisons_built_by_callers_bind_too():
    C = cf.Comparison
    got = cf.bind(
        [C("i", "in", (Fraction(1), Fraction(7, 2), Fraction(1 << 40), Fraction(3)), "i in"), C("i", "<", Fraction(10, 3), "i <")],
        SCHEMA,
        DICTS,
    )
    assert [(r.lo, r.hi, r.values) for r in got] == [(I32[0], 3, (1, 3))]
    got = cf.bind([C("c", "in", ("SHIP", "TRUCK", "AIR"), "c in"), C("s", ">", dt.date(1970, 1, 2), "s >")], SCHEMA, DICTS)
    assert [(r.column, r.lo, r.hi, r.values) for r in got] == [("c", 0, (1 << 32) - 1, (0, 2)), ("s", 2, I32[1], None)]
    # 1/3 has no finite decimal: it still rounds exactly at every scale.
    assert [(r.lo, r.hi) for r in cf.bind([C("d", ">", Fraction(1, 3), "d >")], SCHEMA, DICTS)] == [(34, I64[1])]
    with pytest.raises(csx.UnsupportedFilterError, match="column i is int32; compare it with a number"):
        cf.bind([C("i", "<", 3, "i < 3")], SCHEMA, DICTS)
    with pytest.raises(csx.UnsupportedFilterError, match="column s is a date; compare it with DATE"):
        cf.bind([C("s", "<", dt.datetime(1994, 1, 1), "s < dt")], SCHEMA, DICTS)
    with pytest.raises(ValueError, match="comparison operator '==' is not one of"):
        cf.bind([C("i", "==", Fraction(3), "i == 3")], SCHEMA, DICTS)


@pytest.mark.parametrize(
    "text, part, message",
    [
        ("i < 24 or d > 0.05", "i < 24 or d > 0.05", "OR is not supported"),
        ("i < 24 and d in (0.05, 0.06)", "d in (0.05, 0.06)", "IN is not supported"),
        ("i between 1 and 2 and i ~ 3", "~", "unexpected character '~'"),
        ("i = 1 and", "i = 1 and", "a predicate is missing"),
        ("(i = 1", "(i = 1", "a parenthesis is not closed"),
        ("s = date '1994-02-30'", "s = date '1994-02-30'", "'1994-02-30' is not a yyyy-mm-dd date"),
        ("s > date '9999-12-31' + interval '1' day", "s > date '9999-12-31' + interval '1' day", "outside the years 1 to 9999"),
        ("s > date '0001-01-31' - interval '1' month", "s > date '0001-01-31' - interval '1' month", "outside the years"),
        ("i < ٣", "٣", "unexpected character '٣'"),
    ],
)
def test_unsupported_parts_are_named(text, part, message):
    with pytest.raises(csx.UnsupportedFilterError) as e:
        cf.parse(text)
    assert e.value.part == part
    assert message in str(e.value) and str(e.value).startswith(f"unsupported filter part {part!r}: ")
    assert isinstance(e.value, ValueError)


def test_binding_errors_name_the_comparison():
    with pytest.raises(csx.QueryError) as e:
        ranges("i < 3 and nosuch > 3")
    assert str(e.value) == "filter 'nosuch > 3': table t has no column 'nosuch'; columns: d, s, i, c"
    assert not isinstance(e.value, csx.UnsupportedFilterError)
    with pytest.raises(csx.UnsupportedFilterError) as e:
        ranges("s > 'May 1st'")
    assert str(e.value) == "s > 'May 1st': 'May 1st' is not a yyyy-mm-dd date" and e.value.part == "s > 'May 1st'"
    with pytest.raises(csx.UnsupportedFilterError, match="column c holds strings"):
        ranges("c = 3")


def test_hostile_filters_are_typed_errors_naming_the_limit():
    deep = "(" * 100_000 + "i = 1" + ")" * 100_000
    with pytest.raises(csx.UnsupportedFilterError, match="nest deeper than the limit of 100"):
        cf.parse(deep)
    with pytest.raises(csx.UnsupportedFilterError, match="longer than the limit of 1000") as e:
        cf.parse("i < " + "9" * 5000)
    assert e.value.part == "9" * 5000
