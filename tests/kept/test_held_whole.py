"""A small kept table is held whole by one worker (``hold_whole_below``), so that its
follow-ups are one-task stages: no shuffle between workers. Each answer is compared with
single-node on the same data, and each run checked to be on the workers."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import write_v_g_parts
from datafusion import SessionContext
from prometheus_client.parser import text_string_to_metric_families

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

ROWS = 800_000
FOLLOW_UPS = [
    "SELECT g, count(*) AS n, sum(v) AS s FROM kept GROUP BY g ORDER BY g",
    "SELECT count(DISTINCT v % 1000) AS d FROM kept WHERE v % 3 = 0",
    "SELECT a.g, count(*) AS n FROM kept a JOIN kept b ON a.v = b.v + 1 GROUP BY a.g ORDER BY a.g",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four Parquet files: the query making a table runs in tasks on both workers."""
    return write_v_g_parts(tmp_path_factory.mktemp("src"), ROWS, 50_000)


def _sessions(
    source: Path, workers: LocalCluster | None, **config: int
) -> tuple[SessionContext, DistributedContext]:
    single, ctx = SessionContext(), SessionContext()
    for c in (single, ctx):
        c.register_parquet("src", str(source))
    dctx = DistributedContext(ctx, workers, config=DistributedConfig(**config), progress=False)
    return single, dctx


def _holders(dctx: DistributedContext, name: str) -> dict[str, int]:
    # A cached frame's table is named after its query ("cache of SELECT ...").
    (table,) = [k for k in dctx.status().kept if k.name == name or k.name.startswith("cache of")]
    return {s["holder"]: s["rows"] for s in table.shares if s["rows"]}


def _tasks(plan: str) -> list[int]:
    return [int(n) for n in re.findall(r"tasks=(\d+)", plan)]


def _make(single: SessionContext, dctx: DistributedContext, how: str) -> None:
    query = "SELECT v, g FROM src WHERE v % 2 = 0"
    if how == "CREATE TABLE AS":
        single.sql(f"CREATE TABLE kept AS {query}")
        dctx.sql(f"CREATE TABLE kept AS {query}")
    else:
        single.register_view("kept", single.sql(query).cache())
        dctx.ctx.register_view("kept", dctx.sql(query).cache())


@pytest.mark.parametrize("how", ["CREATE TABLE AS", "cache"])
def test_a_small_kept_table_is_held_by_one_worker_and_its_follow_ups_are_one_task(
    source, workers, how
):
    single, dctx = _sessions(source, workers)
    made = dctx.sql("SELECT v, g FROM src WHERE v % 2 = 0")
    assert max(_tasks(dctx.explain(made))) == 2  # made by tasks on two workers
    _make(single, dctx, how)
    holders = _holders(dctx, "kept")
    assert len(holders) == 1, holders
    assert sum(holders.values()) == ROWS // 2
    for sql in FOLLOW_UPS:
        assert_distributed_equal(single, dctx, sql)
        df = dctx.sql(sql)
        df.collect()
        assert_ran_on_workers(df, dctx)
        plan = dctx.explain(sql)
        assert _tasks(plan) and set(_tasks(plan)) == {1}, plan
        assert "NetworkShuffleExec" not in plan, plan


def test_hold_whole_below_zero_leaves_each_part_where_it_was_made(source, workers):
    single, dctx = _sessions(source, workers, hold_whole_below=0)
    _make(single, dctx, "CREATE TABLE AS")
    assert len(_holders(dctx, "kept")) == 2, _holders(dctx, "kept")
    assert max(_tasks(dctx.explain(FOLLOW_UPS[0]))) == 2
    for sql in FOLLOW_UPS:
        assert_distributed_equal(single, dctx, sql)


