"""The progress bar of the long commands (run, simulate, provision): one display for
all of them, and the ETA it shows.

On a terminal it is a rich bar: what is being done, done of total, elapsed, ETA.
Anywhere else (a pipe, a file, a CI log) it shows nothing: each command's log lines
are its plain record there, unchanged. The bar is a context manager, so Ctrl-C stops
its live display and gives the terminal back clean.

The ETA is either a caller's own text (a run's, estimate.Eta) or a `Pace`: the time
the work done so far took, scaled to the work left. It counts down between updates.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from .experiment.estimate import fmt


class Pace:
    """An ETA from the work done so far and the time it took. Rough: work of one size
    does not always take the same time (a task that installs packages, a point at a
    higher load), and what has not started is assumed to go as what has."""

    def __init__(self, work: float = 0.0):
        self.left, self.done, self.spent = float(work), 0.0, 0.0

    def did(self, work: float, spent_s: float | None) -> None:
        """`work` done in `spent_s`; None: work dropped (a point refused), which says nothing of the pace."""
        self.left = max(0.0, self.left - work)
        if spent_s is not None:
            self.done, self.spent = self.done + work, self.spent + spent_s

    def left_s(self) -> float | None:
        """Seconds left, or None before anything is done (no pace to go by)."""
        return self.spent / self.done * self.left if self.done > 0 else None


class Bar:
    """One bar: a label, done of total (None: not known, the bar pulses), what is being
    done, elapsed and the ETA; `below`, when given, renders under it (provision's hosts).
    Disabled, or on a console that is not a terminal, it shows nothing; `transient`, it
    is gone once done (what follows says it all)."""

    def __init__(
        self,
        console=None,
        *,
        enabled: bool = True,
        below: Callable[[], object] | None = None,
        transient: bool = False,
    ):
        class _Rich(RichProgress):
            def get_renderables(self):
                yield self.make_tasks_table(self.tasks)
                if below is not None:
                    yield below()

        self.console = console or Console()
        self.enabled = enabled and self.console.is_terminal
        self.rich = _Rich(
            TextColumn("{task.fields[label]}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[doing]}", markup=False),  # task and point names are not markup
            TimeElapsedColumn(),
            _EtaColumn(),
            console=self.console,
            transient=transient,
            disable=not self.enabled,
            # Stray prints go above the bar; but a bar on stderr (provision's) leaves stdout
            # alone: it may be a file.
            redirect_stdout=not self.console.stderr,
            redirect_stderr=not self.console.stderr,
        )
        self.task = None
        self.pace: Pace | None = None

    def __enter__(self):
        if self.enabled:  # disabled, rich would still end with an empty line
            self.rich.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.rich.stop()  # the live display, on Ctrl-C too

    def start(self, total: int | None, done: int = 0, label: str = "", work: float | None = None) -> None:
        """The bar, at `done` of `total`. `work`: what the ETA paces (Pace), when it is not the units counted."""
        self.task = self.rich.add_task(label, total=total, completed=done, label=label, doing="", eta="", eta_at=None)
        self.pace = Pace(work if work is not None else (total or 0) - done)

    def update(self, **fields) -> None:
        """Set `label` or `doing`, or rich's `total`, `completed`, `advance`."""
        if self.task is not None:
            self.rich.update(self.task, **fields)

    def did(self, n: int = 1, *, work: float | None = None, spent_s: float | None) -> None:
        """`n` units done, of `work` (default n) in `spent_s`: the bar advances, the ETA follows the pace."""
        if self.task is None or self.pace is None:
            return
        self.pace.did(n if work is None else work, spent_s)
        self.rich.advance(self.task, n)
        self.eta_in(self.pace.left_s())

    def eta_in(self, seconds: float | None, note: str = " (rough)") -> None:
        """The ETA, `seconds` from now (None: not known yet); it counts down until the next one."""
        self.update(eta_at=None if seconds is None else (time.monotonic() + seconds, note))

    def eta_text(self, text: str) -> None:
        """The ETA as the caller words it (a run's, from its own estimate)."""
        self.update(eta=text, eta_at=None)


class _EtaColumn(ProgressColumn):
    """The ETA: a countdown to the last deadline given, else the caller's text."""

    def render(self, task) -> Text:
        at = task.fields.get("eta_at")
        if task.finished:
            return Text("")
        if at is None:
            return Text(task.fields.get("eta", ""), style="progress.remaining")
        left = at[0] - time.monotonic()
        return Text(("ETA " + fmt(left) if left >= 1 else "ETA soon") + at[1], style="progress.remaining")


__all__ = ["Bar", "Pace"]
