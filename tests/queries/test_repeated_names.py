"""Results with two columns of one name (``SELECT *`` of a join whose sides share ``id``, a
self-join) run on the workers and read back with single-node's names, whichever way the
result is read."""

from __future__ import annotations

import glob
import io
import logging
from contextlib import redirect_stdout
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, col

from datafusion_distributed_py import DistributedConfig, DistributedContext, ran_on
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

#: TPC-H joins as a user first writes them: both sides name their key columns alike once
#: aliased, and self-joins repeat every name.
QUERIES = [
    "SELECT * FROM nation n JOIN region r ON n.n_regionkey = r.r_regionkey "
    "JOIN nation n2 ON n2.n_nationkey = n.n_nationkey ORDER BY n.n_nationkey",
    "SELECT * FROM nation a JOIN nation b ON a.n_regionkey = b.n_regionkey",
    "SELECT a.n_name, b.n_name FROM nation a JOIN nation b ON a.n_nationkey < b.n_nationkey",
    "SELECT * FROM orders o JOIN orders p USING (o_orderkey) WHERE o.o_totalprice > 1000",
]

JOIN = (
    "SELECT * FROM orders a JOIN orders b "
    "ON a.o_custkey = b.o_custkey AND a.o_orderkey < b.o_orderkey"
)


@pytest.mark.parametrize("sql", QUERIES)
def test_repeated_names_run_on_the_workers_with_single_node_s_rows(strict, sql: str) -> None:
    ctx, dctx = strict
    result = assert_distributed_equal(ctx, dctx, sql)
    assert result.column_names == ctx.sql(sql).schema().names
    assert len(set(result.column_names)) < len(result.column_names)


def test_every_way_of_reading_gives_single_node_s_names(strict) -> None:
    ctx, dctx = strict
    sql = JOIN + " ORDER BY a.o_orderkey, b.o_orderkey LIMIT 50"
    single, df = ctx.sql(sql), dctx.sql(sql)
    assert_ran_on_workers(df, dctx)
    names = single.schema().names
    assert names.count("o_orderkey") == 2
    assert df.schema() == single.schema()
    assert df.to_arrow_table().equals(single.to_arrow_table())
    assert list(df.to_pandas().columns) == list(single.to_pandas().columns) == names
    assert df.to_pandas().equals(single.to_pandas())
    assert df.to_pylist() == single.to_pylist()
    assert df.to_pydict() == single.to_pydict()
    assert [b.schema.names for b in df.collect()] == [names] * len(df.collect())
    streamed = [b.to_pyarrow() for b in df.execute_stream()]
    assert streamed and all(b.schema.names == names for b in streamed)
    assert sum(b.num_rows for b in streamed) == 50
    for partition in df.collect_partitioned():
        assert all(b.schema.names == names for b in partition)


def test_show_and_repr_print_single_node_s_names(strict) -> None:
    ctx, dctx = strict
    sql = "SELECT * FROM nation a JOIN nation b ON a.n_nationkey = b.n_nationkey ORDER BY 1"
    single, df = ctx.sql(sql), dctx.sql(sql)
    assert_ran_on_workers(df, dctx, stages=False)
    shown = []
    for frame in (single, df):
        out = io.StringIO()
        with redirect_stdout(out):
            frame.show(5)
        shown.append(out.getvalue())
    assert shown[0] == shown[1]
    assert "#" not in repr(df) and repr(df) == repr(single)
    assert "n_name" in df._repr_html_()
    empty = dctx.sql(sql.replace("ORDER BY 1", "WHERE false"))
    out = io.StringIO()
    with redirect_stdout(out):
        empty.show()
    assert out.getvalue().strip() == "DataFrame has no rows"


