"""What a ``SessionContext``'s runtime allows: its memory pool's size and spill directories.

The embedded cluster's tasks run in this process on a runtime of ours (datafusion-python's
runtime does not cross the FFI boundary); it is built to the same budget, read from the
session's ``datafusion.runtime.*`` settings as DataFusion itself reports them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from datafusion import SessionContext

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class RuntimeBudget:
    """A session runtime's limits.

    Attributes:
        memory_limit: bytes of the memory pool (None: unbounded). DataFusion reports it in
            whole units — MiB below 1 GiB, GiB above — so it is read rounded down to those.
        spill_dirs: directories its spill files go to (empty: the system's temporary one).
        max_spill_bytes: the most bytes its spill files may take together.
    """

    memory_limit: int | None = None
    spill_dirs: list[str] = field(default_factory=list)
    max_spill_bytes: int | None = None


def parse_size(text: str | None) -> int | None:
    """Bytes of a size as DataFusion prints it (``"57M"``, ``"1G"``, ``"976K"``, ``"512"``);
    None for ``"unlimited"`` or nothing.

    Example:
        >>> parse_size("57M"), parse_size("1G"), parse_size("unlimited")
        (59768832, 1073741824, None)
    """
    if text is None:
        return None
    m = _SIZE.match(text)
    if m is None:
        return None
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def runtime_budget(ctx: SessionContext) -> RuntimeBudget:
    """The memory pool size and spill directories of ``ctx``'s runtime.

    Example:
        >>> from datafusion import RuntimeEnvBuilder, SessionConfig
        >>> runtime = RuntimeEnvBuilder().with_fair_spill_pool(300 * 1024 * 1024)
        >>> runtime_budget(SessionContext(SessionConfig(), runtime)).memory_limit
        314572800
        >>> runtime_budget(SessionContext()).memory_limit is None
        True
    """
    settings = _runtime_settings(ctx)
    dirs = []
    temp = settings.get("datafusion.runtime.temp_directory")
    for path in (temp or "").split(","):
        path = path.strip()
        if path:
            # DataFusion reports the directory it made inside the one the user named.
            parent, leaf = os.path.split(path.rstrip("/"))
            dirs.append(parent if leaf.startswith("datafusion-") else path)
    return RuntimeBudget(
        memory_limit=parse_size(settings.get("datafusion.runtime.memory_limit")),
        spill_dirs=dirs,
        max_spill_bytes=parse_size(settings.get("datafusion.runtime.max_temp_directory_size")),
    )


_QUERY = (
    "SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'datafusion.runtime.%'"
)


def _runtime_settings(ctx: SessionContext) -> dict[str, str | None]:
    """``ctx``'s ``datafusion.runtime.*`` settings, as its information schema lists them (turned
    on for the read when it is off, and off again)."""
    try:
        rows = ctx.sql(_QUERY).to_pylist()
    except Exception:  # the information schema is off: turn it on for this read only
        ctx.sql("SET datafusion.catalog.information_schema = true")
        try:
            rows = ctx.sql(_QUERY).to_pylist()
        finally:
            ctx.sql("SET datafusion.catalog.information_schema = false")
    return {r["name"]: r["value"] for r in rows}
