"""A cluster of separate network hosts: a coordinator host and three worker hosts,
each a Linux network namespace with its own address from 198.18.0.0/24, joined by a bridge,
links capped at 1 Gbit/s. Workers are started by the CLI as the README's "Running on a
cluster" and docs/security.md say; the coordinator's program (``driver.py``) runs on its own
host. Needs root (skips with the reason elsewhere)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hosts import DRIVER, PORT, drive_with_fault, report_of, start_worker
from netns import Network, available

from datafusion_distributed_py import Security
from harness import tpch

pytestmark = [pytest.mark.slow, pytest.mark.multihost]

WHY_NOT = available()
if WHY_NOT is not None:
    pytest.skip(f"multi-host tests need network namespaces: {WHY_NOT}", allow_module_level=True)

WORKERS = ("w1", "w2", "w3")
#: A name the coordinator host resolves to every worker (its /etc/hosts), as a DNS name would.
SERVICE = "workers.dfdpy"
#: The longest a lost worker may take to be noticed: HTTP/2 keep-alive finds a silent peer
#: within 20-25 s (README "Running on a cluster"), then a retry on the survivors.
KEEPALIVE_BUDGET = 75.0


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch.generate(tmp_path_factory.mktemp("tpch-sf0.1"), scale_factor=0.1, parts=4)


@pytest.fixture(scope="module")
def net() -> Iterator[Network]:
    addresses = [f"198.18.0.{11 + i}" for i in range(len(WORKERS))]
    with Network(["coordinator", *WORKERS], rate="1gbit", names={SERVICE: addresses}) as n:
        yield n


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory, net: Network) -> dict[str, str]:
    """A token, and a CA with a certificate for the workers (their addresses and one name,
    for ``--tls-server-name`` / ``server_name=``), as files."""
    where = tmp_path_factory.mktemp("secrets")
    hosts = [net.address[w] for w in WORKERS] + [SERVICE]
    sec = Security.temporary(tls=True, hosts=hosts)
    files = {}
    for name, text in (("token", sec.token), ("ca", sec.tls_ca), ("cert", sec.tls_cert),
                       ("key", sec.tls_key)):  # fmt: skip
        files[name] = str(where / name)
        Path(files[name]).write_text(text or "")
    return files


@dataclass
class Cluster:
    """Worker processes on the worker hosts, and what the coordinator needs to reach them."""

    urls: list[str]
    procs: dict[str, subprocess.Popen[str]]
    security: dict[str, Any]


#: Each setup: the worker CLI's flags beyond the token, and the coordinator's Security.
SETUPS = {
    "token": ([], {}),
    "tls": (["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-ca", "{ca}"],
            {"tls_ca": "{ca}"}),
    "mutual": (["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-ca", "{ca}", "--mutual",
                "--tls-server-name", SERVICE],
               {"tls_ca": "{ca}", "tls_cert": "{cert}", "tls_key": "{key}", "mutual": True,
                "server_name": SERVICE}),
}  # fmt: skip


def start(net: Network, secrets: dict[str, str], setup: str) -> Cluster:
    flags, coordinator = SETUPS[setup]
    procs, urls = {}, []
    for host in WORKERS:
        proc, url = start_worker(net, host, "--token-file", secrets["token"],
                                 *(f.format(**secrets) for f in flags))  # fmt: skip
        urls.append(url)
        procs[host] = proc
    security = {"token": Path(secrets["token"]).read_text()}
    security.update({k: v.format(**secrets) if isinstance(v, str) else v
                     for k, v in coordinator.items()})  # fmt: skip
    return Cluster(urls, procs, security)


@pytest.fixture
def cluster_of(net: Network, secrets: dict[str, str]) -> Iterator[Any]:
    started: list[Cluster] = []

    def make(setup: str) -> Cluster:
        started.append(start(net, secrets, setup))
        return started[-1]

    yield make
    for c in started:
        for proc in c.procs.values():
            proc.kill()
            proc.wait(timeout=10)


def drive(net: Network, job: dict[str, Any], tmp_path: Path, timeout: float = 600) -> dict:
    """Runs the driver on the coordinator host; its report."""
    path = tmp_path / f"job-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(job))
    done = net.run("coordinator", [sys.executable, str(DRIVER), str(path)], timeout=timeout)
    return report_of(done.stdout, done.stderr)


@pytest.mark.parametrize("setup", list(SETUPS))
def test_tpch_on_separate_hosts(net, cluster_of, data, tmp_path, setup):
    """22/22 TPC-H queries equal single-node's and distributed, with a token only, with TLS
    (workers trusting the CA for each other's shuffles) and with mutual TLS."""
    cluster = cluster_of(setup)
    if setup != "token":
        assert all(u.startswith("https://198.18.0.") for u in cluster.urls), cluster.urls
    job = {"action": "tpch", "workers": cluster.urls, "security": cluster.security,
           "data": str(data)}  # fmt: skip
    report = drive(net, job, tmp_path)
    failed = {n: r for n, r in report["queries"].items() if not r["equal"]}
    assert not failed, json.dumps(failed, indent=1)[:6000]
    local = [n for n, r in report["queries"].items() if not r["distributed"]]
    assert not local, f"ran single-node: {local}"
    assert len(report["queries"]) == 22


def slow_run(
    net: Network,
    cluster: Cluster,
    data: Path,
    tmp_path: Path,
    fault,
    flowing: bool = False,
    **read: Any,
) -> dict:
    """Starts the slow query on the coordinator host (``flowing``: one whose rows flow back
    as it runs; ``read``: the job's ``method`` and ``config``), applies ``fault`` once it
    runs, and returns how it ended."""
    job = {"action": "slow", "workers": cluster.urls, "security": cluster.security,
           "data": str(data), "flowing": flowing, "out": str(tmp_path), **read}  # fmt: skip
    return drive_with_fault(net, job, tmp_path / "slow.json", fault, KEEPALIVE_BUDGET + 60)


def take_away_run(
    net: Network,
    cluster: Cluster,
    data: Path,
    tmp_path: Path,
    fault: str,
    flowing: bool = True,
    **read: Any,
) -> tuple[dict, str]:
    """The slow query (``flowing``: the one whose rows flow back as it runs), host w2 killed
    or cut off once it runs: how it ended, and the lost worker's URL."""
    lost = "w2"

    def take_away() -> None:
        if fault == "killed":
            cluster.procs[lost].kill()
        else:
            net.cut(lost)

    try:
        report = slow_run(net, cluster, data, tmp_path, take_away, flowing=flowing, **read)
    finally:
        if fault == "cut off":
            net.restore(lost)
    return report, cluster.urls[WORKERS.index(lost)]


@pytest.mark.parametrize("fault", ["killed", "cut off"])
def test_a_worker_host_lost_mid_query(net, cluster_of, data, tmp_path, fault):
    """A worker host killed, or cut off the network (no reset, no close: silence), while the
    query runs: it retries on the survivors and answers single-node's rows, or raises a
    WorkerError naming that worker — never a hang past the keep-alive budget. Either proves
    the fault landed mid-query: single-node's rows from the first run alone do not."""
    cluster = cluster_of("token")
    report, lost_url = take_away_run(net, cluster, data, tmp_path, fault, flowing=False)
    assert report["running_at_fault"], report  # the query still ran when RUNNING was sent
    assert report["seconds"] < KEEPALIVE_BUDGET, report
    assert report["result"] in ("WorkerError", "retried"), report
    if report["result"] == "WorkerError":
        assert report["worker_url"] == lost_url, report
        assert lost_url in report["error"], report
    else:
        runs = report["workers_by_attempt"]  # JSON: attempt numbers as strings
        first, last = runs["1"], runs[str(max(int(a) for a in runs))]
        assert lost_url in first, report  # the first run had tasks on the lost host
        assert lost_url not in last, report  # the run that answered was on the survivors


#: Each way of reading a whole result the tests take a host away from, with each recovery.
READS = [
    ("to_arrow_table", "query"), ("collect", "query"), ("to_pandas", "query"),
    ("write_parquet", "query"), ("cache", "query"), ("to_arrow_table", "task"),
]  # fmt: skip


@pytest.mark.parametrize("fault", ["killed", "cut off"])
@pytest.mark.parametrize(("method", "recovery"), READS)
def test_a_worker_host_lost_after_rows_flowed_costs_a_run(
    net, cluster_of, data, tmp_path, fault, method, recovery
):
    """Rows of the query had reached the coordinator when the host was lost: the result was
    not handed on yet, so the query runs again on the survivors and answers single-node's
    rows, where it used to fail — read whole each way, and with task-level
    recovery (the hosts share this machine's filesystem, so the spool is shared)."""
    cluster = cluster_of("token")
    config = {"file_scan_config_bytes_per_partition": 1, "fault_tolerance": recovery}
    report, lost_url = take_away_run(
        net, cluster, data, tmp_path, fault, method=method, config=config
    )
    assert report["running_at_fault"], report
    assert report["result"] == "retried", report
    runs = report["workers_by_attempt"]
    assert lost_url in runs["1"] and lost_url not in runs[str(max(int(a) for a in runs))]


def test_a_stream_cut_by_a_lost_host_names_the_rows_it_delivered(net, cluster_of, data, tmp_path):
    """``execute_stream()`` had handed rows on when the host's network was cut: it ends with a
    ``WorkerError`` naming how many, each delivered row one of single-node's, none twice."""
    cluster = cluster_of("token")
    report, _ = take_away_run(net, cluster, data, tmp_path, "cut off", method="stream")
    assert report["running_at_fault"], report
    assert report["result"] == "stream_error", report
    assert report["rows_delivered"] == report["delivered"] > 0, report
    assert report["all_known"] and report["none_twice"], report
    assert f"after {report['delivered']} rows" in report["error"], report


def test_dns_workers_from_the_hosts_resolution(net, cluster_of, data, tmp_path):
    """``dns_workers(name, port)`` finds every worker behind one name the coordinator host
    resolves (its /etc/hosts, as a headless Service's DNS would)."""
    cluster = cluster_of("token")
    job = {"action": "tpch", "workers": {"dns": SERVICE, "port": PORT},
           "security": cluster.security, "data": str(data), "queries": [3, 5, 9]}  # fmt: skip
    report = drive(net, job, tmp_path)
    assert sorted(report["workers"]) == sorted(cluster.urls)
    assert all(r["equal"] and r["distributed"] for r in report["queries"].values()), report


def test_the_dashboard_on_the_coordinator_host(net, cluster_of, data, tmp_path):
    """The dashboard served on the coordinator host's address lists the workers of the other
    hosts, and the query that ran."""
    cluster = cluster_of("token")
    job = {"action": "dashboard", "workers": cluster.urls, "security": cluster.security,
           "data": str(data), "host": net.address["coordinator"]}  # fmt: skip
    report = drive(net, job, tmp_path)
    assert report["url"].startswith(f"http://{net.address['coordinator']}:")
    assert report["page"] > 1000
    status = report["status"]
    listed = {w["url"] for w in status["workers"]}
    assert listed == set(cluster.urls), status
    assert any(q["state"] == "finished" for q in status["queries"]), status
