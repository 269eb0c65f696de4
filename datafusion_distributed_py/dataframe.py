"""The ``datafusion.DataFrame`` objects :class:`DistributedContext` returns.

They are plain ``datafusion.DataFrame`` objects (``type(df) is DataFrame``) whose methods are
wrapped on the instance, to keep two things the plain class cannot:

* **where it runs** — the distributed plan, or the reason it runs single-node on the
  coordinator (the fallback) — also for the frames derived from it (``df.filter(...)``), so
  :meth:`DistributedContext.explain` and :meth:`DistributedContext.metrics` work on them;
* **errors as single-node gives them** — a query's own error (a bad cast, a UDF's exception)
  raised on a worker crosses two FFI boundaries and arrives as ``FFI error: External error:
  ...``; it is re-raised with the same type and single-node's message, the worker appended.
  A failure of a worker itself is raised as :class:`WorkerError` with ``.worker_url``;
  likewise while iterating ``execute_stream()`` or ``for batch in df``;
* **no second planning** — a frame as returned, with nothing added to it in Python, reads
  its result straight from the core (Arrow C streams) for ``collect``, ``to_arrow_table``,
  ``to_pandas``, ``count``...: the same run and rows as reading it through datafusion-python,
  without datafusion-python planning a ``SELECT *`` over it and converting its session for
  every FFI call (more than half of a short query's overhead);
* **what it is doing** — each run (``collect``, ``show``, ``to_pandas``...) is a query in
  :data:`monitor.MONITOR`, with its stages' progress, for ``status()`` and the dashboard.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from datafusion import DataFrame, RecordBatch
from datafusion.record_batch import RecordBatchStream

from datafusion_distributed_py import _internal
from datafusion_distributed_py.errors import WorkerError
from datafusion_distributed_py.monitor import MONITOR, Feed


@dataclass(frozen=True)
class Fallback:
    """A query that runs single-node on the coordinator, and why.

    Attributes:
        reason: what in the query cannot be distributed.
        df: the single-node DataFrame it runs as.
    """

    reason: str
    df: DataFrame


#: Where a DistributedDataFrame's query runs.
Source = _internal.DistributedPlan | Fallback

_HEAD = "DataFusion error: "
# What the FFI boundaries (ours -> datafusion-python) put in front of an error's own text.
_FFI_PREFIXES = re.compile(r"^(?:FFI error: )+(?:External error: )?")
# A `WorkerFailure` of the core: it starts with the worker it names.
_WORKER_FAILURE = re.compile(r"^worker (?P<url>[a-z+]+://\S+) ")


def worker_error(message: str, url: str) -> WorkerError:
    """A :class:`WorkerError` with its ``worker_url`` attribute set."""
    err = WorkerError(message)
    err.worker_url = url
    return err


def translate(err: Exception) -> Exception | None:
    """The exception single-node would raise for ``err``, or None when it is already that."""
    text = str(err)
    if not text.startswith(_HEAD) or isinstance(err, WorkerError):
        return None
    rest = text[len(_HEAD) :]
    stripped = _FFI_PREFIXES.sub("", rest)
    if m := _WORKER_FAILURE.match(stripped):
        return worker_error(stripped, m.group("url"))
    if stripped == rest:
        return None
    try:
        return type(err)(_HEAD + stripped)
    except Exception:  # an exception type that takes other arguments: keep it as it is
        return None


class _AsSingleNode:
    """A ``with`` block whose exceptions leave it as :func:`translate` gives them (others,
    such as the end of an iteration, as they are)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, err: BaseException | None, tb: object) -> None:
        clean = translate(err) if isinstance(err, Exception) else None
        if clean is not None:
            raise clean from None


class TranslatedStream(RecordBatchStream):
    """A ``RecordBatchStream`` (``execute_stream``, ``for batch in df``) whose errors are
    raised as :func:`translate` gives them: a lost worker mid-stream is a
    :class:`WorkerError`, as it is from ``collect``."""

    def __next__(self) -> RecordBatch:
        with _AsSingleNode():
            return super().__next__()

    async def __anext__(self) -> RecordBatch:
        with _AsSingleNode():
            return await super().__anext__()


def _streams_translated(out: Any) -> Any:
    """``out`` with each ``RecordBatchStream`` in it made a :class:`TranslatedStream`."""
    if isinstance(out, RecordBatchStream):
        return TranslatedStream(out.rbs)
    if isinstance(out, list) and out and all(isinstance(s, RecordBatchStream) for s in out):
        return [TranslatedStream(s.rbs) for s in out]
    return out


