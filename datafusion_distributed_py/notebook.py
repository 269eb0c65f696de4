"""The IPython extension: ``%load_ext datafusion_distributed_py``.

* ``%dfdpy_context dctx`` — the :class:`DistributedContext` the magics run on by default;
* ``%%sql [dctx] [-o name]`` — runs the cell's SQL distributed and shows the result frame (as
  datafusion's own HTML table); ``-o name`` also stores the frame as ``name``;
* ``%sql [dctx] [-o name] SELECT ...`` — the same on one line.

Loading it also gives the metrics tables of ``dctx.metrics_table(df)`` an HTML view (only
those tables: they carry a schema mark).
"""

from __future__ import annotations

import html
import re
from typing import Any

import pyarrow as pa

from datafusion_distributed_py.context import DistributedContext
from datafusion_distributed_py.task_metrics import METRICS_MARK

_OUT = re.compile(r"\s*(?:-o|--out)\s+([A-Za-z_]\w*)(?=\s|$)")
_WORD = re.compile(r"\s*([A-Za-z_]\w*)(?=\s|$)")


class SqlMagics:
    """``%%sql``, ``%sql`` and ``%dfdpy_context`` for one IPython shell."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.default: Any = None

    def context(self, line: str) -> None:
        """``%dfdpy_context dctx``: the context ``%%sql`` uses when it names none."""
        name = line.strip()
        self.default = self._context_named(name) if name else None
        if self.default is None:
            raise ValueError("usage: %dfdpy_context <name of a DistributedContext>")

    def sql(self, line: str, cell: str | None = None) -> Any:
        """``%%sql [dctx] [-o name]`` over the cell, or ``%sql [dctx] [-o name] query``."""
        rest, out, dctx = line, None, None
        while True:  # options first; the rest of the line is SQL, kept as written
            if m := _OUT.match(rest):
                out, rest = m.group(1), rest[m.end() :]
            elif dctx is None and (m := _WORD.match(rest)) and self._is_context(m.group(1)):
                dctx, rest = self._context_named(m.group(1)), rest[m.end() :]
            else:
                break
        if cell is not None and rest.strip():
            raise ValueError(f"%%sql takes [context] [-o name] before the cell, got {rest!r}")
        query = (cell if cell is not None else rest).strip().rstrip(";")
        if not query:
            raise ValueError("no SQL to run")
        df = (dctx if dctx is not None else self._default()).sql(query)
        if out is not None:
            self.shell.user_ns[out] = df
        return df

    def _is_context(self, name: str) -> bool:
        return isinstance(self.shell.user_ns.get(name), DistributedContext)

    def _context_named(self, name: str) -> Any:
        if not self._is_context(name):
            raise NameError(f"{name!r} is not a DistributedContext in this notebook")
        return self.shell.user_ns[name]

    def _default(self) -> Any:
        if self.default is not None:
            return self.default
        found = [v for v in self.shell.user_ns.values() if isinstance(v, DistributedContext)]
        if len(found) == 1:  # the only one there is
            return found[0]
        raise ValueError(
            "which DistributedContext? name it (%%sql dctx) or set a default with "
            "%dfdpy_context dctx" + (f" ({len(found)} are defined)" if found else "")
        )


def metrics_html(table: pa.Table) -> str | None:
    """An HTML table for ``metrics_table``'s tables; None (the usual view) for others."""
    if METRICS_MARK not in (table.schema.metadata or {}):
        return None
    head = "".join(f"<th>{html.escape(n)}</th>" for n in table.column_names)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row.values()) + "</tr>"
        for row in table.to_pylist()
    )
    return (
        f"<table class='dfdpy-metrics'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else str(value)


def register_formatters(shell: Any) -> None:
    """Shows ``metrics_table``'s tables as HTML in ``shell`` (other tables unchanged)."""
    formatter = shell.display_formatter.formatters["text/html"]
    formatter.for_type(pa.Table, metrics_html)


def load_ipython_extension(shell: Any) -> None:
    """Registers the magics and formatters on ``shell`` (``%load_ext``)."""
    magics = SqlMagics(shell)
    shell.register_magic_function(magics.sql, "line_cell", "sql")
    shell.register_magic_function(magics.context, "line", "dfdpy_context")
    register_formatters(shell)
