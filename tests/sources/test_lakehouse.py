"""Delta Lake and Iceberg tables on the cluster: registered with ``register_delta`` /
``register_iceberg``, read on the workers as Parquet scans of exactly the snapshot's files, on
both cluster kinds, with the rows of the formats' own readers."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import assert_same_rows, is_distributed
from datafusion import SessionContext, col, lit
from datafusion import functions as f
from deltalake import DeltaTable, write_deltalake
from test_object_store import BUCKET, SECRET, moto_bucket

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    UnsupportedTableError,
    ran_on,
)
from datafusion_distributed_py.lakehouse import register_delta
from datafusion_distributed_py.testing import assert_ran_on_workers

#: Scans split as finely as they go, so that several tasks read the table's files.
TINY = DistributedConfig(file_scan_config_bytes_per_partition=64)
QUERIES = [
    "SELECT p, count(*) AS n, sum(k) AS s, avg(v) AS a FROM t GROUP BY p",
    "SELECT * FROM t WHERE p = 'b' AND k % 3 = 0",
    "SELECT a.p, count(*) AS n FROM t a JOIN t b ON a.k = b.k GROUP BY a.p",
    "SELECT k, v FROM t ORDER BY k DESC LIMIT 7",
]


def _rows(first: int, n: int, parts: str = "abc") -> pa.Table:
    ks = list(range(first, first + n))
    return pa.table(
        {
            "k": pa.array(ks, pa.int64()),
            "p": [parts[k % len(parts)] for k in ks],
            "v": [k * 0.5 for k in ks],
        }
    )


@pytest.fixture
def delta_path(tmp_path: Path) -> str:
    """A Delta table partitioned by ``p``, written by three commits (three versions)."""
    path = str(tmp_path / "delta")
    for i in range(3):
        write_deltalake(path, _rows(i * 1000, 1000), partition_by=["p"], mode="append")
    return path


def _own(path: str, **kw: object) -> SessionContext:
    """Single-node through deltalake's own provider: the reference."""
    ctx = SessionContext()
    ctx.register_table("t", DeltaTable(path, **kw))  # type: ignore[arg-type]
    return ctx


def _check(dctx: DistributedContext, reference: SessionContext, sql: str) -> None:
    df = dctx.sql(sql)
    ordered = "ORDER BY" in sql
    assert_same_rows(df.to_arrow_table(), reference.sql(sql).to_arrow_table(), ordered=ordered)
    assert ran_on(df) == "workers"
    assert is_distributed(str(dctx.explain(df))), dctx.explain(df)


@pytest.mark.parametrize("sql", QUERIES)
def test_delta_table_runs_on_workers_with_deltalakes_rows(delta_path, workers, sql):
    ctx = SessionContext()
    dctx = DistributedContext(ctx, workers=workers, config=TINY)
    dctx.register_delta("t", delta_path)
    reference = _own(delta_path)
    _check(dctx, reference, sql)
    # Single-node through our table agrees too (the twin every step composes on).
    expected = reference.sql(sql).to_arrow_table()
    assert_same_rows(ctx.sql(sql).to_arrow_table(), expected, ordered="ORDER BY" in sql)


def test_delta_dataframe_api_and_columns_in_table_order(delta_path, workers):
    ctx = SessionContext()
    register_delta(ctx, "t", delta_path)
    dctx = DistributedContext(ctx, workers=workers, config=TINY)
    assert dctx.table("t").schema().names == ["k", "p", "v"]
    df = dctx.table("t").filter(col("k") > lit(1500)).aggregate([col("p")], [f.count(lit(1))])
    reference = _own(delta_path)
    expected = reference.table("t").filter(col("k") > lit(1500))
    expected = expected.aggregate([col("p")], [f.count(lit(1))])
    assert_same_rows(df.to_arrow_table(), expected.to_arrow_table(), ordered=False)
    assert is_distributed(str(dctx.explain(df)))


def test_delta_time_travel(delta_path, workers):
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_delta("t", delta_path, version=0)
    sql = "SELECT count(*) AS n, max(k) AS m FROM t"
    assert dctx.sql(sql).to_pylist() == [{"n": 1000, "m": 999}]
    _check(dctx, _own(delta_path, version=0), QUERIES[0])
    # A DeltaTable loaded at a version reads that version, as ctx.register_table does.
    dctx.ctx.deregister_table("t")
    dctx.register_delta("t", DeltaTable(delta_path, version=1))
    assert dctx.sql(sql).to_pylist() == [{"n": 2000, "m": 1999}]


