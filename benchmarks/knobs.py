"""Same answers under every planner knob: TPC-H, TPC-DS and the sqllogictest corpus, each
query distributed with one ``DistributedConfig`` knob changed, against single-node.

    python -m benchmarks.knobs [--kinds embedded,local2] [--corpus]

TPC-DS runs at SF 0.1 with joins of more than 10k build rows partitioned, so that selective
joins sit above shuffles as they do at SF 1 (at SF 0.01 every join is collected). Prints one
line per knob and data set (``N/M equal``, then each query that differed) and writes
``benchmarks/results/knobs.md``; exits non-zero on any difference. With scans split finer
than DataFusion splits them, corpus queries whose answer depends on row order without an
ORDER BY (``LIMIT n`` alone) may differ; they are listed, not hidden.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    LocalCluster,
    tpcds,
)
from harness import tpch
from harness.differential import compare, run_slt

DATA = Path(__file__).parent / "data"
RESULTS = Path(__file__).parent / "results"
CORPUS = Path(__file__).parent.parent / "tests" / "sqllogictest" / "test_files"

KNOBS: dict[str, DistributedConfig] = {
    "defaults": DistributedConfig(),
    "broadcast_joins=False": DistributedConfig(broadcast_joins=False),
    "adaptive=False": DistributedConfig(adaptive=False),
    "partial_reduce=True": DistributedConfig(partial_reduce=True),
    "children_isolator_unions=False": DistributedConfig(children_isolator_unions=False),
    "dynamic_task_count=True": DistributedConfig(dynamic_task_count=True),
    "max_tasks_per_stage=1": DistributedConfig(max_tasks_per_stage=1),
    "file_scan_config_bytes_per_partition=1": DistributedConfig(
        file_scan_config_bytes_per_partition=1
    ),
}

#: A data set: its session and its queries as (name, SQL).
DataSet = tuple[SessionContext, list[tuple[str, str]]]


def tpch_set() -> DataSet:
    data = tpch.generate(DATA / "sf0.1-p8", scale_factor=0.1, parts=8)
    ctx = SessionContext()
    tpch.register(ctx, data)
    return ctx, [(f"q{n}", tpch.query(n)) for n in range(1, 23)]


def tpcds_set() -> DataSet:
    data = tpcds.generate(DATA / "tpcds-sf0.1", 0.1)
    ctx = SessionContext(tpcds.partitioned_joins())
    tpcds.register(ctx, data)
    return ctx, [(f"q{n}", tpcds.query(data, n)) for n in tpcds.QUERIES]


def differences(ctx: SessionContext, dctx: DistributedContext, queries) -> Iterator[str]:
    for name, sql in queries:
        outcome = compare(ctx, dctx, sql)
        if outcome.verdict != "equal":
            yield f"{name} {outcome.verdict}: {outcome.detail[:200]}"


def corpus_differences(make: Callable[[SessionContext], DistributedContext]) -> Iterator[str]:
    for path in sorted(CORPUS.glob("*.slt")):
        for o in run_slt(path, dctx_for=make).outcomes:  # type: ignore[arg-type]
            if o.verdict in ("error", "wrong"):
                sql = " ".join(o.sql.split())[:160]
                yield f"{path.name} {o.verdict}: {sql} | {o.detail[:160]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="embedded,local2")
    parser.add_argument("--corpus", action="store_true", help="also the sqllogictest corpus")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # fallbacks are compared like any other answer
    sets = {"TPC-H SF0.1": tpch_set(), "TPC-DS SF0.1": tpcds_set()}
    lines = ["# Same answers under every planner knob", ""]
    bad = 0
    with ExitStack() as stack:
        for kind in args.kinds.split(","):
            workers = stack.enter_context(LocalCluster(2)) if kind == "local2" else None
            for knob, config in KNOBS.items():
                for set_name, (ctx, queries) in sets.items():
                    dctx = DistributedContext(ctx, workers=workers, config=config)
                    diffs = list(differences(ctx, dctx, queries))
                    bad += len(diffs)
                    equal = len(queries) - len(diffs)
                    line = f"{kind} {knob} {set_name}: {equal}/{len(queries)} equal"
                    print(line, *diffs, sep="\n  ", flush=True)
                    lines += [f"- {line}", *(f"  - {d}" for d in diffs)]
                if args.corpus and kind == "embedded":

                    def make(
                        ctx: SessionContext, *, config=config, **_: object
                    ) -> DistributedContext:
                        return DistributedContext(ctx, config=config)

                    diffs = list(corpus_differences(make))
                    line = f"{kind} {knob} sqllogictest corpus: {len(diffs)} differ"
                    print(line, *diffs, sep="\n  ", flush=True)
                    lines += [f"- {line}", *(f"  - {d}" for d in diffs)]
                    if knob != "file_scan_config_bytes_per_partition=1":
                        bad += len(diffs)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "knobs.md").write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
