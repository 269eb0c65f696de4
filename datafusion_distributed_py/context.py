"""``DistributedContext``: run a ``datafusion.SessionContext``'s queries on workers."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union

import pyarrow as pa
from datafusion import DataFrame, SessionContext

from datafusion_distributed_py import _internal, object_stores
from datafusion_distributed_py import progress as progress_mod
from datafusion_distributed_py.config import DistributedConfig
from datafusion_distributed_py.errors import DistributedError, UnsupportedTableError
from datafusion_distributed_py.progress import ProgressCallback

#: What ``workers=`` accepts: None (embedded cluster), URL strings (or started ``Worker``s),
#: an object with ``.urls`` (such as ``LocalCluster``), or a callable returning URL strings at
#: each query's planning.
Workers = Union[None, Sequence[str], Callable[[], Sequence[str]], Any]  # noqa: UP007

_SET_DISTRIBUTED = re.compile(
    r"^\s*SET\s+(distributed\.\w+)\s*(?:=|TO)\s*(.+?)\s*;?\s*$", re.IGNORECASE | re.DOTALL
)
_EXPLAIN = re.compile(
    r"^\s*EXPLAIN\s+(?P<analyze>ANALYZE\s+)?(?:VERBOSE\s+)?(?P<query>.+)$",
    re.IGNORECASE | re.DOTALL,
)
# Logical plan variants of statements that `SessionContext.sql` already ran (DDL, SET, ...).
_ALREADY_EXECUTED = {"EmptyRelation"}
_DATAFRAME_PLAN_ATTR = "_datafusion_distributed_plan"


def default_worker_count() -> int:
    """Workers of the embedded cluster: one per CPU, at least 2."""
    return max(2, os.cpu_count() or 2)


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
    ) -> None:
        if not isinstance(ctx, SessionContext):
            raise TypeError(
                f"DistributedContext needs a datafusion.SessionContext, got {type(ctx).__name__}"
            )
        if config is not None and not isinstance(config, DistributedConfig):
            raise TypeError(f"config must be a DistributedConfig, got {type(config).__name__}")
        self._ctx = ctx
        self._config = config or DistributedConfig()
        self._workers = workers
        self._progress = progress_mod.resolve(progress)
        self._coordinator = _coordinator_for(workers)

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

        Statements (CREATE VIEW, CREATE EXTERNAL TABLE, SET, DROP...) take effect on ``ctx``
        as ``ctx.sql`` would; ``SET distributed.<key> = <value>`` changes this context's
        :class:`DistributedConfig`; ``EXPLAIN [ANALYZE]`` shows the distributed plan.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext())
            >>> dctx.sql("SELECT 40 + 2 AS answer").to_pylist()
            [{'answer': 42}]
        """
        if m := _SET_DISTRIBUTED.match(query):
            self._config = self._config.with_option(m.group(1).lower(), m.group(2))
            return self._ctx.sql("SELECT 1 WHERE false")  # an empty result, like SET
        if m := _EXPLAIN.match(query):
            return self._explain_frame(m.group("query"), analyze=bool(m.group("analyze")))
        df = self._ctx.sql(query)
        if _variant(df) in _ALREADY_EXECUTED:
            return df
        return self.distribute(df)

    def distribute(self, df: DataFrame) -> DataFrame:
        """Return a DataFrame that runs ``df`` (built on ``ctx``) distributed.

        Example:
            >>> from datafusion import SessionContext, col, functions as f
            >>> ctx = SessionContext()
            >>> t = ctx.from_pydict({"k": [1, 2, 2]})
            >>> dctx = DistributedContext(ctx)
            >>> dctx.distribute(t.aggregate([col("k")], [f.count(col("k"))])).count()
            2
        """
        plan = self._plan(df)
        out = self._ctx.read_table(plan)
        setattr(out, _DATAFRAME_PLAN_ATTR, plan)
        return out

    def explain(
        self,
        query_or_df: str | DataFrame,
        analyze: bool = False,
        format: str = "text",
    ) -> str:
        """The distributed plan: its stages, tasks per stage and network boundaries.

        With ``analyze=True`` the query runs first and the plan carries its metrics.
        ``format`` is ``"text"`` or ``"graphviz"``.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext())
            >>> plan = dctx.explain("SELECT 1 AS x")
            >>> "DistributedExec" in plan and "Stage 1" in plan
            True
        """
        if format not in ("text", "graphviz"):
            raise ValueError(f"unknown explain format {format!r}: use 'text' or 'graphviz'")
        plan = self._plan_of(query_or_df)
        if analyze:
            self._ctx.read_table(plan).collect()
        return plan.display(format=format, analyze=analyze)

    def metrics(self, df: DataFrame) -> list[dict[str, Any]]:
        """Per-task records of ``df``'s latest run: stage, task, worker URL, output rows and
        bytes, compute time. Waits until every worker has reported.

        Example:
            >>> from datafusion import SessionContext
            >>> dctx = DistributedContext(SessionContext())
            >>> df = dctx.sql("SELECT 1 AS x")
            >>> _ = df.collect()
            >>> sorted(dctx.metrics(df)[0])  # doctest: +NORMALIZE_WHITESPACE
            ['duration_ms', 'elapsed_compute_ms', 'output_bytes', 'output_rows', 'stage',
             'task', 'tasks_in_stage', 'worker_url']
        """
        plan = getattr(df, _DATAFRAME_PLAN_ATTR, None)
        if plan is None:
            raise ValueError("metrics() takes a DataFrame returned by this DistributedContext")
        return plan.task_metrics()

    def metrics_table(self, df: DataFrame) -> pa.Table:
        """:meth:`metrics` as a pyarrow Table."""
        return pa.Table.from_pylist(self.metrics(df))

    # -- internals ---------------------------------------------------------------------

    def _plan_of(self, query_or_df: str | DataFrame) -> _internal.DistributedPlan:
        if isinstance(query_or_df, str):
            df = self._ctx.sql(query_or_df)
        elif isinstance(query_or_df, DataFrame):
            df = query_or_df
        else:
            raise TypeError(
                f"expected a SQL string or a datafusion.DataFrame, got {type(query_or_df).__name__}"
            )
        existing = getattr(df, _DATAFRAME_PLAN_ATTR, None)
        return existing if existing is not None else self._plan(df)

    def _plan(self, df: DataFrame) -> _internal.DistributedPlan:
        if not isinstance(df, DataFrame):
            raise TypeError(f"expected a datafusion.DataFrame, got {type(df).__name__}")
        session = _session_options(self._ctx)
        try:
            with _planning_settings(self._ctx, session):
                # A DataFrame plans with the settings of its creation: re-create it under ours.
                fresh = self._ctx.create_dataframe_from_logical_plan(df.logical_plan())
                plan_bytes = fresh.execution_plan().to_bytes(self._ctx)
        except Exception as e:  # datafusion raises plain Exception subclasses
            raise _unsupported(df, e) from e
        options = {**session, **self._config.to_options(), **_PLANNING_OVERRIDES}
        codec = self._ctx.__datafusion_physical_extension_codec__()
        stores = object_stores.stores_of(self._ctx)
        report = progress_mod.to_rust(self._progress)
        return self._coordinator.distribute(plan_bytes, codec, options, stores, report)

    def _explain_frame(self, query: str, analyze: bool) -> DataFrame:
        text = self.explain(query, analyze=analyze)
        kind = "Plan with Metrics" if analyze else "distributed_plan"
        return self._ctx.from_arrow(pa.table({"plan_type": [kind], "plan": [text]}))

    def __repr__(self) -> str:
        return f"DistributedContext(workers={self.worker_urls!r})"


