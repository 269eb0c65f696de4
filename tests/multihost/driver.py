"""The coordinator host's program in the multi-host tests: run inside the coordinator's
network namespace, it plans and runs queries against workers on other hosts and prints what
happened as one JSON line (the test, on the machine's own namespace, cannot reach them).

``python driver.py JOB.json`` where the job names ``workers`` (URLs, or ``{"dns": name,
"port": p, "scheme": s}``), ``security`` (``Security`` fields, PEM or file paths), ``data``
(a TPC-H directory) and ``action``:

* ``tpch``: every TPC-H query against single-node on the same files, and whether it ran
  distributed;
* ``slow``: a query that runs for seconds; prints ``RUNNING`` once its tasks run, so that the
  test can take a worker host away, then how it ended and how long it took: ``WorkerError``
  (with the worker it names), ``retried`` (single-node's rows, and the metrics show a run
  after the first, with the workers of each run), or a failure: ``not retried`` when the
  rows came from the first run alone (the fault landed after the query's work). ``method``
  says how the result is read (``READ``, or ``stream``: ``execute_stream()``, which reports
  the rows it delivered before the loss), ``sql`` replaces the query (``{f}`` in it stands
  for ``nap``);
* ``dashboard``: serves the dashboard on this host and reads its status back over HTTP;
* ``bench``: times queries per compression, with the bytes their shuffles moved
  (``benchmarks/multihost.py``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
from datafusion import SessionContext, udf

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    Security,
    WorkerError,
    dns_workers,
    ran_on,
)

# Run as a script on another host: TPC-H comes from the repository's harness.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from datafusion_distributed_py.testing import assert_same_rows, is_distributed, shuffle_bytes
from harness import tpch  # noqa: E402

#: Runs for seconds on three workers: a Python UDF that sleeps per batch, then a shuffle.
SLOW = (
    "SELECT l_returnflag, sum({f}(l_quantity)) AS q, count(*) AS n FROM lineitem "
    "GROUP BY l_returnflag"
)


#: Rows flow back as the scan tasks make them (no aggregate holds them back).
FLOWING = "SELECT l_orderkey, l_linenumber, {f}(l_quantity) AS q FROM lineitem"


def napping(seconds: float) -> Any:
    """``nap``: its input, after ``seconds`` per batch."""

    def nap(a: pa.Array) -> pa.Array:
        time.sleep(seconds)
        return a

    return nap


def session(data: str, nap: float = 0.3) -> SessionContext:
    ctx = SessionContext()
    tpch.register(ctx, data)
    ctx.register_udf(udf(napping(nap), [pa.float64()], pa.float64(), "immutable", name="nap"))
    return ctx


def distributed(ctx: SessionContext, job: dict[str, Any]) -> DistributedContext:
    workers: Any = job["workers"]
    if isinstance(workers, dict):
        workers = dns_workers(workers["dns"], workers["port"], workers.get("scheme", "http"))
    # Tests split the small tables into many tasks; the benchmark keeps the defaults.
    knobs = job.get("config", {"file_scan_config_bytes_per_partition": 1})
    config = DistributedConfig(**{**knobs, "compression": job.get("compression", "lz4")})
    sec = Security(**job["security"])
    return DistributedContext(ctx, workers=workers, security=sec, config=config, progress=False)


def _parquet(df: Any, out: Path) -> pa.Table:
    import pyarrow.parquet as pq

    df.write_parquet(str(out / "written"))
    return pq.read_table(out / "written")


#: The ways the ``slow`` job reads the result whole (``method``), as the table each gives.
READ: dict[str, Any] = {
    "to_arrow_table": lambda df, _: df.to_arrow_table(),
    "collect": lambda df, _: pa.Table.from_batches(df.collect()),
    "to_pandas": lambda df, _: pa.Table.from_pandas(df.to_pandas(), preserve_index=False),
    "write_parquet": _parquet,
    "cache": lambda df, _: df.cache().to_arrow_table(),
}


def keys_of(t: pa.Table | pa.RecordBatch) -> list[tuple[int, int]]:
    orders, lines = t.column("l_orderkey").to_pylist(), t.column("l_linenumber").to_pylist()
    return list(zip(orders, lines, strict=True))


def read_stream(df: Any, expected: pa.Table) -> dict[str, Any]:
    """Reads ``df.execute_stream()``; a lost worker must end it with a ``WorkerError`` naming
    the rows delivered, each of them one of single-node's, none twice."""
    seen: list[tuple[int, int]] = []
    try:
        for batch in df.execute_stream():
            seen += keys_of(batch if isinstance(batch, pa.RecordBatch) else batch.to_pyarrow())
    except WorkerError as e:
        keys = set(keys_of(expected))
        return {"result": "stream_error", "rows_delivered": e.rows_delivered,
                "delivered": len(seen), "all_known": set(seen) <= keys,
                "none_twice": len(set(seen)) == len(seen), "error": str(e)[:2000]}  # fmt: skip
    return {"result": "stream_whole", "delivered": len(seen)}


