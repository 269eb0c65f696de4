"""What DataFusion 55's plan serialisation drops and we carry to the workers anyway: window
functions the planner reversed, ``IGNORE NULLS`` of window functions, ``FILTER (WHERE ...)``
of window aggregates, ``GROUPING SETS (())``, recursive queries (``WITH RECURSIVE``) and sorts
that extend an input's order (``PartialSortExec``). Each
query runs under ``fallback="error"`` (a query that could not be distributed raises), is
asserted to run on the workers, and answers as single-node on both cluster kinds."""

from __future__ import annotations

from pathlib import Path

import pytest
from datafusion import SessionContext, col
from datafusion import functions as f

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

#: Windows over TPC-H lineitem: the second of each pair is planned over the input sorted for
#: the first, so the planner reverses it (`nth_value` then counts from the other end).
REVERSED = [
    "SELECT l_orderkey, l_linenumber, "
    "nth_value(l_quantity, 2) OVER (ORDER BY l_orderkey, l_linenumber) AS a, "
    "nth_value(l_quantity, 2) OVER (ORDER BY l_orderkey DESC, l_linenumber DESC) AS b "
    "FROM lineitem WHERE l_orderkey < 200 ORDER BY l_orderkey, l_linenumber",
    "SELECT l_orderkey, l_linenumber, "
    "lag(l_quantity, 2) OVER (ORDER BY l_orderkey, l_linenumber) AS a, "
    "lag(l_quantity, 1) OVER (ORDER BY l_orderkey DESC, l_linenumber DESC) AS b "
    "FROM lineitem WHERE l_orderkey < 200 ORDER BY l_orderkey, l_linenumber",
]

#: `IGNORE NULLS` of window functions (not of window aggregates, which serialise it).
IGNORE_NULLS = [
    "SELECT l_orderkey, l_linenumber, "
    "lag(CASE WHEN l_linenumber % 3 = 0 THEN l_quantity END) IGNORE NULLS "
    "OVER (PARTITION BY l_returnflag ORDER BY l_orderkey, l_linenumber) AS l "
    "FROM lineitem WHERE l_orderkey < 300 ORDER BY l_orderkey, l_linenumber",
    "SELECT o_orderkey, first_value(CASE WHEN o_orderkey % 7 = 0 THEN o_totalprice END) "
    "IGNORE NULLS OVER (PARTITION BY o_orderstatus ORDER BY o_orderkey) AS f "
    "FROM orders ORDER BY o_orderkey LIMIT 500",
]

#: `FILTER` of window aggregates, partitioned (a shuffle between stages) and not.
FILTERS = [
    "SELECT l_orderkey, l_linenumber, sum(l_quantity) FILTER (WHERE l_returnflag = 'R') "
    "OVER (PARTITION BY l_linestatus ORDER BY l_orderkey, l_linenumber) AS s, "
    "count(*) FILTER (WHERE l_discount > 0.05) OVER (PARTITION BY l_linestatus) AS c "
    "FROM lineitem WHERE l_orderkey < 500 ORDER BY l_orderkey, l_linenumber",
    "SELECT o_orderkey, avg(o_totalprice) FILTER (WHERE o_orderpriority LIKE '1%') OVER "
    "(ORDER BY o_orderkey ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS a "
    "FROM orders ORDER BY o_orderkey LIMIT 400",
]

GROUPING_SETS = [
    "SELECT count(*), sum(l_quantity) FROM lineitem GROUP BY GROUPING SETS (())",
    "SELECT count(*) FROM lineitem WHERE l_quantity < 0 GROUP BY GROUPING SETS (())",
    "SELECT l_returnflag, count(*) FROM lineitem GROUP BY GROUPING SETS ((), (l_returnflag)) "
    "ORDER BY 1 NULLS FIRST",
]

RECURSIVE = [
    # Numbers, then read by a distributed join and aggregate.
    "WITH RECURSIVE n(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM n WHERE k < 24) "
    "SELECT n.k, count(*) AS c FROM n JOIN nation ON nation.n_nationkey = n.k "
    "GROUP BY n.k ORDER BY n.k",
    # A tree walk over a table (UNION: distinct rows), with a join in the recursive term.
    "WITH RECURSIVE reach(k) AS (SELECT n_nationkey FROM nation WHERE n_nationkey = 0 "
    "UNION SELECT b.n_nationkey FROM reach JOIN nation a ON a.n_nationkey = reach.k "
    "JOIN nation b ON b.n_regionkey = a.n_regionkey) SELECT k FROM reach ORDER BY k",
    # The recursive term reads one column of two.
    "WITH RECURSIVE r AS (SELECT r_regionkey AS k, r_name AS name FROM region "
    "UNION ALL SELECT k + 10, 'x' FROM r WHERE k < 30) SELECT * FROM r ORDER BY k, name",
]


