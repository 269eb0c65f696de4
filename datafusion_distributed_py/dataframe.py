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

import contextvars
import functools
import inspect
import logging
import os
import re
import tempfile
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from datafusion import DataFrame, ExecutionPlan, RecordBatch, SessionContext
from datafusion import functions as f
from datafusion._internal import DataFrame as DataFrameInternal  # type: ignore[import-not-found]
from datafusion.dataframe_formatter import get_formatter
from datafusion.expr import Projection, SubqueryAlias, TableScan
from datafusion.record_batch import RecordBatchStream

from datafusion_distributed_py import _internal, frame_methods, plan_metrics, write_options
from datafusion_distributed_py.errors import UnsupportedPlanError, WorkerError
from datafusion_distributed_py.frame_methods import Handling
from datafusion_distributed_py.monitor import MONITOR, Feed

_log = logging.getLogger("datafusion_distributed_py")


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


def worker_error(message: str, url: str | None, kind: str) -> WorkerError:
    """A :class:`WorkerError` with its ``worker_url`` and ``kind`` attributes set."""
    err = WorkerError(message)
    err.worker_url = url
    err.kind = kind
    err.rows_delivered = None
    return err


def translate(err: Exception, source: Source | None = None) -> Exception | None:
    """The exception single-node would raise for ``err``, or None when it is already that.

    A worker's failure crosses datafusion-python as text only: the run of ``source`` (the
    frame's distributed plan) keeps it as data, so it is raised as the ``WorkerError`` it is.
    """
    text = str(err)
    if not text.startswith(_HEAD) or isinstance(err, WorkerError):
        return None
    if isinstance(source, _internal.DistributedPlan):
        failure = source.last_failure()
        if failure is not None:
            url, kind, message = failure
            return worker_error(message, url, kind)
    rest = text[len(_HEAD) :]
    stripped = _FFI_PREFIXES.sub("", rest)
    if stripped == rest:
        return None
    try:
        return type(err)(_HEAD + stripped)
    except Exception:  # an exception type that takes other arguments: keep it as it is
        return None


class _AsSingleNode:
    """A ``with`` block whose exceptions leave it as :func:`translate` gives them (others,
    such as the end of an iteration, as they are); ``source`` is the frame's plan."""

    def __init__(self, source: Source | None = None) -> None:
        self.source = source

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, err: BaseException | None, tb: object) -> None:
        clean = translate(err, self.source) if isinstance(err, Exception) else None
        if clean is not None:
            raise clean from None


class TranslatedStream(RecordBatchStream):
    """A ``RecordBatchStream`` (``execute_stream``, ``for batch in df``) whose errors are
    raised as :func:`translate` gives them: a lost worker mid-stream is a
    :class:`WorkerError`, as it is from ``collect``. Rows already handed to the caller cannot
    be taken back, so a stream is not run again once it delivered one: its ``WorkerError``
    says how many rows were delivered (``.rows_delivered``), and none is repeated."""

    def __init__(
        self, rbs: Any, source: Source | None = None, names: tuple[str, ...] | None = None
    ) -> None:
        super().__init__(rbs)
        self._dfdpy_source = source
        self._dfdpy_names = names
        self._dfdpy_rows = 0

    def __next__(self) -> RecordBatch:
        with _Delivered(self):
            return self._named(super().__next__())

    async def __anext__(self) -> RecordBatch:
        with _Delivered(self):
            return self._named(await super().__anext__())

    def _named(self, batch: RecordBatch) -> RecordBatch:
        self._dfdpy_rows += batch.to_pyarrow().num_rows
        if self._dfdpy_names is None:
            return batch
        return _NamedBatch(_named(batch.to_pyarrow(), self._dfdpy_names))


class _Delivered(_AsSingleNode):
    """As :class:`_AsSingleNode` for a stream's next batch; a ``WorkerError`` tells the rows
    the stream delivered before it."""

    def __init__(self, stream: TranslatedStream) -> None:
        super().__init__(stream._dfdpy_source)
        self.stream = stream

    def __exit__(self, kind: type | None, err: BaseException | None, tb: object) -> None:
        try:
            super().__exit__(kind, err, tb)
        except WorkerError as e:
            raise with_rows_delivered(e, self.stream._dfdpy_rows) from None
        if isinstance(err, WorkerError):
            raise with_rows_delivered(err, self.stream._dfdpy_rows) from None


def with_rows_delivered(err: WorkerError, rows: int) -> WorkerError:
    """``err`` (a worker failure ending a stream), saying how many rows the stream had
    delivered: those stand, the rest never comes (``.rows_delivered``)."""
    if getattr(err, "rows_delivered", None) is not None:
        return err
    out = worker_error(
        f"{err} after {rows} rows of the stream were delivered (the stream ends here; a "
        "stream is not run again once it delivered rows: collect() and the like are)",
        getattr(err, "worker_url", None),
        getattr(err, "kind", "died"),
    )
    out.rows_delivered = rows
    return out


