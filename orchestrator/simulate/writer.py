"""A simulated point's results as the files a measured point leaves (docs/results.md),
so `analyze`, `plot` and `report` read a simulated run exactly as a measured one.

    files = render(result, point)      # relative path -> bytes (pure: no disk)
    verdict = write(point_dir, files, spec_validity)

Host names are those an inventory of 1 client and N worker hosts gives: client0,
worker0..workerN-1. What each file holds, and where it differs from the testbed's:
- clients/client0/latency.hlog, slowdown.hlog: rain-client's interval logs (1 ns ..
  100 s, 3 significant digits), one histogram per class and interval of the window
  (the point's interval_ns; the paper samples p99 every 10 ms), each request in the
  interval its intended send time falls in, answered requests only, latency in ns
  from the intended send time, slowdown x 1000 (latency / service time), as
  rain-client records them (hosts/dpdk/client/lcore.c, complete()).
- clients/client0/summary.json: rain-client's keys and counters over the window
  (requests whose intended send time is in it), `"tool": "rainmaker simulate"`,
  dilation 1. A simulated client sends every request at its intended time (or holds
  it back at the admission cap, which rain-client does not count as late), so lag
  and late sends are 0.
- No trace.csv: the simulated arrivals are drawn from the arrival process itself,
  so there is no measured send time to test (validity says so).
- workers/workerN/timeseries.jsonl (t from the load's start, every worker enabled
  from t = 0), decisions.jsonl (adaptive), agent.json; switch/queue.jsonl,
  switch/snapshot.json (the core's counters under the switch's EV_* names).

render() runs where the point was simulated (a local process or a cluster worker):
it returns a few hundred kB where the SimResult holds ~30 bytes per request.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..experiment import layout
from ..experiment.histograms import DEFAULT, HIGHEST, Hist
from ..experiment.layout import SIMULATED_TOOL as TOOL  # how validity tells a simulated point
from ..experiment.layout import PointDir
from ..systems.counters import EVENTS_COUNTER  # the switch's event counters, as analysis reads them

if TYPE_CHECKING:
    from .engine import SimResult

CLIENT = "client0"
ANSWERED, REJECTED, TIMED_OUT, NOT_SENT = 0, 1, 2, 3  # SimResult.outcome

LATENCY_COMMENT = (
    "rainmaker simulate latency in ns, from each request's intended send time to its reply; one interval "
    "per {iv} of the measurement window holding the requests scheduled in it; Interval_Max in ms"
)
SLOWDOWN_COMMENT = (
    "rainmaker simulate slowdown x1000 (latency / service time); intervals as in latency.hlog; "
    "Interval_Max is the slowdown itself"
)


def worker_host(i: int) -> str:
    return f"worker{i}"


def _json(obj: Any, indent: int | None = 1) -> bytes:
    return (json.dumps(obj, indent=indent, default=_plain) + "\n").encode()


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if is_dataclass(x):
        return asdict(x)
    return str(x)


# -- histograms ---------------------------------------------------------------------------


def interval_hists(values: np.ndarray, interval: np.ndarray, n: int) -> list[Hist]:
    """One histogram per interval 0..n-1 of `values` (interval[i] is value i's), from
    bucket indices counted in one pass (no sort, no Python loop over values): the
    buckets in use are numbered densely, so the table is intervals x buckets used."""
    out = [Hist(DEFAULT) for _ in range(n)]
    if values.size == 0:
        return out
    idx = DEFAULT.index_of(np.clip(values.astype(np.int64), 0, HIGHEST))
    used = np.flatnonzero(np.bincount(idx, minlength=DEFAULT.counts_len))
    dense = np.zeros(DEFAULT.counts_len, dtype=np.int64)
    dense[used] = np.arange(used.size)
    table = np.bincount(interval.astype(np.int64) * used.size + dense[idx], minlength=n * used.size)
    table = table.reshape(n, used.size)
    for k in range(n):
        nz = np.flatnonzero(table[k])
        if nz.size:
            out[k] = Hist(DEFAULT, used[nz], table[k, nz])
    return out


def _hlog(rows: list[tuple[str, float, float, Hist]], comment: str, max_ratio: float) -> bytes:
    """An interval log in rain-client's line format (histograms.write_hlog, hdr.c), base
    time 0: the file is the same to the bit for the same seed."""
    lines = [
        f"#[{comment}]",
        "#[Histogram log format version 1.3]",
        "#[StartTime: 0.000 (seconds since epoch), 1970-01-01T00:00:00Z]",
        "#[BaseTime: 0.000 (seconds since epoch)]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    for tag, start, length, h in rows:
        mx = h.max() if h.total else 0.0
        lines.append(f"Tag={tag},{start:.3f},{length:.3f},{mx / max_ratio:.3f},{h.encode()}")
    return ("\n".join(lines) + "\n").encode()


def _hist_summary(h: Hist, scale: float) -> dict:
    """rain-client's json_hist: count, min, mean, p50 .. max (divided by scale)."""
    if not h.total:
        return {k: 0 for k in ("count", "min", "mean", "p50", "p90", "p99", "p99.9", "max", "clamped")}
    p = h.percentiles((50.0, 90.0, 99.0, 99.9))
    return {
        "count": h.total,
        "min": round(h.min() / scale, 3),
        "mean": round(h.mean() / scale, 3),
        "p50": round(p[0] / scale, 3),
        "p90": round(p[1] / scale, 3),
        "p99": round(p[2] / scale, 3),
        "p99.9": round(p[3] / scale, 3),
        "max": round(h.max() / scale, 3),
        "clamped": 0,
    }


# -- the client's summary ---------------------------------------------------------------


def service_arg(svc) -> tuple[str, float]:
    """rain-client's name of a service distribution (json_service) and its mean, ns."""
    if svc.kind == "const":
        return f"const:{svc.a_ns}", float(svc.a_ns)
    if svc.kind == "exp":
        return f"exp:{svc.a_ns}", float(svc.a_ns)
    if svc.kind == "bimodal":
        return f"bimodal:{svc.a_ns}:{svc.b_ns}:{svc.p_a:.17g}", svc.p_a * svc.a_ns + (1 - svc.p_a) * svc.b_ns
    if svc.kind == "keys-const":  # rain-client runs it as a constant (spec.Keys.client_arg)
        return f"const:{round(svc.keys * svc.a_ns)}", float(round(svc.keys * svc.a_ns))
    return f"keys-exp:{svc.keys:.17g}:{svc.a_ns}", svc.keys * svc.a_ns


def schedule(sp) -> list[list[float]]:
    """[[t_s from the start (warm-up included), requests/s, [class names]], ...], as rain-client's."""
    return [
        [round(ph.at_ns / 1e9, 6), round(float(ph.rate_rps), 6), [sp.classes[i].name for i in sorted(ph.classes)]]
        for ph in sp.phases
    ]


def window_rate(sp) -> float:
    """The schedule's mean rate over the measurement window (rain-client's offered_rps)."""
    a, b = sp.warmup_ns, sp.warmup_ns + sp.measure_ns
    n = 0.0
    for i, ph in enumerate(sp.phases):
        lo = max(a, ph.at_ns)
        hi = min(b, sp.phases[i + 1].at_ns if i + 1 < len(sp.phases) else math.inf)
        if hi > lo:
            n += (hi - lo) * ph.rate_rps
    return n / sp.measure_ns


def _counters(m: np.ndarray, r: SimResult, dur_s: float) -> dict:
    """rain-client's json_counters over the requests `m` selects (those of the window)."""
    out = r.outcome[m]
    offered = int(m.sum())
    sent = int((out != NOT_SENT).sum())
    received = int((out == ANSWERED).sum())
    svc = r.service_ns[m]
    keys = 0.0
    return {
        "offered": offered,
        "sent": sent,
        "sent_in_window": sent,
        "received": received,
        "failed": 0,
        "timed_out": int((out == TIMED_OUT).sum()),
        "rejected": int((out == REJECTED).sum()),
        "resubmitted": 0,
        "late_reply": 0,
        "lost": 0,
        "not_sent": int((out == NOT_SENT).sum()),
        "waited_for_admission": 0,
        "late_sends": 0,
        "max_lag_ns": 0,
        "large": int(r.large[m].sum()),
        "mean_service_ns": round(float(svc.mean()), 1) if offered else 0.0,
        "mean_keys": keys,
        "scheduled_rps": round(offered / dur_s, 3),
        "achieved_rps": round(sent / dur_s, 3),
        "received_rps": round(received / dur_s, 3),
    }


# -- the point ----------------------------------------------------------------------------


def render(result: SimResult, point: dict, *, wall_s: float | None = None) -> dict[str, bytes]:
    """Every file of the point's folder (relative path -> content) from one SimResult;
    `point` is the plan's Point as a dict (point.json): the client's, the workers', the
    switch's and the point's timing, as a measured point lays them out (layout.py)."""
    w = _Window(result)
    files: dict[str, bytes] = {layout.POINT: _json(point)}
    per_class_lat = _client_files(result, w, files)
    _worker_files(result, files)
    _switch_files(result, files)
    timing = {
        "simulated": True,
        "core_wall_s": round(float(result.wall_s), 3),
        "events": int(result.events),
        "end_ns": int(result.end_ns),
        "requests": int(w.intended.size),
        "answered": int(w.answered.sum()),
        "p99_us": round(Hist.merge(h for hs in per_class_lat for h in hs).percentile(99.0) / 1000, 3)
        if w.answered.any()
        else None,
        "seed": result.point.seed,
    }
    if wall_s is not None:
        timing["point_wall_s"] = round(wall_s, 3)
    files[layout.TIMING] = _json(timing, indent=None)
    return files


class _Window:
    """The measurement window of a SimResult: its requests by intended time, which were
    answered, and the interval each falls in."""

    def __init__(self, r: SimResult):
        sp = r.point
        self.w0, self.w1 = sp.warmup_ns, sp.warmup_ns + sp.measure_ns
        self.dur_s = sp.measure_ns / 1e9
        self.iv = max(1, int(sp.interval_ns))
        self.nint = max(1, -(-sp.measure_ns // self.iv))
        self.intended = np.asarray(r.intended_ns, dtype=np.int64)
        self.in_win = (self.intended >= self.w0) & (self.intended < self.w1)
        self.answered = self.in_win & (r.outcome == ANSWERED)
        self.interval = np.minimum((self.intended - self.w0) // self.iv, self.nint - 1)


def _client_files(r: SimResult, w: _Window, files: dict[str, bytes]) -> list:
    """The client's interval logs (latency, slowdown), summary and exit; each class's
    latency histograms per interval, returned."""
    sp = r.point
    client = f"{layout.CLIENTS}/{CLIENT}/"
    per_class_lat, per_class_sd, classes = [], [], {}
    for c, cm in enumerate(sp.classes):
        m = w.answered & (r.cls == c)
        lat, svc, k = r.latency_ns[m], r.service_ns[m], w.interval[m]
        pos = svc > 0
        sd = (lat[pos].astype(np.float64) * 1000.0 / svc[pos].astype(np.float64)).astype(np.int64)
        per_class_lat.append(interval_hists(lat, k, w.nint))
        per_class_sd.append(interval_hists(sd, k[pos], w.nint))
        arg, mean_ns = service_arg(cm.service)
        counters = _counters(w.in_win & (r.cls == c), r, w.dur_s)
        if cm.service.kind.startswith("keys"):
            counters["mean_keys"] = float(cm.service.keys)
        classes[cm.name] = {
            "task_type": cm.task_type,
            "weight": cm.weight,
            "payload": cm.payload_bytes,
            "service": arg,
            "mean_service_ns_expected": round(mean_ns, 1),
            **counters,
            "latency_ns": _hist_summary(Hist.merge(per_class_lat[-1]), 1.0),
            "slowdown": _hist_summary(Hist.merge(per_class_sd[-1]), 1000.0),
        }
    lat_rows: list[tuple[str, float, float, Hist]] = []
    sd_rows: list[tuple[str, float, float, Hist]] = []
    last = (sp.measure_ns - (w.nint - 1) * w.iv) / 1e9
    for k in range(w.nint):
        length = last if k + 1 == w.nint else w.iv / 1e9
        for c, cm in enumerate(sp.classes):
            lat_rows.append((cm.name, k * w.iv / 1e9, length, per_class_lat[c][k]))
            sd_rows.append((cm.name, k * w.iv / 1e9, length, per_class_sd[c][k]))
    iv_text = f"{w.iv / 1e6:g} ms" if w.iv < 1_000_000_000 else f"{w.iv / 1e9:g} s"
    files[client + layout.LATENCY_HLOG] = _hlog(lat_rows, LATENCY_COMMENT.format(iv=iv_text), 1e6)
    files[client + layout.SLOWDOWN_HLOG] = _hlog(sd_rows, SLOWDOWN_COMMENT, 1e3)
    files[client + layout.CLIENT_SUMMARY] = _json(_client_summary(r, w, classes))
    files[client + layout.AGENT_OUTCOME] = _json({"client_exit": 0, "stopped_by": "client exit"})
    return per_class_lat


def _client_summary(r: SimResult, w: _Window, classes: dict) -> dict:
    """summary.json as rain-client writes it, for the simulated client."""
    sp = r.point
    totals = _counters(w.in_win, r, w.dur_s)
    totals["mean_keys"] = 0.0
    offered = window_rate(sp)
    large = next((c for c in sp.classes if c.large_fraction > 0), None)
    return {
        "tool": TOOL,
        "format": 1,
        "partial": False,
        "client_host": 0,
        "lcores": 1,
        "driver": "simulated",
        "arrival": sp.arrival,
        "schedule": schedule(sp),
        "dilation": 1,
        "warmup_s": sp.warmup_ns / 1e9,
        "duration_s": w.dur_s,
        "timeout_us": sp.timeout_ns // 1000,
        "resubmit": False,
        "max_outstanding": sp.max_outstanding,
        "large_fraction": large.large_fraction if large else 0.0,
        "large_bytes": large.large_bytes if large else 0,
        "seed": sp.seed,
        "tx_only": False,
        "start_unix_ns": 0,
        "window_start_unix_ns": sp.warmup_ns,
        "elapsed_s": r.end_ns / 1e9,
        "tsc_hz": 1_000_000_000,
        "intervals": w.nint,
        "interval_s": w.iv / 1e9,
        "offered_rps": round(offered, 3),
        "achieved_rps": totals["achieved_rps"],
        "schedule_error": round(abs(totals["achieved_rps"] - offered) / offered, 6) if offered else 0.0,
        "late_threshold_ns": [0 for _ in sp.phases],
        "totals": totals,
        "classes": classes,
        "run": {"requests": int(w.intended.size), "events": int(r.events)},
        "drops": {},
        "per_lcore": [],
    }


def _worker_files(r: SimResult, files: dict[str, bytes]) -> None:
    """The workers: the series per host, decisions per host (adaptive), a clean exit."""
    sp = r.point
    t = sp.threads_per_host
    per_host: list[list[str]] = [[] for _ in range(sp.worker_hosts)]
    for t_s, ws in r.worker_series:
        for h in range(sp.worker_hosts):
            row = {"t": round(float(t_s), 6), "workers": [_worker_row(w) for w in ws[h * t : (h + 1) * t]]}
            per_host[h].append(json.dumps(row))
    decisions: list[list[str]] = [[] for _ in range(sp.worker_hosts)]
    coordinator = []
    for rec in r.decisions or []:
        if rec.get("coordinator"):
            coordinator.append(json.dumps(rec, default=_plain))
            continue
        h = int(rec.get("host", 0))
        if 0 <= h < sp.worker_hosts:
            decisions[h].append(json.dumps(rec, default=_plain))
    for h in range(sp.worker_hosts):
        wd = f"{layout.WORKERS}/{worker_host(h)}/"
        files[wd + layout.WORKER_SAMPLES] = "".join(line + "\n" for line in per_host[h]).encode()
        if sp.adaptive:
            files[wd + layout.DECISIONS] = "".join(line + "\n" for line in decisions[h]).encode()
        files[wd + layout.AGENT_OUTCOME] = _json({"worker_exit": 0, "lost_samples": 0, "stopped_by": "signal"})
    if sp.adaptive:
        files[layout.COORDINATOR] = "".join(line + "\n" for line in coordinator).encode()


def _switch_files(r: SimResult, files: dict[str, bytes]) -> None:
    """The switch: its queue over time and its event counters."""
    sp = r.point
    rows = [
        {"t_s": round(float(t_s), 4), "balance": {str(s): int(v) for s, v in sorted(b.items())}}
        for t_s, b in r.switch_queue
    ]
    sw = f"{layout.SWITCH}/"
    files[sw + layout.SWITCH_QUEUE] = "".join(json.dumps(x) + "\n" for x in rows).encode()
    ev = {k: {"packets": int(v)} for k, v in r.counters.items() if k.startswith("EV_")}
    other = {k: v for k, v in r.counters.items() if not k.startswith("EV_")}
    files[sw + layout.SNAPSHOT] = _json(
        {
            # the switch program the system runs (switch/p4/<system>.p4); random push has none
            "program": "rain" if sp.policy == "random" else sp.policy,
            "testbed": "simulated",
            "policy": sp.policy,
            "counters": {EVENTS_COUNTER: ev},
            "simulation": other,
        }
    )


def _worker_row(w: dict) -> dict:
    keys = ("fifo", "outstanding", "done", "busy_ns", "quota", "slice", "enabled")
    return {k: int(w[k]) if isinstance(w.get(k), (bool, int, np.integer, float)) else w.get(k) for k in keys}


def write(pd: PointDir, files: dict[str, bytes]) -> dict:
    """Write the rendered files into an empty point folder; return its point.json. Its
    verdict is the caller's (validity.check_point, as for a measured point)."""
    pd.fresh()
    for rel, content in files.items():
        p = pd.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_bytes(content)
        tmp.replace(p)
    return json.loads(files[layout.POINT])


def point_files(path: Path) -> list[str]:
    """The files of a point folder, relative (tests compare simulated and measured)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
