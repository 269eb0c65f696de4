"""Hypothesis: random tables and random filter / aggregate / join queries give the same rows
distributed and single-node."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datafusion_distributed_py import DistributedConfig, DistributedContext
from datafusion_distributed_py.testing import assert_distributed_equal

SPLIT_ALWAYS = DistributedConfig(file_scan_config_bytes_per_partition=1)

ints = st.integers(min_value=-50, max_value=50)
maybe_int = st.one_of(st.none(), ints)
row = st.tuples(st.integers(0, 6), maybe_int, st.floats(-1e3, 1e3, allow_nan=False))
table_rows = st.lists(row, min_size=0, max_size=60)


@st.composite
def query(draw: st.DrawFn) -> str:
    agg = draw(
        st.sampled_from(
            ["count(*)", "sum(a.v)", "min(a.v)", "max(a.x)", "avg(a.x)", "count(DISTINCT a.v)"]
        )
    )
    op = draw(st.sampled_from(["<", ">", "=", "<>", ">=", "<="]))
    threshold = draw(ints)
    where = draw(
        st.sampled_from(
            [f"a.v {op} {threshold}", "a.v IS NULL", f"a.x {op} {float(threshold)}", "true"]
        )
    )
    join = draw(st.booleans())
    if join:
        kind = draw(st.sampled_from(["JOIN", "LEFT JOIN"]))
        return (
            f"SELECT a.k, {agg} AS r, count(b.v) AS m FROM a {kind} b ON a.k = b.k "
            f"WHERE {where} GROUP BY a.k"
        )
    return f"SELECT a.k, {agg} AS r FROM a WHERE {where} GROUP BY a.k"


def _write(tmp_dir, name: str, data: list[tuple]) -> str:
    path = tmp_dir / name
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.parquet"):
        old.unlink()
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("x", pa.float64())])
    # Several files, so the scan splits into several tasks.
    chunks = [data[i::3] for i in range(3)]
    for i, chunk in enumerate(chunks):
        cols = list(zip(*chunk, strict=True)) if chunk else [[], [], []]
        arrays = [pa.array(c, t.type) for c, t in zip(cols, schema, strict=True)]
        table = pa.table(arrays, schema=schema)
        pq.write_table(table, path / f"{i}.parquet")
    return str(path) + "/"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(a=table_rows, b=table_rows, sql=query())
def test_random_queries_match_single_node(tmp_path, a, b, sql):
    ctx = SessionContext()
    ctx.register_parquet("a", _write(tmp_path, "a", a))
    ctx.register_parquet("b", _write(tmp_path, "b", b))
    dctx = DistributedContext(ctx, config=SPLIT_ALWAYS)
    # Empty tables plan no tasks to split: one stage may be all there is.
    assert_distributed_equal(ctx, dctx, sql, ordered=False, stages=bool(a and b))
