"""Fault injection: random TPC-H queries on LocalCluster(3) while a random worker is killed
(SIGKILL), frozen (SIGSTOP for 30 s) or restarted (SIGTERM; the cluster starts it again) at a
random moment of the query.

    python -m benchmarks.faults --trials 100 --sf 1

Each trial's outcome: correct (first run, or after a retry), a clear ``WorkerError`` naming the
faulty worker, another error, wrong rows, or a hang (no answer within 60 s); and the recovery
time (from the fault until a query succeeds again). Prints a table and writes
``benchmarks/results/faults.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from datafusion import SessionContext

from datafusion_distributed_py import DistributedContext, LocalCluster, WorkerError
from datafusion_distributed_py.testing import assert_same_rows
from harness import tpch

RESULTS = Path(__file__).parent / "results"
DATA = Path(__file__).parent / "data"
HANG = 60.0
FREEZE = 30.0
FAULTS = ("kill", "freeze", "restart")


@dataclass
class Trial:
    query: int
    fault: str
    at: float
    outcome: str
    recovery: float | None


def run_with_timeout(fn, timeout: float) -> tuple[str, object]:  # type: ignore[no-untyped-def]
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # reported as the outcome
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return "hang", None
    if "error" in box:
        return "error", box["error"]
    return "ok", box["value"]


def classify(status: str, value: object, expected: pa.Table, victim: str, retried: bool) -> str:
    if status == "hang":
        return "hang (> 60 s)"
    if status == "error":
        if isinstance(value, WorkerError):
            named = getattr(value, "worker_url", None) == victim
            return "WorkerError naming the worker" if named else "WorkerError naming another"
        print(f"    other error: {value!s:.400}", flush=True)
        return f"other error: {type(value).__name__}"
    try:
        assert isinstance(value, pa.Table)
        assert_same_rows(value, expected, ordered=False)
    except AssertionError:
        return "WRONG ROWS"
    return "correct after a retry" if retried else "correct"


def recover(dctx: DistributedContext, since: float) -> float | None:
    """Seconds from the fault until a small query succeeds again (None: not within 120 s)."""
    while time.monotonic() - since < 120:
        status, _ = run_with_timeout(lambda: dctx.sql(tpch.query(6)).collect(), HANG)
        if status == "ok":
            return time.monotonic() - since
        time.sleep(0.5)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # retries and quarantines are expected here
    rng = random.Random(args.seed)
    data = tpch.generate(DATA / f"sf{args.sf}-p8", scale_factor=args.sf, parts=8)
    ctx = SessionContext()
    tpch.register(ctx, data)
    expected = {n: ctx.sql(tpch.query(n)).to_arrow_table() for n in tpch.QUERIES}
    trials: list[Trial] = []
    with LocalCluster(3) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, progress=False)
        durations = {}
        for n in tpch.QUERIES:
            start = time.monotonic()
            dctx.sql(tpch.query(n)).collect()
            durations[n] = time.monotonic() - start
        for i in range(args.trials):
            # Each trial starts from a whole cluster (the restarted worker serving again).
            cluster.wait_for_workers(timeout=60)
            n = rng.choice(tpch.QUERIES)
            fault = FAULTS[i % len(FAULTS)]
            index = rng.randrange(len(cluster.processes))
            proc, victim = cluster.processes[index], cluster.urls[index]
            at = rng.uniform(0.0, durations[n])
            df = dctx.sql(tpch.query(n))

            def inject(
                pid: int = proc.pid,
                fault: str = fault,
                at: float = at,
                box: list = [],  # noqa: B006
            ) -> None:
                time.sleep(at)
                box.append(time.monotonic())
                # A worker may be gone already (still exiting from an earlier restart).
                with contextlib.suppress(ProcessLookupError):
                    if fault == "kill":
                        os.kill(pid, signal.SIGKILL)
                    elif fault == "restart":
                        os.kill(pid, signal.SIGTERM)
                    else:
                        os.kill(pid, signal.SIGSTOP)
                        time.sleep(FREEZE)
                        os.kill(pid, signal.SIGCONT)

            fault_time: list[float] = []
            injector = threading.Thread(target=inject, kwargs={"box": fault_time}, daemon=True)
            injector.start()
            status, value = run_with_timeout(df.to_arrow_table, HANG)
            retried = status == "ok" and any(m["attempt"] > 1 for m in dctx.metrics(df))
            outcome = classify(status, value, expected[n], victim, retried)
            while not fault_time:
                time.sleep(0.01)
            recovery = recover(dctx, fault_time[0])
            injector.join()
            trials.append(Trial(n, fault, at, outcome, recovery))
            recovered = "NOT recovered" if recovery is None else f"recovered in {recovery:.1f} s"
            print(
                f"trial {i + 1:3d}: q{n:02d} {fault:7s} at {at:5.2f}s -> {outcome} ({recovered})",
                flush=True,
            )
    table = report(trials)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "faults.md").write_text(table)
    bad = [t for t in trials if t.outcome in ("WRONG ROWS", "hang (> 60 s)") or t.recovery is None]
    return 1 if bad else 0


def report(trials: list[Trial]) -> str:
    outcomes = sorted({t.outcome for t in trials})
    lines = [
        f"# Fault injection: {len(trials)} trials, TPC-H on LocalCluster(3)",
        "",
        "| fault | trials | " + " | ".join(outcomes) + " | recovery median / max (s) |",
        "|---|---|" + "---|" * len(outcomes) + "---|",
    ]
    for fault in FAULTS + ("all",):
        rows = [t for t in trials if fault in ("all", t.fault)]
        counts = Counter(t.outcome for t in rows)
        rec = sorted(t.recovery for t in rows if t.recovery is not None)
        median = rec[len(rec) // 2] if rec else float("nan")
        cells = " | ".join(str(counts.get(o, 0)) for o in outcomes)
        lines.append(
            f"| {fault} | {len(rows)} | {cells} | {median:.1f} / {max(rec, default=0):.1f} |"
        )
    kills = [t for t in trials if t.fault == "kill"]
    ok = sum(t.outcome.startswith("correct") for t in kills)
    lines += ["", f"Kill trials answered correctly: {ok}/{len(kills)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
