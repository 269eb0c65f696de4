"""pyarrow datasets of Parquet, Arrow IPC and JSON files (``ctx.register_dataset``,
``Table(dataset)``, a Python table function's result), local or on a real S3-compatible
server (moto), and a table function's in-memory result are read by the workers: same rows as
pyarrow's own reading and as single-node, filters pushed into Parquet scans, partitions
pruned."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, Table, udtf
from test_object_store import BUCKET, SECRET, moto_bucket

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    UnsupportedTableError,
    ran_on,
)
from datafusion_distributed_py.testing import assert_distributed_equal

SQL = "SELECT g, count(*) AS n, sum(v) AS s FROM t WHERE v > 100 GROUP BY g ORDER BY g"
#: Small enough that the test files split into several scan tasks.
SPLIT = DistributedConfig(file_scan_config_bytes_per_partition=2048, fallback="error")


def _read_by_the_workers(dataset: pads.Dataset, workers: LocalCluster | None) -> DistributedContext:
    """``dataset`` registered, read whole and grouped on the workers as single-node and pyarrow
    (the reference no DataFusion took part in) read it; the distributed context."""
    ctx = SessionContext()
    ctx.register_dataset("t", dataset)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT)
    whole = assert_distributed_equal(ctx, dctx, "SELECT * FROM t")
    assert _rows(whole) == _rows(dataset.to_table())
    assert whole.schema == dataset.schema
    assert_distributed_equal(ctx, dctx, SQL)
    return dctx


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    rows = (tuple(r.values()) for r in table.to_pylist())
    return sorted(rows, key=lambda r: [(v is None, str(v)) for v in r])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hive-partitioned Parquet dataset (``y=2020/...``) of 3000 rows."""
    root = tmp_path_factory.mktemp("dataset")
    n = 3000
    table = pa.table({
        "g": [f"g{i % 5}" for i in range(n)], "v": list(range(n)),
        "y": [2020 + i % 3 for i in range(n)],
    })  # fmt: skip
    pq.write_to_dataset(table, str(root / "hive"), partition_cols=["y"], row_group_size=300)
    pq.write_table(table.drop(["y"]), str(root / "flat.parquet"), row_group_size=300)
    return root


@pytest.mark.parametrize("shape", ["hive", "flat.parquet"])
def test_a_parquet_dataset_is_read_by_the_workers(
    data: Path, workers: LocalCluster | None, shape: str
) -> None:
    dataset = pads.dataset(str(data / shape), format="parquet", partitioning="hive")
    _read_by_the_workers(dataset, workers)


def test_filters_reach_the_scan_and_partitions_are_pruned(data: Path) -> None:
    ctx = SessionContext()
    ctx.register_dataset(
        "t", pads.dataset(str(data / "hive"), format="parquet", partitioning="hive")
    )
    dctx = DistributedContext(ctx, config=SPLIT)
    sql = "SELECT g, v FROM t WHERE v > 2900 AND y = 2021"
    plan = dctx.explain(sql)
    assert "predicate=v@" in plan and "> 2900" in plan, plan
    assert "y=2020" not in plan and "y=2022" not in plan and "y=2021" in plan, plan
    assert_distributed_equal(ctx, dctx, sql, stages=False)


@pytest.fixture(scope="module")
def s3_endpoint():
    with moto_bucket() as endpoint:
        yield endpoint


def test_a_parquet_dataset_on_s3_is_read_by_the_workers(
    s3_endpoint: str, workers: LocalCluster | None
) -> None:
    fs = pafs.S3FileSystem(
        access_key="key", secret_key=SECRET, endpoint_override=s3_endpoint, region="us-east-1"
    )
    dataset = pads.dataset(f"{BUCKET}/t", filesystem=fs, format="parquet")
    dctx = _read_by_the_workers(dataset, workers)
    assert "predicate=" in dctx.explain(SQL)


def test_the_dataframe_api_reads_a_dataset_on_the_workers(
    data: Path, workers: LocalCluster | None
) -> None:
    from datafusion import col
    from datafusion import functions as f

    ctx = SessionContext()
    ctx.register_dataset(
        "t", pads.dataset(str(data / "hive"), format="parquet", partitioning="hive")
    )
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT)

    def build(c):
        return c.table("t").filter(col("v") > 100).aggregate([col("g")], [f.sum(col("v"))])

    assert_distributed_equal(ctx, dctx, build)


