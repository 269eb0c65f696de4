"""A query history that outlives the process: the event log (``DistributedConfig(event_log=)``)
and the history view reading it (``python -m datafusion_distributed_py.history``), the
dashboard's own page in a real headless Chromium."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datafusion import SessionContext
from test_live_view import _browse

from datafusion_distributed_py import DistributedConfig, DistributedContext, event_log
from datafusion_distributed_py.event_log import read_events

#: A value only the table holds: the log must never carry it.
VALUE = "v4lue-only-in-the-table"

#: Run in a process of its own, which ends before the history is read.
QUERIES = textwrap.dedent(
    """
    import sys
    from datafusion import SessionContext
    from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster

    ctx = SessionContext()
    ctx.from_pydict({"k": [i % 5 for i in range(20_000)], "s": [VALUE] * 20_000}, name="t")
    config = DistributedConfig(event_log=sys.argv[1], max_tasks_per_stage=2,
                               file_scan_config_bytes_per_partition=1)
    # The workers log each task they run into the same log (the worker CLI's --event-log).
    with LocalCluster(2, event_log=sys.argv[1]) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=config, progress=False)
        dctx.sql("SELECT k, count(*) AS n, max(s) AS m FROM t GROUP BY k ORDER BY k").collect()
        # A subquery's result is planned into the query as a literal: not in the log either.
        dctx.sql("SELECT count(*) FROM t WHERE s = (SELECT max(s) FROM t)").collect()
        try:
            dctx.sql("SELECT CAST(s AS INT) FROM t").collect()  # its error quotes the value
        except Exception:
            pass
    """
).replace("VALUE", repr(VALUE))


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An event log written by a process that has ended."""
    log = tmp_path_factory.mktemp("events")
    script = log.parent / "queries.py"
    script.write_text(QUERIES)
    subprocess.run([sys.executable, str(script), str(log)], check=True, timeout=300)
    return log


def test_each_run_is_one_record_with_stages_tasks_and_workers(logged):
    events = read_events(str(logged), kind="query")
    by_sql = {e["sql"].split(" FROM")[0]: e for e in events}
    assert len(events) == 3, [e["sql"] for e in events]
    grouped = by_sql["SELECT k, count(*) AS n, max(s) AS m"]
    assert grouped["state"] == "finished" and grouped["ran_on"] == "workers"
    assert grouped["rows"] == 5 and grouped["failure"] is None
    assert grouped["finished"] >= grouped["started"] > 0
    workers = {t["worker_url"] for t in grouped["tasks"]}
    assert len(workers) == 2, "the tasks ran on both worker processes"
    worker_stages = [s for s in grouped["stages"] if s["stage"] > 0]
    assert len(worker_stages) >= 2, "a two-stage plan: scan and aggregate, then the merge"
    for stage in worker_stages:
        assert stage["tasks"] >= 1 and stage["operators"] and stage["workers"]
    assert sum(t["output_rows"] for t in grouped["tasks"] if t["stage"] == 1) > 0
    failed = by_sql["SELECT CAST(s AS INT)"]
    assert failed["state"] == "failed"
    assert failed["failure"] == {"kind": "query", "type": "Exception"}


def test_the_log_holds_no_table_values(logged):
    text = "".join(p.read_text() for p in logged.glob("*.jsonl"))
    assert text.count('"event":"query"') == 3 and '"event":"task"' in text
    assert VALUE not in text


def test_workers_log_each_task_they_ran(logged):
    """Each worker process writes a record per task, under the query id the coordinator's
    record lists: the same tasks, the same rows, from both processes."""
    grouped = next(e for e in read_events(str(logged), kind="query") if "GROUP BY" in e["sql"])
    assert len(grouped["query_ids"]) == 1
    tasks = [t for t in read_events(str(logged), kind="task")
             if t["query_id"] in grouped["query_ids"]]  # fmt: skip
    assert len({t["pid"] for t in tasks}) == 2
    assert {t["worker_url"] for t in tasks} == {t["worker_url"] for t in grouped["tasks"]}
    by_key = {(t["stage"], t["task"]): t for t in tasks}
    assert len(by_key) == len(tasks) == len(grouped["tasks"])
    for seen in grouped["tasks"]:
        ran = by_key[(seen["stage"], seen["task"])]
        assert ran["worker_url"] == seen["worker_url"] and ran["state"] == "finished"
        assert ran["output_rows"] == seen["output_rows"]
        assert ran["finished"] >= ran["started"] >= grouped["started"] - 1


