"""Distributed queries for users of the stock ``datafusion`` Python package.

Example:
    >>> from datafusion import SessionContext
    >>> from datafusion_distributed_py import DistributedContext
    >>> ctx = SessionContext()
    >>> df = DistributedContext(ctx).sql("SELECT 1 AS one")
    >>> df.to_pylist()
    [{'one': 1}]
"""

from __future__ import annotations

import atexit
import sys
from typing import TYPE_CHECKING

import datafusion as _datafusion

from datafusion_distributed_py._build import DATAFUSION_MAJOR
from datafusion_distributed_py._compat import check_datafusion_major

# Before loading the Rust core: a mismatched wheel would fail later with an obscure FFI error.
check_datafusion_major(_datafusion.__version__, DATAFUSION_MAJOR)

from datafusion_distributed_py import _internal, patches  # noqa: E402

# Registered first, so it runs last of the exit handlers: from then on the core's threads (and
# queries still running in daemon threads) never enter Python, which would abort the exit.
atexit.register(_internal.close_interpreter)

# What this package changes in datafusion, each change with its reason: `patches.PATCHES`.
patches.install()
from datafusion_distributed_py import progress  # noqa: E402
from datafusion_distributed_py.cluster import LocalCluster  # noqa: E402
from datafusion_distributed_py.config import DistributedConfig  # noqa: E402
from datafusion_distributed_py.context import DistributedContext  # noqa: E402
from datafusion_distributed_py.dataframe import ran_on  # noqa: E402
from datafusion_distributed_py.errors import (  # noqa: E402
    DistributedError,
    UnsupportedPlanError,
    UnsupportedTableError,
    WorkerError,
)
from datafusion_distributed_py.functions import register_functions  # noqa: E402
from datafusion_distributed_py.metrics_endpoint import serve_metrics  # noqa: E402
from datafusion_distributed_py.progress import ProgressEvent  # noqa: E402
from datafusion_distributed_py.ray_cluster import RayCluster  # noqa: E402
from datafusion_distributed_py.resolvers import dns_workers  # noqa: E402
from datafusion_distributed_py.security import Security  # noqa: E402
from datafusion_distributed_py.task_metrics import MetricsRecord  # noqa: E402

if TYPE_CHECKING:
    from datafusion_distributed_py.worker import Worker

__version__: str = _internal.__version__


def __getattr__(name: str) -> object:
    # `Worker` is loaded on first use so that `python -m datafusion_distributed_py.worker`
    # does not find its module already imported by this package.
    if name == "Worker":
        from datafusion_distributed_py.worker import Worker

        return Worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(shell: object) -> None:
    """``%load_ext datafusion_distributed_py``: the ``%%sql`` / ``%sql`` magics and
    ``%dfdpy_context`` (see :mod:`datafusion_distributed_py.notebook`)."""
    from datafusion_distributed_py import notebook

    notebook.load_ipython_extension(shell)


# In a notebook, metrics tables show as HTML from the start (other tables unchanged).
if progress.in_notebook():
    from datafusion_distributed_py import notebook as _notebook

    _notebook.register_formatters(sys.modules["IPython"].get_ipython())

__all__ = [
    "DATAFUSION_MAJOR",
    "DistributedConfig",
    "DistributedContext",
    "DistributedError",
    "LocalCluster",
    "MetricsRecord",
    "ProgressEvent",
    "RayCluster",
    "Security",
    "UnsupportedPlanError",
    "UnsupportedTableError",
    "Worker",
    "WorkerError",
    "__version__",
    "dns_workers",
    "serve_metrics",
    "load_ipython_extension",
    "ran_on",
    "register_functions",
]
