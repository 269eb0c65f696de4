"""Avro tables (``ctx.register_avro``, ``ctx.read_avro``) read by the workers.

The ``datafusion`` 55 wheel cannot serialise an Avro scan, so a plan reading one cannot
travel. Our core can: once this package is imported, ``register_avro`` and ``read_avro`` of
Avro files on the local filesystem make a table over exactly those files (a directory: every
file under it with the extension), with the schema the wheel infers for them, read by
DataFusion's own Avro scan — single-node too, so ``ctx.sql`` answers as before — and sent to
the workers like any file scan. Other Avro tables (partition columns, object stores, an
explicit object store) are registered as the wheel registers them, and their queries run
single-node, saying why.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import datafusion

from datafusion_distributed_py import _internal
from datafusion_distributed_py.core_specs import SnapshotSpec
from datafusion_distributed_py.snapshot_tables import registry


def registrations() -> dict[str, Any]:
    """``register_avro`` / ``read_avro`` of local files making tables the workers read (the
    wheel cannot serialise its own Avro scans)."""
    ctx_cls = datafusion.SessionContext
    plain_register, plain_read = ctx_cls.register_avro, ctx_cls.read_avro

    @functools.wraps(plain_register)
    def register_avro(
        self: datafusion.SessionContext,
        name: str,
        path: str | pathlib.Path,
        schema: Any = None,
        file_extension: str = ".avro",
        table_partition_cols: Any = None,
        object_store: Any = None,
    ) -> None:
        table = None
        if not table_partition_cols and object_store is None:
            inferred = plain_read(self, path, schema, None, file_extension).schema()
            table = avro_table(name, path, inferred, file_extension)
        if table is None:
            plain_register(
                self, name, path, schema, file_extension, table_partition_cols, object_store
            )
            return
        registry.register(self, name, table, [])

    @functools.wraps(plain_read)
    def read_avro(
        self: datafusion.SessionContext,
        path: str | pathlib.Path,
        schema: Any = None,
        file_partition_cols: Any = None,
        file_extension: str = ".avro",
        object_store: Any = None,
    ) -> datafusion.DataFrame:
        plain = plain_read(self, path, schema, file_partition_cols, file_extension, object_store)
        if file_partition_cols or object_store is not None:
            return plain
        table = avro_table(f"avro {path}", path, plain.schema(), file_extension)
        return plain if table is None else self.read_table(table)

    return {"register_avro": register_avro, "read_avro": read_avro}


def avro_table(
    name: str, path: str | pathlib.Path, schema: Any, file_extension: str
) -> _internal.SnapshotTable | None:
    """A table over the Avro files at ``path`` (local), or None for another place."""
    text = str(path)
    if "://" in text and not text.startswith("file://"):
        return None
    local = pathlib.Path(text.removeprefix("file://"))
    if local.is_dir():
        found = sorted(p for p in local.rglob(f"*{file_extension}") if p.is_file())
    elif local.is_file():
        found = [local]
    else:
        return None  # the wheel's own registration says what is wrong
    if not found:
        return None
    files: list[tuple[str, int, None, list[str | None], list[Any]]] = [
        (p.absolute().as_uri(), p.stat().st_size, None, [], []) for p in found
    ]
    return _internal.SnapshotTable(
        SnapshotSpec(name, schema.serialize().to_pybytes(), [], False, files, None, [], "avro")
    )
