"""Joins planned from the sizes their inputs really have (issue 58, part 1).

``dims`` behind ``d_name LIKE 'narrow%'`` is guessed at a fifth of its 20,000 rows, so the
session plans its join with ``facts`` partitioned (both sides shuffled). Run first, the
filtered side is 1,000 rows: the join broadcasts them instead, and ``facts``' scan, in the
join's own stage now, is pruned by the join's dynamic filter (``facts`` is ordered by the join
key, 40 row groups of 500 keys each; the 1,000 keys fall in two of them).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SPLIT_CONFIG
from datafusion import SessionContext, col, lit
from datafusion import functions as f

from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_ran_on_workers, assert_same_rows

KEYS = 20_000
NARROW = range(5_000, 6_000)

SQL = """
SELECT d_name, count(*) AS n, sum(f_val) AS total
FROM facts JOIN dims ON f_key = d_key
WHERE d_name LIKE 'narrow%'
GROUP BY d_name
ORDER BY d_name
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("adaptive_joins")
    (root / "facts").mkdir()
    keys = pa.array(range(KEYS), pa.int64())
    # Ten rows per key, ordered by key, in four files of ten row groups each.
    f_key = pa.array([k for k in range(KEYS) for _ in range(10)], pa.int64())
    f_val = pa.compute.bit_wise_and(f_key, 255)
    per_file = len(f_key) // 4
    for part in range(4):
        rows = slice(part * per_file, (part + 1) * per_file)
        table = pa.table({"f_key": f_key[rows], "f_val": f_val[rows]})
        pq.write_table(table, root / "facts" / f"{part}.parquet", row_group_size=5_000)
    names = [f"narrow-{k % 7}" if k in NARROW else f"wide-{k % 7}" for k in range(KEYS)]
    kinds = pa.array([k % 7 for k in range(KEYS)], pa.int64())
    pq.write_table(
        pa.table({"d_key": keys, "d_name": names, "d_kind": kinds}), root / "dims.parquet"
    )
    labels = {"kind": pa.array(range(7), pa.int64()), "label": [f"kind-{i}" for i in range(7)]}
    pq.write_table(pa.table(labels), root / "kinds.parquet")
    return root


def session(data: Path) -> SessionContext:
    ctx = SessionContext()
    ctx.register_parquet("facts", str(data / "facts"))
    ctx.register_parquet("dims", str(data / "dims.parquet"))
    ctx.register_parquet("kinds", str(data / "kinds.parquet"))
    # Single-node plans every join of more than 100 rows partitioned (as TPC-H's at SF10).
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold = 100")
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 100")
    return ctx


@pytest.fixture
def both(data: Path, workers: LocalCluster | None) -> tuple[SessionContext, DistributedContext]:
    ctx = session(data)
    # Scans split into tasks from 16 KiB: facts' scan runs on both workers.
    return ctx, DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)


def run_partitioned(ctx: SessionContext, dctx: DistributedContext, sql: str, setting: str) -> str:
    """Runs ``sql`` after ``setting``: single-node's rows, on the workers, and its join left
    partitioned; returns the plan."""
    dctx.sql(setting)
    df = dctx.sql(sql)
    assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=False)
    assert_ran_on_workers(df, dctx)
    plan = dctx.explain(df)
    assert "mode=Partitioned" in join_line(plan)
    return plan


def join_line(plan: str) -> str:
    joins = [x for x in plan.splitlines() if "HashJoinExec" in x]
    (line,) = [x for x in joins if re.search(r"on=\[\([^)]*\bd_key@", x)]
    return line


def facts_read(plan: str) -> int:
    """The row groups of ``facts`` its scan read, from an analyzed plan's metrics: those of
    the files (ranges) it did not prune whole that it did not prune one by one."""
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        leaf = "DistributedLeafExec" in line and "/facts/" in lines[i + 1]
        if "metrics=[" in line and ("/facts/" in line or leaf):
            m = re.search(r"row_groups_pruned_statistics=(\d+) total → (\d+) matched", line)
            assert m, line
            return int(m.group(2))
    raise AssertionError(f"no facts scan with metrics in:\n{plan}")


