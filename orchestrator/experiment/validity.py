"""Validity checks of one load point, in the manner of Lancet (USENIX ATC 2019;
docs/references.md): a point is trusted only when the load generator did what the
plan asked and the measurement supports the numbers reported from it.

Each check has a name, passed (True, False, or None when it could not run), the
measured value, the threshold and a message a person can act on. The verdict is
written to points/<id>/validity.json (layout.py); analysis carries `valid` and the failed checks'
names into summary.parquet and the plots mark invalid points.

Checks:
  complete      the client results exist for every host, are readable and not partial,
                and the sweep finished the point (sweep.json's status, when known)
  load          achieved send rate vs the scheduled rate, within load_tolerance
  schedule_lag  the largest lag of a send behind its intended time, in paper time (/ k)
  late_sends    the fraction of sends later than the client's lateness threshold
  lost          requests lost, failed or never sent, as a fraction of those offered
  timed_out     requests that timed out
  rejected      requests rejected by admission control at the switch
  samples_p99   every class (and all together) has >= min_samples_p99 samples
  p99_ci        the order-statistic 95% confidence interval of each class's p99 is
                narrow: (upper - lower) / p99 <= max_p99_ci_width
  interarrival  the actual inter-send times follow the configured process (KS test
                against the exponential for poisson; near-constant gaps for
                constant); needs clients/<host>/trace.csv, else 'not run'
  tasks_intact  no worker dropped a pre-written task's RoCEv2 WRITE for its iCRC
                (rain-worker's roce_icrc drops, the ConnectX's rx_icrc_encapsulated)
                and none refused a dispatched descriptor whose ring slot held
                another task (desc_mismatch): either means tasks the switch
                accepted were never run; needs workers/<host>/stats.json
  links_up      no data link went down during the load: every port a host is behind
                was up at the start and at the end, lost no carrier in between, and
                no port dropped frames because it was down (switch/links.json); a
                spare port, down the whole time with no host behind it, does not count
  independence  successive latencies are independent draws (Lancet): no significant
                lag-1 Spearman rank correlation once the series is thinned to every
                2nd, 4th, ... sample, with min_samples_p99 samples left; where the
                correlation reaches further, the p99's interval by sectioning (which
                holds under correlation) within max_p99_ci_width (series_checks.py);
                needs clients/<host>/trace.csv, else 'not run'
  stationarity  the p99s of the window's two halves agree within what two half
                windows differ by from draw to draw (series_checks.py); needs the trace
  model_agreement  the measured p99 (paper time, all classes) is within model_tolerance
                of the model's beside it (points/<id>/model/, model_beside.py):
                |measured / model - 1| <= tolerance; the message gives both, the
                ratio and the network the model used; 'not run' without a model

On a simulated point (summary.json's tool is `rainmaker simulate`) interarrival,
independence, stationarity, tasks_intact, links_up and model_agreement are 'not run',
each saying why: there is no
measured send time, NIC or link whose faults they look for, and the point is the model.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..systems import SYSTEMS
from . import layout, points
from .arrivals import check_interarrival
from .data_path_checks import check_frames_delivered, check_links_up, check_tasks_intact
from .layout import PointDir
from .points import ALL, PointData, load_point, p99_interval
from .series_checks import EXTRA_DEFAULTS as SERIES_DEFAULTS
from .series_checks import check_series
from .verdict import STALL_CHECKS, Check, Verdict, pct

__all__ = ["STALL_CHECKS", "Check", "Verdict", "check_point", "invalid_reason", "thresholds_of"]

# Thresholds the spec's `validity:` section does not carry (the spec's defaults and
# fields come first: orchestrator/experiment/spec.py, Validity).
EXTRA_DEFAULTS = {
    "ci_confidence": 0.95,
    "gof_max_samples": 5000,  # KS on a random subsample: enough power, no pedantry
    "constant_max_cv": 0.10,  # constant arrivals: std / mean of the gaps
    **SERIES_DEFAULTS,
}
MEASURED = "done"  # sweep.py's status of a point whose attempt ran to the end


def independent(th: dict) -> tuple[float, int]:
    """What the independence check asks of a window, for sizing one (model_beside)."""
    return float(th["independence_alpha"]), int(th["min_samples_p99"])


def thresholds_of(spec_validity) -> dict:
    """The spec's Validity (a model, a dict or None for the defaults) plus the extras."""
    from .spec import Validity

    if spec_validity is None:
        v = Validity().model_dump()
    elif hasattr(spec_validity, "model_dump"):
        v = spec_validity.model_dump()
    else:
        v = Validity.model_validate(
            {k: val for k, val in dict(spec_validity).items() if k in Validity.model_fields}
        ).model_dump()
        v |= {k: val for k, val in dict(spec_validity).items() if k in EXTRA_DEFAULTS}
    for k, default in EXTRA_DEFAULTS.items():
        v.setdefault(k, default)
    return v


