"""Real worker processes on 127.0.0.1: LocalCluster, the CLI, resolvers and failures."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import (
    SPLIT_CONFIG,
    assert_same_rows,
    cli_worker,
    free_ports,
    is_distributed,
    start_cli_worker,
    write_v_g_parts,
)
from datafusion import SessionContext, udf

import datafusion_distributed_py
from datafusion_distributed_py import (
    DistributedContext,
    LocalCluster,
    Worker,
    WorkerError,
)
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers
from datafusion_distributed_py.worker import DRAIN_SECONDS
from harness import tpch


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3) as c:
        yield c


@pytest.fixture
def cdctx(ctx, cluster):
    return DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)


@pytest.mark.parametrize("n", tpch.QUERIES)
def test_tpch_on_local_cluster(n, ctx, cdctx):
    assert_distributed_equal(ctx, cdctx, tpch.query(n))


def test_tasks_are_spread_over_all_workers(cdctx, cluster):
    df = cdctx.sql("SELECT l_orderkey, count(*) FROM lineitem GROUP BY l_orderkey")
    plan = cdctx.explain(df, analyze=True)
    assert is_distributed(plan), plan
    used = {u for u in cluster.urls if u.removeprefix("http://") in plan or u in plan}
    assert used == set(cluster.urls), plan


def test_workers_accepts_url_list_and_resolver(ctx, cluster):
    sql = "SELECT o_orderstatus, count(*) AS c FROM orders GROUP BY 1"
    calls = []

    def resolver():
        calls.append(1)
        return cluster.urls

    for workers in (list(cluster.urls), resolver):
        # Bare URLs carry no credentials: the cluster's token is given alongside.
        dctx = DistributedContext(
            ctx, workers=workers, config=SPLIT_CONFIG, security=cluster.security
        )
        assert_distributed_equal(ctx, dctx, sql)
    assert calls, "the resolver is called at planning"


def test_workers_in_this_process_serve_queries(ctx):
    """Started ``Worker`` objects stand for their URLs; the tasks reach both of them."""
    sql = "SELECT l_returnflag, sum(l_quantity) AS q FROM lineitem GROUP BY 1"
    workers = [Worker().start(), Worker().start()]
    try:
        dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)
        df = dctx.sql(sql)
        assert_ran_on_workers(df, dctx)
        assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=False)
        plan = dctx.explain(df, analyze=True)
        assert all(w.url.removeprefix("http://") in plan for w in workers), plan
    finally:
        for w in workers:
            w.stop()


def test_local_cluster_runs_setup_in_each_worker(tmp_path, monkeypatch):
    """``setup`` runs in every worker process: a closure (cloudpickled, sent through the
    workers' stdin: no pickle is on disk at any time) or "module:function". The temporary
    directory of the logs is gone after close()."""
    marks = tmp_path / "marks"
    marks.mkdir()
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where LocalCluster makes its log_dir

    def setup(worker_ctx: SessionContext) -> None:
        assert isinstance(worker_ctx, SessionContext)
        (marks / f"closure-{os.getpid()}").touch()

    (tmp_path / "my_worker_setup.py").write_text(
        "import os, pathlib\n"
        "def setup(ctx):\n"
        f"    pathlib.Path({str(marks)!r}, f'module-{{os.getpid()}}').touch()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    for spec, kind in ((setup, "closure"), ("my_worker_setup:setup", "module")):
        with LocalCluster(2, setup=spec) as c:
            pids = {p.pid for p in c.processes}
            assert {f"{kind}-{pid}" for pid in pids} <= {m.name for m in marks.iterdir()}
            assert c.log_dir.parent == temp
            assert sorted(f.name for f in c.log_dir.iterdir()) == ["worker-0.log", "worker-1.log"]
            assert not list(tmp_path.rglob("*.pickle"))
        assert not c.log_dir.exists()
    assert not list(temp.iterdir())


def test_bad_setup_fails_cluster_start_with_the_log(tmp_path):
    with pytest.raises(WorkerError, match="no_such_module"):
        LocalCluster(1, setup="no_such_module:setup", log_dir=tmp_path)
    assert "no_such_module" in (tmp_path / "worker-0.log").read_text(), "a given log_dir stays"


def test_down_worker_is_named_quickly(ctx):
    # A port nothing listens on.
    w = Worker(port=0).start()
    url = w.url
    w.stop()
    dctx = DistributedContext(ctx, workers=[url], config=SPLIT_CONFIG)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=re.escape(url.removeprefix("http://"))):
        dctx.sql("SELECT count(*) FROM lineitem GROUP BY l_linestatus").collect()
    assert time.monotonic() - start < 10


def test_version_mismatch_is_refused(ctx):
    with LocalCluster(1, _report_versions=["0.0.0-other"]) as odd:
        dctx = DistributedContext(ctx, workers=odd, config=SPLIT_CONFIG)
        with pytest.raises(WorkerError, match=r"0\.0\.0-other") as e:
            dctx.sql("SELECT count(*) FROM lineitem").collect()
        assert odd.urls[0].removeprefix("http://") in str(e.value)


def _slowly(a: pa.Array) -> pa.Array:
    """A UDF taking 0.2 s a batch."""
    import time

    time.sleep(0.2)
    return a


def test_killed_worker_fails_query_then_survivors_work(ctx, tmp_path):
    """A worker killed while its tasks still stream rows to us (a batch already reached us,
    so the query is not run again): the query fails with a WorkerError naming it; queries
    planned after it, on the workers left, give single-node's rows."""
    # 400 row groups of 100 rows, each a batch of 0.2 s: a scan streaming for ~15 s from
    # every worker.
    write_v_g_parts(tmp_path, 40_000, row_group_size=100)
    ctx.register_parquet("t", str(tmp_path) + "/")
    ctx.register_udf(udf(_slowly, [pa.int64()], pa.int64(), "volatile", name="slowly"))
    with LocalCluster(3) as c:
        alive = list(c.urls)
        dctx = DistributedContext(
            ctx, workers=lambda: alive, config=SPLIT_CONFIG, security=c.security
        )
        df = dctx.sql("SELECT slowly(v) AS v, g FROM t")
        assert_ran_on_workers(df, dctx)
        stream = df.execute_stream()
        got = next(iter(stream)).to_pyarrow().num_rows  # the query is running on every worker
        victim, lost = c.processes[1], c.urls[1]  # restarted on another port
        victim.kill()
        victim.wait()
        start = time.monotonic()
        with pytest.raises(WorkerError) as e:
            for batch in stream:
                got += batch.to_pyarrow().num_rows
        assert e.value.worker_url == lost, str(e.value)
        assert time.monotonic() - start < 30
        assert got < 40_000, "every row arrived: the kill came after the query's work"
        alive.remove(lost)
        sql = "SELECT l_orderkey, count(*) AS n FROM lineitem GROUP BY l_orderkey"
        assert_distributed_equal(ctx, dctx, sql)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: Minutes of work whose stages emit nothing until they end (a join feeding an aggregate):
#: over files, the join reads network shuffles; over series, a whole stage runs on one worker
#: with its repartitions inside.
FILE_JOIN = "SELECT a.k, count(*) AS n FROM t a JOIN t b ON a.k = b.k GROUP BY a.k"
SERIES_JOIN = (
    "SELECT a.value % 10 AS k, count(*) AS n FROM generate_series(1, 300000) a "
    "JOIN generate_series(1, 300000) b ON a.value % 10 = b.value % 10 GROUP BY 1"
)
SERIES_CROSS_JOIN = (
    "SELECT count(DISTINCT a.value + b.value) AS n "
    "FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 100000) b"
)


def _cpu(pids: list[int]) -> float:
    return sum(_cpu_seconds(p) for p in pids)


@contextlib.contextmanager
def interrupted(
    tmp_path, workers: LocalCluster | None, sql: str, action: str = "collect"
) -> Iterator[float]:
    """Ctrl-C (SIGINT) 3 s into ``getattr(df, action)()``; asserts KeyboardInterrupt came
    promptly. Yields the CPU seconds the query's processes (the workers, or this process for
    the embedded cluster) spent between the start of the run and the interrupt."""
    for i in range(4):
        pq.write_table(pa.table({"k": [j % 10 for j in range(50_000)]}), tmp_path / f"{i}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path) + "/")
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)
    df = dctx.sql(sql)
    assert_ran_on_workers(df, dctx)
    pids = [p.pid for p in workers.processes] if workers is not None else [os.getpid()]
    main = threading.main_thread().ident
    busy: list[float] = []

    def interrupt() -> None:
        busy.append(_cpu(pids) - before)  # measured at the interrupt, before sending it
        signal.pthread_kill(main, signal.SIGINT)

    timer = threading.Timer(3.0, interrupt)
    # A background job may start with SIGINT ignored; Ctrl-C raises KeyboardInterrupt.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = _cpu(pids)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            getattr(df, action)()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 30
    assert busy, "the query ended before the interrupt"
    yield busy[0]


def _cpu_in_2s(pids: list[int]) -> float:
    before = _cpu(pids)
    time.sleep(2.0)
    return _cpu(pids) - before


@pytest.mark.slow
@pytest.mark.parametrize(("sql", "action"), [(FILE_JOIN, "collect"), (SERIES_JOIN, "to_pandas")])
def test_keyboard_interrupt_cancels_work_on_workers(tmp_path, sql, action):
    """Ctrl-C stops the coordinator and every worker process's tasks of the query."""
    with LocalCluster(2) as c, interrupted(tmp_path, c, sql, action) as busy:
        pids = [p.pid for p in c.processes]
        # Over the 3 s the query ran before Ctrl-C: the workers were computing it.
        assert busy > 1.0, f"the workers spent {busy:.2f} CPU s on the query before Ctrl-C"
        time.sleep(1.0)
        assert _cpu_in_2s([os.getpid()]) < 0.5, "the coordinator kept working"
        assert _cpu_in_2s(pids) < 0.5, "workers kept computing the cancelled query"
        # The cluster is still usable.
        ctx = SessionContext()
        ctx.register_parquet("t", str(tmp_path) + "/")
        n = DistributedContext(ctx, workers=c).sql("SELECT count(*) AS n FROM t").to_pydict()
        assert n == {"n": [200_000]}


@pytest.mark.slow
@pytest.mark.parametrize(("sql", "action"), [(FILE_JOIN, "show"), (SERIES_CROSS_JOIN, "collect")])
def test_keyboard_interrupt_cancels_work_on_embedded_cluster(tmp_path, sql, action):
    """In-process workers stop too: the process goes idle after Ctrl-C."""
    with interrupted(tmp_path, None, sql, action) as busy:
        assert busy > 1.0, f"this process spent {busy:.2f} CPU s on the query before Ctrl-C"
        time.sleep(1.0)
        assert _cpu_in_2s([os.getpid()]) < 0.5, "the in-process workers kept computing"


def _interrupt_thread(thread: threading.Thread) -> None:
    """A KeyboardInterrupt raised in ``thread``: how IPython, web servers and test runners
    stop a thread other than the main one."""
    import ctypes

    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    assert set_exc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["embedded", "workers"])
