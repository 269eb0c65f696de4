"""Lost workers: left out at the handshake, a retry instead of a failed query, typed
errors naming the worker, a LocalCluster that restarts its dead workers, and memory limits
that spill instead of killing a worker."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SPLIT_CONFIG, assert_same_rows, free_ports
from datafusion import DataFrame, SessionContext, udf

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    ProgressEvent,
    WorkerError,
    planning,
    ran_on,
)
from harness import tpch
from harness.differential import compare

#: Part of CI's full run; `pytest -m "not slow"` leaves it out of a developer's loop.
pytestmark = pytest.mark.slow

#: A query that runs for seconds on three workers: a Python UDF that sleeps per batch.
SLOW = (
    "SELECT l_returnflag, sum(nap(l_quantity)) AS q, count(*) AS n FROM lineitem "
    "GROUP BY l_returnflag"
)


def nap(a: pa.Array) -> pa.Array:
    time.sleep(len(a) * 0.0003)
    return a


def slow_ctx(tpch_dir: Path) -> SessionContext:
    ctx = SessionContext()
    tpch.register(ctx, tpch_dir)
    ctx.register_udf(udf(nap, [pa.float64()], pa.float64(), "immutable", name="nap"))
    ctx.sql("SET datafusion.execution.batch_size = 1024")
    return ctx


def kill_later(pid: int, after: float, sig: int = signal.SIGKILL) -> threading.Thread:
    def run() -> None:
        time.sleep(after)
        with contextlib.suppress(ProcessLookupError):  # the test is over already
            os.kill(pid, sig)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_dead_url_in_a_static_list_leaves_the_others_serving(ctx, caplog):
    with LocalCluster(2, security=False) as cluster:
        (dead,) = free_ports(1)
        dead_url = f"http://127.0.0.1:{dead}"
        dctx = DistributedContext(ctx, workers=[*cluster.urls, dead_url])
        sql = "SELECT l_returnflag, count(*) AS n FROM lineitem GROUP BY l_returnflag"
        with caplog.at_level(logging.WARNING):
            for _ in range(2):  # the second one finds it quarantined
                outcome = compare(ctx, dctx, sql)
                assert outcome.verdict == "equal", outcome.detail
        assert dead_url in caplog.text and "unreachable" in caplog.text
        df = dctx.sql(sql)
        df.collect()
        assert {m["worker_url"] for m in dctx.metrics(df)} <= set(cluster.urls)
        # Fewer usable workers than asked for: a WorkerError naming the lost one.
        strict = DistributedContext(
            ctx, workers=[*cluster.urls, dead_url], config=DistributedConfig(min_workers=3)
        )
        with pytest.raises(WorkerError, match="min_workers=3") as e:
            strict.sql(sql).collect()
        assert e.value.worker_url == dead_url
        assert e.value.kind == "unreachable"
        assert str(e.value).startswith(f"worker {dead_url} is unreachable (connection refused)")


def test_a_worker_lost_after_the_early_handshake_costs_a_retry(ctx, monkeypatch):
    """A query's handshake starts when it is asked for and is answered while the wheel
    plans it: a worker lost after answering is found by the run, which goes again on the
    workers left, and the answer is single-node's."""
    sql = "SELECT l_returnflag, count(*) AS n FROM lineitem GROUP BY l_returnflag"
    with LocalCluster(3) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG, progress=False)
        victim, lost = cluster.processes[1], cluster.urls[1]
        planned = planning.request

        def then_lost(*args: object) -> object:
            made = planned(*args)
            time.sleep(0.2)  # the workers have answered the handshake
            victim.kill()
            victim.wait()
            return made

        monkeypatch.setattr(planning, "request", then_lost)
        df = dctx.sql(sql)
        assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=False)
        metrics = dctx.metrics(df)
        last = max(m["attempt"] for m in metrics)
        used = {m["worker_url"] for m in metrics if m["attempt"] == last}
        assert used and lost not in used, used


def test_a_worker_killed_mid_query_costs_a_retry(tpch_dir, caplog):
    ctx = slow_ctx(tpch_dir)
    expected = ctx.sql(SLOW).to_arrow_table()
    events: list[ProgressEvent] = []
    with LocalCluster(3) as cluster:
        # Split so that every worker scans (and naps) until the end of the first stage.
        dctx = DistributedContext(ctx, workers=cluster, progress=events.append, config=SPLIT_CONFIG)
        df = dctx.sql(SLOW)
        victim = cluster.processes[1]
        kill_later(victim.pid, 1.0)
        with caplog.at_level(logging.WARNING):
            got = df.to_arrow_table()
        assert_same_rows(got, expected, ordered=False)
        retries = [e for e in events if e.kind == "retry"]
        assert len(retries) == 1 and retries[0].attempt == 1
        assert "running the query again" in caplog.text
        metrics = dctx.metrics(df)
        assert {m["attempt"] for m in metrics} == {1, 2}
        # The next query works too (the cluster restarted the worker, or it is left out).
        assert compare(ctx, dctx, SLOW.replace("nap(l_quantity)", "l_quantity")).verdict == (
            "equal"
        )


