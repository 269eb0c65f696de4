"""``DistributedDataFrame``: the ``datafusion.DataFrame`` that :class:`DistributedContext` returns.

It is an ordinary ``datafusion.DataFrame`` (every method, ``isinstance`` included) that keeps
two things the plain class cannot:

* **where it runs** — the distributed plan, or the reason it runs single-node on the
  coordinator (the fallback) — also for the frames derived from it (``df.filter(...)``), so
  :meth:`DistributedContext.explain` and :meth:`DistributedContext.metrics` work on them;
* **errors as single-node gives them** — a query's own error (a bad cast, a UDF's exception)
  raised on a worker crosses two FFI boundaries and arrives as ``FFI error: External error:
  ...``; it is re-raised with the same type and single-node's message, the worker appended.
  A failure of a worker itself is raised as :class:`WorkerError` with ``.worker_url``.
"""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from datafusion import DataFrame, RecordBatch

from datafusion_distributed_py import _internal
from datafusion_distributed_py.errors import WorkerError


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
    err.worker_url = url  # type: ignore[attr-defined]
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


_F = TypeVar("_F", bound=Callable[..., Any])


def _translating(method: _F) -> _F:
    """``method`` with its errors translated and the DataFrames it returns kept distributed."""

    @functools.wraps(method)
    def wrapper(self: DistributedDataFrame, *args: Any, **kwargs: Any) -> Any:
        try:
            out = method(self, *args, **kwargs)
        except Exception as e:
            clean = translate(e)
            if clean is None:
                raise
            raise clean from None
        if type(out) is DataFrame:
            return DistributedDataFrame(out, self._dfdpy_source)
        return out

    return wrapper  # type: ignore[return-value]


class DistributedDataFrame(DataFrame):
    """A ``datafusion.DataFrame`` whose query runs on workers (or, said, on the coordinator).

    Returned by :meth:`DistributedContext.sql` and :meth:`DistributedContext.distribute`;
    use it as any DataFrame.

    Example:
        >>> from datafusion import SessionContext, DataFrame
        >>> from datafusion_distributed_py import DistributedContext
        >>> df = DistributedContext(SessionContext()).sql("SELECT 1 AS x")
        >>> isinstance(df, DataFrame), df.filter(df["x"] > 0).count()
        (True, 1)
    """

    def __init__(self, df: DataFrame, source: Source) -> None:
        super().__init__(df.df)
        self._dfdpy_source = source

    @property
    def ran_on(self) -> str:
        """``"workers"``, or ``"coordinator"`` when the query could not be distributed."""
        return "coordinator" if isinstance(self._dfdpy_source, Fallback) else "workers"

    def __iter__(self) -> Iterator[RecordBatch]:
        iterator = super().__iter__()
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            except Exception as e:
                clean = translate(e)
                if clean is None:
                    raise
                raise clean from None
            yield batch


# Every public method, and the special methods Python calls on the type, translate errors.
for _name, _member in list(vars(DataFrame).items()):
    if not isinstance(_member, types.FunctionType) or _name == "__iter__":
        continue
    if _name.startswith("_") and _name not in (
        "__getitem__",
        "__repr__",
        "_repr_html_",
        "__arrow_c_stream__",
    ):
        continue
    setattr(DistributedDataFrame, _name, _translating(_member))


def source_of(df: DataFrame) -> Source | None:
    """Where ``df`` runs, if this package returned it (or derived it from one it returned)."""
    return getattr(df, "_dfdpy_source", None)
