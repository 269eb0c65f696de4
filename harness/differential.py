"""Differential checks: run queries single-node and distributed, and compare the answers.

The unit of comparison is one query: :func:`compare` runs it through ``ctx.sql`` and through
``DistributedContext(ctx).sql`` and says whether both gave the same rows (as a multiset, or
in order where the query orders them), the same error, or not. :func:`run_slt` does it for
every query of a sqllogictest file (DataFusion's own SQL test corpus is written in that
format), running its statements once on the shared session.

Example:
    >>> from datafusion import SessionContext
    >>> from datafusion_distributed_py import DistributedContext
    >>> ctx = SessionContext()
    >>> _ = ctx.from_pydict({"a": [3, 1, 2]}, name="t")
    >>> compare(ctx, DistributedContext(ctx), "SELECT a FROM t ORDER BY a").verdict
    'equal'
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from datafusion import SessionContext

from datafusion_distributed_py.context import DistributedContext
from datafusion_distributed_py.dataframe import ran_on

#: equal: same rows; error: single-node answered, distributed raised; wrong: both answered,
#: differently (or distributed answered where single-node raised); both-raised: no answer to
#: compare (the query fails single-node too).
Verdict = Literal["equal", "error", "wrong", "both-raised"]

# Statements change the session: they run once, on ctx, and are not compared.
_READS = re.compile(r"^\s*(\(\s*)*(SELECT|WITH|VALUES|TABLE)\b", re.IGNORECASE)
# Plans differ by design between single-node and distributed.
_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)


@dataclass
class Outcome:
    """The result of comparing one query.

    Attributes:
        sql: the query.
        verdict: "equal", "error", "wrong" or "both-raised" (see :data:`Verdict`).
        fallback: the distributed run fell back to single-node on the coordinator.
        detail: what differed, for a verdict other than "equal".
    """

    sql: str
    verdict: Verdict
    fallback: bool = False
    detail: str = ""


def _normalize(value: object) -> object:
    """A value as compared: floats to 10 significant digits (sums in another order differ
    in the last bits), NaN and -0.0 made one value, containers element-wise."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return float(f"{value:.10g}") + 0.0
    if isinstance(value, Decimal):
        return value.normalize() if value.is_finite() else str(value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normalize(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_normalize(v) for v in value)
    return value


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    # Rows by position: a result may have two columns of one name.
    columns = [c.to_pylist() for c in table.columns]
    return [tuple(_normalize(c[i]) for c in columns) for i in range(table.num_rows)]


def _ordered(sql: str) -> bool:
    """Whether the query's outermost statement orders its rows (an ORDER BY after the last
    closing parenthesis)."""
    tail = sql[sql.rfind(")") + 1 :] if ")" in sql else sql
    return re.search(r"\bORDER\s+BY\b", tail, re.IGNORECASE) is not None


def compare(ctx: SessionContext, dctx: DistributedContext, sql: str) -> Outcome:
    """Run ``sql`` single-node on ``ctx`` and distributed on ``dctx``; compare the answers."""
    try:
        expected: pa.Table | Exception = ctx.sql(sql).to_arrow_table()
    except Exception as e:  # the query's own error, to be given distributed too
        expected = e
    fallback = False
    try:
        df = dctx.sql(sql)
        fallback = ran_on(df) == "coordinator"
        got: pa.Table | Exception = df.to_arrow_table()
    except Exception as e:
        got = e
    verdict, detail = _verdict(expected, got)
    return Outcome(sql, verdict, fallback, detail)


def _message(err: Exception) -> str:
    """An error's first line, without the worker it was raised on."""
    first = str(err).split("\n", 1)[0]
    return re.sub(r" \(on worker \S+\)$", "", first)


def _verdict(expected: pa.Table | Exception, got: pa.Table | Exception) -> tuple[Verdict, str]:
    if isinstance(expected, Exception):
        if isinstance(got, Exception):
            if _message(got) != _message(expected):
                return "wrong", f"raised {_message(got)!r}, single-node {_message(expected)!r}"
            return "both-raised", ""
        return "wrong", f"single-node raised {expected!s:.200}, distributed answered"
    if isinstance(got, Exception):
        return "error", f"{type(got).__name__}: {got!s:.300}"
    if expected.schema.names != got.schema.names:
        return "wrong", f"columns {got.schema.names} != {expected.schema.names}"
    types = [(f.name, f.type) for f in expected.schema]
    got_types = [(f.name, f.type) for f in got.schema]
    if types != got_types:
        return "wrong", f"types {got_types} != {types}"
    try:
        want, have = _rows(expected), _rows(got)
    except (KeyError, NotImplementedError, pa.ArrowNotImplementedError):
        # A type pyarrow cannot turn into Python values: compared as Arrow data, in order.
        if got.equals(expected):
            return "equal", ""
        return "wrong", "the results differ (compared as Arrow data, in order)"
    if Counter(map(repr, want)) != Counter(map(repr, have)):
        return "wrong", f"{len(have)} rows != {len(want)} rows; first: {have[:3]} vs {want[:3]}"
    return "equal", ""


def compare_ordered(ctx: SessionContext, dctx: DistributedContext, sql: str) -> Outcome:
    """:func:`compare`, and, where the query orders its rows at the top, rows in an order its
    ORDER BY allows (rows that tie on the keys may come in any order)."""
    outcome = compare(ctx, dctx, sql)
    if outcome.verdict != "equal" or not _ordered(sql):
        return outcome
    try:
        got = dctx.sql(sql).to_arrow_table()
    except Exception:  # errors were compared already
        return outcome
    # The leading keys that are output columns (none when the first is an expression or a
    # qualified name: then only the rows were compared).
    keys = _order_keys(sql, got.schema.names)
    if keys and not any(_sorted_by(got, k) for k in _null_orders(keys)):
        outcome.verdict, outcome.detail = "wrong", "rows in another order than ORDER BY's"
    return outcome


#: One ORDER BY key as understood here: output column, descending, nulls first (None: not
#: written, so the session's default null ordering applies, which may be either).
_Key = tuple[int, bool, bool | None]


def _null_orders(keys: list[_Key]) -> list[list[_Key]]:
    """``keys`` with each unwritten null ordering as either one."""
    out: list[list[_Key]] = [[]]
    for index, desc, nulls_first in keys:
        options = [nulls_first] if nulls_first is not None else [True, False]
        out = [prefix + [(index, desc, n)] for prefix in out for n in options]
    return out


def _order_keys(sql: str, names: list[str]) -> list[_Key] | None:
    """The leading top-level ORDER BY keys of ``sql`` that are output columns (up to the
    first that is an expression or names no single output column)."""
    tail = sql[sql.rfind(")") + 1 :] if ")" in sql else sql
    m = list(re.finditer(r"\bORDER\s+BY\b", tail, re.IGNORECASE))
    if not m:
        return None
    clause = re.split(r"\b(?:LIMIT|OFFSET)\b", tail[m[-1].end() :], flags=re.IGNORECASE)[0]
    keys: list[_Key] = []
    lowered = [n.lower() for n in names]
    for part in clause.strip().rstrip(";").split(","):
        words = part.split()
        if not words:
            return None
        name = words[0].strip('"').lower()
        rest = " ".join(words[1:]).upper()
        desc = rest.startswith("DESC")
        nulls_first = True if "NULLS FIRST" in rest else False if "NULLS LAST" in rest else None
        if name.isdigit() and 0 < int(name) <= len(names):
            index = int(name) - 1
        elif lowered.count(name) == 1:
            index = lowered.index(name)
        else:
            break
        if (
            rest.replace("DESC", "")
            .replace("ASC", "")
            .replace("NULLS FIRST", "")
            .replace("NULLS LAST", "")
            .strip()
        ):
            break
        keys.append((index, desc, nulls_first))
    return keys


def _sorted_by(table: pa.Table, keys: list[_Key]) -> bool:
    """Whether ``table``'s rows are in the order ``keys`` ask for."""
    columns = [table.column(i).to_pylist() for i, _, _ in keys]

    def key_of(row: int) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        for (_, desc, nulls_first), col in zip(keys, columns, strict=True):
            v = col[row]
            if isinstance(v, float):  # NaN sorts after every number, as in DataFusion
                v = (math.isnan(v), 0.0 if math.isnan(v) else v)
            if v is None:
                out.append((0 if nulls_first else 1, 0))
            else:
                out.append((1 if nulls_first else 0, _Desc(v) if desc else v))
        return out

    try:
        return all(key_of(i) <= key_of(i + 1) for i in range(table.num_rows - 1))
    except TypeError:  # values Python cannot order (structs, maps): not checked
        return True


class _Desc:
    """A value ordered the other way round."""

    def __init__(self, v: object) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.v < self.v)  # type: ignore[operator]

    def __le__(self, other: _Desc) -> bool:
        return bool(other.v <= self.v)  # type: ignore[operator]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v

    __hash__ = None  # type: ignore[assignment]