def test_a_further_step_selects_a_qualified_column(strict) -> None:
    ctx, dctx = strict
    single, df = ctx.sql(JOIN), dctx.sql(JOIN)
    step = df.select(col("a.o_orderkey"), col("b.o_orderkey").alias("later")).sort(
        col("a.o_orderkey"), col("later")
    )
    assert_ran_on_workers(step, dctx)
    expected = single.select(col("a.o_orderkey"), col("b.o_orderkey").alias("later")).sort(
        col("a.o_orderkey"), col("later")
    )
    assert step.to_arrow_table().equals(expected.to_arrow_table())
    counted = df.filter(col("b.o_totalprice") > col("a.o_totalprice")).count()
    assert counted == single.filter(col("b.o_totalprice") > col("a.o_totalprice")).count()


def test_a_write_keeps_single_node_s_names(strict, tmp_path: Path) -> None:
    ctx, dctx = strict
    single, df = ctx.sql(JOIN), dctx.sql(JOIN)
    assert_ran_on_workers(df, dctx)
    single.write_parquet(str(tmp_path / "single"))
    df.write_parquet(str(tmp_path / "distributed"))

    def read(d: str) -> tuple[list[list[str]], list[tuple[object, ...]]]:
        files = sorted(glob.glob(str(tmp_path / d / "*.parquet")))
        tables = [pq.ParquetFile(f).read() for f in files]
        rows = sorted(
            tuple(c[i].as_py() for c in t.columns) for t in tables for i in range(t.num_rows)
        )
        return [t.schema.names for t in tables], rows

    (single_names, single_rows), (names, rows) = read("single"), read("distributed")
    assert {tuple(n) for n in names} == {tuple(n) for n in single_names}
    assert rows == single_rows and rows


def test_the_write_ran_on_the_workers(ctx: SessionContext, tmp_path: Path, caplog) -> None:
    # The COPY of a result with repeated names is planned from its SQL: no warning, and the
    # monitor records a distributed COPY.
    dctx = DistributedContext(ctx, config=DistributedConfig(fallback="error"))
    with caplog.at_level(logging.WARNING, "datafusion_distributed_py"):
        dctx.sql(JOIN).write_parquet(str(tmp_path / "out"))
    assert not [r for r in caplog.records if "single-node" in r.getMessage()]
    copies = [q for q in dctx.status().queries if q.sql.startswith("COPY")]
    assert copies and copies[-1].ran_on == "workers"


def test_an_unnamed_frame_with_repeated_names_still_answers(strict) -> None:
    ctx, dctx = strict
    left = ctx.from_pydict({"id": [1, 2, 3], "v": [1, 2, 3]})
    right = ctx.from_pydict({"id": [2, 3, 4], "w": [5, 6, 7]})
    single = left.join(
        right, left_on="id", right_on="id", how="inner", coalesce_duplicate_keys=False
    )
    df = dctx.distribute(single)
    assert ran_on(df) == "workers"
    assert sorted(df.to_pylist(), key=str) == sorted(single.to_pylist(), key=str)
    assert df.schema().names == single.schema().names


def test_what_single_node_refuses_for_repeated_names_is_refused_alike(strict) -> None:
    # Keeping such a result (CREATE TABLE AS, cache) or describing it fails single-node: the
    # same error distributed, nothing kept under a made-up name.
    ctx, dctx = strict
    cases = [
        lambda run: run(f"CREATE TABLE kept_twice AS {JOIN}").collect(),
        lambda run: run(JOIN).cache().to_pylist(),
        lambda run: run(JOIN).describe().to_pylist(),
    ]
    for case in cases:
        with pytest.raises(Exception) as single:
            case(ctx.sql)
        with pytest.raises(Exception) as distributed:
            case(dctx.sql)
        assert str(distributed.value).splitlines()[0] == str(single.value).splitlines()[0]
    assert not ctx.table_exist("kept_twice")


def test_the_arrow_stream_protocol_gives_single_node_s_names(strict) -> None:
    ctx, dctx = strict
    sql = JOIN + " ORDER BY a.o_orderkey, b.o_orderkey"
    df = dctx.sql(sql)
    assert_ran_on_workers(df, dctx)
    table = pa.table(df)
    assert table.column_names == ctx.sql(sql).schema().names
    assert table.equals(ctx.sql(sql).to_arrow_table())
