"""``dctx.explain(df)`` as a picture: the stage graph drawn as SVG by this package (no
Graphviz, nothing fetched), for notebooks.

:class:`ExplainedPlan` is the ``str`` explain returns — ``print`` and ``str`` give the text as
ever — with ``_repr_svg_``/``_repr_html_`` drawing each stage as a box (its number, tasks and
operators), its inputs below it joined by the network boundary they cross (shuffle,
broadcast, coalesce); with ``analyze=True`` each stage's rows and CPU time and each
boundary's bytes are written on them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

#: ``(depth, line, output_rows, elapsed_compute_ns, bytes)`` per operator.
Operator = tuple[int, str, "int | None", "int | None", "int | None"]

_FONT = 11  # px, monospace
_CHAR = 6.7  # px per character at that size
_LINE = 15  # px per text line
_PAD = 8
_GAP_X, _GAP_Y = 28, 56
_MAX_CHARS = 54  # longer operator lines are cut: the text explain has them whole
_BOUNDARIES = {
    "NetworkShuffleExec": "shuffle",
    "NetworkBroadcastExec": "broadcast",
    "NetworkCoalesceExec": "coalesce",
}


@dataclass
class StageBox:
    """One stage as drawn."""

    num: int
    tasks: int
    operators: list[Operator]
    inputs: list[tuple[int, str]]
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    height: float = 0.0
    children: list[int] = field(default_factory=list)

    @property
    def title(self) -> str:
        where = "coordinator" if self.num == 0 else f"{self.tasks} task{'s' * (self.tasks != 1)}"
        return f"Stage {self.num} · {where}"

    def lines(self) -> list[str]:
        out = []
        for depth, line, *_ in self.operators:
            boundary = _BOUNDARY.search(line)
            if boundary is not None:  # where the stage reads another: named by the edge too
                line = f"\u2190 Stage {boundary.group(1)} ({boundary_kind(line)})"
            text = "  " * depth + line
            out.append(text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1] + "…")
        return out

    def totals(self) -> str | None:
        """Rows out of the stage and CPU time of its operators, after a run."""
        if not self.operators or self.operators[0][2] is None:
            return None
        rows = self.operators[0][2]
        cpu = sum(op[3] or 0 for op in self.operators) / 1e6
        return f"{rows:,} rows · {cpu:,.1f} ms CPU"


#: A network boundary's display line: ``[Stage 3] => NetworkBroadcastExec: ...``.
_BOUNDARY = re.compile(r"\[Stage (\d+)\] => (Network\w+Exec)")


def boundary_kind(line: str) -> str:
    """``shuffle`` / ``broadcast`` / ``coalesce`` for a network boundary's display line."""
    found = _BOUNDARY.search(line)
    name = found.group(2) if found else line.split(":", 1)[0].strip()
    return _BOUNDARIES.get(name, name)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def layout(
    stages: Sequence[tuple[int, int, list[Operator], list[tuple[int, str]]]],
) -> list[StageBox]:
    """Boxes placed in rows: the head stage on top, each stage's inputs in the row below it."""
    boxes = {
        num: StageBox(num, tasks, list(ops), list(inputs)) for num, tasks, ops, inputs in stages
    }
    for box in boxes.values():
        lines = [box.title, *box.lines()] + ([box.totals() or ""] if box.totals() else [])
        box.width = max(len(t) for t in lines) * _CHAR + 2 * _PAD
        box.height = len(lines) * _LINE + 2 * _PAD
        box.children = [child for child, _ in box.inputs if child in boxes]
    # A stage's row: one below its deepest reader (a stage read twice sits below both).
    level = dict.fromkeys(boxes, 0)
    order = sorted(boxes)
    for _ in order:
        for box in boxes.values():
            for child in box.children:
                level[child] = max(level[child], level[box.num] + 1)
    rows: dict[int, list[StageBox]] = {}
    for num in order:
        rows.setdefault(level[num], []).append(boxes[num])
    y = float(_PAD)
    total_width = max(sum(b.width for b in row) + _GAP_X * (len(row) - 1) for row in rows.values())
    for depth in sorted(rows):
        row = rows[depth]
        width = sum(b.width for b in row) + _GAP_X * (len(row) - 1)
        x = _PAD + (total_width - width) / 2
        for box in row:
            box.x, box.y = x, y
            x += box.width + _GAP_X
        y += max(b.height for b in row) + _GAP_Y
    return [boxes[n] for n in order]


