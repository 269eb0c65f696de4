"""Object stores registered on a ``SessionContext``, described so workers can rebuild them.

datafusion-python keeps object stores inside its Rust runtime, out of reach over FFI, and its
store objects do not expose their settings. So, when this package is imported, the classes of
``datafusion.object_store`` are replaced by subclasses of the same names whose instances
remember how they were constructed, and ``ctx.register_object_store`` /
``ctx.deregister_object_store`` remember which store serves which URL of which session.
Planning passes those descriptions to the Rust core, which registers the stores on the
coordinator's runtime and sends them to worker processes in a request header (never in plans
or logs). Import ``datafusion_distributed_py`` before creating stores; a store built earlier
raises a clear error when a query needs it.

Example:
    >>> import datafusion
    >>> from datafusion.object_store import LocalFileSystem
    >>> store = LocalFileSystem(prefix="/tmp")
    >>> isinstance(store, LocalFileSystem)
    True
    >>> ctx = datafusion.SessionContext()
    >>> ctx.register_object_store("file://", store, None)
    >>> stores_of(ctx)
    [('file://', 'local', {'prefix': '/tmp'})]
    >>> ctx.deregister_object_store("file://", None)
    >>> stores_of(ctx)
    []
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

import datafusion
import datafusion.object_store as _object_store

#: Python store class name -> (kind, Rust option key of each constructor argument we forward).
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

#: What a store needs on workers: its kind and the Rust options it was built with.
Settings = tuple[str, dict[str, str]]
#: ``(url, kind, options)`` of a registered store, as the Rust core takes them.
StoreSpec = tuple[str, str, dict[str, str]]

#: The attribute of a store built by a recording class that holds its :data:`Settings`.
_SETTINGS_ATTR = "_datafusion_distributed_settings"

_lock = threading.Lock()
#: session id -> {url prefix: the store's settings, or None when they are unknown}
_sessions: dict[str, dict[str, Settings | None]] = {}


class _StoreClass(type):
    """Metaclass of the recording store classes: a store built from the original class
    (before this package was imported, say) is an instance of the recording class too."""

    __wrapped_store_class__: type

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls.__wrapped_store_class__)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.__wrapped_store_class__)


def _recording(cls: type) -> type:
    """A subclass of the store class ``cls``, of the same name, whose instances remember
    their :data:`Settings`."""
    name = cls.__name__
    kind, keys = _KINDS[name]
    signature = inspect.signature(cls)

    def __new__(sub: type, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        store = cls.__new__(sub, *args, **kwargs)
        options: dict[str, str] = {}
        for arg, value in signature.bind(*args, **kwargs).arguments.items():
            if value is not None and arg in keys:
                options[keys[arg]] = str(value).lower() if isinstance(value, bool) else str(value)
        setattr(store, _SETTINGS_ATTR, (kind, options))
        return store

    namespace = {
        "__new__": __new__,
        "__module__": _object_store.__name__,
        "__qualname__": name,
        "__doc__": cls.__doc__,
        "__signature__": signature,
        "__wrapped_store_class__": cls,
    }
    return _StoreClass(name, (cls,), namespace)


def _settings(store: object) -> Settings | None:
    settings = getattr(store, _SETTINGS_ATTR, None)
    return settings if isinstance(settings, tuple) else None


def _url(schema: str, host: str | None) -> str:
    scheme = schema.split("://")[0].rstrip(":/")
    return f"{scheme}://{host or ''}"


def store_classes() -> dict[str, Any]:
    """``datafusion.object_store``'s store classes, each recording the arguments it was built
    with (datafusion keeps no readable settings on a store): workers rebuild the stores."""
    return {
        name: _recording(cls)
        for name in _KINDS
        if isinstance(cls := getattr(_object_store, name, None), type)
        and not isinstance(cls, _StoreClass)
    }


def registrations() -> dict[str, Any]:
    """``SessionContext.(de)register_object_store`` recording which stores each session has
    (datafusion lists none)."""
    ctx_cls = datafusion.SessionContext
    register = ctx_cls.register_object_store
    deregister = ctx_cls.deregister_object_store

    @functools.wraps(register)
    def register_object_store(
        self: datafusion.SessionContext, schema: str, store: Any, host: str | None = None
    ) -> None:
        register(self, schema, store, host)
        with _lock:
            _sessions.setdefault(self.session_id(), {})[_url(schema, host)] = _settings(store)

    @functools.wraps(deregister)
    def deregister_object_store(
        self: datafusion.SessionContext, schema: str, host: str | None = None
    ) -> None:
        deregister(self, schema, host)
        with _lock:
            _sessions.get(self.session_id(), {}).pop(_url(schema, host), None)

    # On the class: every session, however created, records its stores.
    return {
        "register_object_store": register_object_store,
        "deregister_object_store": deregister_object_store,
    }


def record(ctx: datafusion.SessionContext, url: str, settings: Settings) -> None:
    """Record a store for ``url`` that ``ctx``'s distributed queries need (a table's own
    files), unless one is registered for that URL already."""
    with _lock:
        _sessions.setdefault(ctx.session_id(), {}).setdefault(url, settings)


def stores_of(ctx: datafusion.SessionContext) -> list[StoreSpec]:
    """``(url, kind, options)`` of every store registered on ``ctx``; the kind is
    ``"unknown"`` for a store whose settings were not recorded."""
    with _lock:
        registered = dict(_sessions.get(ctx.session_id(), {}))
    out: list[StoreSpec] = []
    for url, settings in registered.items():
        kind, options = settings or ("unknown", {})
        out.append((url, kind, dict(options)))
    return out
