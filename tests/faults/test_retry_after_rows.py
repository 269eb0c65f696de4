"""A worker lost after rows have started flowing: whatever has handed no row on yet
(``collect``, ``to_arrow_table``, ``to_pandas``, ``write_parquet``, ``cache()``, ``CREATE
TABLE AS``...) runs again from the start on the workers left and answers single-node's rows;
a stream already handed to the user ends with a ``WorkerError`` saying how many rows it had
delivered — none repeated, none invented."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import SPLIT_CONFIG, assert_same_rows
from datafusion import DataFrameWriteOptions, SessionContext, udf

from datafusion_distributed_py import (
    DistributedContext,
    LocalCluster,
    ProgressEvent,
    WorkerError,
    ran_on,
)
from harness import tpch

pytestmark = pytest.mark.slow

#: Rows flow back to the coordinator as the scan tasks produce them (no aggregate holds them):
#: the issue's query, on the test's TPC-H.
FLOWING = (
    "SELECT l_orderkey, l_linenumber, score(l_comment) AS s FROM lineitem WHERE l_quantity > 25"
)


def slow_in(gate: str) -> Callable[[pa.Array], pa.Array]:
    """``score``: a string's length, slowly; ten times slower in the worker process whose pid
    the file ``gate`` holds (the victim). Any other process marks, after each batch, that
    rows of the query are flowing (``<gate>.flowed``). Every process adds the rows it scored to
    ``<gate>.scored``."""

    def score(a: pa.Array) -> pa.Array:
        victim = False
        with contextlib.suppress(OSError, ValueError):
            victim = int(Path(gate).read_text()) == os.getpid()
        time.sleep(len(a) * (0.001 if victim else 0.0001))
        with open(gate + ".scored", "a") as scored:  # rows scored, across the processes
            scored.write(f"{len(a)}\n")
        if not victim:
            Path(gate + ".flowed").touch()
        return pc.utf8_length(a)

    return score


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate") / "victim.pid"


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory, gate: Path) -> SessionContext:
    data = tpch.generate(tmp_path_factory.mktemp("tpch"), scale_factor=0.01, parts=3)
    # Row groups of 2,000 rows, as a large table has many: a task's files can be cut in
    # chunks (task-level recovery spools a chunk at a time).
    for file in (data / "lineitem").glob("*.parquet"):
        pq.write_table(pq.read_table(file), file, row_group_size=2000)
    ctx = SessionContext()
    tpch.register(ctx, data)
    score = slow_in(str(gate))
    ctx.register_udf(udf(score, [pa.string()], pa.int32(), "immutable", name="score"))
    ctx.sql("SET datafusion.execution.batch_size = 1024")
    return ctx


@pytest.fixture(scope="module")
def expected(slow: SessionContext) -> pa.Table:
    return slow.sql(FLOWING).to_arrow_table()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(2) as c:
        yield c


def healed(cluster: LocalCluster) -> None:
    """Waits until the cluster restarted the worker an earlier test killed."""
    cluster.wait_for_workers(timeout=30)


class Victim:
    """A worker process of the cluster, made slow (see ``slow_in``) and killed once the other
    worker's rows are flowing to the coordinator (a batch of them made, and a moment for the
    coordinator to receive it; ``after`` seconds), while the victim still works."""

    def __init__(
        self,
        cluster: LocalCluster,
        gate: Path,
        which: int = 1,
        *,
        on_flow: bool = True,
        after: float = 0.5,
    ) -> None:
        healed(cluster)
        self.process = cluster.processes[which]
        self.url = cluster.urls[which]
        self.flowed = Path(f"{gate}.flowed")
        self.flowed.unlink(missing_ok=True)
        self.gate = gate
        self.scored_before = 0
        Path(f"{gate}.scored").unlink(missing_ok=True)
        gate.write_text(str(self.process.pid))
        self.killed = threading.Event()
        self.after = after
        self.events: list[ProgressEvent] = []
        if on_flow:  # else the test kills it (a stream: once a batch was handed over)
            threading.Thread(target=self._kill_once_rows_flow, daemon=True).start()

    def __call__(self, event: ProgressEvent) -> None:
        self.events.append(event)

    def _kill_once_rows_flow(self) -> None:
        deadline = time.monotonic() + 60
        while not self.flowed.exists() and not self.killed.is_set():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        time.sleep(self.after)
        self.kill()

    def kill(self) -> None:
        if self.killed.is_set():
            return
        self.killed.set()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.scored_before = scored(self.gate)


def scored(gate: Path) -> int:
    """Rows the UDF has scored since the test began (see ``slow_in``)."""
    with contextlib.suppress(FileNotFoundError):
        return sum(int(n) for n in Path(f"{gate}.scored").read_text().split())
    return 0


def distributed(slow: SessionContext, cluster: LocalCluster, victim: Victim) -> DistributedContext:
    # Split: each worker runs a task of the scan stage.
    return DistributedContext(slow, workers=cluster, config=SPLIT_CONFIG, progress=victim)


def _parquet(df: Any, tmp: Path) -> pa.Table:
    df.write_parquet(str(tmp / "out"))
    return pq.read_table(tmp / "out")


def _cache(df: Any, tmp: Path) -> pa.Table:
    return df.cache().to_arrow_table()


#: Each way of reading a whole result, as the table it gives.
WHOLE: dict[str, Callable[[Any, Path], pa.Table]] = {
    "collect": lambda df, _: pa.Table.from_batches(df.collect()),
    "to_arrow_table": lambda df, _: df.to_arrow_table(),
    "to_pandas": lambda df, _: pa.Table.from_pandas(df.to_pandas(), preserve_index=False),
    "to_pylist": lambda df, _: pa.Table.from_pylist(df.to_pylist()),
    "write_parquet": _parquet,
    "cache": _cache,
}


@pytest.mark.parametrize("method", list(WHOLE))
def test_a_worker_killed_halfway_costs_a_run_not_the_query(
    slow, expected, cluster, gate, tmp_path, method
):
    victim = Victim(cluster, gate)
    dctx = distributed(slow, cluster, victim)
    df = dctx.sql(FLOWING)
    got = WHOLE[method](df, tmp_path)
    assert victim.killed.is_set()
    assert_same_rows(got, expected, ordered=False)
    assert ran_on(df) == "workers"
    runs = {m["attempt"] for m in dctx.metrics(df)}
    assert runs == {1, 2}
    retries = [e for e in victim.events if e.kind == "retry"]
    assert len(retries) == 1 and retries[0].attempt == 1
    assert retries[0].worker_url == victim.url
    # The cluster restarted the lost worker and the run again waited for it: it ran on both.
    run_two = {m["worker_url"] for m in dctx.metrics(df) if m["attempt"] == 2}
    assert victim.url not in run_two and set(cluster.urls) <= run_two, (run_two, cluster.urls)


def test_create_table_as_after_a_worker_is_lost_keeps_every_row(slow, expected, cluster, gate):
    victim = Victim(cluster, gate)
    dctx = distributed(slow, cluster, victim)
    dctx.sql(f"CREATE TABLE kept_flow AS {FLOWING}").collect()
    try:
        assert victim.killed.is_set()
        assert [e.attempt for e in victim.events if e.kind == "retry"] == [1]
        got = dctx.sql("SELECT * FROM kept_flow").to_arrow_table()
        assert_same_rows(got, expected, ordered=False)
    finally:
        dctx.sql("DROP TABLE kept_flow").collect()


def _delivered_rows(batches: list[pa.RecordBatch], expected: pa.Table) -> None:
    """What a stream delivered before a loss: rows of the answer, none twice."""
    got = pa.Table.from_batches(batches) if batches else expected.slice(0, 0)
    keys = got.select(["l_orderkey", "l_linenumber"]).to_pylist()
    assert len({(k["l_orderkey"], k["l_linenumber"]) for k in keys}) == got.num_rows
    joined = got.join(expected, ["l_orderkey", "l_linenumber"], join_type="inner")
    assert joined.num_rows == got.num_rows


def _read_losing(batches: Iterator[Any], victim: Victim, out: list[pa.RecordBatch]) -> None:
    """Reads a stream, the victim killed once a batch was handed over."""
    for batch in batches:
        out.append(batch if isinstance(batch, pa.RecordBatch) else batch.to_pyarrow())
        if out[-1].num_rows:
            victim.kill()  # once: rows were handed over


@pytest.mark.parametrize("how", ["execute_stream", "iterate"])
def test_a_stream_names_the_rows_it_delivered(slow, expected, cluster, gate, how):
    victim = Victim(cluster, gate, on_flow=False)
    df = distributed(slow, cluster, victim).sql(FLOWING)
    batches: list[pa.RecordBatch] = []
    with pytest.raises(WorkerError) as e:
        _read_losing(iter(df.execute_stream() if how == "execute_stream" else df), victim, batches)
    delivered = sum(b.num_rows for b in batches)
    assert 0 < delivered < expected.num_rows
    assert e.value.rows_delivered == delivered
    assert f"after {delivered} rows of the stream were delivered" in str(e.value)
    assert e.value.worker_url == victim.url and e.value.kind == "died"
    _delivered_rows(batches, expected)


def test_an_arrow_c_stream_names_the_rows_it_delivered(slow, expected, cluster, gate):
    victim = Victim(cluster, gate, on_flow=False)
    reader = pa.RecordBatchReader.from_stream(distributed(slow, cluster, victim).sql(FLOWING))
    batches: list[pa.RecordBatch] = []
    # A C stream's consumer (pyarrow here, polars, duckdb) gets the error as text.
    with pytest.raises(pa.ArrowException) as e:
        _read_losing(iter(reader), victim, batches)
    delivered = sum(b.num_rows for b in batches)
    assert 0 < delivered < expected.num_rows
    assert f"after {delivered} rows of the stream were delivered" in str(e.value)
    assert victim.url in str(e.value)
    _delivered_rows(batches, expected)


def test_a_write_made_on_the_coordinator_is_never_run_twice(slow, cluster, gate, tmp_path):
    """One output file is written by the coordinator from the rows as they come: a second run
    could not take back what the first put in place, so a loss fails it, naming the worker."""
    victim = Victim(cluster, gate)
    out = tmp_path / "one.parquet"
    options = DataFrameWriteOptions(single_file_output=True)
    with pytest.raises(WorkerError) as e:
        distributed(slow, cluster, victim).sql(FLOWING).write_parquet(
            str(out), write_options=options
        )
    assert e.value.worker_url == victim.url
    assert [e for e in victim.events if e.kind == "retry"] == []


# Task-level recovery: DistributedConfig(fault_tolerance="task").


def _spooled(spool: Path) -> list[Path]:
    return [p for p in spool.rglob("*") if p.is_file()]


def _lost_in_task_mode(
    slow: SessionContext,
    expected: pa.Table,
    cluster: LocalCluster,
    gate: Path,
    tmp: Path,
    method: str,
) -> tuple[DistributedContext, Any, Victim, Path]:
    """The flowing query read by ``method`` with ``fault_tolerance="task"``, a worker killed
    once the other spooled most of its chunks (a task writes its files once it has run half
    a second): single-node's rows, a worker lost. The context, the frame, the victim and the
    spool."""
    spool = tmp / "spool"
    victim = Victim(cluster, gate, after=1.5)
    config = SPLIT_CONFIG.replace(fault_tolerance="task", spool_dir=str(spool))
    dctx = DistributedContext(slow, workers=cluster, config=config, progress=victim)
    df = dctx.sql(FLOWING)
    got = WHOLE[method](df, tmp)
    assert victim.killed.is_set()
    assert_same_rows(got, expected, ordered=False)
    return dctx, df, victim, spool


@pytest.mark.parametrize("method", ["to_arrow_table", "collect", "to_pandas"])
def test_task_level_recovery_reuses_finished_tasks(slow, expected, cluster, gate, tmp_path, method):
    """A worker lost halfway: the run again reads what the finished tasks spooled and
    answers single-node's rows; the spool is empty once the result is read."""
    dctx, df, victim, spool = _lost_in_task_mode(slow, expected, cluster, gate, tmp_path, method)
    assert "SpoolExec" in dctx.explain(df)
    assert {m["attempt"] for m in dctx.metrics(df)} == {1, 2}
    # What was spooled before the loss is read, not scored again: the run after it scored
    # fewer rows than the query has (a whole-query retry scores them all again).
    again = scored(gate) - victim.scored_before
    assert 0 < again < expected.num_rows, (again, victim.scored_before, expected.num_rows)
    assert not _spooled(spool)


