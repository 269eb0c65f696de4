"""Random queries (tests/queries/test_fuzz.py's strategies), distributed vs single-node, on the
embedded cluster and on LocalCluster(2) worker processes.

    python -m benchmarks.fuzz --examples 500

Prints, per cluster kind, ``N/M equal, E errors, W wrong`` and how many were answered through
the single-node fallback; writes ``benchmarks/results/fuzz.md``. Exits non-zero on any error or
wrong answer, printing the queries.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections import Counter
from pathlib import Path

from hypothesis.errors import NonInteractiveExampleWarning

from datafusion_distributed_py import DistributedContext, LocalCluster
from harness.differential import Outcome, compare

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "queries"))
from test_fuzz import QUERIES, session  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def run(kind: str, examples: int) -> list[Outcome]:
    ctx = session()
    cluster = LocalCluster(2) if kind == "local2" else None
    try:
        dctx = DistributedContext(ctx, workers=cluster)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonInteractiveExampleWarning)
            return [compare(ctx, dctx, QUERIES.example()) for _ in range(examples)]
    finally:
        if cluster is not None:
            cluster.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--kinds", default="embedded,local2")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # fallback warnings are counted, not printed
    lines = [f"# Fuzz: {args.examples} random queries per cluster kind", ""]
    failed = False
    for kind in args.kinds.split(","):
        outcomes = run(kind, args.examples)
        counts = Counter(o.verdict for o in outcomes)
        fallback = sum(o.fallback for o in outcomes)
        comparable = len(outcomes) - counts["both-raised"]
        line = (
            f"{kind}: {counts['equal']}/{comparable} equal, {counts['error']} errors, "
            f"{counts['wrong']} wrong ({fallback} answered through the single-node fallback, "
            f"{counts['both-raised']} invalid queries raising the same error both ways)"
        )
        print(line, flush=True)
        lines.append(f"- {line}")
        for o in outcomes:
            if o.verdict in ("error", "wrong"):
                failed = True
                print(f"  {o.verdict}: {o.sql}\n    {o.detail}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fuzz.md").write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