# -- the checks ----------------------------------------------------------------------------


def check_complete(data: PointData) -> Check:
    status = str(data.point.get("status", "") or "")
    problems = list(data.problems)
    if data.partial:
        problems.append("the client's run was cut short (summary.json: partial)")
    if status and status != MEASURED:  # failed, or an attempt interrupted (todo, running)
        problems.append(f"the point's status is '{status}'")
    if problems:
        return Check("complete", False, len(problems), 0, "; ".join(problems))
    return Check("complete", True, 0, 0, f"results of {len(data.hosts)} client host(s) complete")


def check_load(data: PointData, tol: float) -> Check:
    """Achieved vs offered. Two comparisons: the client sent what its schedule drew
    (within `tol`), and the schedule drew the configured rate up to the Poisson noise
    of a finite window (within max(tol, 4 / sqrt(N)) of it)."""
    configured = data.top("offered_rps")
    planned = data.point.get("offered_rps")
    if configured is None:
        configured = planned
    c = data.counters(ALL)
    scheduled = c.get("scheduled_rps") or configured
    achieved = data.top("achieved_rps")
    if configured is None or achieved is None or not configured or not scheduled:
        return Check("load", False, None, tol, "no achieved or offered rate (summary.json missing?)")
    err = abs(achieved - scheduled) / scheduled
    n = max(1.0, float(c.get("offered") or 0))
    draw_tol = max(tol, 4.0 / n**0.5)
    draw_err = abs(scheduled - configured) / configured
    ok = err <= tol and draw_err <= draw_tol
    msg = (
        f"achieved {achieved:,.0f} rps vs scheduled {scheduled:,.0f} rps ({(achieved - scheduled) / scheduled:+.2%}; "
        f"tolerance {pct(tol)}); the schedule drew {scheduled:,.0f} of the {configured:,.0f} rps asked "
        f"({(scheduled - configured) / configured:+.2%}; Poisson noise allows {pct(draw_tol)})"
    )
    if planned and abs(configured - float(planned)) / float(planned) > tol:
        msg += f"; note: the plan asked for {float(planned):,.0f} rps"
    return Check("load", ok, err, tol, msg)


def check_lag(data: PointData, max_lag_us: float) -> Check:
    """The largest lag in paper time: a stall of the client delays the requests behind it,
    and what that does to queueing and latency is relative to the system's time scale,
    which the dilation stretches (a 1 ms stall is one 10 us task at k = 100)."""
    c = data.counters(ALL)
    if "max_lag_ns" not in c:
        return Check("schedule_lag", None, None, max_lag_us, "not run: no client counters")
    k = data.dilation or 1.0
    testbed_us = c["max_lag_ns"] / 1000.0
    lag = testbed_us / k
    ok = lag <= max_lag_us
    where = "" if k == 1 else f" ({testbed_us:,.1f} us of testbed time at k = {k:g})"
    return Check(
        "schedule_lag",
        ok,
        lag,
        max_lag_us,
        f"largest send lag {lag:,.3g} us of paper time{where}; limit {max_lag_us:g} us"
        + ("" if ok else ": the client could not keep its schedule" + _steal(data)),
    )


