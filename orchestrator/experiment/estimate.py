"""How long a run takes: estimated before it starts (`rainmaker plan`, a run's first
lines, every point's progress line) from the testbed's history, and recorded into that
history when it ends.

The history (history.py) has one record per finished run, with its calibration (the k
it chose and the overheads it measured) and where its wall time went, and one per
`rainmaker calibrate` (its calibrations only). An estimate takes from the last run of its
family on the testbed (a Rain run or an RPC run: rpc-client over kernel TCP is stalled
by the host several times as often as rain-client, so the families' stall rates
differ), else from the last run of any; and the calibrations of its family only (their
round trips are of different paths):

- the dilation k: a spec's fixed k, or for `auto` the k the run's calibrations will
  ask of this spec (calibrate.choose_k, the run's own rule), from where the last run
  of the spec settled (history.settled_k), as the run starts;
- each point's window: the one the model's p99 interval asks for (model_beside.window_for,
  the run's own rule), on the network that calibration measured, in segments as the
  run cuts them;
- the orchestration around each segment (agents started, files collected, the model and
  the checks; stall re-measurements included on average), the segments a window whose
  latencies are correlated gets (segments.replications_for; as often as that run's
  points got them), the calibrations, the service probe and the report, as that run
  spent them.

With no history the estimate is "at least" the planned windows, at the planned k, and
says why. Where the history leaves the run open it is a range, "between A and B": a
run that calibrates first with none recorded (its windows from measure_s up), and an
automatic k whose CPU bound rests on one calibration's CPU per request.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

from . import segments
from .history import family, family_of, runs, settled_k
from .layout import RunDir
from .plan import Point, TestbedShape, plan
from .spec import Spec

# -- the record of a run -----------------------------------------------------------------


@dataclass
class Clock:
    """Where a run's wall time went, taken by run() as it goes (time.monotonic())."""

    t0: float = field(default_factory=time.monotonic)
    sweep_t0: float | None = None
    sweep_t1: float | None = None
    calibrations: int = 0
    calibrated: list[dict] = field(default_factory=list)  # each calibration's result, in order

    def sweep_started(self) -> None:
        self.sweep_t0 = time.monotonic()

    def sweep_ended(self) -> None:
        self.sweep_t1 = time.monotonic()


def point_walls(rd: RunDir) -> list[dict]:
    """Each measured point's wall time (from its first attempt after the run's last stop
    to its end, retries and re-measurements included) beside its windows (segments,
    warm-ups, measurement) and the attempts the stall rule set aside (stalled/), with
    theirs."""
    from .layout import STALLED

    try:
        state = json.loads(rd.sweep.read_text()).get("points", {})
    except (OSError, ValueError):
        return []
    planned = {q.get("id"): q.get("measure_s") for q in rd.read_manifest().get("points") or [] if isinstance(q, dict)}
    out = []
    for pid, s in state.items():
        if not isinstance(s, dict) or s.get("status") != "done" or not s.get("finished"):
            continue
        log = [a for a in s.get("attempts_log") or [] if isinstance(a, dict)]
        # from the first attempt after the run was last stopped (Ctrl-C, then --resume):
        # the stop and the time until the resume are not the point's
        stops = [i for i, a in enumerate(log) if a.get("reason") == "interrupted"]
        log = log[stops[-1] + 1 :] if stops else log
        started = log[0].get("started") if log else s.get("started")
        p = rd.point(pid).read_point() or {}
        cuts = p.get("segments") or [p.get("measure_s")]
        if not started or not all(isinstance(c, (int, float)) for c in cuts):
            continue
        stalled = []
        for d in sorted((rd.path / STALLED / pid).glob("*/point.json")):
            try:
                q = json.loads(d.read_text())
                stalled.append(float(q.get("warmup_s") or 0) + float(q.get("measure_s") or 0))
            except (OSError, ValueError, TypeError, AttributeError):
                continue
        out.append(
            {
                "id": pid,
                "wall_s": float(s["finished"]) - float(started),
                "segments": len(cuts),
                "window_s": len(cuts) * float(p.get("warmup_s") or 0) + sum(cuts),
                "stalled": len(stalled),
                "stalled_s": sum(stalled),
                # measured longer than planned: its latencies were correlated (segments.replications_for)
                "extended": isinstance(planned.get(pid), (int, float)) and sum(cuts) > planned[pid] + 0.5,
            }
        )
    return out


