"""Iceberg tables (``pyiceberg``) as snapshot tables: a snapshot's data files, from its
manifests."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from datafusion_distributed_py import _internal
from datafusion_distributed_py.core_specs import SnapshotSpec
from datafusion_distributed_py.lakehouse.delta import ColumnStats, File
from datafusion_distributed_py.snapshot_tables import registry
from datafusion_distributed_py.snapshot_tables.schemas import as_datafusion_reads
from datafusion_distributed_py.snapshot_tables.stores import as_url, store_for

if TYPE_CHECKING:
    import datafusion
    from pyiceberg.table import FileScanTask, Table

_log = logging.getLogger(__name__)


def register_iceberg(
    ctx: datafusion.SessionContext,
    name: str,
    table: Table,
    *,
    snapshot_id: int | None = None,
) -> None:
    """Register the Iceberg table ``table`` (a ``pyiceberg.table.Table``) on ``ctx`` as
    ``name``, so that distributed queries read it on the workers.

    Without ``snapshot_id`` the table follows its catalog: each query reads the current
    snapshot's files (its columns stay those of registration time; register it again to see
    columns added later). The scan reads exactly the snapshot's data files (from its
    manifests), matching columns by name and pruning files by identity partitions. A
    snapshot the files alone cannot answer faithfully (position or equality delete files, a
    renamed or re-added column, which Iceberg matches by field id) is registered as read by
    pyiceberg's own reader instead, in this process, and its queries run single-node, saying
    why.

    Example:
        >>> import pyarrow as pa, tempfile
        >>> from pyiceberg.catalog.sql import SqlCatalog
        >>> from datafusion import SessionContext
        >>> home = tempfile.mkdtemp()
        >>> catalog = SqlCatalog("c", uri=f"sqlite:///{home}/c.db", warehouse=f"file://{home}")
        >>> catalog.create_namespace("ns")
        >>> data = pa.table({"k": pa.array([1, 2, 3], pa.int64())})
        >>> table = catalog.create_table("ns.t", schema=data.schema)
        >>> table.append(data)
        >>> ctx = SessionContext()
        >>> register_iceberg(ctx, "t", table)
        >>> ctx.sql("SELECT sum(k) AS s FROM t").to_pylist()
        [{'s': 6}]
    """
    from pyiceberg.table import Table

    if not isinstance(table, Table):
        raise TypeError(f"table must be a pyiceberg.table.Table, got {type(table).__name__}")
    if snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None:
        raise ValueError(f"Iceberg table {table.name()} has no snapshot {snapshot_id}")
    # The manifests are read once: what is unreadable, the partition columns and the files
    # all come from these tasks.
    tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
    reason = _unreadable(table, tasks)
    if reason is not None:
        reason = f"Iceberg table {name} ({'.'.join(table.name())}) {reason}"
        _register_own_reader(ctx, name, table, snapshot_id, reason)
        return
    scan = table.scan(snapshot_id=snapshot_id)
    schema = as_datafusion_reads(scan.projection().as_arrow())
    partition_columns = _identity_columns(table, tasks)
    stores = store_for(as_url(table.location()), dict(table.io.properties))
    source: Callable[[], list[File]] | None = None
    if snapshot_id is None:
        source = _follower(table, partition_columns)
    files = _files(table, tasks, partition_columns)
    raw_schema = schema.serialize().to_pybytes()
    spec = SnapshotSpec(name, raw_schema, partition_columns, True, files, source, stores)
    provider = _internal.SnapshotTable(spec)
    registry.register(ctx, name, provider, stores)


def _unreadable(table: Table, tasks: list[FileScanTask]) -> str | None:
    """Why the snapshot (planned as ``tasks``) has rows other than its files' read by column
    name, or None."""
    names: dict[int, set[str]] = {}
    ids: dict[str, set[int]] = {}
    for schema in table.metadata.schemas:
        for field in schema.fields:
            names.setdefault(field.field_id, set()).add(field.name)
            ids.setdefault(field.name, set()).add(field.field_id)
    renamed = sorted(n for ns in names.values() if len(ns) > 1 for n in ns)
    if renamed:
        return (
            f"has renamed columns ({', '.join(renamed)}): Iceberg matches a file's columns by "
            "field id, which only pyiceberg's reader does"
        )
    readded = sorted(n for n, i in ids.items() if len(i) > 1)
    if readded:
        return (
            f"has columns dropped and added again under one name ({', '.join(readded)}): "
            "Iceberg matches a file's columns by field id, which only pyiceberg's reader does"
        )
    for task in tasks:
        if task.delete_files:
            return (
                "has position or equality delete files (rows deleted without rewriting their "
                "files), which only pyiceberg's reader applies; rewriting the data files makes "
                "it readable by workers"
            )
    return None


def _identity_columns(table: Table, tasks: list[FileScanTask]) -> list[str]:
    """The columns the current partition spec partitions by identity, where their values can
    prune files: of a type whose value reads back from text, with every data file of the
    table written under that spec (a file of another spec does not know them)."""
    from pyiceberg.types import BooleanType, IntegerType, LongType, StringType

    if any(task.file.spec_id != table.spec().spec_id for task in tasks):
        return []
    schema = table.schema()
    columns = []
    for field in table.spec().fields:
        source = schema.find_field(field.source_id)
        plain = isinstance(source.field_type, (BooleanType, IntegerType, LongType, StringType))
        if str(field.transform) == "identity" and plain:
            columns.append(source.name)
    return columns


def _files(table: Table, tasks: list[FileScanTask], partition_columns: list[str]) -> list[File]:
    """Each data file of ``tasks``: its URL, size, rows and the values of
    ``partition_columns``."""
    spec = table.spec()
    positions = {table.schema().find_field(f.source_id).name: i for i, f in enumerate(spec.fields)}
    columns = [
        (f, _bound_reader(f.field_type)) for f in table.schema().fields if f.field_type.is_primitive
    ]
    out: list[File] = []
    for task in tasks:
        data = task.file
        if partition_columns and data.spec_id != spec.spec_id:
            raise RuntimeError(
                f"Iceberg table {'.'.join(table.name())}: its partition spec changed since it "
                "was registered; register it again"
            )
        values = [_as_text(data.partition[positions[c]]) for c in partition_columns]
        size, rows = int(data.file_size_in_bytes), int(data.record_count)
        stats = [_column_stats(data, field, read) for field, read in columns]
        out.append((as_url(data.file_path), size, rows, values, stats))
    return out


def _bound_reader(field_type: Any) -> Callable[[bytes], str] | None:
    """How a manifest's bound of a column of ``field_type`` reads as text, for the types whose
    bounds the planner estimates with (numbers and dates); None for the others."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import DateType, DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(field_type, DateType):  # days since the epoch
        return lambda raw: (_EPOCH + timedelta(days=int(from_bytes(field_type, raw)))).isoformat()
    if isinstance(field_type, (IntegerType, LongType, FloatType, DoubleType, DecimalType)):
        return lambda raw: str(from_bytes(field_type, raw))
    return None


