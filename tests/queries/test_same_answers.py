"""Each class of query that once gave another answer than single-node, compared
with single-node ``datafusion`` on the embedded cluster and on worker processes."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datafusion import DataFrame, SessionContext, udf, udwf
from datafusion.user_defined import WindowEvaluator

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    UnsupportedTableError,
    ran_on,
)
from datafusion_distributed_py.testing import (
    assert_distributed_equal,
    assert_ran_on_coordinator,
    is_distributed,
)


class Enumerate(WindowEvaluator):
    """A Python window function: the row's position in its partition."""

    def evaluate_all(self, values: list[pa.Array], num_rows: int) -> pa.Array:
        return pa.array(range(num_rows), pa.int64())


def python_lower(a: pa.Array) -> pa.Array:
    return pc.utf8_lower(a)


def session() -> SessionContext:
    ctx = SessionContext()
    ctx.from_pydict(
        {
            "id": [1, 2, 3, 4, 5, 6],
            "a": [None, 1, None, 3, None, 5],
            "c1": [1, 1, 2, 2, 3, 3],
            "c2": [1, 2, 3, 1, 2, 3],
            "x": ["p", None, "Q", "r", None, "S"],
        },
        name="t",
    )
    ctx.from_arrow(
        pa.table({"h": pa.array([1.5, 2.5, 3.5, None], pa.float16()), "k": [1, 1, 2, 2]}),
        name="f16",
    )
    return ctx


@pytest.fixture
def both(workers: LocalCluster | None) -> tuple[SessionContext, DistributedContext]:
    ctx = session()
    return ctx, DistributedContext(ctx, workers=workers)


def assert_same(
    ctx: SessionContext, dctx: DistributedContext, sql: str, fallback: str | None = None
) -> None:
    """Single-node's rows, names and types, run on the workers; or, for a query whose
    ``fallback`` reason (a regular expression) is known, on the coordinator for that reason."""
    assert_distributed_equal(ctx, dctx, sql, expect_fallback=fallback, stages=False)


#: Window modifiers DataFusion 55's plan serialisation drops, carried to the workers anyway
#: (`codec/lost_modifiers.rs`, `codec/window_filters.rs`).
WINDOW_MODIFIERS = [
    "SELECT id, lag(a) IGNORE NULLS OVER (ORDER BY id) AS l FROM t",
    "SELECT id, lag(x, 2, 'def') IGNORE NULLS OVER (ORDER BY id) AS l FROM t",
    "SELECT id, FIRST_VALUE(a) IGNORE NULLS OVER (ORDER BY id) AS f FROM t",
    "SELECT c1, c2, SUM(c2) FILTER (WHERE c2 >= 2) OVER (ORDER BY c1, c2 ROWS BETWEEN "
    "UNBOUNDED PRECEDING AND CURRENT ROW) AS s FROM t",
    "SELECT count(*) FILTER (WHERE NULL) OVER () AS c FROM t",
    "SELECT c2, NTH_VALUE(c2, 2) OVER (ORDER BY c2 DESC) AS n FROM t",
    "SELECT id, NTH_VALUE(a, 2) IGNORE NULLS OVER (ORDER BY id) AS n FROM t",
    # Windows the planner reverses to share one sort with another window.
    "SELECT id, lag(id, 2, 99) OVER (ORDER BY id ASC) AS l, lead(id, 2, 99) OVER (ORDER BY "
    "id DESC ROWS BETWEEN 10 PRECEDING AND 1 FOLLOWING) AS d FROM t",
    "SELECT id, NTH_VALUE(id, 2) OVER (ORDER BY id DESC) AS n, first_value(id) OVER "
    "(ORDER BY id) AS f, last_value(a) OVER (ORDER BY id DESC) AS la FROM t",
]

#: A query whose plan serialisation changes a type (a `Float16` literal is written as a
#: `Float32` one), and why it runs single-node.
LOST_TYPE = (
    "WITH data AS (SELECT arrow_cast(1, 'Float16') AS f UNION ALL "
    "SELECT arrow_cast(6, 'Float16') AS f) SELECT MIN(f) AS lo, MAX(f) AS hi FROM data"
)
LOST_TYPE_REASON = "single-node but"


@pytest.mark.parametrize("sql", WINDOW_MODIFIERS)
def test_window_modifiers_keep_their_meaning(both, sql):
    assert_same(*both, sql)


