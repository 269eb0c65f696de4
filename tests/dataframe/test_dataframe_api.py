"""DataFrame-API steps on distributed frames run as one distributed query: each
family of methods, compared with the same steps single-node, and shown inside the
distributed plan, on the embedded cluster and on worker processes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from conftest import SPLIT_CONFIG, assert_same_rows, is_distributed
from datafusion import DataFrame, SessionContext, col, lit
from datafusion import functions as f
from datafusion.expr import Window

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    UnsupportedTableError,
    ran_on,
)
from datafusion_distributed_py.dataframe import source_of
from datafusion_distributed_py.monitor import MONITOR
from datafusion_distributed_py.testing import assert_ran_on_workers
from harness import tpch

Frames = Callable[[SessionContext | DistributedContext], DataFrame]


@pytest.fixture
def dctx(ctx: SessionContext, workers: LocalCluster | None) -> DistributedContext:
    return DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG, progress=False)


def lineitem(m: SessionContext | DistributedContext) -> DataFrame:
    return m.sql("SELECT l_orderkey, l_partkey, l_quantity, l_returnflag, l_discount FROM lineitem")


def orders(m: SessionContext | DistributedContext) -> DataFrame:
    return m.sql("SELECT o_orderkey, o_custkey, o_orderpriority FROM orders")


def inside_stages(plan: str) -> str:
    """The part of a rendered distributed plan that runs on workers (its stages)."""
    head, sep, stages = plan.partition("── Stage ")
    assert sep, plan
    return stages


def check(
    ctx: SessionContext,
    dctx: DistributedContext,
    build: Frames,
    *operators: str,
    ordered: bool = False,
) -> DataFrame:
    """``build`` on ``dctx`` gives what it gives on ``ctx``, as a plain DataFrame that runs on
    the workers with each of ``operators`` inside the distributed plan's stages."""
    df = build(dctx)
    assert type(df) is DataFrame
    assert ran_on(df) == "workers"
    assert_same_rows(df.to_arrow_table(), build(ctx).to_arrow_table(), ordered=ordered)
    plan = dctx.explain(df)
    assert is_distributed(plan), plan
    for op in operators:
        assert op in inside_stages(plan), f"{op} not in the stages of:\n{plan}"
    return df


def test_projections(ctx, dctx):
    check(
        ctx,
        dctx,
        lambda m: lineitem(m).select(col("l_orderkey"), (col("l_quantity") * lit(2)).alias("q2")),
        "as q2",
    )
    check(ctx, dctx, lambda m: lineitem(m).select_exprs("l_orderkey", "l_quantity + 1 AS q1"))
    check(ctx, dctx, lambda m: lineitem(m).with_column("big", col("l_quantity") > lit(40)))
    check(ctx, dctx, lambda m: lineitem(m).with_columns(a=lit(1), b=col("l_discount") * lit(2)))
    check(ctx, dctx, lambda m: lineitem(m).with_column_renamed("l_quantity", "qty"))
    check(ctx, dctx, lambda m: lineitem(m).drop("l_partkey", "l_discount"))
    check(ctx, dctx, lambda m: lineitem(m).cast({"l_orderkey": pa.int32()}))
    check(ctx, dctx, lambda m: lineitem(m)["l_returnflag"])
    check(ctx, dctx, lambda m: lineitem(m)[["l_orderkey", "l_quantity"]])
    check(ctx, dctx, lambda m: lineitem(m).alias("li").select(col("li.l_orderkey")))


def test_filter_and_aggregate_run_on_the_workers(ctx, dctx):
    df = check(
        ctx, dctx,
        lambda m: lineitem(m).filter(col("l_quantity") > lit(45))
        .aggregate([col("l_returnflag")], [f.count(lit(1)).alias("n")]),
        "FilterExec", "AggregateExec: mode=Partial",
    )  # fmt: skip
    # Only the groups reach the coordinator: the head stage's tasks give 3 rows at most.
    _ = df.collect()
    metrics = [m for m in dctx.metrics(df) if m["ran_on"] == "workers"]
    head = max(m["stage"] for m in metrics)
    assert sum(m["output_rows"] or 0 for m in metrics if m["stage"] == head) <= 3
    check(ctx, dctx, lambda m: lineitem(m).filter("l_discount > 0.05", col("l_quantity") < 10))


