"""What a query's plans tell that their bytes do not: read from datafusion-python's plans
before the physical plan is serialised, and sent beside it to the core.

datafusion-python 55 gives a physical node's one-line display and its children, not its type
or fields; the serialiser drops a few things the core needs back (a recursive query's name,
a window aggregate's ``FILTER``, a CSV/JSON scan's compression). One walk of the physical
plan says which of these a query has (:func:`physical_facts`); the logical plan is read
only for those it has, so a plain query pays for one walk of its displays.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from datafusion import DataFrame, ExecutionPlan, LogicalPlan, SessionContext
from datafusion.expr import TableScan

#: Our own leaves, as datafusion-python shows a foreign node: their scans go through the
#: session carrying our codec.
_OUR_LEAVES = ("FFI_ExecutionPlan: SnapshotScanExec", "FFI_ExecutionPlan: KeptScanExec")
_RECURSIVE = "RecursiveQueryExec: name="
#: A window expression's name keeps its ``FILTER``, the physical plan's bytes do not.
_WINDOW_FILTER = " FILTER (WHERE "
_TEXT_FILES = re.compile(r"file_type=(csv|json)\b")
_STREAM_SCAN = "StreamingTableExec:"
#: How a scan of rows held in memory (``MemorySourceConfig``) begins its one-line display.
MEMORY_SCAN = "DataSourceExec: partitions="
_PARTIAL_SORT = re.compile(
    r"^PartialSortExec: (?:TopK\(fetch=(\d+)\), )?expr=\[(.*)\], common_prefix_length=\[(\d+)\]$"
)
#: A sort column as DataFusion shows it: nulls last is written out, nulls first is not.
_SORT_COLUMN = re.compile(r"(.+?)@(\d+) (ASC|DESC)( NULLS LAST)?(?:, |$)")
_FETCH = re.compile(r", fetch=(\d+)")


#: A partial sort as its display tells it: ``([(column, index, descending, nulls_first)],
#: common_prefix_length, fetch)``.
PartialSort = tuple[list[tuple[str, int, bool, bool]], int, "int | None"]


def _partial_sort(text: str) -> PartialSort | None:
    """A ``PartialSortExec``'s display read back, when it sorts by plain columns.

    Example:
        >>> _partial_sort("PartialSortExec: TopK(fetch=5), expr=[a@0 ASC NULLS LAST, "
        ...               "d@2 DESC], common_prefix_length=[1]")
        ([('a', 0, False, False), ('d', 2, True, True)], 1, 5)
    """
    found = _PARTIAL_SORT.match(text.strip())
    if found is None:
        return None
    fetch, exprs, prefix = found.groups()
    columns = [
        (m.group(1), int(m.group(2)), m.group(3) == "DESC", m.group(4) is None)
        for m in _SORT_COLUMN.finditer(exprs)
    ]
    shown = ", ".join(
        f"{n}@{i} {'DESC' if d else 'ASC'}{'' if f else ' NULLS LAST'}" for n, i, d, f in columns
    )
    if shown != exprs:
        return None  # an expression, not a column: no announcement, the plan stays here
    return columns, int(prefix), int(fetch) if fetch else None


@dataclass
class PhysicalFacts:
    """What one walk of a physical plan's displays found (see the module)."""

    #: It scans a lakehouse, dataset or kept table (our leaves).
    reads_our_leaves: bool = False
    #: ``(name, is_distinct)`` of each ``RecursiveQueryExec``, depth first with children in
    #: order: the order the plan's serialiser meets them.
    recursive_queries: list[tuple[str, bool]] = field(default_factory=list)
    #: A window aggregate has a ``FILTER (WHERE ...)``.
    filters_windows: bool = False
    #: It reads CSV or NDJSON files (whose compression the bytes leave out).
    reads_text_files: bool = False
    #: It holds a top-N per group heap (``enable_window_topn``), which the bytes cannot hold.
    window_topn: bool = False
    #: The limit of each stream scan (``StreamingTableExec``: unbounded tables and others),
    #: None where it reads all.
    stream_scans: list[int | None] = field(default_factory=list)
    #: Each ``PartialSortExec`` of plain columns: its columns (name, index, descending,
    #: nulls first), common prefix and limit (DataFusion 55's encoding has no form for it).
    partial_sorts: list[PartialSort] = field(default_factory=list)
    #: It scans rows held in memory (an in-memory table, ``VALUES``).
    reads_memory_rows: bool = False


