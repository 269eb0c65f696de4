"""Functions of extension packages (datafusion's FFI; here the real ``datafusion-extra-functions``
from PyPI) run on the workers: they travel by name, and each worker runs its own."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from datafusion import SessionContext

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    UnsupportedTableError,
    ran_on,
    register_functions,
)
from datafusion_distributed_py.testing import assert_distributed_equal
from harness import tpch

PACKAGE = "datafusion_extra_functions"
pytest.importorskip(PACKAGE)

#: Five of the package's six functions over TPC-H columns, as a user would group by them.
AGGREGATES = (
    "SELECT l_returnflag, mode(l_linenumber) AS m, skewness(l_quantity) AS s, "
    "kurtosis(l_discount) AS k, kurtosis_pop(l_tax) AS kp, "
    "max_by(l_partkey, l_orderkey * 8 + l_linenumber) AS mb "
    "FROM lineitem GROUP BY 1 ORDER BY 1"
)
#: The issue's query verbatim.
ISSUE_QUERY = (
    "SELECT l_returnflag, mode(l_linenumber), skewness(l_quantity) FROM lineitem GROUP BY 1"
)
#: An aggregate of the package used as a window function.
WINDOW = (
    "SELECT l_orderkey, l_linenumber, mode(l_linenumber) OVER (PARTITION BY l_returnflag) AS m "
    "FROM lineitem ORDER BY 1, 2"
)


def _with_functions(tpch_dir: Path) -> SessionContext:
    ctx = SessionContext()
    tpch.register(ctx, tpch_dir)
    register_functions(ctx, PACKAGE)
    return ctx


def _register_extra(ctx: SessionContext) -> None:
    register_functions(ctx, PACKAGE)


@pytest.fixture(scope="module")
def named() -> Iterator[LocalCluster]:
    """Workers that registered the package's functions because it was named for them."""
    with LocalCluster(2, functions=[PACKAGE]) as c:
        yield c


@pytest.fixture(scope="module")
def bare() -> Iterator[LocalCluster]:
    """Workers without the package's functions."""
    with LocalCluster(2) as c:
        yield c


@pytest.mark.parametrize("where", ["embedded", "named"])
@pytest.mark.parametrize("query", [AGGREGATES, ISSUE_QUERY, WINDOW], ids=["all", "issue", "window"])
def test_extension_functions_run_on_the_workers(
    tpch_dir: Path, request: pytest.FixtureRequest, where: str, query: str
) -> None:
    ctx = _with_functions(tpch_dir)
    workers = request.getfixturevalue("named") if where == "named" else None
    dctx = DistributedContext(ctx, workers=workers, config=DistributedConfig(fallback="error"))
    assert_distributed_equal(ctx, dctx, query, tolerance=1e-9)


def test_workers_whose_setup_registers_the_functions_run_them(tpch_dir: Path) -> None:
    ctx = _with_functions(tpch_dir)
    with LocalCluster(2, setup=_register_extra) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=DistributedConfig(fallback="error"))
        assert_distributed_equal(ctx, dctx, AGGREGATES, tolerance=1e-9)


@pytest.mark.parametrize("where", ["embedded", "named"])
def test_a_function_failing_single_node_fails_the_same_distributed(
    tpch_dir: Path, request: pytest.FixtureRequest, where: str
) -> None:
    # min_by of datafusion-extra-functions 0.5.5 fails on any input single-node; distributed
    # it must fail with the same error, not answer or fall back.
    ctx = _with_functions(tpch_dir)
    workers = request.getfixturevalue("named") if where == "named" else None
    dctx = DistributedContext(ctx, workers=workers, config=DistributedConfig(fallback="error"))
    query = "SELECT l_returnflag, min_by(l_quantity, l_extendedprice) FROM lineitem GROUP BY 1"
    with pytest.raises(Exception) as single:
        ctx.sql(query).to_pylist()
    df = dctx.sql(query)
    assert ran_on(df) == "workers"
    with pytest.raises(Exception) as distributed:
        df.to_pylist()
    expected = str(single.value).split("Execution error: ")[-1]
    assert expected in str(distributed.value)


def test_a_worker_without_the_function_is_named_at_planning(
    tpch_dir: Path, bare: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = _with_functions(tpch_dir)
    dctx = DistributedContext(ctx, workers=bare)
    with caplog.at_level(logging.WARNING, "datafusion_distributed_py"):
        # Falls back, saying which function, which worker and how to register it there.
        assert_distributed_equal(
            ctx, dctx, ISSUE_QUERY,
            expect_fallback=r'aggregate function "(mode|skewness)" is not registered on worker '
            r"http://127\.0\.0\.1:\d+; register it there .*functions=",
            tolerance=1e-9,
        )  # fmt: skip
    strict = DistributedContext(ctx, workers=bare, config=DistributedConfig(fallback="error"))
    with pytest.raises(UnsupportedTableError, match=r'"(mode|skewness)" is not registered on'):
        strict.sql(ISSUE_QUERY)


def test_register_functions_says_what_is_wrong() -> None:
    ctx = SessionContext()
    assert sorted(register_functions(ctx, PACKAGE)) == sorted(__import__(PACKAGE).list_functions())
    with pytest.raises(ImportError, match="no_such_function_package"):
        register_functions(ctx, "no_such_function_package")
    with pytest.raises(ValueError, match="'json' exports no DataFusion functions"):
        register_functions(ctx, "json")
    with pytest.raises(TypeError, match="functions must be a list"):
        LocalCluster(1, functions=PACKAGE)  # type: ignore[arg-type]


def test_the_worker_cli_names_a_package_it_cannot_import() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "datafusion_distributed_py.worker", "--port", "0",
         "--functions", "no_such_function_package"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "no_such_function_package" in done.stderr


@pytest.mark.parametrize("where", ["embedded", "named"])
def test_the_dataframe_api_runs_extension_functions_on_the_workers(
    tpch_dir: Path, request: pytest.FixtureRequest, where: str
) -> None:
    import datafusion_extra_functions as extra
    from datafusion import col, udaf

    ctx = _with_functions(tpch_dir)
    workers = request.getfixturevalue("named") if where == "named" else None
    dctx = DistributedContext(ctx, workers=workers, config=DistributedConfig(fallback="error"))
    mode = udaf(extra.udaf_by_name("mode"))

    def build(table):
        return table("lineitem").aggregate([col("l_returnflag")], [mode(col("l_linenumber"))])

    assert_distributed_equal(ctx, dctx, lambda c: build(c.table))
    df = build(dctx.table)
    assert ran_on(df) == "workers"