def test_a_type_lost_in_serialisation_runs_single_node_with_a_warning(both, caplog):
    ctx, dctx = both
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed_py"):
        df = dctx.sql(LOST_TYPE)
        assert ran_on(df) == "coordinator"
    assert LOST_TYPE_REASON in caplog.text and "coordinator" in caplog.text
    assert df.to_arrow_table() == ctx.sql(LOST_TYPE).to_arrow_table()
    assert "Runs on the coordinator" in dctx.explain(df)
    assert [m["ran_on"] for m in dctx.metrics(df)] == ["coordinator"]


def test_window_without_lost_modifiers_is_distributed(both):
    ctx, dctx = both
    sql = "SELECT id, lag(a) OVER (ORDER BY id) AS l, sum(a) OVER (PARTITION BY c1) AS s FROM t"
    df = dctx.sql(sql)
    assert ran_on(df) == "workers"
    assert is_distributed(dctx.explain(df))
    assert_same(ctx, dctx, sql)
    df.collect()
    assert {m["ran_on"] for m in dctx.metrics(df)} == {"workers"}


GROUPING_SETS = [
    "SELECT COUNT(*) FROM t GROUP BY GROUPING SETS (())",
    "SELECT c1, COUNT(*) FROM t GROUP BY GROUPING SETS ((), (c1))",
    "SELECT c1, c2, sum(a) FROM t GROUP BY CUBE (c1, c2)",
    "SELECT c1, c2, sum(a) FROM t GROUP BY ROLLUP (c1, c2)",
]


@pytest.mark.parametrize("sql", GROUPING_SETS)
def test_grouping_sets(both, sql):
    assert_same(*both, sql)


#: Every table split into tasks, and the extra aggregation before shuffles asked for.
PARTIAL_REDUCE = DistributedConfig(file_scan_config_bytes_per_partition=1, partial_reduce=True)


@pytest.mark.parametrize("sql", GROUPING_SETS)
def test_grouping_sets_with_partial_reduce(workers, sql):
    """datafusion-distributed's partial reduce regroups ROLLUP rows by the sets again (wrong
    sums and counts): such a query is planned without it."""
    ctx = session()
    dctx = DistributedContext(ctx, workers=workers, config=PARTIAL_REDUCE)
    assert_same(ctx, dctx, sql)
    plan = dctx.explain(sql)
    assert is_distributed(plan) and "PartialReduce" not in plan, plan


def test_partial_reduce_still_applies_without_grouping_sets(workers):
    ctx = session()
    dctx = DistributedContext(ctx, workers=workers, config=PARTIAL_REDUCE)
    sql = "SELECT c1, count(*) AS n, sum(a) AS s FROM t GROUP BY c1"
    assert "PartialReduce" in dctx.explain(sql)
    assert_same(ctx, dctx, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, sum(h) AS s, avg(h) AS a, min(h) AS m, max(h) AS x FROM f16 GROUP BY k",
        "SELECT f.k, f.h, g.h FROM f16 f JOIN f16 g ON f.h = g.h",
        "SELECT arrow_typeof(h), count(*) FROM f16 GROUP BY arrow_typeof(h)",
    ],
)
def test_float16_keeps_its_type(both, sql):
    assert_same(*both, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT NULL AS n, id FROM t WHERE EXISTS (SELECT 1 FROM t t2 WHERE t2.id = t.id)",
        "SELECT n FROM (SELECT NULL AS n, id FROM t) s WHERE EXISTS "
        "(SELECT 1 FROM t t2 WHERE t2.c1 = s.id)",
        "SELECT c1, NULL AS n FROM t GROUP BY c1",
    ],
)
def test_null_typed_columns_stay_null_typed(both, sql):
    assert_same(*both, sql)


def test_python_udf_under_a_builtin_name_runs_the_users_function(both):
    ctx, dctx = both
    ctx.register_udf(udf(python_lower, [pa.string()], pa.string(), "immutable", name="upper"))
    sql = "SELECT id, upper(x) AS u FROM t"
    assert ctx.sql(sql + " ORDER BY id").to_pydict()["u"] == ["p", None, "q", "r", None, "s"]
    assert_same(ctx, dctx, sql)