def _steal(data: PointData) -> str:
    """What a virtual machine's hypervisor took from its cores during the load, when the
    run recorded it (points/<id>/cpu.json, shared-core testbeds)."""
    cpu = PointDir(data.dir).read_cpu()
    share = cpu.get("steal_share") if isinstance(cpu, dict) else None
    if not isinstance(share, (int, float)):
        return ""
    if share <= 0:
        return "; the hypervisor took none of this machine's cores during the load (steal 0)"
    return (
        f"; the hypervisor gave {pct(share)} of this machine's cores to others during the load "
        "(steal time): a stalled virtual CPU holds every thread, real-time ones too"
    )


def check_late(data: PointData, max_frac: float) -> Check:
    c = data.counters(ALL)
    sent = c.get("sent_in_window") or c.get("sent")
    if not sent:
        return Check("late_sends", None, None, max_frac, "not run: nothing was sent in the window")
    frac = c.get("late_sends", 0) / sent
    ok = frac <= max_frac
    return Check(
        "late_sends",
        ok,
        frac,
        max_frac,
        f"{int(c.get('late_sends', 0)):,} of {int(sent):,} sends late ({pct(frac)}; limit {pct(max_frac)})"
        + ("" if ok else _steal(data)),
    )


def check_losses(data: PointData, max_frac: float) -> list[Check]:
    c = data.counters(ALL)
    offered = c.get("offered", 0)
    if not offered:
        msg = "not run: no requests offered in the window"
        return [Check(n, None, None, max_frac, msg) for n in ("lost", "timed_out", "rejected")]
    lost = c.get("lost", 0) + c.get("failed", 0) + c.get("not_sent", 0)
    out = [
        Check(
            "lost",
            lost / offered <= max_frac,
            lost / offered,
            max_frac,
            f"{int(lost):,} of {int(offered):,} requests lost ({int(c.get('lost', 0)):,} unanswered at the end, "
            f"{int(c.get('failed', 0)):,} failed by a worker, {int(c.get('not_sent', 0)):,} never sent); "
            f"limit {pct(max_frac)}",
        )
    ]
    for name, what in (("timed_out", "timed out"), ("rejected", "rejected by the switch")):
        n = c.get(name, 0)
        out.append(
            Check(
                name,
                n / offered <= max_frac,
                n / offered,
                max_frac,
                f"{int(n):,} of {int(offered):,} requests {what} ({pct(n / offered)}; limit {pct(max_frac)})",
            )
        )
    return out


def check_samples(data: PointData, min_n: int) -> Check:
    if not data.latency:
        return Check("samples_p99", False, 0, min_n, "no latency histograms")
    counts = {c: h.total for c, h in data.latency.items()}
    worst = min(counts, key=lambda c: counts[c])
    ok = counts[worst] >= min_n
    per = ", ".join(f"{c}: {n:,}" for c, n in counts.items())
    msg = (
        f"samples per class {per} (all >= {min_n:,})"
        if ok
        else f"samples per class {per}: '{worst}' has fewer than {min_n:,}, too few for a p99"
    )
    return Check("samples_p99", ok, counts[worst], min_n, msg, {"samples": counts})


def check_p99_ci(data: PointData, max_width: float, confidence: float) -> Check:
    """The p99's confidence interval (points.p99_interval): the wider of the order
    statistics' and the draw-to-draw spread the model beside a measured point gives."""
    if not data.latency:
        return Check("p99_ci", False, None, max_width, "no latency histograms")
    detail, worst, worst_w = {}, None, -1.0
    for cls, h in data.latency.items():
        iv = p99_interval(data, cls, confidence)
        lo, hi = iv["ci"]
        detail[cls] = {
            "samples": h.total,
            "p99_us": iv["p99"] / 1000,
            "ci_lo_us": lo / 1000,
            "ci_hi_us": hi / 1000,
            "rel_width": iv["width"],
            "rel_width_order_stats": iv["order_stats"],
            "rel_width_draws": iv["draws"],
        }
        if iv["width"] > worst_w:
            worst, worst_w = cls, iv["width"]
    d = detail[worst]
    hi_txt = "unbounded" if not math.isfinite(d["ci_hi_us"]) else f"{d['ci_hi_us']:,.1f}"
    msg = (
        f"p99 of '{worst}' {d['p99_us']:,.1f} us, {confidence:.0%} CI [{d['ci_lo_us']:,.1f}, {hi_txt}] us "
        f"(testbed time), relative width {worst_w:.3g}; limit {max_width:g}"
    )
    if d["rel_width_draws"] is not None:
        msg += (
            f" (the order statistics give {d['rel_width_order_stats']:.3g}, the model's draws of a window this "
            f"size {d['rel_width_draws']:.3g})"
        )
    if worst_w > max_width:
        msg += ": more samples are needed (a longer measurement, or fewer classes)"
    return Check("p99_ci", worst_w <= max_width, worst_w, max_width, msg, detail)


