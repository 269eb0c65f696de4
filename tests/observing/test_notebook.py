"""At home in a notebook: ``examples/notebook.ipynb`` run through a real Jupyter
kernel (nbclient + ipykernel) on both cluster kinds — live progress as one HTML block per
query (no escape codes, no repeated lines), the plan drawn as SVG, ``%%sql`` / ``%sql``,
and status, metrics and the dashboard as HTML — and the picture checked against the plan."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import SPLIT_CONFIG

from datafusion_distributed_py import DistributedContext
from datafusion_distributed_py.plan_picture import ExplainedPlan
from harness import tpch

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

#: A real Jupyter kernel per cluster kind: seconds to start, like the browser tests.
pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebook.ipynb"
SVG = "{http://www.w3.org/2000/svg}"


def run_notebook(workers: int) -> Any:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {**os.environ, "DFDPY_NOTEBOOK_WORKERS": str(workers)}
    # Run where Jupyter runs it: in examples/, the notebook's folder.
    resources = {"metadata": {"path": str(NOTEBOOK.parent)}}
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources=resources)
    client.execute(env=env)  # the kernel's environment: which cluster the notebook starts
    return nb


@pytest.fixture(scope="module", params=[0, 2], ids=["embedded", "local2"])
def notebook(request: pytest.FixtureRequest) -> Any:
    return run_notebook(request.param)


def cell(nb: Any, source_start: str) -> Any:
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start))


def texts(c: Any) -> list[str]:
    """Everything a cell printed or displayed, as text."""
    out = []
    for o in c.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type == "error":
            out.append("\n".join(o.traceback))
        else:
            out.extend(str(v) for v in o.get("data", {}).values())
    return out


def test_no_cell_fails_or_prints_escape_codes(notebook):
    for c in notebook.cells:
        if c.cell_type != "code":
            continue
        assert not [o for o in c.outputs if o.output_type == "error"], texts(c)
        for text in texts(c):
            assert "\x1b[" not in text, (c.source, text[:300])


def test_progress_is_one_live_block_per_query(notebook):
    run = cell(notebook, "q5.to_pandas()")
    blocks = [o for o in run.outputs if "dfdpy-progress" in o.get("data", {}).get("text/html", "")]
    assert len(blocks) == 1, [o.output_type for o in run.outputs]
    final = blocks[0]["data"]["text/html"]
    assert "done in" in final
    stages = re.findall(r"stage (\d+)</td>.*?(\d+)/(\d+) tasks", final)
    assert len(stages) >= 3 and all(done == total for _, done, total in stages), final
    assert not [o for o in run.outputs if o.output_type == "stream"], texts(run)  # no bars
    assert any("text/html" in o.get("data", {}) for o in run.outputs if o is not blocks[0])


def test_the_plan_is_drawn_as_svg(notebook):
    for source in ("q5 = dctx.sql(", "dctx.explain(q5, analyze=True)"):
        drawn = cell(notebook, source)
        (out,) = [o for o in drawn.outputs if o.output_type == "execute_result"]
        page = out["data"]["text/html"]
        svg = ET.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])
        stages = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "stage"]
        assert len(stages) >= 5
        labels = " ".join(t.text or "" for t in svg.iter(f"{SVG}text"))
        assert "shuffle" in labels and "broadcast" in labels and "coalesce" in labels
        assert "DistributedExec" in out["data"]["text/plain"]  # the text, as print gives it
        if "analyze" in source:
            assert re.search(r"[\d,]+ rows · [\d.,]+ ms CPU", labels), labels


def test_sql_magics_show_datafusion_tables_and_keep_the_frame(notebook):
    grouped = cell(notebook, "%%sql -o by_flag")
    (out,) = [o for o in grouped.outputs if o.output_type == "execute_result"]
    assert "<table" in out["data"]["text/html"] and "l_returnflag" in out["data"]["text/html"]
    line = cell(notebook, "%sql SELECT count(*)")
    (out,) = [o for o in line.outputs if o.output_type == "execute_result"]
    assert "orders" in out["data"]["text/html"]
    kept = cell(notebook, "by_flag.count()")
    (out,) = [o for o in kept.outputs if o.output_type == "execute_result"]
    rows, stages = eval(out["data"]["text/plain"])  # a tuple of two ints
    assert rows == 4 and stages >= 2  # the kept frame is distributed


def test_status_metrics_and_dashboard_render_as_html(notebook):
    for source, mark in (("dctx.status()", "<table"), ("dctx.metrics_table(q5)", "dfdpy-metrics"),
                         ("board = dctx.dashboard()", "dashboard</a>")):  # fmt: skip
        (out,) = [o for o in cell(notebook, source).outputs if o.output_type == "execute_result"]
        assert mark in out["data"].get("text/html", ""), (source, out["data"].keys())


def test_the_picture_has_every_stage_of_the_plan(ctx, workers):
    dctx = DistributedContext(ctx, workers=workers, config=SPLIT_CONFIG, progress=False)
    plan = dctx.explain(tpch.query(5))
    assert isinstance(plan, ExplainedPlan) and isinstance(plan, str)
    svg = ET.fromstring(plan._repr_svg_())
    drawn = {
        int(g.get("data-stage")): int(g.get("data-tasks"))
        for g in svg.iter(f"{SVG}g")
        if g.get("class") == "stage"
    }
    listed = {int(n): int(t) for n, t in re.findall(r"Stage (\d+) ── tasks=(\d+)", plan)}
    assert drawn == {0: 1, **listed}
    boundaries = len(re.findall(r"\[Stage \d+\] => Network\w+Exec", plan))
    edges = list(svg.iter(f"{SVG}line"))
    assert len(edges) == boundaries
