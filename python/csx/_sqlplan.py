"""Planning a DuckDB statement over csx tables: which WHERE conjuncts the device
evaluates, which columns each table reference needs, and the statement DuckDB runs
over the device's streams.

The statement is parsed by DuckDB itself (``json_serialize_sql``) and the rewritten
statement is DuckDB's own rendering of the changed tree (``json_deserialize_sql``);
constant expressions (``DATE '1994-01-01' + INTERVAL '1' YEAR``, ``0.06 - 0.01``) are
evaluated by DuckDB. Nothing here parses SQL text.

DuckDB's answers are kept (a statement's parse tree by its text, an expression's
rendering and a constant's value by the expression's tree: all pure functions of their
input), so planning a statement again asks DuckDB only for the rewritten statement's
text; the planning connection is one per thread, kept.

A conjunct of a SELECT's WHERE runs on the device when it is a comparison (``= != <>
< <= > >=``), ``BETWEEN``, ``IN`` or an ``OR`` of equalities and ``IN`` lists, of one
column of one csx table reference with constants, and that reference is reached from
the FROM clause through inner or cross joins (or is the preserved side of a left or
right join), carries no sample, and the value binds exactly to the column's stored
integers. Such a conjunct leaves DuckDB's WHERE. Every other conjunct stays in DuckDB
with the reason, so nothing is dropped.
"""

from __future__ import annotations

import copy
import datetime as _dt
import decimal
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .errors import QueryError, UnsupportedFilterError
from .filter import RANGES_MAX, Comparison, bind, raw_ranges

