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
import logging
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Literal

import pyarrow as pa
from datafusion import SessionContext

from datafusion_distributed_py.context import DistributedContext
from datafusion_distributed_py.dataframe import source_of

#: equal: same rows (or the same error); error: single-node answered, distributed raised;
#: wrong: both answered, differently (or distributed answered where single-node raised).
Verdict = Literal["equal", "error", "wrong"]

# Statements change the session: they run once, on ctx, and are not compared.
_READS = re.compile(r"^\s*(\(\s*)*(SELECT|WITH|VALUES|TABLE)\b", re.IGNORECASE)
# Plans differ by design between single-node and distributed.
_EXPLAIN = re.compile(r"^\s*EXPLAIN\b", re.IGNORECASE)


@dataclass
class Outcome:
    """The result of comparing one query.

    Attributes:
        sql: the query.
        verdict: "equal", "error" or "wrong" (see :data:`Verdict`).
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


class _Fallbacks(logging.Handler):
    """Counts the fallback warnings of ``datafusion_distributed_py``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "runs on the coordinator" in record.getMessage():
            self.count += 1


def compare(ctx: SessionContext, dctx: DistributedContext, sql: str) -> Outcome:
    """Run ``sql`` single-node on ``ctx`` and distributed on ``dctx``; compare the answers."""
    try:
        expected: pa.Table | Exception = ctx.sql(sql).to_arrow_table()
    except Exception as e:  # the query's own error, to be given distributed too
        expected = e
    logger = logging.getLogger("datafusion_distributed_py")
    counter = _Fallbacks()
    logger.addHandler(counter)
    fallback = False
    try:
        df = dctx.sql(sql)
        fallback = counter.count > 0 or getattr(source_of(df), "reason", None) is not None
        got: pa.Table | Exception = df.to_arrow_table()
    except Exception as e:
        got = e
    finally:
        logger.removeHandler(counter)
    verdict, detail = _verdict(expected, got)
    return Outcome(sql, verdict, fallback, detail)


def _verdict(expected: pa.Table | Exception, got: pa.Table | Exception) -> tuple[Verdict, str]:
    if isinstance(expected, Exception):
        if isinstance(got, Exception):
            return "equal", ""
        return "wrong", f"single-node raised {expected!s:.200}, distributed answered"
    if isinstance(got, Exception):
        return "error", f"{type(got).__name__}: {got!s:.300}"
    if expected.schema.names != got.schema.names:
        return "wrong", f"columns {got.schema.names} != {expected.schema.names}"
    types = [(f.name, f.type) for f in expected.schema]
    got_types = [(f.name, f.type) for f in got.schema]
    if types != got_types:
        return "wrong", f"types {got_types} != {types}"
    want, have = _rows(expected), _rows(got)
    if Counter(map(repr, want)) != Counter(map(repr, have)):
        return "wrong", f"{len(have)} rows != {len(want)} rows; first: {have[:3]} vs {want[:3]}"
    return "equal", ""


def compare_ordered(ctx: SessionContext, dctx: DistributedContext, sql: str) -> Outcome:
    """:func:`compare`, and rows in single-node's order where the query orders them at the
    top and single-node's order is stable (the same in two runs)."""
    outcome = compare(ctx, dctx, sql)
    if outcome.verdict != "equal" or not _ordered(sql):
        return outcome
    try:
        first = _rows(ctx.sql(sql).to_arrow_table())
        second = _rows(ctx.sql(sql).to_arrow_table())
        got = _rows(dctx.sql(sql).to_arrow_table())
    except Exception:  # errors were compared already
        return outcome
    if first == second and got != first and not _ties_only(got, first):
        outcome.verdict, outcome.detail = "wrong", "rows in another order than ORDER BY's"
    return outcome


def _ties_only(got: list[tuple[object, ...]], want: list[tuple[object, ...]]) -> bool:
    """Whether two orders of the same rows differ only among rows that are equal in their
    first column (ORDER BY keys are usually leading; ties may come in any order)."""
    if len(got) != len(want):
        return False
    return [r[:1] for r in got] == [r[:1] for r in want]


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
    compared (a result that is nondeterministic single-node).
    """
    ctx = new_session()
    dctx = (dctx_for or DistributedContext)(ctx, workers=workers)  # type: ignore[arg-type]
    data_dir = data_dir or path.parent.parent / "data"
    report = FileReport(path)
    for record in parse_slt(path.read_text(encoding="utf-8")):
        sql = _relocate(record.sql, data_dir)
        reads = _READS.match(sql) is not None and not _EXPLAIN.match(sql)
        if record.kind == "statement" or not reads:
            # Statements that fail single-node fail in the corpus too.
            with contextlib.suppress(Exception):
                ctx.sql(sql).collect()
            continue
        if skip and sql.strip() in skip:
            continue
        report.outcomes.append(compare_ordered(ctx, dctx, sql))
    return report
