"""How long a run takes: estimated before it starts (`rainmaker plan`, a run's first
lines, every point's progress line) from the testbed's history, and recorded into that
history when it ends.

The history is a JSON-lines file per testbed in the state root (not in the testbed's
slot folder, which `testbed down` removes): one line per finished run, with its
calibration (the k it chose and the overheads it measured) and where its wall time went.
An estimate takes from the last run on the testbed:

- the dilation k: a spec's fixed k, or for `auto` the k that run's calibration asks of
  this spec (calibrate.choose_k, the run's own rule);
- each point's window: the one the model's p99 interval asks for (model_beside.window_for,
  the run's own rule), on the network that calibration measured, in segments as the
  run cuts them;
- the orchestration around each segment (agents started, files collected, the model and
  the checks; stall re-measurements included on average), the calibrations, the
  service probe and the report, as that run spent them.

With no history the estimate is a lower bound, said as "at least" with why: only the
warm-ups and measurements the plan gives, at the k it was planned with.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import segments
from .layout import RunDir
from .plan import Point, TestbedShape, plan
from .spec import Spec

HISTORY = "history.jsonl"
KEEP = 50  # records per testbed: the newest ones count


def history_path(inv) -> Path:
    """The testbed's history file. An emulated testbed is one shape on this machine,
    whatever slot it is up in (None: the nominal one, 1 client and 2 workers); a hardware
    testbed is its inventory's name."""
    if inv is None or inv.emulation is not None:
        clients, workers = (1, 2) if inv is None else (len(inv.clients), len(inv.workers))
        key = f"emulated-{clients}c{workers}w"
    else:
        key = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in inv.name)
    return _root() / "history" / key / HISTORY


def _root() -> Path:
    from ..testbed import state

    return state.root()


def read_history(path: Path) -> list[dict]:
    """The records, oldest first; a line that is not a record is skipped (a run cut off
    while writing it)."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and r.get("kind") == "run":
            out.append(r)
    return out


def append_history(path: Path, record: dict) -> None:
    """Add one record, keeping the newest KEEP (written whole, then renamed)."""
    kept = read_history(path)[-(KEEP - 1) :] + [record]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    tmp.replace(path)


# -- the record of a run -----------------------------------------------------------------


@dataclass
class Clock:
    """Where a run's wall time went, taken by run() as it goes (time.monotonic())."""

    t0: float = field(default_factory=time.monotonic)
    sweep_t0: float | None = None
    sweep_t1: float | None = None
    calibrations: int = 0

    def sweep_started(self) -> None:
        self.sweep_t0 = time.monotonic()

    def sweep_ended(self) -> None:
        self.sweep_t1 = time.monotonic()


def point_walls(rd: RunDir) -> list[dict]:
    """Each measured point's wall time (its first attempt's start to its end, retries
    and re-measurements included) beside its windows: segments, warm-ups, measurement."""
    try:
        state = json.loads(rd.sweep.read_text()).get("points", {})
    except (OSError, ValueError):
        return []
    out = []
    for pid, s in state.items():
        if not isinstance(s, dict) or s.get("status") != "done" or not s.get("finished"):
            continue
        log = s.get("attempts_log") or []
        started = log[0].get("started") if log and isinstance(log[0], dict) else s.get("started")
        p = rd.point(pid).read_point() or {}
        cuts = p.get("segments") or [p.get("measure_s")]
        if not started or not all(isinstance(c, (int, float)) for c in cuts):
            continue
        window = len(cuts) * float(p.get("warmup_s") or 0) + sum(cuts)
        out.append(
            {"id": pid, "wall_s": float(s["finished"]) - float(started), "segments": len(cuts), "window_s": window}
        )
    return out


