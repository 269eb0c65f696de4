"""Delta Lake and Iceberg tables that run on the workers.

A table format's snapshot is a list of data files (from its log, never a directory listing)
with partition values. :func:`register_delta` and :func:`register_iceberg` register, on a
``SessionContext``, a table over exactly those files: single-node ``ctx.sql`` reads it like
any table, and :class:`~datafusion_distributed_py.DistributedContext` sends its scan to the
workers as an ordinary Parquet scan, split into tasks. What the files alone cannot answer
faithfully (Delta deletion vectors or column mapping, Iceberg delete files or renamed columns)
is registered through the format's own reader instead, and the query says why it runs
single-node.

``deltalake`` and ``pyiceberg`` are optional (``pip install 'datafusion-distributed-py[delta]'``
or ``[iceberg]``) and imported only when used.
"""

from __future__ import annotations

from datafusion_distributed_py.lakehouse.delta import register_delta
from datafusion_distributed_py.lakehouse.iceberg import register_iceberg
from datafusion_distributed_py.snapshot_tables.registry import single_node_reason

__all__ = ["register_delta", "register_iceberg", "single_node_reason"]
