"""What a run tells the person running it: its log (run.log and the console) and the
progress display of its sweep (points done and to do, the current point and phase)."""

from __future__ import annotations

import time

from rich.markup import escape

from ..progress import Bar
from .layout import RunDir
from .plan import Point


class RunLog:
    """The run's log: timestamped lines in run.log, and on the console unless quiet."""

    def __init__(self, rd: RunDir, console=None, *, echo: bool = True):
        from rich.console import Console

        self.console = console or Console(highlight=False, soft_wrap=True)
        self.file, self.echo = open(rd.log, "a"), echo

    def __call__(self, msg: str) -> None:
        self.file.write(time.strftime("%H:%M:%S ") + msg + "\n")
        self.file.flush()
        if self.echo:
            # escaped: a line's own brackets ("[vm-s0] ...", a list of loads) are text, not markup
            self.console.print(f"[dim]·[/] {escape(msg)}", markup=True, highlight=False)

    def close(self) -> None:
        self.file.close()


class Progress(Bar):
    """The sweep's bar (orchestrator/progress.py): points done of all, the current point
    and its phase, and the run's own ETA (estimate.Eta), given at each point's start."""

    def start(self, total: int, done: int) -> None:
        super().start(total, done)

    def point(self, p: Point, eta_s: float | None = None, note: str = "") -> None:
        """A point starts; `eta_s`: the run's estimate of the seconds left (counted down
        until the next point's), None when the run has none."""
        self.update(label=p.id, doing="")
        self.eta_in(eta_s, note=note)

    def phase(self, name: str) -> None:
        self.update(doing=name)

    def advance(self) -> None:
        self.update(advance=1)
