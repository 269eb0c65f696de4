"""Draws TPC-H q5's distributed plan, before and after a run, as the notebook shows it:
``docs/q5-plan.svg`` and ``docs/q5-plan-analyze.svg`` (``python examples/plan_pictures.py``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from datafusion import SessionContext

from datafusion_distributed_py import DistributedConfig, DistributedContext, LocalCluster

# TPC-H data and queries come from the repository's test harness, not the wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's harness/
from harness import tpch  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs"


def main() -> None:
    data = tpch.generate(tempfile.mkdtemp(prefix="tpch-"), scale_factor=0.1, parts=4)
    ctx = SessionContext()
    tpch.register(ctx, data)
    config = DistributedConfig(file_scan_config_bytes_per_partition=512 * 1024)
    with LocalCluster(2) as cluster:
        dctx = DistributedContext(ctx, workers=cluster, config=config, progress=False)
        df = dctx.sql(tpch.query(5))
        (DOCS / "q5-plan.svg").write_text(dctx.explain(df)._repr_svg_() or "")
        df.collect()
        (DOCS / "q5-plan-analyze.svg").write_text(dctx.explain(df, analyze=True)._repr_svg_() or "")
    print(f"written: {DOCS / 'q5-plan.svg'}, {DOCS / 'q5-plan-analyze.svg'}")


if __name__ == "__main__":
    main()
