"""Python UDFs registered on ctx run on the workers, not on the coordinator."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import SPLIT_CONFIG, cli_worker
from datafusion import Accumulator, SessionContext, udaf, udf, udwf
from datafusion.user_defined import WindowEvaluator

from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import assert_distributed_equal


def _pid(x: pa.Array) -> pa.Array:
    return pa.array([os.getpid()] * len(x), pa.int64())


def _double(x: pa.Array) -> pa.Array:
    return pc.multiply(x, 2)


class MySum(Accumulator):
    def __init__(self) -> None:
        self._sum = 0

    def update(self, values: pa.Array) -> None:
        self._sum += pc.sum(values).as_py() or 0

    def merge(self, states: list[pa.Array]) -> None:
        self._sum += pc.sum(states[0]).as_py() or 0

    def state(self) -> list[pa.Scalar]:
        return [pa.scalar(self._sum)]

    def evaluate(self) -> pa.Scalar:
        return pa.scalar(self._sum)


class RowNumber(WindowEvaluator):
    def evaluate_all(self, values: list[pa.Array], num_rows: int) -> pa.Array:
        return pa.array(range(1, num_rows + 1), pa.int64())


def register(ctx: SessionContext) -> None:
    ctx.register_udf(udf(_pid, [pa.int64()], pa.int64(), "volatile", name="worker_pid"))
    ctx.register_udf(udf(_double, [pa.int64()], pa.int64(), "immutable", name="dbl"))
    ctx.register_udaf(udaf(MySum, pa.int64(), pa.int64(), [pa.int64()], "immutable", name="mysum"))
    ctx.register_udwf(udwf(RowNumber, [pa.int64()], pa.int64(), "immutable", name="my_rn"))


HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def cluster():
    # UDFs defined in this module are pickled by reference: workers must import it too,
    # exactly as a user's workers must be able to import the user's modules.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = HERE + (os.pathsep + old if old else "")
    try:
        with LocalCluster(2) as c:
            yield c
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def test_udf_whose_module_workers_cannot_import_fails_clearly(ctx, tmp_path):
    register(ctx)
    # A worker started elsewhere, without this test module on its path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with cli_worker(cwd=tmp_path, env=env) as (_, url):
        dctx = DistributedContext(ctx, workers=[url], config=SPLIT_CONFIG)
        with pytest.raises(Exception, match=r"(?s)test_udfs.*worker http://127\.0\.0\.1:\d+"):
            dctx.sql("SELECT sum(dbl(l_orderkey)) AS s FROM lineitem").collect()


def test_local_cluster_workers_import_what_the_parent_can(ctx):
    """LocalCluster workers get this process's import path: UDFs from local modules work."""
    register(ctx)
    with LocalCluster(1) as c:
        dctx = DistributedContext(ctx, workers=c, config=SPLIT_CONFIG)
        sql = "SELECT sum(dbl(l_orderkey)) AS s FROM lineitem"
        assert_distributed_equal(ctx, dctx, sql)


def test_scalar_udf_runs_on_worker_processes(ctx, cluster):
    register(ctx)
    dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
    sql = "SELECT DISTINCT worker_pid(l_orderkey) AS p FROM lineitem"
    pids = {r["p"] for r in dctx.sql(sql).to_pylist()}
    assert pids, "no rows"
    assert os.getpid() not in pids
    assert pids <= {p.pid for p in cluster.processes}
    assert len(pids) == 2, "both workers evaluated the UDF"


@pytest.mark.parametrize("where", ["embedded", "processes"])
def test_udf_and_udaf_match_single_node(where, ctx, cluster):
    register(ctx)
    workers = None if where == "embedded" else cluster
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)
    sql = "SELECT l_linestatus, mysum(dbl(l_orderkey)) AS s FROM lineitem GROUP BY 1"
    assert_distributed_equal(ctx, dctx, sql)


WINDOW = (
    "SELECT n_name, my_rn(n_nationkey) OVER (PARTITION BY n_regionkey ORDER BY n_name) AS r "
    "FROM nation ORDER BY n_name"
)


def test_udwf_on_embedded_cluster(ctx):
    register(ctx)
    dctx = DistributedContext(ctx, config=SPLIT_CONFIG)
    assert_distributed_equal(ctx, dctx, WINDOW)


def test_udwf_on_worker_processes(ctx, cluster):
    """A Python window UDF runs on worker processes (its payload travels in a request header,
    since datafusion-proto's codec chain never decodes window functions)."""
    register(ctx)
    dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
    assert_distributed_equal(ctx, dctx, WINDOW)


def test_udf_importing_a_module_available_on_workers(ctx, cluster, tmp_path, monkeypatch):
    # A module importable on the workers (same path) is found there by the UDF.
    (tmp_path / "dfd_helper_mod.py").write_text("def triple(x):\n    return x * 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    import dfd_helper_mod

    def tripled(x: pa.Array) -> pa.Array:
        return pa.array([dfd_helper_mod.triple(v) for v in x.to_pylist()], pa.int64())

    ctx.register_udf(udf(tripled, [pa.int64()], pa.int64(), "immutable", name="tripled"))
    with LocalCluster(2) as c:
        dctx = DistributedContext(ctx, workers=c, config=SPLIT_CONFIG)
        sql = "SELECT sum(tripled(l_orderkey)) AS s FROM lineitem"
        assert_distributed_equal(ctx, dctx, sql)
