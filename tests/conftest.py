"""Shared fixtures: real TPC-H parquet data, a single-node ctx and its distributed twin."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_same_rows, is_distributed
from harness import tpch

__all__ = ["assert_same_rows", "cli_worker", "free_ports", "is_distributed", "start_cli_worker"]

TPCH_SF = 0.01
TPCH_PARTS = 3

#: Small enough that the tiny test tables split into several scan tasks.
SPLIT_CONFIG = DistributedConfig(file_scan_config_bytes_per_partition=16 * 1024)


#: What a fallback reason shown to a person must never hold: Rust structs printed whole (FFI
#: function pointers) or DataFusion's request for a bug report.
RAW_TEXT = re.compile(r"FFI_ExecutionPlan|ForeignExecutionPlan \{|0x[0-9a-f]{8,}|bug report")


class _Reasons(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.raw: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if RAW_TEXT.search(text):
            self.raw.append(text)


@pytest.fixture(autouse=True)
def fallback_reasons_are_readable() -> Iterator[None]:
    """Every test: each warning our package logged (fallback reasons among them) reads as a
    sentence, never as a raw internal error."""
    handler = _Reasons()
    logger = logging.getLogger("datafusion_distributed_py")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    assert not handler.raw, f"a warning shows raw internal text: {handler.raw[0]}"


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch.generate(tmp_path_factory.mktemp("tpch"), scale_factor=TPCH_SF, parts=TPCH_PARTS)


@pytest.fixture(scope="session")
def sf1() -> Path:
    """TPC-H SF1 in 8 parts, made once per checkout (benchmarks/data is not committed)."""
    kept = Path(__file__).parent.parent / "benchmarks" / "data" / "sf1.0-p8"
    return tpch.generate(kept, scale_factor=1.0, parts=8)


@pytest.fixture
def ctx(tpch_dir: Path) -> SessionContext:
    ctx = SessionContext()
    tpch.register(ctx, tpch_dir)
    return ctx


@pytest.fixture
def dctx(ctx: SessionContext) -> DistributedContext:
    return DistributedContext(ctx, config=SPLIT_CONFIG)


def start_cli_worker(*args: str, **popen: Any) -> tuple[subprocess.Popen[str], str]:
    """Start ``datafusion-distributed-worker --port 0 ARGS`` (a later ``--port`` wins) and
    return the process and the URL it printed once listening."""
    cmd = ["datafusion-distributed-worker", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **popen)
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return proc, line.removeprefix("listening on ")


@contextlib.contextmanager
def cli_worker(*args: str, **popen: Any) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """:func:`start_cli_worker`, killed on exit if still running."""
    proc, url = start_cli_worker(*args, **popen)
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports of 127.0.0.1 that nothing listens on (at the time of asking)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(params=["embedded", "workers"])
def workers(request: pytest.FixtureRequest) -> LocalCluster | None:
    """Where a test's queries run: the embedded cluster (None) or worker processes."""
    return request.getfixturevalue("cluster") if request.param == "workers" else None


@pytest.fixture
def strict(
    ctx: SessionContext, workers: LocalCluster | None
) -> tuple[SessionContext, DistributedContext]:
    """TPC-H on ``ctx``, and a distributed context on ``workers`` that refuses to fall back
    (a query that cannot be distributed raises)."""
    return ctx, DistributedContext(ctx, workers=workers, config=DistributedConfig(fallback="error"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """Two worker processes, shared by a module's tests (modules that need another cluster
    define their own ``cluster``)."""
    with LocalCluster(2) as c:
        yield c


def write_v_g_parts(root: Path, rows: int, row_group_size: int) -> Path:
    """``rows`` rows of ``v`` (0, 1, ...) and ``g`` (``g0``..``g2``) in four Parquet files under
    ``root``, so that scans split into tasks; returns ``root``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(4):
        values = range(i * rows // 4, (i + 1) * rows // 4)
        t = pa.table({"v": pa.array(values, pa.int64()), "g": [f"g{v % 3}" for v in values]})
        pq.write_table(t, root / f"{i}.parquet", row_group_size=row_group_size)
    return root


def session_over(data: Path) -> SessionContext:
    """A session with ``data`` registered as ``t``."""
    ctx = SessionContext()
    ctx.register_parquet("t", str(data))
    return ctx


# The mutation run (DFDPY_TEST_FORCE_FALLBACK=1): every query forced single-node, and each
# test judged by whether it noticed (tests/mutation.py).
from mutation import _forced_fallback, pytest_runtest_makereport  # noqa: E402, F401