def _column_stats(data: Any, field: Any, read: Callable[[bytes], str] | None) -> ColumnStats:
    """A column's bounds (as ``read`` gives them) and null count in one data file, from its
    manifest entry: the planner's estimates of filters and joins."""
    fid = field.field_id
    nulls = (data.null_value_counts or {}).get(fid)
    lower, upper = ((getattr(data, b) or {}).get(fid) for b in ("lower_bounds", "upper_bounds"))
    return (
        field.name,
        read(lower) if read and lower is not None else None,
        read(upper) if read and upper is not None else None,
        None if nulls is None else int(nulls),
    )


_EPOCH = date(1970, 1, 1)


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _follower(table: Table, partition_columns: list[str]) -> Callable[[], list[File]]:
    """The files of the table's current snapshot, read again at each scan."""

    def files() -> list[File]:
        table.refresh()
        tasks = list(table.scan().plan_files())
        reason = _unreadable(table, tasks)
        if reason is not None:
            raise RuntimeError(
                f"Iceberg table {'.'.join(table.name())} {reason}; register it again to read "
                "it through pyiceberg's own reader"
            )
        return _files(table, tasks, partition_columns)

    return files


def _register_own_reader(
    ctx: datafusion.SessionContext,
    name: str,
    table: Table,
    snapshot_id: int | None,
    reason: str,
) -> None:
    """Register ``table`` as read by pyiceberg itself (which applies delete files and matches
    columns by field id), in this process: its queries run single-node for ``reason``."""
    schema = as_datafusion_reads(table.scan(snapshot_id=snapshot_id).projection().as_arrow())

    def open_reader() -> pa.RecordBatchReader:
        if snapshot_id is None:
            table.refresh()
        return table.scan(snapshot_id=snapshot_id).to_arrow_batch_reader().cast(schema)

    _log.info("%s: registered through pyiceberg's own reader", reason)
    provider = _internal.ReaderTable(name, schema.serialize().to_pybytes(), open_reader)
    registry.register(ctx, name, provider, [], reason)