def run_tpch(job: dict[str, Any]) -> dict[str, Any]:
    ctx = session(job["data"])
    dctx = distributed(ctx, job)
    results: dict[str, Any] = {}
    for n in job.get("queries", tpch.QUERIES):
        sql = tpch.query(n)
        try:
            expected = ctx.sql(sql).to_arrow_table()
            df = dctx.sql(sql)
            spread = is_distributed(dctx.explain(df)) and ran_on(df) == "workers"
            assert_same_rows(df.to_arrow_table(), expected, ordered="order by" in sql.lower())
            results[str(n)] = {"equal": True, "distributed": spread}
        except Exception as e:  # each query's outcome is the report's subject
            results[str(n)] = {"equal": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    return {"queries": results, "workers": dctx.worker_urls}


def run_slow(job: dict[str, Any]) -> dict[str, Any]:
    ctx = session(job["data"], job.get("nap", 0.3))
    dctx = distributed(ctx, job)
    sql = job.get("sql") or (FLOWING if job.get("flowing") else SLOW)
    expected = ctx.sql(sql.format(f="")).to_arrow_table()  # nap returns its input
    df = dctx.sql(sql.format(f="nap"))
    assert is_distributed(dctx.explain(df))
    outcome: dict[str, Any] = {}

    method = job.get("method", "to_arrow_table")

    def run() -> None:
        start = time.monotonic()
        try:
            if method == "stream":
                outcome.update(read_stream(df, expected))
                return
            got = READ[method](df, Path(job.get("out", ".")))
            outcome["query_seconds"] = time.monotonic() - start  # the check's time apart
            assert_same_rows(got, expected, ordered=False)
            # Right rows prove nothing of the fault unless it made the query run again.
            runs: dict[int, set[str]] = {}
            for m in dctx.metrics(df):
                runs.setdefault(m["attempt"], set()).add(m["worker_url"])
            outcome["workers_by_attempt"] = {a: sorted(w) for a, w in sorted(runs.items())}
            outcome["result"] = "retried" if max(runs) >= 2 else "not retried"
        except WorkerError as e:
            outcome.update(result="WorkerError", worker_url=e.worker_url, error=str(e)[:4000])
        except Exception as e:  # anything else is a failure the test reports
            outcome.update(result=type(e).__name__, error=f"{e}\n{traceback.format_exc()}")
        outcome["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(job.get("running_after", 1.5))
    outcome["running_at_fault"] = thread.is_alive()
    print("RUNNING", flush=True)
    thread.join()
    return outcome


def run_dashboard(job: dict[str, Any]) -> dict[str, Any]:
    ctx = session(job["data"])
    dctx = distributed(ctx, job)
    dctx.sql("SELECT count(*) FROM lineitem").collect()
    board = dctx.dashboard(host=job["host"])
    try:
        page = urllib.request.urlopen(board.url, timeout=10).read().decode()
        api = board.url.replace("/?", "/api/status?", 1)
        status = json.loads(urllib.request.urlopen(api, timeout=10).read())
    finally:
        board.close()
    return {"url": board.url, "page": len(page), "status": status}


def run_bench(job: dict[str, Any]) -> dict[str, Any]:
    """Each query's best time of ``repeat`` and its shuffle bytes, per compression; rows
    checked against single-node's once."""
    ctx = session(job["data"])
    results: dict[str, Any] = {}
    expected = {n: ctx.sql(tpch.query(n)).to_arrow_table() for n in job["queries"]}
    for compression, queries in job["compressions"].items():
        dctx = distributed(ctx, {**job, "compression": compression})
        for n in queries:
            sql, best, moved, equal = tpch.query(n), float("inf"), 0, True
            for _ in range(job["repeat"]):
                start = time.perf_counter()
                df = dctx.sql(sql)
                got = df.to_arrow_table()
                best = min(best, time.perf_counter() - start)
                moved = shuffle_bytes(df)
                try:
                    assert_same_rows(got, expected[n], ordered="order by" in sql.lower())
                except AssertionError:
                    equal = False
            results[f"{compression}/{n}"] = {"seconds": best, "bytes": moved, "equal": equal}
            print(f"{compression} q{n}: {best:.2f} s, {moved:,} B", file=sys.stderr, flush=True)
    return {"results": results}


ACTIONS = {"tpch": run_tpch, "slow": run_slow, "dashboard": run_dashboard, "bench": run_bench}


def main(path: str) -> int:
    job = json.loads(Path(path).read_text())
    report = ACTIONS[job["action"]](job)
    print("REPORT " + json.dumps(report, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