def test_keyboard_interrupt_reaches_a_query_in_another_thread(tmp_path, kind):
    """Single-node stops at once when a thread running collect() is interrupted; so does a
    distributed run, and its tasks stop on the workers."""
    for i in range(4):
        pq.write_table(pa.table({"k": [j % 10 for j in range(50_000)]}), tmp_path / f"{i}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path) + "/")
    with LocalCluster(2) if kind == "workers" else contextlib.nullcontext() as c:
        dctx = DistributedContext(ctx, workers=c, config=SPLIT_CONFIG, progress=False)
        df = dctx.sql(FILE_JOIN)
        assert_ran_on_workers(df, dctx)
        pids = [os.getpid()] + ([p.pid for p in c.processes] if c else [])
        outcome: list[str] = []

        def run() -> None:
            try:
                df.collect()
                outcome.append("finished")
            except KeyboardInterrupt:
                outcome.append("interrupted")

        runner = threading.Thread(target=run, daemon=True)
        before = _cpu(pids)
        runner.start()
        time.sleep(3.0)
        busy = _cpu(pids) - before
        assert runner.is_alive(), outcome
        _interrupt_thread(runner)
        start = time.monotonic()
        runner.join(timeout=10)
        assert outcome == ["interrupted"]
        assert time.monotonic() - start < 1.0
        assert busy > 1.0, f"{busy:.2f} CPU s spent on the query before the interrupt"
        time.sleep(1.0)
        assert _cpu_in_2s(pids) < 0.5, "the query kept running after the interrupt"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["embedded", "workers"])