@pytest.mark.parametrize("sql", REVERSED)
def test_windows_the_planner_reversed_run_on_the_workers(strict, sql: str) -> None:
    ctx, dctx = strict
    assert_distributed_equal(ctx, dctx, sql)


@pytest.mark.parametrize("sql", IGNORE_NULLS)
def test_ignore_nulls_of_window_functions_runs_on_the_workers(strict, sql: str) -> None:
    ctx, dctx = strict
    result = assert_distributed_equal(ctx, dctx, sql)
    # The modifier matters for these rows: respecting nulls answers otherwise.
    respecting = ctx.sql(sql.replace(" IGNORE NULLS", "")).to_arrow_table()
    assert not result.equals(respecting)


@pytest.mark.parametrize("sql", FILTERS)
def test_filters_of_window_aggregates_run_on_the_workers(strict, sql: str) -> None:
    ctx, dctx = strict
    result = assert_distributed_equal(ctx, dctx, sql)
    # The filter matters for these rows: without it the answer is another.
    unfiltered = sql.replace(" FILTER (WHERE l_returnflag = 'R')", "").replace(
        " FILTER (WHERE o_orderpriority LIKE '1%')", ""
    )
    assert not result.equals(ctx.sql(unfiltered).to_arrow_table())
    assert "WindowFilters" in str(dctx.explain(sql))


@pytest.mark.parametrize("sql", GROUPING_SETS)
def test_an_empty_grouping_set_runs_on_the_workers(strict, sql: str) -> None:
    ctx, dctx = strict
    result = assert_distributed_equal(ctx, dctx, sql)
    assert result.num_rows >= 1  # the empty set gives its row even over no input


@pytest.mark.parametrize("sql", RECURSIVE)
def test_recursive_queries_run_on_the_workers(strict, sql: str) -> None:
    ctx, dctx = strict
    result = assert_distributed_equal(ctx, dctx, sql)
    assert result.num_rows > 1
    plan = dctx.explain(sql)
    assert "RecursiveQueryExec" in str(plan)


def test_a_recursive_query_in_the_dataframe_api(strict) -> None:
    ctx, dctx = strict
    sql = "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k * 2 FROM n WHERE k < 1000) "
    sql += "SELECT k FROM n"
    single = ctx.sql(sql).aggregate([], [f.sum(col("k")).alias("s")]).to_arrow_table()
    df = dctx.sql(sql).aggregate([], [f.sum(col("k")).alias("s")])
    assert_ran_on_workers(df, dctx, stages=False)
    assert df.to_arrow_table().equals(single)


#: Sorts extending the order an unbounded table declares (`WITH ORDER (a, b)`): single-node
#: plans a `PartialSortExec` (a full sort would wait for the stream's end), which DataFusion
#: 55's encoding has no form for.
PARTIAL_SORTS = [
    "SELECT a, b, d FROM ordered ORDER BY a, b, d",
    "SELECT a, b, d FROM ordered ORDER BY a, b, d DESC NULLS FIRST LIMIT 17",
    "SELECT b, a, d + 1 AS e FROM ordered WHERE d % 3 <> 0 ORDER BY a, b, e DESC",
]


@pytest.fixture(scope="module")
def ordered_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ordered") / "ordered.csv"
    rows = [
        f"{i // 400},{(i // 40) % 10},{(i * 7919) % 1000 if i % 13 else ''}" for i in range(4000)
    ]
    path.write_text("a,b,d\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("sql", PARTIAL_SORTS)
def test_sorts_extending_a_declared_order_run_on_the_workers(
    ordered_csv: Path, workers: LocalCluster | None, sql: str
) -> None:
    ctx = SessionContext()
    ctx.sql(
        "CREATE UNBOUNDED EXTERNAL TABLE ordered (a INT, b INT, d INT) STORED AS CSV "
        "WITH ORDER (a, b) "
        f"LOCATION '{ordered_csv}' OPTIONS ('format.has_header' 'true')"
    )
    assert "PartialSortExec" in ctx.sql(sql).execution_plan().display_indent()
    dctx = DistributedContext(ctx, workers=workers, config=DistributedConfig(fallback="error"))
    result = assert_distributed_equal(ctx, dctx, sql, ordered=True, stages=False)
    assert result.num_rows > 10
    assert "PartialSortExec" in str(dctx.explain(sql))
