"""Writes from every worker: ``COPY ... TO`` and ``INSERT INTO`` a listing table
write their files from each task of the last stage; the coordinator receives only counts.
Each case against single-node's write of the same query, on both cluster kinds."""

from __future__ import annotations

import ctypes
import logging
import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_same_rows, is_distributed, session_over, write_v_g_parts
from datafusion import DataFrameWriteOptions, InsertOp, SessionContext, col, udf
from datafusion.dataframe import ParquetColumnOptions, ParquetWriterOptions

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
)
from datafusion_distributed_py.testing import assert_ran_on_coordinator, assert_ran_on_workers

ROWS = 40_000
SPLIT = DistributedConfig(file_scan_config_bytes_per_partition=1)
QUERY = "SELECT v, g, v * 2 AS w FROM t WHERE v % 5 <> 0"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v_g_parts(tmp_path_factory.mktemp("source"), ROWS, row_group_size=1000)


session = session_over


def read_back(path: Path, fmt: str, **kwargs) -> pa.Table:
    """What stock single-node datafusion reads from a written directory."""
    ctx = SessionContext()
    read = {"parquet": ctx.read_parquet, "csv": ctx.read_csv, "json": ctx.read_json}[fmt]
    return read(str(path) + "/", **kwargs).to_arrow_table()


def writers(path: Path) -> set[str]:
    """The sinks that wrote under ``path`` (DataFusion names a sink's files ``<write id>_<n>``,
    or ``<write id>`` in a partition's directory)."""
    names = (p.name for p in path.rglob("*") if p.is_file())
    return {m.group(1) for n in names if (m := re.match(r"([A-Za-z0-9]{16})(_\d+)?\.", n))}