_CMP = {
    "COMPARE_EQUAL": "=",
    "COMPARE_NOTEQUAL": "!=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}
_MIRROR = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

#: Functions a constant expression may call: operators, the interval constructors
#: DuckDB writes for INTERVAL literals, and a few pure ones. (No random(), now(), ...)
_PURE_FUNCTIONS = {
    "+", "-", "*", "/", "//", "%",
    "to_years", "to_months", "to_days", "to_weeks", "to_hours", "to_minutes",
    "to_seconds", "to_milliseconds", "to_microseconds", "to_quarters", "to_decades",
    "to_centuries", "to_millennia",
    "trunc", "abs", "round", "make_date", "date", "lower", "upper", "concat", "||",
}


@dataclass
class Conjunct:
    """One conjunct of a WHERE: its SQL text (DuckDB's rendering), where it runs
    ("device" or "duckdb"), why (for DuckDB), and for the device the table
    reference and the comparison."""

    text: str
    where: str
    reason: str = ""
    ref: Optional[int] = None
    comparison: Optional[Comparison] = None


@dataclass
class TableRef:
    """One reference to a csx table in the statement."""

    index: int
    name: str
    alias: str
    path: str
    view: str
    schema: Any
    columns: List[str] = field(default_factory=list)
    comparisons: List[Comparison] = field(default_factory=list)
    pushed: List[str] = field(default_factory=list)
    eligible: bool = False
    why_not: str = ""


@dataclass
class Plan:
    sql: str
    duckdb_sql: str
    refs: List[TableRef]
    conjuncts: List[Conjunct]


class _Memo:
    """The last ``size`` answers of a pure function, by key (shared by threads)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.items: "OrderedDict[str, Any]" = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = make()
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value


_TREES = _Memo()
_TEMPLATE = _Memo(1)
_RENDERED = _Memo()
_VALUES = _Memo()
_private = threading.local()


def private_connection() -> Any:
    """This thread's planning connection (DuckDB's parser and constant folding; it
    holds no data), made once."""
    con = getattr(_private, "con", None)
    if con is None:
        import duckdb

        con = _private.con = duckdb.connect()
    return con


class _Folder:
    """Evaluates constant expressions with DuckDB (a private connection)."""

    def __init__(self, con: Any) -> None:
        self.con = con
        raw = _TEMPLATE.get(
            "", lambda: con.execute("SELECT json_serialize_sql('SELECT 1')").fetchone()[0]
        )
        self.template = json.loads(raw)

    def render(self, expr: Dict[str, Any]) -> str:
        def make() -> str:
            stmt = copy.deepcopy(self.template)
            stmt["statements"][0]["node"]["select_list"] = [expr]
            text = str(self.con.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(stmt)]).fetchone()[0])
            text = text.strip().rstrip(";")
            return text[len("SELECT ") :] if text.upper().startswith("SELECT ") else text

        text: str = _RENDERED.get(json.dumps(expr, sort_keys=True), make)
        return text

    def value(self, expr: Dict[str, Any]) -> Any:
        def make() -> Any:
            row = self.con.execute("SELECT " + self.render(expr)).fetchone()
            return row[0]

        return _VALUES.get(json.dumps(expr, sort_keys=True), make)


def parse(con: Any, sql: str) -> Dict[str, Any]:
    raw = _TREES.get(sql, lambda: con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
    tree: Dict[str, Any] = json.loads(raw)
    if tree.get("error"):
        raise QueryError(f"DuckDB cannot parse the statement: {tree.get('error_message', tree)}")
    stmts = tree.get("statements") or []
    if len(stmts) != 1:
        raise QueryError(f"one SELECT statement is expected, got {len(stmts)} statements")
    return tree


def _walk(node: Any, fn: Callable[[Dict[str, Any]], None]) -> None:
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            _walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            _walk(v, fn)


def _is_constant(e: Any) -> bool:
    if not isinstance(e, dict):
        return False
    cls = e.get("class")
    if cls == "CONSTANT":
        return True
    if cls == "CAST":
        return _is_constant(e.get("child"))
    if cls == "FUNCTION":
        if e.get("function_name") not in _PURE_FUNCTIONS or e.get("filter") or e.get("schema") or e.get("catalog"):
            return False
        return all(_is_constant(a.get("expression")) for a in e.get("arguments", []))
    return False


def _flatten_and(e: Dict[str, Any]) -> List[Dict[str, Any]]:
    if e.get("class") == "CONJUNCTION" and e.get("type") == "CONJUNCTION_AND":
        out: List[Dict[str, Any]] = []
        for c in e["children"]:
            out += _flatten_and(c)
        return out
    return [e]


def _value(v: Any) -> Any:
    """A folded DuckDB value as csx.filter's constants (Fraction, str, date), or raises
    UnsupportedFilterError when it would not compare exactly."""
    if isinstance(v, bool) or v is None:
        raise UnsupportedFilterError(f"the constant {v!r} is not a number, string or date", repr(v))
    if isinstance(v, int):
        return Fraction(v)
    if isinstance(v, decimal.Decimal):
        if not v.is_finite():
            raise UnsupportedFilterError(f"the constant {v} is not finite", str(v))
        return Fraction(v)
    if isinstance(v, float):
        raise UnsupportedFilterError(
            "a floating-point constant compares approximately (DuckDB casts the column to DOUBLE)", repr(v)
        )
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None or v.time() != _dt.time(0):
            raise UnsupportedFilterError(f"the timestamp {v} is not a whole day", str(v))
        return v.date()
    if isinstance(v, _dt.date):
        return v
    if isinstance(v, str):
        return v
    raise UnsupportedFilterError(f"the constant {v!r} ({type(v).__name__}) is not a number, string or date", repr(v))


class Planner:
    def __init__(
        self,
        con: Any,
        sql: str,
        resolve: Callable[[str], Optional[Tuple[str, Any]]],
        dictionaries: Callable[[Any, str], List[str]],
        view_prefix: str,
    ) -> None:
        self.con = con
        self.sql = sql
        self.resolve = resolve
        self.dictionaries = dictionaries
        self.view_prefix = view_prefix
        self.folder = _Folder(con)
        self.refs: List[TableRef] = []
        self.conjuncts: List[Conjunct] = []
        self.cte_names: Set[str] = set()
        self._resolved: Dict[str, Optional[Tuple[str, Any]]] = {}
        #: The name each resolution was asked for (as the statement spells it).
        self._asked: Dict[str, str] = {}

    # -- table references ----------------------------------------------------------

    def _lookup(self, name: str) -> Optional[Tuple[str, Any]]:
        key = name.lower()
        if key not in self._resolved:
            self._resolved[key] = self.resolve(name)
            self._asked[key] = name
        return self._resolved[key]

    def _is_csx(self, node: Dict[str, Any]) -> bool:
        return (
            node.get("type") == "BASE_TABLE"
            and not node.get("schema_name")
            and not node.get("catalog_name")
            and node.get("table_name", "").lower() not in self.cte_names
            and self._lookup(node["table_name"]) is not None
        )

    def plan(self) -> Plan:
        tree = parse(self.con, self.sql)
        stmt = tree["statements"][0]["node"]

        def ctes(n: Dict[str, Any]) -> None:
            cm = n.get("cte_map")
            if isinstance(cm, dict):
                for entry in cm.get("map", []):
                    self.cte_names.add(str(entry.get("key", "")).lower())

        _walk(stmt, ctes)

        # Every csx base table becomes a reference with a view of its own.
        ref_of: Dict[int, TableRef] = {}

        def tables(n: Dict[str, Any]) -> None:
            if n.get("type") == "BASE_TABLE" and self._is_csx(n):
                if n.get("column_name_alias"):
                    raise QueryError(
                        f"column aliases on the csx table {n['table_name']} are not supported: "
                        "alias the columns in the SELECT list instead"
                    )
                path, schema = self._lookup(n["table_name"])  # type: ignore[misc]
                i = len(self.refs)
                ref = TableRef(
                    index=i,
                    name=n["table_name"],
                    alias=n.get("alias") or n["table_name"],
                    path=path,
                    view=f"{self.view_prefix}{i}",
                    schema=schema,
                )
                self.refs.append(ref)
                ref_of[id(n)] = ref

        _walk(stmt, tables)

        # Pushdown, one SELECT at a time.
        def selects(n: Dict[str, Any]) -> None:
            if n.get("type") == "SELECT_NODE":
                self._select(n, ref_of)

        _walk(stmt, selects)

        # Projection: every column name the statement still mentions once the pushed
        # conjuncts left it (a column only the device filter reads is not returned);
        # a star anywhere takes every column.
        mentioned: Set[str] = set()
        star = [False]

        def cols(n: Dict[str, Any]) -> None:
            if n.get("class") == "COLUMN_REF":
                mentioned.add(str(n["column_names"][-1]).lower())
                if len(n["column_names"]) >= 2:
                    mentioned.add(str(n["column_names"][-2]).lower())
            elif n.get("class") == "STAR":
                star[0] = True

        _walk(stmt, cols)
        for ref in self.refs:
            names = ref.schema.names
            if star[0]:
                ref.columns = list(names)
            else:
                ref.columns = [c for c in names if c.lower() in mentioned]
            if not ref.columns:
                # count(*) and the like need the row count: the narrowest column.
                ref.columns = [min(ref.schema.columns, key=lambda c: c.width).name]

        # The statement DuckDB runs: the csx tables replaced by their views.
        def replace(n: Dict[str, Any]) -> None:
            ref = ref_of.get(id(n))
            if ref is not None:
                n["table_name"] = ref.view
                n["alias"] = ref.alias
                n["qualified_name"] = {"path": [ref.view]}

        _walk(stmt, replace)
        duckdb_sql = self.con.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(tree)]).fetchone()[0]
        return Plan(sql=self.sql, duckdb_sql=duckdb_sql, refs=self.refs, conjuncts=self.conjuncts)

    # -- one SELECT ------------------------------------------------------------------

    def _from_refs(
        self,
        node: Optional[Dict[str, Any]],
        ref_of: Dict[int, TableRef],
        blocked: str,
        out: List[Tuple[TableRef, bool, str]],
        others: List[int],
    ) -> None:
        """The csx table references of a FROM clause: (reference, whether a WHERE
        conjunct may move into its scan, why not). ``blocked`` is the reason nothing
        under ``node`` may take one ("" when they may)."""
        if not isinstance(node, dict):
            return
        t = node.get("type")
        if t == "BASE_TABLE":
            ref = ref_of.get(id(node))
            if ref is None:
                others.append(1)
                return
            why = blocked
            if not why and node.get("sample"):
                why = f"{ref.alias} has a SAMPLE (the filter must run after it)"
            out.append((ref, not why, why))
            return
        if t == "JOIN":
            jt, rt = node.get("join_type"), node.get("ref_type")
            left, right = blocked, blocked
            if not blocked:
                if rt not in ("CROSS", "REGULAR", "NATURAL"):
                    left = right = f"it is under a {str(rt).lower()} join"
                elif jt not in ("INNER", "LEFT", "RIGHT"):
                    left = right = f"it is under a {str(jt).lower()} join"
                else:
                    if jt == "RIGHT":
                        left = "it is on the null-supplying side of an outer join"
                    if jt == "LEFT":
                        right = "it is on the null-supplying side of an outer join"
                if node.get("sample"):
                    left = right = "the join has a SAMPLE (the filter must run after it)"
            self._from_refs(node.get("left"), ref_of, left, out, others)
            self._from_refs(node.get("right"), ref_of, right, out, others)
            return
        if t != "EMPTY":
            others.append(1)

    def _select(self, node: Dict[str, Any], ref_of: Dict[int, TableRef]) -> None:
        where = node.get("where_clause")
        if not isinstance(where, dict):
            return
        in_from: List[Tuple[TableRef, bool, str]] = []
        others: List[int] = []
        blocked = "the SELECT has USING SAMPLE (the filter must run after it)" if node.get("sample") else ""
        self._from_refs(node.get("from_table"), ref_of, blocked, in_from, others)
        if not in_from:
            if self.refs:
                for e in _flatten_and(where):
                    why = "its SELECT reads no csx table directly (a subquery, a CTE or a DuckDB relation)"
                    self.conjuncts.append(Conjunct(self.folder.render(e), "duckdb", why))
            return
        keep: List[Dict[str, Any]] = []
        for e in _flatten_and(where):
            text = self.folder.render(e)
            try:
                ref, cmp = self._conjunct(e, text, in_from, bool(others))
            except UnsupportedFilterError as x:
                self.conjuncts.append(Conjunct(text, "duckdb", str(x)))
                keep.append(e)
                continue
            ref.comparisons.append(cmp)
            ref.pushed.append(text)
            self.conjuncts.append(Conjunct(text, "device", "", ref.index, cmp))
        if not keep:
            node["where_clause"] = None
        elif len(keep) == 1:
            node["where_clause"] = keep[0]
        else:
            node["where_clause"] = dict(where, type="CONJUNCTION_AND", children=keep)
            node["where_clause"]["class"] = "CONJUNCTION"

    def _column(
        self, e: Dict[str, Any], in_from: List[Tuple[TableRef, bool, str]], others: bool
    ) -> Tuple[TableRef, str]:
        names = [str(x) for x in e["column_names"]]
        if len(names) > 2:
            raise UnsupportedFilterError(f"column {'.'.join(names)} is qualified by a schema", ".".join(names))
        col = names[-1]
        if len(names) == 2:
            hits = [r for r in in_from if r[0].alias.lower() == names[0].lower()]
            if not hits:
                raise UnsupportedFilterError(f"{names[0]} is not a csx table of this FROM", ".".join(names))
        else:
            if others:
                raise UnsupportedFilterError(
                    f"column {col} is unqualified and this FROM also reads relations that are not csx tables",
                    col,
                )
            hits = [r for r in in_from if _has(r[0].schema, col)]
            if not hits:
                raise UnsupportedFilterError(f"{col} is not a column of a csx table of this FROM", col)
            if len(hits) > 1:
                raise UnsupportedFilterError(f"column {col} is in more than one csx table", col)
        ref, ok, why = hits[0]
        if not _has(ref.schema, col):
            raise UnsupportedFilterError(f"{ref.alias} has no column {col}", col)
        if not ok:
            raise UnsupportedFilterError(why, col)
        return ref, ref.schema.column(_name(ref.schema, col)).name

    def _conjunct(
        self, e: Dict[str, Any], text: str, in_from: List[Tuple[TableRef, bool, str]], others: bool
    ) -> Tuple[TableRef, Comparison]:
        cls, typ = e.get("class"), e.get("type")

        def const(x: Any) -> Any:
            if not _is_constant(x):
                raise UnsupportedFilterError(
                    "the other side is not a constant (a join or cross-column condition, or a function of a column)", text
                )
            try:
                return _value(self.folder.value(x))
            except UnsupportedFilterError:
                raise
            except Exception as err:  # DuckDB's own error evaluating the constant
                raise UnsupportedFilterError(f"DuckDB did not evaluate the constant: {err}", text) from None

        def col(x: Any) -> Optional[Tuple[TableRef, str]]:
            if isinstance(x, dict) and x.get("class") == "COLUMN_REF":
                return self._column(x, in_from, others)
            return None

        if cls == "COMPARISON" and typ in _CMP:
            op = _CMP[typ]
            lc, rc = col(e["left"]), col(e["right"])
            if lc is not None and rc is None:
                return self._bound(lc, Comparison(lc[1], op, const(e["right"]), text))
            if rc is not None and lc is None:
                return self._bound(rc, Comparison(rc[1], _MIRROR[op], const(e["left"]), text))
            if lc is not None and rc is not None:
                raise UnsupportedFilterError("it compares two columns (a join or cross-column condition)", text)
            raise UnsupportedFilterError("neither side is a plain column (a function of a column, or a cast)", text)
        if cls == "BETWEEN":
            c = col(e["input"])
            if c is None:
                raise UnsupportedFilterError("BETWEEN of something that is not a plain column", text)
            return self._bound(c, Comparison(c[1], "between", (const(e["lower"]), const(e["upper"])), text))
        if typ == "COMPARE_IN":
            c = col(e["children"][0])
            if c is None:
                raise UnsupportedFilterError("IN of something that is not a plain column", text)
            return self._bound(c, Comparison(c[1], "in", tuple(const(x) for x in e["children"][1:]), text))
        if cls == "CONJUNCTION" and typ == "CONJUNCTION_OR":
            target: Optional[Tuple[TableRef, str]] = None
            values: List[Any] = []
            for ch in e["children"]:
                if ch.get("type") == "COMPARE_EQUAL":
                    lc, rc = col(ch["left"]), col(ch["right"])
                    c, other = (lc, ch["right"]) if lc is not None else (rc, ch["left"])
                    vs = [other]
                elif ch.get("type") == "COMPARE_IN":
                    c, vs = col(ch["children"][0]), ch["children"][1:]
                else:
                    raise UnsupportedFilterError("an OR of something other than equalities and IN lists", text)
                if c is None or (target is not None and (c[0] is not target[0] or c[1] != target[1])):
                    raise UnsupportedFilterError("an OR over more than one column", text)
                target = c
                values += [const(v) for v in vs]
            assert target is not None
            return self._bound(target, Comparison(target[1], "in", tuple(values), text))
        if cls == "FUNCTION":
            name = e.get("function_name")
            what = {"~~": "LIKE", "!~~": "NOT LIKE", "~~*": "ILIKE", "regexp_matches": "a regular expression"}.get(
                str(name), f"the function {name}()"
            )
            raise UnsupportedFilterError(f"{what} is not evaluated on the device", text)
        if typ in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            raise UnsupportedFilterError("IS [NOT] NULL is not evaluated on the device (csx columns hold no NULLs)", text)
        if typ == "OPERATOR_NOT":
            raise UnsupportedFilterError("NOT is not evaluated on the device", text)
        raise UnsupportedFilterError(f"{str(typ).lower()} is not evaluated on the device", text)

    def _bound(self, c: Tuple[TableRef, str], cmp: Comparison) -> Tuple[TableRef, Comparison]:
        """Checks that the comparison binds to the column's stored values (else the
        UnsupportedFilterError says why)."""
        ref, name = c
        col = ref.schema.column(name)
        dicts = {name: self.dictionaries(ref, name)} if col.type == "dict" else {}
        same = [x for x in ref.comparisons if x.column == name] + [cmp]
        (r,) = bind(same, ref.schema, dicts)
        n = raw_ranges(r, col.type)
        if n > RANGES_MAX:
            raise UnsupportedFilterError(
                f"with it the device would evaluate {n} value ranges on {name}; its limit is {RANGES_MAX}",
                cmp.text,
            )
        return ref, cmp


def _has(schema: Any, col: str) -> bool:
    return any(c.lower() == col.lower() for c in schema.names)


def _name(schema: Any, col: str) -> str:
    for c in schema.names:
        if c.lower() == col.lower():
            return str(c)
    return col


@dataclass
class _Kept:
    plan: Plan
    prefix: str
    #: Every table name the plan resolved (as spelled) and what it resolved to.
    resolved: List[Tuple[str, Optional[Tuple[str, Any]]]]


class _Plans:
    """The plans of the last ``size`` statements, by their text, each kept with the
    resolutions of its table names (device path and schema). A plan depends on
    nothing else but DuckDB's own pure answers, so it serves the same text again when
    every name resolves the same (each table's schema read again, as planning reads
    it: a table rewritten, removed or added since is planned anew). A plan that bound
    a value through a dict column's dictionary is not kept (a dictionary is not part
    of the schema)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.items: "OrderedDict[str, _Kept]" = OrderedDict()
        self.lock = threading.Lock()

    def find(self, sql: str, resolve: Callable[[str], Optional[Tuple[str, Any]]], prefix: str) -> Optional[Plan]:
        with self.lock:
            kept = self.items.get(sql)
            if kept is not None:
                self.items.move_to_end(sql)
        if kept is None:
            return None
        for name, was in kept.resolved:
            if resolve(name) != was:
                return None
        return _renamed(kept.plan, kept.prefix, prefix)

    def put(self, sql: str, kept: _Kept) -> None:
        with self.lock:
            self.items[sql] = kept
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_PLANS = _Plans()