def test_exit_while_a_daemon_thread_runs_a_query(tmp_path, kind):
    """The interpreter exits cleanly (code 0) with a distributed query still running in a
    daemon thread, progress on: nothing of ours enters Python once it is exiting."""
    script = tmp_path / "exits.py"
    script.write_text(
        textwrap.dedent(f"""
        import threading, time
        from datafusion import SessionContext
        from datafusion_distributed_py import DistributedContext, LocalCluster
        cluster = LocalCluster(2) if {kind!r} == "workers" else None
        ctx = SessionContext()
        q = "SELECT v % 7 AS k, count(*) FROM generate_series(1, 1000000000000) t(v) GROUP BY k"
        df = DistributedContext(ctx, workers=cluster, progress=lambda e: None).sql(q)
        threading.Thread(target=df.collect, daemon=True).start()
        time.sleep(2)
        print("leaving", flush=True)
    """)
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout.strip()) == (0, "leaving"), done.stderr[-2000:]


@pytest.mark.slow
def test_orphaned_workers_exit_when_parent_is_killed(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent("""
        import time
        from datafusion_distributed_py import LocalCluster
        c = LocalCluster(2)
        print(" ".join(str(p.pid) for p in c.processes), flush=True)
        time.sleep(600)
    """)
    )
    # A SIGKILLed owner cannot remove its cluster's temporary directory: keep it in tmp_path.
    owner = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    pids = [int(p) for p in owner.stdout.readline().split()]
    assert len(pids) == 2
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids), "workers outlived their SIGKILLed parent"


