"""The model beside every measurement: each point a testbed measured is simulated in
paper time right after it, into points/<id>/model/, so the point folder holds the
measurement and what the model of the same system predicts, side by side. The
validity check `model_agreement`, the analysis' `model_*` columns, the dashed curves
of the figures and the report's "Measured against the model" read it.

    info = write(point_dir, point, manifest)   # point.py, in the point's judge step
    added = ensure(run_dir)                    # `rainmaker analyze --model`: older runs
    info = points.read_model_info(point_dir)                # model.json, or None
    data = load(point_dir)                     # the model's PointData, or None

The model point is the measured point as `rainmaker simulate --like RUN_DIR` simulates
it (orchestrator/simulate/like.py): the same id, load (paper kRPS), worker hosts,
threads and system parameters, its durations divided by the dilation, and the network
the run's manifest gives (its `calibration.network`, else the defaults of its testbed
kind). Its files are a simulated point's (orchestrator/simulate/writer.py) plus
model.json: the network and where it came from, the seed, the window, the wall time,
or the error that kept the model from being computed.

A static workload's model replays the requests the clients drew (their trace.csv:
intended times, service times, classes), over the measured window itself: the model and
the testbed meet the same sample, so their ratio is not two samples' noise (at 0.8 of
capacity the p99 of 6,000 requests varies by about 15% between draws). Without a
trace, the model draws its own requests, and its window holds between MIN_REQUESTS and
MAX_REQUESTS requests, and
its warm-up at most MAX_REQUESTS: its p99 does not depend on the window's length, only
the estimate's own error does. A short emulated window (10,000 requests: 40 ms of
paper time at 250 kRPS) leaves that error at several percent, a large part of a 15%
tolerance; a paper-scale window (30 M requests in 10 s) would cost a minute of CPU
for an error already below 0.5% at 1 M. A workload with phases keeps its durations:
its p99 depends on when the phases change.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from . import layout, points
from .layout import PointDir, RunDir

MODEL_SEED = 1  # the run seed of every model point (simulate's default): point seed = hash(1, point id)
MIN_REQUESTS = 200_000  # p99 from 2,000 requests above it: the estimate's error ~1% (exponential tail)
MAX_REQUESTS = 1_000_000  # p99 error ~0.5%; a paper-scale point (3 M/s) then costs a few CPU seconds
MAX_STRETCH_S = 60.0  # paper seconds: the longest window a low load is stretched to
# The p99's draw-to-draw spread at the measured window (p99_spread): this many draws of
# the model, fewer when the window is large (at most SPREAD_MAX_REQUESTS in all, at least
# SPREAD_MIN_DRAWS, else not estimated: a window that large hardly varies).
SPREAD_DRAWS = 50
SPREAD_MIN_DRAWS = 10
SPREAD_MAX_REQUESTS = 5_000_000


def _network_text(net: dict) -> str:
    """A model.Network (as a dict) as a person reads it."""

    def ns(key: str) -> str:
        v = net.get(key)
        return f"{v:g} ns" if isinstance(v, (int, float)) else "?"

    gbps = net.get("link_gbps")
    link = "no serialisation" if not isinstance(gbps, (int, float)) or gbps == float("inf") else f"{gbps:g} Gbps links"
    return (
        f"client-switch {ns('client_switch_ns')}, switch-worker {ns('switch_worker_ns')} one way; "
        f"switch {ns('switch_pkt_ns')} and worker {ns('worker_pkt_ns')} per packet; "
        f"RDMA pre-write {ns('prewrite_ns')}; {link}"
    )


def network_text(info: dict | None) -> str:
    """The network a model used and where it came from, for messages and the report."""
    if not info or not isinstance(info.get("network"), dict):
        return "unknown"
    return f"{_network_text(info['network'])}; from {info.get('network_from') or '?'}"


def calibration_of(manifest: dict, limit: int = 12) -> dict[str, float]:
    """The run's calibration (manifest.json's `calibration`) beyond the network the model
    used: its numbers, flattened to dotted keys (the testbed's overheads a reader weighs
    against a point the model does not explain)."""
    out: dict[str, float] = {}

    def walk(prefix: str, v: Any) -> None:
        if len(out) >= limit:
            return
        if isinstance(v, dict):
            for key, x in v.items():
                if not (prefix == "" and key == "network"):
                    walk(f"{prefix}{key}.", x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix[:-1]] = v

    cal = manifest.get("calibration")
    if isinstance(cal, dict):
        walk("", cal)
    return out


def calibration_text(info: dict | None) -> str:
    cal = (info or {}).get("calibration")
    if not isinstance(cal, dict) or not cal:
        return ""
    return ", ".join(f"{k} {v:g}" for k, v in cal.items() if isinstance(v, (int, float)))


def _durations(load_krps: float, warmup_s: float, measure_s: float, phases: bool) -> tuple[float, float]:
    """The model's warm-up and window (paper s): the point's, with the window brought
    within [MIN_REQUESTS, MAX_REQUESTS] requests and the warm-up to at most
    MAX_REQUESTS, when the workload has no phases."""
    rate = load_krps * 1000.0
    if phases or rate <= 0:
        return warmup_s, measure_s
    most = max(MAX_REQUESTS / rate, 0.001)
    # a trickle would need hours for MIN_REQUESTS: stretch at most to MAX_STRETCH_S
    return min(warmup_s, most), min(max(measure_s, min(MIN_REQUESTS / rate, MAX_STRETCH_S)), most)


def server_cost(pd: PointDir) -> dict | None:
    """rpc-server's own cost per request beyond the service asked (testbed ns): its
    worker threads' busy time less the service the requests asked for, over the
    requests it served (its done line, which the agent keeps in workers/<host>/
    server.json), summed over a segmented point's segments. None where a part has no
    such counts: a Rain point, memcached, a point measured before rpc-server counted."""
    from . import segments

    busy = asked = served = 0
    for part in segments.parts(pd):
        counts = [layout.read_json(part.worker(h) / layout.SERVER_COUNTS) for h in part.worker_hosts()]
        counts = [c for c in counts if isinstance(c, dict) and all(isinstance(c.get(k), int) for k in _COST_KEYS)]
        if not counts:
            return None
        busy += sum(c["busy_ns"] for c in counts)
        asked += sum(c["asked_ns"] for c in counts)
        served += sum(c["served"] for c in counts)
    if served <= 0:
        return None
    return {"per_request_ns": round(max(0.0, (busy - asked) / served), 1), "served": served, "busy_ns": busy}


_COST_KEYS = ("busy_ns", "asked_ns", "served")


def _build(
    point: dict, manifest: dict, spec, drawn_rps: float | None = None, server: dict | None = None
) -> tuple[Any, dict, dict]:
    """(SimPoint, the model point's point.json, model.json without timings).

    `server`: rpc-server's own cost per request (server_cost), which a server thread
    spends beyond the service (its wake-up, reads, the answer, a sleep that ends late):
    the model's worker thread spends it too, half on the request's receipt and half on
    its answer (worker_pkt_ns), as the Rain calibration's handler error is taken.

    `drawn_rps`: what the clients' schedule drew for the window (testbed rps). A finite
    window draws its Poisson arrivals a few percent off the planned rate (1.8% at one
    standard deviation for 3,000 requests), and near saturation the p99 moves several
    times as much as the load: the model is offered the load the testbed was offered."""
    from ..simulate.engine import core_hash
    from ..simulate.like import network_of, paper_point
    from ..simulate.model import build, seed_of

    k = float(point.get("dilation") or 1.0)
    pp = paper_point(point)
    planned_krps = pp.load_krps
    phases = bool(spec.workload.phases)
    if drawn_rps and not phases:  # a workload with phases keeps its own schedule
        pp = replace(pp, load_krps=round(drawn_rps * k / 1000.0, 6), offered_rps=round(drawn_rps * k, 3))
    warmup_s, measure_s = _durations(pp.load_krps, pp.warmup_s, pp.measure_s, phases)
    model_point = replace(pp, warmup_s=warmup_s, measure_s=measure_s)
    tb = manifest.get("testbed") if isinstance(manifest.get("testbed"), dict) else {}
    hosts = int(tb.get("workers") or 0) or 1
    network, source = network_of(manifest, k)
    if server is not None:
        network = replace(network, worker_pkt_ns=round(server["per_request_ns"] / 2 / k))
        source += (
            f"; the server's own cost, {server['per_request_ns'] / 1000:,.1f} us of testbed time per request "
            f"beyond its service (workers/<host>/{layout.SERVER_COUNTS}), as the worker's per-packet cost"
        )
    seed = seed_of(MODEL_SEED, pp.id)
    sp = build(spec, model_point, worker_hosts=hosts, network=network, seed=seed, dilation=k)
    info = {
        "point_id": pp.id,
        "network": asdict(network),
        "network_from": source,
        "seed": seed,
        "run_seed": MODEL_SEED,
        "worker_hosts": hosts,
        "threads_per_host": sp.threads_per_host,
        "dilation": k,
        "load_krps": pp.load_krps,
        "planned_load_krps": planned_krps,
        "load_from": "the clients' schedule" if pp.load_krps != planned_krps else "the plan",
        "warmup_s": warmup_s,
        "measure_s": measure_s,
        "measured_warmup_s": pp.warmup_s,  # the measured durations in paper time
        "measured_measure_s": pp.measure_s,
        "simulator": core_hash(),
        "calibration": calibration_of(manifest),
    }
    return sp, asdict(model_point), info


def _replay(pd: PointDir, k: float, classes) -> tuple[tuple | None, str]:
    """What the clients drew (clients/<host>/trace.csv: every request's intended time,
    service time, class and whether it was sent large), in paper ns, for the model to
    replay; or (None, why not). A trace without `large` (an older rain-client) leaves
    the model to draw which requests are large.

    The model then meets the very arrivals and service times the testbed met (common
    random numbers), so measured / model compares the systems and not two samples: at
    0.8 of capacity the p99 of a 6,000-request window varies by about 15% from one draw
    to the next, the whole of a 15% tolerance. Each client host's times count from its
    own schedule's start; the hosts start together (rain-client --wait-start)."""
    import numpy as np
    import pandas as pd_

    hosts = pd.client_hosts()
    if not hosts:
        return None, "no client results"
    names = {c.name: i for i, c in enumerate(classes)}
    frames = []
    for h in hosts:
        summary = layout.read_json(pd.client(h) / "summary.json")
        dropped = (summary or {}).get("run", {}).get("trace_dropped") if isinstance(summary, dict) else None
        if dropped:
            return None, f"{h}'s trace is incomplete ({dropped:,} requests not traced)"
        f = pd.client(h) / layout.TRACE
        try:
            t = pd_.read_csv(f)
        except (OSError, ValueError) as e:
            return None, f"no readable trace from {h} ({type(e).__name__})"
        if not {"intended_ns", "service_ns", "class"} <= set(t.columns):
            return None, f"{h}'s trace has no service times (a rain-client older than the replay)"
        frames.append(t[[c for c in ("intended_ns", "service_ns", "class", "large") if c in t.columns]])
    t = pd_.concat(frames, ignore_index=True)
    unknown = sorted(set(t["class"].astype(str)) - set(names))
    if unknown or t.empty:
        return None, f"the trace's classes {unknown} are not the spec's" if unknown else "the trace is empty"
    at = np.rint(t["intended_ns"].to_numpy(dtype=float) / k).astype(np.int64)
    order = np.argsort(at, kind="stable")
    svc = np.rint(t["service_ns"].to_numpy(dtype=float) / k).astype(np.int64)
    cls = t["class"].astype(str).map(names).to_numpy(dtype=np.uint8)
    if "large" not in t.columns or t["large"].isna().any():  # a host's rain-client predates the column
        return (at[order], svc[order], cls[order]), f"the {len(at):,} requests the clients drew (trace.csv)"
    large = t["large"].to_numpy(dtype=np.uint8)
    replay = (at[order], svc[order], cls[order], large[order])
    return replay, f"the {len(at):,} requests the clients drew (trace.csv, with which were large)"


def p99_spread(sp, point_id: str) -> dict:
    """How much the p99 of a window this size varies from one draw of the requests to
    another, by the model: the window drawn SPREAD_DRAWS times. Near saturation the
    latencies of neighbouring requests move together (one long task holds the queue
    behind it), so the order statistics of one window, which assume independent
    samples, understate its p99's error: at 0.85 of capacity a 6,800-request window's
    p99 varied by 19% (one standard deviation) where the order statistics said 3%.
    `rel_sd`: per class and `all`, the standard deviation of the draws' p99s over their
    mean; the p99_ci check makes it an interval (2 z of its confidence, 3.92 at 95%)."""
    import numpy as np

    from ..simulate import engine
    from ..simulate.model import seed_of

    rate = sp.phases[0].rate_rps  # one phase: a workload with phases has no spread
    window = rate * sp.measure_ns / 1e9
    draws = min(SPREAD_DRAWS, int(SPREAD_MAX_REQUESTS // max(1.0, window + rate * sp.warmup_ns / 1e9)))
    if draws < SPREAD_MIN_DRAWS:
        return {"draws": 0, "why": f"the window holds {window:,.0f} requests: its p99 hardly varies between draws"}
    names = [c.name for c in sp.classes]
    p99s: dict[str, list[float]] = {}
    for i in range(draws):
        r = engine.run(replace(sp, replay=None, seed=seed_of(1000 + i, point_id)))
        ok = (r.intended_ns >= sp.warmup_ns) & (r.intended_ns < sp.end_ns) & (r.outcome == 0)
        groups = {"all": ok, **{n: ok & (r.cls == j) for j, n in enumerate(names)}}
        for name, m in groups.items():
            if np.count_nonzero(m) >= 100:
                p99s.setdefault(name, []).append(float(np.percentile(r.latency_ns[m], 99)))
    rel_sd = {
        name: round(float(np.std(v, ddof=1)) / float(np.mean(v)), 4)
        for name, v in p99s.items()
        if len(v) >= SPREAD_MIN_DRAWS and np.mean(v) > 0
    }
    return {"draws": draws, "window_requests": round(window), "rel_sd": rel_sd}


WINDOW_MARGIN = 0.9  # a window is sized for this share of the p99_ci limit: the prediction is itself an estimate
WINDOW_STEPS = 4  # predictions per point: each at the window the previous one asked for


def window_for(
    point: dict,
    manifest: dict,
    spec,
    max_width: float,
    longest_s: float,
    confidence: float = 0.95,
    independence: tuple[float, int] | None = None,
):
    """The measurement (testbed s) a point needs, as the model predicts it, up to
    `longest_s` (its planned measure_s when that is enough):

    - for its p99's interval (p99_spread, the worst class) to stay within WINDOW_MARGIN
      x `max_width`. The width shrinks about as one over the square root of the window
      (near saturation more slowly: the tail's correlations reach further); each step
      predicts again at the window the last one asked for, and after the last
      prediction the window it asks for is taken unchecked;
    - with `independence` (alpha, min_n): for Lancet's independence test to pass
      (series_checks.py), on a series correlated as the model's latencies are.

    Returns (seconds, why)."""
    from scipy.stats import norm

    from ..simulate.like import paper_point

    k = float(point.get("dilation") or 1.0)
    target = WINDOW_MARGIN * max_width
    z2 = 2 * float(norm.ppf(0.5 + confidence / 2))
    sp, _, _ = _build(point, manifest, spec)
    pp = paper_point(point)
    measure_s = float(point["measure_s"])
    seconds = predicted_at = measure_s
    width = None
    for _ in range(WINDOW_STEPS):
        predicted_at = seconds
        at = replace(sp, warmup_ns=round(pp.warmup_s * 1e9), measure_ns=round(seconds / k * 1e9))
        sds = (p99_spread(at, pp.id).get("rel_sd") or {}).values()
        if not sds:
            break
        width = z2 * max(sds)
        if width <= target or seconds >= longest_s:
            break
        seconds = min(longest_s, float(math.ceil(seconds * (width / target) ** 2)))
    if width is None:
        said = "the model gave no p99 spread"
    else:
        said = f"the model's p99 interval {width:.2f} wide at {predicted_at:g} s (target {target:.2f})"
        if seconds != predicted_at:
            said += f"; {seconds:g} s by the square-root rule after {WINDOW_STEPS} predictions"
        if width > target and seconds >= longest_s:
            said += f": measure_max_s ({longest_s:g} s) is too short for it, the point may fail p99_ci"
    if independence is not None:
        more, why = _independent_window(sp, pp, k, independence, longest_s)
        said += f"; {why}"
        seconds = max(seconds, more)
    if seconds == measure_s:
        return seconds, said
    return seconds, f"{said}; measure_s {measure_s:g} s"


def _independent_window(sp, pp, k: float, independence: tuple[float, int], longest_s: float) -> tuple[float, str]:
    """The window (testbed s) whose latencies pass Lancet's independence test
    (series_checks.requests_for_independence) on the model's series of the longest
    window, and why."""
    import numpy as np

    from ..simulate import engine
    from .series_checks import PASS_TARGET, requests_for_independence

    alpha, min_n = independence
    rate = sp.phases[0].rate_rps  # paper requests/s
    most = int(rate * longest_s / k)
    long = replace(sp, replay=None, measure_ns=round(min(most, INDEPENDENCE_MODEL_MAX) / rate * 1e9))
    r = engine.run(long)
    ok = (r.intended_ns >= long.warmup_ns) & (r.intended_ns < long.end_ns) & (r.outcome == 0)
    x = r.latency_ns[ok][np.argsort(r.intended_ns[ok], kind="stable")].astype(np.float64)
    n, p = requests_for_independence(x, alpha, min_n, most)
    if n is None:
        return longest_s, (
            f"even {most:,} requests (measure_max_s) pass the independence test only {100 * p:.0f}% of the time "
            "by the model's correlations: the point may fail independence"
        )
    seconds = float(math.ceil(n / rate * k))
    return seconds, (
        f"{n:,} requests ({seconds:g} s) pass the independence test {100 * PASS_TARGET:.0f}% of the time "
        "by the model's correlations"
    )


INDEPENDENCE_MODEL_MAX = 2_000_000  # requests of the model's series the correlations are read from


def _drawn_rps(pd: PointDir, point: dict) -> float | None:
    """The rate the clients' schedule drew for the window, all clients together
    (rain-client's `scheduled_rps`), or None when the point has no client results."""
    from .points import ALL, load_point

    try:
        rps = load_point(pd.path, point).counters(ALL).get("scheduled_rps")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(rps) if isinstance(rps, (int, float)) and rps > 0 else None


def write(point_dir: PointDir | Path, point: dict, manifest: dict, spec=None) -> dict:
    """Simulate the measured point `point` (its point.json) and write points/<id>/model/
    whole (through a temporary folder). Never raises for the model's sake: a model that
    cannot be computed (no spec, a point the simulator refuses, the core not built)
    leaves model/model.json with its `error`, which model_agreement reports. Returns
    model.json's content."""
    from ..errors import RainmakerError, UsageError
    from ..simulate.like import paper_point
    from .points import spec_of

    pd = point_dir if isinstance(point_dir, PointDir) else PointDir(Path(point_dir))
    manifest = of_testbed(manifest, point)
    t0 = time.perf_counter()
    info: dict = {"point_id": point.get("id", pd.id)}
    files: dict[str, bytes] = {}
    try:
        spec = spec if spec is not None else spec_of(manifest)
        if spec is None:
            raise UsageError(
                "the run's manifest.json records no spec, which the model is built from",
                fix="analyse a run folder `rainmaker run` wrote",
            )
        server = server_cost(pd)
        sp, model_point, info = _build(point, manifest, spec, _drawn_rps(pd, point), server)
        if server is not None:
            info["server_cost"] = server
        k = float(point.get("dilation") or 1.0)
        pp = paper_point(point)
        at_window = replace(sp, warmup_ns=round(pp.warmup_s * 1e9), measure_ns=round(pp.measure_s * 1e9))
        if not spec.workload.phases:
            info["p99_spread"] = p99_spread(at_window, pp.id)
        replay, why = _replay(pd, k, sp.classes)
        if replay is not None:  # the measured window itself, not a longer one
            sp = replace(at_window, replay=replay)
            model_point = {**model_point, "warmup_s": pp.warmup_s, "measure_s": pp.measure_s}
            info.update(warmup_s=pp.warmup_s, measure_s=pp.measure_s)
        info["replayed"] = replay is not None
        info["requests_from"] = why if replay is not None else f"the model's own draws (its seed): {why}"
        from ..simulate import engine, writer

        result = engine.run(sp)
        files = writer.render(result, model_point, wall_s=time.perf_counter() - t0)
        info["requests"] = int(result.intended_ns.size)
    except RainmakerError as e:
        info["error"] = " | ".join(line.strip() for line in e.render().splitlines() if line.strip())[:1000]
    except (KeyError, TypeError, ValueError) as e:  # a damaged point.json or manifest
        info["error"] = f"the point or the run's manifest is damaged: {e}"[:1000]
    except MemoryError as e:  # the measurement is kept whatever the model needs
        info["error"] = f"the model of this point does not fit in memory: {e}"[:1000]
    info["wall_s"] = round(time.perf_counter() - t0, 4)
    files[layout.MODEL_INFO] = (json.dumps(info, indent=1, default=str) + "\n").encode()
    _write_tree(pd.model, files)
    return info


def of_testbed(manifest: dict, point: dict) -> dict:
    """The manifest as the testbed that measured `point` saw it: on a cluster of
    testbeds (orchestrator/cluster) each has its own calibration (manifest `testbeds`,
    the point's `testbed`), which the model of its points takes."""
    tb = point.get("testbed")
    testbeds = manifest.get("testbeds")
    if not isinstance(tb, str) or not isinstance(testbeds, dict) or not isinstance(testbeds.get(tb), dict):
        return manifest
    cal = testbeds[tb].get("calibration")
    out = {k: v for k, v in manifest.items() if k != "calibration"}
    return out | ({"calibration": cal} if isinstance(cal, dict) else {})


def _write_tree(dest: Path, files: dict[str, bytes]) -> None:
    """The folder whole or not at all: written beside it, then swapped in."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    for rel, content in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.replace(dest)


def ensure(run_dir: str | Path, log=None) -> list[str]:
    """Simulate the model beside every point of a measured run that has none (or whose
    model failed before): runs measured before the model was added. Returns the ids
    of the points modelled now."""
    rd = RunDir(run_dir)
    manifest = rd.read_manifest()
    if not points.is_measured(manifest):
        return []
    from .points import spec_of

    spec = spec_of(manifest)
    done = []
    for pd in rd.points():
        info = points.read_model_info(pd)
        point = pd.read_point()
        if point is None or (info is not None and not info.get("error")):
            continue
        out = write(pd, point, manifest, spec)
        done.append(pd.id)
        if log is not None:
            log(
                f"{pd.id}: model " + (f"not computed: {out['error']}" if out.get("error") else f"{out['wall_s']:.2f} s")
            )
    return done
