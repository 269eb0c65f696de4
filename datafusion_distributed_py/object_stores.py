"""Object stores registered on a ``SessionContext``, described so workers can rebuild them.

datafusion-python keeps object stores inside its Rust runtime, out of reach over FFI, and its
store objects do not expose their settings. So, when this package is imported, it records
how each ``datafusion.object_store.*`` store is constructed and on which session it is
registered (``ctx.register_object_store``); planning passes those descriptions to the Rust
core, which registers the stores on the coordinator's runtime and sends them to worker
processes in a request header (never in plans or logs). Import ``datafusion_distributed_py``
before creating stores; a store built earlier raises a clear error when a query needs it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import datafusion
import datafusion.object_store as _object_store

#: Python store class name -> (kind, Rust option key for each constructor argument).
_KINDS: dict[str, tuple[str, dict[str, str]]] = {
    "AmazonS3": (
        "s3",
        {
            "bucket_name": "aws_bucket",
            "region": "aws_region",
            "access_key_id": "aws_access_key_id",
            "secret_access_key": "aws_secret_access_key",
            "session_token": "aws_session_token",
            "endpoint": "aws_endpoint",
            "allow_http": "aws_allow_http",
            "imdsv1_fallback": "aws_imdsv1_fallback",
        },
    ),
    "Http": ("http", {"url": "url"}),
    "LocalFileSystem": ("local", {"prefix": "prefix"}),
    "GoogleCloud": ("gcs", {}),
    "MicrosoftAzure": ("azure", {}),
}
_ARG_ORDER = {
    "AmazonS3": [
        "bucket_name", "region", "access_key_id", "secret_access_key", "session_token",
        "endpoint", "allow_http", "imdsv1_fallback",
    ],
    "Http": ["url"],
    "LocalFileSystem": ["prefix"],
    "GoogleCloud": ["bucket_name"],
    "MicrosoftAzure": ["container_name"],
}  # fmt: skip

_lock = threading.Lock()
#: id(store) -> (store, kind, options); the store is kept so its id stays unique.
_stores: dict[int, tuple[Any, str, dict[str, str]]] = {}
#: session id -> {url prefix: id(store) or None when the store's settings are unknown}
_sessions: dict[str, dict[str, int | None]] = {}


class UnknownStore:
    """Placeholder for a store whose settings were not recorded."""


def _describe(cls_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, str]:
    kind, keys = _KINDS[cls_name]
    named = dict(zip(_ARG_ORDER[cls_name], args, strict=False)) | kwargs
    options = {}
    for name, value in named.items():
        if value is None or name not in keys:
            continue
        options[keys[name]] = str(value).lower() if isinstance(value, bool) else str(value)
    return options


def _recording(cls: type) -> Any:
    name = cls.__name__

    @functools.wraps(cls, updated=())
    def make(*args: Any, **kwargs: Any) -> Any:
        store = cls(*args, **kwargs)
        with _lock:
            _stores[id(store)] = (store, _KINDS[name][0], _describe(name, args, kwargs))
        return store

    make.__wrapped_store_class__ = cls  # type: ignore[attr-defined]
    return make


def _url(schema: str, host: str | None) -> str:
    scheme = schema.split("://")[0].rstrip(":/")
    return f"{scheme}://{host or ''}"


def install() -> None:
    """Start recording store construction and registration (idempotent)."""
    ctx_cls = datafusion.SessionContext
    if getattr(ctx_cls.register_object_store, "__dfdpy__", False):
        return
    for name in _KINDS:
        cls = getattr(_object_store, name, None)
        if cls is not None and not hasattr(cls, "__wrapped_store_class__"):
            setattr(_object_store, name, _recording(cls))
    original = ctx_cls.register_object_store

    @functools.wraps(original)
    def register_object_store(
        self: datafusion.SessionContext, schema: str, store: Any, host: str | None = None
    ) -> None:
        original(self, schema, store, host)
        with _lock:
            known = id(store) if id(store) in _stores else None
            _sessions.setdefault(self.session_id(), {})[_url(schema, host)] = known

    register_object_store.__dfdpy__ = True  # type: ignore[attr-defined]
    ctx_cls.register_object_store = register_object_store  # type: ignore[method-assign]


def stores_of(ctx: datafusion.SessionContext) -> list[tuple[str, str, dict[str, str]]]:
    """``(url, kind, options)`` of every store registered on ``ctx`` with known settings."""
    with _lock:
        registered = dict(_sessions.get(ctx.session_id(), {}))
        out = []
        for url, key in registered.items():
            if key is None:
                out.append((url, "unknown", {}))
                continue
            _, kind, options = _stores[key]
            out.append((url, kind, options))
    return out