def test_python_window_udf_runs_on_workers(both):
    ctx, dctx = both
    ctx.register_udwf(udwf(Enumerate, [pa.int64()], pa.int64(), "immutable", name="enumerate"))
    sql = "SELECT id, c1, enumerate(id) OVER (PARTITION BY c1 ORDER BY id) AS e FROM t"
    df = dctx.sql(sql)
    assert ran_on(df) == "workers"
    assert_same(ctx, dctx, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t a JOIN t b ON a.id = b.id",
        "SELECT a.c1, b.c1 FROM t a CROSS JOIN t b",
        "SELECT * FROM t a JOIN t b USING (id)",
        "SELECT a.id, b.id FROM t a JOIN t b ON a.id > b.id",
    ],
)
def test_repeated_column_names(both, sql):
    # Run on the workers with single-node's names (tests/queries/test_repeated_names.py: every way
    # a result is read).
    assert_same(*both, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
        "SELECT * FROM r",
        "SELECT * FROM (SELECT c1, c2, ROW_NUMBER() OVER (PARTITION BY c1 ORDER BY c2) AS rn "
        "FROM t) WHERE rn <= 1",
        "SELECT t1.id AS l, t2.id AS r FROM t t1 JOIN t t2 ON t1.id > t2.id",
        "SELECT t1.id AS l, t2.c1 AS r FROM t t1 LEFT JOIN t t2 ON t1.id < t2.c1 AND t2.c2 = 2",
    ],
)
def test_once_refused_queries_answer(both, sql):
    assert_same(*both, sql)


#: Uncorrelated scalar subqueries: they run first, on the workers, and their values go into
#: the plan, so a subquery with no row gives NULL, as single-node does.
SCALAR_SUBQUERIES = [
    "SELECT id FROM t WHERE c2 > (SELECT avg(c2) FROM t)",
    "SELECT id FROM t WHERE c1 = (SELECT c1 FROM t WHERE id = 6)",
    "SELECT id, (SELECT a FROM t WHERE id = 99) AS none FROM t",
    "SELECT count(*) AS n FROM t WHERE a IS NULL OR a < (SELECT a FROM t WHERE id = 0)",
    "SELECT id FROM t WHERE c1 = (SELECT c2 FROM t WHERE id = (SELECT max(c1) FROM t))",
    "SELECT sum(id) AS s FROM (SELECT id, c1 FROM t WHERE c2 < (SELECT max(c2) FROM t)) s "
    "WHERE c1 > (SELECT min(c1) FROM t)",
]


@pytest.mark.parametrize("sql", SCALAR_SUBQUERIES)
def test_scalar_subqueries_run_on_workers(both, sql):
    ctx, dctx = both
    assert_same(ctx, dctx, sql)
    assert ran_on(dctx.sql(sql)) == "workers"
    assert is_distributed(dctx.explain(sql))


def test_scalar_subquery_of_more_than_one_row_fails_as_single_node(both, caplog):
    ctx, dctx = both
    sql = "SELECT id FROM t WHERE c1 = (SELECT c1 FROM t WHERE c2 = 1)"
    with pytest.raises(Exception, match="more than one row") as single:
        ctx.sql(sql).collect()
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed_py"):
        df = dctx.sql(sql)
        assert ran_on(df) == "coordinator"  # planning ran the subquery first
    assert "scalar subquery fails" in caplog.text
    # The error is the query's, given when it runs.
    with pytest.raises(Exception) as distributed:
        df.collect()
    assert str(distributed.value) == str(single.value)


def test_unbounded_table_answers(tmp_path: Path):
    data = tmp_path / "s.csv"
    data.write_text("a,b\n1,x\n2,y\n3,z\n")
    ctx = SessionContext()
    ctx.sql(
        f"CREATE UNBOUNDED EXTERNAL TABLE s (a INT, b VARCHAR) STORED AS CSV LOCATION '{data}' "
        "OPTIONS ('format.has_header' 'true')"
    ).collect()
    # An unbounded (streaming) table made by SQL over a local file is read on the workers
    # (its scan travels as the file it reads: tests/queries/test_stream_tables.py).
    assert_same(ctx, DistributedContext(ctx), "SELECT a, b FROM s WHERE a > 1", None)


def test_fallback_error_keeps_the_strict_refusal():
    ctx = session()
    dctx = DistributedContext(ctx, config=DistributedConfig(fallback="error"))
    with pytest.raises(UnsupportedTableError, match=LOST_TYPE_REASON):
        dctx.sql(LOST_TYPE)
    dctx.sql("SET distributed.fallback = 'coordinator'")
    assert dctx.sql(LOST_TYPE).count() == 1


#: Ways to read a result: all at once, or batch by batch as a stream.
READS: dict[str, Callable[[DataFrame], object]] = {
    "collect": lambda df: df.collect(),
    "iterate": lambda df: list(df),
    "execute_stream": lambda df: list(df.execute_stream()),
    "partitioned": lambda df: [list(s) for s in df.execute_stream_partitioned()],
    "async_iterate": lambda df: asyncio.run(_drain(df)),
}


async def _drain(df: DataFrame) -> list[object]:
    return [batch async for batch in df]


