"""The clusters users already run: Ray (real Ray, on 127.0.0.1) and Kubernetes (the manifests
validated against the Kubernetes schemas, DNS resolution, the health probe)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from conftest import SPLIT_CONFIG, assert_same_rows, cli_worker
from grpc_health.v1 import health_pb2, health_pb2_grpc

from datafusion_distributed_py import (
    DistributedContext,
    RayCluster,
    Security,
    Worker,
    dns_workers,
)
from harness import tpch

#: Part of CI's full run; `pytest -m "not slow"` leaves it out of a developer's loop.
pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
#: Ray nodes on loopback only: tests never send traffic to this machine's other addresses.
#: Without a cluster-wide setting, Ray (its nodes, GCS, `get_node_ip_address`) then uses
#: 127.0.0.1; set before Ray starts any process, which inherits it.
LOOPBACK = "127.0.0.1"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

ray = pytest.importorskip("ray")


def grpc_health(url: str) -> str:
    """The standard health check, asked by grpcio (no token, no TLS)."""
    with grpc.insecure_channel(url.split("://", 1)[1]) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


# -- Kubernetes -------------------------------------------------------------------------


def test_manifests_validate_against_the_kubernetes_schemas():
    import kubernetes_validate

    docs = [
        doc
        for path in sorted((DEPLOY / "kubernetes").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "NetworkPolicy"} <= kinds
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"] and container["livenessProbe"]
    assert any("--token-file" in arg for arg in container["command"])
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["clusterIP"] == "None"  # headless: DNS lists the pods


def test_dockerfile_installs_the_wheel_and_runs_the_worker_cli():
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    assert "pip install" in text and ".whl" in text
    assert 'ENTRYPOINT ["datafusion-distributed-worker"]' in text
    assert "USER 10001" in text


def test_dns_workers_resolves_a_name_to_the_running_workers(ctx):
    security = Security.temporary()
    with Worker(security=security) as worker:
        port = int(worker.url.rsplit(":", 1)[1])
        resolver = dns_workers("localhost", port)
        assert resolver() == [f"http://127.0.0.1:{port}"]
        dctx = DistributedContext(ctx, workers=resolver, security=security, config=SPLIT_CONFIG)
        assert dctx.worker_urls == [worker.url]
        sql = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY n_regionkey"
        assert_same_rows(dctx.sql(sql).to_arrow_table(), ctx.sql(sql).to_arrow_table(), False)
    with pytest.raises(LookupError, match="no-such-host.invalid"):
        dns_workers("no-such-host.invalid", 50051)()


@pytest.mark.parametrize("with_token", [True, False])
def test_health_service_answers_standard_checks_with_or_without_a_token(with_token, tmp_path):
    args: list[str] = []
    if with_token:
        (tmp_path / "token").write_text("health-token")
        args = ["--token-file", str(tmp_path / "token")]
    with cli_worker(*args) as (proc, url):
        assert grpc_health(url) == "SERVING"
        check = subprocess.run(
            ["datafusion-distributed-worker", "--check", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stderr
        assert check.stdout.strip() == "SERVING"
    down = subprocess.run(
        ["datafusion-distributed-worker", "--check", url], capture_output=True, text=True
    )
    assert down.returncode != 0 and url in down.stderr


def test_a_wildcard_worker_prints_its_pod_ip(tmp_path):
    (tmp_path / "token").write_text("t0ken")
    env = {**os.environ, "POD_IP": LOOPBACK}
    with cli_worker("--host", "0.0.0.0", "--token-file", str(tmp_path / "token"), env=env) as (
        _,
        url,
    ):
        assert url.startswith(f"http://{LOOPBACK}:")
    with cli_worker("--host", "0.0.0.0", "--insecure", "--advertise-host", "localhost") as (
        _,
        url,
    ):
        assert url.startswith("http://localhost:")


# -- Ray --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address=LOOPBACK)
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_cluster_runs_tpch_like_single_node(ray_local, ctx):
    with RayCluster(workers_per_node=2) as workers:
        assert len(workers.urls) == 2
        node_ips = {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
        assert node_ips == {LOOPBACK}
        # The URLs are the nodes' IPs (never 0.0.0.0).
        assert {u.split("://")[1].rsplit(":", 1)[0] for u in workers.urls} == node_ips
        assert workers.security is not None and workers.security.token
        dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)
        for n in (1, 3, 5, 10, 18):
            sql = tpch.query(n)
            df = dctx.sql(sql)
            assert "NetworkShuffleExec" in dctx.explain(df) or n == 1
            expected = ctx.sql(sql).to_arrow_table()
            assert_same_rows(df.to_arrow_table(), expected, ordered="order by" in sql.lower())
        # Token-protected like LocalCluster: a coordinator without it is refused.
        with pytest.raises(Exception, match="rejected this coordinator's credentials"):
            DistributedContext(ctx, workers=list(workers.urls)).sql("SELECT 1").collect()


def test_setup_runs_in_every_actor(ray_local, tmp_path):
    def setup(worker_ctx) -> None:
        (tmp_path / f"setup-ran-in-{os.getpid()}").touch()

    with RayCluster(workers_per_node=2, setup=setup) as workers:
        assert len(list(tmp_path.glob("setup-ran-in-*"))) == len(workers.urls) == 2


def test_a_killed_actor_leaves_the_next_querys_worker_set(ray_local, ctx):
    with RayCluster(workers_per_node=2) as workers:
        before = workers()
        victim_actor, victim_url = next(iter(workers._actors.values()))[0]
        ray.kill(victim_actor)
        deadline = time.monotonic() + 30
        with contextlib.suppress(ray.exceptions.RayActorError):
            while time.monotonic() < deadline:  # until Ray reports the actor dead
                ray.get(victim_actor.url.remote(), timeout=5)
                time.sleep(0.2)
        after = workers()
        assert victim_url not in after
        dctx = DistributedContext(ctx, workers=workers)
        assert dctx.sql("SELECT count(*) AS n FROM nation").to_pylist() == [{"n": 25}]
        assert victim_url not in dctx.worker_urls
        assert set(before) - {victim_url} <= set(after)


def test_ray_cluster_starts_a_local_ray_when_none_runs(ctx):
    if ray.is_initialized():
        ray.shutdown()
    init = {"num_cpus": 2, "include_dashboard": False}
    with RayCluster(init_kwargs=init) as workers:
        assert ray.is_initialized()
        assert all(u.startswith(f"http://{LOOPBACK}:") for u in workers.urls)
        dctx = DistributedContext(ctx, workers=workers)
        assert dctx.sql("SELECT count(*) AS n FROM region").to_pylist() == [{"n": 5}]
    assert not ray.is_initialized(), "a Ray it started is shut down with it"


def test_a_three_node_ray_cluster_gets_one_worker_per_node(ctx):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False},
    )
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)
        cluster.wait_for_nodes()
        assert cluster.address.startswith(f"{LOOPBACK}:"), cluster.address
        ray.init(address=cluster.address)
        with RayCluster() as workers:
            assert len(workers.urls) == 3
            assert len(workers._actors) == 3  # one per node id
            dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG)
            sql = tpch.query(3)
            assert_same_rows(
                dctx.sql(sql).to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=True
            )
    finally:
        ray.shutdown()
        cluster.shutdown()
