"""Shared fixtures: real TPC-H parquet data, a single-node ctx and its distributed twin."""

from __future__ import annotations

from pathlib import Path

import pytest
from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext, tpch
from datafusion_distributed_py.testing import assert_same_rows, is_distributed

__all__ = ["assert_same_rows", "is_distributed"]

TPCH_SF = 0.01
TPCH_PARTS = 3

#: Small enough that the tiny test tables split into several scan tasks.
SPLIT_CONFIG = DistributedConfig(file_scan_config_bytes_per_partition=16 * 1024)


@pytest.fixture(scope="session")
def tpch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch.generate(tmp_path_factory.mktemp("tpch"), scale_factor=TPCH_SF, parts=TPCH_PARTS)


@pytest.fixture
def ctx(tpch_dir: Path) -> SessionContext:
    ctx = SessionContext()
    tpch.register(ctx, tpch_dir)
    return ctx


@pytest.fixture
def dctx(ctx: SessionContext) -> DistributedContext:
    return DistributedContext(ctx, config=SPLIT_CONFIG)
