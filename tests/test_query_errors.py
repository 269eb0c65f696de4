"""A query's own failure on a worker is the query's error, never a dead worker (issue 39): it
is not retried, and ``WorkerError`` (a lost worker) is kept for workers that are gone."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionContext, col, lit

from datafusion_distributed_py import DistributedContext, LocalCluster, WorkerError
from datafusion_distributed_py.testing import assert_ran_on_workers


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(2) as c:
        yield c


def test_a_stream_broken_by_the_query_is_not_a_dead_worker(cluster):
    """A ``large_list`` literal's batches do not read back at the coordinator under DataFusion
    55 (the stream decodes them with another offset width): the query fails with that error,
    naming the worker, or answers; the workers stay up, nothing is retried, and no worker is
    called dead."""
    ctx = SessionContext()
    ctx.from_pydict({"a": [1, 2, 3]}, name="t")
    dctx = DistributedContext(ctx, workers=cluster, progress=False)
    literal = lit(pa.scalar([1, 2, 3], type=pa.large_list(pa.int64())))
    single = ctx.table("t").select(literal.alias("x"), col("a")).to_arrow_table()
    df = dctx.table("t").select(literal.alias("x"), col("a"))
    assert_ran_on_workers(df, dctx, stages=False)
    pids = [p.pid for p in cluster.processes]
    try:
        got = df.to_arrow_table()
    except WorkerError as e:
        pytest.fail(f"a live worker was reported as {e.kind}: {e}")
    except Exception as e:  # the query's own error, naming the worker it failed on
        assert "http://127.0.0.1:" in str(e), str(e)
        assert "died" not in str(e) and "connection reset" not in str(e), str(e)
    else:
        assert got == single
    assert [p.pid for p in cluster.processes] == pids
    assert all(p.poll() is None for p in cluster.processes), "a worker died"
    assert {m["attempt"] for m in dctx.metrics(df)} == {1}, "the query was retried"
