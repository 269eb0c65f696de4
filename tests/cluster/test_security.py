"""Only the cluster's own coordinator gets in: tokens, TLS, mutual TLS, safe defaults.

Every check uses real worker processes and, for the raw checks, an independent gRPC client
(grpcio), so nothing here trusts our own client to behave.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import SPLIT_CONFIG, assert_same_rows, cli_worker
from datafusion import SessionContext, udf

from datafusion_distributed_py import (
    DistributedContext,
    LocalCluster,
    Security,
    Worker,
    WorkerError,
)
from datafusion_distributed_py.security import ENV_TOKEN_FILE
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

RPCS = ("GetWorkerInfo", "ExecuteTask", "CoordinatorChannel")
JOIN_SQL = (
    "SELECT o_orderpriority, count(*) AS n, sum(l_quantity) AS q "
    "FROM lineitem JOIN orders ON l_orderkey = o_orderkey GROUP BY o_orderpriority"
)


def raw_call(url: str, rpc: str, token: str | None = None, tls: Security | None = None) -> bytes:
    """Call ``rpc`` on the worker at ``url`` with grpcio and empty messages (over TLS with
    ``tls``'s CA and, if it has one, client certificate); returns the first response's bytes
    or raises ``grpc.RpcError``."""
    target = url.split("://", 1)[1]
    if tls is not None:

        def raw(pem: str | None) -> bytes | None:
            return pem.encode() if pem else None

        creds = grpc.ssl_channel_credentials(
            root_certificates=raw(tls.tls_ca),
            private_key=raw(tls.tls_key),
            certificate_chain=raw(tls.tls_cert),
        )
        channel = grpc.secure_channel(target, creds)
    else:
        channel = grpc.insecure_channel(target)
    metadata = [("authorization", f"Bearer {token}")] if token else None
    ident = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    path = f"/worker.WorkerService/{rpc}"
    with channel:
        if rpc == "GetWorkerInfo":
            return channel.unary_unary(path, **ident)(b"", metadata=metadata, timeout=5)
        if rpc == "ExecuteTask":
            return next(channel.unary_stream(path, **ident)(b"", metadata=metadata, timeout=5))
        stream = channel.stream_stream(path, **ident)(iter([b""]), metadata=metadata, timeout=5)
        return next(stream)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:  # secure by default
        yield c


@pytest.mark.parametrize("rpc", RPCS)
def test_a_peer_without_the_token_is_refused_on_every_rpc(cluster, rpc):
    assert cluster.security is not None and cluster.security.token
    for url in cluster.urls:
        for token in (None, "wrong-token"):
            with pytest.raises(grpc.RpcError) as err:
                raw_call(url, rpc, token)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, err.value
            assert cluster.security.token not in str(err.value)


def test_the_right_token_gets_an_answer(cluster):
    """The control for the test above: the same raw call with the token is answered."""
    answer = raw_call(cluster.urls[0], "GetWorkerInfo", cluster.security.token)
    assert isinstance(answer, bytes)


def test_wrong_or_missing_token_fails_fast_naming_the_worker(ctx, cluster):
    for security in (Security(token="not-the-token"), None):
        dctx = DistributedContext(ctx, workers=list(cluster.urls), security=security)
        start = time.monotonic()
        with pytest.raises(WorkerError) as err:
            dctx.sql("SELECT 1").collect()
        assert time.monotonic() - start < 5
        msg = str(err.value)
        assert err.value.kind == "rejected_credentials"
        assert "rejected this coordinator's credentials" in msg
        assert any(url in msg for url in cluster.urls), msg
        assert cluster.security.token not in msg and "not-the-token" not in msg


def test_shuffles_between_token_protected_workers_give_single_node_rows(ctx, cluster):
    dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
    df = dctx.sql(JOIN_SQL)
    assert_ran_on_workers(df, dctx)
    assert "NetworkShuffleExec" in dctx.explain(df)
    assert_same_rows(df.to_arrow_table(), ctx.sql(JOIN_SQL).to_arrow_table(), ordered=False)
    # Workers pulled from each other, with the token: every worker ran tasks.
    assert {m["worker_url"] for m in dctx.metrics(df)} == set(cluster.urls)


class DebugLoggingCluster(LocalCluster):
    """A ``LocalCluster`` whose workers log at DEBUG: each started with the worker command
    line's ``--log-level DEBUG`` (LocalCluster takes no log level; its workers log warnings
    only, which would make a check of their logs vacuous)."""

    def _spawn(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        if "--log-level" not in self._options:
            self._options = [*self._options, "--log-level", "DEBUG"]
        return super()._spawn(*args, **kwargs)


def test_local_cluster_is_protected_by_default_and_its_token_stays_secret(ctx, caplog):
    with DebugLoggingCluster(2) as cluster:  # secure by default
        token = cluster.security.token
        for proc in cluster.processes:
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                assert token.encode() not in f.read()
        ps = subprocess.run(["ps", "auxww"], capture_output=True, text=True).stdout
        assert token not in ps
        with caplog.at_level(logging.DEBUG):
            dctx = DistributedContext(ctx, workers=cluster, config=SPLIT_CONFIG)
            df = dctx.sql(JOIN_SQL)
            assert_ran_on_workers(df, dctx)
            df.collect()
            shown = [dctx.explain(df), dctx.explain(df, analyze=True), repr(dctx), repr(cluster)]
            shown += [str(m) for m in dctx.metrics(df)]
        shown.append(caplog.text)
        assert all(token not in text for text in shown)
        logs = sorted(cluster.log_dir.glob("*.log"))
        assert len(logs) == 2
        for log in logs:
            text = log.read_text()
            assert " DEBUG " in text, f"{log.name} holds no debug record: the check is vacuous"
            assert token not in text


def test_cli_worker_reads_its_token_from_a_file_and_logs_no_secret(ctx, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("file-token-123\n")
    os.chmod(token_file, 0o600)
    log = tmp_path / "worker.log"
    with (
        open(log, "w") as err,
        cli_worker("--token-file", str(token_file), "--log-level", "DEBUG", stderr=err) as (
            _,
            url,
        ),
    ):
        good = DistributedContext(ctx, workers=[url], security=Security(token="file-token-123"))
        df = good.sql("SELECT 41 + 1 AS x")
        assert_ran_on_workers(df, good)
        assert df.to_pylist() == [{"x": 42}]
        with pytest.raises(WorkerError, match="rejected"):
            DistributedContext(ctx, workers=[url]).sql("SELECT 1").collect()
    text = log.read_text()
    assert " DEBUG " in text, "the worker's log holds no debug record: the check is vacuous"
    assert "file-token-123" not in text


def test_token_from_the_environment(ctx, tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("env-token-456")
    monkeypatch.setenv(ENV_TOKEN_FILE, str(token_file))
    # Both the CLI worker and the coordinator read DFDPY_TOKEN_FILE.
    with cli_worker() as (_, url):
        assert raw_call(url, "GetWorkerInfo", "env-token-456")
        with pytest.raises(grpc.RpcError):
            raw_call(url, "GetWorkerInfo")
        dctx = DistributedContext(ctx, workers=[url])
        df = dctx.sql("SELECT 1 AS one")
        assert_ran_on_workers(df, dctx)  # it reached the worker, with the token
        assert df.to_pylist() == [{"one": 1}]


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_listening_beyond_loopback_needs_a_token(host, tmp_path):
    proc = subprocess.run(
        ["datafusion-distributed-worker", "--host", host, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("DFDPY_")},
    )
    assert proc.returncode != 0
    assert "without a token" in proc.stderr and "--insecure" in proc.stderr


def test_wildcard_worker_advertises_a_dialable_address(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("t0ken")
    with cli_worker("--host", "0.0.0.0", "--token-file", str(token_file)) as (_, url):
        assert "0.0.0.0" not in url
    with cli_worker("--host", "0.0.0.0", "--insecure", "--advertise-host", "127.0.0.1") as (
        _,
        url,
    ):
        assert url.startswith("http://127.0.0.1:")


def test_a_worker_can_refuse_pickled_code(ctx):
    import pyarrow as pa

    def double(a: pa.Array) -> pa.Array:
        return pa.compute.multiply(a, 2)

    ctx.register_udf(udf(double, [pa.int64()], pa.int64(), "immutable", name="double"))
    sql = "SELECT double(n_nationkey) AS d FROM nation ORDER BY d"
    expected = ctx.sql(sql).to_pylist()

    def own(worker_ctx: SessionContext) -> None:
        # The worker's own function of that name: it adds 1000 on top, so its rows tell.
        def double_plus(a: pa.Array) -> pa.Array:
            return pa.compute.add(pa.compute.multiply(a, 2), 1000)

        worker_ctx.register_udf(
            udf(double_plus, [pa.int64()], pa.int64(), "immutable", name="double")
        )

    security = Security.temporary()
    with (
        Worker(security=security, refuse_pickled_code=True) as refusing,
        pytest.raises(Exception, match="refuses pickled Python code"),
    ):
        DistributedContext(ctx, workers=[refusing]).sql(sql).collect()
    with Worker(security=security, refuse_pickled_code=True, setup=own) as worker:
        got = DistributedContext(ctx, workers=[worker]).sql(sql).to_pylist()
        assert got == [{"d": r["d"] + 1000} for r in expected]
    with Worker(security=security) as trusting:
        dctx = DistributedContext(ctx, workers=[trusting])
        assert assert_distributed_equal(ctx, dctx, sql, stages=False).to_pylist() == expected


@pytest.mark.slow
def test_messages_are_bounded(ctx):
    big = ctx.from_pydict({"v": list(range(200_000))}, name="big")
    assert big.count() == 200_000
    small = Security(token="t", max_message_bytes=64 * 1024)
    with Worker(security=small) as worker:
        dctx = DistributedContext(ctx, workers=[worker], security=small)
        start = time.monotonic()
        with pytest.raises(Exception, match="message limit") as err:
            dctx.sql("SELECT sum(v) FROM big").collect()
        # datafusion-distributed reports a task's failure once its siblings give up (10 s).
        assert time.monotonic() - start < 30
        assert "max_message_bytes" in str(err.value)


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2, security=Security.temporary(tls=True)) as c:
        yield c


def test_tls_cluster_gives_single_node_rows(ctx, tls_cluster):
    assert all(url.startswith("https://") for url in tls_cluster.urls)
    dctx = DistributedContext(ctx, workers=tls_cluster, config=SPLIT_CONFIG)
    df = dctx.sql(JOIN_SQL)
    assert_ran_on_workers(df, dctx)
    assert "NetworkShuffleExec" in dctx.explain(df)
    assert_same_rows(df.to_arrow_table(), ctx.sql(JOIN_SQL).to_arrow_table(), ordered=False)
    # An independent TLS client checks the certificate against the CA and needs the token.
    sec = tls_cluster.security
    assert raw_call(tls_cluster.urls[0], "GetWorkerInfo", sec.token, tls=sec)
    with pytest.raises(grpc.RpcError) as err:
        raw_call(tls_cluster.urls[0], "GetWorkerInfo", None, tls=sec)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _tls_files(tmp_path, sec: Security) -> dict[str, str]:
    """The CLI takes ``Security``'s settings from files."""
    files = {}
    for name, pem in (("ca", sec.tls_ca), ("cert", sec.tls_cert), ("key", sec.tls_key)):
        files[name] = str(tmp_path / f"{name}.pem")
        Path(files[name]).write_text(pem)
    files["token"] = str(tmp_path / "token")
    Path(files["token"]).write_text(sec.token)
    return files


