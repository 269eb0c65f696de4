"""Types of the Rust core (``src/``), which maturin builds into this module.

Everything the core's ``#[pymodule]`` adds to the module: its build facts, exceptions,
classes and functions, with the signatures of their ``#[pymethods]``; CI checks them against
the built module (``mypy.stubtest``).
"""

from collections.abc import Callable, Sequence
from typing import Any, final

from datafusion_distributed_py.context import MetricsRecord
from datafusion_distributed_py.core_specs import SnapshotSpec, WorkerSpec
from datafusion_distributed_py.plan_request import PlanRequest
from datafusion_distributed_py.security import CoreSecurity

#: This package's version; workers report it and the coordinator compares it.
__all__ = [
    "__version__",
    "process_meters",
    "keep_task_events",
    "take_task_events",
    "DATAFUSION_MAJOR",
    "WIRE_CODEC_ID",
    "DistributedError",
    "WorkerError",
    "UnsupportedPlanError",
    "Coordinator",
    "Handshake",
    "ProgressQueue",
    "DistributedPlan",
    "WorkerServer",
    "SnapshotTable",
    "WireCodec",
    "InMemoryTable",
    "ReaderTable",
    "KeptTable",
    "MadeBy",
    "KeptInsert",
    "kept_tables",
    "kept_table",
    "append_exec_prefix",
    "create_table_as",
    "delete_or_update",
    "check_health",
    "planner_defaults",
    "distributed_setting",
    "unbounded_table",
    "close_interpreter",
]

__version__: str
#: The DataFusion major version the Rust crates were built against.
DATAFUSION_MAJOR: int
#: The codec id our leaves' scans are encoded under on the coordinator's serialising session.
WIRE_CODEC_ID: str

class DistributedError(Exception):
    """A distributed query could not be planned or executed."""

class WorkerError(DistributedError):
    """A worker could not be reached, failed, or is incompatible."""

    #: The worker, as ``http://host:port`` (None where no one worker is to blame).
    worker_url: str | None
    #: What happened, as data: ``"died"``, ``"stopped_answering"``, ``"unreachable"``,
    #: ``"lost_peer"`` (it lost its connection to another worker), ``"rejected_credentials"``,
    #: ``"version_mismatch"`` or ``"refused"`` (unfit for the query otherwise).
    kind: str
    #: For a stream the loss ended: the rows it had delivered (they stand; None otherwise).
    rows_delivered: int | None

class UnsupportedPlanError(DistributedError):
    """The query's plan cannot be distributed without changing its answer."""

@final
class Handshake:
    """A query's handshake with the workers, started before the query is planned."""

@final
class ProgressQueue:
    """A run's progress events held until Python reads them (no Python called meanwhile)."""

    def __init__(self) -> None: ...
    def drain(
        self,
    ) -> list[tuple[int, int, int, str, int, str, int | None, float | None]]:
        """The events held since the last call, oldest first."""