class _NamedBatch(RecordBatch):
    """A batch of a stream, its columns given single-node's names (see ``Origin.names``)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch

    def to_pyarrow(self) -> pa.RecordBatch:
        return self._batch

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        capsules: tuple[object, object] = self._batch.__arrow_c_array__(requested_schema)
        return capsules


def _streams_translated(out: Any, source: Source, names: tuple[str, ...] | None = None) -> Any:
    """``out`` with each ``RecordBatchStream`` in it made a :class:`TranslatedStream`
    (its batches given ``names``, if any: see ``Origin.names``)."""
    if isinstance(out, RecordBatchStream):
        return TranslatedStream(out.rbs, source, names)
    if isinstance(out, list) and out and all(isinstance(s, RecordBatchStream) for s in out):
        return [TranslatedStream(s.rbs, source, names) for s in out]
    return out


def _translating(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` run on the frame itself (what reads its result), with errors translated
    (made once per method; :func:`distributed_frame` binds it to each frame)."""

    # A write the coordinator makes from the result puts files in place as rows come: it is
    # never run twice (those ``COPY`` runs on the workers, whose staged commit allows it).
    writes = method.__name__.startswith("write_")
    runs = method.__name__ in _RUNS
    whole = method.__name__ in _WHOLE
    direct = _DIRECT.get(method.__name__)

    @functools.wraps(method)
    def wrapper(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        origin = origin_of(df)
        assert origin is not None
        source, feed = origin.source, origin.feed
        if runs:
            ran_for(df, source)
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
            while True:
                try:
                    if origin.names is not None and method.__name__ == "describe":
                        # Single-node refuses to describe a result with repeated names.
                        out = _single_node_refusal(origin.twin, method, *args)
                    elif (
                        direct is not None
                        and isinstance(source, _internal.DistributedPlan)
                        and (origin.root and not args and not kwargs)
                    ):
                        out = direct(df, source)
                    else:
                        out = method(df, *args, **kwargs)
                    break
                except Exception:
                    # Nothing of the result was handed on yet: a lost worker costs a run from
                    # the start on the workers left, not the query (the core decides).
                    if not (whole and isinstance(source, _internal.DistributedPlan)):
                        raise
                    if not source.may_run_again():
                        raise
        except BaseException as e:
            clean = translate(e, source) if isinstance(e, Exception) else None
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
        if isinstance(out, DataFrame) and not is_ours(out):
            # A frame the method made from this one's result (``describe``, ``cache``):
            # distributed in its turn, so what is derived from it runs on the workers too.
            return origin.owner.distribute(out, f"{_sql_of(origin)} \u2192 {method.__name__}()")
        if origin.names is not None and direct is None:
            out = _named(out, origin.names)
        return _streams_translated(out, source, origin.names)

    return wrapper


#: The frame a composed method (``count``, ``cache``, ``write_parquet``...) runs for: the runs
#: it makes of other frames (its count query, its ``COPY``, its keeping run) are that
#: frame's latest run, as :meth:`DistributedContext.metrics` shows it.
_RUNNING_FOR: contextvars.ContextVar[DataFrame | None] = contextvars.ContextVar(
    "dfdpy_running_for", default=None
)


def ran_for(df: DataFrame, run: Any) -> None:
    """Records ``run`` (a distributed plan, a kept table: what has ``task_metrics``) as the
    latest run of ``df``, and of the frame a composed method of which runs it."""
    df.__dict__["_dfdpy_ran"] = run
    outer = _RUNNING_FOR.get()
    if outer is not None and outer is not df:
        outer.__dict__["_dfdpy_ran"] = run


def latest_run(df: DataFrame) -> Any:
    """What ran last for ``df`` (see :func:`ran_for`), or its own source if nothing has."""
    return df.__dict__.get("_dfdpy_ran") or source_of(df)


def _running_for(method: Callable[..., Any]) -> Callable[..., Any]:
    """A composed method whose runs of other frames count as the frame's own."""

    @functools.wraps(method)
    def wrapper(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        token = _RUNNING_FOR.set(df) if _RUNNING_FOR.get() is None else None
        try:
            return method(df, *args, **kwargs)
        finally:
            if token is not None:
                _RUNNING_FOR.reset(token)

    return wrapper


def _step(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (a DataFrame-API step: ``filter``, ``aggregate``, ``join``...) applied to
    the frame's single-node twin, with each distributed frame among its arguments replaced by
    its own twin; the composed query is distributed as one (made once per method)."""

    @functools.wraps(method)
    def wrapper(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        return _derive(df, method.__name__, method, *args, **kwargs)

    return wrapper


def _derive(df: DataFrame, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    twin, owner, sql = _lineage_of(df)
    out = method(twin, *map(twin_of, args), **{k: twin_of(v) for k, v in kwargs.items()})
    if out is twin:  # a step that changes nothing (``fill_null(v, subset=[])``)
        return df
    if isinstance(out, DataFrameInternal):  # datafusion 55's select_exprs returns its core
        out = DataFrame(out)
    if not isinstance(out, DataFrame):  # expressions (``col``), plans, views
        return out
    derived = _pending_frame(_Pending(out, owner, f"{sql} \u2192 {name}()"))
    if owner.plans_at_once():  # strict: a refusal is raised where the step is written
        origin_of(derived)
    return derived


#: ``count(*)`` as single-node's ``count()`` writes it; made once (each ``lit`` costs an
#: import lookup in datafusion 55).
_COUNT_ROWS = f.count().alias("count(*)")


def _count(df: DataFrame) -> int:
    """Rows of the frame, planned as single-node plans ``count()`` (from statistics where
    they answer, else partial counts on the workers): one row reaches the coordinator."""
    pending = df.__dict__.get("_dfdpy_pending")
    if pending is None or (pending.root and _reads_a_whole_table(pending.twin)):
        # Its own plan may know the rows (a table read whole: its files' footers), answering
        # without a run; anything else is counted by its count query, planned instead.
        origin = origin_of(df)
        source = origin.source if origin is not None else None
        if isinstance(source, _internal.DistributedPlan) and origin is not None and origin.root:
            rows = source.exact_rows  # the frame's own plan knows: nothing to run or plan
            if rows is not None:
                # A query of the monitor all the same (answered, as single-node answers it,
                # from the files' statistics).
                feed = origin.feed
                sql = f"{_sql_of(origin)} \u2192 count()"
                owners = feed.owners if feed is not None else (origin.owner,)
                MONITOR.end(MONITOR.begin(sql, "workers", owners), 1, None)
                return rows
    counted = _derive(df, "count", DataFrame.aggregate, [], [_COUNT_ROWS])
    (row,) = _ON_FRAME["to_pylist"](counted)
    return int(row["count(*)"])


def _reads_a_whole_table(df: DataFrame) -> bool:
    """Whether ``df``'s query is one table's scan (projected, aliased) without filter or
    limit: the one kind whose row count statistics can know exactly."""
    plan = df.logical_plan()
    while isinstance(node := plan.to_variant(), (Projection, SubqueryAlias)):
        (plan,) = plan.inputs()
    return isinstance(node, TableScan) and not node.filters() and node.fetch() is None


def _cache(df: DataFrame) -> DataFrame:
    """The result kept where the workers compute it, and a frame reading it there: later
    queries on it carry a reference to it, not its rows."""
    twin, owner, sql = _lineage_of(df)
    if _repeats_names(twin):  # single-node cannot keep it either: its error, as it gives it
        return _single_node_refusal(twin, DataFrame.cache)  # type: ignore[no-any-return]
    return owner.cache(twin, sql)


def _repeats_names(df: DataFrame) -> bool:
    """Whether ``df``'s result has two columns of one name (see ``Origin.names``)."""
    names = df.schema().names
    return len(set(names)) < len(names)


def _single_node_refusal(twin: DataFrame, method: Callable[..., Any], *args: Any) -> Any:
    """``method`` of single-node on ``twin``, for what single-node refuses for a result with
    repeated names (keeping it, describing it): the same error, translated."""
    with _AsSingleNode():
        return method(twin, *args)


def _show(df: DataFrame, num: int = 20) -> None:
    """As single-node's ``show``: the first ``num`` rows, the limit inside the distributed
    plan so that the workers' scans stop early."""
    limited = _derive(df, "show", DataFrame.limit, num)
    if origin_of(limited).names is None:  # type: ignore[union-attr]
        return _ON_FRAME["show"](limited, num)  # type: ignore[no-any-return]
    # Printed here with single-node's names (datafusion's own printing reads the core's).
    batches = _ON_FRAME["collect"](limited)
    if not sum(b.num_rows for b in batches):
        print("DataFrame has no rows")
    else:
        print(_as_text(batches, limited.schema(), has_more=False))
    return None


def _as_text(batches: list[pa.RecordBatch], schema: pa.Schema, has_more: bool) -> str:
    """Batches printed as datafusion prints a frame (``show``, ``repr``)."""
    return DataFrame.default_str_repr(batches, schema, has_more, str(uuid.uuid4()))


def _first_rows(df: DataFrame) -> tuple[list[pa.RecordBatch], bool]:
    """The rows a frame's ``repr`` shows (as many as datafusion's formatter shows) and
    whether there are more."""
    shown = get_formatter().max_rows
    table = _ON_FRAME["to_arrow_table"](_derive(df, "repr", DataFrame.limit, shown + 1))
    return table.slice(0, shown).to_batches(), table.num_rows > shown


_plain_repr = DataFrame.__repr__
_plain_repr_html = DataFrame._repr_html_


def _shown_rows(df: DataFrame) -> tuple[list[pa.RecordBatch], bool] | None:
    """The rows a frame's ``repr`` shows and whether there are more, for a distributed result
    read as it is: the formatter's rule (``max_rows``, ``max_memory_bytes``, ``min_rows``)
    applied by the core where the rows arrive, so the run stops where a single-node one
    would, not after the rows crossed into datafusion-python. None for other frames."""
    origin = origin_of(df)
    if origin is None or not origin.root:
        return None
    source = origin.source
    if not isinstance(source, _internal.DistributedPlan):
        return None
    formatter = get_formatter()
    try:
        stream, more = source.display_stream(
            formatter.max_memory_bytes, formatter.min_rows, formatter.max_rows
        )
        return _named(_read(stream), origin.names), more
    except Exception as e:  # the query's own error, as the frame's other methods give it
        clean = translate(e, source)
        if clean is None:
            raise
        raise clean from e


def _shown(df: DataFrame, shown: tuple[list[pa.RecordBatch], bool], method: str) -> str:
    """``shown`` as datafusion-python draws a frame: through the formatter's ``method``."""
    batches, more = shown
    if not batches:
        return "No data to display"
    formatter = get_formatter()
    draw = getattr(formatter, method)
    return draw(  # type: ignore[no-any-return]
        batches=batches, schema=df.schema(), has_more=more, table_uuid=str(uuid.uuid4())
    )


def _repr(self: DataFrame) -> str:
    shown = _shown_rows(self)
    if shown is not None:
        return _shown(self, shown, "format_str")
    origin = origin_of(self)
    if origin is None or origin.names is None:
        return _plain_repr(self)
    batches, more = _first_rows(self)
    return _as_text(batches, self.schema(), more) if batches else "No data to display"


def _repr_html(self: DataFrame) -> str:
    shown = _shown_rows(self)
    if shown is not None:
        return _shown(self, shown, "format_html")
    origin = origin_of(self)
    if origin is None or origin.names is None:
        return _plain_repr_html(self)
    batches, more = _first_rows(self)
    return get_formatter().format_html(batches, self.schema(), more, str(uuid.uuid4()))


def _tail(df: DataFrame, n: int = 5) -> DataFrame:
    """As single-node's ``tail``: the count and the limit both distributed."""
    return _derive(df, "tail", DataFrame.limit, n, max(0, _count(df) - n))  # type: ignore[no-any-return]


def _collect_column(df: DataFrame, column_name: str) -> Any:
    """As single-node's ``collect_column``: only that column leaves the workers."""
    selected = _derive(df, "collect_column", DataFrame.select, column_name)
    return _ON_FRAME["collect_column"](selected, column_name)


def _explain(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
    """As single-node's ``explain``: the query's own plan (its twin's); with ``analyze`` the
    frame runs, distributed, and the plan printed is the one that ran.
    :meth:`DistributedContext.explain` gives the distributed plan with its stages."""
    analyze = kwargs.get("analyze", args[1] if len(args) > 1 else False)
    if analyze:
        return _ON_FRAME["explain"](df, *args, **kwargs)
    return DataFrame.explain(_lineage_of(df)[0], *args, **kwargs)


def _execution_plan(df: DataFrame) -> ExecutionPlan:
    """As single-node's: the query's physical plan (its twin's); after a run, each operator
    with the metrics the run recorded for it, summed over its tasks (see ``plan_metrics``)."""
    plan = DataFrame.execution_plan(_lineage_of(df)[0])
    if "_dfdpy_pending" in df.__dict__:  # never planned, so never ran
        return plan
    source = source_of(df)
    if isinstance(source, Fallback):  # it ran as this single-node frame
        return DataFrame.execution_plan(source.df)
    if source is None:
        return plan
    operators = source.operator_metrics()
    return plan_metrics.with_run_metrics(plan, operators) if operators else plan


def _write_parquet(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_parquet``: each task writes its own files (the equivalent
    ``COPY ... TO``, see ``write_options``); ``single_file_output`` or an insert operation
    other than append on the coordinator, as single-node writes them."""
    bound = _bind(DataFrame.write_parquet, df, path, *args, **kwargs)
    options = write_options.parquet_options(
        bound.get("compression", "zstd"), bound.get("compression_level")
    )
    return _write(df, "write_parquet", path, "PARQUET", options, bound, args, kwargs)


def _write_parquet_with_options(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_parquet_with_options``, written as in ``_write_parquet``."""
    bound = _bind(DataFrame.write_parquet_with_options, df, path, *args, **kwargs)
    options = write_options.writer_options(bound["options"])
    return _write(df, "write_parquet_with_options", path, "PARQUET", options, bound, args, kwargs)


def _write_csv(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_csv``, written as in ``_write_parquet``."""
    bound = _bind(DataFrame.write_csv, df, path, *args, **kwargs)
    header = {"format.has_header": "true" if bound.get("with_header", False) else "false"}
    return _write(df, "write_csv", path, "CSV", header, bound, args, kwargs)


def _write_json(df: DataFrame, path: Any, *args: Any, **kwargs: Any) -> None:
    """As single-node's ``write_json``, written as in ``_write_parquet``."""
    bound = _bind(DataFrame.write_json, df, path, *args, **kwargs)
    return _write(df, "write_json", path, "JSON", {}, bound, args, kwargs)


def _write(
    df: DataFrame,
    name: str,
    path: Any,
    stored_as: str,
    options: dict[str, str] | None,
    bound: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """Writes from every task when the write is a ``COPY``; otherwise the coordinator writes
    the distributed result with single-node's own method (honouring every option)."""
    twin, owner, _ = _lineage_of(df)
    if stored_as == "PARQUET":
        _raise_as_single_node_would(twin, name, bound)
    sorting = write_options.without_sort(bound.get("write_options"))
    if sorting is not None:
        keys, unsorted = sorting
        ordered = _derive(df, name, DataFrame.sort, *keys)
        call = {k: v for k, v in bound.items() if k not in ("self", "write_options")}
        return _ON_FRAME[name](ordered, **call, write_options=unsorted)  # type: ignore[no-any-return]
    copy = None
    if options is not None:
        copy = write_options.as_copy(twin, options, bound.get("write_options"))
    if copy is None:
        return _ON_FRAME[name](df, path, *args, **kwargs)  # type: ignore[no-any-return]
    try:
        owner.copy(copy, str(path), stored_as)
    except UnsupportedPlanError as e:
        _log.warning("this write runs on the coordinator, single-node: %s", e)
        return getattr(DataFrame, name)(twin, path, *args, **kwargs)  # type: ignore[no-any-return]
    except Exception as e:  # the write's own errors read as single-node's
        clean = translate(e)
        if clean is None:
            raise
        raise clean from None
    return None


def _raise_as_single_node_would(twin: DataFrame, name: str, bound: dict[str, Any]) -> None:
    """Raises what single-node raises for the write's options (a codec level out of range, a
    dictionary encoding as fallback, an unknown writer version), with its type and message,
    here at the call: single-node's own method writes no row of the query into a directory
    thrown away. A distributed write would fail later, on a worker, as another type.

    The row written is one row of nulls of the query's columns, not the query's: Parquet's
    writer properties are checked when a file is opened, which an empty result never does."""
    call = {k: v for k, v in bound.items() if k not in ("self", "path")}
    fields = [f.with_nullable(True) for f in twin.schema()]
    if _repeats_names(twin):  # a table cannot repeat a name (``SELECT *`` of a join)
        fields = [f.with_name(f"{f.name}#{i}") for i, f in enumerate(fields)]
    schema = pa.schema(fields)
    nulls = pa.table([pa.nulls(1, field.type) for field in schema], schema=schema)
    with tempfile.TemporaryDirectory(prefix="dfdpy-options-") as scratch:
        frame = SessionContext().from_arrow(nulls)
        getattr(DataFrame, name)(frame, os.path.join(scratch, "out.parquet"), **call)


def _bind(method: Callable[..., Any], df: DataFrame, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments of a call of ``method``, by name (raising as the method would on a
    wrong call)."""
    return dict(inspect.signature(method).bind(df, *args, **kwargs).arguments)


#: The methods that run the query (each run is a query of the monitor); ``count`` runs its
#: counting frame, which records itself.
_RUNS = frozenset({
    "collect", "collect_partitioned", "to_arrow_table", "to_pandas", "to_polars", "to_pylist",
    "to_pydict", "show", "write_parquet", "write_csv", "write_json", "write_table",
    "collect_column", "write_parquet_with_options",
})  # fmt: skip


#: The methods that return nothing of the result before all of it is read (or written): a
#: worker lost at any point of their run costs a run again from the start, not the query.
#: Streams (``execute_stream``, ``for batch in df``) hand rows on as they come: see
#: :class:`TranslatedStream`.
_WHOLE = _RUNS | {"count", "describe"}


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
    reader = pa.RecordBatchReader._import_from_c_capsule(stream)
    try:
        return list(reader)
    except BaseException:
        # Released now (the run stops, a write aborts), not when the traceback holding this
        # frame is freed: the caller may keep the exception (Ctrl-C) for long.
        reader.close()
        raise


def _batches(df: DataFrame, plan: _internal.DistributedPlan) -> list[pa.RecordBatch]:
    (stream,) = plan.collect_streams()
    batches: list[pa.RecordBatch] = _named(_read(stream), origin_of(df).names)  # type: ignore[union-attr]
    return batches


def _named(out: Any, names: tuple[str, ...] | None) -> Any:
    """A result read from the distributed frame (a table, batches, a schema, pandas frame:
    whatever a method returned), its columns given single-node's ``names`` (see
    ``Origin.names``); anything else as it is."""
    if names is None:
        return out
    if isinstance(out, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(out.columns, schema=_schema_named(out.schema, names))
    if isinstance(out, pa.Table):
        return pa.Table.from_arrays(out.columns, schema=_schema_named(out.schema, names))
    if isinstance(out, pa.Schema):
        return _schema_named(out, names)
    if isinstance(out, list):
        return [_named(o, names) for o in out]
    if type(out).__module__.startswith("pandas") and hasattr(out, "columns"):
        out.columns = list(names)
    return out


def _schema_named(schema: pa.Schema, names: tuple[str, ...]) -> pa.Schema:
    return pa.schema(
        [field.with_name(name) for field, name in zip(schema, names, strict=True)],
        metadata=schema.metadata,
    )


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
    "collect_partitioned": lambda df, plan: [
        _named(_read(s), origin_of(df).names)  # type: ignore[union-attr]
        for s in plan.collect_streams(True)
    ],
    "to_arrow_table": _table,
    "to_pandas": lambda df, plan: _table(df, plan).to_pandas(),
    "to_pylist": lambda df, plan: _table(df, plan).to_pylist(),
    "to_pydict": lambda df, plan: _table(df, plan).to_pydict(),
    "to_polars": _polars,
}

#: Methods that build on what the frame's result holds, run on the frame itself (the result
#: read from the workers), their own result distributed again: ``describe`` runs the query;
#: ``transform`` calls the user's function with the distributed frame.
_ON_RESULT = frame_methods.names(Handling.ON_RESULT)

#: Methods that read the frame's plan rather than its result: the single-node twin answers,
#: as single-node would (``col``/``column`` qualify columns as the twin's steps expect).
_ON_TWIN = frame_methods.names(Handling.TWIN)

#: Terminal methods planned as single-node plans them, so that the work stays on the workers.
_COMPOSED: dict[str, Callable[..., Any]] = {
    "cache": _cache,
    "count": _count,
    "show": _show,
    "tail": _tail,
    "collect_column": _collect_column,
    "explain": _explain,
    "execution_plan": _execution_plan,
    "write_parquet": _write_parquet,
    "write_csv": _write_csv,
    "write_json": _write_json,
    "write_parquet_with_options": _write_parquet_with_options,
}


#: datafusion's own public methods of ``DataFrame``, read once before any is wrapped.
_PUBLIC: dict[str, Callable[..., Any]] = {
    name: member
    for name, member in vars(DataFrame).items()
    if isinstance(member, types.FunctionType) and not name.startswith("_")
}


#: The steps of the DataFrame API (and the plan's readers), applied to the twin, as
#: `frame_methods` classifies them: a method it does not classify is read from the result.
_STEPS = {
    name: _step(member)
    for name, member in _PUBLIC.items()
    if name in frame_methods.names(Handling.STEP) or name in _ON_TWIN
}

#: Each public method run on the frame itself (reading its distributed result).
_ON_FRAME = {name: _translating(member) for name, member in _PUBLIC.items()}

#: The methods a user calls on a DataFrame (special methods Python looks up on the type, such
#: as ``__repr__``, cannot be replaced on one instance), wrapped.
_WRAPPED: dict[str, Callable[..., Any]] = {
    **_ON_FRAME,
    **{
        name: functools.wraps(getattr(DataFrame, name))(_running_for(fn))
        for name, fn in _COMPOSED.items()
    },
    **_STEPS,
}


class Distributor(Protocol):
    """The frames' way back to the ``DistributedContext`` that returned them: how a step on a
    frame is planned, written or cached (``context._Frames``)."""

    def distribute(self, df: DataFrame, sql: str) -> DataFrame:
        """``df`` planned distributed now; ``sql`` names it in progress and status."""
        ...

    def plans_at_once(self) -> bool:
        """Whether steps are planned where written (``fallback="error"``), not when run."""
        ...

    def copy(self, copy: write_options.Copy, path: str, stored_as: str) -> None:
        """``copy``'s rows written to ``path`` by a distributed ``COPY``."""
        ...

    def cache(self, df: DataFrame, sql: str) -> DataFrame:
        """``df``'s result kept on the workers, and a frame reading it."""
        ...


@dataclass(frozen=True)
class Origin:
    """What a frame this package returned knows about itself.

    Attributes:
        source: its distributed plan, or the single-node fallback and why.
        twin: the single-node frame of the same query, to which DataFrame-API steps apply.
        feed: the progress feed of its runs.
        owner: the ``DistributedContext`` that distributes the frames derived from ``twin``.
        root: whether the frame reads ``source`` itself (nothing added to it in Python).
        names: single-node's column names when the result repeats one (``SELECT *`` of a
            join whose sides share ``id``): the distributed result, read through a table
            provider, carries them made distinct, and each result is given back with these.
    """

    source: Source
    twin: DataFrame
    feed: Feed | None
    owner: Distributor
    root: bool
    names: tuple[str, ...] | None = None


def distributed_frame(df: DataFrame, origin: Origin) -> DataFrame:
    """``df`` — still exactly a ``datafusion.DataFrame`` — knowing where it runs, its errors
    given as single-node gives them, and each DataFrame-API step on it planned with the
    query it came from as one distributed query.

    Example:
        >>> from datafusion import SessionContext, DataFrame, col
        >>> from datafusion_distributed_py import DistributedContext
        >>> df = DistributedContext(SessionContext()).sql("SELECT 1 AS x")
        >>> type(df) is DataFrame, df.filter(col("x") > 0).count(), ran_on(df)
        (True, 1, 'workers')
    """
    df._dfdpy_origin = origin  # type: ignore[attr-defined]
    return df


_plain_c_stream = DataFrame.__arrow_c_stream__


def _c_stream(df: DataFrame, requested_schema: object = None) -> object:
    """``__arrow_c_stream__`` (looked up on the class): for a frame this package returned,
    its batches as they come — with single-node's names where its result repeats one (see
    ``Origin.names``) — and a lost worker a :class:`WorkerError` saying how many rows the
    stream had delivered (a stream is not run again once it delivered rows)."""
    origin = origin_of(df)
    if origin is None:
        return _plain_c_stream(df, requested_schema)
    names = origin.names
    reader = pa.RecordBatchReader._import_from_c_capsule(_plain_c_stream(df))
    schema = reader.schema if names is None else _schema_named(reader.schema, names)
    batches = _delivered(reader, origin.source, names)
    return pa.RecordBatchReader.from_batches(schema, batches).__arrow_c_stream__(requested_schema)


def _delivered(
    reader: pa.RecordBatchReader, source: Source, names: tuple[str, ...] | None
) -> Iterator[pa.RecordBatch]:
    """``reader``'s batches (given ``names``); its run's worker failure raised as the
    ``WorkerError`` it is, with the rows delivered before it."""
    delivered = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except Exception:
            failure = (
                source.last_failure() if isinstance(source, _internal.DistributedPlan) else None
            )
            if failure is None:
                raise
            url, kind, message = failure
            raise with_rows_delivered(worker_error(message, url, kind), delivered) from None
        delivered += batch.num_rows
        yield batch if names is None else _named(batch, names)


@dataclass(frozen=True)
class _Pending:
    """A frame not planned yet — made by ``dctx.sql()`` and the frame makers, or derived by a
    DataFrame-API step: chained steps (``dctx.sql(q).filter(...).aggregate(...)``) plan only
    the frame that runs, never the frames it came from."""

    twin: DataFrame
    owner: Distributor
    sql: str
    #: made by the context (``dctx.sql``...), not by a step: it reads its plan directly once
    #: planned.
    root: bool = False


def pending_frame(df: DataFrame, owner: Distributor, sql: str) -> DataFrame:
    """``df`` (single-node, its twin) as a frame planned distributed when first used."""
    return _pending_frame(_Pending(df, owner, sql, root=True))


_PLANNING = threading.RLock()


def _pending_frame(pending: _Pending) -> DataFrame:
    """A plain ``datafusion.DataFrame`` that plans ``pending`` distributed when first used:
    any method, or anything reading its core (``.df``, as ``repr`` and ``__arrow_c_stream__``
    do)."""
    df = DataFrame.__new__(DataFrame)
    df.__dict__["_dfdpy_pending"] = pending
    return df


def _plan_pending(df: DataFrame) -> None:
    """Plans a pending frame: it takes the core and origin of its distributed plan."""
    with _PLANNING:
        pending = df.__dict__.get("_dfdpy_pending")
        if pending is None:  # planned meanwhile by another thread
            return
        with _AsSingleNode():
            planned = pending.owner.distribute(pending.twin, pending.sql)
        df.__dict__["df"] = planned.__dict__["df"]
        df.__dict__["_dfdpy_origin"] = planned.__dict__["_dfdpy_origin"]
        del df.__dict__["_dfdpy_pending"]


def _lineage_of(df: DataFrame) -> tuple[DataFrame, Distributor, str]:
    """The twin of a frame this package returned, what distributes frames derived from it,
    and its description; without planning it."""
    pending = df.__dict__.get("_dfdpy_pending")
    if pending is not None:
        return pending.twin, pending.owner, pending.sql
    origin = origin_of(df)
    assert origin is not None
    return origin.twin, origin.owner, _sql_of(origin)


def origin_of(df: object) -> Origin | None:
    """What ``df`` knows about itself, if this package returned it (planned now if it was
    pending)."""
    state = getattr(df, "__dict__", None)
    if state is None:
        return None
    if "_dfdpy_pending" in state:
        _plan_pending(df)  # type: ignore[arg-type]
    origin = state.get("_dfdpy_origin")
    return origin if isinstance(origin, Origin) else None


def twin_of(value: Any) -> Any:
    """The single-node twin of a frame this package returned; anything else as it is."""
    if isinstance(value, DataFrame) and is_ours(value):
        return _lineage_of(value)[0]
    return value


def is_ours(df: DataFrame) -> bool:
    """Whether this package returned ``df`` (planned or not yet)."""
    return "_dfdpy_pending" in df.__dict__ or "_dfdpy_origin" in df.__dict__


def _sql_of(origin: Origin) -> str:
    return origin.feed.sql if origin.feed is not None else "DataFrame"


# ``df["a"]`` is looked up on the class, so it cannot be wrapped on one instance; for frames
# this package returned it is the step it stands for (``select``), plain frames unchanged.
_plain_getitem = DataFrame.__getitem__


def _getitem(self: DataFrame, key: str | list[str]) -> DataFrame:
    if not is_ours(self):
        return _plain_getitem(self, key)
    return self.select(*([key] if isinstance(key, str) else key))


def _plain_step(method: Callable[..., Any]) -> Callable[..., Any]:
    """A step on a plain frame: as it was, unless a frame this package returned is among its
    arguments (``ctx.table("a").join(dctx.sql(...))``); then the composed query is
    distributed too, by that frame's context."""

    @functools.wraps(method)
    def wrapper(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        ours = [a for a in (*args, *kwargs.values()) if isinstance(a, DataFrame) and is_ours(a)]
        if not ours:
            return method(df, *args, **kwargs)
        _, owner, sql = _lineage_of(ours[0])
        out = method(df, *map(twin_of, args), **{k: twin_of(v) for k, v in kwargs.items()})
        if not isinstance(out, DataFrame):
            return out
        return _pending_frame(_Pending(out, owner, f"DataFrame.{method.__name__}({sql})"))

    return wrapper


def _dispatching(ours: Callable[..., Any], plain: Callable[..., Any]) -> Callable[..., Any]:
    """A method of the class that is ``ours`` on a frame this package returned and ``plain``
    on any other. On the class, not bound on each frame: a frame holding its own bound
    methods is a reference cycle, and a cycle keeps the frame — and the kept tables its plan
    reads — alive until the garbage collector happens to run (a dropped table's memory
    would stay held on the workers)."""

    @functools.wraps(plain)
    def method(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        if is_ours(df):
            return ours(df, *args, **kwargs)
        return plain(df, *args, **kwargs)

    return method


class _Core:
    """``DataFrame.df`` (the frame's core, which every datafusion method and special method
    reads) as a data descriptor: a pending frame is planned before its core is read, so
    nothing can run a derived frame before it is distributed. Plain frames: unchanged."""

    def __get__(self, df: DataFrame | None, owner: type | None = None) -> Any:
        if df is None:
            return self
        state = df.__dict__
        if "_dfdpy_pending" in state:
            _plan_pending(df)
        return state["df"]

    def __set__(self, df: DataFrame, core: Any) -> None:
        df.__dict__["df"] = core


def ran_on(df: DataFrame) -> str | None:
    """``"workers"``, ``"coordinator"`` (a query that fell back to single-node), or None for
    a DataFrame this package did not return."""
    source = source_of(df)
    if source is None:
        return None
    return "coordinator" if isinstance(source, Fallback) else "workers"


def source_of(df: DataFrame) -> Source | None:
    """Where ``df`` runs, if this package returned it (or derived it from one it returned)."""
    origin = origin_of(df)
    return origin.source if origin is not None else None


def replacements() -> dict[str, Any]:
    """What ``patches.install`` puts on ``datafusion.DataFrame``, built from datafusion's own
    members (read when this module loaded): each public method dispatching to ours on a frame
    this package returned (a plain frame's steps also carry our frames given as arguments),
    the special methods Python looks up on the type (``repr``, the Arrow stream, ``df[...]``)
    and ``df``, the frame's core."""
    new: dict[str, Any] = {
        # Looked up on the class: frames whose result repeats a name show single-node's names.
        "__repr__": _repr,
        "_repr_html_": _repr_html,
        "__arrow_c_stream__": _c_stream,
        "__getitem__": _getitem,
        "df": _Core(),
    }
    for name, wrapper in _WRAPPED.items():
        plain = _PUBLIC[name]
        if name in _STEPS and name not in _ON_TWIN:
            plain = _plain_step(plain)  # a plain frame's step given one of ours
        new[name] = _dispatching(wrapper, plain)
    return new
