"""Errors as single-node gives them: a query's own error raised on a worker (it crosses two FFI
boundaries as ``FFI error: External error: ...``) re-raised with single-node's type and
message, the worker appended; a failure of a worker itself as :class:`WorkerError`."""

from __future__ import annotations

import re

from datafusion_distributed_py import _internal
from datafusion_distributed_py.dataframe.source import Source
from datafusion_distributed_py.errors import WorkerError

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


class AsSingleNode:
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