def test_a_table_over_the_limit_stays_spread_and_set_changes_the_limit(source, workers):
    single, dctx = _sessions(source, workers, hold_whole_below=10_000)
    _make(single, dctx, "CREATE TABLE AS")
    assert len(_holders(dctx, "kept")) == 2
    dctx.sql(f"SET distributed.hold_whole_below = {64 << 20}")
    query = "SELECT v, g FROM src WHERE v % 2 = 1"
    single.sql(f"CREATE TABLE odd AS {query}")
    dctx.sql(f"CREATE TABLE odd AS {query}")
    assert len(_holders(dctx, "odd")) == 1
    assert_distributed_equal(single, dctx, "SELECT count(*) AS n, sum(v) AS s FROM odd")
    with pytest.raises(Exception, match="hold_whole_below"):
        dctx.sql("SET distributed.hold_whole_below = lots")


def test_inserted_rows_join_the_worker_holding_the_table(source, workers):
    single, dctx = _sessions(source, workers)
    _make(single, dctx, "CREATE TABLE AS")
    (holder,) = _holders(dctx, "kept")
    for c in (single, dctx):
        got = c.sql("INSERT INTO kept SELECT v, g FROM src WHERE v % 2 = 1").to_pylist()
        assert got == [{"count": ROWS // 2}]
    assert _holders(dctx, "kept") == {holder: ROWS}
    for sql in FOLLOW_UPS:
        assert_distributed_equal(single, dctx, sql)
    # A table held whole and its insert past the limit: the insert's rows stay where made.
    dctx.sql("SET distributed.hold_whole_below = 1")
    for c in (single, dctx):
        c.sql("INSERT INTO kept SELECT v, g FROM src WHERE v % 5 = 0").collect()
    assert len(_holders(dctx, "kept")) == 2
    assert_distributed_equal(single, dctx, FOLLOW_UPS[0])


def test_delete_and_update_of_a_table_held_whole_keep_it_whole(source, workers):
    single, dctx = _sessions(source, workers)
    _make(single, dctx, "CREATE TABLE AS")
    assert dctx.sql("DELETE FROM kept WHERE v < 1000").to_pylist() == [{"count": 500}]
    assert dctx.sql("UPDATE kept SET g = 'x' WHERE v >= 799000").to_pylist() == [{"count": 500}]
    assert len(_holders(dctx, "kept")) == 1
    single.sql("DELETE FROM kept WHERE v < 1000").collect()
    single.sql("UPDATE kept SET g = 'x' WHERE v >= 799000").collect()
    for sql in FOLLOW_UPS:
        assert_distributed_equal(single, dctx, sql)


def test_a_lost_holder_of_a_table_held_whole_costs_it_nothing(source):
    """The worker holding the whole table is killed: the table is made again from its query on
    the worker left, held whole there, and the answers are the same."""
    with LocalCluster(2) as cluster:
        single, dctx = _sessions(source, cluster)
        _make(single, dctx, "CREATE TABLE AS")
        (holder,) = _holders(dctx, "kept")
        before = list(cluster.urls)
        cluster.processes[before.index(holder)].kill()
        deadline = time.monotonic() + 20
        while holder in cluster.urls and time.monotonic() < deadline:
            time.sleep(0.1)
        for sql in FOLLOW_UPS:
            assert_distributed_equal(single, dctx, sql)
        holders = _holders(dctx, "kept")
        assert holder not in holders and len(holders) == 1, holders


def _kept_parts_held(metrics_url: str) -> float:
    """The parts of kept tables a worker process says it holds (its Prometheus metrics)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dfdpy_kept_parts":
                return sample.value
    raise AssertionError(f"no dfdpy_kept_parts in {metrics_url}")


def test_the_workers_a_table_moved_from_hold_none_of_it(source):
    """The move frees what the other holders held: a worker holds parts only where the
    coordinator says it does, and none once the table is dropped."""
    with LocalCluster(2, metrics=True) as cluster:
        single, dctx = _sessions(source, cluster)
        _make(single, dctx, "CREATE TABLE AS")
        (holder,) = _holders(dctx, "kept")
        held = dict(zip(cluster.urls, map(_kept_parts_held, cluster.metrics_urls), strict=True))
        assert held[holder] > 0 and sum(held.values()) == held[holder], held
        dctx.sql("DROP TABLE kept")
        deadline = time.monotonic() + 10
        while sum(map(_kept_parts_held, cluster.metrics_urls)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(map(_kept_parts_held, cluster.metrics_urls)) == 0
