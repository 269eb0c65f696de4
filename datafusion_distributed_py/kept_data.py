"""Data kept on the workers: in-memory tables sent there once, results kept there
(``CREATE TABLE AS``, ``cache()``), and the DML statements that change a kept table
(``INSERT INTO``, ``DELETE``, ``UPDATE``), each checked against single-node's rows."""

from __future__ import annotations

import pyarrow as pa
from datafusion import DataFrame, LogicalPlan
from datafusion.expr import DmlStatement

from datafusion_distributed_py import _internal, kept_dml, planning
from datafusion_distributed_py.dataframe import ran_for
from datafusion_distributed_py.engine import Engine
from datafusion_distributed_py.errors import UnsupportedPlanError
from datafusion_distributed_py.fallback_reasons import scanned_tables
from datafusion_distributed_py.plan_facts import MEMORY_SCAN

#: The result of a statement that returns no rows, as ``ctx.sql``'s.
NO_ROWS = "SELECT 1 WHERE false"


def keep(
    engine: Engine, df: DataFrame, name: str, original: pa.RecordBatchReader | None = None
) -> _internal.KeptTable | None:
    """``df``'s result kept on the workers that compute it, as the kept table ``name``; None
    when ``df`` runs single-node (the fallback, warned about as for any query). ``original``:
    the rows of the in-memory table ``df`` reads whole, held by the kept table (to send again
    if a worker is lost, and for single-node to read here)."""
    feed = engine.feed(f"keep {name}: {planning.describe(df)}")
    try:
        if original is not None:  # its rows are sent, not a plan holding them
            request = planning.request_for(engine, feed)
        else:
            _, request = planning.request(engine, df, feed)
        return engine.coordinator.keep(name, request, original=original)
    except UnsupportedPlanError as e:
        planning.fallback(engine, e, df)  # warns, or raises under fallback="error"
        return None


def keep_memory_tables(engine: Engine, df: DataFrame, plan: LogicalPlan | None = None) -> bool:
    """Sends each in-memory table ``df`` reads of more than ``keep_tables_above`` bytes to the
    workers once, and registers it on ``ctx`` again as the kept table reading it there
    (single-node reads the same rows here). True when any was: frames made before that still
    carry the rows in their plans, so the caller makes ``df`` again."""
    ctx, kept_any = engine.ctx, False
    plan = plan if plan is not None else df.logical_plan()  # read once by a caller that has it
    for name, ref in scanned_tables(plan).items():
        rows = _rows_to_keep(engine, ref)
        if rows is None or sum(b.nbytes for b in rows) <= engine.config.keep_tables_above:
            continue
        table = ctx.table(ref)
        original = pa.RecordBatchReader.from_batches(table.schema(), rows)
        kept = keep(engine, table, name, original=original)
        if kept is None:
            continue
        ctx.deregister_table(ref)
        ctx.register_table(ref, kept)
        kept_any = True
    return kept_any


def _rows_to_keep(engine: Engine, ref: str) -> list[pa.RecordBatch] | None:
    """The rows of table ``ref`` when it is an in-memory table (zero-copy) that may hold more
    than ``keep_tables_above`` bytes, else None.

    datafusion-python 55 does not tell a table's kind, so its scan's one-line display says
    (``DataSourceExec: partitions=.., partition_sizes=..`` is an in-memory scan). What is not
    in-memory is remembered by schema, so that a file table is not planned again for each
    query that reads it (each planning lists its files). An in-memory table's rows are
    collected only when its scan, serialised, is over half the limit: serialised, rows take
    about their bytes in memory, and serialising a small scan costs a few microseconds where
    collecting it plans it again (a tenth of a millisecond at every query).
    """
    try:
        table = engine.ctx.table(ref)
    except Exception:  # datafusion raises plain Exception subclasses
        return None
    schema = table.schema()
    if engine.not_in_memory.get(ref) == schema:
        return None
    node = table.execution_plan()
    while not node.display().startswith("DataSourceExec") and len(node.children()) == 1:
        node = node.children()[0]  # a projection over the scan
    if not (node.display().startswith(MEMORY_SCAN) and not node.children()):
        engine.not_in_memory[ref] = schema
        return None
    try:
        serialised = len(node.to_bytes())
    except Exception:  # a type the plan's encoding lacks: sized by its rows instead
        serialised = engine.config.keep_tables_above
    if 2 * serialised <= engine.config.keep_tables_above:
        return None
    return table.collect()


