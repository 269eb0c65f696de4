"""What each session's lakehouse tables need beyond the table itself: why one runs
single-node, and the object stores their files live on."""

from __future__ import annotations

import threading

import datafusion

from datafusion_distributed_py import object_stores

_lock = threading.Lock()
#: session id -> table name -> why that table's queries run single-node
_single_node: dict[str, dict[str, str]] = {}


def mark_single_node(ctx: datafusion.SessionContext, name: str, reason: str | None) -> None:
    """Remember (or, with ``reason=None``, forget) why table ``name`` of ``ctx`` cannot be
    read by workers."""
    with _lock:
        tables = _single_node.setdefault(ctx.session_id(), {})
        if reason is None:
            tables.pop(name, None)
        else:
            tables[name] = reason


def single_node_reason(ctx: datafusion.SessionContext, name: str) -> str | None:
    """Why table ``name`` registered on ``ctx`` runs single-node, or None.

    Example:
        >>> from datafusion import SessionContext
        >>> single_node_reason(SessionContext(), "t") is None
        True
    """
    with _lock:
        return _single_node.get(ctx.session_id(), {}).get(name)


def register(
    ctx: datafusion.SessionContext,
    name: str,
    provider: object,
    stores: list[object_stores.StoreSpec],
    reason: str | None = None,
) -> None:
    """Register ``provider`` on ``ctx`` as ``name``, with why it runs single-node (None: it
    runs on the workers, reading its files from ``stores``)."""
    ctx.register_table(name, provider)
    mark_single_node(ctx, name, reason)
    add_stores(ctx, stores)


def add_stores(ctx: datafusion.SessionContext, stores: list[object_stores.StoreSpec]) -> None:
    """Make ``stores`` known to ``ctx``'s distributed queries (workers rebuild them), unless
    the user registered a store for that URL already."""
    for url, kind, options in stores:
        object_stores.record(ctx, url, (kind, options))
