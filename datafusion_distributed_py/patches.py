"""Everything importing this package changes in ``datafusion``, in one list.

Each :class:`Patch` names the members it replaces and why: what datafusion-python hides (or
does in this process only) that a distributed query needs. The replacements are built by
the modules that own the work, from datafusion's own members, and put in place once by
:func:`install` (``import datafusion_distributed_py`` calls it); no module changes datafusion
otherwise. ``tests/house/test_patches.py`` pins the list against what an import really changes.

Example:
    >>> import datafusion
    >>> from datafusion_distributed_py.patches import PATCHES
    >>> [p.names for p in PATCHES if p.owner is datafusion.DataFrameWriteOptions]
    [('__init__',)]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import datafusion
import datafusion.object_store
from datafusion.user_defined import TableFunction

from datafusion_distributed_py import dataframe, object_stores, stream_tables, write_options
from datafusion_distributed_py.snapshot_tables import avro, datasets


@dataclass(frozen=True)
class Patch:
    """Members of ``owner`` (a class or module of datafusion) replaced by what ``make``
    returns (name -> new member), and why."""

    owner: type | ModuleType
    names: tuple[str, ...]
    why: str
    make: Callable[[], dict[str, Any]]


#: Every change importing this package makes to datafusion.
PATCHES: tuple[Patch, ...] = (
    Patch(
        datafusion.object_store,
        tuple(object_stores.store_classes()),
        "a store keeps no readable settings: each class records the arguments it was built "
        "with, so workers can build the user's stores again",
        object_stores.store_classes,
    ),
    Patch(
        datafusion.SessionContext,
        ("register_object_store", "deregister_object_store"),
        "a session lists no stores: which a session has is recorded for its queries",
        object_stores.registrations,
    ),
    Patch(
        datafusion.SessionContext,
        ("register_dataset",),
        "the wheel scans a pyarrow dataset by calling Python in this process: a dataset of "
        "files becomes a table over exactly those files, which workers read",
        datasets.registrations,
    ),
    Patch(
        datafusion.Table,
        ("__init__",),
        "Table(dataset) of files likewise becomes a table over exactly those files",
        datasets.table_init,
    ),
    Patch(
        TableFunction,
        ("__init__",),
        "a Python table function's result likewise (a dataset of files, rows held in memory)",
        datasets.function_init,
    ),
    Patch(
        datafusion.SessionContext,
        ("register_avro", "read_avro"),
        "the wheel cannot serialise its own Avro scans: local Avro files become a table our "
        "core scans and serialises",
        avro.registrations,
    ),
    Patch(
        datafusion.SessionContext,
        ("sql",),
        "an unbounded table keeps no record of the file it reads: the statement creating "
        "one is read again for it, so its scans can travel",
        stream_tables.statements,
    ),
    Patch(
        datafusion.DataFrameWriteOptions,
        ("__init__",),
        "write options keep their arguments unreadable: they are noted, so df.write_* can "
        "write from every task",
        write_options.remembering,
    ),
    Patch(
        datafusion.DataFrame,
        tuple(sorted(dataframe.replacements())),
        "frames this package returns are distributed queries: each public method (as "
        "frame_methods classifies it), the special methods Python looks up on the type "
        "(repr, the Arrow stream, df[...]) and df, the frame's core; plain frames unchanged",
        dataframe.replacements,
    ),
)


@functools.cache  # once per process
def install() -> None:
    """Put every patch of :data:`PATCHES` in place."""
    for patch in PATCHES:
        new = patch.make()
        if set(new) != set(patch.names):
            raise RuntimeError(f"patch of {patch.owner!r} made {sorted(new)}, not {patch.names}")
        for name, member in new.items():
            setattr(patch.owner, name, member)
