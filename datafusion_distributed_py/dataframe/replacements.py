"""What ``patches.install`` puts on ``datafusion.DataFrame``: each public method dispatching to
ours on a frame this package returned, and the special members Python looks up on the type."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from datafusion import DataFrame

from datafusion_distributed_py.dataframe.display import frame_repr, frame_repr_html
from datafusion_distributed_py.dataframe.naming import schema_named
from datafusion_distributed_py.dataframe.origin import (
    Pending,
    frame_of_pending,
    is_ours,
    lineage_of,
    origin_of,
    plan_pending,
    running_for,
    twin_of,
)
from datafusion_distributed_py.dataframe.running import ON_FRAME, ON_TWIN, PUBLIC, STEPS
from datafusion_distributed_py.dataframe.streams import batches_delivered
from datafusion_distributed_py.dataframe.terminals import COMPOSED

#: The methods a user calls on a DataFrame (special methods Python looks up on the type, such
#: as ``__repr__``, cannot be replaced on one instance), wrapped.
_WRAPPED: dict[str, Callable[..., Any]] = {
    **ON_FRAME,
    **{
        name: functools.wraps(getattr(DataFrame, name))(running_for(fn))
        for name, fn in COMPOSED.items()
    },
    **STEPS,
}


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
    schema = reader.schema if names is None else schema_named(reader.schema, names)
    batches = batches_delivered(reader, origin.source, names)
    return pa.RecordBatchReader.from_batches(schema, batches).__arrow_c_stream__(requested_schema)


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
        _, owner, sql = lineage_of(ours[0])
        out = method(df, *map(twin_of, args), **{k: twin_of(v) for k, v in kwargs.items()})
        if not isinstance(out, DataFrame):
            return out
        return frame_of_pending(Pending(out, owner, f"DataFrame.{method.__name__}({sql})"))

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
            plan_pending(df)
        return state["df"]

    def __set__(self, df: DataFrame, core: Any) -> None:
        df.__dict__["df"] = core


@functools.cache  # built once: patches.py reads its names, then installs it
def replacements() -> dict[str, Any]:
    """What ``patches.install`` puts on ``datafusion.DataFrame``, built from datafusion's own
    members (read when this module loaded): each public method dispatching to ours on a frame
    this package returned (a plain frame's steps also carry our frames given as arguments),
    the special methods Python looks up on the type (``repr``, the Arrow stream, ``df[...]``)
    and ``df``, the frame's core."""
    new: dict[str, Any] = {
        # Looked up on the class: frames whose result repeats a name show single-node's names.
        "__repr__": frame_repr,
        "_repr_html_": frame_repr_html,
        "__arrow_c_stream__": _c_stream,
        "__getitem__": _getitem,
        "df": _Core(),
    }
    for name, wrapper in _WRAPPED.items():
        plain = PUBLIC[name]
        if name in STEPS and name not in ON_TWIN:
            plain = _plain_step(plain)  # a plain frame's step given one of ours
        new[name] = _dispatching(wrapper, plain)
    return new