def test_without_retries_a_killed_worker_is_a_worker_error_naming_it(tpch_dir):
    ctx = slow_ctx(tpch_dir)
    with LocalCluster(3, restart=False) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG.replace(max_retries=0))
        victim, url = cluster.processes[2], cluster.urls[2]
        kill_later(victim.pid, 1.0)
        start = time.monotonic()
        with pytest.raises(WorkerError) as e:
            dctx.sql(SLOW).collect()
        assert time.monotonic() - start < 30
        assert e.value.worker_url == url
        assert e.value.kind == "died"
        text = str(e.value)
        assert text.startswith(f"worker {url} died"), text
        for noise in ("FFI error", "External error", "h2 protocol", "tonic"):
            assert noise not in text


FROZEN_JOIN = "SELECT a.k, count(*) AS n FROM t a JOIN t b ON a.k = b.k GROUP BY a.k"
#: Tens of millions of rows, streamed for seconds: batches arrive while tasks still run.
FROZEN_STREAM = "SELECT a.k, b.k AS j FROM t a JOIN t b ON a.k = b.k"


@dataclass
class FrozenRun:
    """A query planned on two workers, the second one to freeze (SIGSTOP: alive, its socket
    open, no answer, as behind a network cut)."""

    ctx: SessionContext
    dctx: DistributedContext
    df: DataFrame
    pid: int
    url: str

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@contextlib.contextmanager
def one_worker_to_freeze(tmp_path: Path, sql: str, max_retries: int) -> Iterator[FrozenRun]:
    """``sql`` planned on two workers, each holding tasks of every stage that scans; the
    second worker is thawed afterwards, whatever the test did to it."""
    for i in range(4):
        pq.write_table(pa.table({"k": [j % 10 for j in range(5_000)]}), tmp_path / f"{i}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path) + "/")
    with LocalCluster(2) as cluster:
        # One task per file: both workers scan.
        config = DistributedConfig(file_scan_config_bytes_per_partition=1, max_retries=max_retries)
        dctx = DistributedContext(ctx, workers=cluster, config=config)
        df = dctx.sql(sql)
        assert ran_on(df) == "workers"  # planned now (a frame plans when first used)
        run = FrozenRun(ctx, dctx, df, cluster.processes[1].pid, cluster.urls[1])
        try:
            yield run
        finally:
            run.thaw()


def test_a_frozen_worker_costs_a_retry(tmp_path, caplog):
    """Frozen before any batch reached us: keep-alive pings find it, and the query runs again
    on the worker left."""
    with one_worker_to_freeze(tmp_path, FROZEN_JOIN, max_retries=1) as run:
        run.freeze()
        start = time.monotonic()
        with caplog.at_level(logging.WARNING):
            got = run.df.to_arrow_table()
        assert time.monotonic() - start < 60
        assert_same_rows(got, run.ctx.sql(FROZEN_JOIN).to_arrow_table(), ordered=False)
        assert f"worker {run.url} stopped answering" in caplog.text
        assert "running the query again" in caplog.text
        metrics = run.dctx.metrics(run.df)
        assert {m["attempt"] for m in metrics} == {1, 2}
        assert run.url not in {m["worker_url"] for m in metrics if m["attempt"] == 2}


def test_without_retries_a_frozen_worker_is_a_worker_error_naming_it(tmp_path):
    """No hang: the query fails within keep-alive's 20 s (plus its 5 s interval), naming the
    frozen worker, and the next query works once the worker answers again."""
    with one_worker_to_freeze(tmp_path, FROZEN_JOIN, max_retries=0) as run:
        run.freeze()
        start = time.monotonic()
        with pytest.raises(WorkerError) as e:
            run.df.collect()
        assert time.monotonic() - start < 45
        assert e.value.worker_url == run.url
        assert e.value.kind == "stopped_answering"
        assert str(e.value).startswith(f"worker {run.url} stopped answering"), str(e.value)
        run.thaw()
        sql = "SELECT k, count(*) AS n FROM t GROUP BY k"
        got = run.dctx.sql(sql).to_arrow_table()
        assert_same_rows(got, run.ctx.sql(sql).to_arrow_table(), ordered=False)


def test_a_worker_frozen_mid_stream_is_named_as_frozen(tmp_path):
    """Once batches have reached us there is no retry: the stream fails naming the frozen
    worker as having stopped answering (its broken streams alone read as a crash)."""
    with one_worker_to_freeze(tmp_path, FROZEN_STREAM, max_retries=1) as run:
        stream = run.df.execute_stream()
        next(stream)
        run.freeze()
        start = time.monotonic()
        with pytest.raises(WorkerError) as e:
            for _ in stream:
                pass
        assert time.monotonic() - start < 45
        assert e.value.worker_url == run.url
        assert e.value.kind == "stopped_answering"
        assert str(e.value).startswith(f"worker {run.url} stopped answering"), str(e.value)


def test_a_staged_write_runs_again_and_leaves_no_file_of_the_lost_run(tpch_dir, tmp_path):
    """A write from every task commits only once every task wrote: a run a lost worker cut
    short leaves nothing in the target, and the write runs again."""
    ctx = slow_ctx(tpch_dir)
    out = tmp_path / "out"
    with LocalCluster(3) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
        kill_later(cluster.processes[0].pid, 1.0)
        df = dctx.sql(SLOW)
        df.write_parquet(str(out))
        assert {m["attempt"] for m in dctx.metrics(df)} == {1, 2}
    assert_same_rows(pq.read_table(out), ctx.sql(SLOW).to_arrow_table(), ordered=False)
    assert not [p for p in out.rglob("*") if ".dfdpy-" in str(p)]


def test_errors_of_the_query_are_not_retried(ctx):
    with LocalCluster(2) as cluster:
        dctx = DistributedContext(ctx, workers=cluster)
        df = dctx.sql("SELECT CAST(l_comment AS INT) FROM lineitem")
        with pytest.raises(Exception, match="Cast error") as e:
            df.collect()
        assert not isinstance(e.value, WorkerError)
        assert {m["attempt"] for m in dctx.metrics(df)} == {1}


def test_local_cluster_restarts_a_dead_worker(ctx):
    with LocalCluster(2) as cluster:
        dctx = DistributedContext(ctx, workers=cluster)
        before = list(cluster.urls)
        cluster.processes[0].kill()
        deadline = time.monotonic() + 20
        while cluster.urls[0] == before[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cluster.urls[0] != before[0] and cluster.urls[1] == before[1]
        assert cluster.restarts == 1
        assert set(dctx.worker_urls) == set(cluster.urls)
        sql = "SELECT count(*) AS n FROM lineitem"
        assert compare(ctx, dctx, sql).verdict == "equal"
    with LocalCluster(1, restart=False) as cluster:
        url = cluster.urls[0]
        cluster.processes[0].kill()
        time.sleep(1)
        assert cluster.urls == [url] and cluster.processes[0].poll() is not None


def test_local_cluster_works_from_the_projects_own_checkout(tmp_path):
    """Started from a directory holding this project's source tree (whose package has no
    built core), workers still import the installed build."""
    checkout = Path(__file__).resolve().parents[2]
    code = (
        "from datafusion import SessionContext\n"
        "from datafusion_distributed_py import DistributedContext, LocalCluster\n"
        "with LocalCluster(2) as c:\n"
        "    print(DistributedContext(SessionContext(), workers=c).sql('SELECT 41 + 1 AS x')"
        ".to_pylist())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "[{'x': 42}]" in out.stdout


@pytest.mark.parametrize("limit", ["500MB", "120MB"])
def test_big_queries_fit_a_memory_limit_by_spilling(sf1, limit):
    """TPC-H SF1 q9/q18/q21 under a per-worker memory limit: the same rows as single-node.
    At 500 MB they fit on this 2-core machine; at 120 MB sorts and aggregations spill (the
    spill is in the metrics)."""
    ctx = SessionContext()
    tpch.register(ctx, sf1)
    spilled = 0
    with LocalCluster(2, memory_limit=limit) as cluster:
        dctx = DistributedContext(ctx, workers=cluster)
        for n in (9, 18, 21):
            outcome = compare(ctx, dctx, tpch.query(n))
            assert outcome.verdict == "equal", (n, outcome.detail)
            df = dctx.sql(tpch.query(n))
            df.collect()
            spilled += sum(m["spilled_bytes"] or 0 for m in dctx.metrics(df))
    if limit == "120MB":
        assert spilled > 0


def test_a_query_that_cannot_fit_fails_naming_the_worker(sf1):
    ctx = SessionContext()
    tpch.register(ctx, sf1)
    with LocalCluster(2, memory_limit="30MB") as cluster:
        dctx = DistributedContext(ctx, workers=cluster)
        with pytest.raises(Exception, match=r"(?s)Resources exhausted.*on worker http://") as e:
            dctx.sql(tpch.query(9)).collect()
        assert not isinstance(e.value, WorkerError)
        # The worker survived: the next query runs.
        assert dctx.sql("SELECT count(*) AS n FROM region").to_pylist() == [{"n": 5}]
