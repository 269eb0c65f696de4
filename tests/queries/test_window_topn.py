"""Top-N per group under DataFusion's window top-N rule: with
``datafusion.optimizer.enable_window_topn`` on, each form runs on the workers (``fallback=
"error"``), answers single-node's rows, and keeps each task's top K of each group before rows
cross the network."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, col, lit
from datafusion import functions as F

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_ran_on_workers, assert_same_rows

#: Four files of groups 0..39 whose values tie, and are null, now and then: scans split into
#: tasks, and each group is spread over every task.
FILES, ROWS = 4, 3000
CONFIG = DistributedConfig(fallback="error", file_scan_config_bytes_per_partition=1)

INNER = "SELECT pk, val, id, {fn}() OVER (PARTITION BY pk ORDER BY {order}) AS rn FROM t"
FORMS = {
    "row_number": f"SELECT * FROM ({INNER.format(fn='ROW_NUMBER', order='val, id')}) WHERE rn <= 3",
    "row_number below": f"SELECT * FROM ({INNER.format(fn='ROW_NUMBER', order='val, id')}) "
    "WHERE rn < 3",
    "qualify": "SELECT pk, val, id FROM t "
    "QUALIFY ROW_NUMBER() OVER (PARTITION BY pk ORDER BY val, id) <= 3",
    "desc": f"SELECT * FROM ({INNER.format(fn='ROW_NUMBER', order='val DESC, id')}) WHERE rn <= 2",
    "nulls first": "SELECT * FROM ("
    + INNER.format(fn="ROW_NUMBER", order="val ASC NULLS FIRST, id")
    + ") WHERE rn <= 3",
    "desc nulls last": "SELECT * FROM ("
    + INNER.format(fn="ROW_NUMBER", order="val DESC NULLS LAST, id")
    + ") WHERE rn <= 3",
    "rank with ties": f"SELECT * FROM ({INNER.format(fn='RANK', order='val')}) WHERE rn <= 2",
    "running sum beside": "SELECT * FROM (SELECT pk, val, id, "
    "ROW_NUMBER() OVER (PARTITION BY pk ORDER BY id) AS rn, "
    "SUM(val) OVER (PARTITION BY pk ORDER BY id) AS running FROM t) WHERE rn <= 4",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("topn")
    for f in range(FILES):
        ids = range(f * ROWS, (f + 1) * ROWS)
        pq.write_table(
            pa.table({
                "pk": pa.array([(i * 7) % 40 for i in ids], pa.int64()),
                "val": pa.array([None if i % 11 == 0 else (i * 13) % 17 for i in ids], pa.int64()),
                "id": pa.array(ids, pa.int64()),
            }),
            root / f"{f}.parquet",
            row_group_size=500,
        )  # fmt: skip
    return root


def session(data: Path) -> SessionContext:
    ctx = SessionContext()
    ctx.register_parquet("t", str(data))
    ctx.sql("SET datafusion.optimizer.enable_window_topn = true")
    return ctx


@pytest.fixture(scope="module")
def cluster() -> object:
    with LocalCluster(2) as c:
        yield c


@pytest.fixture(params=["embedded", "workers"])
def kind(request: pytest.FixtureRequest) -> LocalCluster | None:
    return request.getfixturevalue("cluster") if request.param == "workers" else None


def _heaps_below_a_shuffle(plan: str) -> tuple[int, bool]:
    """How many top-N heaps the distributed plan has, and whether one is below a network
    shuffle (a stage's heap before its rows move)."""
    lines = plan.splitlines()
    heaps = [i for i, line in enumerate(lines) if "PartitionedTopKExec" in line]
    shuffles = [i for i, line in enumerate(lines) if "NetworkShuffleExec" in line]
    return len(heaps), any(s < h for s in shuffles for h in heaps)


@pytest.mark.parametrize("form", list(FORMS))
def test_top_n_per_group_runs_on_the_workers(data, kind, form):
    ctx = session(data)
    single = ctx.sql(FORMS[form])
    assert "PartitionedTopKExec" in single.execution_plan().display_indent(), (
        "single-node should plan the heap for this form"
    )
    expected = single.to_arrow_table()
    dctx = DistributedContext(ctx, workers=kind, config=CONFIG, progress=False)
    df = dctx.sql(FORMS[form])
    assert_same_rows(df.to_arrow_table(), expected, ordered=False)
    assert_ran_on_workers(df, dctx)
    heaps, before_the_shuffle = _heaps_below_a_shuffle(dctx.explain(df))
    assert heaps == 2 and before_the_shuffle, dctx.explain(df)
    # The setting is the user's again once the query is planned.
    assert ctx.sql("SHOW datafusion.optimizer.enable_window_topn").to_pylist()[0]["value"] == (
        "true"
    )


def test_the_limit_applies_before_rows_cross_the_network(data, cluster):
    """Each task keeps its top K of each group: the shuffle moves at most tasks x groups x K
    rows, not the table."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=cluster, config=CONFIG, progress=False)
    df = dctx.sql(FORMS["row_number"])
    assert df.count() == 40 * 3
    tasks = [m for m in dctx.metrics(df) if m["stage"] != 0]
    leaf = max(m["stage"] for m in tasks)
    sent = sum(m["output_rows"] or 0 for m in tasks if m["stage"] == leaf)
    # At most a heap per partition of each task (2 tasks of 2 partitions) x 40 groups x K=3;
    # without the heaps the scan stage sends all 12,000 rows.
    assert 0 < sent <= 2 * 2 * 40 * 3, tasks


def test_top_n_built_with_the_dataframe_api_runs_on_the_workers(data, kind):
    """The same top-N as a DataFrame-API chain on ``dctx.table``: a window column, then a
    filter on it."""

    def top3(frame):
        rn = F.row_number(partition_by=[col("pk")], order_by=[col("val"), col("id")])
        return frame.select(col("pk"), col("val"), col("id"), rn.alias("rn")).filter(
            col("rn") <= lit(3)
        )

    ctx = session(data)
    expected = top3(ctx.table("t")).to_arrow_table()
    dctx = DistributedContext(ctx, workers=kind, config=CONFIG, progress=False)
    df = top3(dctx.table("t"))
    assert_same_rows(df.to_arrow_table(), expected, ordered=False)
    assert expected.num_rows == 40 * 3
    assert_ran_on_workers(df, dctx)
    heaps, before_the_shuffle = _heaps_below_a_shuffle(dctx.explain(df))
    assert heaps == 2 and before_the_shuffle, dctx.explain(df)
