"""Results are ordinary datafusion DataFrames; the DataFrame-API path; other table kinds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import SPLIT_CONFIG, assert_same_rows, is_distributed
from datafusion import DataFrame, SessionContext, col, lit
from datafusion import functions as f

from datafusion_distributed_py import DistributedContext
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

GROUPED = "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS q FROM lineitem GROUP BY 1"


def test_result_is_a_plain_dataframe(dctx):
    df = dctx.sql(GROUPED)
    assert type(df) is DataFrame
    assert_ran_on_workers(df, dctx)  # and still distributed


def test_dataframe_methods(dctx, ctx, tmp_path):
    expected = ctx.sql(GROUPED).to_arrow_table()
    df = dctx.sql(GROUPED)
    assert_ran_on_workers(df, dctx)
    assert_same_rows(df.to_arrow_table(), expected, ordered=False)
    assert df.count() == expected.num_rows
    assert sorted(r["l_returnflag"] for r in df.to_pylist()) == sorted(
        expected.column("l_returnflag").to_pylist()
    )
    pdf = df.to_pandas()
    assert set(pdf.columns) == {"l_returnflag", "n", "q"}
    batches = df.collect()
    assert sum(b.num_rows for b in batches) == expected.num_rows
    df.show()
    out = tmp_path / "out"
    df.write_parquet(str(out))
    written = pq.read_table(str(out))
    assert_same_rows(written.select(["l_returnflag", "n", "q"]), expected, ordered=False)


def test_further_operations_on_a_result(dctx, ctx):
    def further(c: SessionContext | DistributedContext) -> DataFrame:
        frame = c.sql(GROUPED).filter(col("n") > lit(0)).sort(col("l_returnflag"))
        return frame.select("l_returnflag")

    assert_distributed_equal(ctx, dctx, further)


def test_execute_stream_yields_batches(dctx, ctx):
    df = dctx.sql("SELECT l_orderkey, l_quantity FROM lineitem WHERE l_quantity > 10")
    assert_ran_on_workers(df, dctx)
    total = 0
    n_batches = 0
    for batch in df.execute_stream():
        total += batch.to_pyarrow().num_rows
        n_batches += 1
    expected = ctx.sql("SELECT count(*) AS c FROM lineitem WHERE l_quantity > 10").to_pylist()
    assert total == expected[0]["c"]
    assert n_batches >= 1


def test_dataframe_api_path(dctx, ctx):
    def build(c: SessionContext) -> DataFrame:
        return (
            c.table("lineitem")
            .filter(col("l_quantity") > lit(20))
            .aggregate([col("l_linestatus")], [f.sum(col("l_extendedprice")).alias("total")])
        )

    distributed = dctx.distribute(build(ctx))
    assert_ran_on_workers(distributed, dctx)
    assert_same_rows(distributed.to_arrow_table(), build(ctx).to_arrow_table(), ordered=False)


def test_results_are_lazy(tmp_path):
    """Nothing runs until a result is asked for: a file removed after planning is noticed
    only when the query runs."""
    path = tmp_path / "t"
    path.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"k": [i] * 10, "v": list(range(10))}), path / f"{i}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(path) + "/")
    dctx = DistributedContext(
        ctx, config=SPLIT_CONFIG.replace(file_scan_config_bytes_per_partition=1)
    )
    df = dctx.sql("SELECT k, sum(v) AS s FROM t GROUP BY k")
    assert_ran_on_workers(df, dctx)  # planned, distributed: nothing ran yet
    (path / "1.parquet").unlink()
    with pytest.raises(Exception, match=r"(?s)(1.parquet|not found|No such file).*on worker"):
        df.collect()


def test_in_memory_table(ctx):
    ctx.from_pydict({"k": [1, 2, 1, 3] * 50, "v": list(range(200))}, name="mem")
    dctx = DistributedContext(ctx)
    sql = "SELECT k, sum(v) AS s, count(*) AS c FROM mem GROUP BY k"
    assert_distributed_equal(ctx, dctx, sql)


def test_view(ctx, dctx):
    ctx.sql("CREATE VIEW big_orders AS SELECT * FROM orders WHERE o_totalprice > 100000")
    sql = "SELECT o_orderstatus, count(*) AS c FROM big_orders GROUP BY o_orderstatus"
    assert_distributed_equal(ctx, dctx, sql)


def test_csv_table(tmp_path):
    path = tmp_path / "csv"
    path.mkdir()
    for i in range(3):
        (path / f"part{i}.csv").write_text(
            "k,v\n" + "".join(f"{j % 5},{j + i}\n" for j in range(100))
        )
    ctx = SessionContext()
    ctx.register_csv("c", str(path) + "/")
    dctx = DistributedContext(
        ctx, config=SPLIT_CONFIG.replace(file_scan_config_bytes_per_partition=64)
    )
    sql = "SELECT k, sum(v) AS s FROM c GROUP BY k"
    assert_distributed_equal(ctx, dctx, sql)


def test_statements_through_dctx(dctx, ctx, tmp_path):
    dctx.sql("CREATE VIEW v_nation AS SELECT n_name FROM nation")
    assert ctx.sql("SELECT count(*) AS c FROM v_nation").to_pylist() == [{"c": 25}]
    dctx.sql("SET datafusion.execution.batch_size = 1234")
    assert (
        ctx.sql(
            "SELECT value FROM information_schema.df_settings "
            "WHERE name = 'datafusion.execution.batch_size'"
        ).to_pylist()[0]["value"]
        == "1234"
    )
    dctx.sql("DROP VIEW v_nation")
    with pytest.raises(Exception, match="v_nation"):
        ctx.sql("SELECT * FROM v_nation")
    csv = tmp_path / "ext.csv"
    csv.write_text("a,b\n1,2\n3,4\n")
    dctx.sql(
        f"CREATE EXTERNAL TABLE ext (a INT, b INT) STORED AS CSV LOCATION '{csv}' "
        "OPTIONS ('format.has_header' 'true')"
    )
    df = dctx.sql("SELECT sum(a) AS s FROM ext")
    assert_ran_on_workers(df, dctx, stages=False)  # a table DDL made through dctx
    assert df.to_pylist() == [{"s": 4}]


def test_user_ctx_still_plans_single_node(dctx, ctx):
    dctx.sql(GROUPED).collect()
    plan = ctx.sql(GROUPED).execution_plan().display_indent()
    assert "Network" not in plan and "Distributed" not in plan


def test_results_read_from_the_core_match_single_node(dctx, ctx):
    # A returned frame reads its result straight from the core; every reader gives what
    # single-node gives, with the schema kept when no row comes back.
    for sql in (GROUPED, "SELECT l_orderkey FROM lineitem WHERE l_orderkey < 0"):
        single, df = ctx.sql(sql), dctx.sql(sql)
        assert is_distributed(dctx.explain(df))
        expected = single.to_arrow_table()
        got = df.to_arrow_table()
        assert got.schema == expected.schema
        assert_same_rows(got, expected, ordered=False)
        assert df.count() == single.count()
        assert sorted(map(str, df.to_pylist())) == sorted(map(str, single.to_pylist()))
        got_columns, want_columns = df.to_pydict(), single.to_pydict()
        assert list(got_columns) == list(want_columns)
        for name, values in want_columns.items():
            assert sorted(map(repr, got_columns[name])) == sorted(map(repr, values)), name
        assert sum(b.num_rows for b in df.collect()) == expected.num_rows
        parts = df.collect_partitioned()
        assert sum(b.num_rows for p in parts for b in p) == expected.num_rows
        assert len(df.to_pandas()) == expected.num_rows
        # A frame derived in Python goes through datafusion-python and agrees too.
        derived = df.limit(1_000_000)
        assert_same_rows(derived.to_arrow_table(), expected, ordered=False)


def test_a_set_made_on_ctx_directly_reaches_the_next_query():
    # Settings are read from the session at each query, not cached.
    ctx = SessionContext()
    dctx = DistributedContext(ctx, progress=False)
    sql = "SELECT value FROM generate_series(1, 100)"
    for size in (7, 30):
        ctx.sql(f"SET datafusion.execution.batch_size = {size}").collect()
        df = dctx.sql(sql)
        assert is_distributed(dctx.explain(df))
        sizes = [b.num_rows for b in df.collect()]
        assert sizes == [b.num_rows for b in ctx.sql(sql).collect()]
        assert max(sizes) == size
