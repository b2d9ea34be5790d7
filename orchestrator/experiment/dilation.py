"""Choosing a run's time dilation k and sizing its windows, before the first point: the
calibration at the planned k (raised while the testbed cannot keep up), the service
times probed on the testbed, and measurement windows long enough for the p99 interval."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Protocol

from ..errors import RainmakerError, one_line
from .history import Settled
from .layout import RunDir
from .plan import Point, TestbedShape, plan
from .spec import Spec
from .sweep import Sweep


class Measures(Protocol):
    """What these phases need of the run's sweeper (sweeper.Sweeper): its points and
    sweep, which they re-plan, and its calibration and point measurement."""

    spec: Spec
    points: list[Point]
    sweep: Sweep

    def calibrate(self) -> dict | None: ...
    def attempt(self, p: Point, attempt: int = 1, *, probe: bool = False) -> object: ...
    def stop_all(self) -> None: ...


PROBE_LOAD, PROBE_LOAD_MAX = 0.1, 0.5  # of the workers' capacity as the spec's costs give it


# Calibration: how busy the testbed keeps this machine's cores with no load; the
# load's own share is what the run's highest load needs more of (calibrate.choose_k).
CAL_IDLE_S = 1.0


CAL_REST_MAX_S = 3.0  # the longest the calibration waits for the pollers' long naps (k <= 3,000 at 10 us)


MAX_CALIBRATIONS = 3  # auto dilation: the first at the planned k, then at most two raises


def start_at(runner: Measures, rd: RunDir, spec: Spec, shape: TestbedShape, start: Settled, log) -> None:
    """Before the first calibration of an automatic run: the points planned at the k
    where this testbed's last run of the spec settled (history.settled_k), which
    choose_dilation then holds unless its calibration asks for more. Without it, one
    calibration's noise at the planned k could put two runs of one spec on either side
    of a boundary (fig6a-emulated: 491 us of overheads at k = 100 in one, so k = 1000;
    626 us in the next, so k = 2000) and their windows and wall time twice apart."""
    from .calibrate import HELD_MARGIN

    k = start.k
    if runner.points and runner.points[0].dilation == k:
        return
    log(
        f"dilation: starting at k = {k:g}, {start.whence}; held unless a calibration there asks for more than "
        f"{1 + HELD_MARGIN:g} times it"
    )
    _replan(runner, rd, plan(spec, shape, k=k))


def _replan(runner: Measures, rd: RunDir, points: list[Point]) -> None:
    """The sweep planned again (nothing measured yet), its points in the manifest."""
    rd.sweep.unlink(missing_ok=True)
    runner.points, runner.sweep = points, Sweep(rd.path, points, resume=False)
    m = rd.read_manifest()
    m["points"] = [asdict(p) for p in points]
    rd.write_manifest(m)


def choose_dilation(
    runner: Measures, rd: RunDir, spec: Spec, shape: TestbedShape, cal: dict, log, held: bool = False
) -> None:
    """`dilation.emulated: auto`: the k the calibration asks for (calibrate.choose_k).
    When it is not the k planned with, the points are planned again at it, the sweep
    starts over (nothing was measured yet) and the testbed is calibrated again at the
    new k. The overheads do not stay what they were in testbed time (a larger k means a
    lower rate, at which each hop more often wakes a sleeping process: measured 443 us
    of round trip at k = 100, 797 at 2000), so that calibration is asked again: a k whose own overheads still
    ask for more is raised, up to MAX_CALIBRATIONS calibrations in all, never lowered
    (a smaller k was found wanting). The model beside each point takes the last one.
    `held`: the first calibration was at the k the last run settled at (start_at): it
    is raised only beyond HELD_MARGIN, and the CPU bound takes the CPU per request of
    the testbed's calibration at its smallest k (Settled.cpu), as a run from the planned
    k would."""
    from . import calibrate as cal_mod

    whys: list[str] = []
    for i in range(MAX_CALIBRATIONS):
        planned = runner.points[0].dilation
        first_held = held and i == 0
        margin = cal_mod.HELD_MARGIN if first_held else cal_mod.RAISE_MARGIN
        k, why = cal_mod.choose_k(cal, spec, shape, hold=planned if i > 0 or held else None, margin=margin)
        if k == planned or (i > 0 and k < planned):
            whys.append(why if k == planned else f"{why}; k stays {planned:g}: a smaller k was found wanting")
            break
        if i == MAX_CALIBRATIONS - 1:
            whys.append(f"{why}; k stays {planned:g}: a run calibrates at most {MAX_CALIBRATIONS} times")
            break
        whys.append(why)
        log(f"dilation: {why}; planning the points again at k = {k:g}")
        _replan(runner, rd, plan(spec, shape, k=k))
        again = runner.calibrate()
        if again is None:  # logged; the model beside each point takes the defaults
            break
        # The CPU a request costs stands out best at the first calibration's rate (the
        # highest: k grows, the calibration's rate falls); it is the same at every k.
        cal = {**again, "cpu": cal["cpu"]} if "cpu" in cal else again
    k = runner.points[0].dilation
    log(f"dilation: k = {k:g}, after {len(whys)} calibration{'s' if len(whys) > 1 else ''}")
    m = rd.read_manifest()
    m["dilation"] = {"k": k, "auto": True, "why": " | at that k: ".join(whys)}
    rd.write_manifest(m)


PROBE_SAMPLES = 60  # of the rarest class: its mean service time to a few percent


# A probe whose class got fewer answers than this was stalled (a loaded machine held a
# worker or the switch for a second of its 2 s window): it is measured again, at most
# PROBE_ATTEMPTS times in all.
PROBE_MIN_ANSWERS, PROBE_ATTEMPTS = PROBE_SAMPLES // 3, 3


PROBE_MEASURE_S = (2.0, 60.0)


def with_service(spec: Spec, service_us: dict[str, float]) -> Spec:
    """The spec with each keys class's cost the measured mean service time (paper us)."""
    from .spec import Keys

    classes = []
    for c in spec.workload.classes:
        us = service_us.get(c.name)
        if isinstance(c.service, Keys) and isinstance(us, (int, float)) and us > 0:
            c = c.model_copy(update={"service": c.service.model_copy(update={"us_per_key": us / c.service.keys})})
        classes.append(c)
    return spec.model_copy(update={"workload": spec.workload.model_copy(update={"classes": classes})})


