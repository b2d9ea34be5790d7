"""Calibration: before the first point, a run on a shared-core testbed (the emulated one)
measures the testbed itself, so that the model beside every point (model_beside.py)
holds the testbed's own overheads and a report can say what they are.

One light point through the same path as the experiment's (rain-client -> switch ->
rain-worker -> client; for a server-side system, rpc-client -> forwarder -> rpc-server
in the first point's mode -> client), with constant tasks of the spec's mean service time at 10% of
the workers' capacity (at most 200 requests/s) and a token quota of 1, so that nothing
queues: at the spec's quota 2 a worker thread takes a second task while it runs one,
which then waits a whole service time (a tenth of the tasks at this load), and the
"round trip" was half queueing (1.25 ms against 0.6 ms at k = 1000 for the demo; a
p99 of one service time):

- the service-time error of the worker's handler (the sleep handler wakes late):
  rain-worker's busy time per task less the planned time, from its stats.json;
- the round trip: each request's latency less its actual service time, whose mean
  (and median, p99) is two passes through the switch and four host legs;
- the client's schedule: its largest lag and its share of late sends.

The model takes them in paper time (divided by k): each of the four host legs a
quarter of the round trip's mean (the switch's passes included), and the handler's
error spread over the three packets a worker thread handles per task (a task in, a
reply and a token out). A server-side system's model (simulate/core/rpc.h) has the
server's receive path where Rain's has the switch: the round trip is its two client
legs (client_switch_ns, half each), its in-server handoff (switch_worker_ns) is 0, as
the handoff's cost is in the round trip measured, and rpc-server's own cost per request
beyond the service (its busy time less the service asked, server.json) is spread over
the request's two packets, in and out, as model_beside.server_cost takes it per point. The calibration is written to manifest.json (`calibration`)
and its point to calibration/ in the run folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..systems import get as get_system
from ..testbed.cpu import format_cpus
from .layout import PointDir
from .plan import Point
from .spec import Constant, Memcached, RequestClass, Spec, Workload

CAL_ID = "calibrate"
# of the workers' capacity: a task rarely finds another before it (with constant tasks
# almost nothing queues), and the pollers see frames as often as at a light load (a
# trickle would measure their long-idle naps, which no load meets)
CAL_LOAD = 0.1
CAL_SAMPLES = 150  # requests in the window: the round trip's mean to a few percent
CAL_RPS_MAX = 200.0  # testbed requests/s: short tasks need no more to be measured
CAL_WARMUP_S, CAL_MEASURE_S = 0.3, (1.5, 20.0)  # the window: long enough for CAL_SAMPLES, within these
HOST_LEGS = 4  # client -> switch -> worker -> switch -> client: four host links
WORKER_PACKETS = 3  # a task in, a reply and a token out, on the worker thread
RPC_CLIENT_LEGS = 2  # client -> server's receive path -> client, in the RPC model
RPC_SERVER_PACKETS = 2  # a request in and its answer out, on the server thread


def calibration_spec(spec: Spec) -> Spec:
    """The spec with one constant class of its mean service time (paper time)."""
    cls = RequestClass(name="cal", service=Constant(dist="constant", us=round(spec.workload.mean_service_us, 6)))
    return spec.model_copy(update={"workload": Workload(classes=[cls])})


def calibration_point(first: Point, mean_service_us: float) -> Point:
    """A point like the run's first one, at CAL_LOAD of its workers' capacity (at most
    CAL_RPS_MAX), for long enough to hold CAL_SAMPLES requests. Rain's family runs Rain
    at a token quota of 1; a server-side system runs itself (rpc-server's mode and the
    first point's connections): its round trip and its own cost are what its points
    pay."""
    k = first.dilation
    rps = min(CAL_RPS_MAX, CAL_LOAD * first.worker_threads / (mean_service_us * 1e-6 * k))
    lo, hi = CAL_MEASURE_S
    measure_s = round(min(hi, max(lo, CAL_SAMPLES / rps)), 3)
    server_side = get_system(first.system).server_side
    if server_side:
        system, params = first.system, dict(first.params)
    else:
        system = "rain"
        params = (
            {**first.params, "adaptive": False, "initial_quota": 1} if first.system == "rain" else {"initial_quota": 1}
        )
    return Point(
        id=CAL_ID,
        index=-1,
        system=system,
        variant=None,
        variant_label=None,
        repetition=1,
        load_krps=round(rps * k / 1000.0, 6),
        capacity_fraction=None,
        offered_rps=round(rps, 3),
        dilation=k,
        warmup_s=CAL_WARMUP_S,
        measure_s=measure_s,
        # constant tasks need a synthetic handler: a real one (rocksdb) takes requests of its own
        handler=first.handler if first.handler in ("spin", "sleep") else "sleep",
        worker_threads=first.worker_threads,
        params=params,
    )


def _served(pd: PointDir, point: Point) -> tuple[int, int]:
    """(busy ns, requests served) of the calibration's workers: rain-worker's threads
    (stats.json), or rpc-server's (server.json, model_beside.server_cost)."""
    if get_system(point.system).server_side:
        from .model_beside import server_cost

        cost = server_cost(pd)
        return (cost["busy_ns"], cost["served"]) if cost else (0, 0)
    busy, done = 0, 0
    for h in pd.worker_hosts():
        stats = pd.read_worker_stats(h) or {}
        for w in stats.get("workers", []):
            busy += int(w.get("busy_ns", 0))
            done += int(w.get("tasks_done", 0))
    return busy, done


def _network(point: Point, rtt_mean: float, overshoot: float) -> dict:
    """The model's network (paper ns) from the round trip's mean and the handler's
    error per request (testbed ns): Rain's four host legs and three worker packets, or
    a server-side system's two client legs and two server packets (the module's doc)."""
    k = point.dilation
    if get_system(point.system).server_side:
        return {
            "client_switch_ns": round(rtt_mean / RPC_CLIENT_LEGS / k),
            "switch_worker_ns": 0,  # the handoff inside the server: in the round trip measured
            "switch_pkt_ns": 0,
            "worker_pkt_ns": round(overshoot / RPC_SERVER_PACKETS / k),
            "prewrite_ns": 0,
        }
    return {
        "client_switch_ns": round(rtt_mean / HOST_LEGS / k),
        "switch_worker_ns": round(rtt_mean / HOST_LEGS / k),
        "switch_pkt_ns": 0,  # the switch's passes are in the legs: one round trip measures them together
        "worker_pkt_ns": round(overshoot / WORKER_PACKETS / k),
        "prewrite_ns": 0,  # the switch's WRITE into a ring is in the switch -> worker leg measured
    }


def summarise(pd: PointDir, point: Point, mean_service_us: float) -> dict:
    """The calibration from the calibration point's files (testbed us, and the model's
    network in paper ns). Raises ValueError when the point lacks what it needs."""
    k = point.dilation
    planned_ns = mean_service_us * 1000.0 * k
    busy, done = _served(pd, point)
    if done == 0:
        raise ValueError("no worker finished a task")
    actual_ns = busy / done
    lat, lag, late, sent = [], 0, 0, 0
    for h in pd.client_hosts():
        s = json.loads((pd.client(h) / "summary.json").read_text())
        t = s["totals"]
        c = next(iter(s["classes"].values()))
        lat.append(c["latency_ns"])
        lag = max(lag, int(t.get("max_lag_ns", 0)))
        late += int(t.get("late_sends", 0))
        sent += int(t.get("sent", 0))
    if not lat or not lat[0].get("count"):
        raise ValueError("no latency was measured")
    rtt_mean = max(0.0, lat[0]["mean"] - actual_ns)
    overshoot = max(0.0, actual_ns - planned_ns)
    network = _network(point, rtt_mean, overshoot)
    out = {
        "k": k,
        "requests": sent,
        "round_trip_us": {
            "mean": round(rtt_mean / 1000, 1),
            "p50": round(max(0.0, lat[0]["p50"] - actual_ns) / 1000, 1),
            "p99": round(max(0.0, lat[0]["p99"] - actual_ns) / 1000, 1),
        },
        "service_planned_us": round(planned_ns / 1000, 1),
        "service_overshoot_us": round(overshoot / 1000, 1),
        "schedule_lag_max_us": round(lag / 1000, 1),
        "late_send_fraction": round(late / sent, 4) if sent else None,
        "network": network,
        "paper_time": {
            "round_trip_us": round(rtt_mean / 1000 / k, 3),
            "service_overshoot_us": round(overshoot / 1000 / k, 3),
            "overhead_share_of_service": round((rtt_mean + overshoot) / planned_ns, 3),
        },
    }
    cpu = pd.read_cpu()
    if cpu and cpu.get("requests") and cpu.get("load_wall_s"):
        # What the load adds to the idle testbed, per request: the CPU a higher rate needs.
        # It holds the pollers' waking up from their long naps too (an upper bound), and
        # the whole load when the idle testbed could not be measured.
        idle = cpu.get("idle_cores", 0.0)
        extra = max(0.0, cpu["load_busy_s"] - idle * cpu["load_wall_s"])
        out["cpu"] = {
            "cores": cpu["cores"],
            "idle_cores": idle,
            "idle_testbed_cores": cpu.get("idle_testbed_cores"),
            "load_cores": round(cpu["load_busy_s"] / cpu["load_wall_s"], 4),
            "per_request_ms": round(1000 * extra / cpu["requests"], 4),
        }
        if cpu.get("cpus"):  # a testbed confined to its own cores: did every thread stay on them?
            strays = cpu.get("outside") or []
            out["cpu"].update(
                cpus=cpu["cpus"],
                confined=not strays,
                strays=[
                    f"{t['machine']}: {t['program']} ({t['name']}, tid {t['tid']}, on {t['allowed']})" for t in strays
                ],
            )
    return out


def describe(cal: dict) -> str:
    """One line for the log and the report."""
    rt = cal["round_trip_us"]
    return (
        f"calibration at k = {cal['k']:g}: round trip {rt['mean']:,.0f} us mean (p50 {rt['p50']:,.0f}, p99 "
        f"{rt['p99']:,.0f}) of testbed time, the handler {cal['service_overshoot_us']:,.1f} us late on "
        f"{cal['service_planned_us']:,.0f} us tasks, the client's largest lag {cal['schedule_lag_max_us']:,.0f} us; "
        f"in paper time {cal['paper_time']['round_trip_us']:g} us of round trip, overheads "
        f"{100 * cal['paper_time']['overhead_share_of_service']:.0f}% of a mean service time"
        + (
            (
                f"; with no load the testbed uses {100 * c['idle_testbed_cores']:.1f}% of a core "
                f"({100 * c['idle_cores']:.1f}% with the runner)"
                if c.get("idle_testbed_cores") is not None
                else "; the idle testbed not measured (its pollers rest too long before their long naps)"
            )
            + f", a request {c['per_request_ms']:.3g} ms of CPU"
            + _confinement(c)
            if (c := cal.get("cpu"))
            else ""
        )
    )


def _confinement(c: dict) -> str:
    """What the calibration says of a testbed confined to its own cores ("" otherwise)."""
    if not c.get("cpus"):
        return ""
    n = len(c["cpus"])
    said = f"; the testbed confined to core{'s' if n > 1 else ''} {format_cpus(c['cpus'])} ({n} of this machine's)"
    strays = c.get("strays") or []
    if not strays:
        return said
    more = f" and {len(strays) - 3} more" if len(strays) > 3 else ""
    return said + f", but {len(strays)} thread(s) may run outside them: {'; '.join(strays[:3])}{more}"


def record(run_dir: Path, manifest: dict, cal: dict, point: Point) -> dict:
    """The manifest with its calibration (the caller writes it)."""
    return {**manifest, "calibration": {**cal, "point": asdict(point)}}


OVERHEAD_TARGET = 0.05  # of a mean service time: the round trip and the handler's error together
# Of this machine's cores, what the testbed may need at the run's highest load: the rest
# is free, so a process that must react (the switch, a client's send) finds a core
# idle rather than waiting behind the others (at half the cores busy, about half the time).
CPU_SHARE = 0.5
P99_SAMPLES_FACTOR = 2  # x min_samples_p99 at the lowest load: a p99 whose CI passes p99_ci
NICE = (1, 2, 5)  # k is one of 1, 2, 5 x 10^n: a number a reader recognises


def _nice_below(x: float) -> float:
    """The largest of 1, 2, 5 x 10^n at most x (x >= 1)."""
    best, m = 1.0, 1.0
    while m <= x:
        for n in NICE:
            if n * m <= x:
                best = float(n * m)
        m *= 10
    return best


def _nice_above(x: float) -> float:
    m = 1.0
    while True:
        for n in NICE:
            if n * m >= x:
                return float(n * m)
        m *= 10


# A calibration's overheads vary from run to run (on this VM the round trip at k = 1000
# was 264, 329 and 476 us in three runs, at 500 228 and 267): a k already calibrated is
# raised for its overheads only when they ask for more than this much above it, so that
# two runs of one spec on one testbed settle at the same k (the same windows, the same
# time) rather than at either side of a boundary by chance.
RAISE_MARGIN = 0.25
# A k where the testbed's last run of the spec settled (dilation.start_at) is raised at
# the run's first calibration only when the overheads ask for more than this much above
# it: beyond their run-to-run spread between runs here (the demo's round trip at
# k = 1000: 264 to 476 us; fig6a's overheads at 1000: 622 and 828 us in two runs), so
# that one noisy calibration does not move a spec's k, and a testbed that became twice as
# slow does.
HELD_MARGIN = 1.0


def choose_k(
    cal: dict,
    spec: Spec,
    shape,
    target: float = OVERHEAD_TARGET,
    hold: float | None = None,
    margin: float = RAISE_MARGIN,
) -> tuple[float, str]:
    """`dilation.emulated: auto`: the smallest k (1, 2, 5 x 10^n) at which the calibrated
    overheads stay below `target` of a mean service time, assuming they stay what they
    were in testbed time; then at most what the spec's measurement window allows (100
    mean tasks in it, plan.py, and twice min_samples_p99 at the lowest load); at least
    what its clients need to send the highest load, and what fits that load's CPU in
    CPU_SHARE of the cores (with the calibration's `cpu`); at most 10,000. Returns k and
    why, for the log and the manifest (dilation.py asks again at the chosen k, with
    `hold` that k: its overheads raise it only beyond `margin`, and never lower it; the
    window's and the samples' bounds still may)."""
    from .plan import CLIENT_RPS_MAX, TASKS_PER_WINDOW_MIN
    from .spec import KRPS_MAX

    overhead_us = cal["round_trip_us"]["mean"] + cal["service_overshoot_us"]
    mean_us = spec.workload.mean_service_us
    want = overhead_us / (target * mean_us)
    why = (
        f"the testbed's overheads, {overhead_us:,.0f} us of testbed time (round trip {cal['round_trip_us']['mean']:,.0f} "
        f"+ handler {cal['service_overshoot_us']:,.0f}), stay below {100 * target:g}% of a {mean_us:g} us mean task "
        f"from k = {want:,.0f}"
    )
    if (stalled := stall_k(cal, spec)) > want:
        want = stalled
        why += (
            f"; the client's largest lag in it, {cal['schedule_lag_max_us']:,.0f} us of testbed time, is within "
            f"schedule_lag's {spec.validity.max_lag_us:g} us of paper time only from k = {stalled:,.0f}"
        )
    k = _nice_above(max(1.0, want))
    why += f": k = {k:g}"
    if hold is not None and hold < k and want <= hold * (1 + margin):
        k = hold
        why += (
            f"; but k = {hold:g}, calibrated, is within {100 * margin:.0f}% of it (the run-to-run "
            f"spread): k stays {hold:g}"
        )
    elif hold is not None and k < hold:  # smaller overheads than before: k is not lowered for them
        k = hold
        why += f"; but k = {hold:g} is held: smaller overheads do not lower it"
    measure_s = spec.durations(True).measure_s
    most = measure_s / (TASKS_PER_WINDOW_MIN * mean_us * 1e-6)
    if k > most:
        k = max(1.0, float(int(most)))
        why += f"; but {measure_s:g} s of measurement hold 100 mean tasks only up to k = {most:,.0f}: k = {k:g}"
    loads = spec.load.krps or []
    if spec.load.capacity_fraction:
        from .spec import capacity_krps

        cap = capacity_krps(spec, shape.worker_threads(spec))
        loads = [f * cap for f in spec.load.capacity_fraction]
    # Every point's window must hold the samples its p99 needs: twice validity's
    # min_samples_p99, about what the p99's confidence interval (p99_ci, 25% wide)
    # needs. The lowest load has the fewest, measure_s x its testbed rate (paper / k).
    enough = P99_SAMPLES_FACTOR * spec.validity.min_samples_p99
    low_rps = min(loads) * 1000.0 if loads else 0.0
    if low_rps > 0 and k > measure_s * low_rps / enough:
        k = max(1.0, _nice_below(measure_s * low_rps / enough))
        why += (
            f"; but {measure_s:g} s of measurement hold {enough:,} requests at its lowest load "
            f"({low_rps / 1000:,.0f} kRPS) only up to k = {measure_s * low_rps / enough:,.0f}: k = {k:g}"
        )
    top_krps = max(loads) if loads else 0.0
    top_rps = min(KRPS_MAX, top_krps) * 1000.0
    least = top_rps / (CLIENT_RPS_MAX[True] * shape.client_hosts)
    if k < least:
        k = _nice_above(least)
        why += f"; the clients send the highest load only from k = {least:,.0f}: k = {k:g}"
    if cpu := cal.get("cpu"):
        k, why = _fit_cpu(k, why, cpu, top_rps)
    return min(k, 10_000.0), why


def stall_k(cal: dict, spec: Spec) -> float:
    """The k from which the client's largest lag in the calibration (testbed time) is
    within validity.max_lag_us of paper time: a host that stalls its client that long
    (a busy machine; a virtual machine whose hypervisor takes its vCPUs away) fails
    schedule_lag at any smaller k whenever a stall falls in a point's window. One light
    point sees such stalls only when they come about as often as its window lasts, so
    this is a lower bound."""
    return float(cal.get("schedule_lag_max_us") or 0.0) / spec.validity.max_lag_us


def stall_warning(cal: dict, spec: Spec) -> str | None:
    """For a calibration at whose k the client's largest lag was already over
    schedule_lag's limit: what that means for the run, and the k that would hold it."""
    k, lag_us = cal["k"], float(cal.get("schedule_lag_max_us") or 0.0)
    limit = spec.validity.max_lag_us
    if lag_us / k <= limit:
        return None
    again = spec.validity.remeasure_stalled
    return (
        f"the client fell {lag_us / 1000:,.1f} ms behind its schedule during the calibration: "
        f"{lag_us / k:,.3g} us of paper time at k = {k:g}, over schedule_lag's {limit:g} us. A point whose window "
        "meets such a stall fails schedule_lag"
        + (f" (measured again up to {again} times: validity.remeasure_stalled)" if again else "")
        + f"; from k = {_nice_above(stall_k(cal, spec)):g} a stall that long is within the limit"
    )


def _fit_cpu(k: float, why: str, cpu: dict, top_rps: float) -> tuple[float, str]:
    """At least the k at which the highest load's CPU fits CPU_SHARE of the testbed's
    cores (this machine's, or those it is confined to): the idle testbed's share plus
    the calibrated CPU per request at that load's testbed rate (paper rate / k). The CPU
    per request is taken as the same at every k (the workers sleep through their dilated
    tasks). Measured by the light point it is not: it grows with k (2.99 ms at k = 100,
    7.94 at 1000, 13.8 at 2000 on this VM), as part of the testbed's busy time lasts as
    long as the dilated service does, not per request; the light point cannot tell the
    two apart, so neither can this rule (estimate.cpu_per_request_at reads it by k)."""
    per_s = cpu["per_request_ms"] / 1000.0
    room = CPU_SHARE * cpu["cores"] - cpu["idle_cores"]
    whose = "the testbed's own" if cpu.get("cpus") else "this machine's"  # confined to some cores, or not

    def need(kk: float) -> float:
        return cpu["idle_cores"] + per_s * top_rps / kk

    if room <= 0:
        return k, why + (
            f"; with no load the testbed already keeps {cpu['idle_cores']:.2f} of {cpu['cores']} cores busy: "
            f"no k makes its highest load fit {100 * CPU_SHARE:g}% of them"
        )
    least = per_s * top_rps / room
    if k < least:
        k = _nice_above(least)
        return k, why + (
            f"; its highest load ({top_rps / 1000:,.0f} kRPS of paper time, {cpu['per_request_ms']:.3g} ms of CPU per "
            f"request) fits {100 * CPU_SHARE:g}% of {whose} {cpu['cores']} cores only from k = {least:,.0f}: "
            f"k = {k:g}, {need(k):.2f} cores busy"
        )
    return k, why + f"; at its highest load the testbed needs {need(k):.2f} of {cpu['cores']} cores"


def calibrates(spec) -> bool:
    """Whether a run of `spec` on an emulated testbed calibrates it before its sweep
    (run.before_sweep): every spec whose service rainmaker draws. A real memcached
    decides its own (spec.Memcached): a light point of constant tasks cannot be asked
    of it, and no model stands beside its points to take a calibration."""
    return not any(isinstance(c.service, Memcached) for c in spec.workload.classes)
