"""Unbounded file tables (``CREATE UNBOUNDED EXTERNAL TABLE ... STORED AS CSV | JSON``) read
by the workers.

The ``datafusion`` 55 wheel makes such a table a ``StreamTable`` whose scan has no
serialised form and keeps no record of the file it reads, so a plan reading one could not
travel. Once this package is imported, a statement creating one over a local file runs as
before (the wheel's own table, checks and errors; single-node is unchanged), and what the
table reads (file, encoding, header, schema, order, read again from the statement by
DataFusion's parser) is recorded for the session. A distributed query scanning such tables
announces them to the serialiser, which writes each scan as the file it reads
(``src/file_stream.rs``); workers read the file at its absolute path.
"""

from __future__ import annotations

import functools
import re
import weakref
from typing import Any

import datafusion
from datafusion import LogicalPlan, SessionContext

from datafusion_distributed_py import _internal
from datafusion_distributed_py.plan_facts import scan_nodes

# Only statements that may create an unbounded table are read again (by DataFusion's parser).
_MAYBE_UNBOUNDED = re.compile(r"^\s*CREATE\b.*\bUNBOUNDED\b", re.IGNORECASE | re.DOTALL)

#: Per session: each unbounded file table made by SQL, by its name as SQL names it (quoted
#: where needed) -> what it reads (the codec's spec).
_TABLES: weakref.WeakKeyDictionary[SessionContext, dict[str, str]] = weakref.WeakKeyDictionary()


def statements() -> dict[str, Any]:
    """``SessionContext.sql`` recording what the unbounded file tables it makes read (the
    wheel's table keeps no record of its file)."""
    ctx_cls = datafusion.SessionContext
    plain_sql = ctx_cls.sql

    @functools.wraps(plain_sql)
    def sql(self: SessionContext, query: str, *args: Any, **kwargs: Any) -> Any:
        created = _unbounded_table(self, query)
        if created is None:
            return plain_sql(self, query, *args, **kwargs)
        name, if_not_exists, spec = created
        existed = if_not_exists and self.table_exist(name)
        result = plain_sql(self, query, *args, **kwargs)
        if not existed:
            _TABLES.setdefault(self, {})[name] = spec
        return result

    return {"sql": sql}


def _unbounded_table(ctx: SessionContext, query: object) -> tuple[str, bool, str] | None:
    """What ``query`` creates when it is an unbounded table over one local file; None for any
    other statement, and for text our reading fails on (the wheel then answers as it does)."""
    if not isinstance(query, str) or not _MAYBE_UNBOUNDED.match(query):
        return None
    try:
        return _internal.unbounded_table(query, ctx)
    except Exception:  # the wheel's own run of the statement says what is wrong with it
        return None


def scanned(ctx: SessionContext, logical: LogicalPlan, stream_scans: int) -> list[str] | None:
    """The specs of the unbounded file tables ``logical`` scans, when its physical plan's
    ``stream_scans`` stream scans are exactly their scans; None otherwise (another kind of
    stream scan, a table dropped or made again otherwise since): the plan then does not
    serialise, and the query says so."""
    known = _TABLES.get(ctx, {})
    scans = 0
    specs: dict[str, str] = {}
    for _, scan in scan_nodes(logical):
        name = _registered_name(known, scan.fqn())
        if name is not None:
            scans += 1
            specs[name] = known[name]
    if scans != stream_scans or not all(_is_stream_table(ctx, n) for n in specs):
        return None
    return list(specs.values())


def recorded(ctx: SessionContext, table: str) -> bool:
    """Whether ``table`` (a name as a query writes it) is an unbounded file table of ``ctx``
    made by SQL."""
    last = table.split(".")[-1].strip('"')
    return any(name.split(".")[-1].strip('"') == last for name in _TABLES.get(ctx, {}))


def _registered_name(known: dict[str, str], fqn: tuple[str | None, ...]) -> str | None:
    """The recorded table a scan of ``fqn`` (catalog, schema, table) reads, if any."""
    parts = [p for p in fqn if p is not None]
    for length in range(len(parts), 0, -1):
        name = ".".join(_quoted(p) for p in parts[-length:])
        if name in known:
            return name
    return None


def _quoted(part: str) -> str:
    """``part`` as DataFusion writes a name part: bare when lower-case letters, digits and _."""
    return part if re.fullmatch(r"[a-z_][a-z0-9_]*", part) else '"' + part.replace('"', '""') + '"'


def _is_stream_table(ctx: SessionContext, name: str) -> bool:
    """Whether ``name`` is still the wheel's stream table: its scan is ``StreamingTableExec``."""
    try:
        return ctx.table(name).execution_plan().display().startswith("StreamingTableExec:")
    except Exception:  # datafusion raises plain Exception subclasses
        return False