def test_a_cluster_made_in_a_thread_outlives_the_thread(ctx):
    """A web server's or notebook's worker thread may make the cluster and end: the workers
    live as long as the cluster object and this process."""
    made: list[LocalCluster] = []
    maker = threading.Thread(target=lambda: made.append(LocalCluster(2)))
    maker.start()
    maker.join()
    with made[0] as cluster:
        time.sleep(1.5)  # past the workers' parent watch (0.5 s)
        assert all(p.poll() is None for p in cluster.processes)
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
        q = "SELECT l_returnflag, count(*) AS n FROM lineitem GROUP BY l_returnflag"
        df = dctx.sql(q)
        assert_ran_on_workers(df, dctx)
        assert_same_rows(df.to_arrow_table(), ctx.sql(q).to_arrow_table(), ordered=False)
        assert {m["worker_url"] for m in dctx.metrics(df)} == set(cluster.urls)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_cli_prints_url_and_stops_gracefully(ctx, stop_signal):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "datafusion_distributed_py.worker",
            "--port",
            "0",
            "--log-level",
            "info",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        m = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, line
        dctx = DistributedContext(ctx, workers=[m.group(1)], config=SPLIT_CONFIG)
        sql = "SELECT n_regionkey, count(*) AS c FROM nation GROUP BY 1"
        assert_distributed_equal(ctx, dctx, sql)
        proc.send_signal(stop_signal)
        assert proc.wait(15) == 0
        assert "stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_worker_stopped_mid_query_drains_then_fails_the_query(tmp_path):
    """SIGTERM while a long query runs: the worker gives it the drain time, exits, and the
    query fails with an error naming the worker (it does not hang)."""
    # 400k rows joined on 10 keys: 16 billion joined rows, minutes of work.
    for i in range(4):
        pq.write_table(pa.table({"k": [j % 10 for j in range(100_000)]}), tmp_path / f"{i}.parquet")
    with cli_worker() as (proc, url):
        ctx = SessionContext()
        ctx.register_parquet("t", str(tmp_path) + "/")
        dctx = DistributedContext(ctx, workers=[url], config=SPLIT_CONFIG)
        df = dctx.sql("SELECT a.k, count(*) FROM t a JOIN t b ON a.k = b.k GROUP BY a.k")
        assert_ran_on_workers(df, dctx)
        signalled: list[float] = []

        def stop() -> None:
            signalled.append(time.monotonic())  # the drain starts now, not at the timer's start
            proc.send_signal(signal.SIGTERM)

        timer = threading.Timer(2.0, stop)
        timer.start()
        try:
            with pytest.raises(Exception, match=re.escape(url)):
                df.collect()
        finally:
            timer.cancel()
        failed = time.monotonic()
        assert signalled, "the query failed before the worker was told to stop"
        assert failed - signalled[0] < 30
        assert proc.wait(15) == 0
        # In-flight work got its drain time: the query failed only once it was over.
        assert failed - signalled[0] >= DRAIN_SECONDS, failed - signalled[0]


