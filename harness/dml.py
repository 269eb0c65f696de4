"""A differential DML run: random sequences of ``CREATE TABLE AS`` / ``INSERT INTO`` /
``DELETE`` / ``UPDATE`` / ``DROP TABLE`` over TPC-H, applied single-node and through
``DistributedContext``, with every touched table compared after every statement.

Kept tables are storage: the one thing they must never do is lose (or invent) a row. So each
statement runs twice — on a plain ``SessionContext`` (in-memory tables) and on a session whose
``CREATE TABLE AS`` keeps its result on the workers — and after it, each table it touched is
read on both and compared by count and integer checksums: read distributed (``dctx.sql``) and
single-node (``ctx.sql``, which reads the kept rows back). An ``INSERT`` runs through
``dctx.sql`` (its input on the workers) or through ``ctx.sql`` (its input single-node, the rows
sent), chosen by the generator, and must report single-node's count; so must a ``DELETE`` and
an ``UPDATE`` (through ``dctx.sql``: ``ctx.sql`` cannot reach a kept table's rows to rewrite).
A statement single-node refuses must be refused too, and change nothing.

The sources cover the shapes whose rows arrive in many partitions or in one: filters,
aggregates, joins, ``UNION ALL``, ``DISTINCT``, ordered ``LIMIT``/``OFFSET``, sorts, ``VALUES``,
empty results, reads of other kept tables (and of the table itself), column lists in another
order, and rows a table refuses (a null into a non-null column).

Example:
    >>> gen = Generator(seed=1)
    >>> [s.kind for s in gen.statements(3)]
    ['create', 'insert', 'insert']
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from datafusion import SessionContext

from datafusion_distributed_py.config import DistributedConfig
from datafusion_distributed_py.context import DistributedContext

#: Nothing may run single-node (a query that cannot be distributed raises), and the small
#: test tables split into several scan tasks, so inputs arrive in many partitions.
CONFIG = DistributedConfig(fallback="error", file_scan_config_bytes_per_partition=16 * 1024)

#: Every kept table here has these columns (so that any source fits any table).
COLUMNS = ("a", "b", "q")
TABLES = ("t0", "t1", "t2", "t3")
#: What is compared: exact integer aggregates, so that the order rows arrive in cannot matter.
CHECK = (
    "SELECT count(*) AS n, sum(a) AS sa, sum(b) AS sb, sum(q) AS sq, "
    "sum(a * 7 + b % 13 - q) AS mix FROM {t}"
)


@dataclass(frozen=True)
class Statement:
    kind: Literal["create", "insert", "drop", "delete", "update"]
    table: str
    sql: str
    #: For an insert: run through ``ctx.sql`` (single-node input) rather than ``dctx.sql``.
    through_ctx: bool = False
    #: The shape of its source, for reports.
    shape: str = ""


def _sources(rng: random.Random, existing: list[str]) -> tuple[str, str]:
    """A source query of BIGINT columns ``a, b, q``, and its shape's name."""
    m = rng.choice([7, 11, 13, 31, 97])
    r = rng.randrange(m)
    cut = f"l_orderkey % {m} = {r}"
    line = "l_orderkey AS a, l_partkey AS b, CAST(l_quantity AS BIGINT) AS q"
    shapes = {
        "filter": f"SELECT {line} FROM lineitem WHERE {cut}",
        "aggregate": f"SELECT l_orderkey AS a, count(*) AS b, CAST(sum(l_quantity) AS BIGINT) "
        f"AS q FROM lineitem WHERE {cut} GROUP BY l_orderkey",
        "union": f"SELECT {line} FROM lineitem WHERE {cut} UNION ALL SELECT o_orderkey, "
        f"o_custkey, 1 FROM orders WHERE o_orderkey % {m} = {(r + 1) % m}",
        "distinct": f"SELECT DISTINCT l_suppkey AS a, l_linenumber AS b, "
        f"CAST(l_quantity AS BIGINT) AS q FROM lineitem WHERE {cut}",
        "limit": f"SELECT {line} FROM lineitem ORDER BY l_orderkey, l_linenumber "
        f"LIMIT {rng.choice([1, 10, 1000])} OFFSET {rng.choice([0, 5, 8000])}",
        "join": f"SELECT l_orderkey AS a, o_custkey AS b, CAST(l_quantity AS BIGINT) AS q "
        f"FROM lineitem JOIN orders ON l_orderkey = o_orderkey WHERE {cut}",
        "join aggregate": f"SELECT o_custkey AS a, count(*) AS b, CAST(sum(l_quantity) AS "
        f"BIGINT) AS q FROM lineitem JOIN orders ON l_orderkey = o_orderkey WHERE {cut} "
        "GROUP BY o_custkey",
        "sorted": f"SELECT {line} FROM lineitem WHERE {cut} ORDER BY l_partkey DESC",
        "one row": f"SELECT count(*) AS a, max(l_orderkey) AS b, CAST(sum(l_quantity) AS "
        f"BIGINT) AS q FROM lineitem WHERE {cut}",
        "values": f"SELECT * FROM (VALUES ({r}, {m}, 1), ({m}, {r}, 2), (-1, 0, {r})) "
        "AS v(a, b, q)",
        "empty": f"SELECT {line} FROM lineitem WHERE l_orderkey < 0",
        "a null": f"SELECT CAST(NULL AS BIGINT) AS a, l_partkey AS b, 1 AS q FROM lineitem "
        f"WHERE {cut} ORDER BY l_partkey LIMIT 3",
    }
    if existing:
        other = rng.choice(existing)
        shapes["kept"] = f"SELECT a, b + 1 AS b, q FROM {other} WHERE a % {m} = {r}"
        shapes["kept aggregate"] = (
            f"SELECT b % {m} AS a, count(*) AS b, sum(q) AS q FROM {other} GROUP BY b % {m}"
        )
    shape = rng.choice(sorted(shapes))
    return shapes[shape], shape


