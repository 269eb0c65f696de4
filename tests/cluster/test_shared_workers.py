"""Queries of several users share the workers: a query planned while another one's result is
being read on the same workers gets the workers shared among them (fewer tasks per stage), and
``explain`` says so; alone, or with ``max_tasks_per_stage`` set, it is planned as before. Each
answer is compared with single-node's."""

from __future__ import annotations

import gc
import re
import threading

from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext
from datafusion_distributed_py.testing import (
    assert_distributed_equal,
    assert_ran_on_workers,
    assert_same_rows,
)

GROUP_BY = "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS q FROM lineitem GROUP BY 1"
LONG = "SELECT l_orderkey, l_comment FROM lineitem"


def _tasks(plan: str) -> set[int]:
    return {int(n) for n in re.findall(r"tasks=(\d+)", plan)}


def _reading(dctx: DistributedContext):
    """A result being read: the first batch of a stream taken, the rest left."""
    stream = dctx.sql(LONG).execute_stream()
    next(iter(stream))
    return stream


def test_a_query_beside_another_shares_the_workers_and_says_so(ctx: SessionContext, workers):
    dctx = DistributedContext(ctx, workers, progress=False)
    alone = dctx.sql(GROUP_BY)
    assert _tasks(dctx.explain(alone)) == {2}
    reading = _reading(dctx)
    beside = dctx.sql(GROUP_BY)
    plan = dctx.explain(beside)
    assert _tasks(plan) == {1}, plan
    assert "Stages sized for a shared cluster: at most 1 task(s) per stage: 1 other query" in plan
    assert_distributed_equal(ctx, dctx, GROUP_BY, ordered=False)
    assert_ran_on_workers(beside, dctx, stages=False)
    # Once that result is read and let go, a query has the workers to itself again.
    for _ in reading:
        pass
    del reading
    gc.collect()
    again = dctx.sql(GROUP_BY)
    assert _tasks(dctx.explain(again)) == {2}
    assert "shared cluster" not in dctx.explain(again)


def test_max_tasks_per_stage_set_is_kept_beside_other_queries(ctx: SessionContext, workers):
    dctx = DistributedContext(
        ctx, workers, progress=False, config=DistributedConfig(max_tasks_per_stage=2)
    )
    reading = _reading(dctx)
    plan = dctx.explain(dctx.sql(GROUP_BY))
    assert _tasks(plan) == {2} and "shared cluster" not in plan
    del reading


def test_many_users_at_once_get_single_node_s_answers(ctx: SessionContext, workers):
    """Eight threads on one context, each running the same queries: every answer equal to
    single-node's, whatever share of the workers each was planned with."""
    dctx = DistributedContext(ctx, workers, progress=False)
    queries = [
        GROUP_BY,
        "SELECT o_orderpriority, count(*) AS n FROM orders o JOIN lineitem l "
        "ON o.o_orderkey = l.l_orderkey WHERE l_quantity > 45 GROUP BY 1 ORDER BY 1",
        "SELECT n_name, count(*) AS c FROM customer JOIN nation ON c_nationkey = n_nationkey "
        "GROUP BY n_name ORDER BY c DESC, n_name LIMIT 5",
    ]
    want = [ctx.sql(q).to_arrow_table() for q in queries]
    wrong: list[str] = []

    def user(i: int) -> None:
        for k in range(len(queries)):
            n = (i + k) % len(queries)
            try:
                df = dctx.sql(queries[n])
                got = df.to_arrow_table()
                assert_same_rows(got, want[n], ordered="ORDER BY" in queries[n])
                assert_ran_on_workers(df, dctx, stages=False)
            except Exception as e:  # counted, and shown, below
                wrong.append(f"{queries[n]}: {e}")

    threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a user's query never returned"
    assert wrong == []


def test_a_dataframe_api_frame_beside_another_shares_the_workers(ctx: SessionContext, workers):
    """The same sharing for a frame built with the DataFrame API (``dctx.table``)."""
    from datafusion import col
    from datafusion import functions as f

    dctx = DistributedContext(ctx, workers, progress=False)
    reading = _reading(dctx)
    frame = dctx.table("lineitem").aggregate([col("l_returnflag")], [f.count(col("l_orderkey"))])
    plan = dctx.explain(frame)
    assert _tasks(plan) == {1} and "shared cluster" in plan, plan
    want = ctx.table("lineitem").aggregate([col("l_returnflag")], [f.count(col("l_orderkey"))])
    assert_same_rows(frame.to_arrow_table(), want.to_arrow_table(), ordered=False)
    assert_ran_on_workers(frame, dctx, stages=False)
    del reading
