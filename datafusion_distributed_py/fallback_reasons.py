"""Why a query cannot run on the workers, said as a person reads it: which tables or which
operator stopped its plan from serialising and what to do instead, result types that changed
in serialisation, and DataFusion's error text without its bug-report footer."""

from __future__ import annotations

import logging
import re

import pyarrow as pa
from datafusion import DataFrame, ExecutionPlan, LogicalPlan, SessionContext
from datafusion.expr import CopyTo, DmlStatement

from datafusion_distributed_py import stream_tables
from datafusion_distributed_py.errors import UnsupportedPlanError, UnsupportedTableError
from datafusion_distributed_py.plan_facts import optimized, scan_nodes
from datafusion_distributed_py.snapshot_tables.registry import single_node_reason

_log = logging.getLogger("datafusion_distributed_py")

#: The node a serialiser error names (``... Plan: PartialSortExec { ...``).
_UNWRITTEN_NODE = re.compile(r"\]\. Plan: (\w+)")
#: What DataFusion appends to an internal error: a request for a bug report, not our user's
#: next step.
_BUG_FOOTER = re.compile(r"\s*This issue was likely caused by a bug in DataFusion.*?issues", re.S)
#: A Rust struct printed whole (FFI function pointers, plan properties): for debugging only.
_STRUCT_DUMP = re.compile(r"[.:]?\s*(Plan|Expr): [A-Z]\w* \{.*", re.S)


def readable_reason(reason: str) -> str:
    """A fallback reason as a person reads it: without DataFusion's bug-report footer or Rust
    structs printed whole (the full text goes to DEBUG logging).

    Example:
        >>> readable_reason("no codec [x]. Plan: ForeignExecutionPlan { plan: 0x7f00 }.")
        'no codec [x]'
        >>> readable_reason("a cause. This issue was likely caused by a bug in DataFusion's"
        ...                 " code. Please ... https://github.com/apache/datafusion/issues")
        'a cause.'
    """
    text = _BUG_FOOTER.sub("", reason)
    text = _STRUCT_DUMP.sub("", text)
    return text.strip()


def check_result_types(single_node: pa.Schema, distributed: pa.Schema) -> None:
    """Refuse (as not distributable) a plan whose result types or field metadata changed in
    serialisation (DataFusion 55 writes a Float16 literal as a Float32 one, and drops a
    literal's metadata, for instance)."""
    for want, got in zip(single_node, distributed, strict=False):
        if not _same_kind(want.type, got.type):
            raise UnsupportedPlanError(
                f"its column {want.name!r} is {want.type} single-node but {got.type} once the "
                "plan is serialised (DataFusion 55's plan serialisation changes the type)"
            )
        if (want.metadata or {}) != (got.metadata or {}):
            raise UnsupportedPlanError(
                f"its column {want.name!r} carries field metadata {_shown(want.metadata)} "
                f"single-node but {_shown(got.metadata)} once the plan is serialised "
                "(DataFusion 55's plan serialisation drops a literal's field metadata)"
            )


def _shown(metadata: dict[bytes, bytes] | None) -> str:
    pairs = (metadata or {}).items()
    return repr({k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs})


