"""The sweep's state on disk (execo's ParamSweeper is the model): every point is todo,
running, done or failed, and every change is written atomically before anything else
happens, so a crash, a Ctrl-C or a lost host never loses a done point. When a sweep is
resumed, a point found `running` was interrupted and one found `failed` may have met a
passing outage: both go back to todo and run again (ParamSweeper retries failed
points too); done points are kept.

sweep.json is read back on resume, so its shape is checked there: whatever a person
(or a disk) did to it, the answer is a UsageError naming the file, the point and the
fix, never a traceback.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import UsageError
from .layout import SWEEP, atomic_replace
from .plan import Point

TODO, RUNNING, DONE, FAILED = "todo", "running", "done", "failed"
STATUSES = (TODO, RUNNING, DONE, FAILED)


@dataclass
class PointState:
    status: str
    digest: str
    attempts: int = 0  # attempts started, over every invocation of the run
    reason: str | None = None  # why it failed, or which validity checks a done point failed
    valid: bool | None = None  # a done point's verdict (validity.json); None until measured
    started: float | None = None
    finished: float | None = None
    wall_s: float | None = None
    # One entry per attempt, {attempt, started, reason}: `reason` above is only the last
    # one's, and a point retried through an outage should say what each attempt met.
    # Files written before this field existed load with it empty.
    attempts_log: list[dict] = field(default_factory=list)
    # Which testbed measured the point, on a cluster of testbeds (orchestrator/cluster);
    # None on a run of one testbed.
    testbed: str | None = None


# What each field of a point may hold in sweep.json (None is allowed where the default is None).
_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "digest": (str,),
    "attempts": (int,),
    "reason": (str, type(None)),
    "valid": (bool, type(None)),
    "started": (int, float, type(None)),
    "finished": (int, float, type(None)),
    "wall_s": (int, float, type(None)),
    "attempts_log": (list,),
    "testbed": (str, type(None)),
}
_LOG_TYPES: dict[str, tuple[type, ...]] = {
    "attempt": (int,),
    "started": (int, float),
    "reason": (str, type(None)),
}
_TYPE_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false", list: "a list"}


class Sweep:
    FILE = SWEEP

    def __init__(self, run_dir: Path, points: list[Point], *, resume: bool):
        self.path = run_dir / self.FILE
        self.points = {p.id: p for p in points}
        self.order = [p.id for p in points]
        self.retried: list[str] = []  # failed points a resume put back to todo
        if resume:
            self.state = self._load()
        else:
            if self.path.exists():
                raise UsageError(f"{run_dir} already holds a sweep", fix=f"resume it with --resume {run_dir}")
            self.state = {p.id: PointState(TODO, p.digest) for p in points}
            self._save()

    def _load(self) -> dict[str, PointState]:
        raw = self._read_points()
        state = {}
        for pid in self.order:
            p = self.points[pid]
            if pid not in raw:
                raise UsageError(
                    f"cannot resume: point {pid} of the spec is not in {self.path}",
                    fix="the spec changed since that run: start a new run",
                )
            s = _point_state(self.path, pid, raw[pid])
            if s.digest != p.digest:
                raise UsageError(
                    f"cannot resume: point {pid} is defined differently than in {self.path}",
                    fix="the spec or the testbed changed since that run: start a new run",
                )
            if s.status == RUNNING:  # interrupted mid-point (killed): run it again
                s.status, s.reason = TODO, "interrupted"
                self._note(s, "interrupted")  # its attempt too, as a Ctrl-C's (estimate.point_walls)
            elif s.status == FAILED:  # its reason stays: why it is to be measured again
                s.status = TODO
                self.retried.append(pid)
            state[pid] = s
        extra = set(raw) - set(self.order)
        if extra:
            raise UsageError(
                f"cannot resume: {self.path} has points the spec no longer has ({', '.join(sorted(extra))})",
                fix="the spec changed since that run: start a new run",
            )
        self._save_state(state)
        return state

    def _read_points(self) -> dict:
        """sweep.json's `points` object, or a UsageError saying what is wrong with the file."""
        fix = "restore sweep.json from a backup, or start a new run without --resume"
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError) as e:  # UnicodeDecodeError (a binary file) is a ValueError
            raise UsageError(f"cannot resume: {self.path} is missing or damaged ({e})", fix=fix) from None
        if not isinstance(doc, dict):
            raise UsageError(
                f"cannot resume: {self.path} holds {_kind(doc)}, not an object with `points`",
                fix=fix,
            )
        unknown = sorted(set(doc) - {"points"})
        if unknown:
            raise UsageError(f"cannot resume: {self.path} has unknown field(s) {', '.join(unknown)}", fix=fix)
        points = doc.get("points")
        if not isinstance(points, dict):
            raise UsageError(
                f"cannot resume: {self.path}: `points` is {_kind(points)}, not an object of point id -> state",
                fix=fix,
            )
        return points

    def _save(self) -> None:
        self._save_state(self.state)

    def _save_state(self, state: dict[str, PointState]) -> None:
        atomic_replace(self.path, json.dumps({"points": {pid: state[pid].__dict__ for pid in self.order}}, indent=1))

    # -- transitions -----------------------------------------------------------------
    def pending(self) -> list[Point]:
        return [self.points[pid] for pid in self.order if self.state[pid].status == TODO]

    def start(self, pid: str, *, testbed: str | None = None) -> None:
        s = self.state[pid]
        s.status, s.attempts, s.started, s.reason, s.valid = RUNNING, s.attempts + 1, time.time(), None, None
        s.attempts_log.append({"attempt": s.attempts, "started": s.started, "reason": None})
        if testbed is not None:
            s.testbed = testbed
        self._save()

    def adopt(self, pid: str, measured: dict, *, testbed: str, before: list[dict]) -> None:
        """A point's end as the testbed that measured it recorded it (its sweep.json
        entry there), after the attempts `before` that lost testbeds ended: this
        sweep's digest is kept (the testbed planned the point at its own k)."""
        s = _point_state(self.path, pid, {**measured, "digest": self.state[pid].digest, "testbed": testbed})
        log = [dict(e) for e in before] + [dict(e) for e in s.attempts_log]
        for i, e in enumerate(log, 1):
            e["attempt"] = i
        s.attempts, s.attempts_log = len(log), log
        self.state[pid] = s
        self._save()

    def attempt_failed(self, pid: str, reason: str) -> None:
        """The running attempt ended without a measurement; the point stays running
        (a retry follows, or finish(FAILED)): a crash now still reruns it on resume."""
        s = self.state[pid]
        s.reason = reason
        self._note(s, reason)
        self._save()

    def finish(self, pid: str, status: str, reason: str | None = None, *, valid: bool | None = None) -> None:
        s = self.state[pid]
        s.status, s.reason, s.valid, s.finished = status, reason, valid, time.time()
        s.wall_s = round(s.finished - (s.started or s.finished), 3)
        if reason is not None:
            self._note(s, reason)
        self._save()

    def requeue(self, pid: str, reason: str) -> None:
        s = self.state[pid]
        s.status, s.reason = TODO, reason
        self._note(s, reason)
        self._save()

    @staticmethod
    def _note(s: PointState, reason: str) -> None:
        if s.attempts_log and s.attempts_log[-1]["attempt"] == s.attempts:
            s.attempts_log[-1]["reason"] = reason

    def invalid(self) -> list[str]:
        """Done points whose measurement failed validity checks."""
        return [pid for pid in self.order if self.state[pid].status == DONE and self.state[pid].valid is False]

    def summary(self) -> str:
        """The sweep's end in one line, for the run's log (measured or simulated)."""
        c, invalid = self.counts(), self.invalid()
        done = (
            f"{c['done']} done ({len(invalid)} of them not valid: see sweep.json)" if invalid else f"{c['done']} done"
        )
        return f"{done}, {c['failed']} failed, {c['todo']} todo"

    def counts(self) -> dict[str, int]:
        out = {TODO: 0, RUNNING: 0, DONE: 0, FAILED: 0}
        for s in self.state.values():
            out[s.status] += 1
        return out


