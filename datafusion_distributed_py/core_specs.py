"""What the Rust core builds a worker server and a snapshot table from: one typed object each,
read attribute by attribute by the core (``src/python/worker.rs``,
``src/python/snapshot_table.rs``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from datafusion_distributed_py.security import CoreSecurity

#: A store as the core rebuilds it: ``(url, kind, options)``.
StoreSpec = tuple[str, str, dict[str, str]]
#: A column's ``(name, min, max, null count)`` in one data file, values as strings.
ColumnStats = tuple[str, str | None, str | None, int | None]
#: ``(url, size, rows or None, partition values as strings, column statistics)`` of a data
#: file.
SnapshotFile = tuple[str, int, int | None, Sequence[str | None], Sequence[ColumnStats]]


@dataclass
class WorkerSpec:
    """A worker's gRPC server, for ``_internal.WorkerServer``."""

    host: str
    port: int
    #: The worker's session (or its physical extension codec capsule): it decodes what the
    #: coordinator's session encoded, Python UDFs included.
    codec: object
    #: The version the worker reports.
    version: str
    #: The object stores the worker's setup registered.
    stores: Sequence[StoreSpec] = field(default_factory=list)
    #: ``Security._to_core()``, or None.
    security: CoreSecurity | None = None
    #: Only functions the worker's setup registered run.
    refuse_pickled_code: bool = False
    #: Bytes of memory the worker's tasks may hold, and where they spill beyond it.
    memory_limit: int | None = None
    spill_dir: str | None = None


@dataclass
class SnapshotSpec:
    """A table over exactly a snapshot's data files, for ``_internal.SnapshotTable``."""

    name: str
    #: The table's Arrow schema as IPC bytes (``pa.Schema.serialize()``), in the table's order.
    schema: bytes
    partition_columns: Sequence[str]
    #: The files hold the partition columns (Iceberg) rather than the scan adding them from
    #: the partition values (Delta).
    partitions_in_files: bool
    files: Sequence[SnapshotFile]
    #: Lists the current files at each scan (a table that follows its log), or None.
    source: Callable[[], Sequence[SnapshotFile]] | None
    #: The stores the files live on.
    stores: Sequence[StoreSpec]
    #: ``"parquet"``, ``"json"`` (newline-delimited), ``"arrow"`` (IPC files) or ``"avro"``.
    format: str = "parquet"