def probe_service(runner: Measures, rd: RunDir, spec: Spec, shape: TestbedShape, log) -> None:
    """A real handler's service times are the testbed's, not the spec's: on the emulated
    testbed an operation held k times its run time, asleep, then runs on cold caches
    (docs/rocksdb.md), and a spec's costs may come from other hardware. One light point
    of the spec's own classes measures each class's mean service time here; the loads
    (capacity fractions), timeouts and windows are then planned from them, and the
    manifest keeps both (`service`: planned and measured)."""
    first = runner.points[0]
    w = spec.workload
    rarest = min(c.weight for c in w.classes) / sum(c.weight for c in w.classes)
    k = first.dilation
    # at the run's lightest load (within bounds): on a dilated testbed the idler a worker,
    # the colder its caches and the longer its operations
    fractions = [p.capacity_fraction for p in runner.points if p.capacity_fraction is not None]
    load = min(PROBE_LOAD_MAX, max(PROBE_LOAD, min(fractions, default=PROBE_LOAD)))
    rps = load * first.worker_threads / (w.mean_service_us * 1e-6 * k)
    lo, hi = PROBE_MEASURE_S
    measure_s = round(min(hi, max(lo, PROBE_SAMPLES / rarest / rps)), 3)
    probe = replace(
        first,
        id="service-probe",
        index=-1,
        load_krps=round(rps * k / 1000, 6),
        capacity_fraction=load,
        offered_rps=round(rps, 3),
        warmup_s=0.5,
        measure_s=measure_s,
        # the first point's program and quota, without adaptation: at quota 1 a slice of one
        # worker stops for good when a task to it is lost (its one token never comes back)
        params={**first.params, "adaptive": False},
        phase_at_s=(),
    )
    log(
        f"measuring the {first.handler} handler's service times on this testbed: {measure_s:g} s at "
        f"{load:g} of the capacity the spec's costs give"
    )
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        saved_points = runner.points
        try:
            runner.attempt(probe, attempt, probe=True)
        except (RainmakerError, OSError, TimeoutError, ValueError, KeyError) as e:
            runner.stop_all()
            log(f"the service probe failed: {one_line(e)}; the loads stay planned from the spec's costs")
            return
        finally:
            runner.points = saved_points
        answers, service = probed_service(rd, k)
        short = {c.name: answers.get(c.name, 0) for c in w.classes if answers.get(c.name, 0) < PROBE_MIN_ANSWERS}
        if not short:
            break
        few = ", ".join(f"{n} {a}" for n, a in short.items())
        if attempt < PROBE_ATTEMPTS:
            rd.set_aside_probe(attempt)
            log(
                f"the service probe got fewer than {PROBE_MIN_ANSWERS} answers ({few}): the testbed stalled; "
                f"measuring it again ({attempt + 1} of at most {PROBE_ATTEMPTS}; this one is kept under "
                f"stalled/service-probe/{attempt}/)"
            )
        else:
            log(f"the service probe got fewer than {PROBE_MIN_ANSWERS} answers ({few}) in all {attempt} attempts")
    missing = [c.name for c in w.classes if c.name not in service]
    if missing:
        log(
            f"the service probe got no answers for {', '.join(missing)} in {PROBE_ATTEMPTS} attempts; "
            "the loads stay planned from the spec's costs"
        )
        return
    new = with_service(spec, service)
    planned = {c.name: c.service.mean_us for c in w.classes}
    log(
        "service times here (paper us, planned -> measured): "
        + ", ".join(f"{n} {planned[n]:,.1f} -> {service[n]:,.1f}" for n in planned)
    )
    points = plan(new, shape, k=k)
    rd.sweep.unlink()
    runner.spec, runner.points, runner.sweep = new, points, Sweep(rd.path, points, resume=False)
    m = rd.read_manifest()
    m["spec"] = new.model_dump(mode="json")
    m["points"] = [asdict(p) for p in points]
    m["service"] = {
        "planned_us": planned,
        "measured_us": {n: round(v, 3) for n, v in service.items()},
        "answers": answers,
        "attempts": attempt,
        "probe": asdict(probe),
    }
    rd.write_manifest(m)


