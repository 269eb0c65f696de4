"""See and steer a distributed query: EXPLAIN / ANALYZE, metrics, config, progress, logging."""

from __future__ import annotations

import logging
import re

import pyarrow as pa
import pytest
from conftest import SPLIT_CONFIG, is_distributed

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.dataframe import source_of
from datafusion_distributed_py.progress import ProgressEvent, resolve
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

GROUPED = "SELECT l_returnflag, count(*) AS n FROM lineitem GROUP BY l_returnflag"


def stage_tasks(plan: str) -> list[int]:
    return [int(n) for n in re.findall(r"Stage \d+ ── tasks=(\d+)", plan)]


def test_explain_sql_shows_distributed_plan(dctx):
    rows = dctx.sql(f"EXPLAIN {GROUPED}").to_pylist()
    text = "\n".join(r["plan"] for r in rows)
    assert is_distributed(text) and "Stage" in text


def test_explain_analyze_sql_shows_metrics_and_workers(dctx):
    rows = dctx.sql(f"EXPLAIN ANALYZE {GROUPED}").to_pylist()
    text = "\n".join(r["plan"] for r in rows)
    assert "output_rows" in text or "metrics=" in text
    assert "embedded://worker-" in text


def test_explain_formats(dctx):
    assert "digraph" in dctx.explain(GROUPED, format="graphviz")
    with pytest.raises(ValueError, match="format"):
        dctx.explain(GROUPED, format="yaml")


def test_metrics_records(ctx):
    with LocalCluster(2) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
        df = dctx.sql(GROUPED)
        assert_ran_on_workers(df, dctx)
        df.collect()
        records = dctx.metrics(df)
        assert records and {r["worker_url"].rstrip("/") for r in records} <= set(cluster.urls)
        assert {"stage", "task", "output_rows", "output_bytes", "elapsed_compute_ms"} <= set(
            records[0]
        )
        assert all(r["output_rows"] is not None for r in records)
        table = dctx.metrics_table(df)
        assert isinstance(table, pa.Table) and table.num_rows == len(records)
        # The last stage's tasks gave each group once.
        groups = ctx.sql(GROUPED).count()
        last = max(r["stage"] for r in records)
        assert sum(r["output_rows"] for r in records if r["stage"] == last) == groups == 3
        # A scan's tasks gave every lineitem row once, over at least two tasks.
        lineitem_rows = ctx.sql("SELECT count(*) AS c FROM lineitem").to_pylist()[0]["c"]
        scan = dctx.sql("SELECT l_returnflag FROM lineitem")
        scan.collect()
        scanned = dctx.metrics(scan)
        assert len(scanned) >= 2 and {r["ran_on"] for r in scanned} == {"workers"}, scanned
        assert sum(r["output_rows"] for r in scanned) == lineitem_rows


def test_max_tasks_per_stage_changes_the_plan(ctx):
    wide = DistributedContext(ctx, config=SPLIT_CONFIG)
    narrow = DistributedContext(ctx, config=SPLIT_CONFIG.replace(max_tasks_per_stage=1))
    assert max(stage_tasks(wide.explain(GROUPED))) >= 2
    assert max(stage_tasks(narrow.explain(GROUPED))) == 1


def test_set_distributed_option_through_sql(dctx):
    assert max(stage_tasks(dctx.explain(GROUPED))) >= 2
    dctx.sql("SET distributed.max_tasks_per_stage = 1")
    assert dctx.config.max_tasks_per_stage == 1
    assert max(stage_tasks(dctx.explain(GROUPED))) == 1
    with pytest.raises(ValueError, match="unknown distributed option"):
        dctx.sql("SET distributed.no_such_knob = 3")
    with pytest.raises(ValueError, match="invalid value"):
        dctx.sql("SET distributed.max_tasks_per_stage = many")


