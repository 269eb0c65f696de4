"""What a field carries besides its type reaches the workers: field metadata set in
a projection and read later in the same plan, and extension types (``arrow.uuid``, carried as
field metadata) as Python UDFs on the workers receive them. Both cluster kinds; frames made
with the DataFrame API through ``dctx.distribute`` and by ``dctx.table``."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pyarrow as pa
import pytest
from datafusion import DataFrame, SessionContext, col, lit, udf
from datafusion import functions as f

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers


@pytest.fixture
def both(workers: LocalCluster | None) -> tuple[SessionContext, DistributedContext]:
    ctx = SessionContext()
    ctx.from_pydict({"a": [1, 2, 3], "b": [4, 5, 6]}, name="t")
    return ctx, DistributedContext(ctx, workers=workers, progress=False)


def _metadata_read_back(frame: DataFrame) -> DataFrame:
    return frame.select(f.with_metadata(col("b"), {"unit": "ms"}).alias("b")).select(
        f.arrow_metadata(col("b"), "unit").alias("u")
    )


def test_metadata_set_then_read_in_one_plan_verbatim(both):
    """The issue's case, verbatim: single-node ``['ms', 'ms', 'ms']``, and so distributed."""
    ctx, dctx = both

    def frame(c: SessionContext) -> DataFrame:
        return (
            c.from_pydict({"a": [1, 2, 3], "b": [4, 5, 6]})
            .select(f.with_metadata(col("b"), {"unit": "ms"}).alias("b"))
            .select(f.arrow_metadata(col("b"), "unit").alias("u"))
        )

    single = frame(ctx).to_pydict()
    distributed = dctx.distribute(frame(ctx))
    assert_ran_on_workers(distributed, dctx, stages=False)
    assert single == {"u": ["ms", "ms", "ms"]}
    assert distributed.to_pydict() == single


MADE: dict[str, Callable[[SessionContext | DistributedContext], DataFrame]] = {
    "table": lambda c: _metadata_read_back(c.table("t")),
    "sql": lambda c: _metadata_read_back(c.sql("SELECT a, b FROM t WHERE a > 0")),
}


@pytest.mark.parametrize("made", MADE)
def test_metadata_read_by_an_outer_function_and_kept_in_the_result(both, made):
    ctx, dctx = both
    got = assert_distributed_equal(ctx, dctx, MADE[made], stages=False)
    assert got.column("u").to_pylist() == ["ms", "ms", "ms"]
    kept = dctx.table("t").select(f.with_metadata(col("b"), {"unit": "ms"}).alias("b"))
    assert kept.to_arrow_table().schema.field("b").metadata == {b"unit": b"ms"}


def _uuid_from_string(strings: pa.Array) -> pa.Array:
    return pa.array(
        [None if s is None else uuid.UUID(s).bytes for s in strings.to_pylist()], pa.uuid()
    )


def _uuid_version(uuids: pa.Array) -> pa.Array:
    # A fixed_size_binary[16] (the extension lost) gives bytes here, which have no version.
    return pa.array([None if u is None else u.version for u in uuids.to_pylist()], pa.int64())


UUID_FROM_STRING = udf(_uuid_from_string, [pa.string()], pa.uuid(), "volatile", "uuid_from_string")
UUID_VERSION = udf(_uuid_version, [pa.uuid()], pa.int64(), "volatile", "uuid_version")


def test_an_extension_type_reaches_a_python_udf_on_the_workers(both):
    """``uuid_version(uuid_from_string(uuid()))``: the inner UDF's ``arrow.uuid`` result is an
    ``arrow.uuid`` argument of the outer one on the workers, as single-node."""
    ctx, dctx = both
    ctx.register_udf(UUID_FROM_STRING)
    ctx.register_udf(UUID_VERSION)
    sql = "SELECT a, uuid_version(uuid_from_string(uuid())) AS v FROM t"
    got = assert_distributed_equal(ctx, dctx, sql, stages=False)
    assert got.column("v").to_pylist() == [4, 4, 4]

    def frame(c: SessionContext | DistributedContext) -> DataFrame:
        made = c.table("t").select(col("a"), f.uuid().alias("s"))
        return made.select(col("a"), UUID_VERSION(UUID_FROM_STRING(col("s"))).alias("v"))

    got = assert_distributed_equal(ctx, dctx, frame, stages=False)
    assert got.column("v").to_pylist() == [4, 4, 4]


