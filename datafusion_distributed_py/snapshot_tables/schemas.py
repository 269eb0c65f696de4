"""The Arrow schema a lakehouse table shows: as DataFusion shows a Parquet table's."""

from __future__ import annotations

import pyarrow as pa

#: DataFusion 55 reads Parquet strings and binaries as view types
#: (``datafusion.execution.parquet.schema_force_view_types``), as deltalake's provider does.
_VIEWS = {
    pa.string(): pa.string_view(),
    pa.large_string(): pa.string_view(),
    pa.binary(): pa.binary_view(),
    pa.large_binary(): pa.binary_view(),
}


def as_datafusion_reads(schema: pa.Schema) -> pa.Schema:
    """``schema`` with view types for strings and binaries, and no field metadata (an
    Iceberg field id is the format's business, not a column's).

    Example:
        >>> as_datafusion_reads(pa.schema([("s", pa.large_string()), ("n", pa.int64())]))
        s: string_view
        n: int64
    """
    return pa.schema([pa.field(f.name, _VIEWS.get(f.type, f.type), f.nullable) for f in schema])
