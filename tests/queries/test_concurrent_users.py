"""Several users at once on one ``DistributedContext``: threads running TPC-H queries at the
same time each get single-node's answers (what ``benchmarks/concurrency.py`` times)."""

from __future__ import annotations

import pyarrow as pa

from benchmarks.concurrency import run_users, wrong_answers
from datafusion_distributed_py import DistributedContext, ran_on
from harness import tpch

QUERIES = [1, 3, 5, 9, 13, 18]


def test_users_running_queries_at_once_get_single_nodes_answers(ctx, workers):
    expected = {n: ctx.sql(tpch.query(n)).to_arrow_table() for n in QUERIES}
    dctx = DistributedContext(ctx, workers=workers, progress=False)
    where: list[str] = []

    def run(sql: str) -> pa.Table:
        df = dctx.sql(sql)
        table = df.to_arrow_table()
        where.append(ran_on(df))
        return table

    _, answers = run_users(run, QUERIES, users=4)
    assert len(answers) == 4 * len(QUERIES)
    assert wrong_answers(answers, expected) == []
    assert where == ["workers"] * len(answers)
