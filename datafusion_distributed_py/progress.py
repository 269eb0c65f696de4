"""Progress of a distributed query: per-stage task counts, as events or live bars."""

from __future__ import annotations

import sys
import threading
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


def interactive() -> bool:
    """True in Jupyter/IPython or when stderr is a terminal: where live bars are wanted."""
    if "ipykernel" in sys.modules:
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class ProgressBars:
    """One tqdm bar per stage, updated as its tasks finish, with the rows produced so far."""

    def __init__(self) -> None:
        from tqdm.auto import tqdm

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


def resolve(progress: bool | ProgressCallback | None) -> ProgressCallback | None:
    """``None`` = bars when interactive; ``True``/``False`` force them; a callable gets events."""
    if progress is None:
        progress = interactive()
    if progress is True:
        return ProgressBars()
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
