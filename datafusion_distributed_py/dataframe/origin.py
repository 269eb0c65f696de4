"""What a frame this package returned knows about itself (its :class:`Origin`: where it runs,
its single-node twin, its context), frames not planned yet (made by ``dctx.sql`` or a step,
planned when first used), and the frames' way back to their context (:class:`Distributor`)."""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from datafusion import DataFrame

from datafusion_distributed_py import write_options
from datafusion_distributed_py.dataframe.errors import AsSingleNode
from datafusion_distributed_py.dataframe.source import Fallback, Source
from datafusion_distributed_py.monitor import Feed

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


def running_for(method: Callable[..., Any]) -> Callable[..., Any]:
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


@dataclass(frozen=True)
class Pending:
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
    return frame_of_pending(Pending(df, owner, sql, root=True))


_PLANNING = threading.RLock()


def frame_of_pending(pending: Pending) -> DataFrame:
    """A plain ``datafusion.DataFrame`` that plans ``pending`` distributed when first used:
    any method, or anything reading its core (``.df``, as ``repr`` and ``__arrow_c_stream__``
    do)."""
    df = DataFrame.__new__(DataFrame)
    df.__dict__["_dfdpy_pending"] = pending
    return df


def plan_pending(df: DataFrame) -> None:
    """Plans a pending frame: it takes the core and origin of its distributed plan."""
    with _PLANNING:
        pending = df.__dict__.get("_dfdpy_pending")
        if pending is None:  # planned meanwhile by another thread
            return
        with AsSingleNode():
            planned = pending.owner.distribute(pending.twin, pending.sql)
        df.__dict__["df"] = planned.__dict__["df"]
        df.__dict__["_dfdpy_origin"] = planned.__dict__["_dfdpy_origin"]
        del df.__dict__["_dfdpy_pending"]


def lineage_of(df: DataFrame) -> tuple[DataFrame, Distributor, str]:
    """The twin of a frame this package returned, what distributes frames derived from it,
    and its description; without planning it."""
    pending = df.__dict__.get("_dfdpy_pending")
    if pending is not None:
        return pending.twin, pending.owner, pending.sql
    origin = origin_of(df)
    assert origin is not None
    return origin.twin, origin.owner, sql_of(origin)


def origin_of(df: object) -> Origin | None:
    """What ``df`` knows about itself, if this package returned it (planned now if it was
    pending)."""
    state = getattr(df, "__dict__", None)
    if state is None:
        return None
    if "_dfdpy_pending" in state:
        plan_pending(df)  # type: ignore[arg-type]
    origin = state.get("_dfdpy_origin")
    return origin if isinstance(origin, Origin) else None


def twin_of(value: Any) -> Any:
    """The single-node twin of a frame this package returned; anything else as it is."""
    if isinstance(value, DataFrame) and is_ours(value):
        return lineage_of(value)[0]
    return value


def is_ours(df: DataFrame) -> bool:
    """Whether this package returned ``df`` (planned or not yet)."""
    return "_dfdpy_pending" in df.__dict__ or "_dfdpy_origin" in df.__dict__


def sql_of(origin: Origin) -> str:
    return origin.feed.sql if origin.feed is not None else "DataFrame"


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
