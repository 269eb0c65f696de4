"""Delta Lake tables (``deltalake``) as snapshot tables: the files of a version from the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from datafusion_distributed_py import _internal
from datafusion_distributed_py.core_specs import SnapshotSpec
from datafusion_distributed_py.snapshot_tables import registry
from datafusion_distributed_py.snapshot_tables.schemas import as_datafusion_reads
from datafusion_distributed_py.snapshot_tables.stores import as_url, file_url, store_for

if TYPE_CHECKING:
    import datafusion
    from deltalake import DeltaTable

_log = logging.getLogger(__name__)

#: Reader features whose tables the files alone still answer faithfully.
_READABLE_FEATURES = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "checkpointProtection"}

#: A column's ``(name, min, max, null count)`` in one file, values as strings.
ColumnStats = tuple[str, str | None, str | None, int | None]

#: ``(url, size, rows or None, partition values, column statistics)`` of one data file, as the
#: Rust core takes it.
File = tuple[str, int, int | None, list[str | None], list[ColumnStats]]


def register_delta(
    ctx: datafusion.SessionContext,
    name: str,
    table: DeltaTable | str | Path,
    *,
    version: int | str | datetime | None = None,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Register the Delta Lake table ``table`` on ``ctx`` as ``name``, so that distributed
    queries read it on the workers.

    ``table`` is a ``deltalake.DeltaTable`` (read at the version it was loaded at, as
    ``ctx.register_table(name, table)`` reads it) or the table's path or URI, which follows the
    log: each query reads the latest version's files, unless ``version`` (a version number or
    a timestamp) pins one; its columns stay those of registration time (register it again to
    see columns added later). ``storage_options`` are deltalake's (``AWS_ENDPOINT_URL``, keys,
    ``AWS_REGION``...), used for the workers' object store too.

    Single-node ``ctx.sql`` reads the same files. A version that uses what the files alone
    cannot answer (deletion vectors, column mapping, other reader features) is registered
    through deltalake's own provider instead, and its queries run single-node, saying why.

    Example:
        >>> import pyarrow as pa, tempfile
        >>> from deltalake import write_deltalake
        >>> from datafusion import SessionContext
        >>> path = tempfile.mkdtemp()
        >>> write_deltalake(path, pa.table({"k": [1, 2, 3], "p": ["a", "b", "a"]}),
        ...                 partition_by=["p"])
        >>> ctx = SessionContext()
        >>> register_delta(ctx, "t", path)
        >>> ctx.sql("SELECT p, sum(k) AS s FROM t GROUP BY p ORDER BY p").to_pylist()
        [{'p': 'a', 's': 4}, {'p': 'b', 's': 2}]
    """
    dt, follows_log = _load(table, version, storage_options)
    options = storage_options if storage_options is not None else _options_of(table)
    reason = _unreadable(dt)
    if reason is not None:
        reason = f"Delta table {name} ({dt.table_uri}, version {dt.version()}) {reason}"
        _log.info("%s: registered through deltalake's own provider", reason)
        registry.register(ctx, name, dt, [], reason)
        return
    uri = as_url(dt.table_uri)
    stores = store_for(uri, options)
    schema = as_datafusion_reads(pa.schema(dt.schema().to_arrow()))
    partition_columns = list(dt.metadata().partition_columns)
    source: Callable[[], list[File]] | None = None
    if follows_log:
        source = _follower(dt, partition_columns)
    files = _files(dt, partition_columns)
    raw_schema = schema.serialize().to_pybytes()
    spec = SnapshotSpec(name, raw_schema, partition_columns, False, files, source, stores)
    provider = _internal.SnapshotTable(spec)
    registry.register(ctx, name, provider, stores)


