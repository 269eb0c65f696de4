"""DataFusion's own SQL test corpus (the sqllogictest files vendored under
``tests/sqllogictest/``), each query run single-node and distributed and compared, on the
embedded cluster and on LocalCluster(2) worker processes.

    python -m benchmarks.sqllogictest                 # every vendored file, both cluster kinds
    python -m benchmarks.sqllogictest --kinds embedded window.slt

Prints per file and in total ``N/M equal, E errors, W wrong`` (M: queries single-node answers;
queries that fail single-node too are counted apart, with the same error required), how many
were answered through the single-node fallback and the share of equal answers run on the
workers, and every error or wrong answer. Writes
``benchmarks/results/sqllogictest.md``; exits non-zero on any error or wrong answer.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path

from datafusion_distributed_py import LocalCluster
from harness.differential import Outcome, run_slt

CORPUS = Path(__file__).parent.parent / "tests" / "sqllogictest"
RESULTS = Path(__file__).parent / "results"


def summary(outcomes: list[Outcome]) -> str:
    counts = Counter(o.verdict for o in outcomes)
    comparable = len(outcomes) - counts["both-raised"]
    fallback = sum(o.fallback for o in outcomes if o.verdict == "equal")
    on_workers = 100.0 * (counts["equal"] - fallback) / max(counts["equal"], 1)
    return (
        f"{counts['equal']}/{comparable} equal, {counts['error']} errors, {counts['wrong']} wrong"
        f" ({fallback} through the single-node fallback, {on_workers:.1f}% on the workers; "
        f"{counts['both-raised']} fail single-node too, with the same error)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="file names under tests/sqllogictest/test_files")
    parser.add_argument("--kinds", default="embedded,local2")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # fallback warnings are counted, not printed
    files = [CORPUS / "test_files" / f for f in args.files] or sorted(
        (CORPUS / "test_files").glob("*.slt")
    )
    lines = ["# sqllogictest corpus, distributed vs single-node", ""]
    bad = 0
    for kind in args.kinds.split(","):
        cluster = LocalCluster(2) if kind == "local2" else None
        everything: list[Outcome] = []
        try:
            for path in files:
                report = run_slt(path, workers=cluster)
                everything += report.outcomes
                line = f"{kind} {path.name}: {summary(report.outcomes)}"
                print(line, flush=True)
                lines.append(f"- {line}")
                for o in report.outcomes:
                    if o.verdict in ("error", "wrong"):
                        bad += 1
                        print(f"  {o.verdict}: {o.sql.strip()[:400]}\n    {o.detail[:400]}")
        finally:
            if cluster is not None:
                cluster.close()
        total = f"{kind} total: {summary(everything)}"
        print(total, flush=True)
        lines += [f"- **{total}**", ""]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sqllogictest.md").write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
