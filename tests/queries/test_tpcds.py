"""TPC-DS (data and queries from DuckDB's dsdgen): every query equals single-node on the
embedded cluster, and on worker processes too; q47/q57 once failed on workers (a window's
sort implied by properties that do not survive the cut into stages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext, ran_on
from harness import tpcds
from harness.differential import compare

#: Part of CI's full run; `pytest -m "not slow"` leaves it out of a developer's loop.
pytestmark = pytest.mark.slow

SF = 0.01
#: On worker processes: the once-failing window queries and a spread of the others.
ON_WORKERS = (2, 4, 11, 14, 23, 24, 39, 47, 49, 57, 64, 67, 72, 77, 78, 80, 95)


@pytest.fixture(scope="module")
def tpcds_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("duckdb_extensions")
    return tpcds.generate(tmp_path_factory.mktemp("tpcds"), scale_factor=SF)


@pytest.fixture(scope="module")
def ctx(tpcds_dir: Path) -> SessionContext:
    ctx = SessionContext()
    tpcds.register(ctx, tpcds_dir)
    return ctx


#: Queries answered through the single-node fallback at this scale, and why.
FALLS_BACK: dict[int, str] = {}


def check(ctx: SessionContext, dctx: DistributedContext, sql: str, n: int) -> None:
    outcome = compare(ctx, dctx, sql)
    assert outcome.verdict == "equal", outcome.detail
    assert ran_on(dctx.sql(sql)) == ("coordinator" if n in FALLS_BACK else "workers")


@pytest.mark.parametrize("n", tpcds.QUERIES)
def test_tpcds_embedded(ctx, tpcds_dir, n):
    check(ctx, DistributedContext(ctx), tpcds.query(tpcds_dir, n), n)


@pytest.mark.parametrize("n", ON_WORKERS)
def test_tpcds_on_worker_processes(ctx, tpcds_dir, cluster, n):
    check(ctx, DistributedContext(ctx, workers=cluster), tpcds.query(tpcds_dir, n), n)


#: With broadcasts off, a selective join and the copy of its build side that filters a scan in
#: another stage (`scan_filters.rs`) run in one task. The copy once shared the original's
#: nodes, and so its scans' queue of files: one side read nothing and these came back empty.
SHARED_SCANS = (23, 50, 74)


@pytest.fixture(scope="module")
def partitioned_joins(tmp_path_factory: pytest.TempPathFactory) -> tuple[SessionContext, Path]:
    """SF 0.1, with joins of more than 10k build rows partitioned (their probe side shuffled),
    so that a collected selective join sits above a shuffle, as at SF 1."""
    pytest.importorskip("duckdb_extensions")
    data = tpcds.generate(tmp_path_factory.mktemp("tpcds01"), scale_factor=0.1)
    ctx = SessionContext(tpcds.partitioned_joins())
    tpcds.register(ctx, data)
    return ctx, data


@pytest.mark.parametrize("n", SHARED_SCANS)
def test_tpcds_without_broadcast_joins(partitioned_joins, n):
    ctx, data = partitioned_joins
    dctx = DistributedContext(ctx, config=DistributedConfig(broadcast_joins=False))
    check(ctx, dctx, tpcds.query(data, n), n)
