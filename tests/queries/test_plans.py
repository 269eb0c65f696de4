"""The plan really is distributed: stages joined by network boundaries."""

from __future__ import annotations

import re

from conftest import is_distributed


def test_group_by_over_multi_file_table_is_distributed(dctx, tpch_dir):
    assert len(list((tpch_dir / "lineitem").glob("*.parquet"))) > 1
    plan = dctx.explain("SELECT l_returnflag, count(*) FROM lineitem GROUP BY l_returnflag")
    assert is_distributed(plan), plan
    assert "NetworkShuffleExec" in plan or "NetworkCoalesceExec" in plan


def test_join_is_distributed(dctx):
    plan = dctx.explain(
        "SELECT o_orderpriority, count(*) FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
        "GROUP BY o_orderpriority"
    )
    assert is_distributed(plan), plan
    assert "HashJoinExec" in plan


def test_explain_shows_stages_and_tasks(dctx):
    plan = dctx.explain("SELECT l_returnflag, sum(l_quantity) FROM lineitem GROUP BY 1")
    stages = re.findall(r"Stage (\d+)", plan)
    assert len(set(stages)) >= 2, plan
    # Each stage's header gives its task count; the scan stage splits over the workers.
    tasks = [int(n) for n in re.findall(r"── Stage \d+ ── tasks=(\d+)", plan)]
    assert len(tasks) == len(set(stages)) and max(tasks) >= 2, plan


def test_explain_of_dataframe_equals_explain_of_sql_result(dctx):
    sql = "SELECT l_returnflag, count(*) FROM lineitem GROUP BY l_returnflag"
    plan = dctx.explain(dctx.sql(sql))
    assert is_distributed(plan)
    assert plan == dctx.explain(sql)


def test_explain_graphviz(dctx):
    dot = dctx.explain("SELECT count(*) FROM lineitem GROUP BY l_linestatus", format="graphviz")
    assert "digraph" in dot


def test_embedded_cluster_defaults_to_at_least_two_workers(ctx):
    from datafusion_distributed_py import DistributedContext

    dctx = DistributedContext(ctx)
    assert len(dctx.worker_urls) >= 2


def test_workers_used_by_a_stage_are_several(dctx):
    plan = dctx.explain("SELECT l_returnflag, count(*) FROM lineitem GROUP BY l_returnflag")
    # a stage that runs as more than one task
    assert re.search(r"t1:", plan), plan
