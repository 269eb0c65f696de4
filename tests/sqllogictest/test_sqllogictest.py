"""DataFusion's own SQL test corpus, distributed vs single-node (the vendored files under
``tests/sqllogictest/``; ``python -m benchmarks.sqllogictest`` prints the full tally)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from harness.differential import run_slt

#: Part of CI's full run; `pytest -m "not slow"` leaves it out of a developer's loop.
pytestmark = pytest.mark.slow

CORPUS = Path(__file__).parent
FILES = sorted((CORPUS / "test_files").glob("*.slt"))
#: Queries of each file answered through the single-node fallback, at most (as last measured:
#: ``python -m benchmarks.sqllogictest``): a fallback answers right, so without a budget the
#: test would pass if every query fell back.
FALLBACK_BUDGET: dict[str, int] = json.loads((CORPUS / "fallback_budget.json").read_text())


@pytest.mark.parametrize("kind", ["embedded", "workers"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_file_answers_as_single_node(path, kind, request):
    logging.getLogger("datafusion_distributed_py").setLevel(logging.ERROR)
    workers = request.getfixturevalue("cluster") if kind == "workers" else None
    report = run_slt(path, workers=workers)
    bad = [o for o in report.outcomes if o.verdict in ("error", "wrong")]
    counts = report.counts()
    assert counts["equal"] > 0
    assert counts["fallback"] <= FALLBACK_BUDGET[path.name], (
        f"{counts['fallback']} queries fell back, over the budget of "
        f"{FALLBACK_BUDGET[path.name]}: " + "; ".join(o.sql for o in report.outcomes if o.fallback)
    )
    assert not bad, "\n".join(f"{o.verdict}: {o.sql}\n  {o.detail}" for o in bad)