@dataclass(frozen=True)
class Costs:
    """What measuring costs beyond the windows on a testbed: the orchestration around
    each measurement attempt (agents started, files collected, the model and the
    checks), and how often the host stalls a measurement, per second of it (each
    stalled one is measured again, up to remeasure_stalled times)."""

    attempt_s: float
    stalls_per_s: float
    measured_s: float  # the seconds of measurement the rate was taken over
    # segmented points, and how many of them the independence check had measured longer
    segmented: int = 0
    extended: int = 0

    @staticmethod
    def of(walls: list[dict]) -> Costs | None:
        attempts = sum(w["segments"] + w["stalled"] for w in walls)
        if not attempts:
            return None
        measured = sum(w["window_s"] + w["stalled_s"] for w in walls)
        spent = sum(w["wall_s"] - w["window_s"] - w["stalled_s"] for w in walls)
        stalls = sum(w["stalled"] for w in walls)
        # An attempt is set aside once however many stalls it had, and stalls come in
        # bursts: stalls / seconds undercounts (the Rakaia 20 us run: 0.054/s, so 42% of
        # its 10 s attempts, where 54% stalled). The rate is the one at which an attempt
        # of the mean length stalls as often as these did (point_s's own model).
        q = min(stalls / attempts, attempts / (attempts + 1))
        mean = measured / attempts
        rate = -math.log(1.0 - q) / mean if mean > 0 and q > 0 else 0.0
        segmented = sum(1 for w in walls if w["segments"] > 1)
        extended = sum(1 for w in walls if w["segments"] > 1 and w.get("extended"))
        return Costs(round(max(0.0, spent) / attempts, 2), rate, round(measured, 1), segmented, extended)

    def pooled(self, other: Costs | None) -> Costs:
        """This run's orchestration, with the stall rate over both runs' seconds."""
        if other is None:
            return self
        seconds = self.measured_s + other.measured_s
        rate = (
            (self.stalls_per_s * self.measured_s + other.stalls_per_s * other.measured_s) / seconds if seconds else 0.0
        )
        return Costs(self.attempt_s, rate, seconds, self.segmented + other.segmented, self.extended + other.extended)

    @property
    def extended_share(self) -> float:
        return self.extended / self.segmented if self.segmented else 0.0

    def point_s(self, p: Point, cuts: list[float], limit: int, longest: float | None = None) -> float:
        """A point's expected wall time: each segment's attempts (1 + q + ... + q^limit,
        q the chance the host stalls one that long), each its window and orchestration;
        for a segmented point, the segments the independence check would add to it
        (segments.replications_for, within `longest`: measure_max_s) times the share of
        segmented points it measured longer."""

        def attempts_s(length: float) -> float:
            window = p.warmup_s + length
            q = 1.0 - math.exp(-self.stalls_per_s * window)
            return (window + self.attempt_s) * sum(q**i for i in range(limit + 1))

        out = sum(attempts_s(length) for length in cuts)
        if len(cuts) > 1 and self.extended:
            more = segments.more_for_correlated(list(cuts), longest)
            out += self.extended_share * sum(attempts_s(length) for length in more)
        return out

    def as_dict(self) -> dict:
        return asdict(self) | {"stalls_per_s": round(self.stalls_per_s, 6)}