def cache(engine: Engine, df: DataFrame, sql: str) -> DataFrame:
    """``df.cache()`` of a distributed frame: its result kept on the workers, and a frame
    reading it there (single-node's ``cache()`` when the query runs single-node)."""
    kept = keep(engine, df, f"cache of {sql}")
    if kept is None:
        return planning.distribute(engine, df.cache(), f"{sql} \u2192 cache()")
    ran_for(df, kept.made_by())
    return planning.lazy(engine, engine.ctx.read_table(kept), f"{sql} \u2192 cache()")


def insert_into_kept(
    engine: Engine, single_node: DataFrame, sql: str, plan: LogicalPlan | None = None
) -> DataFrame | None:
    """``single_node`` when it is an ``INSERT INTO`` a kept table (from ``dctx.sql`` or a
    frame given to ``distribute``): a frame whose every run runs the statement's input on the
    workers, each task keeping its rows as the table's where it ran (none pass through here),
    and gives the count; the rows join the table at once when all are held. An input that
    cannot be distributed runs single-node (``single_node``, warned about as for any query),
    its rows sent to the workers. None for any other frame."""
    plan = plan if plan is not None else single_node.logical_plan()
    dml = plan.to_variant()
    if not isinstance(dml, DmlStatement) or not kept_dml.is_append(dml):
        return None
    into = kept_dml.kept_target(single_node)
    if into is None:
        return None
    (input_plan,) = plan.inputs()  # the rows as the table takes them: cast, reordered
    rows = engine.ctx.create_dataframe_from_logical_plan(input_plan)
    feed = engine.feed(f"insert into {into.name}: {sql}")
    try:
        _, request = planning.request(engine, rows, feed)
    except UnsupportedPlanError as e:
        planning.fallback(engine, e, rows)  # warns, or raises under fallback="error"
        return single_node
    return engine.ctx.read_table(engine.coordinator.insert(into, request))


def rewrite_kept(
    engine: Engine,
    kind: str,
    table: str,
    where: str | None,
    assignments: list[tuple[str, str]],
    single_node: DataFrame,
) -> DataFrame | None:
    """``DELETE`` or ``UPDATE`` of a kept table: its new contents kept on the workers (a query
    over the table as it is), registered in its place at once, and the count; None when
    ``table`` is not a kept table. It runs when the statement is made."""
    ctx = engine.ctx
    into = kept_dml.kept_table_named(ctx, table)
    if into is None:
        return None
    sql, count = kept_dml.rewritten_contents(ctx, kind, table, where, dict(assignments))
    feed = engine.feed(f"{kind} {into.name}: {sql}")
    try:
        _, request = planning.request(engine, ctx.sql(sql), feed)
        # The rows an UPDATE touches (a DELETE's are told by the rows it leaves).
        touched = planning.distribute(engine, ctx.sql(count), count) if kind == "update" else None
    except UnsupportedPlanError as e:
        planning.fallback(engine, e, single_node)  # warns, or raises under fallback="error"
        return single_node
    matched = touched.to_pylist()[0]["n"] if touched is not None else 0
    kept = engine.coordinator.keep(into.name, request, replacing=into)
    if kind == "delete":
        matched = into.rows - kept.rows  # `into` is retired now: its rows stay as read
    ctx.deregister_table(table)
    ctx.register_table(table, kept)
    return ctx.from_arrow(pa.table({"count": pa.array([matched], pa.uint64())}))


def create_table_as(
    engine: Engine, sql: str, name: str, select: str, or_replace: bool, if_not_exists: bool
) -> DataFrame:
    """``CREATE [OR REPLACE] TABLE name [IF NOT EXISTS] AS select``: the result kept on the
    workers and ``name`` registered on ``ctx`` as a table reading it there."""
    ctx = engine.ctx
    if ctx.table_exist(name) and not or_replace:
        return ctx.sql(sql)  # single-node's error, or nothing (IF NOT EXISTS)
    selected = ctx.sql(select)
    names = selected.schema().names
    if len(set(names)) < len(names):  # a table of repeated names: single-node's error
        return ctx.sql(sql)
    kept = keep(engine, selected, name)
    if kept is None:
        return ctx.sql(sql)
    if ctx.table_exist(name):
        ctx.deregister_table(name)
    ctx.register_table(name, kept)
    return ctx.sql(NO_ROWS)
