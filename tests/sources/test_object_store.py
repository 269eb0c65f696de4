"""An S3-compatible bucket served by a real local server (moto), registered on ctx the way
datafusion users do it: workers (embedded and processes) read it too."""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3
import datafusion
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_same_rows, cli_worker, free_ports
from datafusion import SessionContext
from datafusion.object_store import (
    AmazonS3,
    GoogleCloud,
    Http,
    LocalFileSystem,
    MicrosoftAzure,
)

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    UnsupportedTableError,
    object_stores,
)
from datafusion_distributed_py.testing import assert_distributed_equal, assert_ran_on_workers

SECRET = "s3cr3t-do-not-print"
BUCKET = "bucket"
TINY = DistributedConfig(file_scan_config_bytes_per_partition=64)
SQL = "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g"


@contextlib.contextmanager
def moto_bucket(first_value: int = 0) -> Iterator[str]:
    """A real S3-compatible server (moto, its own process: servers in one process share
    their buckets) holding ``BUCKET/t/``: three parquet files of ``g`` and ``v`` (``v``
    counting from ``first_value``); yields its endpoint."""
    (port,) = free_ports(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        assert time.monotonic() < deadline and server.poll() is None, "moto did not start"
        time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="key",
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    for i in range(3):
        first = first_value + i * 500
        t = pa.table({"g": [f"g{j % 4}" for j in range(500)], "v": list(range(first, first + 500))})
        buf = io.BytesIO()
        pq.write_table(t, buf)
        client.put_object(Bucket=BUCKET, Key=f"t/part-{i}.parquet", Body=buf.getvalue())
    try:
        yield endpoint
    finally:
        server.kill()
        server.wait()


@pytest.fixture(scope="module")
def s3_endpoint():
    with moto_bucket() as endpoint:
        yield endpoint


def s3_store(endpoint: str, store_cls: Any = None) -> Any:
    """The test bucket's store; ``store_cls`` may bypass our recording of its settings."""
    store_cls = store_cls or datafusion.object_store.AmazonS3
    return store_cls(
        bucket_name=BUCKET,
        endpoint=endpoint,
        allow_http=True,
        access_key_id="key",
        secret_access_key=SECRET,
        region="us-east-1",
    )


def s3_ctx(endpoint: str, store_cls: Any = None) -> SessionContext:
    ctx = SessionContext()
    ctx.register_object_store("s3://", s3_store(endpoint, store_cls), BUCKET)
    ctx.register_parquet("t", f"s3://{BUCKET}/t/")
    return ctx


@pytest.mark.parametrize("where", ["embedded", "processes"])
def test_s3_table_is_read_by_workers(where, s3_endpoint, cluster):
    ctx = s3_ctx(s3_endpoint)
    dctx = DistributedContext(ctx, workers=None if where == "embedded" else cluster, config=TINY)
    df = dctx.sql(SQL)
    assert_ran_on_workers(df, dctx)
    assert_same_rows(df.to_arrow_table(), ctx.sql(SQL).to_arrow_table(), ordered=False)
    plan = dctx.explain(df)
    df.collect()
    analyzed = dctx.explain(df, analyze=True)
    assert SECRET not in plan and SECRET not in analyzed


def test_credentials_stay_out_of_worker_logs(s3_endpoint, tmp_path):
    """Workers logging at DEBUG (``--log-level DEBUG``; LocalCluster's workers log warnings
    only) read the bucket with the credentials the coordinator sent: none of their log
    holds the secret."""
    logs = [tmp_path / "worker-0.log", tmp_path / "worker-1.log"]
    with (
        open(logs[0], "w") as err0,
        open(logs[1], "w") as err1,
        cli_worker("--log-level", "DEBUG", stderr=err0) as (_, url0),
        cli_worker("--log-level", "DEBUG", stderr=err1) as (_, url1),
    ):
        ctx = s3_ctx(s3_endpoint)
        dctx = DistributedContext(ctx, workers=[url0, url1], config=TINY)
        df = dctx.sql(SQL)
        assert_ran_on_workers(df, dctx)
        df.collect()
        assert {m["worker_url"] for m in dctx.metrics(df)} == {url0, url1}  # both read it
    for log in logs:
        text = log.read_text()
        assert " DEBUG " in text, f"{log.name} holds no debug record: the check would be vacuous"
        assert SECRET not in text


def test_store_created_before_import_fails_clearly(s3_endpoint):
    """A store whose settings were not recorded gives a clear error when a query reads it."""
    ctx = s3_ctx(s3_endpoint)
    # A store of the original class, as if it had been built before our import.
    store_cls = datafusion.object_store.AmazonS3.__wrapped_store_class__
    ctx.register_object_store(
        "s3://", store_cls(bucket_name=BUCKET, endpoint=s3_endpoint, allow_http=True), BUCKET
    )
    assert object_stores.stores_of(ctx) == [(f"s3://{BUCKET}", "unknown", {})]
    with pytest.raises(Exception, match="imported"):
        DistributedContext(ctx, config=TINY).sql(SQL).collect()


def test_store_classes_stay_classes(s3_endpoint):
    """The recording classes are real classes: ``isinstance`` works, also for a store built
    from the original class, and their stores register like datafusion's own."""
    for cls in (AmazonS3, GoogleCloud, Http, LocalFileSystem, MicrosoftAzure):
        assert isinstance(cls, type), cls
        assert (cls.__module__, cls.__qualname__) == ("datafusion.object_store", cls.__name__)
        assert issubclass(cls, cls.__wrapped_store_class__)
    store = s3_store(s3_endpoint)
    assert isinstance(store, AmazonS3)
    assert isinstance(AmazonS3.__wrapped_store_class__(bucket_name=BUCKET), AmazonS3)
    assert not isinstance(store, LocalFileSystem)
    local = LocalFileSystem(prefix="/")
    assert isinstance(local, LocalFileSystem) and not isinstance(local, AmazonS3)
    ctx = SessionContext()
    ctx.register_object_store("s3://", store, BUCKET)
    ctx.register_object_store("file://", local)
    assert object_stores.stores_of(ctx) == [
        (
            f"s3://{BUCKET}",
            "s3",
            {
                "aws_bucket": BUCKET,
                "aws_endpoint": s3_endpoint,
                "aws_allow_http": "true",
                "aws_access_key_id": "key",
                "aws_secret_access_key": SECRET,
                "aws_region": "us-east-1",
            },
        ),
        ("file://", "local", {"prefix": "/"}),
    ]


def test_deregistered_store_is_forgotten(s3_endpoint):
    """After ``deregister_object_store`` the store is no longer sent to workers: a query that
    reads it fails as it does single-node."""
    ctx = s3_ctx(s3_endpoint)
    dctx = DistributedContext(ctx, config=TINY)
    df = dctx.sql(SQL)
    assert_ran_on_workers(df, dctx)  # the workers read the bucket with the store sent them
    df.collect()
    assert [url for url, _, _ in object_stores.stores_of(ctx)] == [f"s3://{BUCKET}"]
    ctx.deregister_object_store("s3://", BUCKET)
    assert object_stores.stores_of(ctx) == []
    with pytest.raises(Exception, match=f"object store.*s3://{BUCKET}"):
        ctx.sql(SQL).collect()
    with pytest.raises(Exception, match=f"object store.*s3://{BUCKET}") as distributed:
        DistributedContext(ctx, config=TINY).sql(SQL).collect()
    assert not isinstance(distributed.value, UnsupportedTableError)


def test_worker_setup_supplies_its_own_object_store(s3_endpoint):
    """Stores registered by a worker's ``setup`` serve its reads: workers can hold credentials
    the coordinator never sends."""

    def setup(worker_ctx: SessionContext) -> None:
        worker_ctx.register_object_store("s3://", s3_store(s3_endpoint), BUCKET)

    # The coordinator's store is built bypassing our hook: its settings cannot reach workers.
    ctx = s3_ctx(s3_endpoint, datafusion.object_store.AmazonS3.__wrapped_store_class__)
    expected = ctx.sql(SQL).to_arrow_table()
    with LocalCluster(2) as bare, pytest.raises(Exception, match="imported"):
        DistributedContext(ctx, workers=bare, config=TINY).sql(SQL).collect()
    with LocalCluster(2, setup=setup) as c:
        dctx = DistributedContext(ctx, workers=c, config=TINY)
        df = dctx.sql(SQL)
        assert_ran_on_workers(df, dctx)
        assert_same_rows(df.to_arrow_table(), expected, ordered=False)


def test_coordinators_never_share_stores_on_a_worker(s3_endpoint, cluster):
    """Coordinators A, B, A, with different settings for the same bucket URL, on the same
    workers: each query reads its own coordinator's bucket (stores are per query)."""
    with moto_bucket(first_value=100_000) as other:
        a, b = s3_ctx(s3_endpoint), s3_ctx(other)
        expected = {"a": a.sql(SQL).to_arrow_table(), "b": b.sql(SQL).to_arrow_table()}
        assert sorted(expected["a"].column("s").to_pylist()) != sorted(
            expected["b"].column("s").to_pylist()
        )
        for name, ctx in (("a", a), ("b", b), ("a", a)):
            dctx = DistributedContext(ctx, workers=cluster, config=TINY)
            got = assert_distributed_equal(ctx, dctx, SQL)
            assert_same_rows(got, expected[name], ordered=False)