def test_sort_limit_distinct(ctx, dctx):
    check(
        ctx,
        dctx,
        lambda m: (
            lineitem(m).sort(col("l_orderkey"), col("l_partkey")).select("l_orderkey", "l_partkey")
        ),
        "SortExec",
        ordered=True,
    )
    check(ctx, dctx, lambda m: orders(m).sort_by("o_orderkey").limit(7, offset=3), ordered=True)
    check(ctx, dctx, lambda m: lineitem(m).select("l_returnflag").distinct(), "AggregateExec")
    check(ctx, dctx, lambda m: orders(m).sort(col("o_orderkey")).head(4), ordered=True)
    check(
        ctx,
        dctx,
        lambda m: orders(m).distinct_on(
            [col("o_custkey")],
            [col("o_custkey"), col("o_orderkey")],
            [col("o_custkey").sort(), col("o_orderkey").sort()],
        ),
    )


def test_limit_stops_the_scans_early(ctx, dctx):
    df = dctx.sql("SELECT * FROM lineitem").limit(5)
    assert df.count() == 5 and len(df.to_pylist()) == 5
    assert "fetch=5" in inside_stages(dctx.explain(df))


def test_joins_between_returned_frames_and_plain_ones(ctx, dctx):
    both = lambda m: orders(m).join(lineitem(m), left_on="o_orderkey", right_on="l_orderkey")  # noqa: E731
    check(
        ctx,
        dctx,
        lambda m: both(m).aggregate(
            [col("o_orderpriority")], [f.sum(col("l_quantity")).alias("q")]
        ),
        "HashJoinExec",
    )
    check(
        ctx,
        dctx,
        lambda m: orders(m).join_on(
            lineitem(m), col("o_orderkey") == col("l_orderkey"), how="left"
        ),
        "HashJoinExec",
    )
    check(
        ctx,
        dctx,
        lambda m: orders(m).join(
            lineitem(m), left_on="o_orderkey", right_on="l_orderkey", how="anti"
        ),
    )
    # A returned frame joined with a plain frame of the same context.
    check(
        ctx,
        dctx,
        lambda m: orders(m).join(
            lineitem(ctx), left_on="o_orderkey", right_on="l_orderkey", how="semi"
        ),
        "HashJoinExec",
    )
    # A plain frame joined with a returned one: distributed by the returned frame's context.
    check(
        ctx,
        dctx,
        lambda m: lineitem(ctx).join(orders(m), left_on="l_orderkey", right_on="o_orderkey"),
        "HashJoinExec",
    )
    check(
        ctx,
        dctx,
        lambda m: (
            lineitem(ctx)
            .select(col("l_orderkey").alias("k"))
            .union(orders(m).select(col("o_orderkey").alias("k")))
        ),
    )


def test_set_operations(ctx, dctx):
    small = lambda m: m.sql("SELECT l_partkey AS k FROM lineitem WHERE l_quantity < 10")  # noqa: E731
    large = lambda m: m.sql("SELECT l_partkey AS k FROM lineitem WHERE l_quantity > 40")  # noqa: E731
    check(ctx, dctx, lambda m: small(m).union(large(m)), "FilterExec")
    check(ctx, dctx, lambda m: small(m).union_distinct(large(m)), "AggregateExec")
    check(ctx, dctx, lambda m: small(m).union(large(m), distinct=True))
    check(ctx, dctx, lambda m: small(m).intersect(lineitem(m).select(col("l_partkey").alias("k"))))
    check(ctx, dctx, lambda m: lineitem(m).select(col("l_partkey").alias("k")).except_all(small(m)))
    check(ctx, dctx, lambda m: small(m).union_by_name(large(m)))