def test_the_history_view_shows_past_queries_in_a_browser(logged):
    """After the process that ran them ended, a fresh process serves their history: the
    list (each query's state), and one query's stages and tasks with their workers."""
    page = subprocess.Popen(
        [sys.executable, "-m", "datafusion_distributed_py.history", str(logged)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert page.stdout is not None
        url = page.stdout.readline().strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), url
        events = read_events(str(logged), kind="query")
        grouped = next(e for e in events if "GROUP BY" in e["sql"])
        dom = _browse(f"{url}?query={grouped['id']}", "--dump-dom")
        queries = re.findall(r'<tr class="query" data-id="([^"$]+)" data-state="(\w+)"', dom)
        assert sorted(state for _, state in queries) == ["failed", "finished", "finished"]
        assert "history of" in dom and "GROUP BY k ORDER BY k" in dom
        tasks = re.findall(r'<tr class="task" data-stage="(\d+)" data-worker="([^"$]+)"', dom)
        assert {w for _, w in tasks} == {t["worker_url"] for t in grouped["tasks"]}
        assert len(tasks) == len(grouped["tasks"])
        assert "Stage 1:" in dom  # the stages, with their operators
    finally:
        page.kill()


def test_filters_of_the_page_data_and_a_missing_query(logged):
    from datafusion_distributed_py.history import History

    history = History(str(logged))
    status = history.status()
    assert status["mode"] == "history" and len(status["queries"]) == 3
    assert status["queries"][0]["started"] >= status["queries"][-1]["started"]  # newest first
    assert history.query("no-such-id") is None


def test_rotation_by_size_and_concurrent_writers(tmp_path):
    """Past ``event_log_max_bytes`` a process starts a new file; processes logging at once
    each write files of their own, and every record reads back whole."""
    script = tmp_path / "many.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from datafusion import SessionContext
            from datafusion_distributed_py import DistributedConfig, DistributedContext
            config = DistributedConfig(event_log=sys.argv[1], event_log_max_bytes=2000)
            dctx = DistributedContext(SessionContext(), config=config, progress=False)
            for i in range(15):
                dctx.sql(f"SELECT {i} AS n, '{sys.argv[2]}' AS who").collect()
            """
        )
    )
    log = tmp_path / "log"
    procs = [
        subprocess.Popen([sys.executable, str(script), str(log), who]) for who in ("a", "b", "c")
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    files = sorted(log.glob("events-*.jsonl"))
    pids = {f.name.split("-")[-3] for f in files}
    assert len(pids) == 3, "one series of files per process"
    assert len(files) > 3, "rotated by size"
    assert all(f.stat().st_size <= 2000 + 2000 for f in files)
    events = read_events(str(log))
    assert len(events) == 45
    for who in "abc":
        mine = [e for e in events if f"'{who}' AS who" in e["sql"]]
        assert sorted(int(e["sql"].split()[1]) for e in mine) == list(range(15))


def test_an_event_log_that_cannot_be_written_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    dctx = DistributedContext(
        SessionContext(), config=DistributedConfig(event_log=str(blocker / "log")), progress=False
    )
    with pytest.raises(ValueError, match="event_log=.*a-file/log.* cannot be written"):
        dctx.sql("SELECT 1").collect()


def test_a_fallback_is_logged_with_its_reason(tmp_path):
    ctx = SessionContext()
    ctx.sql("CREATE TABLE s (x INT) AS VALUES (1)").collect()
    dctx = DistributedContext(
        ctx, config=DistributedConfig(event_log=str(tmp_path)), progress=False
    )
    # A sink into a memory table cannot be serialised: it runs single-node, and says why.
    dctx.sql("INSERT INTO s VALUES (2)").collect()
    event_log.flush()
    (event,) = read_events(str(tmp_path))
    assert event["ran_on"] == "coordinator" and event["fallback_reason"]
    assert json.dumps(event)  # plain JSON throughout


def test_a_log_is_read_as_it_grows_whole_lines_only(tmp_path):
    """The history view reads each file from where it stopped: a line still being written is
    left for the next read, then read once."""
    from datafusion_distributed_py.event_log import LogReader

    path = tmp_path / "events-20260101T000000-host-1-abc123-0000.jsonl"
    first = json.dumps({"v": 1, "event": "query", "id": "a", "started": 1.0})
    path.write_text(first + '\n{"v": 1, "event": "task", "id": "b", ')
    reader = LogReader(str(tmp_path))
    assert [e["id"] for e in reader.read()] == ["a"]
    with path.open("a") as f:
        f.write('"started": 2.0}\n')
    assert [e["id"] for e in reader.read()] == ["a", "b"]
    assert [e["id"] for e in reader.read(kind="task")] == ["b"]
    assert reader.read() == read_events(str(tmp_path))
