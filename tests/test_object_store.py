"""An S3-compatible bucket served by a real local server (moto), registered on ctx the way
datafusion users do it: workers (embedded and processes) read it too."""

from __future__ import annotations

import io
import socket
from typing import Any

import boto3
import datafusion
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_same_rows, is_distributed
from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster

SECRET = "s3cr3t-do-not-print"
BUCKET = "bucket"
TINY = DistributedConfig(file_scan_config_bytes_per_partition=64)
SQL = "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
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
        t = pa.table(
            {"g": [f"g{j % 4}" for j in range(500)], "v": list(range(i * 500, (i + 1) * 500))}
        )
        buf = io.BytesIO()
        pq.write_table(t, buf)
        client.put_object(Bucket=BUCKET, Key=f"t/part-{i}.parquet", Body=buf.getvalue())
    yield endpoint
    server.stop()


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(2) as c:
        yield c


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
    assert_same_rows(df.to_arrow_table(), ctx.sql(SQL).to_arrow_table(), ordered=False)
    plan = dctx.explain(df)
    assert is_distributed(plan)
    df.collect()
    analyzed = dctx.explain(df, analyze=True)
    assert SECRET not in plan and SECRET not in analyzed


def test_credentials_stay_out_of_worker_logs(s3_endpoint, cluster):
    ctx = s3_ctx(s3_endpoint)
    DistributedContext(ctx, workers=cluster, config=TINY).sql(SQL).collect()
    for log in cluster.log_dir.glob("*.log"):
        assert SECRET not in log.read_text()


def test_store_created_before_import_fails_clearly(s3_endpoint, monkeypatch):
    """A store whose settings were not recorded gives a clear error when a query reads it."""
    from datafusion_distributed_py import object_stores

    ctx = s3_ctx(s3_endpoint)
    # Forget what was recorded, as if the store had been built before our import.
    monkeypatch.setattr(object_stores, "_stores", {})
    monkeypatch.setattr(object_stores, "_sessions", {})
    store_cls = datafusion.object_store.AmazonS3.__wrapped_store_class__
    ctx.register_object_store(
        "s3://", store_cls(bucket_name=BUCKET, endpoint=s3_endpoint, allow_http=True), BUCKET
    )
    with pytest.raises(Exception, match="imported"):
        DistributedContext(ctx, config=TINY).sql(SQL).collect()


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
        assert_same_rows(df.to_arrow_table(), expected, ordered=False)
        assert is_distributed(dctx.explain(df))