def record(rd: RunDir, spec: Spec, clock: Clock, estimated: dict | None) -> dict:
    """The history record of a finished run, from its folder and its clock."""
    m = rd.read_manifest()
    walls = point_walls(rd)
    costs = Costs.of(walls)
    now = time.monotonic()
    sweep_t0 = clock.sweep_t0 if clock.sweep_t0 is not None else now
    sweep_t1 = clock.sweep_t1 if clock.sweep_t1 is not None else now
    cal = m.get("calibration") if isinstance(m.get("calibration"), dict) else None
    return _about(rd, spec, m, "run") | {
        "calibration": {k: v for k, v in cal.items() if k != "point"} if cal else None,
        "calibrations": clock.calibrations,
        # every calibration, at its k: the testbed's overheads grow with k (a lower rate
        # wakes sleeping processes more often), and the next estimate reads them by k
        "calibrated": [{k: v for k, v in c.items() if k != "point"} for c in clock.calibrated],
        "probe": "service" in m,
        "points": len(walls),
        "segments": sum(w["segments"] for w in walls),
        "stalled": sum(w["stalled"] for w in walls),
        "wall_s": round(now - clock.t0, 1),
        "before_sweep_s": round(sweep_t0 - clock.t0, 1),
        "sweep_s": round(sweep_t1 - sweep_t0, 1),
        "after_sweep_s": round(now - sweep_t1, 1),
        "costs": costs.as_dict() if costs else None,
        "estimated_s": (estimated or {}).get("seconds"),
        "estimate_at_least": (estimated or {}).get("at_least"),
        "estimated_low_s": (estimated or {}).get("low_seconds"),
    }


def calibration_record(rd: RunDir, spec: Spec, calibrated: list[dict]) -> dict:
    """The history record of `rainmaker calibrate`: each calibration it made, at its k
    (an estimate reads them as a run's), and the k it chose."""
    cals = [{k: v for k, v in c.items() if k != "point"} for c in calibrated]
    return _about(rd, spec, rd.read_manifest(), "calibration") | {"calibrated": cals}


def _about(rd: RunDir, spec: Spec, m: dict, kind: str) -> dict:
    at = time.strftime("%Y-%m-%dT%H:%M:%S")
    k = (m.get("points") or [{}])[0].get("dilation")
    auto = bool((m.get("dilation") or {}).get("auto"))
    return {"kind": kind, "at": at, "run": str(rd.path), "spec": spec.name, "family": family(spec), "k": k} | {
        "auto": auto
    }


_NAMES = {"rpc": "RPC", "rain": "Rain"}


def last_alike(history: list[dict], spec: Spec) -> tuple[dict | None, bool]:
    """The newest record of spec's family, else the newest of any (and whether it is of
    the family)."""
    done = runs(history)
    same = [r for r in done if family_of(r) == family(spec)]
    if same:
        return same[-1], True
    return (done[-1], False) if done else (None, False)


def costs_of(rec: dict | None) -> Costs | None:
    c = (rec or {}).get("costs")
    if not isinstance(c, dict):
        return None
    try:
        return Costs(
            float(c["attempt_s"]),
            float(c["stalls_per_s"]),
            float(c.get("measured_s") or 0.0),
            int(c.get("segmented") or 0),
            int(c.get("extended") or 0),
        )
    except (KeyError, TypeError, ValueError):
        return None


# -- the estimate ------------------------------------------------------------------------


@dataclass
class Estimate:
    seconds: float
    at_least: bool
    basis: list[str]
    k: float
    per_point: dict[str, float]  # point id -> seconds (its windows and their orchestration)
    fixed_s: float  # before and after the sweep
    # a range's lower end: the windows depend on a calibration the run makes first and
    # the history holds none; `seconds` is then the windows sized on the network defaults
    low_s: float | None = None

    def text(self) -> str:
        if self.low_s is not None and not self.at_least:
            return f"between {fmt(self.low_s)} and {fmt(self.seconds)}"
        return f"{'at least ' if self.at_least else 'about '}{fmt(self.seconds)}"

    def as_dict(self) -> dict:
        out = {"seconds": round(self.seconds, 1), "at_least": self.at_least, "k": self.k, "basis": self.basis}
        if self.low_s is not None:
            out["low_seconds"] = round(self.low_s, 1)
        return out


