"""``DistributedContext``: run a ``datafusion.SessionContext``'s queries on workers.

The front door only: each job lives in a module named for it (``cluster_wiring``: which
workers and how they are reached; ``planning``: where a frame runs; ``kept_data``: data kept
on the workers; ``writes``: a frame's rows written by ``COPY``; ``task_metrics``), all over one
:class:`~datafusion_distributed_py.engine.Engine`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pyarrow as pa
from datafusion import DataFrame, SessionContext
from datafusion.expr import Analyze, DmlStatement, EmptyRelation, Explain

from datafusion_distributed_py import _internal, kept_data, planning, task_metrics, writes
from datafusion_distributed_py import progress as progress_mod
from datafusion_distributed_py.cluster_wiring import Workers, coordinator_for, security_for
from datafusion_distributed_py.config import DistributedConfig
from datafusion_distributed_py.dashboard import Dashboard
from datafusion_distributed_py.dataframe import Fallback, latest_run
from datafusion_distributed_py.engine import Engine
from datafusion_distributed_py.fallback_reasons import scanned_tables
from datafusion_distributed_py.monitor import MONITOR
from datafusion_distributed_py.plan_picture import ExplainedPlan
from datafusion_distributed_py.progress import ProgressCallback
from datafusion_distributed_py.security import Security
from datafusion_distributed_py.status import ClusterStatus
from datafusion_distributed_py.task_metrics import MetricsRecord
from datafusion_distributed_py.wire import Wire
from datafusion_distributed_py.write_options import Copy

__all__ = ["DistributedContext", "MetricsRecord"]


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
        secured = security_for(workers, security)
        self._engine = Engine(
            owner=self,
            ctx=ctx,
            config=config or DistributedConfig(),
            workers=workers,
            progress=progress_mod.resolve(progress),
            security=secured,
            coordinator=coordinator_for(workers, secured, ctx),
            # Plans are serialised through a twin of `ctx` (same session) that also carries
            # our codec, so lakehouse and kept tables' scans travel; `ctx` is unchanged.
            wire=Wire(ctx),
        )
        self._engine.frames = _Frames(self)
        self._ctx = ctx

    @property
    def ctx(self) -> SessionContext:
        """The wrapped session; it plans single-node."""
        return self._ctx

    @property
    def config(self) -> DistributedConfig:
        """The current planner settings (``SET distributed.*`` updates them)."""
        return self._engine.config

    @config.setter
    def config(self, value: DistributedConfig) -> None:
        if not isinstance(value, DistributedConfig):
            raise TypeError(f"config must be a DistributedConfig, got {type(value).__name__}")
        self._engine.config = value

    @property
    def worker_urls(self) -> list[str]:
        """The URLs of the workers a query planned now would run on."""
        return self._engine.coordinator.worker_urls()

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
            self.config = self.config.with_option(*setting)
            return self._ctx.sql(kept_data.NO_ROWS)  # an empty result, like SET
        create = _internal.create_table_as(query, self._ctx)
        if create is not None:
            return kept_data.create_table_as(self._engine, query, *create)
        df = self._ctx.sql(query)
        plan = df.logical_plan()
        variant = plan.to_variant()
        if not isinstance(
            variant, (EmptyRelation, Explain, Analyze)
        ) and kept_data.keep_memory_tables(self._engine, df, plan):
            df = self._ctx.sql(query)  # planned again over the tables now kept
            plan = df.logical_plan()
            variant = plan.to_variant()
        # Statements `SessionContext.sql` already ran (DDL, SET, ...) leave an empty relation.
        if isinstance(variant, EmptyRelation):
            return df
        inserted = kept_data.insert_into_kept(self._engine, df, query.strip(), plan)
        if inserted is not None:
            return inserted
        if isinstance(variant, DmlStatement):
            rewrite = _internal.delete_or_update(query, self._ctx)
            rewritten = kept_data.rewrite_kept(self._engine, *rewrite, df) if rewrite else None
            if rewritten is not None:
                return rewritten
        if isinstance(variant, (Explain, Analyze)):
            (explained,) = plan.inputs()
            inner = self._ctx.create_dataframe_from_logical_plan(explained)
            return self._explain_frame(inner, analyze=isinstance(variant, Analyze))
        return planning.lazy(self._engine, df, query.strip())

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
        sql = planning.describe(df)
        inserted = kept_data.insert_into_kept(self._engine, df, sql)
        return inserted if inserted is not None else planning.lazy(self._engine, df, sql)

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
        if len(scanned) == 1 and kept_data.keep_memory_tables(self._engine, df):
            # A frame that reads one table whole (``table``, ``from_pandas``...): the same
            # frame over the table now kept on the workers.
            (ref,) = scanned.values()
            df = self._ctx.table(ref)
        return planning.lazy(self._engine, df, f"{maker}({first})")

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
        source = planning.source_for(self._engine, query_or_df)
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
             'query_id', 'ran_on', 'spill_count', 'spilled_bytes', 'stage', 'task',
             'tasks_in_stage', 'traceparent', 'worker_end_ns', 'worker_host', 'worker_pid',
             'worker_start_ns', 'worker_url']
        """
        return task_metrics.task_records(latest_run(df))

    def metrics_table(self, df: DataFrame) -> pa.Table:
        """:meth:`metrics` as a pyarrow Table (shown as an HTML table in a notebook)."""
        return task_metrics.task_table(latest_run(df))

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
            self._engine.coordinator.worker_status(),
            MONITOR.queries(owner=self),
            self._engine.coordinator.kept_tables(),
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
        security = self._engine.security
        token = security.token if security is not None else None
        return Dashboard(self.status, host=host, port=port, token=token)

    def _explain_frame(self, query: DataFrame, analyze: bool) -> DataFrame:
        text = self.explain(query, analyze=analyze)
        kind = "Plan with Metrics" if analyze else "distributed_plan"
        return self._ctx.from_arrow(pa.table({"plan_type": [kind], "plan": [text]}))

    def __repr__(self) -> str:
        return f"DistributedContext(workers={self.worker_urls!r})"


class _Frames:
    """The frames' way back to their context (``dataframe.Distributor``): a step planned,
    written, or cached as the context plans, writes and keeps."""

    def __init__(self, context: DistributedContext) -> None:
        self._context = context
        self._engine = context._engine

    def distribute(self, df: DataFrame, sql: str) -> DataFrame:
        return planning.distribute(self._engine, df, sql)

    def plans_at_once(self) -> bool:
        return planning.plans_at_once(self._engine)

    def copy(self, copy: Copy, path: str, stored_as: str) -> None:
        writes.copy(self._engine.ctx, self._context.sql, copy, path, stored_as)

    def cache(self, df: DataFrame, sql: str) -> DataFrame:
        return kept_data.cache(self._engine, df, sql)
