"""A frame drawn (``repr``, a notebook's HTML): the formatter's rule (``max_rows``,
``max_memory_bytes``, ``min_rows``) applied by the core where the rows arrive, so a run stops
where a single-node one would."""

from __future__ import annotations

import uuid

import pyarrow as pa
from datafusion import DataFrame
from datafusion.dataframe_formatter import get_formatter

from datafusion_distributed_py import _internal
from datafusion_distributed_py.dataframe.errors import translate
from datafusion_distributed_py.dataframe.naming import named
from datafusion_distributed_py.dataframe.origin import origin_of
from datafusion_distributed_py.dataframe.results import read_stream
from datafusion_distributed_py.dataframe.terminals import as_text, first_rows

_plain_repr = DataFrame.__repr__


_plain_repr_html = DataFrame._repr_html_


def _shown_rows(df: DataFrame) -> tuple[list[pa.RecordBatch], bool] | None:
    """The rows a frame's ``repr`` shows and whether there are more, for a distributed result
    read as it is: the formatter's rule (``max_rows``, ``max_memory_bytes``, ``min_rows``)
    applied by the core where the rows arrive, so the run stops where a single-node one
    would, not after the rows crossed into datafusion-python. None for other frames."""
    origin = origin_of(df)
    if origin is None or not origin.root:
        return None
    source = origin.source
    if not isinstance(source, _internal.DistributedPlan):
        return None
    formatter = get_formatter()
    try:
        stream, more = source.display_stream(
            formatter.max_memory_bytes, formatter.min_rows, formatter.max_rows
        )
        return named(read_stream(stream), origin.names), more
    except Exception as e:  # the query's own error, as the frame's other methods give it
        clean = translate(e, source)
        if clean is None:
            raise
        raise clean from e


def _shown(df: DataFrame, shown: tuple[list[pa.RecordBatch], bool], method: str) -> str:
    """``shown`` as datafusion-python draws a frame: through the formatter's ``method``."""
    batches, more = shown
    if not batches:
        return "No data to display"
    formatter = get_formatter()
    draw = getattr(formatter, method)
    return draw(  # type: ignore[no-any-return]
        batches=batches, schema=df.schema(), has_more=more, table_uuid=str(uuid.uuid4())
    )


def frame_repr(self: DataFrame) -> str:
    shown = _shown_rows(self)
    if shown is not None:
        return _shown(self, shown, "format_str")
    origin = origin_of(self)
    if origin is None or origin.names is None:
        return _plain_repr(self)
    batches, more = first_rows(self)
    return as_text(batches, self.schema(), more) if batches else "No data to display"


def frame_repr_html(self: DataFrame) -> str:
    shown = _shown_rows(self)
    if shown is not None:
        return _shown(self, shown, "format_html")
    origin = origin_of(self)
    if origin is None or origin.names is None:
        return _plain_repr_html(self)
    batches, more = first_rows(self)
    return get_formatter().format_html(batches, self.schema(), more, str(uuid.uuid4()))
