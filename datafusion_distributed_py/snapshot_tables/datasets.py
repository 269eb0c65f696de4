"""pyarrow datasets registered with ``ctx.register_dataset``, read by the workers.

datafusion-python scans a pyarrow dataset through pyarrow, in the process that holds it: a
plan reading one cannot travel. A dataset made of files is a list of files with a schema and,
when partitioned, each file's partition values: the same thing a Delta or Iceberg snapshot is
(see ``lakehouse``). So, once this package is imported, ``register_dataset`` of such a dataset
registers a table over exactly the dataset's files, with its schema and partition columns,
read by DataFusion's own scan of the format: single-node ``ctx.sql`` reads it like any table
(filters pushed into Parquet scans as for any Parquet table), and distributed queries send
that scan to the workers, split into tasks. Parquet, newline-delimited JSON and Arrow IPC
(Feather) files on the local filesystem or on S3 (``pyarrow.fs.S3FileSystem``, its endpoint
and credentials passed on to the workers as an object store) qualify. CSV datasets do not:
pyarrow's CSV reading (which strings are nulls, which texts are booleans or timestamps)
differs from DataFusion's, so their rows could change. Any other dataset is registered as
datafusion-python registers it (its queries then run single-node, saying why).

The same holds wherever datafusion-python takes a dataset as a table: ``Table(dataset)`` and
the result of a Python table function (``udtf``). A table function's in-memory result (an
``InMemoryDataset``) becomes rows DataFusion holds, which travel with the plan like an
in-memory table's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datafusion
import pyarrow.dataset as pads
import pyarrow.fs as pafs
from datafusion.user_defined import TableFunction

from datafusion_distributed_py import _internal, object_stores
from datafusion_distributed_py.core_specs import SnapshotSpec
from datafusion_distributed_py.snapshot_tables import registry
from datafusion_distributed_py.snapshot_tables.stores import store_for


def registrations() -> dict[str, Any]:
    """``SessionContext.register_dataset`` registering a dataset of files as a table over
    exactly those files (the wheel's dataset scan runs Python in this process)."""
    plain = datafusion.SessionContext.register_dataset

    @functools.wraps(plain)
    def register_dataset(self: datafusion.SessionContext, name: str, dataset: Any) -> None:
        table = as_table(name, dataset)
        if table is None:
            plain(self, name, dataset)
            return
        provider, stores = table
        registry.register(self, name, provider, stores)

    return {"register_dataset": register_dataset}


def table_init() -> dict[str, Any]:
    """``Table(dataset)`` made a table the workers can read, as ``register_dataset``."""
    plain_table = datafusion.Table.__init__

    @functools.wraps(plain_table)
    def table_init(self: datafusion.Table, table: Any, ctx: Any = None) -> None:
        plain_table(self, travelling(table, "table"), ctx)

    return {"__init__": table_init}


def function_init() -> dict[str, Any]:
    """``TableFunction(name, func)``: a Python table function's result made a table the
    workers can read."""
    plain_function = TableFunction.__init__

    @functools.wraps(plain_function)
    def function_init(
        self: TableFunction, name: str, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        if callable(func) and not hasattr(func, "__datafusion_table_function__"):
            func = _returning_travelling(func, name)
        plain_function(self, name, func, *args, **kwargs)

    return {"__init__": function_init}


def _returning_travelling(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``func`` (a Python table function) with its result made a table the workers can read."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        return travelling(func(*args, **kwargs), f"{name}()")

    return call


def travelling(table: Any, name: str) -> Any:
    """``table`` as a table whose scan can travel to workers when it is a pyarrow dataset of
    files (see ``as_table``) or in memory; anything else unchanged."""
    if isinstance(table, pads.InMemoryDataset):
        return _internal.InMemoryTable(name, table.to_table())
    converted = as_table(name, table) if isinstance(table, pads.Dataset) else None
    # Files on S3 need their store registered on the session: left to register_dataset.
    if converted is None or converted[1]:
        return table
    return converted[0]


def as_table(
    name: str, dataset: Any
) -> tuple[_internal.SnapshotTable, list[object_stores.StoreSpec]] | None:
    """A table over ``dataset``'s files, and the stores they are read from; None for a
    dataset that is not Parquet, JSON or Arrow IPC files on the local filesystem or S3."""
    if not isinstance(dataset, pads.FileSystemDataset):
        return None
    format = _format(dataset.format)
    if format is None:
        return None
    fs = dataset.filesystem
    stores: list[object_stores.StoreSpec] = []
    to_url: Callable[[str], str]
    if isinstance(fs, pafs.LocalFileSystem):
        to_url = lambda path: Path(path).absolute().as_uri()  # noqa: E731
    elif isinstance(fs, pafs.S3FileSystem):
        to_url = lambda path: f"s3://{path}"  # noqa: E731
    else:
        return None
    fragments = list(dataset.get_fragments())
    if not fragments:
        return None
    partition_columns = _partition_columns(dataset, fragments)
    if partition_columns is None:
        return None
    infos = fs.get_file_info([f.path for f in fragments])
    files: list[tuple[str, int, None, list[str | None], list[Any]]] = []
    for fragment, info in zip(fragments, infos, strict=True):
        keys = pads.get_partition_keys(fragment.partition_expression)
        values = [None if keys.get(c) is None else str(keys[c]) for c in partition_columns]
        files.append((to_url(fragment.path), int(info.size), None, values, []))
    if isinstance(fs, pafs.S3FileSystem):
        stores = _s3_stores(fs, files[0][0])
    schema = dataset.schema.remove_metadata()
    provider = _internal.SnapshotTable(
        SnapshotSpec(
            name, schema.serialize().to_pybytes(), partition_columns, False, files, None, stores,
            format,
        )
    )  # fmt: skip
    return provider, stores


def _format(file_format: pads.FileFormat) -> str | None:
    """The format DataFusion reads as pyarrow reads ``file_format``, if there is one."""
    if isinstance(file_format, pads.ParquetFileFormat):
        return "parquet"
    if isinstance(file_format, pads.IpcFileFormat):
        return "arrow"
    if isinstance(file_format, pads.JsonFileFormat):
        return "json"
    return None


def _partition_columns(dataset: pads.FileSystemDataset, fragments: list[Any]) -> list[str] | None:
    """The dataset's partition columns: those of its schema its files lack (last, as pyarrow
    appends them); None when they are not the last."""
    in_files = set(fragments[0].physical_schema.names)
    names = dataset.schema.names
    columns = [n for n in names if n not in in_files]
    if columns and names[-len(columns) :] != columns:
        return None
    return columns


def _s3_stores(fs: pafs.S3FileSystem, url: str) -> list[object_stores.StoreSpec]:
    """The S3 store ``fs`` reads ``url``'s bucket with: its endpoint, region and keys."""
    settings = fs.__reduce__()[1][0]
    options = {"aws_region": settings.get("region") or "us-east-1"}
    endpoint = settings.get("endpoint_override") or ""
    if endpoint:
        if "://" not in endpoint:
            endpoint = f"{settings.get('scheme') or 'https'}://{endpoint}"
        options["aws_endpoint"] = endpoint
    if settings.get("access_key"):
        options["aws_access_key_id"] = settings["access_key"]
        options["aws_secret_access_key"] = settings.get("secret_key", "")
    if settings.get("session_token"):
        options["aws_session_token"] = settings["session_token"]
    return store_for(url, options)