# -- the verdict ---------------------------------------------------------------------------


def check_model_agreement(data: PointData, tol: float) -> Check:
    """The testbed measured the scheduling system, not itself: its p99 is the model's
    (the same point simulated in paper time, with the testbed's delays) within `tol`.
    A testbed whose overheads the model lacks, or whose capacity is below the nominal
    one, measures more; this is where a reader sees it, point by point."""
    from . import model_beside

    name = "model_agreement"
    info = points.read_model_info(data.dir)
    if info is None:
        return Check(
            name,
            None,
            None,
            tol,
            f"not run: no model beside this point ({layout.MODEL}/{layout.MODEL_INFO}); "
            "`rainmaker analyze --model RUN_DIR` simulates it",
        )
    if info.get("error"):
        return Check(name, None, None, tol, f"not run: the model could not be computed: {info['error']}")
    model = points.load_model(data.dir)
    lat = data.latency.get(ALL)
    mlat = model.latency.get(ALL) if model is not None else None
    if mlat is None or not mlat.total:
        return Check(name, None, None, tol, f"not run: the model has no latency histograms ({layout.MODEL}/)")
    if lat is None or not lat.total:
        return Check(name, None, None, tol, "not run: no measured latency")
    measured = lat.percentile(99.0) / 1000.0 / data.dilation
    modelled = mlat.percentile(99.0) / 1000.0
    ratio = measured / modelled if modelled > 0 else math.inf
    ok = abs(ratio - 1.0) <= tol
    net = model_beside.network_text(info)
    msg = (
        f"measured p99 {measured:,.2f} us vs the model's {modelled:,.2f} us (paper time, all classes): "
        f"ratio {ratio:.3f} (tolerance {pct(tol)}); the model's network: {net}"
    )
    if not ok:
        msg += (
            ": the testbed measured more than the model of the same system: overheads the model lacks "
            "or a capacity below the nominal one"
            if ratio > 1
            else ": the testbed measured less than the model: the model's delays are larger than this testbed's"
        )
        cal = model_beside.calibration_text(info)
        if cal:
            msg += f"; the testbed's calibration (manifest.json): {cal}"
    detail = {
        "measured_p99_us": measured,
        "model_p99_us": modelled,
        "ratio": ratio,
        "network": info.get("network"),
        "network_from": info.get("network_from"),
        "model_seed": info.get("seed"),
    }
    return Check(name, ok, ratio, tol, msg, detail)


def simulated(data: PointData) -> bool:
    """The point ran on the simulated testbed: every client summary says so."""
    return bool(data.summaries) and all(s.get("tool") == layout.SIMULATED_TOOL for s in data.summaries.values())


def simulated_checks(data: PointData, arrival: str | None, alpha: float, tol: float) -> list[Check]:
    """The checks of a testbed's own faults, on a simulated point: nothing to measure,
    so 'not run', each saying why (they never fail a simulated point)."""
    return [
        Check(
            "interarrival",
            None,
            None,
            alpha,
            f"not run: simulated testbed: each request is sent at its intended time, drawn from the "
            f"{arrival or '?'} process itself (its seed: summary.json); there is no measured send time to test",
        ),
        Check(
            "independence",
            None,
            None,
            None,
            "not run: simulated testbed: its window's spread is the model's own draws (p99_ci), not a measurement's",
        ),
        Check("stationarity", None, None, None, "not run: simulated testbed: the model does not drift"),
        Check(
            "tasks_intact",
            None,
            None,
            0,
            "not run: simulated testbed: no NIC and no ring slots, the model runs every task it dispatches",
        ),
        Check("links_up", None, None, 0, "not run: simulated testbed: no links that could go down"),
        Check("model_agreement", None, None, tol, "not run: simulated testbed: the point is the model"),
    ]