def physical_facts(physical: ExecutionPlan) -> PhysicalFacts:
    """:class:`PhysicalFacts` of ``physical``, in one walk."""
    facts = PhysicalFacts()
    pending = [physical]
    while pending:
        node = pending.pop()
        text = node.display()
        if text.startswith(_OUR_LEAVES):
            facts.reads_our_leaves = True
        elif text.startswith(_RECURSIVE):
            name, _, distinct = text[len(_RECURSIVE) :].rpartition(", is_distinct=")
            facts.recursive_queries.append((name, distinct.strip() == "true"))
        elif text.startswith(MEMORY_SCAN) and not node.children():
            facts.reads_memory_rows = True
        elif text.startswith("DataSourceExec:") and _TEXT_FILES.search(text):
            facts.reads_text_files = True
        elif "Window" in text and _WINDOW_FILTER in text:
            facts.filters_windows = True
        elif text.startswith("PartitionedTopKExec:"):
            facts.window_topn = True
        elif text.startswith("PartialSortExec:"):
            sort = _partial_sort(text)
            if sort is not None:
                facts.partial_sorts.append(sort)
        elif text.startswith(_STREAM_SCAN):
            fetch = _FETCH.search(text)
            facts.stream_scans.append(int(fetch.group(1)) if fetch else None)
        pending.extend(reversed(node.children()))
    return facts


#: Held while a session plans with ``enable_window_topn`` off (see :func:`without_window_topn`).
_WINDOW_TOPN_OFF = threading.Lock()


def without_window_topn(ctx: SessionContext, df: DataFrame) -> ExecutionPlan:
    """``df``'s physical plan made with ``datafusion.optimizer.enable_window_topn`` off: the
    heap that setting plans has no serialised form, so the core plans it again on the plan
    without it (``src/plan_rewrites/window_topn.rs``). The setting is the session's: a query
    another thread plans on it meanwhile plans without the heap — the same rows."""
    with _WINDOW_TOPN_OFF:
        ctx.sql("SET datafusion.optimizer.enable_window_topn = false")
        try:
            return ctx.create_dataframe_from_logical_plan(df.logical_plan()).execution_plan()
        finally:
            ctx.sql("SET datafusion.optimizer.enable_window_topn = true")


def optimized(df: DataFrame) -> LogicalPlan:
    """The plan the physical plan was made from (subqueries decorrelated into joins, so
    every scanned table is reached by ``inputs()``); the unoptimised one if that fails."""
    try:
        return df.optimized_logical_plan()
    except Exception:  # datafusion raises plain Exception subclasses
        return df.logical_plan()


def filtered_windows(logical: LogicalPlan) -> list[bytes]:
    """The window expressions of ``logical`` (see :func:`optimized`) that have a
    ``FILTER (WHERE ...)``, as logical expression bytes (the physical plan's bytes leave the
    filter out)."""
    found = []
    pending = [logical]
    while pending:
        plan = pending.pop()
        pending.extend(plan.inputs())
        try:
            window = plan.to_variant()
        except Exception:  # a node datafusion-python gives no variant for
            continue
        if type(window).__name__ != "WindowExpr":
            continue
        for expr in window.get_window_expr():
            if _WINDOW_FILTER in expr.schema_name():
                found.append(expr.to_bytes())
    return found


def scan_nodes(logical: LogicalPlan) -> Iterator[tuple[LogicalPlan, TableScan]]:
    """Each table scan of ``logical``, depth first with inputs in order: the node and its
    variant.

    Example:
        >>> from datafusion import SessionContext
        >>> ctx = SessionContext()
        >>> _ = ctx.from_pydict({"a": [1]}, name="t")
        >>> plan = ctx.sql("SELECT * FROM t JOIN t AS u USING (a)").logical_plan()
        >>> [str(scan.table_name()) for _, scan in scan_nodes(plan)]
        ['t', 't']
    """
    pending = [logical]
    while pending:
        node = pending.pop()
        variant = node.to_variant()
        if isinstance(variant, TableScan):
            yield node, variant
        pending.extend(reversed(node.inputs()))


def table_scans(logical: LogicalPlan) -> list[bytes]:
    """The scans (serialised) of ``logical``'s tables (see :func:`optimized`): the format
    options of CSV and NDJSON tables carry the compression the physical plan's bytes leave
    out, which the core gives back to the scans."""
    scans: list[bytes] = []
    for node, _ in scan_nodes(logical):
        # A table with no serialised scan reads no files: nothing to give back.
        with contextlib.suppress(Exception):
            scans.append(node.to_bytes())
    return scans
