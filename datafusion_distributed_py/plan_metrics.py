"""datafusion-python's metrics API on a distributed frame.

After a run, ``df.execution_plan()`` of a single-node frame is the plan that ran, each
operator with its metrics (``metrics().output_rows``, ``collect_metrics()``). A distributed
frame answers with its single-node plan, and each operator carries the metrics its
counterpart in the distributed plan recorded, summed over the tasks that ran it. The two
trees are matched in order, operator by operator (the distributed one has network
boundaries and task leaves besides).

Example:
    >>> from datafusion import SessionContext
    >>> from datafusion_distributed_py import DistributedContext
    >>> ctx = SessionContext()
    >>> df = DistributedContext(ctx).sql("SELECT v FROM generate_series(1, 100) t(v)")
    >>> _ = df.collect()
    >>> df.execution_plan().collect_metrics()[0][1].output_rows
    100
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from datafusion.plan import ExecutionPlan, Metric, MetricsSet

#: ``(metric name, value, timestamp in ns, partition, labels)`` as the core reports it.
MetricRow = tuple[str, int | None, int | None, int | None, dict[str, str]]
#: ``(operator name, one-line display, stage, metrics)`` per operator of the run, in pre-order.
Operator = tuple[str, str, int, Sequence[MetricRow]]


class RunMetric(Metric):
    """One metric of a distributed run, as datafusion's :class:`~datafusion.plan.Metric`."""

    def __init__(self, row: MetricRow) -> None:
        self._row = row

    @property
    def name(self) -> str:
        return self._row[0]

    @property
    def value(self) -> int | datetime.datetime | None:
        return self._row[1] if self._row[2] is None else self.value_as_datetime

    @property
    def value_as_datetime(self) -> datetime.datetime | None:
        ns = self._row[2]
        if ns is None:
            return None
        return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)

    @property
    def partition(self) -> int | None:
        return self._row[3]

    def labels(self) -> dict[str, str]:
        return dict(self._row[4])

    def __repr__(self) -> str:
        return f"Metric({self.name}={self.value!r}, partition={self.partition})"


class RunMetrics(MetricsSet):
    """An operator's metrics of a distributed run, as datafusion's
    :class:`~datafusion.plan.MetricsSet` (each sum over every partition of every task)."""

    def __init__(self, rows: Sequence[MetricRow]) -> None:
        self._rows = list(rows)

    def metrics(self) -> list[Metric]:
        return [RunMetric(r) for r in self._rows]

    def sum_by_name(self, name: str) -> int | None:
        values = [r[1] for r in self._rows if r[0] == name and r[1] is not None]
        return sum(values) if values else None

    @property
    def output_rows(self) -> int | None:
        return self.sum_by_name("output_rows")

    @property
    def elapsed_compute(self) -> int | None:
        return self.sum_by_name("elapsed_compute")

    @property
    def spill_count(self) -> int | None:
        return self.sum_by_name("spill_count")

    @property
    def spilled_bytes(self) -> int | None:
        return self.sum_by_name("spilled_bytes")

    @property
    def spilled_rows(self) -> int | None:
        return self.sum_by_name("spilled_rows")

    def __repr__(self) -> str:
        names = dict.fromkeys(r[0] for r in self._rows)
        return ", ".join(f"{n}={self.sum_by_name(n)}" for n in names)


class RunExecutionPlan(ExecutionPlan):
    """A node of the single-node plan carrying the metrics the distributed run recorded."""

    def __init__(
        self, node: ExecutionPlan, metrics: MetricsSet | None, children: list[ExecutionPlan]
    ) -> None:
        super().__init__(node._raw_plan)
        self._run_metrics = metrics
        self._run_children = children

    def children(self) -> list[ExecutionPlan]:
        return list(self._run_children)

    def metrics(self) -> MetricsSet | None:
        return self._run_metrics


def with_run_metrics(plan: ExecutionPlan, operators: Sequence[Operator]) -> ExecutionPlan:
    """``plan`` (the single-node plan of the query) with each operator's metrics taken from
    its match among ``operators`` (the run's, in pre-order); an operator with no match keeps
    its own (unrun) metrics."""
    nodes: list[ExecutionPlan] = []

    def flatten(node: ExecutionPlan) -> None:
        nodes.append(node)
        for child in node.children():
            flatten(child)

    flatten(plan)
    lines = [n.display().strip() for n in nodes]
    matches = _align(lines, [(name, line) for name, line, _, _ in operators])

    position = iter(range(len(nodes)))

    def build(node: ExecutionPlan) -> ExecutionPlan:
        i = next(position)
        children = [build(c) for c in node.children()]
        j = matches.get(i)
        metrics = RunMetrics(operators[j][3]) if j is not None else node.metrics()
        return RunExecutionPlan(node, metrics, children)

    return build(plan)


def _name(line: str) -> str:
    return line.split(":", 1)[0].strip()


def _align(lines: list[str], operators: list[tuple[str, str]]) -> dict[int, int]:
    """Single-node operator index -> run operator index: the order-keeping matching of most
    weight (same display 3, same operator name 2), by dynamic programming (plans have tens of
    operators)."""
    n, m = len(lines), len(operators)

    def weight(i: int, j: int) -> int:
        name, line = operators[j]
        if line == lines[i]:
            return 3
        return 2 if name == _name(lines[i]) else 0

    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            w = weight(i, j)
            take = best[i + 1][j + 1] + w if w else 0
            best[i][j] = max(take, best[i + 1][j], best[i][j + 1])
    matches: dict[int, int] = {}
    i = j = 0
    while i < n and j < m:
        w = weight(i, j)
        if w and best[i][j] == best[i + 1][j + 1] + w:
            matches[i] = j
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return matches
