"""A returned frame behaves as single-node's in what programs do with it besides reading its
rows: its plans and what is built on them, and the notebook formatter's early
stop. Both cluster kinds; each compared with the single-node frame of the same query."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import is_distributed, session_over, write_v_g_parts
from datafusion import SessionContext, col, lit, lit_with_metadata, udf
from datafusion import functions as f
from datafusion.substrait import Consumer, Producer
from datafusion.unparser import Dialect, Unparser

from datafusion_distributed_py import DistributedConfig, DistributedContext, ran_on
from datafusion_distributed_py.testing import assert_ran_on_workers

ROWS = 20_000
SPLIT = DistributedConfig(file_scan_config_bytes_per_partition=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v_g_parts(tmp_path_factory.mktemp("frames"), ROWS, row_group_size=100)


session = session_over


QUERIES = {
    "Aggregate": "SELECT g, count(*) AS n FROM t GROUP BY g",
    "Projection": "SELECT v + 1 AS w FROM t",
    "Sort": "SELECT v FROM t ORDER BY v DESC",
    "Limit": "SELECT v FROM t LIMIT 5",
    "Filter": "SELECT * FROM t WHERE v > 10",
}


@pytest.mark.parametrize("variant", list(QUERIES))
def test_plans_are_the_querys_not_the_wrappers(data, workers, variant):
    """``logical_plan()``, its variant, the unparser and Substrait see the query the user
    wrote, as single-node does, while the frame runs distributed."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    sql = QUERIES[variant]
    single, distributed = ctx.sql(sql), dctx.sql(sql)
    name = {"Aggregate": "n", "Projection": "w"}.get(variant, "v")

    def step(df):
        return df.filter(col(name) > 0)

    for frame, twin in [(distributed, single), (step(distributed), step(single))]:
        assert str(frame.logical_plan()) == str(twin.logical_plan())
        assert str(frame.optimized_logical_plan()) == str(twin.optimized_logical_plan())
        assert str(frame.execution_plan().display_indent()) == str(
            twin.execution_plan().display_indent()
        )
        unparser = Unparser(Dialect.default())
        assert _or_error(unparser.plan_to_sql, frame.logical_plan()) == _or_error(
            unparser.plan_to_sql, twin.logical_plan()
        )
        # Read back (its bytes list functions in hash order, different each time).
        assert _via_substrait(ctx, frame) == _via_substrait(ctx, twin)
    top = type(distributed.logical_plan().to_variant())
    assert top is type(single.logical_plan().to_variant()) and top.__name__ != "TableScan"
    assert is_distributed(dctx.explain(distributed))


def _via_substrait(ctx: SessionContext, df) -> str:
    plan = Producer.to_substrait_plan(df.logical_plan(), ctx)
    return str(Consumer.from_substrait_plan(ctx, plan))


def _or_error(fn, *args):
    """What ``fn(*args)`` gives, or the error it raises (the unparser cannot unparse some
    plans single-node either: the same error is the same behaviour)."""
    try:
        return fn(*args)
    except Exception as e:  # datafusion raises plain Exception subclasses
        return f"{type(e).__name__}: {e}"


def test_the_notebook_formatter_stops_reading_early(data, workers, tmp_path):
    """``_repr_html_`` of a big result reads only what it shows, as single-node's does: the
    query's tasks stop once the formatter has its rows (counted by a UDF that logs each
    batch it sees, in whichever process it runs)."""
    seen = tmp_path / "batches"
    seen.mkdir()
    where = str(seen)

    def counted(a: pa.Array) -> pa.Array:
        import os
        import uuid

        open(os.path.join(where, uuid.uuid4().hex), "w").close()
        return a

    ctx = session(data)
    ctx.register_udf(udf(counted, [pa.int64()], pa.int64(), "volatile", name="counted"))
    ctx.sql("SET datafusion.execution.batch_size = 100").collect()
    sql = "SELECT counted(v) AS v, g FROM t"
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    df = dctx.sql(sql)
    assert is_distributed(dctx.explain(df))
    html = df._repr_html_()
    assert "<table" in html
    batches = ROWS // 100
    # The formatter wants 10 rows (a few batches per task); reading it all would be 200.
    assert len(os.listdir(seen)) < batches // 4, len(os.listdir(seen))
    assert df.count() == ROWS  # the frame still answers in full afterwards


#: Operators whose rows do not depend on how the plan is split into tasks (partial
#: aggregates and repartitions emit per partition: their counts differ, as with more cores).
SPLIT_FREE = ("FilterExec", "DataSourceExec", "SortExec", "SortPreservingMergeExec")


def _op(line: str) -> str:
    return line.split(":", 1)[0]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE v % 7 = 1 GROUP BY g ORDER BY g",
        "SELECT a.v, b.g FROM t a JOIN t b ON a.v = b.v WHERE a.v < 500 ORDER BY a.v",
    ],
)
def test_the_metrics_api_reports_the_run(data, workers, sql):
    """After a run, ``execution_plan().metrics()`` and ``collect_metrics()`` report the
    operators the run went through, as single-node's do, with their rows summed over tasks."""
    ctx = session(data)
    single = ctx.sql(sql)
    single_rows = single.count()
    single.collect()
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    df = dctx.sql(sql)
    assert is_distributed(dctx.explain(df))
    unrun = df.execution_plan().metrics()
    assert unrun is None or not unrun.output_rows  # nothing ran yet
    df.collect()
    ours, theirs = (d.execution_plan().collect_metrics() for d in (df, single))
    # The operators (by name: after a run single-node's display shows the dynamic filters'
    # bounds, the single-node plan of a distributed frame ran nowhere and shows them empty).
    assert [_op(line) for line, _ in ours] == [_op(line) for line, _ in theirs]
    assert df.execution_plan().metrics().output_rows == single_rows
    for (line, m), (_, s) in zip(ours, theirs, strict=True):
        assert m.elapsed_compute is not None, line
        assert {x.name for x in m.metrics()} >= {"output_rows", "elapsed_compute"}, line
        if line.startswith(SPLIT_FREE):
            assert m.output_rows == s.output_rows, line
    # A derived frame reports its own run.
    step = df.filter(col(df.schema().names[0]).is_not_null())
    step.collect()
    assert step.execution_plan().metrics().output_rows == single_rows


