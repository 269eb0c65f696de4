"""Functions of extension packages, registered on a session by naming the package.

Functions compiled in another library (datafusion's FFI: ``datafusion-extra-functions``, a
``datafusion-ffi-example``-style package) carry no code a plan could ship: they travel by name
and each worker runs its own copy. So each worker registers them too, and the simplest way is
naming the package: ``LocalCluster(2, functions=["datafusion_extra_functions"])``, the worker
CLI's ``--functions``, ``RayCluster(functions=...)``; and on the coordinator's session,
:func:`register_functions`.

A package is read in one of two shapes:

* it lists its functions (``list_functions()``) and hands each out by name
  (``udf_by_name`` / ``udaf_by_name`` / ``udwf_by_name``);
* or its module-level objects (instances, or classes built without arguments) export a
  function capsule (``__datafusion_scalar_udf__``, ``__datafusion_aggregate_udf__``,
  ``__datafusion_window_udf__``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from datafusion import SessionContext, udaf, udf, udwf

#: The capsule each kind of FFI function exports, and how datafusion-python registers it.
_KINDS: tuple[tuple[str, Callable[[SessionContext, Any], None]], ...] = (
    ("__datafusion_scalar_udf__", lambda ctx, f: ctx.register_udf(udf(f))),
    ("__datafusion_aggregate_udf__", lambda ctx, f: ctx.register_udaf(udaf(f))),
    ("__datafusion_window_udf__", lambda ctx, f: ctx.register_udwf(udwf(f))),
)

#: The by-name getters of a package that lists its functions.
_GETTERS = ("udf_by_name", "udaf_by_name", "udwf_by_name")


def register_functions(ctx: SessionContext, package: str | ModuleType) -> list[str]:
    """Register every function ``package`` exports on ``ctx``; return their names.

    Args:
        ctx: the session to register on (the coordinator's, or a worker's in its setup).
        package: an imported module or its import name (``"datafusion_extra_functions"``).

    Raises:
        ImportError: the package is not installed here.
        ValueError: the package exports no DataFusion function this module can read.

    Example:
        >>> from datafusion import SessionContext
        >>> register_functions(SessionContext(), "json")
        Traceback (most recent call last):
            ...
        ValueError: package 'json' exports no DataFusion functions (no list_functions() with \
udf_by_name/udaf_by_name/udwf_by_name, and no module-level object with a \
__datafusion_*_udf__ capsule)
    """
    module = _import(package)
    names = []
    for name, function in _functions(module):
        for capsule, register in _KINDS:
            if hasattr(function, capsule):
                register(ctx, function)
                names.append(name)
                break
    if not names:
        raise ValueError(
            f"package {module.__name__!r} exports no DataFusion functions (no list_functions() "
            "with udf_by_name/udaf_by_name/udwf_by_name, and no module-level object with a "
            "__datafusion_*_udf__ capsule)"
        )
    return names


def register_all(ctx: SessionContext, packages: Iterable[str | ModuleType]) -> None:
    """:func:`register_functions` for each of ``packages`` (what a worker's ``functions``
    option does, before its setup)."""
    for package in packages:
        register_functions(ctx, package)


def _import(package: str | ModuleType) -> ModuleType:
    if isinstance(package, ModuleType):
        return package
    if not isinstance(package, str) or not package:
        raise TypeError(f"a package is a module or its import name, got {package!r}")
    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise ImportError(
            f"cannot import the function package {package!r} here ({e}); install it where "
            "this session runs (pip install ...)"
        ) from e


def _functions(module: ModuleType) -> Iterator[tuple[str, Any]]:
    """(name, function object) for what ``module`` exports, in either shape."""
    lister = getattr(module, "list_functions", None)
    getters = [getattr(module, g) for g in _GETTERS if callable(getattr(module, g, None))]
    if callable(lister) and getters:
        for name in lister():
            for get in getters:
                try:
                    yield name, get(name)
                    break
                except Exception:  # noqa: BLE001, S112 - another getter's kind
                    continue
        return
    for attr, value in sorted(vars(module).items()):
        if attr.startswith("_") or not any(hasattr(value, c) for c, _ in _KINDS):
            continue
        if inspect.isclass(value):
            try:
                value = value()
            except TypeError:  # needs arguments: not a ready-made function
                continue
        yield attr, value
