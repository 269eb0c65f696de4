"""A query's own failure on a worker is the query's error, never a dead worker: it
is not retried, and ``WorkerError`` (a lost worker) is kept for workers that are gone."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute
import pytest
from datafusion import SessionContext, col, udf

from datafusion_distributed_py import DistributedContext, LocalCluster, WorkerError
from datafusion_distributed_py.testing import assert_ran_on_workers


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(2) as c:
        yield c


def test_a_stream_broken_by_the_query_is_not_a_dead_worker(cluster):
    """A query that fails on the workers after its first batches (a Python UDF raising on a
    later batch): the query fails with that error, naming the worker; the workers stay up,
    nothing is retried, and no worker is called dead."""
    ctx = SessionContext()
    ctx.from_pydict({"a": list(range(3000))}, name="t")
    ctx.sql("SET datafusion.execution.batch_size = 100").collect()

    def breaks_late(a: pa.Array) -> pa.Array:
        if pa.compute.max(a).as_py() >= 2500:
            raise ValueError("row 2500 is not allowed")
        return a

    breaks = udf(breaks_late, [pa.int64()], pa.int64(), "volatile", name="breaks_late")
    ctx.register_udf(breaks)
    dctx = DistributedContext(ctx, workers=cluster, progress=False)
    df = dctx.table("t").select(col("a"), breaks(col("a")).alias("b"))
    assert_ran_on_workers(df, dctx, stages=False)
    pids = [p.pid for p in cluster.processes]
    with pytest.raises(Exception) as raised:
        df.to_arrow_table()
    assert not isinstance(raised.value, WorkerError), f"a live worker was reported dead: {raised}"
    assert "row 2500 is not allowed" in str(raised.value), str(raised.value)
    assert "http://127.0.0.1:" in str(raised.value), str(raised.value)
    assert [p.pid for p in cluster.processes] == pids
    assert all(p.poll() is None for p in cluster.processes), "a worker died"
    assert {m["attempt"] for m in dctx.metrics(df)} == {1}, "the query was retried"