@final
class Coordinator:
    """Plans distributed queries over a set of workers (embedded or remote)."""

    @staticmethod
    def embedded(
        n_workers: int,
        memory_limit: int | None = None,
        spill_dirs: Sequence[str] = ...,
        max_spill_bytes: int | None = None,
    ) -> Coordinator:
        """A coordinator over ``n_workers`` workers in this process, sharing one memory pool
        of ``memory_limit`` bytes and spilling to ``spill_dirs``."""

    @staticmethod
    def remote(
        workers: Sequence[str] | Callable[[], Sequence[str]],
        security: CoreSecurity | None = None,
    ) -> Coordinator:
        """A coordinator over remote workers: URLs, or a callable returning them;
        ``security`` is ``Security._to_core()`` (token, TLS) or None."""

    def worker_urls(self) -> list[str]:
        """The worker URLs a query planned now would use."""

    def worker_status(self) -> list[dict[str, Any]]:
        """How each worker is doing: ``url``, ``error`` (None when it answered),
        ``rss_bytes``, ``cpu_percent``, ``running_tasks``."""

    def handshake_ahead(self, min_workers: int) -> Handshake | None:
        """The workers' handshake of a query about to be planned, started now (None for
        in-process workers)."""

    def distribute(self, request: PlanRequest) -> DistributedPlan:
        """Distributes a physical plan serialised by datafusion-python, as ``request`` says."""
    def kept_tables(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """The kept tables on these workers: ``(id, name, shares)``."""
    def keep(
        self,
        name: str,
        request: PlanRequest,
        original: object | None = None,
        replacing: KeptTable | None = None,
    ) -> KeptTable:
        """Runs a plan as ``distribute`` takes it, keeping its result on the workers that
        compute it, as the kept table ``name``."""
    def insert(self, table: KeptTable, request: PlanRequest) -> KeptInsert:
        """``INSERT INTO table`` of a plan as ``distribute`` takes it: a table provider whose
        every scan runs the insert on the workers once and gives its count."""

#: ``(metric, value, timestamp_ns, partition, labels)``
_MetricRow = tuple[str, int | None, int | None, int | None, dict[str, str]]

@final
class DistributedPlan:
    """A distributed physical plan, ready to run; a table provider for datafusion-python."""

    @property
    def is_distributed(self) -> bool:
        """True when the planner split the query into stages joined by network boundaries."""

    @property
    def exact_rows(self) -> int | None:
        """The row count, when the plan's statistics know it exactly; else None."""

    def display(self, format: str = "text", analyze: bool = False) -> str:
        """The plan as ``"text"`` or ``"graphviz"``; with ``analyze``, the latest run's."""

    def stages(
        self, analyze: bool = False
    ) -> list[
        tuple[
            int,
            int,
            list[tuple[int, str, int | None, int | None, int | None]],
            list[tuple[int, str]],
        ]
    ]:
        """The stages, head first: (stage, tasks, operators, inputs); see ``plan_picture``."""

    def task_metrics(self, wait_s: float = 5.0) -> list[MetricsRecord]:
        """Per-task records of the latest run, once every worker has reported (waiting at
        most ``wait_s`` seconds; then what arrived)."""

    def operator_metrics(self) -> list[tuple[str, str, int, list[_MetricRow]]]:
        """The latest run's metrics per operator, in pre-order with stages expanded:
        ``(name, line, stage, [(metric, value, timestamp_ns, partition, labels)])`` (stage 0:
        the coordinator's)."""

    def display_stream(self, max_bytes: int, min_rows: int, max_rows: int) -> tuple[object, bool]:
        """The rows a frame's ``repr`` shows (datafusion-python's formatter's rule, applied
        where the rows arrive): an Arrow C stream of them, and whether there are more."""
    def plan_bytes_sent(self) -> int:
        """Bytes of plan fragments the latest scan sent to workers."""

    def last_failure(self) -> tuple[str | None, str, str] | None:
        """The worker failure the latest run ended with: ``(worker_url, kind, message)``."""

    def may_run_again(self) -> bool:
        """After a run failed: whether it may run again from the start on the workers left (a
        worker was lost, runs are left); the retry is then announced."""

    def set_retries(self, on: bool) -> None:
        """Lets a lost worker cost a retry of the query (default), or not (while writing)."""

    def set_trace_parent(self, traceparent: str | None) -> None:
        """Sends the next runs' tasks under this W3C ``traceparent``; None: untraced."""

    def __arrow_c_schema__(self, requested_schema: object | None = None) -> object:
        """The result's schema as an ``arrow_schema`` capsule (``pa.schema(plan)``)."""
    def steps(self) -> list[tuple[str, float]]:
        """How long each step of the query's fixed cost took, in seconds, in order: planning
        for the workers, then (once read whole) starting the run and running it."""
    def collect_streams(self, partitioned: bool = False) -> list[object]:
        """Runs the query; its batches as ``arrow_array_stream`` capsules, one per output
        partition when ``partitioned``, else one."""

    def __datafusion_table_provider__(self, session: object) -> object:
        """The FFI table-provider capsule (``ctx.read_table(plan)``)."""

@final
class WorkerServer:
    """A gRPC server running the tasks of distributed plans."""

    def __new__(cls, spec: WorkerSpec) -> WorkerServer:
        """``spec``: the server's host, port, session, stores, security and memory bounds."""

    def start(self) -> int:
        """Binds the port and serves in the background; returns the bound port."""

    @property
    def port(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def running(self) -> bool: ...
    def stop(self, drain_seconds: float = 5.0) -> None:
        """Stops accepting work; in-flight calls get up to ``drain_seconds`` to finish."""

@final
class SnapshotTable:
    """A table over exactly a snapshot's data files (``lakehouse``), as an FFI provider."""

    def __new__(cls, spec: SnapshotSpec) -> SnapshotTable:
        """``spec``: the table's name, schema, partition columns, files (and what lists them
        at each scan), stores and format."""

    @property
    def file_count(self) -> int:
        """How many data files the latest scan saw."""

    def __datafusion_table_provider__(self, session: object) -> object: ...

@final
class InMemoryTable:
    """Rows held by DataFusion (a Python table function's in-memory result), as an FFI
    provider whose scan travels with its rows."""

    def __new__(cls, name: str, data: object) -> InMemoryTable: ...
    def __datafusion_table_provider__(self, session: object) -> object: ...

@final
class WireCodec:
    """The physical codec datafusion-python's serialiser asks for the nodes it cannot write:
    lakehouse tables' scans (as Parquet scans), kept tables' scans, recursive queries."""

    def __new__(cls, session: object) -> WireCodec: ...
    def announce_recursive_queries(self, queries: list[tuple[str, bool]]) -> None: ...
    def announce_streams(self, tables: list[str], fetch: int | None) -> None: ...
    def announce_partial_sorts(
        self, sorts: list[tuple[list[tuple[str, int, bool, bool]], int, int | None]]
    ) -> None: ...
    def __datafusion_physical_extension_codec__(self, session: object | None = None) -> object: ...

@final
class ReaderTable:
    """A table read by its format's own Python reader, in this process (single-node)."""

    def __new__(cls, name: str, schema: bytes, open: Callable[[], object]) -> ReaderTable:
        """``open`` returns a new ``pyarrow.RecordBatchReader`` of the whole table."""

    def __datafusion_table_provider__(self, session: object) -> object: ...

def check_health(url: str, security: CoreSecurity | None = None, timeout: float = 5.0) -> str:
    """The standard gRPC health status of the worker at ``url`` (``"SERVING"``, ...)."""

def process_meters() -> dict[str, int]:
    """This process's meters by name: tasks started, finished, failed and running; rows and
    bytes out and in; refused requests; memory pool, spill and kept data (``/metrics``)."""

def keep_task_events(on: bool) -> None:
    """Starts (True) or stops keeping an event of each task this process runs."""

def take_task_events() -> list[dict[str, Any]]:
    """The tasks this process ended since the last call, as event-log fields."""

def planner_defaults() -> dict[str, str]:
    """datafusion-distributed's ``DistributedConfig`` defaults, as ``distributed.*`` strings."""
    ...

def create_table_as(sql: str, session: Any) -> tuple[str, str, bool, bool] | None:
    """``(table, query, or_replace, if_not_exists)`` when ``sql`` is one ``CREATE TABLE ... AS
    <query>``; None for anything else."""
    ...

def kept_tables() -> list[tuple[str, str, list[dict[str, Any]]]]:
    """Every kept table of this process still held: ``(id, name, shares)``."""
    ...

@final
class KeptTable:
    """A result kept on the workers that computed it: a table provider for ``ctx``."""

    @property
    def name(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def rows(self) -> int:
        """Rows it holds now."""
        ...
    def shares(self) -> list[dict[str, Any]]:
        """Where its rows are: ``holder``, ``parts``, ``rows``, ``bytes``, ``on_disk_bytes``."""
        ...
    def made_by(self) -> MadeBy:
        """The runs that made it, apart from it (holding them does not keep the table)."""
        ...
    def __datafusion_table_provider__(self, session: Any) -> object: ...

@final
class MadeBy:
    """The runs that made a kept table."""

    def task_metrics(self, wait_s: float = 5.0) -> list[MetricsRecord]:
        """Per-task records of the runs, as ``DistributedPlan.task_metrics`` gives them."""
        ...

@final
class KeptInsert:
    """A distributed ``INSERT INTO`` a kept table, as a table of its count."""

    def __datafusion_table_provider__(self, session: Any) -> object: ...

def kept_table(id: str) -> KeptTable | None:
    """The kept table whose id is ``id``, while it is held."""
    ...

def append_exec_prefix() -> str:
    """How the physical plan of an ``INSERT`` into a kept table names its root (the table's
    id follows)."""
    ...

def delete_or_update(
    sql: str, session: Any
) -> tuple[str, str, str | None, list[tuple[str, str]]] | None:
    """``(kind, table, where, assignments)`` when ``sql`` is one ``DELETE`` or ``UPDATE`` of
    one table, as SQL text; None for anything else."""
    ...

def distributed_setting(sql: str, session: Any) -> tuple[str, str] | None:
    """``(key, value)`` when ``sql`` is one ``SET distributed.<key> = <value>`` statement, as
    DataFusion's parser reads it in ``session``'s dialect; None for anything else."""
    ...

def close_interpreter() -> None:
    """From now on the core never enters Python (called by ``atexit``)."""
    ...

def unbounded_table(sql: str, session: object) -> tuple[str, bool, str] | None:
    """``(name, if_not_exists, spec)`` when ``sql`` creates an unbounded table over one local
    CSV or JSON file; None for any other statement."""