@dataclass
class Generator:
    """Random DML statements over :data:`TABLES`, from ``seed``."""

    seed: int
    existing: list[str] = field(default_factory=list)

    def statements(self, n: int) -> Iterator[Statement]:
        rng = random.Random(self.seed)
        for _ in range(n):
            free = [t for t in TABLES if t not in self.existing]
            roll = rng.random()
            if not self.existing or (free and roll < 0.1):
                table = rng.choice(free)
                source, shape = _sources(rng, self.existing)
                self.existing.append(table)
                yield Statement("create", table, f"CREATE TABLE {table} AS {source}", shape=shape)
            elif roll < 0.14:
                table = rng.choice(self.existing)
                source, shape = _sources(rng, self.existing)
                sql = f"CREATE OR REPLACE TABLE {table} AS {source}"
                yield Statement("create", table, sql, shape=shape)
            elif roll < 0.18:
                table = rng.choice(self.existing)
                self.existing.remove(table)
                yield Statement("drop", table, f"DROP TABLE {table}")
            elif roll < 0.24:
                table = rng.choice(self.existing)
                m = rng.choice([2, 3, 7, 13])
                where = rng.choice(
                    [
                        f"a % {m} = {rng.randrange(m)}",
                        f"b > {rng.randrange(2000)}",
                        f"q < {rng.randrange(10)}",
                    ]
                )
                sql = (
                    f"DELETE FROM {table} WHERE {where}"
                    if rng.random() < 0.95
                    else (f"DELETE FROM {table}")
                )
                yield Statement("delete", table, sql, shape="delete")
            elif roll < 0.30:
                table = rng.choice(self.existing)
                m = rng.choice([2, 3, 7, 13])
                sets = rng.choice(["q = q + 1", "b = a % 5, q = 2 * q", "a = b"])
                where = f" WHERE a % {m} = {rng.randrange(m)}" if rng.random() < 0.9 else ""
                yield Statement(
                    "update", table, f"UPDATE {table} SET {sets}{where}", shape="update"
                )
            else:
                table = rng.choice(self.existing)
                source, shape = _sources(rng, self.existing)
                sql = f"INSERT INTO {table} {source}"
                if rng.random() < 0.2:  # a column list in another order
                    sql = f"INSERT INTO {table} (q, a, b) SELECT q, a, b FROM ({source}) AS s"
                yield Statement("insert", table, sql, rng.random() < 0.3, shape)


@dataclass
class Mismatch:
    index: int
    statement: Statement
    what: str


@dataclass
class Report:
    statements: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    by_shape: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)


def _rows(
    m: SessionContext | DistributedContext, sql: str
) -> tuple[list[dict[str, object]] | None, str | None]:
    """``sql``'s rows through ``m``, or the first line of the error it raised."""
    try:
        return m.sql(sql).to_pylist(), None
    except Exception as e:  # datafusion raises plain Exception subclasses
        return None, str(e).splitlines()[0] if str(e) else type(e).__name__


def apply(
    single: SessionContext, dctx: DistributedContext, statements: Iterator[Statement]
) -> Report:
    """Runs each statement on ``single`` and on ``dctx``, comparing after each one."""
    report = Report()
    ctx = dctx.ctx
    for i, st in enumerate(statements):
        report.statements += 1
        report.by_kind[st.kind] = report.by_kind.get(st.kind, 0) + 1
        report.by_shape[st.shape] = report.by_shape.get(st.shape, 0) + 1
        expected, single_error = _rows(single, st.sql)
        got, error = _rows(ctx if st.through_ctx else dctx, st.sql)
        if single_error is not None:
            report.refused += 1
            if error is None:
                what = f"single-node refused ({single_error}); we ran it"
                report.mismatches.append(Mismatch(i, st, what))
        elif error is not None:
            report.mismatches.append(Mismatch(i, st, f"single-node ran it; we raised {error}"))
        elif st.kind in ("insert", "delete", "update") and got != expected:
            report.mismatches.append(Mismatch(i, st, f"count {got} != single-node {expected}"))
        if st.kind == "drop":
            continue
        check = CHECK.format(t=st.table)
        want, _ = _rows(single, check)
        for name, reader in (("dctx", dctx), ("ctx", ctx)):
            seen, err = _rows(reader, check)
            if seen != want:
                what = f"{st.table} read by {name}: {seen or err} != single-node {want}"
                report.mismatches.append(Mismatch(i, st, what))
    return report
