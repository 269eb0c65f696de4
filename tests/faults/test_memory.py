"""Bounded memory: the limits a user sets hold on every process, a query larger than memory
spills or fails as single-node does, and nothing waits forever.

Every streamed read runs under a stall watchdog: a hang fails the test, it never holds CI.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, udf

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    WorkerError,
)
from datafusion_distributed_py.config import machine_memory
from datafusion_distributed_py.testing import assert_ran_on_workers
from harness import tpch

SORT = "SELECT l_orderkey, l_comment FROM lineitem ORDER BY l_comment, l_orderkey"


def stream_rows(df: Any, stall: float = 120.0) -> pa.Table:
    """``df``'s rows read batch by batch with ``execute_stream()``, under a watchdog: when no
    batch arrives for ``stall`` seconds the test fails (the stuck read is left behind in a
    daemon thread) instead of hanging."""
    batches: list[pa.RecordBatch] = []
    failure: list[BaseException] = []
    done = threading.Event()
    last = [time.monotonic()]

    def read() -> None:
        try:
            for batch in df.execute_stream():
                last[0] = time.monotonic()
                batches.append(batch.to_pyarrow())
        except BaseException as e:
            failure.append(e)
        finally:
            done.set()

    threading.Thread(target=read, daemon=True).start()
    while not done.wait(1.0):
        if time.monotonic() - last[0] > stall:
            pytest.fail(f"the read stalled: no batch for {stall} s after {len(batches)}")
    if failure:
        raise failure[0]
    return pa.Table.from_batches(batches, schema=df.schema())


def pooled_ctx(data: Path, pool_bytes: int, spill_dir: Path | None = None) -> SessionContext:
    runtime = RuntimeEnvBuilder().with_fair_spill_pool(pool_bytes)
    runtime = (
        runtime.with_disk_manager_specified(str(spill_dir))
        if spill_dir is not None
        else runtime.with_disk_manager_os()
    )
    ctx = SessionContext(SessionConfig(), runtime)
    tpch.register(ctx, data)
    return ctx


# --- No wait without an end -----------------------------------------------------------------


def test_a_sorted_read_whose_partitions_finish_apart_does_not_wait_forever(ctx, cluster):
    """The sort hang, small: a sort's partitions on a worker reach the coordinator's
    merge at different times, and the merge needs a batch of each. With one stream per task,
    batches of the partition that came first filled the connection's buffer budget and the
    first batch of the other could never be read. A tiny budget makes that certain here."""
    config = DistributedConfig(worker_connection_buffer_budget_bytes=1)
    dctx = DistributedContext(ctx, workers=cluster, config=config)
    df = dctx.sql(SORT)
    assert_ran_on_workers(df, dctx)
    got = stream_rows(df, stall=60)
    want = ctx.sql(SORT).to_arrow_table()
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want.cast(got.schema))


def _slow(seconds: float) -> Any:
    def slow(a: pa.Array) -> pa.Array:
        time.sleep(seconds)
        return a

    return udf(slow, [pa.int64()], pa.int64(), "volatile", name="slow")


def test_a_query_where_nothing_moves_fails_as_stalled_naming_the_task_and_worker():
    ctx = SessionContext()
    ctx.register_udf(_slow(15))
    ctx.from_pydict({"k": list(range(50))}, name="t")
    config = DistributedConfig(stall_timeout=2)
    with LocalCluster(1) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=config)
        started = time.monotonic()
        with pytest.raises(WorkerError) as caught:
            dctx.sql("SELECT slow(k) FROM t").collect()
        waited = time.monotonic() - started
        assert caught.value.kind == "stalled"
        assert caught.value.worker_url == cluster.urls[0]
        message = str(caught.value)
        assert "no progress for" in message and "stall_timeout = 2 s" in message
        assert f"stage 1 task 0 on {cluster.urls[0]}" in message
        assert waited < 12, waited  # long before the UDF would have returned


def test_a_reader_that_pauses_is_not_stalled():
    """Only time the reader spends waiting for a batch counts: a reader that holds the stream
    and does not ask holds the workers back, which is not a stall."""
    ctx = SessionContext()
    ctx.from_pydict({"k": list(range(200_000))}, name="t")
    config = DistributedConfig(stall_timeout=1)
    with LocalCluster(1) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=config)
        df = dctx.sql("SELECT k FROM t")
        assert_ran_on_workers(df, dctx, stages=False)
        stream = df.execute_stream()
        rows = next(iter(stream)).to_pyarrow().num_rows
        time.sleep(4)
        rows += sum(b.to_pyarrow().num_rows for b in stream)
        assert rows == 200_000


def test_stall_timeout_is_validated_and_settable():
    assert DistributedConfig().stall_timeout == 300.0
    assert DistributedConfig().with_option("distributed.stall_timeout", "7").stall_timeout == 7.0
    with pytest.raises(ValueError, match="stall_timeout"):
        DistributedConfig(stall_timeout=-1)


# --- The embedded cluster is bounded by the session's pool ----------------------------------


@pytest.mark.parametrize("pool_mb", [16, 64])
def test_the_embedded_cluster_fails_where_single_node_fails_and_answers_where_it_answers(
    tpch_dir, pool_mb
):
    """A sort of lineitem (SF 0.01) in a 16 MB pool cannot fit single-node; in 64 MB it
    does. The embedded cluster's tasks draw on a pool of the session's size, so it does the
    same (it answered in any pool before, drawing on a runtime of its own)."""
    ctx = pooled_ctx(tpch_dir, pool_mb * 1000 * 1000)
    dctx = DistributedContext(ctx)
    query = "SELECT l_orderkey, l_comment FROM lineitem ORDER BY l_comment"
    try:
        want: pa.Table | None = ctx.sql(query).to_arrow_table()
    except Exception as e:
        assert "memory" in str(e).lower()
        want = None
    df = dctx.sql(query)
    assert_ran_on_workers(df, dctx)
    if want is None:
        with pytest.raises(Exception, match=r"Resources exhausted|Not enough memory"):
            df.collect()
    else:
        got = df.to_arrow_table()
        assert got.column("l_comment").equals(want.column("l_comment"))
    assert (want is None) == (pool_mb == 16)


@pytest.mark.slow
def test_the_embedded_cluster_spills_to_the_session_s_spill_directory(sf1, tmp_path):
    spill_dir = tmp_path / "spill"
    ctx = pooled_ctx(sf1, 100 * 1000 * 1000, spill_dir)
    made_by_single_node = set(spill_dir.iterdir())  # the session's own disk manager's
    dctx = DistributedContext(ctx)
    df = dctx.sql(
        "SELECT l_orderkey, l_partkey, sum(l_quantity) AS q FROM lineitem "
        "GROUP BY l_orderkey, l_partkey"
    )
    assert stream_rows(df).num_rows == 6_001_169
    spilled = sum(m["spilled_bytes"] or 0 for m in dctx.metrics(df))
    assert spilled > 0
    ours = set(spill_dir.iterdir()) - made_by_single_node
    assert any(p.name.startswith("datafusion-") for p in ours), sorted(spill_dir.iterdir())


def test_the_session_s_information_schema_setting_is_left_as_it_was(tpch_dir):
    ctx = pooled_ctx(tpch_dir, 64 * 1024 * 1024)
    DistributedContext(ctx)
    with pytest.raises(Exception, match="information_schema"):
        ctx.sql("SELECT * FROM information_schema.tables").collect()


# --- At scale (TPC-H SF1) ----------------------------------------------------------------------


@pytest.mark.slow
def test_sort_under_150mb_per_worker_finishes(sf1):
    """The issue's case verbatim: every lineitem column sorted by l_comment, l_orderkey on
    LocalCluster(2, memory_limit="150MB"), read with execute_stream(): it hung with every
    process idle; now it spills and finishes (or would fail naming the resource)."""
    ctx = SessionContext()
    tpch.register(ctx, sf1)
    with LocalCluster(2, memory_limit="150MB") as cluster:
        dctx = DistributedContext(ctx, workers=cluster)
        df = dctx.sql("SELECT * FROM lineitem ORDER BY l_comment, l_orderkey")
        assert_ran_on_workers(df, dctx)
        try:
            got = stream_rows(df, stall=120)
        except Exception as e:  # a named resources error is the other acceptable end
            assert "Resources exhausted" in str(e), e
            return
    assert got.num_rows == 6_001_215
    comments = got.column("l_comment").to_pylist()
    assert all(a <= b for a, b in zip(comments, comments[1:], strict=False))


def _peak_rss_mib(mode: str, data: Path, pool: int | None, query: str) -> tuple[int, str]:
    """Runs ``query`` in a fresh interpreter (single-node or embedded) with a pool of
    ``pool`` bytes (None: no pool): its peak RSS in MiB and what it ended with."""
    import subprocess
    import sys

    runtime = "RuntimeEnvBuilder().with_disk_manager_os()"
    if pool is not None:
        runtime += f".with_fair_spill_pool({pool})"
    code = f"""
