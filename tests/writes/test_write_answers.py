"""Writes of DataFrame-API frames answer as single-node's: rows in the order
``sort_by`` asks for, whatever else the options say, and writer option errors of single-node's
type and message, raised at the call. Both cluster kinds; frames passed through
``dctx.distribute`` and frames made by ``dctx.table`` / ``dctx.read_*``."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import session_over
from datafusion import (
    DataFrame,
    DataFrameWriteOptions,
    InsertOp,
    ParquetColumnOptions,
    ParquetWriterOptions,
    SessionContext,
    col,
)
from datafusion import functions as f

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_ran_on_workers

SPLIT = DistributedConfig(file_scan_config_bytes_per_partition=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``a``, ``b`` (both unique: a sort by either is a total order) in three Parquet files:
    scans split into tasks."""
    root = tmp_path_factory.mktemp("ab")
    for i in range(3):
        a = list(range(i * 40, (i + 1) * 40))
        pq.write_table(pa.table({"a": a, "b": [(v * 37) % 127 for v in a]}), root / f"{i}.parquet")
    return root


def _distributed(ctx: SessionContext, dctx: DistributedContext | None, files: Path) -> DataFrame:
    """A DataFrame-API frame of ``ctx``, passed through ``dctx.distribute`` (single-node
    without a ``dctx``)."""
    frame = ctx.read_parquet(str(files))
    return frame if dctx is None else dctx.distribute(frame)


#: How the frame to write is made: through ``dctx.distribute`` of a DataFrame-API frame, or by
#: the distributed context's own makers (single-node ``ctx``'s when ``dctx`` is None).
MAKERS: dict[str, Callable[[SessionContext, DistributedContext | None, Path], DataFrame]] = {
    "distribute": _distributed,
    "table": lambda ctx, dctx, files: (dctx or ctx).table("t"),
    "read_parquet": lambda ctx, dctx, files: (dctx or ctx).read_parquet(str(files)),
}


def contexts(
    files: Path, workers: LocalCluster | None
) -> tuple[SessionContext, DistributedContext]:
    ctx = session_over(files)
    return ctx, DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)


WRITERS: dict[str, Callable[[DataFrame, str, DataFrameWriteOptions], None]] = {
    "csv": lambda df, path, o: df.write_csv(path, with_header=True, write_options=o),
    "json": lambda df, path, o: df.write_json(path, write_options=o),
    "parquet": lambda df, path, o: df.write_parquet(path, write_options=o),
}
READERS: dict[str, Callable[[SessionContext, str], DataFrame]] = {
    "csv": lambda ctx, path: ctx.read_csv(path),
    "json": lambda ctx, path: ctx.read_json(path),
    "parquet": lambda ctx, path: ctx.read_parquet(path),
}
SORTS: dict[str, Any] = {
    "column": col("b"),
    "expression": (col("b") * -1 + 1000).sort(ascending=False),
    "two keys": [col("b").sort(ascending=False), col("a")],
}
EXTRA: dict[str, dict[str, Any]] = {
    "": {},
    "append": {"insert_operation": InsertOp.APPEND},
    "single file": {"single_file_output": True},
}


@pytest.mark.parametrize(("fmt", "sort", "extra"), list(itertools.product(WRITERS, SORTS, EXTRA)))
def test_a_sorted_write_keeps_its_order(files, workers, tmp_path, fmt, sort, extra):
    """Read back, a write with ``sort_by`` holds single-node's rows in single-node's order."""
    ctx, dctx = contexts(files, workers)
    options = {"sort_by": SORTS[sort], **EXTRA[extra]}
    suffix = f".{fmt}" if "single_file_output" in options else ""
    ours, theirs = str(tmp_path / f"ours{suffix}"), str(tmp_path / f"theirs{suffix}")
    WRITERS[fmt](MAKERS["table"](ctx, None, files), theirs, DataFrameWriteOptions(**options))
    df = MAKERS["table"](ctx, dctx, files)
    assert_ran_on_workers(df, dctx)
    WRITERS[fmt](df, ours, DataFrameWriteOptions(**options))
    back, want = READERS[fmt](ctx, ours).to_pydict(), READERS[fmt](ctx, theirs).to_pydict()
    assert back == want


