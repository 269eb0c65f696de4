"""``DistributedContext``: run a ``datafusion.SessionContext``'s queries on workers."""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypedDict

import pyarrow as pa
from datafusion import DataFrame, SessionContext
from datafusion.expr import Analyze, CopyTo, DmlStatement, EmptyRelation, Explain
from datafusion.unparser import Dialect, Unparser

from datafusion_distributed_py import _internal, kept_dml, object_stores, stream_tables
from datafusion_distributed_py import progress as progress_mod
from datafusion_distributed_py.cluster_wiring import (
    Workers,
    coordinator_for,
    security_for,
)
from datafusion_distributed_py.config import DistributedConfig
from datafusion_distributed_py.dashboard import Dashboard
from datafusion_distributed_py.dataframe import (
    Fallback,
    Origin,
    Source,
    distributed_frame,
    is_ours,
    latest_run,
    pending_frame,
    ran_for,
    source_of,
)
from datafusion_distributed_py.errors import UnsupportedPlanError, UnsupportedTableError
from datafusion_distributed_py.fallback_reasons import (
    check_result_types,
    readable_reason,
    scanned_tables,
    unsupported,
)
from datafusion_distributed_py.monitor import MONITOR, Feed
from datafusion_distributed_py.plan_facts import (
    filtered_windows,
    optimized,
    physical_facts,
    table_scans,
    without_window_topn,
)
from datafusion_distributed_py.plan_picture import ExplainedPlan
from datafusion_distributed_py.plan_request import PlanRequest
from datafusion_distributed_py.progress import ProgressCallback
from datafusion_distributed_py.security import Security
from datafusion_distributed_py.status import ClusterStatus
from datafusion_distributed_py.write_options import Copy


class MetricsRecord(TypedDict):
    """One task of a query's latest run, as :meth:`DistributedContext.metrics` lists them.

    Attributes:
        stage: stage number (as in ``explain``).
        task: task number within the stage.
        tasks_in_stage: tasks of the stage.
        worker_url: the worker the task ran on.
        output_rows: rows the task produced (None if its worker reported no metrics).
        output_bytes: bytes the task produced (None likewise).
        elapsed_compute_ms: compute time of the task (None likewise).
        duration_ms: from sending the task to its end (None if its end was not seen).
        ran_on: ``"workers"``; ``"coordinator"`` for the one record of a query that could not
            be distributed and ran single-node (see ``DistributedConfig.fallback``).
        attempt: the run of the query the task belongs to: 1, or more when a lost worker
            made the query run again (the earlier runs' tasks are listed too).
        spill_count: spill files the task's operators wrote (memory limit reached).
        spilled_bytes: bytes they spilled.
    """

    stage: int
    task: int
    tasks_in_stage: int
    worker_url: str
    output_rows: int | None
    output_bytes: int | None
    elapsed_compute_ms: float | None
    duration_ms: float | None
    ran_on: Literal["workers", "coordinator"]
    attempt: int
    spill_count: int | None
    spilled_bytes: int | None


_log = logging.getLogger("datafusion_distributed_py")
#: The id under which our leaves are encoded (see ``DistributedContext._wire``).
WIRE_CODEC_ID = _internal.WIRE_CODEC_ID
#: The schema metadata key that marks a table as ``metrics_table``'s (shown as HTML in a
#: notebook, ``notebook.py``).
METRICS_MARK = b"datafusion_distributed_py"


def _frame_maker(name: str) -> Callable[..., DataFrame]:
    """A method of :class:`DistributedContext` that makes a frame as ``SessionContext.<name>``
    does (same signature, which ``inspect.signature`` shows), distributed."""
    plain = getattr(SessionContext, name)

    @functools.wraps(plain)
    def method(self: DistributedContext, *args: Any, **kwargs: Any) -> DataFrame:
        return self._made(name, *args, **kwargs)

    method.__qualname__ = f"DistributedContext.{name}"
    # Not datafusion's docstring: its examples are datafusion's, not ours to run.
    method.__doc__ = (
        f"``ctx.{name}(...)`` with the same arguments and defaults, the frame distributed "
        f"(see ``datafusion.SessionContext.{name}``); see :meth:`DistributedContext.table`."
    )
    return method


