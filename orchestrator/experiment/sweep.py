"""The sweep's state on disk (execo's ParamSweeper is the model): every point is todo,
running, done or failed, and every change is written atomically before anything else
happens, so a crash, a Ctrl-C or a lost host never loses a done point. A point found
`running` when a sweep is loaded was interrupted: it goes back to todo and reruns.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .layout import SWEEP, atomic_replace
from .plan import Point

TODO, RUNNING, DONE, FAILED = "todo", "running", "done", "failed"


@dataclass
class PointState:
    status: str
    digest: str
    attempts: int = 0
    reason: str | None = None  # why it failed, or which validity checks a done point failed
    valid: bool | None = None  # a done point's verdict (validity.json); None until measured
    started: float | None = None
    finished: float | None = None
    wall_s: float | None = None


class Sweep:
    FILE = SWEEP

    def __init__(self, run_dir: Path, points: list[Point], *, resume: bool):
        self.path = run_dir / self.FILE
        self.points = {p.id: p for p in points}
        self.order = [p.id for p in points]
        if resume:
            self.state = self._load()
        else:
            if self.path.exists():
                raise UsageError(f"{run_dir} already holds a sweep", fix=f"resume it with --resume {run_dir}")
            self.state = {p.id: PointState(TODO, p.digest) for p in points}
            self._save()

    def _load(self) -> dict[str, PointState]:
        try:
            raw = json.loads(self.path.read_text())["points"]
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(
                f"cannot resume: {self.path} is missing or damaged ({e})", fix="start a new run without --resume"
            ) from None
        state = {}
        for pid in self.order:
            p = self.points[pid]
            if pid not in raw:
                raise UsageError(
                    f"cannot resume: point {pid} of the spec is not in {self.path}",
                    fix="the spec changed since that run: start a new run",
                )
            s = PointState(**raw[pid])
            if s.digest != p.digest:
                raise UsageError(
                    f"cannot resume: point {pid} is defined differently than in {self.path}",
                    fix="the spec or the testbed changed since that run: start a new run",
                )
            if s.status == RUNNING:  # interrupted mid-point: run it again
                s.status, s.reason = TODO, "interrupted"
            state[pid] = s
        extra = set(raw) - set(self.order)
        if extra:
            raise UsageError(
                f"cannot resume: {self.path} has points the spec no longer has ({', '.join(sorted(extra))})",
                fix="the spec changed since that run: start a new run",
            )
        self._save_state(state)
        return state

    def _save(self) -> None:
        self._save_state(self.state)

    def _save_state(self, state: dict[str, PointState]) -> None:
        atomic_replace(self.path, json.dumps({"points": {pid: state[pid].__dict__ for pid in self.order}}, indent=1))

    # -- transitions -----------------------------------------------------------------
    def pending(self) -> list[Point]:
        return [self.points[pid] for pid in self.order if self.state[pid].status == TODO]

    def start(self, pid: str) -> None:
        s = self.state[pid]
        s.status, s.attempts, s.started, s.reason, s.valid = RUNNING, s.attempts + 1, time.time(), None, None
        self._save()

    def finish(self, pid: str, status: str, reason: str | None = None, *, valid: bool | None = None) -> None:
        s = self.state[pid]
        s.status, s.reason, s.valid, s.finished = status, reason, valid, time.time()
        s.wall_s = round(s.finished - (s.started or s.finished), 3)
        self._save()

    def requeue(self, pid: str, reason: str) -> None:
        s = self.state[pid]
        s.status, s.reason = TODO, reason
        self._save()

    def invalid(self) -> list[str]:
        """Done points whose measurement failed validity checks."""
        return [pid for pid in self.order if self.state[pid].status == DONE and self.state[pid].valid is False]

    def counts(self) -> dict[str, int]:
        out = {TODO: 0, RUNNING: 0, DONE: 0, FAILED: 0}
        for s in self.state.values():
            out[s.status] += 1
        return out