def test_delta_time_travel_by_timestamp(delta_path, workers):
    # The commit times the log recorded: version 1's, given as a timezone-aware datetime.
    history = {h["version"]: h["timestamp"] for h in DeltaTable(delta_path).history()}
    at = datetime.fromtimestamp(history[1] / 1000, tz=timezone.utc)
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_delta("t", delta_path, version=at)
    df = dctx.sql("SELECT count(*) AS n FROM t")
    assert_ran_on_workers(df, dctx, stages=False)
    assert df.to_pylist() == [{"n": 2000}]


def test_commits_are_seen_by_the_next_query(delta_path, workers):
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_delta("t", delta_path)
    sql = "SELECT count(*) AS n, sum(k) AS s FROM t"
    reference = _own(delta_path)
    assert dctx.sql(sql).to_pylist() == reference.sql(sql).to_pylist()
    write_deltalake(delta_path, _rows(5000, 10), partition_by=["p"], mode="append")
    assert dctx.sql(sql).to_pylist() == [
        {"n": 3010, "s": sum(range(3000)) + sum(range(5000, 5010))}
    ]
    DeltaTable(delta_path).delete("k < 100")
    _check(dctx, _own(delta_path), sql)
    write_deltalake(delta_path, _rows(0, 5), partition_by=["p"], mode="overwrite")
    assert dctx.sql(sql).to_pylist() == [{"n": 5, "s": 10}]


def test_partition_filters_prune_files_in_explain(delta_path, workers):
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_delta("t", delta_path)
    everything = str(dctx.explain("SELECT count(v) FROM t"))
    pruned_df = dctx.sql("SELECT count(v) AS n FROM t WHERE p = 'a'")
    pruned = str(dctx.explain(pruned_df))
    files = lambda plan: set(re.findall(r"p=\w/[\w.-]+\.parquet", plan))  # noqa: E731
    assert len(files(everything)) == 9, everything
    assert files(pruned) and all(name.startswith("p=a/") for name in files(pruned)), pruned
    assert pruned_df.to_pylist() == [{"n": 1000}]


