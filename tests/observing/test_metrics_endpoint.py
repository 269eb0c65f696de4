"""Prometheus metrics: each worker of ``LocalCluster(metrics=True)`` serves ``/metrics`` on a
port of its own, parsed here by the Prometheus client's own parser, its counters moving with
the queries the worker runs."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from conftest import SPLIT_CONFIG
from datafusion import SessionContext
from prometheus_client.parser import text_string_to_metric_families

from datafusion_distributed_py import DistributedContext, LocalCluster, ran_on, serve_metrics


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2, metrics=True) as c:
        yield c


def scrape(url: str) -> dict[str, float]:
    """Each sample of ``url``'s metrics by name (labels of the build info kept in its name)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if sample.labels:
                name += "{" + ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())) + "}"
            samples[name] = sample.value
    return samples


def test_each_worker_serves_its_counters_and_they_move_with_a_query(cluster):
    urls = cluster.metrics_urls
    assert len(urls) == 2 and len(set(urls)) == 2
    assert all(u.startswith("http://127.0.0.1:") and u.endswith("/metrics") for u in urls)
    before = [scrape(u) for u in urls]
    for b in before:
        assert b["dfdpy_memory_pool_limit_bytes"] > 0  # LocalCluster's "auto" memory limit
        assert any(k.startswith("dfdpy_build_info{") and "role=worker" in k for k in b)
    ctx = SessionContext()
    ctx.from_pydict({"k": [i % 7 for i in range(50_000)], "v": list(range(50_000))}, name="t")
    dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG, progress=False)
    df = dctx.sql("SELECT k, sum(v) AS s FROM t GROUP BY k")
    assert len(df.to_pylist()) == 7
    assert ran_on(df) == "workers"
    deadline = time.monotonic() + 10  # a task ends once its worker drops it (within a second)
    while True:
        after = [scrape(u) for u in urls]
        moved = [
            a["dfdpy_tasks_finished_total"] > b["dfdpy_tasks_finished_total"]
            and a["dfdpy_rows_out_total"] > b["dfdpy_rows_out_total"]
            for a, b in zip(after, before, strict=True)
        ]
        if all(moved) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert all(moved), (before, after)
    for a, b in zip(after, before, strict=True):
        assert a["dfdpy_tasks_started_total"] > b["dfdpy_tasks_started_total"]
        assert a["dfdpy_bytes_out_total"] > b["dfdpy_bytes_out_total"]
        assert a["dfdpy_tasks_failed_total"] == b["dfdpy_tasks_failed_total"]
        assert a["dfdpy_tasks_running"] == 0


def test_a_refused_request_is_counted(cluster):
    from datafusion_distributed_py import Security

    (first, *_), (url, *_) = cluster.urls, cluster.metrics_urls
    before = scrape(url)
    refused = before["dfdpy_grpc_requests_refused_total"]
    wrong = Security(token="not-the-token")
    ctx = SessionContext()
    dctx = DistributedContext(ctx, workers=[first], security=wrong, progress=False)
    with pytest.raises(Exception, match="token"):
        dctx.sql("SELECT 1").collect()
    after = scrape(url)
    assert after["dfdpy_grpc_requests_refused_total"] > refused
    # A refusal is answered with an error status at once: a gRPC error too.
    assert after["dfdpy_grpc_errors_total"] > before["dfdpy_grpc_errors_total"]


def test_an_error_inside_a_task_stream_is_a_grpc_error(cluster):
    """A task failing on its worker ends its stream with an error status, in trailers."""
    before = [scrape(u)["dfdpy_grpc_errors_total"] for u in cluster.metrics_urls]
    ctx = SessionContext()
    ctx.from_pydict({"s": [str(i) for i in range(20_000)] + ["not a number"]}, name="bad")
    dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG, progress=False)
    df = dctx.sql("SELECT CAST(s AS INT) AS i FROM bad")
    with pytest.raises(Exception, match="[Cc]ast"):
        df.collect()
    assert ran_on(df) == "workers"
    deadline = time.monotonic() + 10
    while True:
        after = [scrape(u)["dfdpy_grpc_errors_total"] for u in cluster.metrics_urls]
        if sum(after) > sum(before) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sum(after) > sum(before), (before, after)


def test_the_coordinator_serves_its_own_on_request():
    """The embedded cluster's tasks run in this process: ``serve_metrics`` shows them."""
    with serve_metrics() as endpoint:
        before = scrape(endpoint.url)
        dctx = DistributedContext(SessionContext(), progress=False)
        assert dctx.sql("SELECT 42 AS x").to_pylist() == [{"x": 42}]
        after = scrape(endpoint.url)
    assert after["dfdpy_tasks_started_total"] > before["dfdpy_tasks_started_total"]
    assert after["dfdpy_rows_out_total"] > before["dfdpy_rows_out_total"]


def test_no_open_port_without_a_token():
    with pytest.raises(ValueError, match="without a token"):
        serve_metrics(host="0.0.0.0")
    with serve_metrics(host="0.0.0.0", token="s3cret") as endpoint:
        url = endpoint.url.replace("0.0.0.0", "127.0.0.1")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(url, timeout=10)
        asked = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret"})
        assert b"dfdpy_tasks_started_total" in urllib.request.urlopen(asked, timeout=10).read()


def test_the_grafana_dashboard_reads_only_metrics_workers_serve(cluster):
    """Each panel's query names metrics a worker's /metrics really has (a renamed metric
    would leave a panel empty)."""
    import json
    import re
    from pathlib import Path

    board = Path(__file__).parents[2] / "deploy" / "grafana" / "datafusion-distributed.json"
    served = {re.sub(r"\{.*", "", name) for name in scrape(cluster.metrics_urls[0])}
    panels = json.loads(board.read_text())["panels"]
    named = set()
    for panel in panels:
        for target in panel["targets"]:
            named |= set(re.findall(r"\bdfdpy_\w+", target["expr"]))
    assert named and named <= served, named - served
    assert {"dfdpy_grpc_errors_total", "dfdpy_memory_pool_used_bytes"} <= named