def test_a_small_filtered_side_is_broadcast_once_it_ran(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both
    expected = ctx.sql(SQL).to_arrow_table()
    assert "mode=Partitioned" in join_line(ctx.sql("EXPLAIN " + SQL).to_pandas()["plan"].iloc[-1])

    df = dctx.sql(SQL)
    assert_same_rows(df.to_arrow_table(), expected, ordered=True)
    assert_ran_on_workers(df, dctx)
    plan = dctx.explain(df, analyze=True)
    assert "mode=CollectLeft" in join_line(plan)
    assert re.search(
        r"join on d_key@\d+ = f_key@\d+: broadcast; its build side ran first: 1000 rows", plan
    ), plan
    # The join's dynamic filter, filled from the rows that ran first, pruned facts' scan: of
    # its 40 row groups it read the 2 holding the build side's keys (and perhaps the next of
    # a range a task started within).
    assert facts_read(plan) <= 4, plan


def test_adaptive_false_plans_from_statistics_as_before(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both
    dctx.sql("SET distributed.adaptive = false")
    assert dctx.config.adaptive is False
    df = dctx.sql(SQL)
    assert_same_rows(df.to_arrow_table(), ctx.sql(SQL).to_arrow_table(), ordered=False)
    assert_ran_on_workers(df, dctx)
    plan = dctx.explain(df, analyze=True)
    assert "mode=Partitioned" in join_line(plan)
    assert "planned from real sizes" not in plan
    # Across a shuffle, the join's filter never reaches facts' scan: all 40 row groups read.
    assert facts_read(plan) == 40, plan


def test_a_side_over_the_limit_stays_partitioned(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both
    # 'wide%' keeps 19,000 of dims' rows (guessed at 4,000): over 100 kB once it ran.
    sql = SQL.replace("narrow%", "wide%")
    plan = run_partitioned(ctx, dctx, sql, "SET distributed.adaptive_broadcast_bytes = 100000")
    assert "partitioned; its build side ran first and passed 100000 bytes" in plan, plan


def test_a_side_estimated_far_over_the_limit_is_not_run_first(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    """A side that must finish its work before its first row (an aggregate) is not run first
    when its estimate is over the limit; a streaming one always is (it stops at the
    limit)."""
    ctx, dctx = both
    sql = """SELECT count(*) AS n, sum(f_val) AS total FROM facts JOIN
             (SELECT d_key, max(d_name) AS d_name FROM dims WHERE d_name LIKE 'narrow%'
              GROUP BY d_key) d ON f_key = d_key"""
    plan = run_partitioned(ctx, dctx, sql, "SET distributed.adaptive_broadcast_bytes = 1000")
    assert re.search(r"partitioned; its build side is estimated at \d+ bytes", plan), plan


def test_a_side_estimated_from_sizes_alone_over_the_limit_is_not_run_first(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    """A build side with no filter to guess (dims joined with its 7 kinds) is estimated from
    its inputs' sizes: within the limit it runs first and is broadcast; over it, it is not
    run first (it would pass the limit only once its work was done)."""
    ctx, dctx = both
    sql = """SELECT label, count(*) AS n, sum(f_val) AS total FROM facts JOIN
             (SELECT d_key, label FROM dims JOIN kinds ON d_kind = kind) d ON f_key = d_key
             GROUP BY label ORDER BY label"""
    df = dctx.sql(sql)
    assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=True)
    assert_ran_on_workers(df, dctx)
    assert "broadcast; its build side ran first: 20000 rows" in dctx.explain(df)

    plan = run_partitioned(ctx, dctx, sql, "SET distributed.adaptive_broadcast_bytes = 1000")
    assert re.search(
        r"partitioned; its build side is estimated at \d+ bytes from its inputs' sizes "
        r"\(no filter to guess\), over the 1000 bytes it would broadcast: it was not run first",
        plan,
    ), plan


def test_a_frame_built_with_the_dataframe_api_is_not_run_first_either(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    """The same side as above, joined through the DataFrame API (``dctx.table``)."""
    ctx, dctx = both

    def query(c: SessionContext | DistributedContext) -> pa.Table:
        kinds = c.table("dims").join(c.table("kinds"), left_on="d_kind", right_on="kind")
        joined = c.table("facts").join(kinds, left_on="f_key", right_on="d_key")
        counts = joined.aggregate([col("label")], [f.count(col("f_val")).alias("n")])
        return counts.sort(col("label"))

    dctx.sql("SET distributed.adaptive_broadcast_bytes = 1000")
    df = query(dctx)
    assert_same_rows(df.to_arrow_table(), query(ctx).to_arrow_table(), ordered=True)
    assert_ran_on_workers(df, dctx)
    plan = dctx.explain(df)
    assert "mode=Partitioned" in join_line(plan)
    assert "from its inputs' sizes (no filter to guess)" in plan, plan


def test_the_dataframe_api_is_planned_from_real_sizes_too(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both

    def query(c: SessionContext | DistributedContext) -> pa.Table:
        dims = c.table("dims").filter(f.starts_with(col("d_name"), lit("narrow")))
        joined = c.table("facts").join(dims, left_on="f_key", right_on="d_key")
        counts = joined.aggregate([col("d_name")], [f.count(col("f_val")).alias("n")])
        return counts.sort(col("d_name"))

    df = query(dctx)
    assert_same_rows(df.to_arrow_table(), query(ctx).to_arrow_table(), ordered=True)
    assert_ran_on_workers(df, dctx)
    assert "broadcast; its build side ran first: 1000 rows" in dctx.explain(df)


@pytest.mark.parametrize(
    "sql",
    [
        # Each join type a broadcast may take, and one it may not (LEFT emits build rows).
        "SELECT count(*) AS n FROM dims RIGHT JOIN facts "
        "ON f_key = d_key AND d_name LIKE 'narrow%'",
        "SELECT count(*) AS n FROM facts WHERE f_key IN "
        "(SELECT d_key FROM dims WHERE d_name LIKE 'narrow%')",
        "SELECT count(*) AS n FROM facts WHERE f_key NOT IN "
        "(SELECT d_key FROM dims WHERE d_name LIKE 'narrow%')",
        "SELECT count(*) AS n, count(f_key) AS m FROM (SELECT * FROM dims WHERE d_name LIKE "
        "'narrow%') d LEFT JOIN facts ON f_key = d_key",
        "SELECT d_name, count(*) AS n FROM facts JOIN dims ON f_key = d_key AND f_val > 200 "
        "WHERE d_name LIKE '%-3' GROUP BY d_name",
    ],
)
def test_every_join_type_gives_single_nodes_rows(
    both: tuple[SessionContext, DistributedContext], sql: str
) -> None:
    ctx, dctx = both
    df = dctx.sql(sql)
    assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=False)
    assert_ran_on_workers(df, dctx)


def test_an_error_in_the_side_run_first_is_single_nodes_error(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both
    sql = SQL.replace("WHERE", "WHERE 10 / (d_key - d_key) > 1 AND")
    with pytest.raises(Exception, match="Divide by zero") as single:
        ctx.sql(sql).collect()
    with pytest.raises(Exception, match="Divide by zero") as ours:
        dctx.sql(sql).collect()
    assert type(ours.value) is type(single.value)
    # It failed when its build side ran first, and so ran single-node, which raised.
    assert "a join's build side fails when run first" in dctx.explain(sql)


def test_without_broadcasts_joins_stay_as_planned(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    """A collected join is correct across tasks only when its build side is broadcast: with
    ``broadcast_joins=False`` no join is changed."""
    ctx, dctx = both
    plan = run_partitioned(ctx, dctx, SQL, "SET distributed.broadcast_joins = false")
    assert "planned from real sizes" not in plan


def test_the_dashboard_shows_each_decision_and_its_size(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    """The query's page on the dashboard (its plan with metrics) names how each join was
    planned and the size that decided it: a broadcast, then a side over the limit."""
    ctx, dctx = both
    wide = SQL.replace("narrow%", "wide%")
    frames = []  # a query's page shows its plan while its frame lives
    with dctx.dashboard() as board:
        for sql, setting in ((SQL, None), (wide, "adaptive_broadcast_bytes = 100000")):
            if setting:
                dctx.sql(f"SET distributed.{setting}")
            df = dctx.sql(sql)
            assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=True)
            assert_ran_on_workers(df, dctx)
            frames.append(df)
        status = json.loads(_get(board.url, "api/status"))
        ids = {" ".join(q["sql"].split()): q["id"] for q in status["queries"]}
        shown = [_get(board.url, f"api/plan?id={ids[' '.join(s.split())]}") for s in (SQL, wide)]
    assert re.search(
        r"Joins planned from real sizes:\n  join on d_key@\d+ = f_key@\d+: broadcast; its build "
        r"side ran first: 1000 rows, \d+ bytes",
        shown[0],
    ), shown[0]
    assert "mode=CollectLeft" in join_line(shown[0])
    assert re.search(r"partitioned; its build side ran first and passed 100000 bytes", shown[1]), (
        shown[1]
    )
    assert "mode=Partitioned" in join_line(shown[1])


def _get(board_url: str, path: str) -> str:
    """``path`` of the dashboard at ``board_url`` (its token, if any, in the query string)."""
    base, _, query = board_url.partition("?")
    sep = "&" if "?" in path else "?"
    url = base + path + (sep + query if query else "")
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.read().decode()