import resource, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext
from datafusion_distributed_py import DistributedContext
from harness import tpch
ctx = SessionContext(SessionConfig(), {runtime})
tpch.register(ctx, {str(data)!r})
df = ctx.sql({query!r}) if {mode!r} == "single" else DistributedContext(ctx).sql({query!r})
try:
    end = "rows %d" % sum(b.num_rows for b in df.collect())
except Exception as e:
    end = "error " + str(e).splitlines()[0][:200]
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, end)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rss, end = out.stdout.strip().splitlines()[-1].split(" ", 1)
    return int(rss), end


SORT3 = "SELECT l_orderkey, l_partkey, l_comment FROM lineitem ORDER BY l_comment"
SORT_ALL = "SELECT * FROM lineitem ORDER BY l_comment, l_orderkey"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("pool_mb", "query", "edge"),
    [
        # Far too small: both always run out (every run measured on this machine).
        (30, SORT3, False),
        # The 60 MB and the 300 MB pool for the same sort are at the pool's edge: the
        # partitions' sorts spill, and whether the final merge then finds its few MB free
        # depends on which partition finishes first. Single-node itself answers in some runs
        # (3 of 18 at 60 MB here, at 1.0-1.3 GiB holding the result) and runs out in others.
        (60, SORT3, True),
        (300, SORT3, True),
        # The full sort in 300 MB: both always run out.
        (300, SORT_ALL, False),
    ],
)
def test_embedded_cluster_within_single_node_memory(sf1, pool_mb, query, edge):
    """The issue's sorts with a session pool: the embedded cluster raises where single-node
    raises (it answered before, at 2.3 GiB), and where it answers, the same rows with a peak
    RSS within single-node's + 300 MiB. At the pool's edge either may run out where the other
    just fits; then it fails with DataFusion's resources error, and where it answers, it takes
    no more memory than single-node answering."""
    pool = pool_mb * 1000 * 1000
    single_rss, single_end = _peak_rss_mib("single", sf1, pool, query)
    embedded_rss, embedded_end = _peak_rss_mib("embedded", sf1, pool, query)
    for end in (single_end, embedded_end):
        assert end.startswith("rows") or "Resources exhausted" in end or "memory" in end, end
    if not edge:
        assert single_end.startswith("error"), single_end  # the case is what it says
        assert embedded_end.startswith("error"), embedded_end
    if embedded_end.startswith("rows"):
        assert embedded_end == "rows 6001215", embedded_end
        if not single_end.startswith("rows"):  # single-node's memory when it answers
            single_rss, single_end = _peak_rss_mib("single", sf1, None, query)
            assert single_end == embedded_end
        assert embedded_rss <= single_rss + 300, (embedded_rss, single_rss)


# --- Worker budgets and their defaults ----------------------------------------------------------


def _memory_limit_arg(pid: int) -> str:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return args[args.index(b"--memory-limit") + 1].decode()


def test_local_cluster_workers_share_80_percent_of_the_machine_by_default():
    with LocalCluster(2) as cluster:
        limits = {_memory_limit_arg(p.pid) for p in cluster.processes}
    assert limits == {str(int(machine_memory() * 0.8 / 2))}


def test_local_cluster_memory_limit_none_is_unbounded_and_a_size_is_kept():
    with LocalCluster(1, memory_limit=None) as cluster:
        assert _memory_limit_arg(cluster.processes[0].pid) == "none"
    with LocalCluster(1, memory_limit="300MB") as cluster:
        assert _memory_limit_arg(cluster.processes[0].pid) == "300000000"


def test_a_bad_memory_limit_is_refused_naming_it():
    with pytest.raises(ValueError, match="not a size: 'lots'"):
        LocalCluster(1, memory_limit="lots")