def test_unnest_and_windows(ctx, dctx):
    check(
        ctx,
        dctx,
        lambda m: (
            orders(m)
            .select(col("o_orderkey"), f.make_array(col("o_custkey"), lit(0)).alias("a"))
            .unnest_columns("a")
        ),
        "UnnestExec",
    )
    check(
        ctx,
        dctx,
        lambda m: (
            orders(m)
            .select(
                col("o_custkey"),
                col("o_orderkey"),
                f.row_number(partition_by=[col("o_custkey")], order_by=[col("o_orderkey")]).alias(
                    "rn"
                ),
            )
            .filter(col("rn") == lit(1))
        ),
        "BoundedWindowAggExec",
    )
    check(
        ctx,
        dctx,
        lambda m: orders(m).window(
            f.sum(col("o_orderkey")).over(Window(partition_by=[col("o_custkey")])).alias("s")
        ),
    )


def test_fill_null_describe_cache_collect_column(ctx, dctx):
    nulls = lambda m: m.sql(  # noqa: E731
        "SELECT o_orderkey, CASE WHEN o_custkey % 3 = 0 THEN NULL ELSE o_custkey END AS c "
        "FROM orders"
    )
    check(ctx, dctx, lambda m: nulls(m).fill_null(0))
    df = nulls(dctx)
    assert df.fill_null(0, subset=[]) is df
    assert_same_rows(
        df.describe().to_arrow_table(), nulls(ctx).describe().to_arrow_table(), ordered=True
    )
    cached = lineitem(dctx).filter(col("l_quantity") > lit(48)).cache()
    assert ran_on(cached) == "workers"
    check(
        ctx,
        dctx,
        lambda m: (
            cached if m is dctx else lineitem(ctx).filter(col("l_quantity") > lit(48)).cache()
        ).aggregate([], [f.count(lit(1))]),
    )
    got = df.sort(col("o_orderkey")).collect_column("o_orderkey")
    assert (
        got.to_pylist()
        == nulls(ctx).sort(col("o_orderkey")).collect_column("o_orderkey").to_pylist()
    )
    assert (
        lineitem(dctx).sort(col("l_orderkey"), col("l_partkey")).tail(3).to_pylist()
        == lineitem(ctx).sort(col("l_orderkey"), col("l_partkey")).tail(3).to_pylist()
    )


def test_count_is_planned_as_single_node_plans_it(ctx, dctx):
    df = dctx.sql("SELECT * FROM lineitem")
    assert df.count() == ctx.sql("SELECT * FROM lineitem").count()
    # The count is a query of its own, whose result is one row: from the files' statistics
    # (as single-node answers it) where they know the rows, else partial counts on workers.
    record = next(q for q in MONITOR.queries(owner=dctx) if q.sql.endswith("count()"))
    assert record.ran_on == "workers" and record.rows == 1
    assert source_of(df).exact_rows == df.count()
    filtered = lambda m: lineitem(m).filter(col("l_discount") > lit(0.05))  # noqa: E731
    assert filtered(dctx).count() == filtered(ctx).count()
    # A filtered count is partial counts on the workers, not the rows shipped back.
    counted = filtered(dctx).aggregate([], [f.count(lit(1))])
    assert "AggregateExec: mode=Partial" in inside_stages(dctx.explain(counted))


def test_show_prints_what_single_node_prints(ctx, dctx, capsys):
    lineitem(ctx).sort(col("l_orderkey"), col("l_partkey")).show(4)
    single = capsys.readouterr().out
    distributed = lineitem(dctx).sort(col("l_orderkey"), col("l_partkey"))
    assert_ran_on_workers(distributed, dctx)
    distributed.show(4)
    assert capsys.readouterr().out == single