# -- sqllogictest files ----------------------------------------------------------------


@dataclass
class Record:
    """One record of a sqllogictest file."""

    kind: Literal["statement", "query"]
    sql: str
    line: int


@dataclass
class FileReport:
    """What :func:`run_slt` found in one file."""

    path: Path
    outcomes: list[Outcome] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        """Queries by verdict, and ``"fallback"`` for those answered single-node."""
        c: Counter[str] = Counter(o.verdict for o in self.outcomes)
        c["fallback"] = sum(o.fallback for o in self.outcomes)
        return c


def parse_slt(text: str) -> Iterator[Record]:
    """The ``statement`` and ``query`` records of a sqllogictest file, in order (a record
    guarded by ``onlyif`` for another engine is left out; ``skipif datafusion`` too)."""
    lines = text.splitlines()
    i = 0
    skip = False
    while i < len(lines):
        line = lines[i].strip()
        words = line.split()
        if not words or line.startswith("#"):
            i += 1
            continue
        if words[0] == "halt":
            return
        if words[0] == "onlyif":
            skip = skip or words[1:2] != ["datafusion"]
            i += 1
            continue
        if words[0] == "skipif":
            skip = skip or words[1:2] == ["datafusion"]
            i += 1
            continue
        if words[0] in ("statement", "query"):
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() and lines[j].strip() != "----":
                j += 1
            sql = "\n".join(lines[start:j])
            # Past the expected results (up to the next blank line).
            while j < len(lines) and lines[j].strip():
                j += 1
            if not skip:
                yield Record(words[0], sql, start)  # type: ignore[arg-type]
            skip = False
            i = j
            continue
        skip = False
        i += 1