@pytest.mark.parametrize("maker", MAKERS)
def test_a_sorted_write_of_any_frame_keeps_its_order(files, workers, tmp_path, maker):
    ctx, dctx = contexts(files, workers)
    options = DataFrameWriteOptions(sort_by=[col("b"), col("a").sort(ascending=False)])
    MAKERS[maker](ctx, None, files).write_parquet(str(tmp_path / "theirs"), write_options=options)
    df = MAKERS[maker](ctx, dctx, files)
    assert_ran_on_workers(df, dctx)
    df.write_parquet(str(tmp_path / "ours"), write_options=options)
    read = ctx.read_parquet
    assert read(str(tmp_path / "ours")).to_pydict() == read(str(tmp_path / "theirs")).to_pydict()


def test_a_sorted_partitioned_write_keeps_its_order_in_each_directory(files, workers, tmp_path):
    ctx, dctx = contexts(files, workers)
    frame = lambda c: c.table("t").select(col("a"), col("b"), (col("a") % 3).alias("p"))  # noqa: E731
    options = DataFrameWriteOptions(partition_by="p", sort_by=col("b"))
    frame(ctx).write_parquet(str(tmp_path / "theirs"), write_options=options)
    ours = frame(dctx)
    assert_ran_on_workers(ours, dctx)
    ours.write_parquet(str(tmp_path / "ours"), write_options=options)
    for part in sorted(p.name for p in (tmp_path / "theirs").iterdir()):
        want = ctx.read_parquet(str(tmp_path / "theirs" / part)).to_pydict()
        assert ctx.read_parquet(str(tmp_path / "ours" / part)).to_pydict() == want


def _raised(write: Callable[[], None]) -> BaseException:
    try:
        write()
    except BaseException as e:  # PanicException is a BaseException, as single-node raises it
        return e
    raise AssertionError("no error")


#: Writer options single-node refuses, each at the call.
BAD_OPTIONS: dict[str, Callable[[DataFrame, str], None]] = {
    "gzip level 12": lambda df, p: df.write_parquet(p, compression="gzip", compression_level=12),
    "brotli level 99": lambda df, p: df.write_parquet(
        p, compression="brotli", compression_level=99
    ),
    "zstd level 30": lambda df, p: df.write_parquet(p, compression="zstd", compression_level=30),
    "unknown codec": lambda df, p: df.write_parquet(p, compression="nope"),
    "unsupported encoding": lambda df, p: df.write_parquet_with_options(
        p, ParquetWriterOptions(encoding="nope")
    ),
    "dictionary as fallback": lambda df, p: df.write_parquet_with_options(
        p, ParquetWriterOptions(encoding="RLE_DICTIONARY")
    ),
    "a column's dictionary fallback": lambda df, p: df.write_parquet_with_options(
        p,
        ParquetWriterOptions(
            column_specific_options={"a": ParquetColumnOptions(encoding="PLAIN_DICTIONARY")}
        ),
    ),
    "writer version": lambda df, p: df.write_parquet_with_options(
        p, ParquetWriterOptions(writer_version="9.0")
    ),
    "codec in writer options": lambda df, p: df.write_parquet(
        p, compression=ParquetWriterOptions(compression="gzip(12)")
    ),
}


@pytest.mark.parametrize("bad", BAD_OPTIONS)
@pytest.mark.parametrize("maker", MAKERS)
def test_writer_option_errors_are_single_nodes(files, workers, tmp_path, bad, maker):
    ctx, dctx = contexts(files, workers)
    single = _raised(lambda: BAD_OPTIONS[bad](MAKERS[maker](ctx, None, files), str(tmp_path / "s")))
    df = MAKERS[maker](ctx, dctx, files)
    assert_ran_on_workers(df, dctx)
    distributed = _raised(lambda: BAD_OPTIONS[bad](df, str(tmp_path / "d")))
    assert type(distributed) is type(single)
    assert str(distributed) == str(single)
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").rglob("*.parquet"))


def test_good_options_still_write_from_the_workers(files, workers, tmp_path):
    """The check of options writes nothing of the query: a write with good options is the
    distributed write, every row once."""
    ctx, dctx = contexts(files, workers)
    df = dctx.table("t").filter(col("a") > 5).select(col("a"), f.abs(col("b")).alias("b"))
    assert_ran_on_workers(df, dctx)
    df.write_parquet(str(tmp_path / "out"), compression="gzip", compression_level=6)
    back = ctx.read_parquet(str(tmp_path / "out")).sort(col("a")).to_pydict()
    assert back == ctx.table("t").filter(col("a") > 5).sort(col("a")).to_pydict()