def test_the_logs_statistics_size_joins_and_never_answer_queries(tmp_path, workers):
    """The log's row counts and column bounds reach the planner: a small dimension table is
    broadcast to its join, as it is from Parquet footers, instead of both sides shuffled.
    Its bounds are estimates only: aggregates are computed from the rows (a string's bound
    the log cut short would otherwise give a wrong max)."""
    fact, dim = str(tmp_path / "fact"), str(tmp_path / "dim")
    for i in range(4):
        write_deltalake(fact, _rows(i * 5000, 5000), partition_by=["p"], mode="append")
    long = "x" * 40
    write_deltalake(
        dim, pa.table({"k": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", long + "z"]})
    )
    ctx = SessionContext()
    dctx = DistributedContext(ctx, workers=workers, config=TINY)
    dctx.register_delta("fact", fact)
    dctx.register_delta("dim", dim)
    reference = SessionContext()
    reference.register_table("fact", DeltaTable(fact))  # type: ignore[arg-type]
    reference.register_table("dim", DeltaTable(dim))  # type: ignore[arg-type]
    join = (
        "SELECT d.name, count(*) AS n FROM fact f JOIN dim d ON f.k % 3 + 1 = d.k GROUP BY d.name"
    )
    df = dctx.sql(join)
    assert_same_rows(df.to_arrow_table(), reference.sql(join).to_arrow_table(), ordered=False)
    plan = str(dctx.explain(df))
    assert "CollectLeft" in plan and "Broadcast" in plan, plan
    for sql in (
        "SELECT max(name) AS m, min(name) AS lo, count(name) AS c FROM dim",
        "SELECT max(k) AS m, min(v) AS lo, count(v) AS c FROM fact WHERE p = 'b'",
    ):
        assert dctx.sql(sql).to_pylist() == reference.sql(sql).to_pylist(), sql


def test_schema_evolution_reads_old_files_with_nulls(tmp_path, workers):
    path = str(tmp_path / "evolving")
    write_deltalake(path, _rows(0, 100), partition_by=["p"])
    more = _rows(100, 100).append_column("w", pa.array([f"w{i}" for i in range(100)]))
    write_deltalake(path, more, partition_by=["p"], mode="append", schema_mode="merge")
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_delta("t", path)
    sql = "SELECT p, count(w) AS with_w, count(*) AS n FROM t GROUP BY p"
    _check(dctx, _own(path), sql)
    assert sum(r["with_w"] for r in dctx.sql(sql).to_pylist()) == 100


def test_typed_partition_columns(tmp_path, workers):
    path = str(tmp_path / "typed")
    data = pa.table(
        {
            "x": pa.array(range(60), pa.int64()),
            "year": pa.array([2020 + i % 3 for i in range(60)], pa.int32()),
            "day": pa.array([f"2024-01-0{1 + i % 2}" for i in range(60)]).cast(pa.date32()),
            "flag": [i % 2 == 0 for i in range(60)],
        }
    )
    write_deltalake(path, data, partition_by=["year", "day", "flag"])
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_delta("t", path)
    sql = (
        "SELECT year, day, flag, sum(x) AS s FROM t WHERE year > 2020 AND day = DATE '2024-01-02'"
        " GROUP BY year, day, flag"
    )
    _check(dctx, _own(path), sql)


def test_delta_table_on_s3(workers):
    with moto_bucket() as endpoint:
        options = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "key",
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }
        uri = f"s3://{BUCKET}/delta"
        for i in range(2):
            rows = _rows(i * 500, 500)
            write_deltalake(uri, rows, partition_by=["p"], mode="append", storage_options=options)
        dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
        dctx.register_delta("t", uri, storage_options=options)
        # deltalake's provider finds no S3 store in a datafusion-python session (its scan gets
        # the session's bare runtime over FFI): its own pyarrow reader is the reference here.
        reference = SessionContext()
        rows = DeltaTable(uri, storage_options=options).to_pyarrow_table()
        reference.from_arrow(rows, name="t")
        _check(dctx, reference, QUERIES[0])
        # Single-node through our table reads S3 with the table's own options too.
        assert dctx.ctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 1000}]


def test_deltalakes_own_provider_falls_back_with_a_readable_reason(delta_path, caplog):
    ctx = _own(delta_path)
    dctx = DistributedContext(ctx)
    with caplog.at_level(logging.WARNING):
        df = dctx.sql(QUERIES[0])
    assert ran_on(df) == "coordinator"
    assert "register_delta" in caplog.text
    for raw in ("FFI_ExecutionPlan", "0x7f", "filing a bug report", "bug report"):
        assert raw not in caplog.text
    strict = DistributedContext(ctx, config=DistributedConfig(fallback="error"))
    with pytest.raises(UnsupportedTableError, match="register_delta"):
        strict.sql(QUERIES[0])


def test_an_unreadable_delta_version_falls_back_naming_the_feature(tmp_path, caplog):
    path = str(tmp_path / "mapped")
    write_deltalake(
        path,
        _rows(0, 100),
        partition_by=["p"],
        configuration={"delta.columnMapping.mode": "name"},
    )
    dctx = DistributedContext(SessionContext())
    dctx.register_delta("t", path)
    with caplog.at_level(logging.WARNING):
        df = dctx.sql(QUERIES[0])
        got = df.to_arrow_table()
    assert ran_on(df) == "coordinator"
    assert "column mapping" in caplog.text and "Delta table t" in caplog.text
    assert "FFI_ExecutionPlan" not in caplog.text
    reference = _own(path)
    assert_same_rows(got, reference.sql(QUERIES[0]).to_arrow_table(), ordered=False)


# -- Iceberg ---------------------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path: Path):
    from pyiceberg.catalog.sql import SqlCatalog

    c = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    c.create_namespace("ns")
    return c


@pytest.fixture
def iceberg_table(catalog):
    """An Iceberg table partitioned by identity on ``p``, written by three appends."""
    table = catalog.create_table("ns.t", schema=_rows(0, 1).schema)
    with table.update_spec() as spec:
        spec.add_identity("p")
    for i in range(3):
        table.append(_rows(i * 1000, 1000))
    return table


