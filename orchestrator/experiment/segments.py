"""A long point measured in segments: each segment is a client run of its own (its
own warm-up, then part of the window), checked alone; the segments kept are then
merged into the point's folder as one window, which the window's checks (samples,
the p99's interval, the model's agreement) and the analysis read.

Why: near saturation a point needs minutes of measurement for its p99's interval to
be narrow (model_beside.window_for), and a shared host (a VM whose hypervisor takes
its cores away for tens of milliseconds) stalls the client within almost every such
window. The schedule checks stay as strict as they are; a stalled segment is measured
again (the spec's validity.remeasure_stalled, per segment) and kept under stalled/,
and only the segments measured as planned make up the point. The segments are
independent runs of a stationary system, each from its own warm-up: their windows
side by side are a sample of the same process as one long window.

    points/<id>/segments/<i>/   a segment (i from 1): a point folder of its own
    points/<id>/clients/<host>/ the merged window: latency.hlog, slowdown.hlog,
                                summary.json, trace.csv (segment i's window follows
                                segment i-1's on one time line)
    points/<id>/switch/queue.jsonl  the switch's queue, on the same time line

The workers' and the switch's other files stay in the segments: the checks that read
them (tasks_intact, links_up) and the analysis' queue depths read every segment kept
(`parts`).
"""

from __future__ import annotations

import math
from pathlib import Path

from . import layout
from .histograms import read_hlog, write_hlog
from .layout import PointDir

# rain-client's interval logs: each one's Interval_Max ratio (hosts/dpdk/client/report.c)
HLOG_RATIOS = {layout.LATENCY_HLOG: 1e6, layout.SLOWDOWN_HLOG: 1e3}
_MAX_KEYS = {"max_lag_ns", "max_outstanding_seen"}
_WEIGHTED_KEYS = {"mean_service_ns", "mean_keys"}  # means over a class's offered requests
_RATE_KEYS = {"scheduled_rps": "offered", "achieved_rps": "sent_in_window", "received_rps": "received"}


def lengths(measure_s: float, segment_s: float | None) -> list[float]:
    """The window `measure_s` cut into the fewest equal segments of at most `segment_s`
    (to the millisecond); one segment when segment_s is None or not shorter."""
    if not segment_s or measure_s <= segment_s:
        return [measure_s]
    n = math.ceil(measure_s / segment_s - 1e-9)
    each = math.floor(measure_s / n * 1000) / 1000
    return [each] * (n - 1) + [round(measure_s - each * (n - 1), 3)]


def cuts_of(spec, emulated: bool, p) -> list[float]:
    """The lengths of the segments point `p`'s window is measured in: the spec's
    segment_s, for a static workload's point that does not adapt (a phase or a quota
    decision must see the window whole)."""
    if spec.workload.phases or p.params.get("adaptive"):
        return [p.measure_s]
    return lengths(p.measure_s, spec.durations(emulated).segment_s)


# Segments a window the independence check found correlated is measured to: sectioning
# (series_checks.reach) looks for the correlation's end at lags 1, 2, 4, ... up to a
# tenth of the window, and a correlation as long as a segment ends only past its
# length. With 20 segments of S samples a power of two lies between S and a tenth of the
# window (2S), so sections longer than a segment can always be tried.
REPLICATIONS = 20


def replications_for(verdict, done: list[float], longest: float | None) -> list[float]:
    """The segments to add to a window measured as `done` whose latencies the
    independence check found correlated (Lancet's thinning fails, and sectioning could
    not hold the p99's interval): enough of `done`'s first length for REPLICATIONS
    segments in all, within `longest` (measure_max_s). Segments are independent runs,
    each from its own warm-up (the module's doc), so a correlation that lasts tens of
    seconds (this VM's round trip moves by 60 to 120 us of testbed time for that long)
    ends at each one's edge, and sections of at least a segment are independent
    replications (Law, Simulation Modeling and Analysis, ch. 9). [] when the check passed,
    the window has the segments already, or no longer window is allowed."""
    try:
        c = verdict.check("independence")
    except KeyError:
        return []
    return more_for_correlated(done, longest) if c.passed is False else []


def more_for_correlated(done: list[float], longest: float | None) -> list[float]:
    """replications_for's segments for a window whose latencies were found correlated
    (the estimate asks it of a window not yet measured)."""
    if not done or len(done) >= REPLICATIONS or longest is None:
        return []
    each = done[0]
    room = int((longest - sum(done)) / each + 1e-9)
    return [each] * max(0, min(REPLICATIONS - len(done), room))