class DistributedContext:
    """Plans and runs the queries of a ``datafusion.SessionContext`` on a cluster of workers.

    Everything registered on ``ctx`` (tables, views, UDFs, settings) is visible; results are
    ordinary, lazy ``datafusion.DataFrame`` objects. ``ctx`` itself is not changed and keeps
    planning single-node, so ``ctx.sql(q)`` is the single-node twin of ``dctx.sql(q)``.

    Args:
        ctx: the session whose catalog, functions and settings queries use.
        workers: None for an embedded in-process cluster of :func:`default_worker_count`
            workers; else a list of worker URLs (``"http://host:port"``) or started
            :class:`Worker` objects, an object with a
            ``urls`` attribute (e.g. ``LocalCluster``), or a callable returning URLs, called
            each time a query is planned.
        config: planner settings, see :class:`DistributedConfig`.
        progress: live per-stage bars (``True``), none (``False``), or a callable receiving
            :class:`~datafusion_distributed_py.progress.ProgressEvent` objects; by default bars
            are shown in Jupyter and on a terminal, and nothing otherwise.
        security: the token / TLS settings to reach the workers with (see
            :class:`~datafusion_distributed_py.Security`); by default a ``LocalCluster``'s
            own, else ``Security.from_env()`` (``DFDPY_TOKEN_FILE``, ...), else none.

    Example:
        >>> from datafusion import SessionContext
        >>> ctx = SessionContext()
        >>> _ = ctx.from_pydict({"k": [1, 1, 2], "v": [1.0, 2.0, 3.0]}, name="t")
        >>> dctx = DistributedContext(ctx)
        >>> dctx.sql("SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY k").to_pylist()
        [{'k': 1, 's': 3.0}, {'k': 2, 's': 3.0}]
    """

    def __init__(
        self,
        ctx: SessionContext,
        workers: Workers = None,
        config: DistributedConfig | None = None,
        progress: bool | ProgressCallback | None = None,
        security: Security | None = None,
    ) -> None:
        if not isinstance(ctx, SessionContext):
            raise TypeError(
                f"DistributedContext needs a datafusion.SessionContext, got {type(ctx).__name__}"
            )
        if config is not None and not isinstance(config, DistributedConfig):
            raise TypeError(f"config must be a DistributedConfig, got {type(config).__name__}")
        self._ctx = ctx
        # Plans are serialised through a twin of `ctx` (same session) that also carries the
        # codec of lakehouse tables' scans, so those travel as Parquet scans; `ctx` is unchanged.
        self._wire_codec = _internal.WireCodec(ctx)
        self._wire = ctx.with_physical_extension_codec(self._wire_codec, codec_id=WIRE_CODEC_ID)
        #: One serialisation at a time reads the codec's announced recursive queries.
        self._wire_lock = threading.Lock()
        self._config = config or DistributedConfig()
        self._workers = workers
        self._progress = progress_mod.resolve(progress)
        self._security = security_for(workers, security)
        self._coordinator = coordinator_for(workers, self._security, ctx)
        #: Tables found not to be in memory, by reference, with the schema they had then.
        self._not_in_memory: dict[str, pa.Schema] = {}

    @property
    def ctx(self) -> SessionContext:
        """The wrapped session; it plans single-node."""
        return self._ctx

    @property
    def config(self) -> DistributedConfig:
        """The current planner settings (``SET distributed.*`` updates them)."""
        return self._config

    @config.setter
    def config(self, value: DistributedConfig) -> None:
        if not isinstance(value, DistributedConfig):
            raise TypeError(f"config must be a DistributedConfig, got {type(value).__name__}")
        self._config = value

    @property
    def worker_urls(self) -> list[str]:
        """The URLs of the workers a query planned now would run on."""
        return self._coordinator.worker_urls()

    def sql(self, query: str) -> DataFrame:
        """Plan ``query`` on ``ctx`` and return a DataFrame that runs it distributed.

        SQL errors (an unknown table) are raised here, as by ``ctx.sql``; the distributed plan
        is made when the frame is first used (run, ``explain``, ``ran_on``), as ``ctx`` plans
        physically at the run, so that the frames a DataFrame-API chain starts from cost
        nothing.

        Statements (CREATE VIEW, CREATE EXTERNAL TABLE, SET, DROP...) take effect on ``ctx``
        as ``ctx.sql`` would; ``SET distributed.<key> = <value>`` changes this context's
        :class:`DistributedConfig`; ``EXPLAIN [ANALYZE]`` shows the distributed plan.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext())
            >>> dctx.sql("SELECT 40 + 2 AS answer").to_pylist()
            [{'answer': 42}]
        """
        # Read by DataFusion's own parser, in the session's dialect: the statement is what
        # `ctx.sql` would take it for, comments and case included.
        setting = _internal.distributed_setting(query, self._ctx)
        if setting is not None:
            self._config = self._config.with_option(*setting)
            return self._ctx.sql("SELECT 1 WHERE false")  # an empty result, like SET
        create = _internal.create_table_as(query, self._ctx)
        if create is not None:
            return self._create_table_as(query, *create)
        df = self._ctx.sql(query)
        plan = df.logical_plan()
        variant = plan.to_variant()
        if not isinstance(variant, (EmptyRelation, Explain, Analyze)) and self._keep_memory_tables(
            df
        ):
            df = self._ctx.sql(query)  # planned again over the tables now kept
            plan = df.logical_plan()
            variant = plan.to_variant()
        # Statements `SessionContext.sql` already ran (DDL, SET, ...) leave an empty relation.
        if isinstance(variant, EmptyRelation):
            return df
        inserted = self._insert_into_kept(df, query.strip())
        if inserted is not None:
            return inserted
        if isinstance(variant, DmlStatement):
            rewrite = _internal.delete_or_update(query, self._ctx)
            rewritten = self._rewrite_kept(*rewrite, df) if rewrite else None
            if rewritten is not None:
                return rewritten
        if isinstance(variant, (Explain, Analyze)):
            (explained,) = plan.inputs()
            inner = self._ctx.create_dataframe_from_logical_plan(explained)
            return self._explain_frame(inner, analyze=isinstance(variant, Analyze))
        return self._lazy(df, query.strip())

    def distribute(self, df: DataFrame) -> DataFrame:
        """Return a DataFrame that runs ``df`` (built on ``ctx``) distributed.

        A query that cannot be distributed without changing its answer runs single-node on
        the coordinator instead, with a logged warning naming why (see
        ``DistributedConfig.fallback``); ``explain`` and ``metrics`` say so too.

        Example:
            >>> from datafusion import SessionContext, col, functions as f
            >>> ctx = SessionContext()
            >>> t = ctx.from_pydict({"k": [1, 2, 2]})
            >>> dctx = DistributedContext(ctx)
            >>> dctx.distribute(t.aggregate([col("k")], [f.count(col("k"))])).count()
            2
        """
        inserted = self._insert_into_kept(df, _describe(df))
        return inserted if inserted is not None else self._lazy(df, _describe(df))

    def _lazy(self, df: DataFrame, sql: str) -> DataFrame:
        """``df`` as a frame planned distributed when first used (see ``_plans_at_once``)."""
        if is_ours(df):
            return df
        if self._plans_at_once():
            return self._distribute(df, sql)
        return pending_frame(df, self, sql)

    def _distribute(self, df: DataFrame, sql: str) -> DataFrame:
        """``df`` (single-node, built on ``ctx``) planned distributed; it stays the twin that
        the DataFrame-API steps of the returned frame apply to."""
        if source_of(df) is not None:
            return df
        feed = Feed(sql, (self, self._workers), self._progress)
        source = self._source(df, feed)
        if isinstance(source, Fallback):
            # A frame of its own: the caller's df stays as it was.
            own = self._ctx.create_dataframe_from_logical_plan(df.logical_plan())
            return distributed_frame(own, Origin(source, df, feed, self, False))
        names = tuple(df.schema().names)
        repeated = names if len(set(names)) < len(names) else None
        origin = Origin(source, df, feed, self, True, repeated)
        return distributed_frame(self._ctx.read_table(source), origin)

    # -- frames made as a SessionContext makes them ---------------------------------------
    # Each delegates to ``ctx`` (so registrations land there) and distributes the frame.

    def table(self, name: str) -> DataFrame:
        """``ctx.table(name)``, distributed: a port changes ``ctx.`` to ``dctx.`` where frames
        are made, and every step after runs on the workers.

        Example:
            >>> from datafusion import SessionContext, col
            >>> ctx = SessionContext()
            >>> _ = ctx.from_pydict({"k": [1, 2, 2]}, name="t")
            >>> dctx = DistributedContext(ctx)
            >>> dctx.table("t").filter(col("k") > 1).count()
            2
        """
        return self._made("table", name)

    def register_delta(
        self,
        name: str,
        table: Any,
        *,
        version: int | str | datetime | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        """Register a Delta Lake table on ``ctx`` whose scans run on the workers; see
        :func:`datafusion_distributed_py.lakehouse.register_delta` (same arguments).

        Example:
            >>> import pyarrow as pa, tempfile
            >>> from deltalake import write_deltalake
            >>> from datafusion import SessionContext
            >>> path = tempfile.mkdtemp()
            >>> write_deltalake(path, pa.table({"k": [1, 2, 3]}))
            >>> dctx = DistributedContext(SessionContext(), progress=False)
            >>> dctx.register_delta("t", path)
            >>> dctx.sql("SELECT sum(k) AS s FROM t").to_pylist()
            [{'s': 6}]
        """
        from datafusion_distributed_py.lakehouse import register_delta

        register_delta(self._ctx, name, table, version=version, storage_options=storage_options)

    def register_iceberg(self, name: str, table: Any, *, snapshot_id: int | None = None) -> None:
        """Register an Iceberg table on ``ctx`` whose scans run on the workers; see
        :func:`datafusion_distributed_py.lakehouse.register_iceberg` (same arguments)."""
        from datafusion_distributed_py.lakehouse import register_iceberg

        register_iceberg(self._ctx, name, table, snapshot_id=snapshot_id)

    read_parquet = _frame_maker("read_parquet")
    read_csv = _frame_maker("read_csv")
    read_json = _frame_maker("read_json")
    read_avro = _frame_maker("read_avro")
    read_arrow = _frame_maker("read_arrow")
    read_table = _frame_maker("read_table")
    read_batch = _frame_maker("read_batch")
    read_batches = _frame_maker("read_batches")
    read_empty = _frame_maker("read_empty")
    empty_table = _frame_maker("empty_table")
    from_pydict = _frame_maker("from_pydict")
    from_pylist = _frame_maker("from_pylist")
    from_arrow = _frame_maker("from_arrow")
    from_pandas = _frame_maker("from_pandas")
    from_polars = _frame_maker("from_polars")
    create_dataframe = _frame_maker("create_dataframe")
    create_dataframe_from_logical_plan = _frame_maker("create_dataframe_from_logical_plan")
    execute_logical_plan = _frame_maker("execute_logical_plan")

    def _made(self, maker: str, /, *args: Any, **kwargs: Any) -> DataFrame:
        df = getattr(self._ctx, maker)(*args, **kwargs)
        first = repr(args[0]) if args and isinstance(args[0], str) else "..."
        scanned = scanned_tables(df.logical_plan())
        if len(scanned) == 1 and self._keep_memory_tables(df):
            # A frame that reads one table whole (``table``, ``from_pandas``...): the same
            # frame over the table now kept on the workers.
            (ref,) = scanned.values()
            df = self._ctx.table(ref)
        return self._lazy(df, f"{maker}({first})")

    def _keep_memory_tables(self, df: DataFrame) -> bool:
        """Sends each in-memory table ``df`` reads of more than ``keep_tables_above`` bytes to
        the workers once, and registers it on ``ctx`` again as the kept table reading it there
        (single-node reads the same rows here). True when any was: frames made before that
        still carry the rows in their plans, so the caller makes ``df`` again."""
        kept_any = False
        for name, ref in scanned_tables(df.logical_plan()).items():
            rows = self._memory_table_rows(ref)
            if rows is None or sum(b.nbytes for b in rows) <= self._config.keep_tables_above:
                continue
            table = self._ctx.table(ref)
            original = pa.RecordBatchReader.from_batches(table.schema(), rows)
            kept = self._keep(table, name, original=original)
            if kept is None:
                continue
            self._ctx.deregister_table(ref)
            self._ctx.register_table(ref, kept)
            kept_any = True
        return kept_any

    def _memory_table_rows(self, ref: str) -> list[pa.RecordBatch] | None:
        """The rows of table ``ref`` when it is an in-memory table (zero-copy), else None.

        datafusion-python 55 does not tell a table's kind, so its scan's one-line display says
        (``DataSourceExec: partitions=.., partition_sizes=..`` is an in-memory scan). What is
        not in-memory is remembered by schema, so that a file table is not planned again for
        each query that reads it (each planning lists its files).
        """
        try:
            table = self._ctx.table(ref)
        except Exception:  # datafusion raises plain Exception subclasses
            return None
        schema = table.schema()
        if self._not_in_memory.get(ref) == schema:
            return None
        node = table.execution_plan()
        while not node.display().startswith("DataSourceExec") and len(node.children()) == 1:
            node = node.children()[0]  # a projection over the scan
        if not (node.display().startswith("DataSourceExec: partitions=") and not node.children()):
            self._not_in_memory[ref] = schema
            return None
        return table.collect()

    def _copy(self, copy: Copy, path: str, stored_as: str) -> None:
        """Writes ``copy.frame``'s rows to ``path`` as ``COPY ... TO`` does: distributed, each
        task writing its own files (what ``write_parquet/csv/json`` of a distributed frame
        run). Raises ``UnsupportedPlanError`` for a frame no ``COPY`` can name."""
        names = copy.frame.schema().names
        view = f"__dfdpy_write_{uuid.uuid4().hex}"
        if len(set(names)) == len(names):
            self._ctx.register_view(view, copy.frame)
            query = f"SELECT * FROM {view}"
        else:
            # A view cannot hold two columns of one name (`a.id`, `b.id`): the frame's plan,
            # written back as SQL, is the COPY's query instead.
            query = _as_sql(self._ctx, copy.frame)
        try:
            quoted = ", ".join(f"'{k}' '{_sql_str(v)}'" for k, v in copy.options.items())
            with_options = f" OPTIONS ({quoted})" if copy.options else ""
            columns = ", ".join(copy.partition_by)
            partitioned = f" PARTITIONED BY ({columns})" if copy.partition_by else ""
            self.sql(
                f"COPY ({query}) TO '{_sql_str(path)}' STORED AS {stored_as}"
                f"{partitioned}{with_options}"
            ).collect()
        finally:
            if self._ctx.table_exist(view):
                self._ctx.deregister_table(view)

    def _plans_at_once(self) -> bool:
        """Frames are planned when first used (a chain of steps plans once, its parents
        never); with ``fallback="error"`` at once, so that a refusal is raised where the query
        or step is written."""
        return self._config.fallback == "error"

    def explain(
        self,
        query_or_df: str | DataFrame,
        analyze: bool = False,
        format: str = "text",
    ) -> str:
        """The distributed plan: its stages, tasks per stage and network boundaries.

        With ``analyze=True`` the query runs first and the plan carries its metrics.
        ``format`` is ``"text"`` or ``"graphviz"``. The text is a ``str`` that a notebook
        draws as the stage graph (SVG, see ``plan_picture``); ``print`` shows the text.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext())
            >>> plan = dctx.explain("SELECT 1 AS x")
            >>> "DistributedExec" in plan and "Stage 1" in plan
            True
        """
        if format not in ("text", "graphviz"):
            raise ValueError(f"unknown explain format {format!r}: use 'text' or 'graphviz'")
        source = self._source_of(query_or_df)
        if isinstance(source, Fallback):
            if analyze:
                source.df.collect()
            return ExplainedPlan(
                "Runs on the coordinator, single-node (not distributed): "
                f"{source.reason}\n\n{source.df.execution_plan().display_indent()}",
                None,
            )
        if analyze:
            self._ctx.read_table(source).collect()
        text = source.display(format=format, analyze=analyze)
        if format == "graphviz":
            return text
        return ExplainedPlan(text, source.stages(analyze))

    def metrics(self, df: DataFrame) -> list[MetricsRecord]:
        """Per-task records of ``df``'s latest run: stage, task, worker URL, output rows and
        bytes, compute time. Waits until every worker has reported.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext())
            >>> df = dctx.sql("SELECT 1 AS x")
            >>> _ = df.collect()
            >>> sorted(dctx.metrics(df)[0])  # doctest: +NORMALIZE_WHITESPACE
            ['attempt', 'duration_ms', 'elapsed_compute_ms', 'output_bytes', 'output_rows',
             'ran_on', 'spill_count', 'spilled_bytes', 'stage', 'task', 'tasks_in_stage',
             'worker_url']
        """
        source = latest_run(df)
        if source is None:
            raise ValueError("metrics() takes a DataFrame returned by this DistributedContext")
        if isinstance(source, Fallback):
            return [
                MetricsRecord(
                    stage=0, task=0, tasks_in_stage=1, worker_url="coordinator",
                    output_rows=None, output_bytes=None, elapsed_compute_ms=None,
                    duration_ms=None, ran_on="coordinator", attempt=1, spill_count=None,
                    spilled_bytes=None,
                )
            ]  # fmt: skip
        records: list[MetricsRecord] = source.task_metrics()
        return records

    def metrics_table(self, df: DataFrame) -> pa.Table:
        """:meth:`metrics` as a pyarrow Table (shown as an HTML table in a notebook)."""
        table = pa.Table.from_pylist(self.metrics(df))
        return table.replace_schema_metadata({METRICS_MARK: b"metrics_table"})

    def status(self) -> ClusterStatus:
        """Workers (up or down, CPU, memory, running tasks) and this context's running and
        recent queries (SQL, duration, rows, stages' progress, failures and retries). In
        Jupyter it shows as tables.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext(), progress=False)
            >>> _ = dctx.sql("SELECT 1 AS x").collect()
            >>> s = dctx.status()
            >>> len(s.workers) >= 1, s.queries[0].state, s.queries[0].rows
            (True, 'finished', 1)
        """
        return ClusterStatus.take(
            self._coordinator.worker_status(),
            MONITOR.queries(owner=self),
            self._coordinator.kept_tables(),
        )

    def dashboard(self, host: str = "127.0.0.1", port: int = 0) -> Dashboard:
        """Serve a live web page of :meth:`status` (refreshed every second) and return it;
        open ``.url`` in a browser, ``.close()`` it when done. On 127.0.0.1 by default; where
        the workers have a token, the page needs it too (``.url`` carries it).

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext(), progress=False)
            >>> board = dctx.dashboard()
            >>> board.url.startswith("http://127.0.0.1:")
            True
            >>> board.close()
        """
        token = self._security.token if self._security is not None else None
        return Dashboard(self.status, host=host, port=port, token=token)

    # -- internals ---------------------------------------------------------------------

    def _source_of(self, query_or_df: str | DataFrame) -> Source:
        if isinstance(query_or_df, str):
            df = self._ctx.sql(query_or_df)
        elif isinstance(query_or_df, DataFrame):
            df = query_or_df
        else:
            raise TypeError(
                f"expected a SQL string or a datafusion.DataFrame, got {type(query_or_df).__name__}"
            )
        existing = source_of(df)
        if existing is not None:
            return existing
        return self._source(df, Feed(_describe(df), (self, self._workers), self._progress))

    def _source(self, df: DataFrame, feed: Feed) -> Source:
        """Where ``df`` runs: its distributed plan, or the single-node fallback and why."""
        try:
            return self._plan(df, feed)
        except UnsupportedPlanError as e:
            return self._source_error(e, df)

    def _source_error(self, e: UnsupportedPlanError, df: DataFrame) -> Fallback:
        """The fallback ``e`` calls for, warned about; raised instead under
        ``fallback="error"``."""
        reason = readable_reason(str(e))
        if reason != str(e):
            _log.debug("the full reason this query cannot be distributed: %s", e)
        if self._config.fallback == "error":
            if isinstance(e, UnsupportedTableError) and reason == str(e):
                raise e
            if not reason.startswith("this query cannot be distributed"):
                reason = f"this query cannot be distributed: {reason}"
            raise UnsupportedTableError(reason) from e
        _log.warning("this query runs on the coordinator, single-node: %s", reason)
        return Fallback(reason, df)

    def _plan(self, df: DataFrame, feed: Feed) -> _internal.DistributedPlan:
        fresh, request = self._request(df, feed)
        writes = isinstance(fresh.logical_plan().to_variant(), (CopyTo, DmlStatement))
        request.writes, request.live_interval = writes, self._config.progress_interval
        plan = self._coordinator.distribute(request)
        check_result_types(fresh.schema(), self._ctx.read_table(plan).schema())
        return plan

    def _request(self, df: DataFrame, feed: Feed) -> tuple[DataFrame, PlanRequest]:
        """``df`` re-created under our settings, and what the core plans it from
        (``Coordinator.distribute`` and ``keep``'s arguments)."""
        if not isinstance(df, DataFrame):
            raise TypeError(f"expected a datafusion.DataFrame, got {type(df).__name__}")
        # What the core runs with first: refused settings (the test suite's mutation run)
        # stop the query before anything is planned.
        request = self._request_for(feed, self._ctx, b"")
        # A DataFrame plans with the settings of its creation: re-create it under ours.
        fresh = self._ctx.create_dataframe_from_logical_plan(df.logical_plan())
        # Planning errors are the query's own: they surface as single-node's would.
        try:
            physical = fresh.execution_plan()
        except Exception as e:  # the query's own error: single-node gives it when it runs
            cause = str(e).splitlines()[0]
            raise UnsupportedPlanError(f"its physical plan cannot be made ({cause})") from e
        # Plans reading lakehouse or kept tables, or holding recursive queries, go through the
        # twin carrying their codec.
        facts = physical_facts(physical)
        if facts.window_topn:
            physical = without_window_topn(self._ctx, fresh)
            facts = physical_facts(physical)
        recursive = facts.recursive_queries
        streams = self._stream_tables(fresh, facts.stream_scans)
        sorts = facts.partial_sorts
        wire = self._wire if recursive or facts.reads_our_leaves or streams or sorts else self._ctx
        try:
            with self._wire_lock:
                self._wire_codec.announce_recursive_queries(recursive)
                self._wire_codec.announce_streams(streams, next(iter(facts.stream_scans), None))
                self._wire_codec.announce_partial_sorts(sorts)
                try:
                    plan_bytes = physical.to_bytes(wire)
                finally:  # announced for this plan only
                    self._wire_codec.announce_streams([], None)
                    self._wire_codec.announce_partial_sorts([])
        except Exception as e:  # datafusion raises plain Exception subclasses
            raise unsupported(self._wire, fresh, e, self._ctx) from e
        request.plan_bytes = plan_bytes
        request.codec, request.session = wire.__datafusion_physical_extension_codec__(), wire
        # The logical plan is read (optimised once more) only for what the physical one lacks.
        if facts.reads_text_files or facts.filters_windows:
            logical = optimized(fresh)
            if facts.reads_text_files:
                request.table_scans = table_scans(logical)
            if facts.filters_windows:
                request.window_filters = filtered_windows(logical)
        return fresh, request

    def _stream_tables(self, df: DataFrame, fetches: list[int | None]) -> list[str]:
        """The unbounded file tables ``df`` scans (see ``stream_tables``), announced to the
        serialiser with the scans' limit; none when it has no stream scan, or scans the codec
        cannot tell apart (their limits differ): the plan then does not serialise."""
        if not fetches or len(set(fetches)) > 1:
            return []
        return stream_tables.scanned(self._ctx, optimized(df), len(fetches)) or []

    def _request_for(self, feed: Feed, wire: SessionContext, plan_bytes: bytes) -> PlanRequest:
        """What the core runs ``plan_bytes`` (serialised through ``wire``) with: our options
        over the session's settings (the core reads those from the session itself), object
        stores, progress and retries. Every run of the core (a query, a result or table to
        keep) starts here."""
        return PlanRequest(
            plan_bytes=plan_bytes,
            codec=wire.__datafusion_physical_extension_codec__(),
            session=wire,
            options=self._config.to_options(),
            stores=object_stores.stores_of(self._ctx),
            progress=progress_mod.to_rust(feed),
            min_workers=self._config.min_workers,
            max_retries=self._config.max_retries,
            stall_timeout=self._config.stall_timeout or None,
            spool_dir=_spool_dir(self._config),
        )

    def _keep(
        self, df: DataFrame, name: str, original: pa.RecordBatchReader | None = None
    ) -> _internal.KeptTable | None:
        """``df``'s result kept on the workers that compute it, as the kept table ``name``;
        None when ``df`` runs single-node (the fallback, warned about as for any query).
        ``original``: the rows of the in-memory table ``df`` reads whole, held by the kept
        table (to send again if a worker is lost, and for single-node to read here)."""
        feed = Feed(f"keep {name}: {_describe(df)}", (self, self._workers), self._progress)
        try:
            if original is not None:  # its rows are sent, not a plan holding them
                request = self._request_for(feed, self._ctx, b"")
            else:
                _, request = self._request(df, feed)
            return self._coordinator.keep(name, request, original=original)
        except UnsupportedPlanError as e:
            self._source_error(e, df)  # warns, or raises under fallback="error"
            return None

    def _cache(self, df: DataFrame, sql: str) -> DataFrame:
        """``df.cache()`` of a distributed frame: its result kept on the workers, and a frame
        reading it there (single-node's ``cache()`` when the query runs single-node)."""
        kept = self._keep(df, f"cache of {sql}")
        if kept is not None:
            ran_for(df, kept.made_by())
        if kept is None:
            return self._distribute(df.cache(), f"{sql} \u2192 cache()")
        return self._lazy(self._ctx.read_table(kept), f"{sql} \u2192 cache()")

    def _insert_into_kept(self, single_node: DataFrame, sql: str) -> DataFrame | None:
        """``single_node`` when it is an ``INSERT INTO`` a kept table (from ``dctx.sql`` or a
        frame given to ``distribute``): a frame whose every run runs the statement's input on
        the workers, each task keeping its rows as the table's where it ran (none pass through
        here), and gives the count; the rows join the table at once when all are held. An
        input that cannot be distributed runs single-node (``single_node``, warned about as
        for any query), its rows sent to the workers. None for any other frame."""
        plan = single_node.logical_plan()
        dml = plan.to_variant()
        if not isinstance(dml, DmlStatement) or not kept_dml.is_append(dml):
            return None
        into = kept_dml.kept_target(single_node)
        if into is None:
            return None
        (input_plan,) = plan.inputs()  # the rows as the table takes them: cast, reordered
        rows = self._ctx.create_dataframe_from_logical_plan(input_plan)
        feed = Feed(f"insert into {into.name}: {sql}", (self, self._workers), self._progress)
        try:
            _, request = self._request(rows, feed)
        except UnsupportedPlanError as e:
            self._source_error(e, rows)  # warns, or raises under fallback="error"
            return single_node
        return self._ctx.read_table(self._coordinator.insert(into, request))

    def _rewrite_kept(
        self,
        kind: str,
        table: str,
        where: str | None,
        assignments: list[tuple[str, str]],
        single_node: DataFrame,
    ) -> DataFrame | None:
        """``DELETE`` or ``UPDATE`` of a kept table: its new contents kept on the workers (a
        query over the table as it is), registered in its place at once, and the count; None
        when ``table`` is not a kept table. It runs when the statement is made."""
        into = kept_dml.kept_table_named(self._ctx, table)
        if into is None:
            return None
        sql, count = kept_dml.rewritten_contents(self._ctx, kind, table, where, dict(assignments))
        feed = Feed(f"{kind} {into.name}: {sql}", (self, self._workers), self._progress)
        try:
            _, request = self._request(self._ctx.sql(sql), feed)
            # The rows an UPDATE touches (a DELETE's are told by the rows it leaves).
            touched = self._distribute(self._ctx.sql(count), count) if kind == "update" else None
        except UnsupportedPlanError as e:
            self._source_error(e, single_node)  # warns, or raises under fallback="error"
            return single_node
        matched = touched.to_pylist()[0]["n"] if touched is not None else 0
        kept = self._coordinator.keep(into.name, request, replacing=into)
        if kind == "delete":
            matched = into.rows - kept.rows  # `into` is retired now: its rows stay as read
        self._ctx.deregister_table(table)
        self._ctx.register_table(table, kept)
        return self._ctx.from_arrow(pa.table({"count": pa.array([matched], pa.uint64())}))

    def _create_table_as(
        self, sql: str, name: str, select: str, or_replace: bool, if_not_exists: bool
    ) -> DataFrame:
        """``CREATE [OR REPLACE] TABLE name [IF NOT EXISTS] AS select``: the result kept on the
        workers and ``name`` registered on ``ctx`` as a table reading it there."""
        if self._ctx.table_exist(name) and not or_replace:
            return self._ctx.sql(sql)  # single-node's error, or nothing (IF NOT EXISTS)
        selected = self._ctx.sql(select)
        names = selected.schema().names
        if len(set(names)) < len(names):  # a table of repeated names: single-node's error
            return self._ctx.sql(sql)
        kept = self._keep(selected, name)
        if kept is None:
            return self._ctx.sql(sql)
        if self._ctx.table_exist(name):
            self._ctx.deregister_table(name)
        self._ctx.register_table(name, kept)
        return self._ctx.sql("SELECT 1 WHERE false")  # an empty result, as ctx.sql's

    def _explain_frame(self, query: DataFrame, analyze: bool) -> DataFrame:
        text = self.explain(query, analyze=analyze)
        kind = "Plan with Metrics" if analyze else "distributed_plan"
        return self._ctx.from_arrow(pa.table({"plan_type": [kind], "plan": [text]}))

    def __repr__(self) -> str:
        return f"DistributedContext(workers={self.worker_urls!r})"


def _spool_dir(config: DistributedConfig) -> str | None:
    """Where the tasks of a query spool their output (``fault_tolerance="task"``), or None."""
    if config.fault_tolerance != "task":
        return None
    return config.spool_dir or os.path.join(tempfile.gettempdir(), "dfdpy-spool")


def _sql_str(text: str) -> str:
    """``text`` inside a SQL string literal."""
    return text.replace("'", "''")


def _describe(df: DataFrame) -> str:
    """A one-line name for a DataFrame built in Python: its logical plan's top node."""
    first = df.logical_plan().display_indent().strip().split("\n", 1)[0]
    return f"DataFrame: {first.strip()}"


def _as_sql(ctx: SessionContext, df: DataFrame) -> str:
    """``df``'s query as SQL text planning to the same result (its plan unparsed); raises
    ``UnsupportedPlanError`` when there is none (a frame reading a table with no name)."""
    try:
        sql = str(Unparser(Dialect.default()).plan_to_sql(df.logical_plan()))
        same = ctx.sql(sql).schema() == df.schema()
    except Exception as e:  # datafusion raises plain Exception subclasses
        raise UnsupportedPlanError(f"its plan cannot be written as SQL ({e})") from e
    if not same:
        raise UnsupportedPlanError("its plan, written as SQL, plans to another result")
    return sql
