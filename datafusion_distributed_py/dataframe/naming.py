"""Single-node's column names given back to a result whose names repeat (``SELECT *`` of a
join whose sides share ``id``; see ``Origin.names``): the distributed result, read through a
table provider, carries them made distinct."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def named(out: Any, names: tuple[str, ...] | None) -> Any:
    """A result read from the distributed frame (a table, batches, a schema, pandas frame:
    whatever a method returned), its columns given single-node's ``names`` (see
    ``Origin.names``); anything else as it is."""
    if names is None:
        return out
    if isinstance(out, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(out.columns, schema=schema_named(out.schema, names))
    if isinstance(out, pa.Table):
        return pa.Table.from_arrays(out.columns, schema=schema_named(out.schema, names))
    if isinstance(out, pa.Schema):
        return schema_named(out, names)
    if isinstance(out, list):
        return [named(o, names) for o in out]
    if type(out).__module__.startswith("pandas") and hasattr(out, "columns"):
        out.columns = list(names)
    return out


def schema_named(schema: pa.Schema, names: tuple[str, ...]) -> pa.Schema:
    return pa.schema(
        [field.with_name(name) for field, name in zip(schema, names, strict=True)],
        metadata=schema.metadata,
    )
