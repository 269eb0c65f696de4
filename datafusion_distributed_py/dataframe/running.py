"""How a wrapped method runs: on the frame itself, reading its distributed result (errors
translated, each run a query of the monitor, a lost worker costing a run again where nothing
was handed on), or as a DataFrame-API step on its single-node twin, the composed query
distributed as one."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from datafusion import DataFrame
from datafusion._internal import DataFrame as DataFrameInternal  # type: ignore[import-not-found]

from datafusion_distributed_py import _internal, frame_methods
from datafusion_distributed_py.dataframe.errors import AsSingleNode, translate
from datafusion_distributed_py.dataframe.naming import named
from datafusion_distributed_py.dataframe.origin import (
    Pending,
    frame_of_pending,
    is_ours,
    lineage_of,
    origin_of,
    ran_for,
    sql_of,
    twin_of,
)
from datafusion_distributed_py.dataframe.results import DIRECT, RUNS, WHOLE, result_rows
from datafusion_distributed_py.dataframe.source import Fallback
from datafusion_distributed_py.dataframe.streams import streams_translated
from datafusion_distributed_py.frame_methods import Handling
from datafusion_distributed_py.monitor import MONITOR


def _translating(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` run on the frame itself (what reads its result), with errors translated
    (made once per method; :func:`distributed_frame` binds it to each frame)."""

    # A write the coordinator makes from the result puts files in place as rows come: it is
    # never run twice (those ``COPY`` runs on the workers, whose staged commit allows it).
    writes = method.__name__.startswith("write_")
    runs = method.__name__ in RUNS
    whole = method.__name__ in WHOLE
    direct = DIRECT.get(method.__name__)

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
            reason = source.reason if isinstance(source, Fallback) else None
            record = MONITOR.begin(
                feed.sql, ran_on, feed.owners, source if distributed else None, feed.log, reason
            )
            feed.attach(record)
        try:
            while True:
                try:
                    if origin.names is not None and method.__name__ == "describe":
                        # Single-node refuses to describe a result with repeated names.
                        out = single_node_refusal(origin.twin, method, *args)
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
                feed.detach()
        if record is not None:
            MONITOR.end(record, result_rows(out), None)
        if isinstance(out, DataFrame) and not is_ours(out):
            # A frame the method made from this one's result (``describe``, ``cache``):
            # distributed in its turn, so what is derived from it runs on the workers too.
            return origin.owner.distribute(out, f"{sql_of(origin)} \u2192 {method.__name__}()")
        if origin.names is not None and direct is None:
            out = named(out, origin.names)
        return streams_translated(out, source, origin.names)

    return wrapper


def _step(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (a DataFrame-API step: ``filter``, ``aggregate``, ``join``...) applied to
    the frame's single-node twin, with each distributed frame among its arguments replaced by
    its own twin; the composed query is distributed as one (made once per method)."""

    @functools.wraps(method)
    def wrapper(df: DataFrame, *args: Any, **kwargs: Any) -> Any:
        return derive(df, method.__name__, method, *args, **kwargs)

    return wrapper


def derive(df: DataFrame, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    twin, owner, sql = lineage_of(df)
    out = method(twin, *map(twin_of, args), **{k: twin_of(v) for k, v in kwargs.items()})
    if out is twin:  # a step that changes nothing (``fill_null(v, subset=[])``)
        return df
    if isinstance(out, DataFrameInternal):  # datafusion 55's select_exprs returns its core
        out = DataFrame(out)
    if not isinstance(out, DataFrame):  # expressions (``col``), plans, views
        return out
    derived = frame_of_pending(Pending(out, owner, f"{sql} \u2192 {name}()"))
    if owner.plans_at_once():  # strict: a refusal is raised where the step is written
        origin_of(derived)
    return derived


def repeats_names(df: DataFrame) -> bool:
    """Whether ``df``'s result has two columns of one name (see ``Origin.names``)."""
    names = df.schema().names
    return len(set(names)) < len(names)


def single_node_refusal(twin: DataFrame, method: Callable[..., Any], *args: Any) -> Any:
    """``method`` of single-node on ``twin``, for what single-node refuses for a result with
    repeated names (keeping it, describing it): the same error, translated."""
    with AsSingleNode():
        return method(twin, *args)


#: Methods that build on what the frame's result holds, run on the frame itself (the result
#: read from the workers), their own result distributed again: ``describe`` runs the query;
#: ``transform`` calls the user's function with the distributed frame.
ON_RESULT = frame_methods.names(Handling.ON_RESULT)


#: Methods that read the frame's plan rather than its result: the single-node twin answers,
#: as single-node would (``col``/``column`` qualify columns as the twin's steps expect).
ON_TWIN = frame_methods.names(Handling.TWIN)


#: datafusion's own public methods of ``DataFrame``, read once before any is wrapped.
PUBLIC: dict[str, Callable[..., Any]] = {
    name: member
    for name, member in vars(DataFrame).items()
    if isinstance(member, types.FunctionType) and not name.startswith("_")
}


#: The steps of the DataFrame API (and the plan's readers), applied to the twin, as
#: `frame_methods` classifies them: a method it does not classify is read from the result.
STEPS = {
    name: _step(member)
    for name, member in PUBLIC.items()
    if name in frame_methods.names(Handling.STEP) or name in ON_TWIN
}


#: Each public method run on the frame itself (reading its distributed result).
ON_FRAME = {name: _translating(member) for name, member in PUBLIC.items()}