@pytest.mark.parametrize("method", ["write_parquet", "cache"])
def test_task_level_recovery_runs_writes_and_kept_results_again_whole(
    slow, expected, cluster, gate, tmp_path, method
):
    """A write or ``cache()`` is not spooled (a task read back would not write its rows, and a
    run's staged commit takes only that run's files): the run after the loss does it all
    again, and every row is there once — also when the other worker had finished its part."""
    _, _, victim, spool = _lost_in_task_mode(slow, expected, cluster, gate, tmp_path, method)
    assert scored(gate) - victim.scored_before >= expected.num_rows
    assert not _spooled(spool)


def test_a_whole_query_retry_scores_every_row_again(slow, expected, cluster, gate):
    """The contrast to the test above: without spooling, the run after a loss computes all."""
    victim = Victim(cluster, gate)
    df = distributed(slow, cluster, victim).sql(FLOWING)
    assert_same_rows(df.to_arrow_table(), expected, ordered=False)
    assert victim.killed.is_set()
    assert scored(gate) - victim.scored_before >= expected.num_rows


def test_task_level_recovery_answers_as_single_node(ctx, tmp_path):
    """TPC-H on the embedded cluster with every stage spooled: single-node's answers, on the
    workers, and nothing left in the spool."""
    spool = tmp_path / "spool"
    config = SPLIT_CONFIG.replace(fault_tolerance="task", spool_dir=str(spool), fallback="error")
    dctx = DistributedContext(ctx, config=config)
    for n in (1, 3, 5, 9, 13, 18, 21):
        sql = tpch.query(n)
        df = dctx.sql(sql)
        assert "SpoolExec" in dctx.explain(df)
        assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(),
                         ordered="order by" in sql.lower())  # fmt: skip
        assert not _spooled(spool)


def test_task_level_recovery_runs_every_tpch_query_on_worker_processes(slow, cluster, tmp_path):
    """TPC-H's 22 on worker processes with every stage spooled, each with a stall watchdog: a
    task never waits on another's turn (an earlier design could hang a query of many stages),
    and every answer is single-node's."""
    spool = tmp_path / "spool"
    config = SPLIT_CONFIG.replace(
        fault_tolerance="task", spool_dir=str(spool), fallback="error", stall_timeout=60
    )
    dctx = DistributedContext(slow, workers=cluster, config=config, progress=False)
    healed(cluster)
    for n in tpch.QUERIES:
        sql = tpch.query(n)
        df = dctx.sql(sql)
        assert "SpoolExec" in dctx.explain(df)
        assert_same_rows(df.to_arrow_table(), slow.sql(sql).to_arrow_table(),
                         ordered="order by" in sql.lower())  # fmt: skip
        assert not _spooled(spool)


def test_fault_tolerance_is_checked():
    from datafusion_distributed_py import DistributedConfig

    with pytest.raises(ValueError, match="fault_tolerance must be 'query' or 'task'"):
        DistributedConfig(fault_tolerance="stage")  # type: ignore[arg-type]