def _translating(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with errors translated and the DataFrames it returns kept distributed
    (made once per method; :func:`distributed_frame` binds it to each frame)."""

    # A write is never run twice: a lost worker then fails it instead of re-running it.
    writes = method.__name__.startswith("write_")
    runs = method.__name__ in _RUNS
    direct = _DIRECT.get(method.__name__)

    @functools.wraps(method)
    def wrapper(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        source = df._dfdpy_source  # type: ignore[attr-defined]
        feed: Feed | None = df._dfdpy_feed  # type: ignore[attr-defined]
        plan = source if writes and isinstance(source, _internal.DistributedPlan) else None
        if plan is not None:
            plan.set_retries(False)
        record = None
        if runs and feed is not None and feed.current is None:
            distributed = isinstance(source, _internal.DistributedPlan)
            ran_on = "workers" if distributed else "coordinator"
            record = MONITOR.begin(feed.sql, ran_on, feed.owners, source if distributed else None)
            feed.current = record
        try:
            if direct is not None and df._dfdpy_root and not args and not kwargs:  # type: ignore[attr-defined]
                out = direct(df, source)
            else:
                out = method(df, *args, **kwargs)
        except BaseException as e:
            clean = translate(e) if isinstance(e, Exception) else None
            if record is not None:
                MONITOR.end(record, None, clean or e)
            if clean is None:
                raise
            raise clean from None
        finally:
            if plan is not None:
                plan.set_retries(True)
            if record is not None and feed is not None:
                feed.current = None
        if record is not None:
            MONITOR.end(record, _rows(out), None)
        if isinstance(out, DataFrame):
            return distributed_frame(out, source, feed)
        return _streams_translated(out)

    return wrapper


#: The methods that run the query (each run is a query of the monitor).
_RUNS = frozenset({
    "collect", "collect_partitioned", "to_arrow_table", "to_pandas", "to_polars", "to_pylist",
    "to_pydict", "show", "count", "write_parquet", "write_csv", "write_json", "write_table",
})  # fmt: skip


def _rows(out: Any) -> int | None:
    """The rows of a run's result, where the result says."""
    if isinstance(out, bool):
        return None
    if isinstance(out, int):  # count()
        return out
    if isinstance(out, list):  # collect(), to_pylist(), collect_partitioned()
        if out and isinstance(out[0], list):
            return sum(int(b.num_rows) for part in out for b in part)
        return sum(int(getattr(b, "num_rows", 1)) for b in out)
    if isinstance(out, dict):  # to_pydict()
        return len(next(iter(out.values()), []))
    rows = getattr(out, "num_rows", None)  # to_arrow_table()
    if isinstance(rows, int):
        return rows
    try:
        return int(len(out))  # pandas, polars
    except TypeError:
        return None


def _read(stream: object) -> list[pa.RecordBatch]:
    """The batches of an ``arrow_array_stream`` capsule."""
    return list(pa.RecordBatchReader._import_from_c_capsule(stream))


def _batches(df: DataFrame, plan: _internal.DistributedPlan) -> list[pa.RecordBatch]:
    (stream,) = plan.collect_streams()
    return _read(stream)


def _table(df: DataFrame, plan: _internal.DistributedPlan) -> pa.Table:
    # As datafusion-python builds it: the batches' schema, or the frame's when there are none.
    batches = _batches(df, plan)
    return pa.Table.from_batches(batches) if batches else df.schema().empty_table()


def _polars(df: DataFrame, plan: _internal.DistributedPlan) -> Any:
    import polars  # optional, as in datafusion-python

    return polars.DataFrame(_table(df, plan))


#: The methods that read a whole result, as a frame with nothing added reads it from the core.
_DIRECT: dict[str, Callable[[DataFrame, _internal.DistributedPlan], Any]] = {
    "collect": _batches,
    "collect_partitioned": lambda df, plan: [_read(s) for s in plan.collect_streams(True)],
    "to_arrow_table": _table,
    "to_pandas": lambda df, plan: _table(df, plan).to_pandas(),
    "to_pylist": lambda df, plan: _table(df, plan).to_pylist(),
    "to_pydict": lambda df, plan: _table(df, plan).to_pydict(),
    "to_polars": _polars,
    "count": lambda df, plan: plan.count_rows(),
}


#: The methods a user calls on a DataFrame (special methods Python looks up on the type, such
#: as ``__repr__``, cannot be replaced on one instance), wrapped.
_WRAPPED = {
    name: _translating(member)
    for name, member in vars(DataFrame).items()
    if isinstance(member, types.FunctionType) and not name.startswith("_")
}


def distributed_frame(
    df: DataFrame, source: Source, feed: Feed | None = None, root: bool = False
) -> DataFrame:
    """``df`` — still exactly a ``datafusion.DataFrame`` — knowing where it runs, its errors
    given as single-node gives them, and the frames derived from it likewise.

    Example:
        >>> from datafusion import SessionContext, DataFrame, col
        >>> from datafusion_distributed_py import DistributedContext
        >>> df = DistributedContext(SessionContext()).sql("SELECT 1 AS x")
        >>> type(df) is DataFrame, df.filter(col("x") > 0).count(), ran_on(df)
        (True, 1, 'workers')
    """
    df._dfdpy_source = source  # type: ignore[attr-defined]
    df._dfdpy_feed = feed  # type: ignore[attr-defined]
    # The distributed result itself, nothing added in Python: it may be read directly.
    df._dfdpy_root = root and isinstance(source, _internal.DistributedPlan)  # type: ignore[attr-defined]
    for name, wrapper in _WRAPPED.items():
        setattr(df, name, types.MethodType(wrapper, df))
    return df


def ran_on(df: DataFrame) -> str | None:
    """``"workers"``, ``"coordinator"`` (a query that fell back to single-node), or None for
    a DataFrame this package did not return."""
    source = source_of(df)
    if source is None:
        return None
    return "coordinator" if isinstance(source, Fallback) else "workers"


def source_of(df: DataFrame) -> Source | None:
    """Where ``df`` runs, if this package returned it (or derived it from one it returned)."""
    return getattr(df, "_dfdpy_source", None)
