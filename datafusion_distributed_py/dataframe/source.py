"""Where a frame runs: its distributed plan, or the single-node fallback and why."""

from __future__ import annotations

from dataclasses import dataclass

from datafusion import DataFrame

from datafusion_distributed_py import _internal


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
