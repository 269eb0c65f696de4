"""Exceptions raised by datafusion-distributed-py."""

from __future__ import annotations

from datafusion_distributed_py._internal import DistributedError, WorkerError


class UnsupportedTableError(DistributedError):
    """A table in the query cannot be shipped to workers (e.g. a pyarrow dataset)."""


__all__ = ["DistributedError", "UnsupportedTableError", "WorkerError"]
