"""``write_parquet/csv/json`` of a distributed frame: the frame's rows written by ``COPY ...
TO``, planned distributed, each task writing its own files."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from datafusion import DataFrame, SessionContext
from datafusion.unparser import Dialect, Unparser

from datafusion_distributed_py.errors import UnsupportedPlanError
from datafusion_distributed_py.write_options import Copy


def copy(
    ctx: SessionContext,
    run_sql: Callable[[str], DataFrame],
    copy: Copy,
    path: str,
    stored_as: str,
) -> None:
    """Writes ``copy.frame``'s rows to ``path`` as ``COPY ... TO`` does, the statement run by
    ``run_sql`` (the context's ``sql``: distributed). Raises ``UnsupportedPlanError`` for a
    frame no ``COPY`` can name."""
    names = copy.frame.schema().names
    view = f"__dfdpy_write_{uuid.uuid4().hex}"
    if len(set(names)) == len(names):
        ctx.register_view(view, copy.frame)
        query = f"SELECT * FROM {view}"
    else:
        # A view cannot hold two columns of one name (`a.id`, `b.id`): the frame's plan,
        # written back as SQL, is the COPY's query instead.
        query = as_sql(ctx, copy.frame)
    try:
        quoted = ", ".join(f"'{k}' '{sql_str(v)}'" for k, v in copy.options.items())
        with_options = f" OPTIONS ({quoted})" if copy.options else ""
        columns = ", ".join(copy.partition_by)
        partitioned = f" PARTITIONED BY ({columns})" if copy.partition_by else ""
        run_sql(
            f"COPY ({query}) TO '{sql_str(path)}' STORED AS {stored_as}{partitioned}{with_options}"
        ).collect()
    finally:
        if ctx.table_exist(view):
            ctx.deregister_table(view)


def sql_str(text: str) -> str:
    """``text`` inside a SQL string literal.

    Example:
        >>> sql_str("it's")
        "it''s"
    """
    return text.replace("'", "''")


def as_sql(ctx: SessionContext, df: DataFrame) -> str:
    """``df``'s query as SQL text planning to the same result (its plan unparsed); raises
    ``UnsupportedPlanError`` when there is none (a frame reading a table with no name)."""
    try:
        sql = str(Unparser(Dialect.default()).plan_to_sql(df.logical_plan()))
        same = ctx.sql(sql).schema() == df.schema()
    except Exception as e:  # datafusion raises plain Exception subclasses
        raise UnsupportedPlanError(f"its plan cannot be written as SQL ({e})") from e
    if not same:
        raise UnsupportedPlanError("its plan, written as SQL, plans to another result")
    return sql