def test_frames_made_as_a_session_makes_them(ctx, dctx, tpch_dir: Path, tmp_path):
    # Porting: `ctx.` becomes `dctx.` where frames are made, nothing else.
    for build in [
        lambda m: m.table("nation").filter(col("n_regionkey") == lit(1)),
        lambda m: m.read_parquet(str(tpch_dir / "region")).select("r_name"),
        lambda m: m.from_pydict({"a": [1, 2, 3]}).filter(col("a") > lit(1)),
        lambda m: m.from_pylist([{"a": 1}, {"a": 5}]).aggregate([], [f.sum(col("a")).alias("s")]),
        lambda m: m.from_arrow(pa.table({"a": [1, 2]})).select((col("a") * lit(3)).alias("b")),
        lambda m: m.from_pandas(pa.table({"a": [4, 5]}).to_pandas()).limit(1),
    ]:
        check(ctx, dctx, build)
    (tmp_path / "c.csv").write_text("a,b\n1,x\n2,y\n3,z\n")
    check(ctx, dctx, lambda m: m.read_csv(str(tmp_path / "c.csv")).filter(col("a") >= lit(2)))
    (tmp_path / "j.json").write_text('{"a": 1}\n{"a": 2}\n')
    check(ctx, dctx, lambda m: m.read_json(str(tmp_path / "j.json")).select("a"))
    # Registrations land on ctx.
    dctx.from_pydict({"z": [7]}, name="made_by_dctx")
    assert ctx.table("made_by_dctx").to_pylist() == [{"z": 7}]


def test_a_step_that_cannot_be_distributed_falls_back_with_its_warning(ctx, dctx, caplog):
    ctx.register_dataset("dataset_t", ds.dataset(pa.table({"o_orderkey": [1, 2, 3]})))
    df = orders(dctx)
    assert ran_on(df) == "workers"
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed_py"):
        joined = df.join(ctx.table("dataset_t"), on="o_orderkey")
    assert ran_on(joined) == "coordinator"
    assert "dataset_t" in caplog.text
    assert_same_rows(
        joined.to_arrow_table(),
        orders(ctx).join(ctx.table("dataset_t"), on="o_orderkey").to_arrow_table(),
        ordered=False,
    )
    # What is derived from the fallback frame still runs, single-node likewise.
    assert joined.count() == 3


def test_strict_mode_refuses_a_step_where_it_is_written(ctx, workers):
    ctx.register_dataset("dataset_s", ds.dataset(pa.table({"o_orderkey": [1, 2, 3]})))
    strict = DistributedContext(
        ctx, workers=workers, progress=False, config=DistributedConfig(fallback="error")
    )
    df = orders(strict)
    with pytest.raises(UnsupportedTableError, match="dataset_s"):
        df.join(ctx.table("dataset_s"), on="o_orderkey")
    assert df.filter(col("o_orderkey") < lit(3)).count() == 2


def test_frames_of_another_context_behave_as_single_node(ctx, dctx):
    other = SessionContext()
    foreign = other.from_pydict({"o_orderkey": [1, 2], "tag": ["a", "b"]})
    single = orders(ctx).join(foreign, on="o_orderkey")
    joined = orders(dctx).join(foreign, on="o_orderkey")
    assert_ran_on_workers(joined, dctx)  # the other session's rows travel with the plan
    assert_same_rows(joined.to_arrow_table(), single.to_arrow_table(), ordered=False)
    # Two distributed frames of two sessions, likewise.
    other_dctx = DistributedContext(other, progress=False)
    theirs = other_dctx.from_pydict({"o_orderkey": [3], "tag": ["c"]})
    joined = orders(dctx).join(theirs, on="o_orderkey")
    assert_ran_on_workers(joined, dctx)
    assert_same_rows(
        joined.to_arrow_table(),
        orders(ctx)
        .join(other.from_pydict({"o_orderkey": [3], "tag": ["c"]}), on="o_orderkey")
        .to_arrow_table(),
        ordered=False,
    )


def test_errors_of_a_step_are_single_nodes(ctx, dctx):
    with pytest.raises(Exception) as single:
        lineitem(ctx).select(col("no_such_column"))
    with pytest.raises(type(single.value)) as distributed:
        lineitem(dctx).select(col("no_such_column"))
    assert str(distributed.value) == str(single.value)


def test_derived_frames_keep_explain_metrics_and_their_parents(ctx, dctx):
    base = lineitem(dctx)
    derived = base.filter(col("l_quantity") > lit(10))
    assert dctx.explain(base) != dctx.explain(derived)
    _ = derived.collect()
    assert {m["ran_on"] for m in dctx.metrics(derived)} == {"workers"}
    # The parent is unchanged by its derived frames.
    assert_same_rows(base.to_arrow_table(), lineitem(ctx).to_arrow_table(), ordered=False)
    # The plans a frame answers are its single-node twin's.
    assert str(derived.logical_plan()) == str(
        lineitem(ctx).filter(col("l_quantity") > lit(10)).logical_plan()
    )