# The checks of a whole window: a segment of a point (segments.py) does not run them;
# the point's merged window does.
SERIES = ("independence", "stationarity")
WINDOW_CHECKS = ("samples_p99", "p99_ci", *SERIES, "model_agreement")


def in_every_part(check, parts: list[PointDir]) -> Check:
    """One of the checks of a worker's or the switch's files (tasks_intact, links_up)
    on a point measured in segments: it passes when it passes in every segment, and
    names the first segment where it does not."""
    if len(parts) == 1:
        return check(parts[0])
    results = [(d.id, check(d)) for d in parts]
    for seg, c in results:
        if c.passed is False:
            return Check(c.name, False, c.value, c.threshold, f"segment {seg}: {c.message}", c.detail)
    ran = [c for _, c in results if c.passed]
    if not ran:
        return results[0][1]
    return Check(ran[0].name, True, 0, 0, f"in each of {len(ran)} segments: {ran[0].message}")


def invalid_reason(verdict: Verdict) -> str:
    """sweep.json's reason for a point that failed validity checks: each failed check
    with its message (what to do about it is in the message); a measured or simulated point."""
    return reason_of([(c.name, c.message) for c in verdict.checks if c.passed is False])


def reason_of(failed: list[tuple[str, str]]) -> str:
    """invalid_reason from the failed checks' (name, message), as validity.json holds them."""
    # every failed check keeps its name and a share of the 1,000 characters: a long
    # message (independence lists its thinning steps) must not hide the ones after it
    per = max(60, 1000 // max(1, len(failed)) - 2)
    return "validity: " + "; ".join(f"{name}: {message}"[:per] for name, message in failed)


def check_point(
    point_dir: str | Path,
    point: dict | None,
    spec_validity=None,
    *,
    data: PointData | None = None,
    arrival: str | None = None,
    write: bool = True,
    segment: bool = False,
) -> Verdict:
    """Run every check on one point directory and write its validity.json.
    `spec_validity` is the spec's Validity (or a dict, or None for the defaults);
    `arrival` overrides the arrival process the client reports in summary.json.
    A `segment` of a point (segments.py) skips WINDOW_CHECKS: its window is a part."""
    from .segments import parts

    point_dir = Path(point_dir)
    if data is None:
        data = load_point(point_dir, point)
    th = thresholds_of(spec_validity)
    pieces = parts(PointDir(point_dir))
    checks = [
        check_complete(data),
        check_load(data, th["load_tolerance"]),
        check_lag(data, th["max_lag_us"]),
        check_late(data, th["max_late_fraction"]),
        *check_losses(data, th["max_lost_fraction"]),
        check_samples(data, th["min_samples_p99"]),
        check_p99_ci(data, th["max_p99_ci_width"], th["ci_confidence"]),
    ]
    if simulated(data):
        checks += simulated_checks(data, arrival or data.arrival(), th["gof_alpha"], th["model_tolerance"])
    else:
        checks += [
            check_interarrival(data, arrival or data.arrival(), th["gof_alpha"], th),
            # a segment's are replaced below: its window is a part (not read for nothing)
            *(check_series(data, th) if not segment else [Check(n, None, None, None, "") for n in SERIES]),
            in_every_part(check_tasks_intact, pieces),
            in_every_part(check_links_up, pieces),
            in_every_part(check_frames_delivered, pieces),
            check_model_agreement(data, th["model_tolerance"]),
        ]
    if segment:
        checks = [
            Check(c.name, None, None, c.threshold, "not run: a segment; the point's merged window is checked")
            if c.name in WINDOW_CHECKS
            else c
            for c in checks
        ]
    system = SYSTEMS.get(str((data.point or {}).get("system")))
    if system is not None and system.not_applicable:  # the system's declaration says why
        checks = [
            Check(c.name, None, None, c.threshold, f"not run: {system.not_applicable[c.name]}")
            if c.name in system.not_applicable
            else c
            for c in checks
        ]
    verdict = Verdict(data.id, checks, th)
    if write:
        verdict.write(point_dir)
    return verdict
