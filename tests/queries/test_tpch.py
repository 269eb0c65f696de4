"""All 22 TPC-H queries: distributed rows equal single-node rows."""

from __future__ import annotations

import pytest
from conftest import is_distributed

from datafusion_distributed_py.testing import assert_distributed_equal
from harness import tpch


@pytest.mark.parametrize("n", tpch.QUERIES)
def test_tpch_query_matches_single_node(n, ctx, dctx):
    sql = tpch.query(n)
    assert_distributed_equal(ctx, dctx, sql, ordered="order by" in sql.lower())


def test_most_tpch_queries_are_really_distributed(dctx):
    distributed = [n for n in tpch.QUERIES if is_distributed(dctx.explain(tpch.query(n)))]
    # Every query scans a multi-file table; all of them must cross network boundaries.
    assert distributed == list(tpch.QUERIES)