def _pyiceberg(table, snapshot_id: int | None = None) -> SessionContext:
    """The reference: pyiceberg's own reader, its rows in a single-node context."""
    ctx = SessionContext()
    ctx.from_arrow(table.scan(snapshot_id=snapshot_id).to_arrow(), name="t")
    return ctx


@pytest.mark.parametrize("sql", QUERIES)
def test_iceberg_table_runs_on_workers(iceberg_table, workers, sql):
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_iceberg("t", iceberg_table)
    _check(dctx, _pyiceberg(iceberg_table), sql)


def test_iceberg_time_travel_appends_and_pruning(iceberg_table, workers):
    first = iceberg_table.snapshots()[0].snapshot_id
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_iceberg("old", iceberg_table, snapshot_id=first)
    assert dctx.sql("SELECT count(*) AS n FROM old").to_pylist() == [{"n": 1000}]
    dctx.register_iceberg("t", iceberg_table)
    iceberg_table.append(_rows(9000, 10))
    _check(dctx, _pyiceberg(iceberg_table), "SELECT count(*) AS n, sum(k) AS s FROM t")
    iceberg_table.delete("k < 100")
    _check(dctx, _pyiceberg(iceberg_table), "SELECT count(*) AS n, sum(k) AS s FROM t")
    iceberg_table.overwrite(_rows(0, 30))
    assert dctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 30}]
    pruned = str(dctx.explain("SELECT count(v) FROM t WHERE p = 'c'"))
    files = set(re.findall(r"p=\w/[\w.-]+\.parquet", pruned))
    assert files and all(name.startswith("p=c/") for name in files), pruned


def test_iceberg_added_column_reads_nulls(catalog, workers):
    from pyiceberg.types import StringType

    table = catalog.create_table("ns.e", schema=_rows(0, 1).schema)
    table.append(_rows(0, 100))
    with table.update_schema() as update:
        update.add_column("w", StringType())
    more = _rows(100, 100).append_column(
        "w", pa.array([f"w{i}" for i in range(100)], pa.large_string())
    )
    table.append(more)
    dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
    dctx.register_iceberg("t", table)
    sql = "SELECT p, count(w) AS with_w, count(*) AS n FROM t GROUP BY p"
    _check(dctx, _pyiceberg(table), sql)


def test_iceberg_renamed_column_falls_back_naming_it(catalog, caplog):
    table = catalog.create_table("ns.r", schema=_rows(0, 1).schema)
    table.append(_rows(0, 100))
    with table.update_schema() as update:
        update.rename_column("v", "value")
    dctx = DistributedContext(SessionContext())
    dctx.register_iceberg("t", table)
    with caplog.at_level(logging.WARNING):
        df = dctx.sql("SELECT sum(value) AS s FROM t")
        # pyiceberg's reader matches the old files' ``v`` to ``value`` by field id.
        assert df.to_pylist() == [{"s": sum(k * 0.5 for k in range(100))}]
    assert ran_on(df) == "coordinator"
    assert "Iceberg table t (ns.r) has renamed columns (v, value)" in caplog.text
    for raw in ("FFI_ExecutionPlan", "bug report"):
        assert raw not in caplog.text


def test_iceberg_table_on_s3(tmp_path, workers):
    from pyiceberg.catalog.sql import SqlCatalog

    with moto_bucket() as endpoint:
        catalog = SqlCatalog(
            "s3",
            uri=f"sqlite:///{tmp_path}/catalog.db",
            warehouse=f"s3://{BUCKET}/warehouse",
            **{
                "s3.endpoint": endpoint,
                "s3.access-key-id": "key",
                "s3.secret-access-key": SECRET,
                "s3.region": "us-east-1",
                # pyarrow's multipart uploads fail against moto; s3fs's do not.
                "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            },
        )
        catalog.create_namespace("ns")
        table = catalog.create_table("ns.t", schema=_rows(0, 1).schema)
        for i in range(2):
            table.append(_rows(i * 500, 500))
        dctx = DistributedContext(SessionContext(), workers=workers, config=TINY)
        dctx.register_iceberg("t", table)
        _check(dctx, _pyiceberg(table), QUERIES[0])
        assert dctx.ctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 1000}]
