"""DataFusion's own SQL test corpus, distributed vs single-node (the vendored files under
``tests/sqllogictest/``; ``python -m benchmarks.sqllogictest`` prints the full tally)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from datafusion_distributed_py.differential import run_slt

FILES = sorted((Path(__file__).parent / "sqllogictest" / "test_files").glob("*.slt"))


@pytest.mark.parametrize("kind", ["embedded", "workers"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_file_answers_as_single_node(path, kind, request):
    logging.getLogger("datafusion_distributed_py").setLevel(logging.ERROR)
    workers = request.getfixturevalue("cluster") if kind == "workers" else None
    report = run_slt(path, workers=workers)
    bad = [o for o in report.outcomes if o.verdict in ("error", "wrong")]
    assert report.counts()["equal"] > 0
    assert not bad, "\n".join(f"{o.verdict}: {o.sql}\n  {o.detail}" for o in bad)