def test_cli_worker_of_another_version_is_refused(ctx):
    with cli_worker("--report-version", "9.9.9") as (_, url):
        dctx = DistributedContext(ctx, workers=[url])
        with pytest.raises(WorkerError) as e:
            dctx.sql("SELECT count(*) FROM nation").collect()
        message = str(e.value)
        assert (
            url in message
            and "9.9.9" in message
            and datafusion_distributed_py.__version__ in message
        )


def test_worker_restarted_at_the_same_url_is_used_again():
    """Channels to a worker are cached across queries: they must survive its restart."""
    (port,) = free_ports(1)
    ctx = SessionContext()
    ctx.from_pydict({"a": list(range(100))}, name="t")
    dctx = DistributedContext(ctx, workers=[f"http://127.0.0.1:{port}"])
    proc, _ = start_cli_worker("--port", str(port))
    try:
        assert dctx.sql("SELECT count(*) AS n FROM t").to_pydict() == {"n": [100]}
        proc.kill()
        proc.wait()
        with pytest.raises(WorkerError, match=str(port)):
            dctx.sql("SELECT count(*) AS n FROM t").collect()
        proc, _ = start_cli_worker("--port", str(port))
        assert dctx.sql("SELECT count(*) AS n FROM t").to_pydict() == {"n": [100]}
    finally:
        proc.kill()
        proc.wait()


def test_console_script_help():
    out = subprocess.run(
        ["datafusion-distributed-worker", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in ("--host", "--port", "--setup", "--log-level"):
        assert flag in out
    for testing_only in ("--report-version", "--parent-pid"):
        assert testing_only not in out


def test_examples_localhost_worker_and_distributed_run(tmp_path, tpch_dir):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    workers = [
        subprocess.Popen(
            [sys.executable, os.path.join(root, "examples", "localhost_worker.py"), str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for port in free_ports(2)
    ]
    try:
        ports = [w.stdout.readline().strip().rsplit(":", 1)[1] for w in workers]
        env = {**os.environ, "WORKERS": ",".join(ports)}
        run = os.path.join(root, "examples", "distributed_run.py")
        path = str(tpch_dir / "lineitem") + "/"
        sql = "SELECT l_returnflag, count(*) AS n FROM t GROUP BY 1 ORDER BY 1"
        out = subprocess.run(
            [sys.executable, run, path, sql], env=env, capture_output=True, text=True, check=True
        ).stdout
        for flag in ("A", "N", "R"):
            assert flag in out
        plan = subprocess.run(
            [sys.executable, run, path, sql, "--plan"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert is_distributed(plan), plan
    finally:
        # Graceful stop is asserted by the CLI test; here only make sure nothing is left.
        for w in workers:
            w.send_signal(signal.SIGINT)
        for w in workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()


def test_local_cluster_started_next_to_a_source_checkout(tmp_path, monkeypatch):
    """Workers run this very build, not a package of the same name in the working directory
    (e.g. the project's own unbuilt checkout)."""
    fake = tmp_path / "datafusion_distributed_py"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the unbuilt source checkout')\n")
    monkeypatch.chdir(tmp_path)
    with LocalCluster(1) as c:
        dctx = DistributedContext(SessionContext(), workers=c)
        df = dctx.sql("SELECT 1 AS one")
        assert_ran_on_workers(df, dctx)
        assert df.to_pylist() == [{"one": 1}]
        assert {m["worker_url"] for m in dctx.metrics(df)} == set(c.urls)  # it ran there


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_worker_process_counts_as_starting_before_it_is_reaped() -> None:
    """A killed process has closed its sockets (a query sees its streams break) before
    ``poll()`` can reap it; ``LocalCluster.starting`` counts it from then on, so the query's
    run again waits for the restart instead of running on the workers left."""
    from datafusion_distributed_py.cluster import _exiting

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not _exiting(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        # Not reaped (no poll() here): the kernel keeps it as a zombie, which counts.
        while not _exiting(proc.pid):
            assert time.monotonic() < deadline, "a killed process never read as exiting"
            time.sleep(0.01)
        with open(f"/proc/{proc.pid}/stat") as stat:
            assert stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        proc.kill()
        proc.wait()
    assert not _exiting(proc.pid)  # reaped: no entry
