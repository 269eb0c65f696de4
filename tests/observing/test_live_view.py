"""Watching a cluster work: live progress while tasks run, ``status()``, and the
dashboard page driven in a real headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    ProgressEvent,
)
from datafusion_distributed_py.dashboard import Dashboard
from datafusion_distributed_py.testing import is_distributed

BATCH = 500
BATCHES = 240  # 0.2 s each over 4 partitions: about 12 s


def slow(a: pa.Array) -> pa.Array:
    """A Python UDF taking 0.2 s per batch: it makes a long-running stage."""
    import time

    time.sleep(0.2)
    return a


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow")
    for i in range(4):
        values = pa.array(range(i * BATCHES * BATCH // 4, (i + 1) * BATCHES * BATCH // 4))
        pq.write_table(pa.table({"v": values}), root / f"{i}.parquet", row_group_size=BATCH)
    return root


def held_while(gate: Path):
    """A UDF taking 0.5 s per batch for as long as ``gate`` exists, and no time after: a stage
    that runs until the test has looked at it, however slowly the browser starts."""
    where = str(gate)

    def held(a: pa.Array) -> pa.Array:
        import os
        import time

        if os.path.exists(where):
            time.sleep(0.5)
        return a

    return held


def session(data: Path, gate: Path | None = None) -> SessionContext:
    ctx = SessionContext()
    work = slow if gate is None else held_while(gate)
    ctx.register_udf(udf(work, [pa.int64()], pa.int64(), "stable", name="slow"))
    ctx.sql(f"SET datafusion.execution.batch_size = {BATCH}")
    ctx.register_parquet("t", str(data))
    return ctx


SLOW = "SELECT v, slow(v) AS s FROM t"
#: A third of it (about 4 s).
SHORTER = f"{SLOW} WHERE v < {BATCHES * BATCH // 3}"
#: Split the scan over every worker.
SPLIT = DistributedConfig(file_scan_config_bytes_per_partition=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["embedded", "workers"])
def test_rows_arrive_before_the_last_task_ends(data, kind):
    events: list[tuple[float, ProgressEvent]] = []
    start = time.monotonic()

    def record(e: ProgressEvent) -> None:
        events.append((time.monotonic() - start, e))

    ctx = session(data)
    with LocalCluster(2) if kind == "workers" else _nothing() as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT, progress=record)
        df = dctx.sql(SHORTER)
        assert is_distributed(dctx.explain(df))
        start = time.monotonic()
        assert df.to_arrow_table().num_rows == BATCHES * BATCH // 3
    finished = [t for t, e in events if e.kind == "task" and e.done == e.total]
    live = [(t, e) for t, e in events if e.kind == "rows" and e.rows]
    assert finished and live, events
    last_task_end = max(finished)
    early = [e for t, e in live if t < last_task_end - 1.0]
    assert len(early) >= 3, f"live rows came too late: {live}"
    # Rows only grow, and the end-of-query metrics close them exactly.
    rows = [e.rows for _, e in live]
    assert rows == sorted(rows)
    assert events[-1][1].rows == BATCHES * BATCH // 3


def test_progress_interval_zero_turns_live_rows_off(data):
    events: list[ProgressEvent] = []
    ctx = session(data)
    cfg = DistributedConfig(progress_interval=0)
    dctx = DistributedContext(ctx, config=cfg, progress=events.append)
    dctx.sql("SELECT v, slow(v) AS s FROM t WHERE v < 5000").collect()
    assert events and not [e for e in events if e.kind == "rows"]


def test_status_shows_workers_and_queries(data):
    ctx = session(data)
    with LocalCluster(2, restart=False) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, progress=False)
        dctx.sql("SELECT count(*) AS n FROM t").collect()
        status = dctx.status()
        assert sorted(w.url for w in status.workers) == sorted(cluster.urls)
        assert all(w.up and w.rss_bytes > 0 for w in status.workers)
        (q,) = status.queries
        assert (q.sql, q.state, q.rows, q.ran_on) == (
            "SELECT count(*) AS n FROM t",
            "finished",
            1,
            "workers",
        )
        assert q.stages and all(s.done == s.total for s in q.stages.values())
        html = status._repr_html_()
        assert "<table" in html and cluster.urls[0] in html and "count(*)" in html
        with pytest.raises(Exception, match="not found"):
            dctx.sql("SELECT * FROM missing")
        failing = dctx.sql("SELECT CAST(CAST(v AS VARCHAR) || 'x' AS INT) AS bad FROM t")
        with pytest.raises(Exception, match="Cast error"):
            failing.collect()
        latest = dctx.status().queries[0]
        assert (latest.state, latest.ran_on) == ("failed", "workers")
        assert "Cast error" in (latest.error or "")
        cluster.processes[0].kill()
        cluster.processes[0].wait()
        down = [w for w in dctx.status().workers if not w.up]
        assert [w.url for w in down] == [cluster.urls[0]]
        assert cluster.urls[0] in (down[0].error or "")


def test_a_new_context_shows_none_of_a_freed_one_s_queries():
    """A context or cluster is shown its own queries only, even when it takes the place in
    memory (and so the ``id()``) of one freed before it: the dashboard of a new cluster
    showed an old one's finished query."""
    import gc

    places: set[int] = set()
    reused = False
    # Until a new context has taken a freed one's place (the allocator's choice: most runs
    # within a few contexts, seen once not within 20).
    for i in range(200):
        if reused and i >= 20:
            break
        dctx = DistributedContext(SessionContext(), progress=False)
        reused |= id(dctx) in places
        places.add(id(dctx))
        assert dctx.status().queries == [], "a query of a freed context"
        dctx.sql(f"SELECT {i} AS x").collect()
        assert [(q.sql, q.ran_on) for q in dctx.status().queries] == [
            (f"SELECT {i} AS x", "workers")
        ]
        del dctx
        gc.collect()
    assert reused, "no context took a freed one's place in memory: the case went untested"