#: Column types a worker process reads and sends, each as a table column and as a literal.
WIDE_TYPES = {
    "large_list": pa.array([[1, 2], [3], [4, 5, 6]], pa.large_list(pa.int64())),
    "large_list in a struct": pa.array(
        [{"x": [1]}, {"x": [2, 3]}, {"x": []}], pa.struct([("x", pa.large_list(pa.int64()))])
    ),
    "list of large_list": pa.array(
        [[[1], [2, 3]], [], [[4, 5, 6]]], pa.list_(pa.large_list(pa.int64()))
    ),
    "large_list of large_list of struct": pa.array(
        [[[{"y": 1}]], [[], [{"y": 2}]], None],
        pa.large_list(pa.large_list(pa.struct([("y", pa.int64())]))),
    ),
    "large_utf8": pa.array(["a", "bb", "ccc"], pa.large_string()),
    "large_binary": pa.array([b"a", b"bb", b"ccc"], pa.large_binary()),
    "utf8_view": pa.array(["a", "bb", "ccc"], pa.string_view()),
    "binary_view": pa.array([b"a", b"bb", b"ccc"], pa.binary_view()),
}


@pytest.mark.parametrize("kind", list(WIDE_TYPES))
def test_wide_types_keep_their_type_on_the_workers(workers, kind):
    """Issues 39 and 56: ``large_list`` (nested too) and the other large and view types keep
    their type on worker processes, with no fallback. arrow-flight 59 announces a
    ``large_list`` as a ``list``: each stage sends it as one and the reader casts it back.
    Rows and types equal single-node's, across a shuffle too (the join)."""
    ctx = SessionContext()
    ctx.from_arrow(pa.table({"a": [1, 2, 3], "c": WIDE_TYPES[kind]}), name="t")
    config = DistributedConfig(fallback="error")
    dctx = DistributedContext(ctx, workers=workers, config=config, progress=False)
    for sql in ("SELECT c FROM t", "SELECT a, c FROM t WHERE a > 1"):
        got = assert_distributed_equal(ctx, dctx, sql, stages=False)
        assert got.schema.field("c").type == WIDE_TYPES[kind].type
    joined = "SELECT x.a, x.c, y.c AS d FROM t x JOIN t y ON x.a = y.a + 1"
    got = assert_distributed_equal(ctx, dctx, joined, stages=False)
    assert got.schema.field("d").type == WIDE_TYPES[kind].type


def test_a_large_list_literal_keeps_its_type_verbatim(workers):
    """The issue's case, verbatim: ``dctx.table("t").select(lit(<large_list scalar>), a)``."""
    ctx = SessionContext()
    ctx.from_pydict({"a": [1, 2, 3]}, name="t")
    config = DistributedConfig(fallback="error")
    dctx = DistributedContext(ctx, workers=workers, config=config, progress=False)
    scalar = pa.scalar([1, 2, 3], type=pa.large_list(pa.int64()))

    def frame(c: SessionContext | DistributedContext) -> DataFrame:
        return c.table("t").select(lit(scalar).alias("x"), col("a"))

    got = assert_distributed_equal(ctx, dctx, frame, stages=False)
    assert got.schema.field("x").type == pa.large_list(pa.int64())
    sql = "SELECT arrow_cast(make_array(1, 2, 3), 'LargeList(Int64)') AS x, a FROM t"
    got = assert_distributed_equal(ctx, dctx, sql, stages=False)
    assert got.schema.field("x").type == pa.large_list(pa.int64())
