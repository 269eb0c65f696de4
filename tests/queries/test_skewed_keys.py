"""Skewed join keys split across a partitioned join's tasks (issue 58, part 1).

``facts`` holds 200,000 rows; half of them have the key 7, the rest are spread over 20,500
keys (500 of them with no row in ``dims``). A partitioned join sends each key to one
partition, so one task would join half the rows. Sampled first, key 7 is hot: its probe rows
are spread over the join's partitions by a salt, its build rows sent to each. Every answer is
single-node's.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SPLIT_CONFIG
from datafusion import SessionContext, col
from datafusion import functions as f

from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_ran_on_workers, assert_same_rows

ROWS = 200_000
HOT = 7

SQL = """
SELECT d_name, count(*) AS n, sum(f_val) AS total
FROM facts JOIN dims ON f_key = d_key
GROUP BY d_name
ORDER BY d_name
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("skewed_keys")
    rng = np.random.default_rng(58)
    # Keys from 20,000 up have no row in dims.
    keys = rng.integers(0, 20_500, ROWS)
    keys[rng.random(ROWS) < 0.5] = HOT
    # A second key column: the hot pair is (7, 'b'), and 7 with another tag is not hot.
    tags = np.where((keys == HOT) & (rng.random(ROWS) < 0.1), "c", "b")
    (root / "facts").mkdir()
    for part in range(4):
        rows = slice(part * ROWS // 4, (part + 1) * ROWS // 4)
        table = pa.table({"f_key": keys[rows], "f_tag": tags[rows], "f_val": keys[rows] % 101})
        pq.write_table(table, root / "facts" / f"{part}.parquet", row_group_size=10_000)
    dims = pa.table(
        {
            "d_key": np.arange(20_000),
            "d_tag": ["b"] * 20_000,
            "d_name": [f"name-{k % 50}" for k in range(20_000)],
        }
    )
    pq.write_table(dims, root / "dims.parquet")
    uniform = pa.table({"u_key": rng.integers(0, 20_000, ROWS), "u_val": np.arange(ROWS)})
    pq.write_table(uniform, root / "uniform.parquet", row_group_size=10_000)
    return root


def session(data: Path) -> SessionContext:
    ctx = SessionContext()
    ctx.register_parquet("facts", str(data / "facts"))
    ctx.register_parquet("dims", str(data / "dims.parquet"))
    ctx.register_parquet("uniform", str(data / "uniform.parquet"))
    # Every join of more than 100 rows planned partitioned (as TPC-H's at SF10).
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold = 100")
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 100")
    return ctx


#: Scans split into tasks from 16 KiB (the join runs in tasks on both workers), and every hot
#: key split, however few its bytes (a split pays from 256 MiB of them by default).
CONFIG = replace(SPLIT_CONFIG, adaptive_skew_bytes=0)


@pytest.fixture
def both(data: Path, workers: LocalCluster | None) -> tuple[SessionContext, DistributedContext]:
    ctx = session(data)
    return ctx, DistributedContext(ctx, workers=workers, config=CONFIG)


def same_rows_on_workers(
    ctx: SessionContext, dctx: DistributedContext, sql: str, *, ordered: bool = False
) -> str:
    """Runs ``sql`` on ``dctx``: single-node's rows, on the workers; returns its plan."""
    df = dctx.sql(sql)
    assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=ordered)
    assert_ran_on_workers(df, dctx)
    return dctx.explain(df)


def split_line(plan: str) -> str:
    (line,) = [x for x in plan.splitlines() if "skewed keys split" in x]
    return line


