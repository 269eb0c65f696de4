"""Compressed CSV and NDJSON tables: every codec DataFusion 55 reads, on both
cluster kinds, with the rows single-node gives; each file is read whole by one task."""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from conftest import assert_same_rows, is_distributed
from datafusion import SessionContext, col
from datafusion import functions as f

from datafusion_distributed_py import DistributedConfig, DistributedContext

#: codec name (datafusion's) -> file suffix and how to write it
CODECS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": (".gz", gzip.compress),
    "bzip2": (".bz2", bz2.compress),
    "xz": (".xz", lzma.compress),
    "zstd": (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
}
FILES = 4
ROWS = 2_500  # per file
#: Scans split as finely as they can be, so that a splittable file would be split by bytes.
TINY = DistributedConfig(file_scan_config_bytes_per_partition=64)
QUERY = "SELECT g, count(*) AS n, sum(v) AS s, max(w) AS w FROM t GROUP BY g"


def _csv(i: int) -> bytes:
    lines = [f"{v},g{v % 5},word{v}" for v in range(i * ROWS, (i + 1) * ROWS)]
    return ("v,g,w\n" + "\n".join(lines) + "\n").encode()


def _ndjson(i: int) -> bytes:
    values = range(i * ROWS, (i + 1) * ROWS)
    rows = (f'{{"v": {v}, "g": "g{v % 5}", "w": "word{v}"}}' for v in values)
    return ("\n".join(rows) + "\n").encode()


def _write(root: Path, fmt: str, codec: str) -> tuple[Path, str]:
    suffix, compress = CODECS[codec]
    ext = f".{fmt}{suffix}"
    d = root / f"{fmt}-{codec}"
    d.mkdir()
    for i in range(FILES):
        (d / f"part-{i}{ext}").write_bytes(compress((_csv if fmt == "csv" else _ndjson)(i)))
    return d, ext


def _tasks_reading(plan: str) -> list[int]:
    """The task count of each stage that scans files."""
    counts, tasks = [], 1
    for line in plan.splitlines():
        if m := re.search(r"Stage \d+ ── tasks=(\d+)", line):
            tasks = int(m.group(1))
        elif "DataSourceExec" in line:
            counts.append(tasks)
    return counts


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_registered_compressed_directory(fmt, codec, tmp_path, workers):
    d, ext = _write(tmp_path, fmt, codec)
    ctx = SessionContext()
    register = ctx.register_csv if fmt == "csv" else ctx.register_json
    register("t", str(d), file_extension=ext, file_compression_type=codec)
    dctx = DistributedContext(ctx, workers=workers, config=TINY, progress=False)
    df = dctx.sql(QUERY)
    assert_same_rows(df.to_arrow_table(), ctx.sql(QUERY).to_arrow_table(), ordered=False)
    plan = dctx.explain(df)
    assert is_distributed(plan), plan
    # Four files, split as finely as possible: more than one task, never more than files.
    assert any(1 < n <= FILES for n in _tasks_reading(plan)), plan


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_read_functions_and_external_tables(fmt, tmp_path, workers):
    d, ext = _write(tmp_path, fmt, "gzip")
    ctx = SessionContext()
    read = ctx.read_csv if fmt == "csv" else ctx.read_json
    dctx = DistributedContext(ctx, workers=workers, config=TINY, progress=False)
    dread = dctx.read_csv if fmt == "csv" else dctx.read_json

    def steps(df):
        return df.filter(col("v") % 3 == 0).aggregate([col("g")], [f.count(col("v")).alias("n")])

    single = steps(read(str(d), file_extension=ext, file_compression_type="gzip"))
    distributed = steps(dread(str(d), file_extension=ext, file_compression_type="gzip"))
    assert_same_rows(distributed.to_arrow_table(), single.to_arrow_table(), ordered=False)
    assert is_distributed(dctx.explain(distributed))

    stored = "CSV" if fmt == "csv" else "JSON"
    header = ", 'format.has_header' 'true'" if fmt == "csv" else ""
    ctx.sql(
        f"CREATE EXTERNAL TABLE ext STORED AS {stored} LOCATION '{d}/' "
        f"OPTIONS ('format.compression' 'gzip'{header})"
    ).collect()
    q = "SELECT count(*) AS n, sum(v) AS s FROM ext"
    assert dctx.sql(q).to_pylist() == ctx.sql(q).to_pylist()


def test_a_compressed_and_a_plain_table_in_one_query(tmp_path, workers):
    """Compression is a table's: a join of a gzip table with a plain one reads each as it is."""
    gz, ext = _write(tmp_path, "csv", "gzip")
    plain = tmp_path / "plain"
    plain.mkdir()
    for i in range(FILES):
        (plain / f"part-{i}.csv").write_bytes(_csv(i))
    ctx = SessionContext()
    ctx.register_csv("t", str(gz), file_extension=ext, file_compression_type="gzip")
    ctx.register_csv("p", str(plain))
    q = "SELECT t.g, count(*) AS n FROM t JOIN p ON t.v = p.v GROUP BY t.g"
    dctx = DistributedContext(ctx, workers=workers, config=TINY, progress=False)
    df = dctx.sql(q)
    assert_same_rows(df.to_arrow_table(), ctx.sql(q).to_arrow_table(), ordered=False)
    assert is_distributed(dctx.explain(df))