def _relocate(sql: str, data_dir: Path) -> str:
    """Point the corpus's data paths (``../../testing/data/csv/x.csv``, ...) at ``data_dir``."""
    return re.sub(
        r"'(?:\.\./)*(?:testing/)?(?:data|tests/data|core/tests/data)/(?:[\w.-]+/)*([\w.-]+)'",
        lambda m: f"'{data_dir / m.group(1)}'",
        sql,
    )


def _modernize(sql: str) -> str:
    """Older corpus files' ``WITH HEADER ROW`` (gone from DataFusion's SQL) as the option it
    became."""
    if not re.search(r"\bWITH\s+HEADER\s+ROW\b", sql, re.IGNORECASE):
        return sql
    sql = re.sub(r"\s*\bWITH\s+HEADER\s+ROW\b", "", sql, flags=re.IGNORECASE).rstrip().rstrip(";")
    if re.search(r"\bOPTIONS\s*\(", sql, re.IGNORECASE):
        return re.sub(
            r"\bOPTIONS\s*\(", "OPTIONS ('format.has_header' 'true', ", sql, flags=re.IGNORECASE
        )
    return f"{sql} OPTIONS ('format.has_header' 'true')"


def new_session() -> SessionContext:
    """A session configured as DataFusion's sqllogictest runner configures its own."""
    from datafusion import SessionConfig

    return SessionContext(SessionConfig().with_information_schema(True).with_target_partitions(4))


def run_slt(
    path: Path,
    dctx_for: type[DistributedContext] | None = None,
    workers: object = None,
    data_dir: Path | None = None,
    skip: dict[str, str] | None = None,
) -> FileReport:
    """Run every query of the sqllogictest file ``path`` single-node and distributed.

    Statements run once, on the shared session; each query is compared by
    :func:`compare_ordered`. ``skip`` maps SQL text (stripped) to the reason it is not
    compared (a result that is nondeterministic single-node); by default the entries for
    ``path`` in ``denylist.json`` beside its folder (``{file name: {sql: reason}}``).
    """
    if skip is None:
        denylist = path.parent.parent / "denylist.json"
        if denylist.exists():
            skip = json.loads(denylist.read_text()).get(path.name, {})
    scratch = Path(tempfile.mkdtemp(prefix="dfdpy-slt-"))
    ctx = new_session()
    dctx = (dctx_for or DistributedContext)(ctx, workers=workers)  # type: ignore[arg-type]
    data_dir = data_dir or path.parent.parent / "data"
    report = FileReport(path)
    try:
        _run_records(path, ctx, dctx, data_dir, scratch, skip, report)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def _run_records(
    path: Path,
    ctx: SessionContext,
    dctx: DistributedContext,
    data_dir: Path,
    scratch: Path,
    skip: dict[str, str] | None,
    report: FileReport,
) -> None:
    for record in parse_slt(path.read_text(encoding="utf-8")):
        sql = _modernize(_relocate(record.sql, data_dir))
        # Files the corpus writes (COPY ... TO 'test_files/scratch/...') go to a temporary one.
        sql = sql.replace("'test_files/scratch/", f"'{scratch}/")
        reads = _READS.match(sql) is not None and not _EXPLAIN.match(sql)
        if record.kind == "statement" or not reads:
            # Statements that fail single-node fail in the corpus too.
            with contextlib.suppress(Exception):
                ctx.sql(sql).collect()
            continue
        if skip and sql.strip() in skip:
            continue
        report.outcomes.append(compare_ordered(ctx, dctx, sql))
