"""Which kept table an ``INSERT`` writes into.

A kept table is registered on the user's ``SessionContext`` as a table provider of ours. When
the session plans ``INSERT INTO name ...`` it resolves ``name`` itself and asks that provider
for the insert's plan; ours answers with a node whose name carries the table's id, and node
names cross DataFusion's FFI boundary. So an ``INSERT`` is routed to the workers only when
the session's own table of that name is, right now, one of our kept tables — never one a
user registered over it since.
"""

from __future__ import annotations

from datafusion import DataFrame
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
