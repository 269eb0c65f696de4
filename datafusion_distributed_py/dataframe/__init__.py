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

The package, one job per module: ``source`` (where a frame runs), ``origin`` (what a frame
knows about itself, pending frames, the way back to its context), ``errors`` and ``streams``
(errors as single-node gives them), ``results`` (a result read straight from the core),
``running`` (a method run on the result, or as a step on the twin), ``terminals`` and
``writes`` (methods planned as single-node plans them), ``display`` (``repr``), and
``replacements`` (what ``patches.install`` puts on the class).
"""

from datafusion_distributed_py.dataframe.errors import translate, with_rows_delivered, worker_error
from datafusion_distributed_py.dataframe.origin import (
    Distributor,
    Origin,
    distributed_frame,
    is_ours,
    latest_run,
    origin_of,
    pending_frame,
    ran_for,
    ran_on,
    source_of,
    twin_of,
)
from datafusion_distributed_py.dataframe.replacements import replacements
from datafusion_distributed_py.dataframe.source import Fallback, Source
from datafusion_distributed_py.dataframe.streams import TranslatedStream

__all__ = [
    "Distributor",
    "Fallback",
    "Origin",
    "Source",
    "TranslatedStream",
    "distributed_frame",
    "is_ours",
    "latest_run",
    "origin_of",
    "pending_frame",
    "ran_for",
    "ran_on",
    "replacements",
    "source_of",
    "translate",
    "twin_of",
    "with_rows_delivered",
    "worker_error",
]