def record(rd: RunDir, spec: Spec, clock: Clock, estimated: dict | None) -> dict:
    """The history record of a finished run, from its folder and its clock."""
    m = rd.read_manifest()
    walls = point_walls(rd)
    per_segment = [(w["wall_s"] - w["window_s"]) / w["segments"] for w in walls]
    now = time.monotonic()
    sweep_t0 = clock.sweep_t0 if clock.sweep_t0 is not None else now
    sweep_t1 = clock.sweep_t1 if clock.sweep_t1 is not None else now
    cal = m.get("calibration") if isinstance(m.get("calibration"), dict) else None
    return {
        "kind": "run",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "run": str(rd.path),
        "spec": spec.name,
        "k": (m.get("points") or [{}])[0].get("dilation"),
        "auto": bool((m.get("dilation") or {}).get("auto")),
        "calibration": {k: v for k, v in cal.items() if k != "point"} if cal else None,
        "calibrations": clock.calibrations,
        "probe": "service" in m,
        "points": len(walls),
        "segments": sum(w["segments"] for w in walls),
        "wall_s": round(now - clock.t0, 1),
        "before_sweep_s": round(sweep_t0 - clock.t0, 1),
        "sweep_s": round(sweep_t1 - sweep_t0, 1),
        "after_sweep_s": round(now - sweep_t1, 1),
        "segment_overhead_s": round(_median(per_segment), 2) if per_segment else None,
        "estimated_s": (estimated or {}).get("seconds"),
        "estimate_at_least": (estimated or {}).get("at_least"),
    }


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# -- the estimate ------------------------------------------------------------------------


@dataclass
class Estimate:
    seconds: float
    at_least: bool
    basis: list[str]
    k: float
    per_point: dict[str, float]  # point id -> seconds (its windows and their orchestration)
    segment_overhead_s: float
    fixed_s: float  # before and after the sweep

    def text(self) -> str:
        return f"{'at least ' if self.at_least else 'about '}{fmt(self.seconds)}"

    segments: dict[str, int] = field(default_factory=dict)  # point id -> its segments
    after_s: float = 0.0  # the analysis after the sweep

    def remaining(self, pending: list[Point], measured_overhead: float | None = None) -> float:
        """Seconds left with `pending` to measure, and the analysis: this run's own
        orchestration per segment, once it has one, replaces the history's."""
        ov = self.segment_overhead_s if measured_overhead is None else measured_overhead
        out = 0.0
        for p in pending:
            n = self.segments.get(p.id, 1)
            out += self.per_point.get(p.id, 0.0) + n * (ov - self.segment_overhead_s)
        return out + self.after_s

    def as_dict(self) -> dict:
        return {"seconds": round(self.seconds, 1), "at_least": self.at_least, "k": self.k, "basis": self.basis}


