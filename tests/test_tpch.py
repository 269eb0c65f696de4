"""All 22 TPC-H queries: distributed rows equal single-node rows."""

from __future__ import annotations

import pytest
from conftest import assert_same_rows, is_distributed

from harness import tpch


@pytest.mark.parametrize("n", tpch.QUERIES)
def test_tpch_query_matches_single_node(n, ctx, dctx):
    sql = tpch.query(n)
    expected = ctx.sql(sql).to_arrow_table()
    df = dctx.sql(sql)
    got = df.to_arrow_table()
    assert_same_rows(got, expected, ordered="order by" in sql.lower())


def test_most_tpch_queries_are_really_distributed(dctx):
    distributed = [n for n in tpch.QUERIES if is_distributed(dctx.explain(tpch.query(n)))]
    # Every query scans a multi-file table; all of them must cross network boundaries.
    assert distributed == list(tpch.QUERIES)