@pytest.mark.parametrize("read", READS)
def test_errors_read_as_single_node(both, read):
    ctx, dctx = both
    for sql in ["SELECT cast(x AS int) FROM t", "SELECT 1 / (id - id) FROM t"]:
        with pytest.raises(Exception) as single:
            READS[read](ctx.sql(sql))
        with pytest.raises(Exception) as distributed:
            READS[read](dctx.sql(sql))
        assert type(distributed.value) is type(single.value)
        text = str(distributed.value)
        assert text.startswith(str(single.value)), (text, str(single.value))
        assert "FFI error" not in text and "External error" not in text
        assert "on worker" in text


def test_constant_cast_error_is_the_cast_error():
    ctx = SessionContext()
    with pytest.raises(Exception) as single:
        ctx.sql("SELECT cast('x' AS int)").collect()
    dctx = DistributedContext(ctx)
    df = dctx.sql("SELECT cast('x' AS int)")
    # Its constant folding fails while planning: it runs (and fails) as single-node does.
    assert_ran_on_coordinator(df, because="physical plan cannot be made")
    with pytest.raises(Exception) as distributed:
        df.collect()
    assert type(distributed.value) is type(single.value)
    assert str(distributed.value).startswith(str(single.value))


def test_frame_outlives_its_unreferenced_session():
    def make():
        return DistributedContext(SessionContext()).sql("SELECT 1 AS x")

    df = make()
    gc.collect()
    assert ran_on(df) == "workers"
    assert df.to_pydict() == {"x": [1]}


def test_concurrent_queries_creating_views(tpch_dir: Path):
    from harness import tpch

    errors: list[BaseException] = []
    results: list[pa.Table] = []

    def run(i: int) -> None:
        try:
            ctx = SessionContext()
            tpch.register(ctx, tpch_dir)
            dctx = DistributedContext(ctx)
            ctx.sql(
                f"CREATE VIEW revenue{i} AS SELECT l_suppkey AS supplier_no, "
                "sum(l_extendedprice * (1 - l_discount)) AS total_revenue FROM lineitem "
                "GROUP BY l_suppkey"
            ).collect()
            sql = (
                f"SELECT s_suppkey, total_revenue FROM supplier, revenue{i} "
                f"WHERE s_suppkey = supplier_no AND total_revenue = "
                f"(SELECT max(total_revenue) FROM revenue{i}) ORDER BY s_suppkey"
            )
            results.append(assert_distributed_equal(ctx, dctx, sql))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    assert len(results) == 4 and all(r == results[0] for r in results)


@pytest.fixture
def one_file(
    workers: LocalCluster | None, tmp_path: Path
) -> tuple[SessionContext, DistributedContext]:
    """A small CSV table (DataFusion scans it as one partition), split into tasks anyway."""
    path = tmp_path / "small.csv"
    rows = [f"{i},{(i * 7919) % 1000},{i % 5}" for i in range(400)]
    path.write_text("id,v,g\n" + "\n".join(rows) + "\n")
    ctx = SessionContext()
    ctx.register_csv("small", str(path))
    split = DistributedConfig(file_scan_config_bytes_per_partition=1)
    return ctx, DistributedContext(ctx, workers=workers, config=split)


ONE_PARTITION_READERS = [
    "SELECT count(*) AS n FROM (SELECT id FROM small LIMIT 7)",
    "SELECT array_agg(v) AS a FROM (SELECT v FROM small ORDER BY v, id LIMIT 3)",
    "SELECT id, v FROM small ORDER BY v DESC, id LIMIT 5",
    "SELECT id, sum(v) OVER (PARTITION BY g ORDER BY id) AS s FROM small ORDER BY id LIMIT 9",
    "SELECT g, count(*) AS n, sum(v) AS s FROM small GROUP BY g",
]


@pytest.mark.parametrize("sql", ONE_PARTITION_READERS)
def test_a_one_partition_scan_split_into_tasks_keeps_its_limits_and_order(one_file, sql):
    """DataFusion plans a one-partition scan without the merges several partitions need (a
    LIMIT pushed into the scan, a sort or window right on it); split into tasks, each task
    limited or sorted its own share (a LIMIT 1 gave one row per task)."""
    ctx, dctx = one_file
    split = dctx.explain("SELECT g, count(*) FROM small GROUP BY g")
    assert re.search(r"\bt1:", split), f"the scan is not split:\n{split}"
    assert_same(ctx, dctx, sql)
    assert ran_on(dctx.sql(sql)) == "workers"


def test_a_limit_pushed_into_a_split_scan_still_limits_the_result(one_file):
    ctx, dctx = one_file
    for n in (1, 3):
        df = dctx.sql(f"SELECT id FROM small LIMIT {n}")
        assert df.count() == n
        assert len(df.to_pylist()) == n
        assert is_distributed(dctx.explain(df))