def test_dashboard_needs_its_token_and_stays_local():
    ctx = SessionContext()
    with LocalCluster(1) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, progress=False)
        with dctx.dashboard() as board:
            assert board.url.startswith("http://127.0.0.1:") and "token=" in board.url
            bare = board.url.split("?")[0]
            for path in ("", "api/status", "api/plan?id=1"):
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(bare + path, timeout=10)
                assert e.value.code == 401
            wrong = urllib.request.Request(
                bare + "api/status", headers={"Authorization": "Bearer x"}
            )
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(wrong, timeout=10)
            token = cluster.security.token
            right = urllib.request.Request(
                bare + "api/status", headers={"Authorization": f"Bearer {token}"}
            )
            assert b'"workers"' in urllib.request.urlopen(right, timeout=10).read()
            page = urllib.request.urlopen(board.url, timeout=10)
            assert "HttpOnly" in page.headers["Set-Cookie"]
            assert b"https://" not in page.read()  # nothing from a CDN
    with pytest.raises(ValueError, match="without a token"):
        Dashboard(lambda: None, host="0.0.0.0")  # type: ignore[arg-type,return-value]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return found


def _browse(url: str, *args: str) -> str:
    """Load ``url`` in headless Chromium, let its script run, and return the rendered DOM
    (or take a screenshot, with ``--screenshot=...``)."""
    out = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=2500", "--window-size=1280,720", *args, url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return out.stdout


def _rows(dom: str) -> dict[str, list[dict[str, str]]]:
    """The workers, queries and stages the page rendered (from their data-* attributes)."""
    found: dict[str, list[dict[str, str]]] = {"worker": [], "query": [], "stage": []}
    for kind, attrs in re.findall(r'<(?:tr|span) class="(worker|query|stage)"([^>]*)>', dom):
        if "${" not in attrs:  # the script's own templates are in the DOM too
            found[kind].append(dict(re.findall(r'data-([a-z]+)="([^"]*)"', attrs)))
    return found


@pytest.mark.slow
def test_dashboard_in_a_real_browser(data, tmp_path):
    """The page shows both workers and the running query's stages advancing between two
    screenshots, then the finished query with its row count."""
    shots = Path(os.environ.get("DFDPY_SCREENSHOTS", tmp_path))
    gate = tmp_path / "hold"
    gate.touch()
    ctx = session(data, gate)
    with LocalCluster(2, dashboard=True) as cluster:
        _browse(cluster.dashboard_url, "--dump-dom")  # Chromium's first start is the slow one
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT, progress=False)
        df = dctx.sql(SLOW)
        result: list[int] = []
        runner = threading.Thread(target=lambda: result.append(len(df.to_arrow_table())))
        runner.start()
        time.sleep(1.5)
        try:
            first = _rows(_browse(cluster.dashboard_url, "--dump-dom"))
            second = _rows(_browse(cluster.dashboard_url, "--dump-dom"))
            _browse(cluster.dashboard_url, f"--screenshot={shots / 'dashboard-running.png'}")
        finally:
            gate.unlink()  # the rest of the query runs at full speed
        runner.join(timeout=60)
        assert result == [BATCHES * BATCH]
        done = _rows(_browse(cluster.dashboard_url, "--dump-dom"))
        _browse(cluster.dashboard_url, f"--screenshot={shots / 'dashboard-finished.png'}")

    for seen in (first, second, done):
        assert sorted(w["url"] for w in seen["worker"]) == sorted(cluster.urls)
        assert all(w["state"] == "up" for w in seen["worker"]), seen["worker"]
    # Held by the gate, the query is still running at both looks (up to 30 s of them).
    assert [q["state"] for q in first["query"]] == ["running"]
    assert [q["state"] for q in second["query"]] == ["running"]
    rows = [sum(int(s["rows"] or 0) for s in seen["stage"]) for seen in (first, second)]
    assert 0 < rows[0] < rows[1], rows
    (q,) = done["query"]
    assert q["state"] == "finished" and int(q["rows"]) == BATCHES * BATCH
    assert (shots / "dashboard-running.png").stat().st_size > 10_000


class _nothing:
    """``with`` of no cluster (the embedded one)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        pass