def test_a_hot_key_is_split_across_the_joins_tasks(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both
    plan = same_rows_on_workers(ctx, dctx, SQL, ordered=True)
    line = split_line(plan)
    # Only key 7 is hot; it held about half of the sampled probe rows.
    shown = r"join on d_key@\d+ = f_key@\d+: skewed keys split \d+ ways: 7 held (\d+) of (\d+)"
    m = re.search(shown, line)
    assert m, line
    held, sampled = int(m.group(1)), int(m.group(2))
    assert 0.4 < held / sampled < 0.6, line
    # Both sides are shuffled on the key and its salt; the join's tasks span both workers'.
    join = [x for x in plan.splitlines() if "HashJoinExec" in x]
    assert len(join) == 1 and "mode=Partitioned" in join[0] and "__dfdpy_salt" in join[0]
    assert len(re.findall(r"Hash\(\[\w_key@\d+, __dfdpy_salt@\d+\]", plan)) == 2, plan


@pytest.mark.parametrize(
    "sql",
    [
        # Each join type a hot key may be split in: its build rows are never emitted alone.
        "SELECT count(*) AS n, count(d_key) AS m FROM dims RIGHT JOIN facts ON f_key = d_key",
        "SELECT count(*) AS n FROM facts WHERE EXISTS (SELECT 1 FROM dims WHERE d_key = f_key)",
        "SELECT count(*) AS n FROM facts WHERE NOT EXISTS (SELECT 1 FROM dims WHERE d_key = f_key)",
        # A join filter, and the hot key's build row among others.
        "SELECT d_name, sum(f_val) AS s FROM facts JOIN dims "
        "ON f_key = d_key AND f_val > d_key % 5 GROUP BY d_name",
    ],
)
def test_every_join_type_a_hot_key_is_split_in_gives_single_nodes_rows(
    both: tuple[SessionContext, DistributedContext], sql: str
) -> None:
    ctx, dctx = both
    plan = same_rows_on_workers(ctx, dctx, sql)
    assert "skewed keys split" in plan, plan


def test_a_join_that_emits_build_rows_is_not_split(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    """A LEFT join (``dims`` built, ``facts`` probed) emits unmatched build rows: a hot key's
    build rows, sent to every part, would be emitted once per part."""
    ctx, dctx = both
    sql = "SELECT count(*) AS n, count(f_key) AS m FROM dims LEFT JOIN facts ON f_key = d_key"
    plan = same_rows_on_workers(ctx, dctx, sql)
    assert "skewed keys split" not in plan, plan


def test_a_hot_pair_of_keys_is_split(both: tuple[SessionContext, DistributedContext]) -> None:
    ctx, dctx = both
    sql = """SELECT d_name, count(*) AS n FROM facts JOIN dims
             ON f_key = d_key AND f_tag = d_tag GROUP BY d_name"""
    plan = same_rows_on_workers(ctx, dctx, sql)
    assert re.search(r"skewed keys split \d+ ways: \(7, b\) held", split_line(plan)), plan


def test_uniform_keys_are_not_split(both: tuple[SessionContext, DistributedContext]) -> None:
    ctx, dctx = both
    sql = "SELECT d_name, count(*) AS n FROM uniform JOIN dims ON u_key = d_key GROUP BY d_name"
    plan = same_rows_on_workers(ctx, dctx, sql)
    assert "mode=Partitioned" in plan and "skewed keys split" not in plan, plan


def test_a_hot_key_of_few_bytes_is_reported_not_split(
    data: Path, workers: LocalCluster | None
) -> None:
    """By default a split pays from 256 MiB of a hot key's rows: key 7's ~1.6 MB here are
    shown as found, and its join is left as planned."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)
    plan = same_rows_on_workers(ctx, dctx, SQL, ordered=True)
    assert "__dfdpy_salt" not in plan, plan
    (line,) = [x for x in plan.splitlines() if "skewed keys not split" in x]
    assert re.search(r"7 held \d+ of \d+ sampled probe rows, about \d+ bytes", line), line
    assert "under the 268435456 a split pays from (distributed.adaptive_skew_bytes)" in line
    dctx.sql("SET distributed.adaptive_skew_bytes = 1000")
    assert "skewed keys split" in dctx.explain(SQL)


def test_adaptive_false_leaves_a_hot_key_in_one_partition(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both
    dctx.sql("SET distributed.adaptive = false")
    plan = same_rows_on_workers(ctx, dctx, SQL, ordered=True)
    assert "__dfdpy_salt" not in plan and "planned from real sizes" not in plan, plan


def test_the_dataframe_api_splits_a_hot_key_too(
    both: tuple[SessionContext, DistributedContext],
) -> None:
    ctx, dctx = both

    def query(c: SessionContext | DistributedContext) -> pa.Table:
        joined = c.table("facts").join(c.table("dims"), left_on="f_key", right_on="d_key")
        counts = joined.aggregate([col("d_name")], [f.sum(col("f_val")).alias("s")])
        return counts.sort(col("d_name"))

    df = query(dctx)
    assert_same_rows(df.to_arrow_table(), query(ctx).to_arrow_table(), ordered=True)
    assert_ran_on_workers(df, dctx)
    assert "skewed keys split" in dctx.explain(df)


def test_a_hot_key_of_an_in_memory_table_is_split(data: Path, workers: LocalCluster | None) -> None:
    """An in-memory table over ``keep_tables_above`` is kept on the workers; its exact size
    makes it the probe side of its join (the smaller table is built), and its hot key is
    sampled there and split."""
    ctx = session(data)
    facts = pq.read_table(data / "facts")
    ctx.deregister_table("facts")
    ctx.from_arrow(facts, name="facts")
    dctx = DistributedContext(ctx, workers=workers, config=CONFIG)
    plan = same_rows_on_workers(ctx, dctx, SQL, ordered=True)
    assert "KeptScanExec: table=facts" in plan, plan
    assert re.search(r"join on d_key@\d+ = f_key@\d+: skewed keys split \d+ ways: 7 held", plan)