def probed_service(rd: RunDir, k: float) -> tuple[dict[str, int], dict[str, float]]:
    """The service probe's answers per class, and each answered class's mean service
    time (paper us), over every client."""
    measured: dict[str, list[tuple[int, float]]] = {}
    for h in rd.service_probe.client_hosts():
        summ = json.loads((rd.service_probe.client(h) / "summary.json").read_text())
        for name, c in summ.get("classes", {}).items():
            if c.get("received", 0) > 0 and c.get("mean_service_ns", 0) > 0:
                measured.setdefault(name, []).append((c["received"], c["mean_service_ns"] / 1000 / k))
    answers = {n: sum(r for r, _ in v) for n, v in measured.items()}
    return answers, {n: sum(r * us for r, us in v) / answers[n] for n, v in measured.items()}


def size_windows(runner: Measures, rd: RunDir, spec: Spec, shape: TestbedShape, log) -> None:
    """`measure_max_s`: a point whose p99 the model predicts too uncertain at measure_s
    (model_beside.window_for) measures longer, up to measure_max_s. Near saturation the
    p99 of a short window varies far more than its order statistics say (0.85 of
    capacity, 20 s at k = 1000: 19% from draw to draw), and the p99_ci check says so
    after the fact; here the run asks for the window before it measures. The sweep is
    planned again (nothing was measured yet) and the manifest keeps each point's window
    and why (`windows`), which a resumed run applies again."""
    from . import model_beside
    from .validity import independent, thresholds_of

    longest = spec.durations(shape.emulated).measure_max_s
    if longest is None:
        return
    th = thresholds_of(spec.validity)
    m = rd.read_manifest()
    windows, points = {}, []
    for p in runner.points:
        seconds, why = model_beside.window_for(
            asdict(p), m, spec, th["max_p99_ci_width"], longest, th["ci_confidence"], independent(th)
        )
        windows[p.id] = {"measure_s": seconds, "why": why}
        if seconds != p.measure_s:
            log(f"{p.id}: measures {seconds:g} s instead of {p.measure_s:g}: {why}")
        points.append(replace(p, measure_s=seconds))
    m["windows"] = windows
    if points != runner.points:
        rd.sweep.unlink()
        runner.points, runner.sweep = points, Sweep(rd.path, points, resume=False)
        m["points"] = [asdict(p) for p in points]
    rd.write_manifest(m)


def with_windows(points: list[Point], manifest: dict) -> list[Point]:
    """The points with the windows a run sized for them (size_windows), on resume."""
    w = manifest.get("windows")
    if not isinstance(w, dict):
        return points
    out = []
    for p in points:
        s = (w.get(p.id) or {}).get("measure_s") if isinstance(w.get(p.id), dict) else None
        out.append(replace(p, measure_s=float(s)) if isinstance(s, (int, float)) and s > 0 else p)
    return out