def _renamed(plan: Plan, old: str, new: str) -> Plan:
    """``plan`` with its views named from prefix ``new`` instead of ``old``."""
    refs = [copy.copy(r) for r in plan.refs]
    for r in refs:
        r.view = new + r.view[len(old) :]
    return Plan(sql=plan.sql, duckdb_sql=plan.duckdb_sql.replace(old, new), refs=refs, conjuncts=plan.conjuncts)


def plan_statement(
    con: Any,
    sql: str,
    resolve: Callable[[str], Optional[Tuple[str, Any]]],
    dictionaries: Callable[[Any, str], List[str]],
    view_prefix: str,
) -> Plan:
    """The plan of ``sql`` (see :class:`Planner`), its views named from
    ``view_prefix``: a kept one when the statement was planned before over the same
    tables (see :class:`_Plans`)."""
    hit = _PLANS.find(sql, resolve, view_prefix)
    if hit is not None:
        return hit
    used_dictionary = [False]

    def dicts(ref: Any, column: str) -> List[str]:
        used_dictionary[0] = True
        return dictionaries(ref, column)

    planner = Planner(con, sql, resolve, dicts, view_prefix)
    plan = planner.plan()
    # A prefix the statement itself spells could not be told from the views.
    if not used_dictionary[0] and view_prefix not in sql:
        resolved = [(planner._asked[k], v) for k, v in planner._resolved.items()]
        _PLANS.put(sql, _Kept(plan=_renamed(plan, view_prefix, view_prefix), prefix=view_prefix, resolved=resolved))
    return plan