def to_svg(stages: Sequence[tuple[int, int, list[Operator], list[tuple[int, str]]]]) -> str:
    """The stage graph as a standalone SVG document."""
    boxes = layout(stages)
    by_num = {b.num: b for b in boxes}
    width = max(b.x + b.width for b in boxes) + _PAD
    height = max(b.y + b.height for b in boxes) + _PAD
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="{_FONT}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
    ]
    for box in boxes:  # edges first, so boxes cover their ends
        for child, line in box.inputs:
            source = by_num.get(child)
            if source is None:
                continue
            x1, y1 = source.x + source.width / 2, source.y
            x2, y2 = box.x + box.width / 2, box.y + box.height
            label = boundary_kind(line)
            moved = next((op[4] for op in box.operators if op[1] == line and op[4]), None)
            if moved:
                label += f" · {_bytes(moved)}"
            out.append(
                f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#555" '
                'stroke-width="1.4" marker-end="url(#arrow)"/>'
            )
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            out.append(
                f'<text x="{mx + 6:.1f}" y="{my + 4:.1f}" fill="#1f4e8c" font-weight="bold">'
                f"{html.escape(label)}</text>"
            )
    for box in boxes:
        fill = "#fff4e0" if box.num == 0 else "#eef4ff"
        out.append(
            f'<g class="stage" data-stage="{box.num}" data-tasks="{box.tasks}">'
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.width:.1f}" '
            f'height="{box.height:.1f}" rx="6" fill="{fill}" stroke="#445" stroke-width="1.2"/>'
        )
        ty = box.y + _PAD + _LINE - 3
        out.append(
            f'<text x="{box.x + _PAD:.1f}" y="{ty:.1f}" font-weight="bold">'
            f"{html.escape(box.title)}</text>"
        )
        for line in box.lines():
            ty += _LINE
            out.append(
                f'<text x="{box.x + _PAD:.1f}" y="{ty:.1f}" xml:space="preserve">'
                f"{html.escape(line)}</text>"
            )
        totals = box.totals()
        if totals:
            ty += _LINE
            out.append(
                f'<text x="{box.x + _PAD:.1f}" y="{ty:.1f}" fill="#0a6b2d">'
                f"{html.escape(totals)}</text>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


class ExplainedPlan(str):
    """The text of ``dctx.explain(...)`` (a ``str``), drawn as its stage graph where a
    notebook shows it.

    Example:
        >>> plan = ExplainedPlan("DistributedExec ...", [(0, 1, [(0, "ProjectionExec", None,
        ...     None, None)], [])])
        >>> str(plan), "<svg" in plan._repr_svg_()
        ('DistributedExec ...', True)
    """

    _stages: list[tuple[int, int, list[Operator], list[tuple[int, str]]]] | None

    def __new__(
        cls, text: str, stages: list[tuple[int, int, list[Operator], list[tuple[int, str]]]] | None
    ) -> ExplainedPlan:
        plan = super().__new__(cls, text)
        plan._stages = stages
        return plan

    def _repr_svg_(self) -> str | None:
        return to_svg(self._stages) if self._stages else None

    def _repr_html_(self) -> str:
        svg = self._repr_svg_()
        text = (
            f"<details><summary>plan as text</summary><pre>{html.escape(str(self))}</pre></details>"
        )
        if svg is None:  # a single-node fallback: its reason and plan as text
            return f"<pre>{html.escape(str(self))}</pre>"
        return f'<div class="dfdpy-plan">{svg}{text}</div>'
