"""How a distributed frame shows itself (``repr``, ``_repr_html_``): datafusion-python's
formatter rule (``max_rows``, ``max_memory_bytes``, ``min_rows``) applied where the rows
arrive, the rest of the run dropped, as single-node stops its stream."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pyarrow as pa
import pytest
from datafusion import SessionContext, udf
from datafusion.dataframe_formatter import configure_formatter, reset_formatter

from datafusion_distributed_py import DistributedContext, LocalCluster, ran_on

MB = 1024 * 1024


@pytest.fixture
def clean_formatter() -> Iterator[None]:
    reset_formatter()
    yield
    reset_formatter()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2) as c:
        yield c


def rows_shown(html: str) -> int:
    return len(re.findall(r"<tr", html)) - 1  # the header row


BATCH_ROWS = 10_000


def multi_batch_session() -> SessionContext:
    """datafusion-python's own fixture for the formatter's early stop: 10 batches of 10,000
    rows, registered as record batches."""
    ctx = SessionContext()
    batches = []
    for b in range(10):
        start, end = b * BATCH_ROWS, (b + 1) * BATCH_ROWS
        batches.append(pa.record_batch({
            "a": list(range(start, end)),
            "b": [f"s-{i}" for i in range(start, end)],
            "c": [float(i + 0.1) for i in range(start, end)],
        }))  # fmt: skip
    ctx.register_record_batches("large_multi_batch_data", [batches])
    return ctx


@pytest.mark.parametrize("kind", ["embedded", "workers"])
@pytest.mark.parametrize("frame", ["table", "sql"])
def test_the_memory_limit_stops_a_stream_where_single_node_does(
    kind, frame, request, clean_formatter
):
    """datafusion-python's ``test_html_formatter_stream_early_termination`` on a distributed
    frame: each memory limit cuts the rows short as it cuts single-node's — on the embedded
    cluster at about the same row (within one source batch: the formatter cuts at batch
    boundaries, and the partitions' batches arrive in a different order from run to run), on
    worker processes sooner (their batches count the message they arrived in)."""
    workers = request.getfixturevalue("cluster") if kind == "workers" else None
    ctx = multi_batch_session()
    dctx = DistributedContext(ctx, workers=workers, progress=False)
    df = (
        dctx.table("large_multi_batch_data")
        if frame == "table"
        else dctx.sql("SELECT * FROM large_multi_batch_data")
    )
    single = ctx.table("large_multi_batch_data")
    configure_formatter(max_memory_bytes=100 * MB, min_rows=1, max_rows=200_000)
    everything = rows_shown(df._repr_html_())
    assert everything == rows_shown(single._repr_html_()) == 100_000
    assert ran_on(df) == "workers"

    for limit, min_rows, max_rows in [(3 * MB, 1, 200_000), (2 * MB, 10, 200_000)]:
        configure_formatter(max_memory_bytes=limit, min_rows=min_rows, max_rows=max_rows)
        html = df._repr_html_()
        shown, single_shown = rows_shown(html), rows_shown(single._repr_html_())
        assert min_rows <= shown < everything
        assert "data truncated" in html.lower()
        if kind == "embedded":
            assert abs(shown - single_shown) <= BATCH_ROWS, (shown, single_shown)
        else:
            assert shown <= single_shown, (shown, single_shown)

    configure_formatter(max_memory_bytes=10, min_rows=5, max_rows=200_000)
    html = df._repr_html_()
    assert rows_shown(html) == 5
    assert "data truncated" in html.lower()

    configure_formatter(max_memory_bytes=2 * MB, min_rows=1, max_rows=100)
    html = df._repr_html_()
    assert rows_shown(html) == 100
    assert "data truncated" in html.lower()


@pytest.mark.parametrize("kind", ["embedded", "workers"])
def test_shown_rows_are_single_nodes(kind, request, clean_formatter):
    """An ordered result shows single-node's first rows, in text and HTML, with its note that
    more rows exist."""
    workers = request.getfixturevalue("cluster") if kind == "workers" else None
    ctx = SessionContext()
    ctx.from_pydict({"k": list(range(500)), "v": [f"v{i}" for i in range(500)]}, name="t")
    dctx = DistributedContext(ctx, workers=workers, progress=False)
    query = "SELECT k, v FROM t WHERE k % 3 = 0 ORDER BY k DESC"
    configure_formatter(max_rows=7, min_rows=7)
    single, distributed = ctx.sql(query), dctx.sql(query)
    assert ran_on(distributed) == "workers"
    html = distributed._repr_html_()
    assert rows_shown(html) == rows_shown(single._repr_html_()) == 7
    for k in range(498, 498 - 7 * 3, -3):
        assert f">{k}<" in html and f">v{k}<" in html
    assert "data truncated" in html.lower()
    text = repr(distributed)
    assert text.splitlines()[3:10] == repr(single).splitlines()[3:10]
    assert "Data truncated." in text


def test_the_display_drops_the_rest_of_the_run(tmp_path, clean_formatter):
    """The rows past what is shown are not computed: the run is dropped once the formatter
    has its rows (counted by a function that notes each batch it sees in a file)."""
    seen = tmp_path / "seen.txt"

    def count(arr: pa.Array) -> pa.Array:
        with open(seen, "a") as out:  # travels by path: the function is sent to the workers
            out.write(f"{len(arr)}\n")
        return arr

    counted = udf(count, [pa.int64()], pa.int64(), "immutable", name="counted")
    ctx = SessionContext()
    ctx.register_udf(counted)
    batches = [pa.record_batch({"k": list(range(b * 1000, (b + 1) * 1000))}) for b in range(200)]
    ctx.register_record_batches("t", [batches])
    dctx = DistributedContext(ctx, progress=False)
    df = dctx.sql("SELECT counted(k) AS k FROM t")
    assert ran_on(df) == "workers"
    configure_formatter(max_rows=10, min_rows=10)
    assert rows_shown(df._repr_html_()) == 10
    counted_rows = sum(int(line) for line in seen.read_text().split())
    assert 0 < counted_rows < 100_000, counted_rows
