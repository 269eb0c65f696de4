"""Selective joins filter scans in other stages (issue 16; TPC-DS q72's shape).

Single-node, the ``d_year = 1999`` join's dynamic filter prunes ``sales`` at its scan before
the big ``sales x stock`` join. Distributed, a shuffle sits between them, so the planner
puts a semi join against the same filtered build side right above the ``sales`` scan. These
tests check where it is put (and where it must not be) and that answers stay single-node's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext
from datafusion_distributed_py.testing import is_distributed
from harness.differential import compare

N = 60_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scan_filters")
    i = pa.array(range(N), pa.int64())
    days = pa.compute.multiply(pa.compute.bit_wise_and(i, 1023), 3)  # 0..3069, every 3rd day
    # Some sale dates are NULL: no join matches them, with or without the filter.
    date = pa.array([None if n % 97 == 0 else d for n, d in enumerate(days.to_pylist())])
    item = pa.compute.bit_wise_and(pa.compute.multiply(i, 7919), 4095)
    bits, times = pa.compute.bit_wise_and, pa.compute.multiply
    tables = {
        "sales": {"s_id": i, "s_date": date, "s_item": item, "s_qty": bits(i, 63)},
        "sales2": {"s_id": i, "s_date": days, "s_item": item, "s_qty": bits(i, 31)},
        "stock": {"st_item": item, "st_date": days, "st_qty": bits(times(i, 13), 63)},
    }
    for name, columns in tables.items():
        (root / name).mkdir()
        for part in range(4):  # several files: the scans split across tasks
            rows = slice(part * N // 4, (part + 1) * N // 4)
            table = pa.table({k: v[rows] for k, v in columns.items()})
            pq.write_table(table, root / name / f"{part}.parquet")
    sk = pa.array(range(3650), pa.int64())
    pq.write_table(
        pa.table({"d_sk": sk, "d_year": pa.compute.add(pa.compute.divide(sk, 365), 1995)}),
        root / "dates.parquet",
    )
    return root


def session(data: Path) -> SessionContext:
    ctx = SessionContext()
    for t in ("sales", "sales2", "stock"):
        ctx.register_parquet(t, str(data / t))
    ctx.register_parquet("dates", str(data / "dates.parquet"))
    # The fact tables' joins are shuffled (partitioned); the filtered dimension is collected.
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold = 200000")
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 20000")
    return ctx


@pytest.fixture(params=["embedded", "workers"])
def both(request: pytest.FixtureRequest, data: Path) -> tuple[SessionContext, DistributedContext]:
    ctx = session(data)
    workers = request.getfixturevalue("cluster") if request.param == "workers" else None
    # These tests are about the plan made from statistics: planned from real sizes, the
    # partitioned joins they filter across become broadcasts (tests/queries/
    # test_adaptive_joins.py), and no shuffle is left to filter across.
    return ctx, DistributedContext(ctx, workers=workers, config=DistributedConfig(adaptive=False))


def scan_filters(dctx: DistributedContext, sql: str) -> list[str]:
    """The join keys of the semi joins put above scans, e.g. ``['d_sk=s_date']``."""
    plan = dctx.explain(sql)
    assert is_distributed(plan)
    return [
        f"{m.group(1)}={m.group(2)}"
        for m in re.finditer(r"join_type=RightSemi, on=\[\((\w+)@\d+, (\w+)@\d+\)\]", plan)
    ]


def assert_same(ctx: SessionContext, dctx: DistributedContext, sql: str) -> None:
    outcome = compare(ctx, dctx, sql)
    assert outcome.verdict == "equal", outcome.detail


Q72_SHAPE = """
SELECT d_year, count(*) AS n, sum(st_qty) AS q
FROM sales JOIN stock ON s_item = st_item AND st_qty < s_qty
JOIN dates ON s_date = d_sk
WHERE d_year = 1999
GROUP BY d_year
"""


def test_selective_join_filters_the_scan_across_a_shuffle(both):
    ctx, dctx = both
    assert scan_filters(dctx, Q72_SHAPE) == ["d_sk=s_date"]
    assert_same(ctx, dctx, Q72_SHAPE)


def test_fewer_rows_reach_the_shuffled_join(data):
    """The scan's stage sends on only rows of 1999's dates (about a tenth)."""
    ctx = session(data)
    dctx = DistributedContext(ctx, config=DistributedConfig(adaptive=False))
    df = dctx.sql(Q72_SHAPE)
    df.collect()
    plan = dctx.explain(df, analyze=True)
    semi = re.search(r"join_type=RightSemi.*?output_rows=([\d.]+) ?(K?)", plan)
    assert semi, plan
    rows = float(semi.group(1)) * (1000 if semi.group(2) else 1)
    assert 0 < rows < N / 5


@pytest.mark.parametrize(
    "sql, filters",
    [
        # The key comes through a LEFT JOIN's preserved side, and from its NULL-extended side.
        ("SELECT count(*) AS n FROM sales LEFT JOIN stock ON s_item = st_item AND st_qty < 40 "
         "JOIN dates ON s_date = d_sk WHERE d_year = 1999", ["d_sk=s_date"]),
        ("SELECT count(*) AS n FROM sales LEFT JOIN stock ON s_item = st_item AND st_qty < 40 "
         "JOIN dates ON st_date = d_sk WHERE d_year = 1999", ["d_sk=st_date"]),
        # Through a UNION ALL: both scans are filtered.
        ("SELECT count(*) AS n, sum(s_qty) AS q FROM (SELECT s_date, s_item, s_qty FROM sales "
         "UNION ALL SELECT s_date, s_item, s_qty FROM sales2) s JOIN stock ON s_item = st_item "
         "AND st_qty < s_qty JOIN dates ON s_date = d_sk WHERE d_year = 1999",
         ["d_sk=s_date", "d_sk=s_date"]),
        # A LIMIT, an aggregate or a window between them: fewer rows below would change what
        # they give, so nothing is put there.
        ("SELECT count(*) AS n FROM (SELECT * FROM sales ORDER BY s_id LIMIT 5000) s "
         "JOIN stock ON s_item = st_item JOIN dates ON s_date = d_sk WHERE d_year = 1999", []),
        ("SELECT count(*) AS n FROM (SELECT s_date, s_item, max(s_qty) AS m FROM sales GROUP BY "
         "s_date, s_item) s JOIN stock ON s_item = st_item JOIN dates ON s_date = d_sk "
         "WHERE d_year = 1999", []),
        ("SELECT count(*) AS n, sum(r) AS r FROM (SELECT s_date, s_item, row_number() OVER "
         "(PARTITION BY s_item ORDER BY s_id) AS r FROM sales) s JOIN stock ON s_item = st_item "
         "JOIN dates ON s_date = d_sk WHERE d_year = 1999", []),
        # A build side that is not the same when run twice is never copied.
        ("SELECT count(*) AS n FROM sales JOIN stock ON s_item = st_item JOIN dates "
         "ON s_date = d_sk WHERE d_year = 1999 AND random() < 2", []),
        # A RIGHT join keeps unmatched probe rows: they must all reach it.
        ("SELECT count(*) AS n FROM (SELECT * FROM dates WHERE d_year = 1999) d RIGHT JOIN "
         "(SELECT s_date FROM sales JOIN stock ON s_item = st_item) s ON s_date = d_sk", []),
    ],
)  # fmt: skip
def test_where_filters_go_and_where_they_must_not(both, sql, filters):
    ctx, dctx = both
    assert sorted(scan_filters(dctx, sql)) == filters
    assert_same(ctx, dctx, sql)
    # Planned from real sizes, the answers are the same.
    dctx.config = dctx.config.replace(adaptive=True)
    assert_same(ctx, dctx, sql)