@pytest.fixture(scope="module")
def other_formats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same rows as Arrow IPC files and as newline-delimited JSON, hive-partitioned by
    ``y``, with nulls, and as CSV."""
    root = tmp_path_factory.mktemp("formats")
    n = 2000
    table = pa.table({
        "g": [f"g{i % 5}" if i % 11 else None for i in range(n)], "v": list(range(n)),
        "x": [i / 4 if i % 7 else None for i in range(n)], "y": [2020 + i % 3 for i in range(n)],
    })  # fmt: skip
    pads.write_dataset(
        table, root / "ipc", format="ipc", partitioning=["y"], partitioning_flavor="hive",
        max_rows_per_file=300, max_rows_per_group=300,
    )  # fmt: skip
    for y in (2020, 2021, 2022):
        part = table.filter(pa.compute.equal(table["y"], y)).drop(["y"]).to_pylist()
        (root / "json" / f"y={y}").mkdir(parents=True)
        for k in range(0, len(part), 250):
            lines = (json.dumps(r) for r in part[k : k + 250])
            (root / "json" / f"y={y}" / f"{k}.json").write_text("\n".join(lines) + "\n")
    pads.write_dataset(table, root / "csv", format="csv")
    return root


@pytest.mark.parametrize("fmt", ["ipc", "json"])
def test_arrow_ipc_and_json_datasets_are_read_by_the_workers(
    other_formats: Path, workers: LocalCluster | None, fmt: str
) -> None:
    dataset = pads.dataset(str(other_formats / fmt), format=fmt, partitioning="hive")
    assert len(dataset.files) > 3
    dctx = _read_by_the_workers(dataset, workers)
    sql = "SELECT y, count(x) AS n, sum(x) AS s FROM t WHERE y = 2021 GROUP BY y"
    assert_distributed_equal(dctx.ctx, dctx, sql, stages=False)
    assert "y=2020" not in dctx.explain(sql)  # partitions pruned


def test_a_csv_dataset_says_why_it_runs_single_node(other_formats: Path) -> None:
    ctx = SessionContext()
    ctx.register_dataset("t", pads.dataset(str(other_formats / "csv"), format="csv"))
    strict = DistributedContext(ctx, config=SPLIT)
    with pytest.raises(UnsupportedTableError, match="CSV"):
        strict.sql(SQL)
    fallback = DistributedContext(ctx)
    df = fallback.sql(SQL)
    assert ran_on(df) == "coordinator"
    assert df.to_arrow_table().equals(ctx.sql(SQL).to_arrow_table())


def _in_memory(n: object) -> pads.Dataset:
    """A Python table function: ``n`` rows of ``g`` and ``v`` as an in-memory dataset."""
    rows = n.python_value().as_py()  # type: ignore[attr-defined]
    return pads.dataset(pa.table({"g": [f"g{i % 4}" for i in range(rows)], "v": range(rows)}))


def test_a_table_function_s_in_memory_result_is_read_by_the_workers(
    workers: LocalCluster | None,
) -> None:
    ctx = SessionContext()
    ctx.register_udtf(udtf(_in_memory, "numbers"))
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT)
    sql = "SELECT g, count(*) AS n, sum(v) AS s FROM numbers(5000) WHERE v > 10 GROUP BY g"
    result = assert_distributed_equal(ctx, dctx, sql + " ORDER BY g")
    assert result.column("n").to_pylist() == [1247, 1247, 1247, 1248]
    joined = "SELECT count(*) AS c FROM numbers(300) a JOIN numbers(200) b ON a.v = b.v"
    assert assert_distributed_equal(ctx, dctx, joined).to_pylist() == [{"c": 200}]


def test_a_table_function_s_files_and_a_table_of_a_dataset_are_read_by_the_workers(
    data: Path, workers: LocalCluster | None
) -> None:
    ctx = SessionContext()

    ctx.register_udtf(udtf(lambda: pads.dataset(str(data / "flat.parquet")), "flat"))
    ctx.register_table("hive", Table(pads.dataset(str(data / "hive"), partitioning="hive")))
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT)
    assert_distributed_equal(ctx, dctx, "SELECT g, sum(v) AS s FROM flat() GROUP BY g ORDER BY g")
    assert_distributed_equal(ctx, dctx, "SELECT y, count(*) AS n FROM hive GROUP BY y ORDER BY y")