def test_tpch_written_with_the_dataframe_api(ctx, dctx):
    # TPC-H q3 in DataFrame form over distributed frames equals its SQL.
    def q3(m: SessionContext | DistributedContext) -> DataFrame:
        c = m.table("customer").filter(col("c_mktsegment") == lit("BUILDING"))
        o = m.table("orders").filter(col("o_orderdate") < lit("1995-03-15").cast(pa.date32()))
        li = m.table("lineitem").filter(col("l_shipdate") > lit("1995-03-15").cast(pa.date32()))
        return (
            c.join(o, left_on="c_custkey", right_on="o_custkey")
            .join(li, left_on="o_orderkey", right_on="l_orderkey")
            .aggregate(
                [col("l_orderkey"), col("o_orderdate"), col("o_shippriority")],
                [f.sum(col("l_extendedprice") * (lit(1) - col("l_discount"))).alias("revenue")],
            )
            .sort(col("revenue").sort(ascending=False), col("o_orderdate"))
            .limit(10)
        )

    check(ctx, dctx, q3, "HashJoinExec", "AggregateExec", ordered=True)
    names = ["l_orderkey", "revenue", "o_orderdate", "o_shippriority"]
    assert_same_rows(
        q3(dctx).select(*names).to_arrow_table(),
        ctx.sql(tpch.query(3)).to_arrow_table(),
        ordered=True,
    )


def test_plans_and_explain_are_the_querys_own(ctx, dctx, capsys):
    build = lambda m: lineitem(m).filter(col("l_quantity") > lit(10)).select("l_orderkey")  # noqa: E731
    single, distributed = build(ctx), build(dctx)
    assert str(distributed.optimized_logical_plan()) == str(single.optimized_logical_plan())
    assert type(distributed.logical_plan().to_variant()) is type(single.logical_plan().to_variant())
    single.explain()
    expected = capsys.readouterr().out
    distributed.explain()
    assert capsys.readouterr().out == expected
    assert ran_on(distributed) == "workers"


@pytest.fixture
def plans(dctx: DistributedContext, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Grows by one each time ``dctx`` plans a query distributed (its core's ``distribute``)."""
    made: list[int] = []
    core = dctx._engine.coordinator

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(core, name)

        def distribute(self, *args: object, **kwargs: object) -> object:
            made.append(1)
            return core.distribute(*args, **kwargs)

    monkeypatch.setattr(dctx._engine, "coordinator", Counting())
    return made


def test_a_frame_plans_when_first_used_and_its_parents_never(ctx, dctx, plans):
    """As ``ctx`` plans physically at the run: ``dctx.sql`` and each step only build the
    frame; the composed query is planned once, when it first runs, and the frames it came
    from are not planned at all."""
    base = lineitem(dctx)
    step = base.filter(col("l_quantity") > lit(45)).aggregate(
        [col("l_returnflag")], [f.count(lit(1)).alias("n")]
    )
    assert plans == []
    got = step.to_arrow_table()
    assert len(plans) == 1
    single = lineitem(ctx).filter(col("l_quantity") > lit(45))
    expected = single.aggregate([col("l_returnflag")], [f.count(lit(1)).alias("n")])
    assert_same_rows(got, expected.to_arrow_table(), ordered=False)
    assert "AggregateExec" in inside_stages(dctx.explain(step))
    assert len(plans) == 1  # explain shows the plan that ran
    step.to_arrow_table()
    assert len(plans) == 1  # a second run plans again inside the core, from the same request


def test_count_of_a_returned_frame_plans_once(ctx, dctx, plans):
    """A table read whole answers from its plan's statistics; a filtered query is counted
    by its count query alone (the frame itself is not planned for it)."""
    whole = "SELECT * FROM lineitem"
    assert dctx.sql(whole).count() == ctx.sql(whole).count()
    assert len(plans) == 1
    filtered = "SELECT * FROM lineitem WHERE l_quantity > 45"
    assert dctx.sql(filtered).count() == ctx.sql(filtered).count()
    assert len(plans) == 2