def test_config_fields_reach_the_planner(ctx):
    cfg = DistributedConfig(file_scan_config_bytes_per_partition=16 * 1024, compression="zstd")
    sql = (
        "SELECT n_name, count(*) AS c FROM nation JOIN customer ON n_nationkey = c_nationkey "
        "GROUP BY 1"
    )
    # The control: with broadcast joins on (the default), this join broadcasts nation to the
    # tasks scanning customer.
    control = DistributedContext(ctx, config=cfg)
    assert "Broadcast" in control.explain(sql), control.explain(sql)
    dctx = DistributedContext(ctx, config=cfg.replace(broadcast_joins=False))
    assert "Broadcast" not in dctx.explain(sql)
    assert_distributed_equal(ctx, dctx, sql)


def test_progress_callback_receives_stage_events(ctx):
    events: list[ProgressEvent] = []
    dctx = DistributedContext(ctx, config=SPLIT_CONFIG, progress=events.append)
    df = dctx.sql(GROUPED)
    df.collect()
    dctx.metrics(df)  # waits for every task to report
    assert events
    stages = {e.stage for e in events}
    assert len(stages) >= 2
    for stage in stages:
        mine = [e for e in events if e.stage == stage]
        assert [e.done for e in mine] == sorted(e.done for e in mine)  # never goes back
        assert mine[-1].done == mine[-1].total > 0
    assert all(isinstance(e.worker_url, str) and e.worker_url for e in events)


def test_progress_defaults_off_when_not_interactive():
    assert resolve(None) is None  # pytest's stderr is not a terminal
    assert resolve(False) is None
    assert callable(resolve(True))
    with pytest.raises(TypeError):
        resolve("yes")  # type: ignore[arg-type]


def test_rust_logs_reach_python_logging(ctx, caplog):
    with caplog.at_level(logging.DEBUG):
        DistributedContext(ctx, config=SPLIT_CONFIG).sql(GROUPED).collect()
    assert any(r.name.startswith("_internal") for r in caplog.records)
    caplog.clear()
    DistributedContext(ctx, config=SPLIT_CONFIG).sql(GROUPED).collect()
    assert not [r for r in caplog.records if r.name.startswith("_internal")]  # quiet by default


def rows(table: pa.Table) -> list[tuple[object, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_a_querys_fixed_cost_is_timed_step_by_step(ctx, dctx):
    """``DistributedPlan.steps()`` (what ``benchmarks/overhead.py`` reports): planning for the
    workers step by step, then the run, once the result was read whole."""
    df = dctx.sql(GROUPED)
    plan = source_of(df)
    planned = [name for name, _ in plan.steps()]
    assert planned == [
        "workers", "session", "decode", "kept tables", "checks", "subqueries",
        "adaptive joins", "rewrites", "stages",
    ]  # fmt: skip
    assert rows(df.to_arrow_table()) == rows(ctx.sql(GROUPED).to_arrow_table())
    assert_ran_on_workers(df, dctx)
    steps = dict(plan.steps())
    assert [name for name, _ in plan.steps()][-2:] == ["start run", "run"]
    assert all(seconds >= 0 for seconds in steps.values())
    # The run scanned lineitem on the workers: it took longer than, say, the checks.
    assert steps["run"] > steps["checks"]


def test_a_kept_table_scanned_by_the_session_reads_its_settings(ctx, dctx):
    """Our providers' FFI scan reads only the calling session's settings (``ffi_scan.rs``):
    single-node reads of a kept table, before and after a SET, give its rows."""
    dctx.sql("CREATE TABLE kept_flags AS SELECT l_returnflag, l_quantity FROM lineitem")
    sql = "SELECT l_returnflag, sum(l_quantity) AS q FROM kept_flags GROUP BY l_returnflag"
    want = rows(
        ctx.sql(
            "SELECT l_returnflag, sum(l_quantity) AS q FROM lineitem GROUP BY l_returnflag"
        ).to_arrow_table()
    )
    assert rows(ctx.sql(sql).to_arrow_table()) == want
    ctx.sql("SET datafusion.execution.batch_size = 100")
    assert rows(ctx.sql(sql).to_arrow_table()) == want
    df = dctx.sql(sql)
    assert rows(df.to_arrow_table()) == want
    assert_ran_on_workers(df, dctx)
