"""``DistributedConfig``: the typed knobs of datafusion-distributed's planner."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass, fields
from typing import Any, Literal

Compression = Literal["auto", "none", "lz4", "zstd"]
Fallback = Literal["coordinator", "error"]
FaultTolerance = Literal["query", "task"]

#: Our default bytes per file-scan partition. The crate's 16 MiB keeps small tables on one
#: task; users of ``DistributedContext`` asked for distribution, so we split from 1 MiB on
#: (tasks per stage are still capped by the number of workers).
DEFAULT_BYTES_PER_PARTITION = 1024 * 1024


@dataclass(frozen=True)
class DistributedConfig:
    """Settings of the distributed planner and runtime (``distributed.*`` options).

    The planner fields map to the options ``distributed.<field>`` of the
    datafusion-distributed crate; the others (``min_workers``, ``max_retries``, ``fallback``,
    ``progress_interval``, ``keep_tables_above``, ``stall_timeout``, ``fault_tolerance``,
    ``spool_dir``) are this package's own.
    ``SET distributed.<field> = <value>`` through :meth:`DistributedContext.sql` changes any
    of them.

    Attributes:
        file_scan_config_bytes_per_partition: bytes of files each scan partition reads; lower
            means more tasks for the scan stage.
        cardinality_task_count_factor: how task counts grow or shrink above nodes that change
            the row count.
        children_isolator_unions: run each UNION child on its own tasks.
        collect_metrics: send per-task metrics back to the coordinator.
        broadcast_joins: broadcast the build side of small hash joins.
        compression: compression of data between workers: "auto" (none when every worker
            is on this machine — the embedded cluster, loopback addresses — where it costs
            CPU and saves no network; lz4 otherwise), "none", "lz4" or "zstd".
        shuffle_batch_size: batch size for worker stages; 0 keeps the session's batch size.
        max_tasks_per_stage: upper bound of tasks per stage; 0 means the number of workers,
            shared among the queries of this process running on them at once (a query planned
            beside one other on two workers gets one task per stage; see docs/concepts.md).
        partial_reduce: extra partial aggregation before shuffles (not applied to queries
            with GROUPING SETS, ROLLUP or CUBE, whose answers it would change).
        worker_connection_buffer_budget_bytes: buffer per worker connection before pausing.
        dynamic_task_count: size stages at run time from sampled data.
        dynamic_bytes_per_partition: bytes per partition when ``dynamic_task_count`` is on.
        min_workers: fewer reachable workers than this fails a query; unreachable workers are
            otherwise left out (with a warning) and asked again later.
        max_retries: times a query runs again from the start, on the workers left, when a
            worker is lost (dies, freezes, becomes unreachable) before it handed you a row:
            at any point of ``collect()``, ``to_pandas()``, ``cache()``, writes from the
            workers and the like; before the first batch of a stream (``execute_stream``).
            Never for errors of the query itself, refused credentials, or writes the
            coordinator makes as rows come (see docs/failures.md).
        fallback: what happens to a query that cannot be distributed without changing its
            answer (a table only this process can read, a literal type DataFusion 55's plan
            serialisation changes...): ``"coordinator"`` runs it single-node here
            and logs a warning naming the reason; ``"error"`` raises
            :class:`UnsupportedTableError` instead.
        progress_interval: seconds between asks to workers for the rows their running tasks
            produced, while progress is shown or a dashboard watches (live bars, ``rows`` in
            :class:`ProgressEvent`); 0 turns live progress off (progress then moves as tasks
            end).
        keep_tables_above: an in-memory table the coordinator holds (``from_pandas``,
            ``from_arrow``, ``register_record_batches``...) of more bytes than this is sent to
            the workers once, when a distributed query first reads it, and kept there; later
            queries carry a reference to it. Smaller ones travel inside each query's plan.
            Default 1 MiB.
        stall_timeout: seconds a reader of a result may wait while nothing of the query
            moves — no batch arrives, no task ends or produces rows, no worker of the run uses
            CPU — before the query fails with a :class:`WorkerError` of kind ``"stalled"``
            naming the tasks it waited for and their workers; 0 waits forever. Time the reader
            spends not asking for batches does not count. Default 300.
        fault_tolerance: what a worker lost mid-query costs. ``"query"`` (default): a run of
            the query again from the start on the workers left (see ``max_retries``).
            ``"task"``, for long queries: each task writes its output to ``spool_dir`` as
            it passes it on, a task scanning files in chunks (slices of its files, each
            committed whole); the run after a loss reads every chunk and task that was
            written and computes the rest. Costs a disk write of each stage's output: nothing
            measurable on a query of seconds, +7-10% on sub-second ones; writes and ``cache()`` are
            not spooled (they run again whole). See docs/failures.md.
        spool_dir: with ``fault_tolerance="task"``, a directory every worker reads and writes
            (the machine's temporary directory when empty: right for the embedded cluster and
            ``LocalCluster``; hosts of their own need a shared filesystem, else a lost
            worker's finished tasks are computed again).
        event_log: a directory, or a URI pyarrow opens (``s3://bucket/prefix``), where each
            query's record is appended as one JSON line: text, stages, tasks, workers, times,
            rows, bytes, spill, retries, failure kind, where it ran — never a table's values
            (see ``event_log.py`` and docs/observing.md). Empty (the default): none.
        event_log_max_bytes: an event log file is closed and the next one started past this
            size. Default 16 MiB.
        adaptive: plan joins from the sizes their inputs really have: a partitioned hash join
            whose build side's size is a guess (behind a filter, a join, an aggregate) runs
            that side first on the workers; when it ends small (an eighth of what the probe
            side would shuffle, at most ``adaptive_broadcast_bytes``) the join
            broadcasts those rows to the probe side's tasks, whose scan is then pruned by the
            join's dynamic filter, instead of shuffling both sides.
            ``explain`` shows each decision and the size it was made on. ``False`` plans
            from statistics alone. Default ``True``. See docs/adaptive-joins.md.
        adaptive_broadcast_bytes: the most bytes of build rows an adaptive join broadcasts
            (each probe task holds them all); a build side that passes its join's limit is
            read no further and its join stays partitioned. Default 64 MiB.
        adaptive_skew_bytes: a partitioned join whose probe side's sample finds a hot key
            (an eighth of its rows, making its partition twice the average) is split (the
            key's probe rows spread over the partitions, its build rows sent to each) when
            that key's rows are estimated at this many bytes or more. Default 256 MiB (as
            Spark's skew joins); ``0`` splits every hot key. See docs/adaptive-joins.md.
        hold_whole_below: a kept table (``CREATE TABLE AS``, ``cache()``, an in-memory table
            sent once) of at most this many bytes is held whole by one worker, moved there
            once it is made, so that its follow-ups are one-task stages with no shuffle
            between workers; rows an ``INSERT`` appends to such a table join it there while
            the whole still fits. ``0`` leaves each part where the task that made it ran.
            Default 128 MiB. See docs/kept-data.md.

    Example:
        >>> cfg = DistributedConfig(max_tasks_per_stage=4, compression="zstd")
        >>> cfg.to_options()["distributed.max_tasks_per_stage"]
        '4'
        >>> DistributedConfig(max_task_per_stage=4)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: ...unexpected keyword argument 'max_task_per_stage'
        >>> DistributedConfig(compression="gzip")
        Traceback (most recent call last):
        ...
        ValueError: compression must be one of 'auto', 'none', 'lz4', 'zstd', got 'gzip'
    """

    file_scan_config_bytes_per_partition: int = DEFAULT_BYTES_PER_PARTITION
    cardinality_task_count_factor: float = 1.0
    children_isolator_unions: bool = True
    collect_metrics: bool = True
    broadcast_joins: bool = True
    compression: Compression = "auto"
    shuffle_batch_size: int = 0
    max_tasks_per_stage: int = 0
    partial_reduce: bool = False
    worker_connection_buffer_budget_bytes: int = 64 * 1024 * 1024
    dynamic_task_count: bool = False
    dynamic_bytes_per_partition: int = 16 * 1024 * 1024
    min_workers: int = 1
    max_retries: int = 1
    fallback: Fallback = "coordinator"
    progress_interval: float = 0.5
    keep_tables_above: int = 1024 * 1024
    stall_timeout: float = 300.0
    fault_tolerance: FaultTolerance = "query"
    spool_dir: str = ""
    event_log: str = ""
    event_log_max_bytes: int = 16 * 1024 * 1024
    adaptive: bool = True
    adaptive_broadcast_bytes: int = 64 * 1024 * 1024
    adaptive_skew_bytes: int = 256 * 1024 * 1024
    hold_whole_below: int = 128 * 1024 * 1024

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = _TYPES[f.name]
            # bool is an int subclass: refuse True where a count is meant, and 1 for a flag.
            ok = (
                isinstance(value, bool)
                if expected is bool
                else isinstance(value, expected) and not isinstance(value, bool)
            )
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
                ok = True
            if not ok:
                raise TypeError(
                    f"{f.name} must be {expected.__name__}, got {type(value).__name__} {value!r}"
                )
            if expected is int and value < 0:
                raise ValueError(f"{f.name} must be >= 0, got {value}")
        if self.compression not in ("auto", "none", "lz4", "zstd"):
            raise ValueError(
                "compression must be one of 'auto', 'none', 'lz4', 'zstd', "
                f"got {self.compression!r}"
            )
        if self.fault_tolerance not in ("query", "task"):
            raise ValueError(
                f"fault_tolerance must be 'query' or 'task', got {self.fault_tolerance!r}"
            )
        if self.fallback not in ("coordinator", "error"):
            raise ValueError(f"fallback must be 'coordinator' or 'error', got {self.fallback!r}")
        if self.progress_interval < 0:
            raise ValueError("progress_interval must be >= 0 seconds")
        if self.stall_timeout < 0:
            raise ValueError("stall_timeout must be >= 0 seconds (0 waits forever)")
        if self.min_workers == 0:
            raise ValueError("min_workers must be >= 1")
        if self.file_scan_config_bytes_per_partition == 0:
            raise ValueError("file_scan_config_bytes_per_partition must be > 0")
        if self.event_log_max_bytes == 0:
            raise ValueError("event_log_max_bytes must be > 0")
        if self.cardinality_task_count_factor <= 0:
            raise ValueError("cardinality_task_count_factor must be > 0")

    def replace(self, **changes: Any) -> DistributedConfig:
        """A copy with some fields changed (validated like the constructor).

        Example:
            >>> DistributedConfig().replace(max_tasks_per_stage=2).max_tasks_per_stage
            2
        """
        return dataclasses.replace(self, **changes)

    def with_option(self, key: str, value: str) -> DistributedConfig:
        """A copy with one option set from its SQL text form (``SET distributed.key = value``).

        Example:
            >>> cfg = DistributedConfig().with_option("distributed.broadcast_joins", "false")
            >>> cfg.broadcast_joins
            False
        """
        name = key.removeprefix("distributed.")
        if name not in _TYPES:
            raise ValueError(
                f"unknown distributed option {key!r}; known: {', '.join(sorted(_TYPES))}"
            )
        return self.replace(**{name: _parse(name, value)})

    def to_options(self) -> dict[str, str]:
        """The settings as ``distributed.*`` option strings, as the Rust planner reads them."""
        return dict(self._options)

    @functools.cached_property
    def _options(self) -> dict[str, str]:
        # Made once per config (it is frozen); every query reads it.
        out = {}
        for f in fields(self):
            if f.name in _OWN:
                continue
            value = getattr(self, f.name)
            text = str(value).lower() if isinstance(value, bool) else str(value)
            out[f"distributed.{f.name}"] = text
        return out


_TYPES: dict[str, type] = {
    "file_scan_config_bytes_per_partition": int,
    "cardinality_task_count_factor": float,
    "children_isolator_unions": bool,
    "collect_metrics": bool,
    "broadcast_joins": bool,
    "compression": str,
    "shuffle_batch_size": int,
    "max_tasks_per_stage": int,
    "partial_reduce": bool,
    "worker_connection_buffer_budget_bytes": int,
    "dynamic_task_count": bool,
    "dynamic_bytes_per_partition": int,
    "min_workers": int,
    "max_retries": int,
    "fallback": str,
    "progress_interval": float,
    "keep_tables_above": int,
    "stall_timeout": float,
    "fault_tolerance": str,
    "spool_dir": str,
    "event_log": str,
    "event_log_max_bytes": int,
    "adaptive": bool,
    "adaptive_broadcast_bytes": int,
    "adaptive_skew_bytes": int,
    "hold_whole_below": int,
}

#: Fields of this package's own that its Rust core reads among the planner's options
#: (``src/coordinator/adaptive_joins.rs``); the crate's planner does not know them.
CORE_OPTIONS = frozenset(
    {"adaptive", "adaptive_broadcast_bytes", "adaptive_skew_bytes", "hold_whole_below"}
)

#: Fields of this package's own, not options of the crate's planner.
_OWN = frozenset(
    {
        "min_workers",
        "max_retries",
        "fallback",
        "progress_interval",
        "keep_tables_above",
        "stall_timeout",
        "fault_tolerance",
        "spool_dir",
        "event_log",
        "event_log_max_bytes",
    }
)


def _parse(name: str, text: str) -> Any:
    text = text.strip().strip("'\"")
    kind = _TYPES[name]
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError
            return lowered == "true"
        return kind(text)
    except ValueError:
        raise ValueError(f"invalid value {text!r} for distributed.{name}") from None


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


#: What ``memory_limit="auto"`` gives the workers of one machine together: this share of its
#: memory (of the container's, when a cgroup limits it), as Dask's ``memory_limit="auto"``.
AUTO_MEMORY_SHARE = 0.8


def machine_memory() -> int:
    """Bytes of memory this process's machine has: the cgroup's limit when one is set (a
    container), else the physical memory.

    Example:
        >>> machine_memory() > 0
        True
    """
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def memory_limit_bytes(value: int | str | None, workers_here: int = 1) -> int | None:
    """A worker's ``memory_limit`` in bytes: ``"auto"`` shares
    :data:`AUTO_MEMORY_SHARE` of :func:`machine_memory` between ``workers_here`` workers;
    ``None`` or ``"none"`` means unbounded; otherwise a size (:func:`parse_bytes`).

    Example:
        >>> memory_limit_bytes("500MB"), memory_limit_bytes(None), memory_limit_bytes("none")
        (500000000, None, None)
        >>> memory_limit_bytes("auto", 2) == int(machine_memory() * AUTO_MEMORY_SHARE / 2)
        True
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    if isinstance(value, str) and value.strip().lower() == "auto":
        return int(machine_memory() * AUTO_MEMORY_SHARE / max(1, workers_here))
    return parse_bytes(value)


def parse_bytes(value: int | str) -> int:
    """Bytes from an int or a size such as ``"500MB"`` or ``"2 GiB"``.

    Example:
        >>> parse_bytes("500MB"), parse_bytes("2GiB"), parse_bytes(1024)
        (500000000, 2147483648, 1024)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(f"not a size: {value!r} (use bytes or e.g. '500MB', '2GiB')")
        size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size <= 0:
        raise ValueError(f"a size must be positive, got {value!r}")
    return size
