"""Unbounded file tables (``CREATE UNBOUNDED EXTERNAL TABLE ... STORED AS CSV | JSON``) on the
workers: their queries run there under ``fallback="error"`` with single-node's rows, while
single-node keeps the wheel's own table; a scan the codec cannot tell apart is refused, never
read from another table's file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from datafusion import SessionContext, col, lit

from datafusion_distributed_py import DistributedConfig, DistributedContext, UnsupportedTableError
from datafusion_distributed_py.testing import assert_ran_on_workers, assert_same_rows

STRICT = DistributedConfig(fallback="error")
ROWS = 2000

#: Queries over ``s`` (columns a, b, c, ordered by a, b): what the table's order serves
#: single-node (ordered aggregates and windows, no sort), a limit, a filter.
QUERIES = {
    "limit": "SELECT a, b, c FROM s LIMIT 7",
    "ordered group by": "SELECT a, b, SUM(c) AS total FROM s GROUP BY a, b",
    "ordered aggregate": "SELECT a, b, FIRST_VALUE(c ORDER BY a DESC) AS first_c FROM s "
    "GROUP BY a, b",
    "running window": "SELECT a, b, c, SUM(c) OVER (ORDER BY a, b ROWS BETWEEN 2 PRECEDING "
    "AND 1 FOLLOWING) AS around FROM s",
    "filter": "SELECT a, c FROM s WHERE c % 97 = 3",
}


def write_csv(path: Path, rows: int = ROWS, offset: int = 0) -> Path:
    lines = ["a,b,c"] + [f"{i // 500},{(i // 50) % 10},{i + offset}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def create(name: str, path: Path | str, columns: str = "a INT, b INT, c INT") -> str:
    return (
        f"CREATE UNBOUNDED EXTERNAL TABLE {name} ({columns}) STORED AS CSV "
        f"WITH ORDER (a ASC, b ASC) LOCATION '{path}' OPTIONS ('format.has_header' 'true')"
    )


@pytest.mark.parametrize("query", list(QUERIES))
def test_queries_over_an_unbounded_table_run_on_the_workers(tmp_path, workers, query):
    ctx = SessionContext()
    ctx.sql(create("s", write_csv(tmp_path / "s.csv")))
    # Single-node keeps the wheel's own table and plans as it did.
    assert ctx.table("s").execution_plan().display().startswith("StreamingTableExec:")
    expected = ctx.sql(QUERIES[query]).to_arrow_table()
    dctx = DistributedContext(ctx, workers=workers, config=STRICT, progress=False)
    df = dctx.sql(QUERIES[query])
    got = df.to_arrow_table()
    assert_same_rows(got, expected, ordered=False)
    assert got.num_rows == expected.num_rows > 0
    assert_ran_on_workers(df, dctx, stages=False)


def test_a_json_table_and_a_relative_location(tmp_path, cluster, monkeypatch):
    rows = [{"k": i % 7, "v": i} for i in range(300)]
    (tmp_path / "s.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    ctx = SessionContext()
    ctx.sql(
        "CREATE UNBOUNDED EXTERNAL TABLE s (k BIGINT, v BIGINT) STORED AS JSON LOCATION 's.json'"
    )
    query = "SELECT k, v FROM s WHERE v % 5 = 1"
    expected = ctx.sql(query).to_arrow_table()
    monkeypatch.chdir(os.path.dirname(tmp_path))  # the workers read the file where it stands
    dctx = DistributedContext(ctx, workers=cluster, config=STRICT, progress=False)
    df = dctx.sql(query)
    assert_same_rows(df.to_arrow_table(), expected, ordered=False)
    assert_ran_on_workers(df, dctx, stages=False)


def test_a_table_made_again_is_read_from_its_new_file(tmp_path, workers):
    ctx = SessionContext()
    ctx.sql(create("s", write_csv(tmp_path / "one.csv")))
    dctx = DistributedContext(ctx, workers=workers, config=STRICT, progress=False)
    last = "SELECT c FROM s WHERE c % 1000 = 999"
    assert dctx.sql(last).to_pylist() == [{"c": 999}, {"c": 1999}]
    # Made again over another file (OR REPLACE), then as an ordinary table: each read anew.
    ctx.sql(
        create("s", write_csv(tmp_path / "two.csv", offset=10_000)).replace(
            "CREATE", "CREATE OR REPLACE", 1
        )
    )
    assert dctx.sql(last).to_pylist() == [{"c": 10_999}, {"c": 11_999}]
    ctx.sql("DROP TABLE s")
    write_csv(tmp_path / "three.csv", rows=1000, offset=50_000)
    ctx.sql(
        f"CREATE EXTERNAL TABLE s (a INT, b INT, c INT) STORED AS CSV "
        f"LOCATION '{tmp_path / 'three.csv'}' OPTIONS ('format.has_header' 'true')"
    )
    assert dctx.sql(last).to_pylist() == [{"c": 50_999}]


def test_two_tables_showing_the_same_columns_are_refused_not_mixed_up(tmp_path, workers):
    """The scans of two unbounded tables with the same columns cannot be told apart from what
    the serialiser shows: the query is refused on the workers (or answered single-node), never
    read from the other table's file."""
    ctx = SessionContext()
    ctx.sql(create("s", write_csv(tmp_path / "s.csv")))
    ctx.sql(create("t", write_csv(tmp_path / "t.csv", offset=100_000)))
    query = (
        "SELECT s.c AS s_c, t.c AS t_c FROM s JOIN t ON s.a = t.a AND s.c + 100000 = t.c "
        "WHERE s.c % 400 = 0"
    )
    expected = sorted(ctx.sql(query).to_pylist(), key=lambda r: r["s_c"])
    assert expected == [{"s_c": c, "t_c": c + 100_000} for c in range(0, ROWS, 400)]
    strict = DistributedContext(ctx, workers=workers, config=STRICT, progress=False)
    with pytest.raises(UnsupportedTableError, match="cannot be distributed"):
        strict.sql(query).collect()
    lenient = DistributedContext(ctx, workers=workers, progress=False)
    assert sorted(lenient.sql(query).to_pylist(), key=lambda r: r["s_c"]) == expected
    # Each alone, or both when their columns differ, run on the workers.
    ctx.sql(create("u", write_csv(tmp_path / "u.csv", offset=7), "a INT, b INT, d INT"))
    query = "SELECT s.a, s.c, u.d FROM s JOIN u ON s.a = u.a AND s.c + 7 = u.d WHERE s.c % 300 = 0"
    df = strict.sql(query)
    assert_same_rows(df.to_arrow_table(), ctx.sql(query).to_arrow_table(), ordered=False)
    assert_ran_on_workers(df, strict, stages=False)


def test_the_same_query_built_with_the_dataframe_api(tmp_path, workers):
    """``dctx.table`` of an unbounded table, a filter and a projection: on the workers, with
    single-node's rows, as its SQL form."""
    ctx = SessionContext()
    ctx.sql(create("s", write_csv(tmp_path / "s.csv")))

    def steps(frame):
        return frame.filter(col("c") % lit(97) == lit(3)).select(col("a"), col("c"))

    expected = steps(ctx.table("s")).to_arrow_table()
    dctx = DistributedContext(ctx, workers=workers, config=STRICT, progress=False)
    df = steps(dctx.table("s"))
    assert_same_rows(df.to_arrow_table(), expected, ordered=False)
    assert expected.num_rows > 0
    assert_ran_on_workers(df, dctx, stages=False)
