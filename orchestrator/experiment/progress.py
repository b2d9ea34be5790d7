"""What a run tells the person running it: its log (run.log and the console) and the
progress display of its sweep (points done and to do, the current point and phase)."""

from __future__ import annotations

import time

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
            self.console.print(f"[dim]·[/] {msg}", markup=True, highlight=False)

    def close(self) -> None:
        self.file.close()


class Progress:
    """Point, phase and ETA on the terminal (rich), or plain lines when not a TTY."""

    def __init__(self, console=None, enabled: bool = True):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RP

        self.console = console or Console()
        self.enabled = enabled
        self.rp = RP(
            TextColumn("[bold]{task.fields[pid]}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[phase]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),  # the run's own (estimate.Eta), not rich's rate
            console=self.console,
            transient=False,
            disable=not enabled,
        )
        self.task = None

    def __enter__(self):
        self.rp.__enter__()
        return self

    def __exit__(self, *exc):
        self.rp.__exit__(*exc)

    def start(self, total: int, done: int) -> None:
        self.task = self.rp.add_task("sweep", total=total, completed=done, pid="", phase="", eta="")

    def point(self, p: Point, eta: str = "") -> None:
        if self.task is not None:
            self.rp.update(self.task, pid=p.id, phase="", eta=eta)

    def phase(self, name: str) -> None:
        if self.task is not None:
            self.rp.update(self.task, phase=name)

    def advance(self) -> None:
        if self.task is not None:
            self.rp.advance(self.task)