def segment_dir(pd: PointDir, index: int) -> PointDir:
    return PointDir(pd.path / layout.SEGMENTS / str(index))


def parts(pd: PointDir) -> list[PointDir]:
    """A segmented point's segments, in order; [pd] for a point measured in one run."""
    root = pd.path / layout.SEGMENTS
    if not root.is_dir():
        return [pd]
    dirs = [PointDir(p) for p in root.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(dirs, key=lambda d: int(d.id)) or [pd]


def segmented(pd: PointDir) -> bool:
    return (pd.path / layout.SEGMENTS).is_dir()


def merge(pd: PointDir) -> list[str]:
    """Write the merged window of pd's segments into pd (see the module's doc). Returns
    what could not be merged (a client host missing from a segment, an unreadable log);
    those files are left out and the checks that need them say so."""
    segs = parts(pd)
    problems: list[str] = []
    points = [s.read_point() or {} for s in segs]
    measure = [float(p.get("measure_s") or 0.0) for p in points]
    offsets = [sum(measure[:i]) for i in range(len(segs))]
    warmups = [float(p.get("warmup_s") or 0.0) for p in points]
    warmup_ns = warmups[0] * 1e9
    hosts = sorted(set().union(*(s.client_hosts() for s in segs)))
    for h in hosts:
        missing = [s.id for s in segs if not s.client(h).is_dir()]
        if missing:
            problems.append(f"client {h} has no results in segment(s) {', '.join(missing)}")
            continue
        out = pd.client(h)
        out.mkdir(parents=True, exist_ok=True)
        problems += _merge_hlogs(segs, h, offsets, out)
        summaries = [layout.read_json(s.client(h) / layout.CLIENT_SUMMARY) for s in segs]
        if all(isinstance(x, dict) for x in summaries):
            pd.write_client_summary(h, merge_summaries(summaries, measure))
        else:
            problems.append(f"client {h}: a segment's {layout.CLIENT_SUMMARY} is missing or unreadable")
        problems += _merge_traces(segs, h, offsets, warmup_ns, out / layout.TRACE)
    queue = []
    for i, (s, off, m, warm) in enumerate(zip(segs, offsets, measure, warmups)):
        # before its window only the first segment's samples count, after it only the last's
        lo, hi = (-math.inf if i == 0 else warm), (math.inf if i == len(segs) - 1 else warm + m)
        for r in s.read_switch_queue():
            t = r.get("t_s")
            if isinstance(t, (int, float)) and isinstance(r.get("balance"), dict) and lo <= t < hi:
                queue.append((t + off, {int(k): v for k, v in r["balance"].items()}))
    if queue:
        pd.write_switch_queue(queue)
    cpus = [s.read_cpu() for s in segs]
    steal = [(c.get("steal_share"), m) for c, m in zip(cpus, measure) if isinstance(c, dict)]
    if steal and all(isinstance(x, (int, float)) for x, _ in steal):
        total = sum(m for _, m in steal) or 1.0
        pd.write_cpu(
            {
                "cores": cpus[0].get("cores"),
                "steal_share": round(sum(x * m for x, m in steal) / total, 5),
                "segments": [c.get("steal_share") for c in cpus if isinstance(c, dict)],
            }
        )
    return problems


def _merge_hlogs(segs: list[PointDir], host: str, offsets: list[float], out: Path) -> list[str]:
    for name, ratio in HLOG_RATIOS.items():
        rows = []
        try:
            logs = [read_hlog(s.client(host) / name) for s in segs]
        except (OSError, ValueError) as e:
            return [f"client {host}: a segment's {name} is unreadable ({e})"]
        for lg, off in zip(logs, offsets):
            rows += [(iv.tag or "all", round(iv.start_s + off, 3), iv.length_s, iv.hist) for iv in lg.intervals]
        start = logs[0].base_time or logs[0].start_time or 0.0
        write_hlog(
            out / name,
            rows,
            start_unix_s=start,
            max_ratio=ratio,
            comment=f"the windows of {len(segs)} segments, each after its own warm-up, on one time line",
        )
    return []


def merge_summaries(summaries: list[dict], measure: list[float]) -> dict:
    """rain-client's summary.json of the merged window: counts added, largest values the
    largest, means weighted by the requests offered, rates over the whole window."""
    total = sum(measure)
    out = dict(summaries[0])
    out["duration_s"] = round(total, 6)
    out["partial"] = any(bool(s.get("partial")) for s in summaries)
    for key in ("elapsed_s", "intervals"):
        vals = [s.get(key) for s in summaries]
        if all(isinstance(v, (int, float)) for v in vals):
            out[key] = sum(vals)
    out["totals"] = _counters([s.get("totals") or {} for s in summaries], total)
    names = list((summaries[0].get("classes") or {}).keys())
    out["classes"] = {}
    for n in names:
        cells = [(s.get("classes") or {}).get(n) or {} for s in summaries]
        merged = {k: v for k, v in cells[0].items() if not isinstance(v, (int, float)) or isinstance(v, bool)}
        merged.pop("latency_ns", None)  # the whole window's quantiles: from the merged interval logs
        merged.pop("slowdown", None)
        merged.update(_counters(cells, total))
        out["classes"][n] = merged
    off = out.get("offered_rps")
    achieved = out["totals"].get("achieved_rps", 0.0)
    out["achieved_rps"] = achieved
    if isinstance(off, (int, float)) and off > 0:
        out["schedule_error"] = round(abs(achieved - off) / off, 6)
    out["run"] = _counters([s.get("run") or {} for s in summaries], None)
    out["drops"] = _counters([s.get("drops") or {} for s in summaries], None)
    lcores = [s.get("per_lcore") or [] for s in summaries]
    if all(len(x) == len(lcores[0]) for x in lcores):
        out["per_lcore"] = [
            {**lcores[0][i], **_counters([x[i] for x in lcores], None, keep=("lcore", "client_id"))}
            for i in range(len(lcores[0]))
        ]
    out["segments"] = [
        {"measure_s": m, "window_start_unix_ns": s.get("window_start_unix_ns")} for s, m in zip(summaries, measure)
    ]
    return out


def _counters(cells: list[dict], duration_s: float | None, keep: tuple[str, ...] = ()) -> dict:
    out: dict = {}
    keys = [k for k, v in cells[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    offered = [float(c.get("offered") or 0) for c in cells]
    for k in keys:
        vals = [c.get(k) for c in cells if isinstance(c.get(k), (int, float))]
        if k in keep:
            out[k] = cells[0][k]
        elif k in _MAX_KEYS:
            out[k] = max(vals)
        elif k in _WEIGHTED_KEYS:
            w = sum(offered)
            out[k] = round(sum(float(c.get(k) or 0) * o for c, o in zip(cells, offered)) / w, 3) if w else 0.0
        elif k in _RATE_KEYS and duration_s:
            out[k] = round(sum(float(c.get(_RATE_KEYS[k]) or 0) for c in cells) / duration_s, 3)
        else:
            out[k] = sum(vals)
    return out


def _merge_traces(segs: list[PointDir], host: str, offsets: list[float], warmup_ns: float, dest: Path) -> list[str]:
    """trace.csv of the merged window: the first segment whole (its warm-up is the
    merged point's), then each later one's window moved onto the time line after the
    one before. Request ids are each run's own; a later segment's are offset past the
    earlier ones' so that a request id names one request."""
    import pandas as pd_

    files = [s.client(host) / layout.TRACE for s in segs]
    if not any(f.exists() for f in files):
        return []
    if not all(f.exists() for f in files):
        return [f"client {host}: not every segment has a {layout.TRACE}"]
    frames, next_id = [], 0
    for i, (f, off) in enumerate(zip(files, offsets)):
        try:
            t = pd_.read_csv(f)
        except (OSError, ValueError) as e:
            return [f"client {host}: segment {segs[i].id}'s {layout.TRACE} is unreadable ({type(e).__name__})"]
        if i:
            t = t[t["intended_ns"] >= warmup_ns].copy()
            shift = round(off * 1e9)
            for col in ("intended_ns", "sent_ns"):
                if col in t.columns:
                    t[col] = t[col] + shift
        if "request_id" in t.columns and len(t):
            t["request_id"] = t["request_id"] + next_id
            next_id = int(t["request_id"].max()) + 1
        frames.append(t)
    tmp = dest.with_name(f".{dest.name}.tmp")
    pd_.concat(frames, ignore_index=True).to_csv(tmp, index=False)
    tmp.replace(dest)
    return []