def _coordinator_for(workers: Workers) -> _internal.Coordinator:
    if workers is None:
        return _internal.Coordinator.embedded(default_worker_count())
    if isinstance(workers, str):
        raise TypeError("workers must be a list of URLs, not a single string; wrap it in [...]")
    urls = getattr(workers, "urls", None)
    if urls is not None and not callable(workers):
        workers = list(urls)
    if callable(workers):
        return _internal.Coordinator.remote(workers)
    if isinstance(workers, (list, tuple)):
        if not workers:
            raise ValueError("workers=[] names no workers; pass None for the embedded cluster")
        # A started Worker stands for its URL.
        urls = [getattr(w, "url", w) for w in workers]
        for url in urls:
            if not isinstance(url, str):
                raise TypeError(f"worker URLs must be strings, got {type(url).__name__}")
        return _internal.Coordinator.remote(urls)
    raise TypeError(
        "workers must be None, a list of URLs, a LocalCluster or a callable returning URLs; "
        f"got {type(workers).__name__}"
    )


def _variant(df: DataFrame) -> str:
    return type(df.logical_plan().to_variant()).__name__


def _session_options(ctx: SessionContext) -> dict[str, str]:
    """The session's own settings, so workers plan and run with them too."""
    try:
        rows = ctx.sql("SELECT name, value FROM information_schema.df_settings").to_pylist()
    except Exception:  # information_schema disabled: planner defaults apply
        return {}
    return {r["name"]: r["value"] for r in rows if r["value"] is not None}


#: Settings the single-node planner must use for a plan that will be distributed:
#: datafusion-distributed cannot cut a plan whose scalar subqueries run as a physical
#: ScalarSubqueryExec (their stages are never scheduled), so they are planned as joins.
_PLANNING_OVERRIDES = {
    "datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery": "false",
}


@contextlib.contextmanager
def _planning_settings(ctx: SessionContext, session: dict[str, str]) -> Iterator[None]:
    """Apply :data:`_PLANNING_OVERRIDES` to ``ctx`` while it plans, then restore them."""
    changed = {k: session[k] for k, v in _PLANNING_OVERRIDES.items() if session.get(k, v) != v}
    for key in changed:
        ctx.sql(f"SET {key} = {_PLANNING_OVERRIDES[key]}")
    try:
        yield
    finally:
        for key, value in changed.items():
            ctx.sql(f"SET {key} = {value}")


def _unsupported(df: DataFrame, err: Exception) -> DistributedError:
    msg = str(err)
    display = df.logical_plan().display_indent()
    tables = re.findall(r"TableScan: (\S+)|table=\[([^\]]+)\]", display)
    names = [scan or target for scan, target in tables]
    named = f" (tables in the query: {', '.join(dict.fromkeys(names))})" if names else ""
    hint = "Run it single-node with ctx.sql(...) instead."
    if "DataSinkExec" in msg and "Dml:" in display:
        hint = (
            "INSERT INTO an in-memory table writes into this process's memory and cannot run "
            "on workers; run it with ctx.sql(...).collect() instead."
        )
    elif "avro" in msg.lower():
        hint = (
            "Avro scans cannot be serialised by the datafusion 55 wheel, so Avro tables cannot "
            "reach workers; convert once with ctx.read_avro(path).write_parquet(out) and "
            "register the parquet copy, or run the query single-node with ctx.sql(...)."
        )
    elif "DatasetExec" in msg or "Dataset" in msg:
        hint = (
            "pyarrow datasets (register_dataset) are scanned by Python in this process and "
            "cannot be sent to workers; register the files with register_parquet/register_csv "
            "instead, or run the query single-node with ctx.sql(...)."
        )
    return UnsupportedTableError(
        f"this query cannot be distributed: part of its plan cannot be sent to workers{named}. "
        f"{hint} Cause: {msg}"
    )