def _load(
    table: DeltaTable | str | Path,
    version: int | str | datetime | None,
    storage_options: dict[str, str] | None,
) -> tuple[DeltaTable, bool]:
    """The table at the version asked for, and whether it follows the log."""
    from deltalake import DeltaTable

    if isinstance(table, DeltaTable):
        if version is not None:
            table = DeltaTable(table.table_uri, storage_options=storage_options)
            table.load_as_version(version)
        return table, False
    if not isinstance(table, (str, Path)):
        raise TypeError(
            f"table must be a deltalake.DeltaTable or a path or URI, got {type(table).__name__}"
        )
    dt = DeltaTable(str(table), storage_options=storage_options)
    if version is not None:
        dt.load_as_version(version)
    return dt, version is None


def _options_of(table: object) -> dict[str, str] | None:
    options = getattr(table, "_storage_options", None)
    return dict(options) if isinstance(options, dict) else None


def _unreadable(dt: DeltaTable) -> str | None:
    """Why the version's rows are not exactly its files' rows, or None."""
    protocol = dt.protocol()
    config = dt.metadata().configuration or {}
    mapping = config.get("delta.columnMapping.mode", "none")
    if mapping not in (None, "none"):
        return (
            f"uses column mapping (mode {mapping!r}): its files name columns by id, "
            "which only deltalake's provider reads"
        )
    features = set(protocol.reader_features or [])
    if "deletionVectors" in features and _has_deletion_vectors(dt):
        return (
            "has deletion vectors (rows deleted without rewriting their files), which only "
            "deltalake's provider applies; OPTIMIZE or a rewrite of the files makes it "
            "readable by workers"
        )
    other = sorted(features - _READABLE_FEATURES - {"deletionVectors", "columnMapping"})
    if other:
        return (
            f"uses the reader feature(s) {', '.join(other)}, which only deltalake's provider reads"
        )
    if protocol.min_reader_version > 3:
        return f"needs reader version {protocol.min_reader_version}"
    return None


def _has_deletion_vectors(dt: DeltaTable) -> bool:
    reader = dt.deletion_vectors()
    return any(batch.num_rows for batch in pa.RecordBatchReader.from_stream(reader))


def _files(dt: DeltaTable, partition_columns: list[str]) -> list[File]:
    """Each data file of ``dt``'s version: its URL, size and partition values."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    counts = (
        actions.column("num_records").to_pylist()
        if "num_records" in actions.column_names
        else [None] * len(paths)
    )
    values: list[list[Any]] = [
        actions.column(f"partition.{c}").cast(pa.string()).to_pylist() for c in partition_columns
    ]
    stats = _column_stats(
        actions, [c for c in dt.schema().to_arrow().names if c not in partition_columns]
    )
    uri = as_url(dt.table_uri)
    return [
        (
            file_url(uri, path),
            int(size),
            rows,
            [column[i] for column in values],
            [(name, lo[i], hi[i], nulls[i]) for name, lo, hi, nulls in stats],
        )
        for i, (path, size, rows) in enumerate(zip(paths, sizes, counts, strict=True))
    ]


def _column_stats(
    actions: pa.Table, columns: list[str]
) -> list[tuple[str, list[str | None], list[str | None], list[int | None]]]:
    """Each column's per-file bounds and null counts from the log (the planner's estimates of
    filters and joins), for the columns the log has them for."""
    out = []
    for name in columns:
        try:
            lo = actions.column(f"min.{name}").cast(pa.string()).to_pylist()
            hi = actions.column(f"max.{name}").cast(pa.string()).to_pylist()
            nulls = actions.column(f"null_count.{name}").cast(pa.int64()).to_pylist()
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue  # no statistics for it (nested, or not collected): no estimate
        out.append((name, lo, hi, nulls))
    return out


def _follower(dt: DeltaTable, partition_columns: list[str]) -> Callable[[], list[File]]:
    """The files of the table's latest version, read again at each scan."""

    def files() -> list[File]:
        dt.update_incremental()
        reason = _unreadable(dt)
        if reason is not None:
            raise RuntimeError(
                f"Delta table {dt.table_uri} version {dt.version()} {reason}; register it "
                "again to read it through deltalake's provider"
            )
        return _files(dt, partition_columns)

    return files