def fmt(seconds: float) -> str:
    """12 s, 7.5 min, 1 h 05 min."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


def calibrations_by_k(history: list[dict], fam: str | None = None) -> dict[float, dict]:
    """The newest calibration at each k the testbed was calibrated at, by runs of family
    `fam` when given: a Rain calibration's round trip is rain-client's through the
    scheduler, an RPC one's rpc-client's over kernel TCP."""
    out: dict[float, dict] = {}
    for rec in history:  # oldest first: a newer one replaces an older at its k
        if fam is not None and family_of(rec) != fam:
            continue
        for c in [*(rec.get("calibrated") or []), rec.get("calibration")]:
            if (
                isinstance(c, dict)
                and isinstance(c.get("k"), (int, float))
                and isinstance(c.get("round_trip_us"), dict)
            ):
                out[float(c["k"])] = c
    return out


def calibration_at(known: dict[float, dict], k: float, spread: float = 0.0, cpu_scales: bool = False) -> dict | None:
    """What a calibration at k would measure: the known one at k, else its round trip
    and handler error interpolated in log k between the nearest known (the nearest one's
    beyond them), in testbed time, with the model's network in paper time at k (as
    calibrate.summarise makes it). `spread` moves the round trip by that share;
    `cpu_scales`: with one calibration, its CPU per request taken as growing in
    proportion to k (the other end of what one calibration leaves open)."""
    from .calibrate import HOST_LEGS, WORKER_PACKETS

    if not known:
        return None
    ks = sorted(known)
    lo = max((x for x in ks if x <= k), default=ks[0])
    hi = min((x for x in ks if x >= k), default=ks[-1])
    t = 0.0 if hi == lo else (math.log(k) - math.log(lo)) / (math.log(hi) - math.log(lo))

    def mix(get) -> float:
        return (1 - t) * get(known[lo]) + t * get(known[hi])

    rt = mix(lambda c: float(c["round_trip_us"]["mean"])) * (1 + spread)
    over = mix(lambda c: float(c.get("service_overshoot_us") or 0.0))
    base = known[lo if t < 0.5 else hi]
    net = dict(base.get("network") or {})
    net.update(
        client_switch_ns=round(rt * 1000 / HOST_LEGS / k),
        switch_worker_ns=round(rt * 1000 / HOST_LEGS / k),
        worker_pkt_ns=round(over * 1000 / WORKER_PACKETS / k),
    )
    out = {**base, "k": k, "round_trip_us": {**base["round_trip_us"], "mean": round(rt, 1)},
           "service_overshoot_us": round(over, 1), "network": net}  # fmt: skip
    if isinstance(base.get("cpu"), dict) and (per := cpu_per_request_at(known, k, cpu_scales)) is not None:
        out["cpu"] = {**base["cpu"], "per_request_ms": round(per, 4)}
    return out


def cpu_per_request_at(known: dict[float, dict], k: float, scales: bool = False) -> float | None:
    """The CPU per request a calibration at k would read. It grows about linearly with k
    on the emulated testbed (on this VM 2.99 ms at k = 100, 7.94 at 1000, 13.8 at 2000:
    a share of the testbed's busy time lasts as long as the dilated service does), so
    it is the line through the two nearest calibrations that have it, in k, never below
    the smallest measured; with one, that one, or with `scales` that one times k over
    its k (None: none has it)."""
    pts = sorted(
        (x, float(c["cpu"]["per_request_ms"]))
        for x, c in known.items()
        if isinstance(c.get("cpu"), dict) and isinstance(c["cpu"].get("per_request_ms"), (int, float))
    )
    if not pts:
        return None
    if len(pts) == 1:
        return pts[0][1] * (k / pts[0][0] if scales else 1.0)
    near = sorted(pts, key=lambda xy: abs(math.log(xy[0]) - math.log(k)))[:2]
    (k1, c1), (k2, c2) = sorted(near)
    slope = (c2 - c1) / (k2 - k1)
    return max(min(c for _, c in pts), c1 + slope * (k - k1))


def auto_k(
    spec: Spec,
    shape: TestbedShape,
    known: dict[float, dict],
    k0: float,
    spread: float = 0.0,
    cpu_scales: bool = False,
    held: bool = False,
):
    """The k an automatic dilation reaches (dilation.choose_dilation's walk): calibrate
    at k0 (held, when it is where the last run settled), plan again at the k that asks
    for, calibrate there, raise it while asked (never lower after the first), at most
    MAX_CALIBRATIONS times. Returns (k, the ks calibrated at, the calibration at k)."""
    from . import calibrate
    from .dilation import MAX_CALIBRATIONS

    k, ks = k0, [k0]
    first = calibration_at(known, k0, spread, cpu_scales)
    if held and (low := [c for x, c in sorted(known.items()) if isinstance(c.get("cpu"), dict)]):
        first = {**first, "cpu": low[0]["cpu"]}  # as the run takes it (history.Settled.cpu)
    cal = first
    for i in range(MAX_CALIBRATIONS):
        margin = calibrate.HELD_MARGIN if held and i == 0 else calibrate.RAISE_MARGIN
        nk, _ = calibrate.choose_k(cal, spec, shape, hold=k if i > 0 or held else None, margin=margin)
        if nk == k or (i > 0 and nk < k) or i == MAX_CALIBRATIONS - 1:
            break
        k = nk
        ks.append(k)
        cal = calibration_at(known, k, spread, cpu_scales)
        cal = {**cal, "cpu": first["cpu"]} if "cpu" in first else cal  # as choose_dilation keeps it
    return k, ks, cal


def _k_of(
    spec: Spec, shape: TestbedShape, known: dict[float, dict], planned: float, start: tuple[float, str] | None
) -> tuple[float, list[float], str]:
    if not shape.emulated or spec.dilation.emulated != "auto":
        return planned, [planned], f"k = {planned:g}, the spec's"
    if not known:
        return (
            planned,
            [planned],
            f"k = {planned:g} as planned before any calibration (the run's calibration may raise it)",
        )
    k, ks, _ = auto_k(spec, shape, known, planned, held=start is not None)
    at = ", ".join(f"{x:g}" for x in sorted(known))
    whence = f"starting at k = {start[0]:g}, {start[1]}, " if start else ""
    return (
        k,
        ks,
        (
            f"k = {k:g}: {whence}what calibrations at k = {' then '.join(f'{x:g}' for x in ks)} ask of this spec, "
            f"their overheads read from this testbed's calibrations at k = {at}"
        ),
    )


def windows(spec: Spec, shape: TestbedShape, points: list[Point], cal: dict | None) -> tuple[list[Point], str]:
    """The points with the windows the run will size for them (dilation.size_windows),
    on `cal`, a calibration at the points' k (calibration_at)."""
    from . import model_beside
    from .validity import independent, thresholds_of

    longest = spec.durations(shape.emulated).measure_max_s
    if longest is None or not points:
        return points, "the spec's windows (no measure_max_s)"
    th = thresholds_of(spec.validity)
    manifest = {"testbed": {"kind": "emulated" if shape.emulated else "hardware", "workers": shape.worker_hosts}}
    if cal is not None:
        manifest["calibration"] = cal
    out = []
    for p in points:
        s, _ = model_beside.window_for(
            asdict(p), manifest, spec, th["max_p99_ci_width"], longest, th["ci_confidence"], independent(th)
        )
        out.append(replace(p, measure_s=s))
    grown = sum(1 for a, b in zip(points, out) if b.measure_s != a.measure_s)
    return (
        out,
        f"windows as the model says the p99 interval and the independence test need ({grown} of {len(out)} longer than measure_s)",
    )


ROUND_TRIP_SPREAD = 0.3  # this testbed's calibrated round trip, run to run (264 to 476 us for the demo at k = 1000)


def estimate(spec: Spec, shape: TestbedShape, history: list[dict], *, where: str = "this testbed") -> Estimate:
    """The run's wall time on a testbed whose history is `history` (oldest first)."""
    last, alike = last_alike(history, spec)
    known = calibrations_by_k(history, family(spec))
    planned = plan(spec, shape)
    start = settled_k(history, spec) if known and shape.emulated and spec.dilation.emulated == "auto" else None
    k0 = start.k if start else planned[0].dilation if planned else 1.0
    k, ks, k_why = _k_of(spec, shape, known, k0, (start.k, start.whence) if start else None)
    est = _at(spec, shape, last, known, planned, ks, k_why, where)
    if last is not None and not alike:
        est.basis.append(
            f"no {_NAMES[family(spec)]} run here yet: the orchestration "
            f"and stalls are the last run's, of the other family ({last.get('spec')}), whose host stalls may differ"
        )
    if not (known and shape.emulated and spec.dilation.emulated == "auto"):
        return est

    def other_k(**how) -> tuple[float, Estimate] | None:
        """The k the walk reaches with the calibrations read `how`, and the run at it."""
        other, oks, _ = auto_k(spec, shape, known, k0, held=start is not None, **how)
        return None if other == k else (other, _at(spec, shape, last, known, planned, oks, "", where, **how))

    for f in (ROUND_TRIP_SPREAD, -ROUND_TRIP_SPREAD):
        if alt := other_k(spread=f):
            est.basis.append(
                f"k may be {alt[0]:g} instead: the calibrated round trip varies by about "
                f"{100 * ROUND_TRIP_SPREAD:.0f}% from run to run here, and that much would move it; at k = "
                f"{alt[0]:g} the run takes about {fmt(alt[1].seconds)} (the run's log says which k it chose, and why)"
            )
            break
    with_cpu = [x for x, c in known.items() if isinstance(c.get("cpu"), dict)]
    if len(with_cpu) == 1 and (alt := other_k(cpu_scales=True)):
        est.basis.append(
            f"k may be {alt[0]:g} instead: the CPU a request costs was calibrated here at k = {with_cpu[0]:g} "
            f"only, and it grows with k; if in proportion, at k = {alt[0]:g} the run takes about "
            f"{fmt(alt[1].seconds)} (a run's calibrations at other ks settle it): the range spans both"
        )
        est.low_s = min(est.seconds, alt[1].seconds)
        est.seconds = max(est.seconds, alt[1].seconds)
    return est


def _at(
    spec: Spec,
    shape: TestbedShape,
    last: dict | None,
    known: dict[float, dict],
    planned: list[Point],
    ks: list[float],
    k_why: str,
    where: str,
    spread: float = 0.0,
    cpu_scales: bool = False,
) -> Estimate:
    """estimate() when the run calibrates at `ks` and measures at the last of them."""
    from . import calibrate

    k = ks[-1]
    cal = calibration_at(known, k, spread, cpu_scales)
    unsized = plan(spec, shape, k=k) if not planned or k != planned[0].dilation else planned
    points, w_why = windows(spec, shape, unsized, cal)
    low_from = None  # the windows a range's lower end takes
    if cal is None and shape.emulated:
        if calibrate.calibrates(spec):
            w_why += (
                ", on the emulated network's defaults: the run sizes them on the calibration it makes first, and "
                "none is recorded here yet, so they may be as short as measure_s (the lower end)"
            )
            low_from = unsized
        else:
            w_why += ", on the emulated network's defaults (the run sizes them so too: a real memcached's run does not calibrate)"
    cuts = {p.id: segments.cuts_of(spec, shape.emulated, p) for p in points}
    basis = [k_why, w_why]
    if last is None:
        basis.append(
            f"at least: no finished run on {where} yet, so no calibration and no orchestration time to go by "
            "(each segment's start and collection, the calibration, the report): only the warm-ups and windows"
        )
        least = low_from if low_from is not None else points
        cut0 = {p.id: segments.cuts_of(spec, shape.emulated, p) for p in least}
        floor = {p.id: len(cut0[p.id]) * p.warmup_s + sum(cut0[p.id]) for p in least}
        return Estimate(sum(floor.values()), True, basis, k, floor, 0.0)
    costs = costs_of(last) or Costs(0.0, 0.0, 0.0)
    before = float(last.get("before_sweep_s") or 0.0)
    if shape.emulated and last.get("calibrations"):
        # the last run's time before its sweep, per calibration, times this run's
        before = before / max(1, int(last["calibrations"])) * len(ks)
        if spec.dilation.emulated == "auto":
            basis.append(
                f"{len(ks)} calibration{'s' if len(ks) > 1 else ''} (at k = {', '.join(f'{x:g}' for x in ks)})"
            )
    after = float(last.get("after_sweep_s") or 0.0) * len(points) / max(1, int(last.get("points") or 1))
    limit = spec.validity.remeasure_stalled
    longest = spec.durations(shape.emulated).measure_max_s
    per_point = {p.id: costs.point_s(p, cuts[p.id], limit, longest) for p in points}
    basis.append(
        f"from the last {_NAMES[family(spec)] + ' ' if family_of(last) == family(spec) else ''}run here "
        f"({last.get('spec')}, {last.get('at')}): {costs.attempt_s:.1f} s of orchestration "
        f"per measurement, {_stalls(costs.stalls_per_s)}, {_extended(costs)}"
        f"{fmt(before)} before the sweep, {fmt(after)} of analysis after it"
    )
    total = before + sum(per_point.values()) + after
    low = None
    if low_from is not None:
        low = (
            before
            + after
            + sum(costs.point_s(p, segments.cuts_of(spec, shape.emulated, p), limit, longest) for p in low_from)
        )
    return Estimate(total, False, basis, k, per_point, before + after, low)


def _extended(costs: Costs) -> str:
    """What the last run's correlated windows add (Costs.point_s), or nothing."""
    if not costs.extended:
        return ""
    return (
        f"{costs.extended} of its {costs.segmented} segmented points measured longer for correlated latencies "
        "(as many here, on average), "
    )


def _stalls(rate: float) -> str:
    return (
        f"a stall every {fmt(1.0 / rate)} of measurement (measured again)"
        if rate > 0
        else "no measurement stalled by the host"
    )


class Eta:
    """A running sweep's elapsed time and ETA, for each point's progress line: the
    windows left with their orchestration and stalls, as this run has measured them so
    far (the stall rate pooled with the last run's, the history's alone before the first
    point ends), and the analysis after."""

    def __init__(self, rd: RunDir, spec: Spec, emulated: bool, clock: Clock, history: list[dict]):
        self.rd, self.spec, self.emulated, self.clock = rd, spec, emulated, clock
        last = last_alike(history, spec)[0] or {}
        self.past = costs_of(last)
        self.after_s = float(last.get("after_sweep_s") or 0.0) if last else 0.0
        self.left_s: float | None = None  # the last line's ETA, in seconds from then
        self.at_least = False  # ... a lower bound (no orchestration time measured yet)

    def line(self, p: Point, pending: list[Point], done: int, total: int) -> str:
        now = Costs.of(point_walls(self.rd))
        costs = now.pooled(self.past) if now is not None else self.past
        limit = self.spec.validity.remeasure_stalled
        longest = self.spec.durations(self.emulated).measure_max_s
        left = self.after_s
        for q in pending:
            cuts = segments.cuts_of(self.spec, self.emulated, q)
            left += (costs or Costs(0.0, 0.0, 0.0)).point_s(q, cuts, limit, longest)
        elapsed = time.monotonic() - self.clock.t0
        self.left_s, self.at_least = left, costs is None
        eta = (
            f"ETA {fmt(left)}"
            if costs is not None
            else f"ETA at least {fmt(left)} (no orchestration time measured yet)"
        )
        return f"point {done + 1} of {total}, {p.id}: elapsed {fmt(elapsed)}, {eta}"


def accuracy(records: list[dict]) -> list[str]:
    """Each recorded run's estimate against its wall time, for people (newest last)."""
    out = []
    for r in runs(records):
        e, w = r.get("estimated_s"), r.get("wall_s")
        if isinstance(e, (int, float)) and isinstance(w, (int, float)) and w > 0:
            lo = r.get("estimated_low_s")
            if isinstance(lo, (int, float)) and not r.get("estimate_at_least"):
                inside = (
                    "inside it"
                    if lo <= w <= e
                    else f"{100 * ((lo if w < lo else e) / w - 1):+.0f}% from its nearer end"
                )
                out.append(f"{r.get('at')} {r.get('spec')}: estimated {fmt(lo)} to {fmt(e)}, took {fmt(w)} ({inside})")
                continue
            out.append(
                f"{r.get('at')} {r.get('spec')}: estimated {'at least ' if r.get('estimate_at_least') else ''}"
                f"{fmt(e)}, took {fmt(w)} ({100 * (e / w - 1):+.0f}%)"
            )
    return out


__all__ = [
    "Clock",
    "Costs",
    "Estimate",
    "Eta",
    "accuracy",
    "calibration_record",
    "estimate",
    "record",
]