def fmt(seconds: float) -> str:
    """12 s, 7.5 min, 1 h 05 min."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


def _k_of(spec: Spec, shape: TestbedShape, cal: dict | None, planned: float) -> tuple[float, str]:
    from . import calibrate

    if not shape.emulated or spec.dilation.emulated != "auto":
        return planned, f"k = {planned:g}, the spec's"
    if cal is None:
        return planned, f"k = {planned:g} as planned before any calibration (the run's calibration may raise it)"
    k, _ = calibrate.choose_k(cal, spec, shape)
    return k, f"k = {k:g}: what the last calibration here (at k = {cal.get('k', 0):g}) asks of this spec"


def _network_at(cal: dict, k: float) -> dict:
    """The calibration's network (paper ns at its own k) at another k: the testbed's
    overheads stay what they were in testbed time."""
    ck = float(cal.get("k") or k)
    net = cal.get("network") or {}
    return {**cal, "network": {n: round(v * ck / k) for n, v in net.items() if isinstance(v, (int, float))}}


def windows(spec: Spec, shape: TestbedShape, points: list[Point], cal: dict | None) -> tuple[list[Point], str]:
    """The points with the windows the run will size for them (dilation.size_windows)."""
    from . import model_beside
    from .validity import thresholds_of

    longest = spec.durations(shape.emulated).measure_max_s
    if longest is None or not points:
        return points, "the spec's windows (no measure_max_s)"
    th = thresholds_of(spec.validity)
    k = points[0].dilation
    manifest = {"testbed": {"kind": "emulated" if shape.emulated else "hardware", "workers": shape.worker_hosts}}
    if cal is not None:
        manifest["calibration"] = _network_at(cal, k)
    out = []
    for p in points:
        s, _ = model_beside.window_for(asdict(p), manifest, spec, th["max_p99_ci_width"], longest, th["ci_confidence"])
        out.append(replace(p, measure_s=s))
    grown = sum(1 for a, b in zip(points, out) if b.measure_s != a.measure_s)
    return out, f"windows as the model's p99 interval asks ({grown} of {len(out)} longer than measure_s)"


def estimate(spec: Spec, shape: TestbedShape, history: list[dict], *, where: str = "this testbed") -> Estimate:
    """The run's wall time on a testbed whose history is `history` (oldest first)."""
    last = history[-1] if history else None
    cal = (last or {}).get("calibration")
    planned = plan(spec, shape)
    k0 = planned[0].dilation if planned else 1.0
    k, k_why = _k_of(spec, shape, cal, k0)
    points = plan(spec, shape, k=k) if k != k0 else planned
    points, w_why = windows(spec, shape, points, cal)
    if cal is None:
        w_why += ", on the emulated network's defaults (no calibration yet)" if shape.emulated else ""
    cuts = {p.id: segments.cuts_of(spec, shape.emulated, p) for p in points}
    window = {p.id: len(cuts[p.id]) * p.warmup_s + sum(cuts[p.id]) for p in points}
    basis = [k_why, w_why]
    if last is None:
        basis.append(
            f"at least: no finished run on {where} yet, so no calibration and no orchestration time to go by "
            "(each segment's start and collection, the calibration, the report): only the warm-ups and windows"
        )
        n = {i: len(c) for i, c in cuts.items()}
        return Estimate(sum(window.values()), True, basis, k, dict(window), 0.0, 0.0, n)
    ov = float(last.get("segment_overhead_s") or 0.0)
    before = float(last.get("before_sweep_s") or 0.0)
    if shape.emulated and spec.dilation.emulated == "auto" and last.get("calibrations"):
        per_cal = before / max(1, int(last["calibrations"]))
        cals = 1 + (k != float((cal or {}).get("k") or k))
        before = per_cal * cals
    after = float(last.get("after_sweep_s") or 0.0) * len(points) / max(1, int(last.get("points") or 1))
    per_point = {pid: window[pid] + len(cuts[pid]) * ov for pid in window}
    basis.append(
        f"from the last run here ({last.get('spec')}, {last.get('at')}): {ov:.1f} s of orchestration per segment, "
        f"{fmt(before)} before the sweep, {fmt(after)} of analysis after it"
    )
    total = before + sum(per_point.values()) + after
    n = {i: len(c) for i, c in cuts.items()}
    return Estimate(total, False, basis, k, per_point, ov, before + after, n, after)


class Eta:
    """A running sweep's elapsed time and ETA, for each point's progress line: the
    windows left, each segment's orchestration as this run has measured it so far (the
    history's before the first point ends), and the analysis after."""

    def __init__(self, rd: RunDir, spec: Spec, emulated: bool, clock: Clock, history: list[dict]):
        self.rd, self.spec, self.emulated, self.clock = rd, spec, emulated, clock
        last = history[-1] if history else {}
        self.history_ov = last.get("segment_overhead_s")
        self.after_s = float(last.get("after_sweep_s") or 0.0) if last else 0.0

    def line(self, p: Point, pending: list[Point], done: int, total: int) -> str:
        walls = point_walls(self.rd)
        per = [(w["wall_s"] - w["window_s"]) / w["segments"] for w in walls]
        ov = _median(per) if per else self.history_ov
        left = self.after_s
        for q in pending:
            cuts = segments.cuts_of(self.spec, self.emulated, q)
            left += len(cuts) * (q.warmup_s + (ov or 0.0)) + sum(cuts)
        elapsed = time.monotonic() - self.clock.t0
        eta = f"ETA {fmt(left)}" if ov is not None else f"ETA at least {fmt(left)} (no orchestration time measured yet)"
        return f"point {done + 1} of {total}, {p.id}: elapsed {fmt(elapsed)}, {eta}"


def accuracy(records: list[dict]) -> list[str]:
    """Each recorded run's estimate against its wall time, for people (newest last)."""
    out = []
    for r in records:
        e, w = r.get("estimated_s"), r.get("wall_s")
        if isinstance(e, (int, float)) and isinstance(w, (int, float)) and w > 0:
            out.append(
                f"{r.get('at')} {r.get('spec')}: estimated {'at least ' if r.get('estimate_at_least') else ''}"
                f"{fmt(e)}, took {fmt(w)} ({100 * (e / w - 1):+.0f}%)"
            )
    return out


__all__ = [
    "Clock",
    "Estimate",
    "Eta",
    "accuracy",
    "append_history",
    "estimate",
    "history_path",
    "read_history",
    "record",
]