def _same_kind(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether two result types are the same up to what DataFusion itself lets differ between
    a logical plan and its physical plan (decimal precision, string and binary encodings)."""
    if a == b:
        return True
    text = (pa.types.is_string, pa.types.is_large_string, lambda t: str(t) == "string_view")
    binary = (pa.types.is_binary, pa.types.is_large_binary, lambda t: str(t) == "binary_view")
    for group in ((pa.types.is_decimal,), text, binary):
        if any(f(a) for f in group) and any(f(b) for f in group):
            return True
    return False


def unsupported(
    ctx: SessionContext, df: DataFrame, err: Exception, user_ctx: SessionContext | None = None
) -> UnsupportedTableError:
    """Explain why ``df``'s physical plan did not serialise: which tables, and what to do
    (``ctx`` the session it was serialised through, ``user_ctx`` the user's)."""
    plan = optimized(df)
    root = plan.to_variant()
    scans = scanned_tables(plan)
    # Unbounded file tables travel when announced (see `stream_tables`), alone they do not.
    streams = [n for n in scans if stream_tables.recorded(user_ctx or ctx, n)]
    # The tables that cannot travel are those whose scan alone does not serialise either.
    blocked = {
        name: ref
        for name, ref in scans.items()
        if name not in streams and not _serialises(ctx, ref)
    }
    kinds = {kind for ref in blocked.values() for kind in _scan_kinds(ctx, ref)}
    named = ", ".join(blocked or scans)
    where = f" (tables in the query: {named})" if named else ""
    found = _UNWRITTEN_NODE.search(str(err))
    node = found.group(1) if found else None
    if not blocked and node not in (
        None,
        "ForeignExecutionPlan",
        "FFI_ExecutionPlan",
        "LazyMemTableExec",
    ):
        # Every table travels: the operator the serialiser stopped at is the reason.
        where = f" (DataFusion 55 cannot serialise its {node})"
    hint = "Run it single-node with ctx.sql(...) instead."
    # DataFusion names a stream scan `LazyMemTableExec` in its debug text.
    if not blocked and streams and node in (None, "StreamingTableExec", "LazyMemTableExec"):
        where = f" (unbounded tables: {', '.join(streams)})"
        hint = (
            "An unbounded table is sent to workers as the file it reads, its scan told apart "
            "by the columns it shows: this query scans two such tables showing the same "
            "columns, or scans them with different limits. Run it single-node with "
            "ctx.sql(...), or give the tables' columns different names."
        )
    if isinstance(root, DmlStatement):
        statement, target = str(root.op().name()).upper(), str(root.table_name())
        where = f" (it writes into table {target})"
        hint = (
            f"{statement} {target} writes into a table held by this process (such as an "
            "in-memory table) and cannot run on workers; run it with ctx.sql(...).collect() "
            "instead."
        )
    elif isinstance(root, CopyTo) and "Arrow" in str(root.file_type()):
        where = f" (it writes Arrow IPC files to {root.output_url()})"
        hint = (
            "The datafusion 55 wheel cannot serialise an Arrow IPC file sink, so COPY ... STORED "
            "AS ARROW is written single-node; STORED AS PARQUET, CSV or JSON is written from "
            "every worker."
        )
    elif blocked:
        where = f" (tables that cannot be sent to workers: {named})"
        lakehouse = [r for r in (single_node_reason(ctx, n) for n in blocked) if r]
        if lakehouse:
            where = ""
            hint = "; ".join(lakehouse) + "."
        elif "avro" in kinds:
            hint = (
                "The datafusion 55 wheel cannot serialise the Avro scans of tables it makes "
                "itself (CREATE EXTERNAL TABLE ... STORED AS AVRO, or Avro files with "
                "partition columns or on an object store); register local Avro files with "
                "ctx.register_avro(name, path) (or ctx.read_avro(path)) to read them on the "
                "workers, or run the query single-node with ctx.sql(...)."
            )
        elif "dataset" in kinds:
            hint = (
                "pyarrow datasets (register_dataset) other than Parquet, JSON or Arrow IPC "
                "files on a local or S3 filesystem (CSV datasets among them: pyarrow parses "
                "CSV otherwise than DataFusion) are scanned by Python in this process and "
                "cannot be sent to workers; register the files with register_parquet/"
                "register_csv instead, or run the query single-node with ctx.sql(...)."
            )
        elif "delta" in kinds:
            hint = (
                "deltalake's own table provider is scanned in this process and cannot be sent "
                "to workers; register the table with dctx.register_delta(name, table) (or "
                "datafusion_distributed_py.lakehouse.register_delta) to read it on the workers."
            )
        elif "foreign" in kinds:
            hint = (
                "a table provider from another library (an FFI provider) is scanned in this "
                "process and cannot be sent to workers; register its files with "
                "register_parquet/register_csv (or Delta tables with register_delta) to read "
                "them on the workers."
            )
    # The serialiser's own text (FFI structs, pointers, a bug-report footer) is for debugging.
    _log.debug("serialising the plan failed: %s", err)
    return UnsupportedTableError(
        f"this query cannot be distributed: part of its plan cannot be sent to workers{where}. "
        f"{hint}"
    )


def scanned_tables(plan: LogicalPlan) -> dict[str, str]:
    """Each table ``plan`` scans: its name as written -> a quoted reference for ``ctx.table``."""
    tables: dict[str, str] = {}
    for _, scan in scan_nodes(plan):
        parts: tuple[str | None, ...] = scan.fqn()
        quoted = ['"' + p.replace('"', '""') + '"' for p in parts if p is not None]
        tables.setdefault(str(scan.table_name()), ".".join(quoted))
    return tables


def _serialises(ctx: SessionContext, table: str) -> bool:
    """True when a plain scan of ``table`` serialises (it can travel to workers)."""
    try:
        ctx.table(table).execution_plan().to_bytes(ctx)
    except Exception:  # datafusion raises plain Exception subclasses
        return False
    return True


def _scan_kinds(ctx: SessionContext, table: str) -> set[str]:
    """``"dataset"`` and/or ``"avro"`` when ``table``'s scan is a pyarrow dataset or an Avro
    file scan.

    datafusion-python 55 exposes no typed way to tell: ``Table.kind`` only tells tables from
    views, and an ``ExecutionPlan`` has no node type. So this reads each node's own one-line
    display (``"Name: details"``), the narrowest text there is, never an error message.
    """
    kinds: set[str] = set()
    try:
        pending: list[ExecutionPlan] = [ctx.table(table).execution_plan()]
    except Exception:  # datafusion raises plain Exception subclasses
        return kinds
    while pending:
        node = pending.pop()
        name, _, details = node.display().partition(":")
        if name.strip() == "DatasetExec":
            kinds.add("dataset")
        elif name.strip() in ("ForeignExecutionPlan", "FFI_ExecutionPlan"):
            kinds.add("delta" if "Delta" in details else "foreign")
        elif name.strip() == "DataSourceExec" and "file_type=avro" in details:
            kinds.add("avro")
        pending.extend(node.children())
    return kinds
