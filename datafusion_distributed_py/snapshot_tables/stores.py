"""Object stores of a lakehouse table's files, from the storage options its format takes."""

from __future__ import annotations

from urllib.parse import urlparse

from datafusion_distributed_py.object_stores import StoreSpec

#: ``storage_options`` keys (deltalake / pyiceberg spellings, any case) -> object_store's S3 keys.
_S3_KEYS = {
    "aws_access_key_id": "aws_access_key_id",
    "s3.access-key-id": "aws_access_key_id",
    "aws_secret_access_key": "aws_secret_access_key",
    "s3.secret-access-key": "aws_secret_access_key",
    "aws_session_token": "aws_session_token",
    "s3.session-token": "aws_session_token",
    "aws_region": "aws_region",
    "region": "aws_region",
    "s3.region": "aws_region",
    "aws_endpoint_url": "aws_endpoint",
    "aws_endpoint": "aws_endpoint",
    "endpoint_url": "aws_endpoint",
    "s3.endpoint": "aws_endpoint",
    "aws_allow_http": "aws_allow_http",
    "allow_http": "aws_allow_http",
    "aws_virtual_hosted_style_request": "aws_virtual_hosted_style_request",
}


def store_for(table_url: str, storage_options: dict[str, str] | None) -> list[StoreSpec]:
    """The store serving ``table_url``'s files: none for local paths (every process has the
    filesystem), an S3 store built from ``storage_options`` for ``s3://``/``s3a://`` tables.

    Example:
        >>> [(url, kind, options)] = store_for(
        ...     "s3://bucket/t", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
        >>> url, kind, sorted(options)
        ('s3://bucket', 's3', ['aws_allow_http', 'aws_bucket', 'aws_endpoint'])
        >>> store_for("file:///data/t", None)
        []
    """
    url = urlparse(table_url)
    if url.scheme in ("", "file"):
        return []
    if url.scheme in ("s3", "s3a"):
        options = {}
        for key, value in (storage_options or {}).items():
            ours = _S3_KEYS.get(key.lower())
            if ours is not None:
                options[ours] = str(value)
        if "aws_endpoint" in options and options["aws_endpoint"].startswith("http://"):
            options.setdefault("aws_allow_http", "true")
        options["aws_bucket"] = url.netloc
        return [(f"s3://{url.netloc}", "s3", options)]
    raise ValueError(
        f"tables on {url.scheme}:// are not supported yet (supported: local paths, s3://)"
    )


def file_url(table_url: str, relative: str) -> str:
    """The absolute URL of a data file given relative to its table (as the log writes it).

    Example:
        >>> file_url("file:///t/", "p=a/x.parquet")
        'file:///t/p=a/x.parquet'
        >>> file_url("/t", "s3://b/elsewhere.parquet")
        's3://b/elsewhere.parquet'
    """
    if "://" in relative:
        return relative
    base = as_url(table_url).rstrip("/")
    return f"{base}/{relative}"


def as_url(location: str) -> str:
    """A table location as a URL (``/t`` -> ``file:///t``; ``s3a://`` read as ``s3://``).

    Example:
        >>> as_url("/tmp/t"), as_url("s3a://b/t")
        ('file:///tmp/t', 's3://b/t')
    """
    if "://" not in location:
        from pathlib import Path

        return Path(location).absolute().as_uri()
    if location.startswith("s3a://"):
        return "s3://" + location[len("s3a://") :]
    return location
