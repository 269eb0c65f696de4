"""Which kept table a DML statement writes into, and how a ``DELETE`` or ``UPDATE`` of one
is made.

A kept table is registered on the user's ``SessionContext`` as a table provider of ours. When
the session plans ``INSERT INTO name ...`` it resolves ``name`` itself and asks that provider
for the insert's plan; ours answers with a node whose name carries the table's id, and node
names cross DataFusion's FFI boundary. So an ``INSERT`` is routed to the workers only when
the session's own table of that name is, right now, one of our kept tables — never one a
user registered over it since.

A ``DELETE`` or ``UPDATE`` of a kept table is a new version of it: the query of its contents
after the statement runs on the workers, kept there, and replaces the table in one step.
"""

from __future__ import annotations

from datafusion import DataFrame, SessionContext
from datafusion.expr import DmlStatement

from datafusion_distributed_py import _internal

_ID_LENGTH = 36  # a UUID as text


def is_append(dml: DmlStatement) -> bool:
    """Whether ``dml`` is ``INSERT INTO`` (not ``INSERT OVERWRITE``, ``REPLACE``, ``DELETE``,
    ``UPDATE``)."""
    return str(dml.op().name()).strip().lower() == "insert into"


def kept_target(insert: DataFrame) -> _internal.KeptTable | None:
    """The kept table the ``INSERT`` frame ``insert`` writes into, or None when its target is
    any other table (or the statement cannot be planned: its own error surfaces when run)."""
    try:
        plan = insert.execution_plan().display_indent()
    except Exception:  # datafusion raises plain Exception subclasses
        return None
    prefix = _internal.append_exec_prefix()
    at = plan.find(prefix)
    if at < 0:
        return None
    start = at + len(prefix)
    return _internal.kept_table(plan[start : start + _ID_LENGTH])


def kept_table_named(ctx: SessionContext, table: str) -> _internal.KeptTable | None:
    """The kept table the session's table ``table`` (as a statement names it) is, if any:
    asked by planning an insert of no rows into it."""
    try:
        probe = ctx.sql(f"INSERT INTO {table} SELECT * FROM {table} WHERE false")
    except Exception:  # not a table one can insert into: the statement's own error follows
        return None
    return kept_target(probe)


def rewritten_contents(
    ctx: SessionContext, kind: str, table: str, where: str | None, sets: dict[str, str]
) -> tuple[str, str]:
    """The query of a kept table's contents after ``DELETE FROM table WHERE where`` or
    ``UPDATE table SET sets WHERE where`` (SQL text as written), and the query counting the
    rows the statement touches. A row is touched where ``where`` is true (not null)."""
    touched = f"({where}) IS TRUE" if where else "true"
    count = f"SELECT count(*) AS n FROM {table} WHERE {touched}"
    if kind == "delete":
        return f"SELECT * FROM {table} WHERE NOT ({touched})", count
    names = ctx.table(table).schema().names
    columns = [
        f"CASE WHEN {touched} THEN ({sets[n]}) ELSE {_quoted(n)} END AS {_quoted(n)}"
        if n in sets
        else _quoted(n)
        for n in names
    ]
    return f"SELECT {', '.join(columns)} FROM {table}", count


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