def _mk_uuid(a: pa.Array) -> pa.Array:
    import uuid

    return pa.array([uuid.UUID(int=v.as_py()).bytes for v in a], pa.uuid())


def _uuid_versions(a: pa.Array) -> pa.Array:
    # Reads the argument's extension type, which lives in its field's metadata.
    return pa.array([u.as_py().version for u in a], pa.int64())


def test_field_metadata_survives_the_trip(workers):
    """Metadata a function gives its result (``with_metadata``, a UDF returning an extension
    type) reaches what reads it on the workers and the result's schema, as single-node."""
    ctx = SessionContext()
    ctx.register_udf(udf(_mk_uuid, [pa.int64()], pa.uuid(), "immutable", name="mk_uuid"))
    ctx.register_udf(udf(_uuid_versions, [pa.uuid()], pa.int64(), "immutable", name="versions"))
    typed = pa.schema([pa.field("a", pa.int64(), metadata={"unit": "s"})])
    ctx.register_record_batches(
        "t", [pa.table({"a": list(range(1, 2001))}).cast(typed).to_batches(max_chunksize=100)]
    )
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)

    def frames(c):
        marked = c.table("t").select(f.with_metadata(col("a"), {"unit": "ms"}).alias("b"))
        yield marked
        yield marked.select(f.arrow_metadata(col("b"), "unit").alias("unit"), col("b"))
        yield c.sql("SELECT mk_uuid(a) AS u, a FROM t")
        yield c.sql("SELECT versions(mk_uuid(a)) AS v, count(*) AS n FROM t GROUP BY 1")
        yield c.sql("SELECT a FROM t WHERE a % 3 = 0")
        tagged = f.arrow_metadata(f.with_metadata(col("a"), {"k": "v"}), "k")
        yield c.table("t").filter(tagged == lit("v"))  # NULL on workers would drop every row

    for single, distributed in zip(frames(ctx), frames(dctx), strict=True):
        want, got = single.to_arrow_table(), distributed.to_arrow_table()
        assert want.num_rows > 0
        assert got.schema == want.schema
        assert [x.metadata for x in got.schema] == [x.metadata for x in want.schema]
        assert sorted(got.to_pylist(), key=str) == sorted(want.to_pylist(), key=str)
        assert is_distributed(dctx.explain(distributed))


def test_a_literals_metadata_is_not_lost_silently(workers, caplog):
    """DataFusion 55's plan serialisation drops a literal's field metadata: such a query runs
    single-node, with the documented warning naming the column, and keeps it."""
    ctx = SessionContext()
    dctx = DistributedContext(ctx, workers=workers, progress=False)

    def frame(c):
        return c.from_pydict({"b": [4, 5, 6]}).select(
            lit_with_metadata(1, {"k": "v"}).alias("x"), col("b")
        )

    with caplog.at_level("WARNING", logger="datafusion_distributed_py"):
        df = frame(dctx)
        got = df.to_arrow_table()
    assert got.schema.field("x").metadata == {b"k": b"v"}
    assert got.to_pylist() == frame(ctx).to_pylist()
    assert ran_on(df) == "coordinator"
    assert "'x' carries field metadata" in caplog.text


EMPTY = pa.schema([("x", pa.int64()), ("y", pa.string())])


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM e",
        "SELECT x, y FROM e WHERE x > 1",
        "SELECT y, count(*) AS n, sum(x) AS s FROM e GROUP BY y",
        "SELECT count(*) AS n, max(y) AS m FROM e",
        "SELECT * FROM t WHERE v < 0",
    ],
)
def test_empty_inputs_and_results(data, workers, sql, capsys):
    """An empty registered batch, and queries with no rows, give single-node's schema,
    readers, batches, ``count()``, ``fill_null``, ``describe()`` and ``show()``."""
    ctx = session(data)
    ctx.register_batch("e", pa.RecordBatch.from_pylist([], schema=EMPTY))
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    single, distributed = ctx.sql(sql), dctx.sql(sql)
    assert_ran_on_workers(distributed, dctx, stages=False)
    assert distributed.schema() == single.schema()
    assert distributed.to_arrow_table() == single.to_arrow_table()
    assert distributed.to_pydict() == single.to_pydict()
    assert distributed.to_pandas().equals(single.to_pandas())
    assert distributed.count() == single.count()
    assert distributed.fill_null(0).to_pylist() == single.fill_null(0).to_pylist()
    assert distributed.describe().to_pylist() == single.describe().to_pylist()
    # An empty batch single-node hands on (``SELECT * FROM e``) is handed on too, though it
    # cannot cross Arrow Flight from a worker process: ``show()`` prints the header.
    assert [b.num_rows for b in distributed.collect()] == [b.num_rows for b in single.collect()]
    assert [b.to_pyarrow().num_rows for b in distributed.execute_stream()] == [
        b.to_pyarrow().num_rows for b in single.execute_stream()
    ]
    single.show()
    shown = capsys.readouterr().out
    distributed.show()
    assert capsys.readouterr().out == shown