def test_plain_tls_workers_trust_each_other_with_the_ca(ctx, tmp_path):
    """``--tls-cert/--tls-key/--tls-ca`` is TLS without client certificates: the
    coordinator needs only the CA, and workers pull shuffles from each other trusting it."""
    sec = Security.temporary(tls=True)
    files = _tls_files(tmp_path, sec)
    args = ["--token-file", files["token"], "--tls-cert", files["cert"]]
    args += ["--tls-key", files["key"], "--tls-ca", files["ca"]]
    with cli_worker(*args) as (_, url), cli_worker(*args) as (_, url2):
        assert url.startswith("https://")
        coordinator = Security(token=sec.token, tls_ca=sec.tls_ca)  # no certificate of its own
        dctx = DistributedContext(ctx, workers=[url, url2], security=coordinator,
                                  config=SPLIT_CONFIG)  # fmt: skip
        df = dctx.sql(JOIN_SQL)
        assert_ran_on_workers(df, dctx)
        assert "NetworkShuffleExec" in dctx.explain(df)
        assert_same_rows(df.to_arrow_table(), ctx.sql(JOIN_SQL).to_arrow_table(), ordered=False)
        assert raw_call(url, "GetWorkerInfo", sec.token, tls=coordinator)


def test_a_worker_that_does_not_trust_its_peers_says_so(ctx, tmp_path):
    """Workers serving TLS but given no CA cannot pull from each other: the error says that
    a worker did not trust its peer's certificate, and what to start it with."""
    sec = Security.temporary(tls=True)
    files = _tls_files(tmp_path, sec)
    args = ["--token-file", files["token"], "--tls-cert", files["cert"], "--tls-key", files["key"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFDPY_TLS")}
    with cli_worker(*args, env=env) as (_, url), cli_worker(*args, env=env) as (_, url2):
        coordinator = Security(token=sec.token, tls_ca=sec.tls_ca)
        dctx = DistributedContext(ctx, workers=[url, url2], security=coordinator,
                                  config=SPLIT_CONFIG)  # fmt: skip
        assert dctx.sql("SELECT count(*) AS n FROM lineitem").to_pydict()  # no shuffle: fine
        df = dctx.sql(JOIN_SQL)
        assert "NetworkShuffleExec" in dctx.explain(df)
        start = time.monotonic()
        with pytest.raises(WorkerError) as err:
            df.collect()
        assert time.monotonic() - start < 30
        # Reported by the worker that lost its peer, as data: the kind crossed the network.
        assert err.value.kind == "lost_peer", err.value.kind
        said = str(err.value)
        assert "lost its connection to another worker" in said, said
        assert "not signed by a CA this worker trusts" in said, said
        assert "--tls-ca" in said and (url in said or url2 in said), said


def test_mutual_tls_refuses_a_client_without_certificate(ctx, tmp_path):
    sec = Security.temporary(mutual=True)
    files = _tls_files(tmp_path, sec)
    args = ["--token-file", files["token"], "--tls-cert", files["cert"]]
    args += ["--tls-key", files["key"], "--tls-ca", files["ca"], "--mutual"]
    with cli_worker(*args) as (_, url), cli_worker(*args) as (_, url2):
        assert url.startswith("https://")
        dctx = DistributedContext(ctx, workers=[url, url2], security=sec, config=SPLIT_CONFIG)
        assert_distributed_equal(ctx, dctx, JOIN_SQL)
        no_cert = Security(token=sec.token, tls_ca=sec.tls_ca)
        start = time.monotonic()
        with pytest.raises(WorkerError) as err:
            DistributedContext(ctx, workers=[url], security=no_cert).sql("SELECT 1").collect()
        assert time.monotonic() - start < 10
        assert url in str(err.value)
        with pytest.raises(grpc.RpcError):
            raw_call(url, "GetWorkerInfo", sec.token, tls=no_cert)
        assert raw_call(url, "GetWorkerInfo", sec.token, tls=sec)


def test_plain_and_tls_ends_that_do_not_match_fail_clearly(ctx, tls_cluster, cluster):
    token = tls_cluster.security.token
    plain_to_tls = [u.replace("https://", "http://") for u in tls_cluster.urls]
    tls_to_plain = [u.replace("http://", "https://") for u in cluster.urls]
    untrusted = tls_cluster.urls
    cases = [
        (plain_to_tls, Security(token=token), "address it as https://"),
        (
            tls_to_plain,
            Security(token=cluster.security.token, tls_ca=tls_cluster.security.tls_ca),
            "does not serve TLS",
        ),
        (untrusted, Security(token=token), "not signed by a CA the coordinator trusts"),
    ]
    for urls, security, hint in cases:
        start = time.monotonic()
        with pytest.raises(WorkerError) as err:
            DistributedContext(ctx, workers=urls, security=security).sql("SELECT 1").collect()
        assert time.monotonic() - start < 10, "a mismatch must fail, not hang"
        assert urls[0] in str(err.value) or urls[1] in str(err.value)
        assert hint in str(err.value)
