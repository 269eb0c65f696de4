"""Exceptions raised by datafusion-distributed-py."""

from __future__ import annotations

from datafusion_distributed_py._internal import (
    DistributedError,
    UnsupportedPlanError,
    WorkerError,
)


class UnsupportedTableError(UnsupportedPlanError):
    """The query cannot be distributed (a table only this process can read, such as a pyarrow
    dataset, or a plan part that cannot travel) and ``DistributedConfig(fallback="error")``
    asked for a refusal rather than a single-node run."""


__all__ = ["DistributedError", "UnsupportedPlanError", "UnsupportedTableError", "WorkerError"]