def _kind(value) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _point_state(path: Path, pid: str, raw) -> PointState:
    """One point's entry of sweep.json as a PointState, every field checked."""
    where = f"cannot resume: {path}: point {pid}"
    fix = f"repair point {pid} in {path} (or remove the file's damage from a backup), or start a new run"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} is {_kind(raw)}, not an object of its state", fix=fix)
    known = {f.name for f in fields(PointState)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UsageError(
            f"{where} has unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})", fix=fix
        )
    missing = [k for k in ("status", "digest") if k not in raw]
    if missing:
        raise UsageError(f"{where} lacks {', '.join(missing)}", fix=fix)
    _check_types(raw, _TYPES, where, fix)
    if raw["status"] not in STATUSES:
        raise UsageError(
            f"{where}: unknown status {raw['status']!r} (one of: {', '.join(STATUSES)})",
            fix=fix,
        )
    for i, entry in enumerate(raw.get("attempts_log", [])):
        at = f"{where}: attempts_log[{i}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{at} is {_kind(entry)}, not an object", fix=fix)
        if set(entry) != set(_LOG_TYPES):
            raise UsageError(f"{at} must have exactly the fields {', '.join(_LOG_TYPES)}", fix=fix)
        _check_types(entry, _LOG_TYPES, at, fix)
    return PointState(**raw)


def _check_types(raw: dict, types: dict[str, tuple[type, ...]], where: str, fix: str) -> None:
    for k, v in raw.items():
        ok = types[k]
        # JSON true/false load as bool, a subclass of int: a count or a time is never one
        if not isinstance(v, ok) or (isinstance(v, bool) and bool not in ok):
            want = " or ".join("null" if t is type(None) else _TYPE_NAMES[t] for t in ok)
            raise UsageError(f"{where}: {k} is {_kind(v)}, not {want}", fix=fix)


def record_rechecked(run_dir: Path, verdicts: dict[str, dict]) -> int:
    """Each done point's `valid` and `reason` in sweep.json as its checks judge it now
    (`rainmaker analyze --recheck`, its validity.json's: point id -> that dict), so the
    sweep, the report and the summary agree. Returns how many points changed; a run
    without a readable sweep.json is left alone (the analysis reads its points'
    folders)."""
    from .validity import reason_of

    path = run_dir / SWEEP
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    pts = data.get("points") if isinstance(data, dict) else None
    if not isinstance(pts, dict):
        return 0
    changed = 0
    for pid, v in verdicts.items():
        s = pts.get(pid)
        if not isinstance(s, dict) or s.get("status") != DONE or not isinstance(v.get("valid"), bool):
            continue
        failed = [(c.get("name", "?"), c.get("message", "")) for c in v.get("checks", []) if c.get("passed") is False]
        now = (v["valid"], None if v["valid"] else reason_of(failed))
        if (s.get("valid"), s.get("reason")) != now:
            s["valid"], s["reason"] = now
            changed += 1
    if changed:
        atomic_replace(path, json.dumps(data, indent=1))
    return changed