def sink_stage_tasks(plan: str) -> int:
    """Tasks of the stage that holds the sink (0: the sink is on the coordinator)."""
    tasks = 0
    for line in plan.splitlines():
        if m := re.search(r"Stage \d+ ── tasks=(\d+)", line):
            tasks = int(m.group(1))
        elif "DataSinkExec" in line:
            return tasks
    return 0


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_write_of_one_task_commits_on_its_worker(data, workers, tmp_path, partitioned):
    """One task (one worker, or ``max_tasks_per_stage=1``): the whole write, the sum of its
    counts and the commit included, is one stage that runs on the worker."""
    ctx = session(data)
    config = SPLIT.replace(max_tasks_per_stage=1)
    dctx = DistributedContext(ctx, workers=workers, config=config, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    by = " PARTITIONED BY (g)" if partitioned else ""
    copy = "COPY ({q}) TO '{p}/' STORED AS PARQUET{by}"
    single = ctx.sql(copy.format(q=QUERY, p=theirs, by=by)).to_pylist()
    df = dctx.sql(copy.format(q=QUERY, p=ours, by=by))
    assert_ran_on_workers(df, dctx)
    assert df.to_pylist() == single
    plan = dctx.explain(df)
    assert is_distributed(plan) and sink_stage_tasks(plan) == 1, plan
    assert not [p for p in ours.rglob(".*")]  # committed: the run's dir is gone
    assert_same_rows(read_back(ours, "parquet"), read_back(theirs, "parquet"), ordered=False)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_copy_writes_from_every_task(data, workers, tmp_path, fmt):
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    copy = "COPY ({q}) TO '{p}/' STORED AS {f}"
    single = ctx.sql(copy.format(q=QUERY, p=theirs, f=fmt)).to_pylist()
    df = dctx.sql(copy.format(q=QUERY, p=ours, f=fmt))
    assert_ran_on_workers(df, dctx)
    plan = dctx.explain(df)
    assert is_distributed(plan) and sink_stage_tasks(plan) >= 2, plan
    assert df.to_pylist() == single  # the count of rows written
    assert len(writers(ours)) >= 2, sorted(p.name for p in ours.iterdir())
    assert not [p for p in ours.iterdir() if p.name.startswith(".")]  # the run's dir is gone
    assert_same_rows(read_back(ours, fmt), read_back(theirs, fmt), ordered=False)


def test_partitioned_copy(data, workers, tmp_path):
    """``PARTITIONED BY``: hive directories, each task writing its own files into them."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    copy = "COPY ({q}) TO '{p}/' STORED AS PARQUET PARTITIONED BY (g)"
    single = ctx.sql(copy.format(q=QUERY, p=theirs)).to_pylist()
    df = dctx.sql(copy.format(q=QUERY, p=ours))
    assert_ran_on_workers(df, dctx)
    assert df.to_pylist() == single
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
    assert len(writers(ours / "g=g0")) >= 2
    part = pa.schema([("g", pa.string())])
    back = read_back(ours, "parquet", table_partition_cols=[("g", pa.string())])
    want = read_back(theirs, "parquet", table_partition_cols=[("g", pa.string())])
    assert part.names[0] in back.column_names
    assert_same_rows(back, want, ordered=False)


def test_insert_into_an_external_table(data, workers, tmp_path):
    """``INSERT INTO`` a listing table appends from every task; the rows read back are
    single-node's after the same inserts."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    for name, where in (("ours", tmp_path / "ours"), ("theirs", tmp_path / "theirs")):
        where.mkdir()
        ctx.sql(
            f"CREATE EXTERNAL TABLE {name} (v BIGINT, g VARCHAR, w BIGINT) "
            f"STORED AS PARQUET LOCATION '{where}/'"
        ).collect()
    for _ in range(2):  # append, twice
        single = ctx.sql(f"INSERT INTO theirs {QUERY}").to_pylist()
        df = dctx.sql(f"INSERT INTO ours {QUERY}")
        assert_ran_on_workers(df, dctx)
        assert sink_stage_tasks(dctx.explain(df)) >= 2
        assert df.to_pylist() == single
    got = ctx.sql("SELECT * FROM ours").to_arrow_table()
    assert_same_rows(got, ctx.sql("SELECT * FROM theirs").to_arrow_table(), ordered=False)
    assert got.num_rows == 2 * single[0]["count"]


def test_one_file_is_written_by_one_writer_and_explain_says_where(data, workers, tmp_path):
    """A path naming one file keeps its meaning: one writer, on the coordinator."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    target = tmp_path / "one.parquet"
    df = dctx.sql(f"COPY ({QUERY}) TO '{target}' STORED AS PARQUET")
    assert_ran_on_workers(df, dctx)
    plan = dctx.explain(df)
    assert is_distributed(plan) and sink_stage_tasks(plan) == 0, plan
    n = df.to_pylist()[0]["count"]
    assert target.is_file() and pq.read_table(target).num_rows == n
    assert n == ctx.sql(f"SELECT count(*) AS n FROM ({QUERY})").to_pylist()[0]["n"]


def test_concurrent_writes_do_not_interfere(data, workers, tmp_path):
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    counts: dict[str, list[dict[str, int]]] = {}
    wheres = {"a": "SELECT * FROM t WHERE v < 30000", "b": "SELECT * FROM t WHERE v >= 10000"}
    frames = {}
    for name, where in wheres.items():
        frames[name] = dctx.sql(f"COPY ({where}) TO '{tmp_path / name}/' STORED AS PARQUET")
        assert_ran_on_workers(frames[name], dctx)

    def write(name: str) -> None:
        counts[name] = frames[name].to_pylist()

    runs = [threading.Thread(target=write, args=(name,)) for name in frames]
    for r in runs:
        r.start()
    for r in runs:
        r.join(timeout=120)
    assert counts == {"a": [{"count": 30_000}], "b": [{"count": 30_000}]}
    assert read_back(tmp_path / "a", "parquet").num_rows == 30_000
    assert read_back(tmp_path / "b", "parquet").num_rows == 30_000
    assert len(writers(tmp_path / "a")) >= 2 and len(writers(tmp_path / "b")) >= 2


def test_copy_to_an_object_store(workers):
    """Tasks write straight to S3 (a real S3-compatible server) with the stores registered on
    ``ctx``, which the workers receive."""
    import boto3
    from test_object_store import BUCKET, SECRET, moto_bucket, s3_store

    with moto_bucket() as endpoint:
        ctx = SessionContext()
        ctx.register_object_store("s3://", s3_store(endpoint), BUCKET)
        ctx.register_parquet("t", f"s3://{BUCKET}/t/")
        dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
        q = "SELECT g, v FROM t WHERE v % 2 = 0"
        df = dctx.sql(f"COPY ({q}) TO 's3://{BUCKET}/out/' STORED AS PARQUET")
        assert_ran_on_workers(df, dctx)
        assert sink_stage_tasks(dctx.explain(df)) >= 2
        assert df.to_pylist() == [{"count": 750}]
        got = ctx.read_parquet(f"s3://{BUCKET}/out/").to_arrow_table()
        assert_same_rows(got, ctx.sql(q).to_arrow_table(), ordered=False)
        s3 = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="key",
            aws_secret_access_key=SECRET, region_name="us-east-1",
        )  # fmt: skip
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="out/")["Contents"]]
        assert len({k.split("/")[-1].split("_")[0] for k in keys}) >= 2, keys
        assert not [k for k in keys if "/." in k], keys  # moved out of the run's directory


def _slow_tail(a: pa.Array) -> pa.Array:
    """A UDF taking 1 s for a batch of the last source file (``v`` from ``3 * ROWS // 4``),
    no time for the others: the task that reads that file writes for ~10 s, long after the
    other task staged its file."""
    import time

    import pyarrow.compute as pc

    if pc.max(a).as_py() >= 3 * ROWS // 4:
        time.sleep(1.0)
    return a


def _slow_in(pid: int):
    """A UDF taking 0.5 s a batch in the process ``pid``, no time elsewhere: that worker's task
    writes for seconds after the other worker's task staged its file."""

    def slowly(a: pa.Array) -> pa.Array:
        import os
        import time

        if os.getpid() == pid:
            time.sleep(0.5)
        return a

    return slowly


def _slow_session(data: Path, slowly) -> SessionContext:
    ctx = session(data)
    ctx.register_udf(udf(slowly, [pa.int64()], pa.int64(), "volatile", name="slowly"))
    return ctx


def _visible(target: Path) -> list[str]:
    """What a reader of ``target`` would find, and what a run left behind (looked at again
    when a run's staging directory goes away while it is being listed)."""
    for _ in range(20):
        try:
            return sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
        except FileNotFoundError:
            time.sleep(0.01)
    raise AssertionError(f"{target} kept changing while listed")


def _staged(target: Path, runner: threading.Thread, seconds: float = 30.0) -> list[str]:
    """Waits (at most ``seconds``) until a task of the write running in ``runner`` has staged
    a file (in the run's own directory, ``<target>/.dfdpy-<id>/``) and returns those files;
    asserts that the write is still running then (nothing committed yet)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and runner.is_alive():
        files = _visible(target) if target.exists() else []
        if files:
            assert all(f.startswith(".dfdpy-") for f in files), f"committed already: {files}"
            assert runner.is_alive(), "the write ended before it could be cut short"
            return files
        time.sleep(0.05)
    raise AssertionError(f"no file staged within {seconds} s (the write ran {runner.is_alive()})")


def _settle(target: Path, seconds: float = 5.0) -> list[str]:
    """``_visible`` once an aborted run's clean-up (asynchronous) had time to finish."""
    deadline = time.monotonic() + seconds
    while _visible(target) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _visible(target)


@pytest.mark.slow
def test_a_worker_killed_mid_write_runs_it_again_and_writes_each_row_once(data, tmp_path):
    """A worker lost mid-write: the file the other task had staged is dropped with its run,
    and the write runs again on the workers left — the target holds every row
    once, and nothing of the lost run."""
    target = tmp_path / "out"
    with LocalCluster(2) as cluster:
        victim = cluster.processes[1]
        ctx = _slow_session(data, _slow_in(victim.pid))
        dctx = DistributedContext(ctx, workers=cluster, config=SPLIT, progress=False)
        df = dctx.sql(f"COPY (SELECT slowly(v) AS v, g FROM t) TO '{target}/' STORED AS PARQUET")
        assert_ran_on_workers(df, dctx)
        outcome: list[BaseException | list] = []
        runner = threading.Thread(target=lambda: _record(outcome, df.to_pylist))
        runner.start()
        _staged(target, runner)  # the other worker's task is done, the victim's not
        victim.kill()
        runner.join(timeout=120)
        assert not runner.is_alive()
        assert {m["attempt"] for m in dctx.metrics(df)} == {1, 2}
    (got,) = outcome
    assert got == [{"count": ROWS}], got
    assert not [f for f in _settle(target) if f.startswith(".dfdpy-")]
    expected = SessionContext().read_parquet(str(data) + "/").select("v", "g").to_arrow_table()
    assert_same_rows(read_back(target, "parquet"), expected, ordered=False)


@pytest.mark.slow
def test_an_interrupt_mid_write_leaves_no_partial_output(data, workers, tmp_path):
    ctx = _slow_session(data, _slow_tail)
    target = tmp_path / "out"
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    df = dctx.sql(f"COPY (SELECT slowly(v) AS v, g FROM t) TO '{target}/' STORED AS PARQUET")
    assert_ran_on_workers(df, dctx)
    outcome: list[BaseException | list] = []
    runner = threading.Thread(target=lambda: _record(outcome, df.to_pylist), daemon=True)
    runner.start()
    staged = _staged(target, runner)  # one task is done, the one reading the last file not
    set_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    assert set_exc(ctypes.c_ulong(runner.ident), ctypes.py_object(KeyboardInterrupt)) == 1
    runner.join(timeout=10)
    assert [type(o) for o in outcome] == [KeyboardInterrupt]
    assert _settle(target) == [], f"staged before the interrupt: {staged}"


def _record(outcome: list, run) -> None:
    try:
        outcome.append(run())
    except BaseException as e:  # what the write raised is the test's subject
        outcome.append(e)


@pytest.mark.parametrize(
    ("method", "kwargs", "fmt"),
    [
        ("write_parquet", {}, "parquet"),
        ("write_parquet", {"compression": "snappy"}, "parquet"),
        ("write_parquet", {"compression": "gzip", "compression_level": 3}, "parquet"),
        ("write_csv", {"with_header": True}, "csv"),
        ("write_json", {}, "json"),
    ],
)
def test_write_methods_of_distributed_frames(data, workers, tmp_path, method, kwargs, fmt):
    """``df.write_parquet/csv/json(dir)`` of a returned (or derived) frame writes from every
    task, with the options single-node honours (the codec, the header)."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    getattr(ctx.sql(QUERY).filter(col("v") > 10), method)(str(theirs), **kwargs)
    df = dctx.sql(QUERY).filter(col("v") > 10)
    assert_ran_on_workers(df, dctx)
    getattr(df, method)(str(ours), **kwargs)
    assert len(writers(ours)) >= 2
    read = {"has_header": kwargs.get("with_header", False)} if fmt == "csv" else {}
    assert_same_rows(read_back(ours, fmt, **read), read_back(theirs, fmt, **read), ordered=False)
    if fmt == "parquet":

        def codec(d: Path) -> str:
            first = next(p for p in d.rglob("*.parquet"))
            return pq.ParquetFile(first).metadata.row_group(0).column(0).compression

        assert codec(ours) == codec(theirs)


@pytest.mark.parametrize(
    "options",
    [
        {"partition_by": "g"},
        {"partition_by": ["g"], "sort_by": col("v").sort(ascending=False)},
        {"insert_operation": InsertOp.APPEND},
    ],
    ids=["partition_by", "partition_and_sort", "append"],
)
def test_write_options_are_honoured_from_every_task(data, workers, tmp_path, options):
    """``write_options`` that ``COPY`` can express are written from every task: partition_by
    as ``PARTITIONED BY`` (each task its own files in each directory), sort_by as a sort
    before the sink, append as single-node appends."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    ctx.sql(QUERY).write_parquet(str(theirs), write_options=DataFrameWriteOptions(**options))
    df = dctx.sql(QUERY)
    assert_ran_on_workers(df, dctx)
    df.write_parquet(str(ours), write_options=DataFrameWriteOptions(**options))
    partitioned = "partition_by" in options
    if partitioned:  # the same hive directories
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
    cols = {"table_partition_cols": [("g", pa.string())]} if partitioned else {}
    back, want = read_back(ours, "parquet", **cols), read_back(theirs, "parquet", **cols)
    assert_same_rows(back, want, ordered=False)
    if partitioned and "sort_by" not in options:
        assert len(writers(ours / "g=g0")) >= 2
    elif "sort_by" not in options:
        assert len(writers(ours)) >= 2


def test_parquet_writer_options_from_every_task(data, workers, tmp_path):
    """``write_parquet_with_options`` (and ``write_parquet(compression=ParquetWriterOptions)``):
    each field means what it means single-node (here row-group size, codec, a column's own
    codec), each task writing."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    options = ParquetWriterOptions(
        max_row_group_size=500,
        compression="snappy",
        column_specific_options={"g": ParquetColumnOptions(compression="gzip(4)")},
    )
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    ctx.sql(QUERY).write_parquet_with_options(str(theirs), options)
    df = dctx.sql(QUERY)
    assert_ran_on_workers(df, dctx)
    df.write_parquet_with_options(str(ours), options)
    assert len(writers(ours)) >= 2
    assert_same_rows(read_back(ours, "parquet"), read_back(theirs, "parquet"), ordered=False)

    def layout(d: Path) -> set[tuple[str, str, bool]]:
        seen = set()
        for file in d.glob("*.parquet"):
            meta = pq.ParquetFile(file).metadata
            for i in range(meta.num_row_groups):
                group = meta.row_group(i)
                for c in range(group.num_columns):
                    column = group.column(c)
                    seen.add((column.path_in_schema, column.compression, group.num_rows <= 500))
        return seen

    assert layout(ours) == layout(theirs) == {
        ("v", "SNAPPY", True), ("w", "SNAPPY", True), ("g", "GZIP", True),
    }  # fmt: skip
    again = tmp_path / "again"
    dctx.sql(QUERY).write_parquet(str(again), compression=options)
    assert layout(again) == layout(theirs)


def test_single_file_output_is_one_writer(data, workers, tmp_path):
    """``single_file_output``: one file, as single-node writes it (the coordinator writes the
    distributed result: one writer is the point)."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    one = DataFrameWriteOptions(single_file_output=True)
    ours, theirs = tmp_path / "ours.parquet", tmp_path / "theirs.parquet"
    ctx.sql(QUERY).write_parquet(str(theirs), write_options=one)
    df = dctx.sql(QUERY)
    assert_ran_on_workers(df, dctx)  # the query itself runs distributed
    df.write_parquet(str(ours), write_options=one)
    assert ours.is_file()
    assert_same_rows(pq.read_table(ours), pq.read_table(theirs), ordered=False)


def test_overwrite_raises_as_single_node(data, workers, tmp_path, caplog):
    """Single-node refuses to overwrite Parquet tables and directories; so does a distributed
    write, with single-node's error, and nothing is written."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    target = tmp_path / "table"
    target.mkdir()
    ctx.sql(
        f"CREATE EXTERNAL TABLE x (v BIGINT, g VARCHAR, w BIGINT) "
        f"STORED AS PARQUET LOCATION '{target}/'"
    ).collect()

    def error(run) -> str:
        with pytest.raises(Exception) as caught:
            run()
        return f"{type(caught.value).__name__}: {caught.value}"

    insert = f"INSERT OVERWRITE x {QUERY}"
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed_py"):
        df = dctx.sql(insert)
        # It cannot be planned, distributed or not: the coordinator runs it, to fail as
        # single-node does.
        assert_ran_on_coordinator(df, because="Overwrites are not implemented")
        ours = error(df.collect)
    assert "runs on the coordinator" in caplog.text  # the fallback says where it runs
    assert ours == error(lambda: ctx.sql(insert).collect())
    over = DataFrameWriteOptions(insert_operation=InsertOp.OVERWRITE)
    ours_dir, theirs_dir = tmp_path / "o", tmp_path / "t"
    single = error(lambda: ctx.sql(QUERY).write_parquet(str(theirs_dir), write_options=over))
    assert error(lambda: dctx.sql(QUERY).write_parquet(str(ours_dir), write_options=over)) == single
    assert not any(target.iterdir()) and not ours_dir.exists()


def test_copy_into_a_directory_with_files_appends(data, workers, tmp_path):
    """A second ``COPY`` into the same directory adds its files beside the first's, as
    single-node does."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    for _ in range(2):
        ctx.sql(f"COPY ({QUERY}) TO '{theirs}/' STORED AS PARQUET").collect()
        df = dctx.sql(f"COPY ({QUERY}) TO '{ours}/' STORED AS PARQUET")
        assert_ran_on_workers(df, dctx)
        df.collect()
    back, want = read_back(ours, "parquet"), read_back(theirs, "parquet")
    assert back.num_rows == want.num_rows == 2 * ctx.sql(QUERY).count()
    assert_same_rows(back, want, ordered=False)
    assert len(writers(ours)) >= 4  # two runs, each with at least two writers


def test_arrow_copy_says_it_runs_single_node(data, workers, tmp_path, caplog):
    """``STORED AS ARROW``: the datafusion 55 wheel cannot serialise an Arrow file sink, so the
    write runs single-node, saying so and why; the files equal single-node's."""
    ctx = session(data)
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT, progress=False)
    ours, theirs = tmp_path / "distributed", tmp_path / "single"
    single = ctx.sql(f"COPY ({QUERY}) TO '{theirs}/' STORED AS ARROW").to_pylist()
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed_py"):
        df = dctx.sql(f"COPY ({QUERY}) TO '{ours}/' STORED AS ARROW")
        assert df.to_pylist() == single
    assert "Arrow IPC" in caplog.text and "bug report" not in caplog.text
    assert_ran_on_coordinator(df, because="Arrow IPC")

    def rows(d: Path) -> pa.Table:
        return pa.concat_tables(pa.ipc.open_file(p).read_all() for p in sorted(d.iterdir()))

    assert_same_rows(rows(ours), rows(theirs), ordered=False)
