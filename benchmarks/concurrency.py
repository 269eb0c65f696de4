"""Many users at once: N threads each run the TPC-H queries at the same time, side by side
with single-node datafusion on the same data, in one run.

    python -m benchmarks.concurrency --sfs 0.1,1 --users 8 --modes single,embedded,local2

Each user is a thread sharing one context per mode (single-node's ``SessionContext``, one
``DistributedContext`` per cluster), as a service answering several people would; user ``i``
starts at the ``i``-th query so that different queries overlap. A mode's figure is the wall
time until every user is done, best of ``--repeat`` rounds with the modes taking turns. Every
answer is checked against single-node's (run alone first), and every distributed one against
its plan having a network boundary. Writes ``benchmarks/results/concurrency.md``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
from datafusion import SessionContext

from benchmarks.tpch import RESULTS, machine, parse_queries, same_values
from datafusion_distributed_py import DistributedContext, LocalCluster
from datafusion_distributed_py.testing import is_distributed
from harness import tpch

#: TPC-H without q15 (21 queries, as the issue that asked for this measured).
DEFAULT_QUERIES = "1-14,16-22"


def run_users(run, queries: list[int], users: int) -> tuple[float, dict[tuple[int, int], object]]:
    """Wall seconds until ``users`` threads have each run every query (user ``i`` from the
    ``i``-th on), and each answer (a table, or the exception raised) by (user, query)."""
    answers: dict[tuple[int, int], object] = {}
    start_line = threading.Barrier(users + 1)

    def user(i: int) -> None:
        order = queries[i % len(queries) :] + queries[: i % len(queries)]
        start_line.wait()
        for n in order:
            try:
                answers[(i, n)] = run(tpch.query(n))
            except Exception as e:  # a wrong answer is counted, not raised
                answers[(i, n)] = e

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(users)]
    for t in threads:
        t.start()
    start_line.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began, answers


def distributed_context(ctx: SessionContext, mode: str, stack: ExitStack) -> DistributedContext:
    """A context on ``ctx`` for ``mode`` (``embedded`` or ``localN``), its cluster closed with
    ``stack``; progress off, as a service's would be."""
    workers = None
    if mode.startswith("local"):
        workers = stack.enter_context(LocalCluster(int(mode[len("local") :])))
    elif mode != "embedded":
        raise ValueError(f"unknown mode {mode!r}")
    return DistributedContext(ctx, workers=workers, progress=False)


def wrong_answers(answers, expected: dict[int, pa.Table]) -> list[str]:
    """What differs from single-node's answers, one line each."""
    wrong = []
    for (user, n), got in sorted(answers.items()):
        ordered = "order by" in tpch.query(n).lower()
        if isinstance(got, Exception):
            wrong.append(f"user {user} q{n}: {type(got).__name__}: {str(got)[:200]}")
        elif not same_values(got, expected[n], ordered):
            wrong.append(f"user {user} q{n}: rows differ from single-node's")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sfs", default="0.1,1", help="scale factors, comma separated")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--modes", default="single,embedded,local2")
    parser.add_argument("--queries", default=DEFAULT_QUERIES)
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each mode's best")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--data", default="benchmarks/data")
    parser.add_argument("--out", default="concurrency")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if modes[0] != "single":
        parser.error("the first mode must be single (the reference)")
    queries = parse_queries(args.queries)

    lines = [
        f"# {args.users} users at once, TPC-H ({len(queries)} queries each)",
        "",
        f"Machine: {machine()}. Wall time until every user is done, best of {args.repeat} "
        "rounds, modes taking turns; every answer checked against single-node's.",
        "",
        "| SF | " + " | ".join(f"{m} (s)" for m in modes) + " | "
        + " | ".join(f"{m} / single" for m in modes[1:]) + " | wrong |",
        "|---" * (2 * len(modes) + 1) + "|",
    ]  # fmt: skip
    failed = False
    for sf in (float(s) for s in args.sfs.split(",")):
        data = tpch.generate(Path(args.data) / f"sf{sf}-p{args.parts}", sf, args.parts)
        ctx = SessionContext()
        tpch.register(ctx, data)
        expected = {n: ctx.sql(tpch.query(n)).to_arrow_table() for n in queries}
        with ExitStack() as stack:
            runners, explainers = {}, {}
            for mode in modes:
                if mode == "single":
                    runners[mode] = lambda sql, c=ctx: c.sql(sql).to_arrow_table()
                    continue
                dctx = distributed_context(ctx, mode, stack)
                runners[mode] = lambda sql, d=dctx: d.sql(sql).to_arrow_table()
                explainers[mode] = dctx
            for mode, dctx in explainers.items():
                alone = [n for n in queries if not is_distributed(dctx.explain(tpch.query(n)))]
                if alone:
                    print(f"{mode}: not distributed: {alone}", file=sys.stderr)
                    failed = True
            best = {m: float("inf") for m in modes}
            wrong: dict[str, list[str]] = {m: [] for m in modes}
            for round_ in range(args.repeat):
                for mode in modes:
                    took, answers = run_users(runners[mode], queries, args.users)
                    best[mode] = min(best[mode], took)
                    wrong[mode] += wrong_answers(answers, expected)
                    print(f"sf{sf:g} round {round_ + 1} {mode}: {took:.2f} s", flush=True)
        bad = sum(len(w) for w in wrong.values())
        for mode, w in wrong.items():
            for line in w[:5]:
                print(f"{mode}: {line}", file=sys.stderr)
        failed |= bad > 0
        ratios = [best[m] / best["single"] for m in modes[1:]]
        print(
            f"sf{sf:g}: "
            + "  ".join(f"{m} {best[m]:.2f} s" for m in modes)
            + "  |  "
            + "  ".join(f"{m} {r:.2f}x" for m, r in zip(modes[1:], ratios, strict=True))
            + f"  |  wrong {bad}",
            flush=True,
        )
        lines.append(
            f"| {sf:g} | " + " | ".join(f"{best[m]:.2f}" for m in modes) + " | "
            + " | ".join(f"{r:.2f}" for r in ratios) + f" | {bad} |"
        )  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
