"""Progress of a distributed query: per-stage task counts, as events or live bars."""

from __future__ import annotations

import html
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressEvent:
    """A stage's progress: ``done`` of ``total`` tasks finished and the rows its tasks have
    produced so far. Sent when a task is sent to a worker and when it finishes
    (``kind="task"``), while tasks run as workers report their rows (``kind="rows"``, about
    every ``DistributedConfig.progress_interval`` seconds), or, with ``kind="retry"``, as word
    that a worker was lost and the query runs again on the workers left.

    Attributes:
        stage: stage number (as in ``explain``); 0 for a retry.
        done: tasks of the stage finished so far.
        total: tasks of the stage.
        worker_url: the worker of the task this event is about (for a retry: the lost one).
        attempt: which run of the query this is: 1, then 2... after retries (a retry event
            carries the run that failed).
        kind: ``"task"``, ``"rows"`` or ``"retry"``.
        rows: rows the stage's tasks produced so far (running tasks included), when known.
        eta_s: estimated seconds until the stage ends, once some of its tasks finished.
    """

    stage: int
    done: int
    total: int
    worker_url: str
    attempt: int = 1
    kind: str = "task"
    rows: int | None = None
    eta_s: float | None = None


ProgressCallback = Callable[[ProgressEvent], Any]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (a notebook, JupyterLab, VS Code's notebooks), where
    terminal bars would print their escape codes as text."""
    shell = sys.modules.get("IPython")
    ipython = getattr(shell, "get_ipython", lambda: None)() if shell is not None else None
    return ipython is not None and type(ipython).__name__ == "ZMQInteractiveShell"


def interactive() -> bool:
    """True in a notebook or when stderr is a terminal: where live progress is wanted."""
    if in_notebook():
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class ProgressBars:
    """One terminal tqdm bar per stage, updated as its tasks finish, with the rows produced
    so far."""

    def __init__(self) -> None:
        from tqdm.std import tqdm

        self._tqdm = tqdm
        self._bars: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            if event.kind == "retry":  # the query starts over: so do its bars
                for b in self._bars.values():
                    b.close()
                self._bars.clear()
                return
            bar = self._bars.get(event.stage)
            if bar is None:
                bar = self._tqdm(
                    total=event.total, desc=f"stage {event.stage}", unit="task", leave=False
                )
                self._bars[event.stage] = bar
            bar.total = event.total
            bar.n = event.done
            if event.rows is not None:
                bar.set_postfix_str(f"{event.rows:,} rows", refresh=False)
            bar.refresh()
            if all(b.n >= b.total for b in self._bars.values()):
                for b in self._bars.values():
                    b.close()
                self._bars.clear()


class _Stage:
    __slots__ = ("done", "eta_s", "rows", "total")

    def __init__(self, event: ProgressEvent) -> None:
        self.done, self.total = 0, event.total
        self.rows: int | None = None
        self.eta_s: float | None = None

    def update(self, event: ProgressEvent) -> None:
        self.done, self.total = event.done, event.total
        self.rows = event.rows if event.rows is not None else self.rows
        self.eta_s = event.eta_s


class NotebookProgress:
    """One HTML block per query in the notebook's output, updated in place (an IPython
    display handle, so no escape codes and no repeated lines): each stage's tasks as a bar,
    its rows and ETA, and the retries; it stays, as a summary, when the query is done."""

    #: Seconds between two redraws (the last one is always drawn).
    EVERY = 0.2

    def __init__(self) -> None:
        from IPython import display

        self._html: Any = display.HTML  # type: ignore[attr-defined]
        self._display: Any = display.display
        self._lock = threading.Lock()
        self._handle: Any = None
        self._stages: dict[int, _Stage] = {}
        self._retries: list[str] = []
        self._started = self._drawn = 0.0

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            now = time.monotonic()
            if self._handle is None:  # a new query: a new block
                self._stages, self._retries, self._started = {}, [], now
                self._handle = self._display(self._html(self._render(now)), display_id=True)
            if event.kind == "retry":
                self._retries.append(
                    f"worker {event.worker_url} lost: running again on the others "
                    f"(attempt {event.attempt + 1})"
                )
                self._stages = {}
            else:
                self._stages.setdefault(event.stage, _Stage(event)).update(event)
            finished = bool(self._stages) and all(s.done >= s.total for s in self._stages.values())
            if finished or now - self._drawn >= self.EVERY:
                self._handle.update(self._html(self._render(now, finished)))
                self._drawn = now
            if finished:
                self._handle = None

    def _render(self, now: float, finished: bool = False) -> str:
        elapsed = now - self._started
        took = f"{elapsed * 1000:.0f} ms" if elapsed < 1 else f"{elapsed:.1f} s"
        state = f"done in {took}" if finished else f"running · {took}"
        rows = []
        for num in sorted(self._stages, reverse=True):  # leaves first, as the query runs
            s = self._stages[num]
            share = 100 * s.done / s.total if s.total else 100
            eta = f"{s.eta_s:.1f} s" if s.eta_s is not None and s.done < s.total else ""
            produced = f"{s.rows:,} rows" if s.rows is not None else ""
            rows.append(
                f"<tr><td>stage {num}</td><td style='width:12em'><div style='background:#e4e8ee;"
                f"border-radius:3px'><div style='width:{share:.0f}%;background:#3b7dd8;"
                f"height:0.8em;border-radius:3px'></div></div></td><td>{s.done}/{s.total} "
                f"tasks</td><td>{produced}</td><td>{eta}</td></tr>"
            )
        retries = "".join(
            f"<div style='color:#a15c00'>{html.escape(r)}</div>" for r in self._retries
        )
        return (
            f"<div class='dfdpy-progress'><b>distributed query</b> · {state}{retries}"
            f"<table style='font-size:0.9em'>{''.join(rows)}</table></div>"
        )


def resolve(progress: bool | ProgressCallback | None) -> ProgressCallback | None:
    """``None`` = live progress where a person watches (a notebook's display, or bars on a
    terminal), else none; ``True``/``False`` force it; a callable gets events."""
    if progress is None:
        progress = interactive()
    if progress is True:
        return NotebookProgress() if in_notebook() else ProgressBars()
    if progress is False:
        return None
    if callable(progress):
        return progress
    raise TypeError(f"progress must be a bool, None or a callable, got {type(progress).__name__}")


RustReport = Callable[[int, int, int, str, int, str, "int | None", "float | None"], None]


def to_rust(callback: ProgressCallback | None) -> RustReport | None:
    """Adapt an event callback to the Rust core's ``(stage, done, total, url, attempt, kind,
    rows, eta_s)`` calls."""
    if callback is None:
        return None

    def report(
        stage: int, done: int, total: int, url: str, attempt: int, kind: str,
        rows: int | None, eta_s: float | None,
    ) -> None:  # fmt: skip
        callback(ProgressEvent(stage, done, total, url, attempt, kind, rows, eta_s))

    return report
