"""A distributed frame's streams (``execute_stream``, ``for batch in df``, its Arrow C stream):
errors translated as they come, and a lost worker told with the rows delivered before it
(a stream is not run again once it handed rows on)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from datafusion import RecordBatch
from datafusion.record_batch import RecordBatchStream

from datafusion_distributed_py import _internal
from datafusion_distributed_py.dataframe.errors import (
    AsSingleNode,
    with_rows_delivered,
    worker_error,
)
from datafusion_distributed_py.dataframe.naming import named
from datafusion_distributed_py.dataframe.source import Source
from datafusion_distributed_py.errors import WorkerError


class TranslatedStream(RecordBatchStream):
    """A ``RecordBatchStream`` (``execute_stream``, ``for batch in df``) whose errors are
    raised as :func:`translate` gives them: a lost worker mid-stream is a
    :class:`WorkerError`, as it is from ``collect``. Rows already handed to the caller cannot
    be taken back, so a stream is not run again once it delivered one: its ``WorkerError``
    says how many rows were delivered (``.rows_delivered``), and none is repeated."""

    def __init__(
        self, rbs: Any, source: Source | None = None, names: tuple[str, ...] | None = None
    ) -> None:
        super().__init__(rbs)
        self._dfdpy_source = source
        self._dfdpy_names = names
        self._dfdpy_rows = 0

    def __next__(self) -> RecordBatch:
        with _Delivered(self):
            return self._counted(super().__next__())

    async def __anext__(self) -> RecordBatch:
        with _Delivered(self):
            return self._counted(await super().__anext__())

    def _counted(self, batch: RecordBatch) -> RecordBatch:
        self._dfdpy_rows += batch.to_pyarrow().num_rows
        if self._dfdpy_names is None:
            return batch
        return _NamedBatch(named(batch.to_pyarrow(), self._dfdpy_names))


class _Delivered(AsSingleNode):
    """As :class:`AsSingleNode` for a stream's next batch; a ``WorkerError`` tells the rows
    the stream delivered before it."""

    def __init__(self, stream: TranslatedStream) -> None:
        super().__init__(stream._dfdpy_source)
        self.stream = stream

    def __exit__(self, kind: type | None, err: BaseException | None, tb: object) -> None:
        try:
            super().__exit__(kind, err, tb)
        except WorkerError as e:
            raise with_rows_delivered(e, self.stream._dfdpy_rows) from None
        if isinstance(err, WorkerError):
            raise with_rows_delivered(err, self.stream._dfdpy_rows) from None


class _NamedBatch(RecordBatch):
    """A batch of a stream, its columns given single-node's names (see ``Origin.names``)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch

    def to_pyarrow(self) -> pa.RecordBatch:
        return self._batch

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        capsules: tuple[object, object] = self._batch.__arrow_c_array__(requested_schema)
        return capsules


def streams_translated(out: Any, source: Source, names: tuple[str, ...] | None = None) -> Any:
    """``out`` with each ``RecordBatchStream`` in it made a :class:`TranslatedStream`
    (its batches given ``names``, if any: see ``Origin.names``)."""
    if isinstance(out, RecordBatchStream):
        return TranslatedStream(out.rbs, source, names)
    if isinstance(out, list) and out and all(isinstance(s, RecordBatchStream) for s in out):
        return [TranslatedStream(s.rbs, source, names) for s in out]
    return out


def batches_delivered(
    reader: pa.RecordBatchReader, source: Source, names: tuple[str, ...] | None
) -> Iterator[pa.RecordBatch]:
    """``reader``'s batches (given ``names``); its run's worker failure raised as the
    ``WorkerError`` it is, with the rows delivered before it."""
    delivered = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except Exception:
            failure = (
                source.last_failure() if isinstance(source, _internal.DistributedPlan) else None
            )
            if failure is None:
                raise
            url, kind, message = failure
            raise with_rows_delivered(worker_error(message, url, kind), delivered) from None
        delivered += batch.num_rows
        yield batch if names is None else named(batch, names)
