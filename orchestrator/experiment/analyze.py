"""Analysis: a run folder's raw results -> summary.parquet (docs/architecture.md,
"Data flow of a run"; the files: docs/results.md).

Everything works on histograms: each client host's interval logs are decoded and
added (per class and per interval), quantiles come from the merged counts, and no
raw sample is ever materialised, so a run of millions of requests per point
analyses in well under a second per point (bench_analysis.py measures it).

Units. Columns without a suffix are testbed time (the emulated testbed dilates
service and inter-arrival times by k, docs/emulation.md "Time dilation"); `_paper` columns
are divided by k, and loads in kRPS are paper loads (testbed rps x k / 1000).
Slowdowns are ratios, the same in both.

Inputs: the run folder as layout.py defines it (which file, who writes it, who reads
it): per point its client histograms and counters, validity.json, the switch's
snapshot and queue samples, and the worker agents' samples and decisions; the point's
status from sweep.json.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import UsageError
from ..systems.counters import EVENTS_COUNTER
from . import points
from .histograms import Hist
from .layout import PointDir, RunDir
from .points import ALL, PointData, curve_of, experiment_name, load_point, number, p99_interval, spec_of
from .sweep import record_rechecked

PCTS = (50.0, 99.0, 99.9)


# -- one point's inputs --------------------------------------------------------------


# point.json's fields (plan.Point) and the JSON types each may have


# -- the run directory ----------------------------------------------------------------


def _us(ns: float) -> float:
    return ns / 1000.0 if not math.isnan(ns) else math.nan


def _row(data: PointData, cls: str, verdict: dict, base: dict, model: PointData | None = None) -> dict:
    k = data.dilation
    lat = data.latency.get(cls)
    sd = data.slowdown.get(cls)
    c = data.counters(cls)
    row = dict(base)
    row["class"] = cls
    if cls == ALL:
        offered = base.get("_planned_rps") or data.top("offered_rps") or c.get("scheduled_rps")
        achieved = data.top("achieved_rps") if data.top("achieved_rps") is not None else c.get("achieved_rps")
    else:
        offered = c.get("scheduled_rps")
        achieved = c.get("achieved_rps")
    received = c.get("received_rps")
    nan = math.nan
    row["offered_rps"] = float(offered) if offered is not None else nan
    row["achieved_rps"] = float(achieved) if achieved is not None else nan
    row["received_rps"] = float(received) if received is not None else nan
    for col in ("offered", "achieved", "received"):
        row[f"{col}_krps"] = row[f"{col}_rps"] * k / 1000.0
    n = lat.total if lat is not None else 0
    row["samples"] = n
    p50, p99, p999 = lat.percentiles(PCTS) if lat is not None else (nan, nan, nan)
    lo, hi = p99_interval(data, cls)["ci"] if n else (nan, nan)
    stats = {
        "mean": lat.mean() if n else nan,
        "p50": p50,
        "p99": p99,
        "p999": p999,
        "max": lat.max() if n else nan,
        "p99_ci_lo": lo,
        "p99_ci_hi": hi,
    }
    for name, ns in stats.items():
        row[f"{name}_us"] = _us(ns)
    for name, ns in stats.items():
        row[f"{name}_us_paper"] = _us(ns) / k
    row["p99_ci_rel_width"] = (hi - lo) / p99 if n and p99 > 0 else nan
    # order-statistics intervals of the other quantiles (claims.py weighs them; the p99's
    # above may be wider, from the model's draw-to-draw spread)
    for name, q in (("p50", 0.5), ("p999", 0.999)):
        qlo, qhi = lat.quantile_ci(q) if n else (nan, nan)
        row[f"{name}_ci_lo_us_paper"], row[f"{name}_ci_hi_us_paper"] = _us(qlo) / k, _us(qhi) / k
    s50, s99, s999 = sd.percentiles(PCTS) if sd is not None and sd.total else (nan, nan, nan)
    row["p50_slowdown"], row["p99_slowdown"], row["p999_slowdown"] = s50 / 1000.0, s99 / 1000.0, s999 / 1000.0
    slo, shi = sd.quantile_ci(0.99) if sd is not None and sd.total else (nan, nan)
    row["p99_slowdown_ci_lo"], row["p99_slowdown_ci_hi"] = slo / 1000.0, shi / 1000.0
    for key in (
        "offered",
        "sent",
        "sent_in_window",
        "received",
        "timed_out",
        "lost",
        "rejected",
        "failed",
        "not_sent",
        "late_sends",
        "resubmitted",
    ):
        row[key] = int(c.get(key, 0))
    row["late_fraction"] = row["late_sends"] / row["sent"] if row["sent"] else nan
    row["max_lag_us"] = c["max_lag_ns"] / 1000.0 if "max_lag_ns" in c else nan
    row["mean_service_us"] = c["mean_service_ns"] / 1000.0 if c.get("mean_service_ns") else nan
    row["valid"] = bool(verdict.get("valid", False))
    row["failed_checks"] = ",".join(verdict.get("failed", []))
    row.update(_model_columns(model, cls, row["p99_us_paper"]))
    return row


def _model_columns(model: PointData | None, cls: str, p99_us_paper: float) -> dict[str, float]:
    """The model beside the point (model_beside.py; paper time): its p50, p99 and p99
    slowdown for the class, and measured p99 / the model's. NaN without a model."""
    nan = math.nan
    lat = model.latency.get(cls) if model is not None else None
    sd = model.slowdown.get(cls) if model is not None else None
    p50, p99 = lat.percentiles((50.0, 99.0)) if lat is not None and lat.total else (nan, nan)
    m99 = _us(p99)
    return {
        "model_p50_us_paper": _us(p50),
        "model_p99_us_paper": m99,
        "model_p99_slowdown": sd.percentile(99.0) / 1000.0 if sd is not None and sd.total else nan,
        "model_ratio": p99_us_paper / m99 if m99 > 0 else nan,
    }


def _verdict(data: PointData, spec_validity, recheck: bool) -> dict:
    from .validity import check_point

    v = PointDir(data.dir).read_verdict() if not recheck else None
    if v is not None and "valid" in v:
        v.setdefault("failed", [c["name"] for c in v.get("checks", []) if c.get("passed") is False])
        return v
    verdict = check_point(data.dir, data.point, spec_validity, data=data, write=False)
    as_dict = verdict.to_dict()
    verdict.write(data.dir, as_dict)
    return as_dict


def analyze(run_dir: str | Path, *, recheck: bool = False, write: bool = True, model: bool = False):
    """Merge every point's histograms and counters into one DataFrame (one row per
    point and class, 'all' included) and write run_dir/summary.parquet (and
    timeseries.parquet: per-interval quantiles, for the over-time figures).

    Validity: each point's validity.json is used when present (the runner writes it
    as the point completes); otherwise, or with `recheck`, the checks run here
    against the thresholds of the spec in manifest.json and write it.

    The model columns (MODEL_COLUMNS) come from points/<id>/model/, NaN without it;
    `model` first simulates the model beside each measured point that has none (a run
    measured before it existed: model_beside.ensure) and checks those points again."""
    import pandas as pd

    from . import model_beside
    from .segments import parts

    rd = RunDir(run_dir).check(manifest=False)
    run_dir = rd.path
    manifest = rd.read_manifest()
    modelled = set(model_beside.ensure(run_dir)) if model and manifest else set()
    spec = spec_of(manifest)
    spec_validity = spec.validity if spec is not None else None
    experiment = experiment_name(run_dir, manifest)
    rows, ts_rows, rechecked = [], [], {}
    for d in rd.points():
        data = load_point(d)
        verdict = _verdict(data, spec_validity, recheck or d.id in modelled)  # model_agreement needs the model
        if recheck or d.id in modelled:
            rechecked[d.id] = verdict
        p = data.point
        base = {
            "experiment": experiment,
            "run": run_dir.name,
            "point_id": data.id,
            "index": p.get("index"),
            "system": p.get("system"),
            "variant": p.get("variant"),
            "variant_label": p.get("variant_label"),
            "curve": curve_of(p),
            "repetition": int(number(p.get("repetition"), 1)),
            "load_krps": number(p.get("load_krps")),
            "capacity_fraction": number(p.get("capacity_fraction")),
            "dilation": data.dilation,
            "warmup_s": number(p.get("warmup_s"), 0.0),
            "measure_s": number(p.get("measure_s")),
            "handler": p.get("handler"),
            "status": str(p.get("status", "")),
            "hosts": len(data.hosts),
            "partial": data.partial,
            "_planned_rps": p.get("offered_rps"),
            "queuing_ratio": queuing_ratio(*(part.read_snapshot() for part in parts(d))),
            "mean_quota": mean_quota(d),
            **queue_depths(d, p),
        }
        model = points.load_model(d)
        for cls in data.classes + [ALL]:
            rows.append(_row(data, cls, verdict, base, model))
        ts_rows += _timeseries(data, experiment, base, bool(verdict.get("valid", False)))
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.drop(columns=["_planned_rps"])
        df = _with_repetition_aggregates(df)
    ts = pd.DataFrame(ts_rows)
    if write:
        _write_table(df, rd.summary)
        _write_table(ts, rd.timeseries)
        record_rechecked(run_dir, rechecked)  # sweep.json says what the checks say now
    return df


def _write_table(df, path: Path) -> None:
    """Through a temporary file: an analysis interrupted half-way leaves the last
    complete table (or none), never a torn one that the plots would choke on."""
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(path)


# The model beside each point (model_beside.py), paper time; NaN where a point has none.
MODEL_COLUMNS = ("model_p50_us_paper", "model_p99_us_paper", "model_p99_slowdown", "model_ratio")

# The columns the plots and the report read; a table without them is damaged or was
# written by another version of the analysis.
SUMMARY_COLUMNS = ("point_id", "curve", "class", "load_krps", "repetition", "dilation", "valid", "p99_us_paper")
TIMESERIES_COLUMNS = ("point_id", "class", "t_s", "t_s_paper", "p99_us_paper")


def read_table(path: Path, columns: tuple[str, ...] = ()):
    """A table the analysis wrote (summary.parquet, timeseries.parquet), or a
    UsageError naming it when it is not one: the plots and the report only read them."""
    import pandas as pd
    from pyarrow import ArrowException

    again = f"run `rainmaker analyze {path.parent}`: it writes {path.name} again"
    if path.is_dir():
        raise UsageError(f"{path} is a folder, not the analysis' table", fix=f"move it away, then {again}")
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError, ArrowException) as e:
        raise UsageError(f"{path} is damaged: not a Parquet table ({e})", fix=again) from None
    missing = [c for c in columns if c not in df.columns]
    if len(df) and missing:
        raise UsageError(f"{path} lacks the columns {', '.join(missing)}", fix=again)
    return df


def _timeseries(data: PointData, experiment: str, base: dict, valid: bool) -> list[dict]:
    """Per class (and 'all') and interval of the window: samples, p50, p99, p99 slowdown."""
    lat, sd = data.latency_cube, data.slowdown_cube
    if lat is None:
        return []
    k = data.dilation
    sd_iv = sd.interval_hists() if sd is not None else {}
    s_index = {s: i for i, s in enumerate(sd.starts)} if sd is not None else {}
    out = []
    for cls, hists in lat.interval_hists().items():
        for t, h in zip(lat.starts, hists):
            p50, p99 = h.percentiles((50.0, 99.0))
            j = s_index.get(t)
            s99 = sd_iv[cls][j].percentile(99.0) / 1000.0 if cls in sd_iv and j is not None else math.nan
            out.append(
                {
                    "experiment": experiment,
                    "point_id": data.id,
                    "curve": base["curve"],
                    "repetition": base["repetition"],
                    "load_krps": base["load_krps"],
                    "class": cls,
                    "t_s": t,
                    "t_s_paper": t / k,
                    "samples": h.total,
                    "p50_us": p50 / 1000.0,
                    "p99_us": p99 / 1000.0,
                    "p99_us_paper": p99 / 1000.0 / k,
                    "p99_slowdown": s99,
                    "valid": valid,
                }
            )
    return out


def _with_repetition_aggregates(df):
    """Per curve, class and load: the mean and min/max over repetitions of p99 (paper
    time) and p99 slowdown, how many repetitions and how many were valid."""
    agg = aggregate(df)
    keep = [
        "curve",
        "class",
        "load_krps",
        "reps",
        "valid_reps",
        "p99_us_paper_mean",
        "p99_us_paper_min",
        "p99_us_paper_max",
        "p99_slowdown_mean",
        "p99_slowdown_min",
        "p99_slowdown_max",
    ]
    return df.merge(agg[keep], on=["curve", "class", "load_krps"], how="left")


def aggregate(df):
    """One row per curve, class and nominal load (paper kRPS): repetitions combined
    (means, and min/max of the p99s, slowdowns, loads and optional metrics)."""
    extra = (
        "queuing_ratio",
        "mean_quota",
        "switch_queue_mean",
        "switch_queue_max",
        "worker_queue_mean",
        *MODEL_COLUMNS,  # NaN in a table written before the model was beside every point
    )
    for col in extra:
        if col not in df.columns:
            df = df.assign(**{col: math.nan})
    keys = ["curve", "class", "load_krps"]
    g = df.groupby(keys, sort=True, dropna=False)
    mean_cols = [
        "offered_krps",
        "achieved_krps",
        "p50_us_paper",
        "p99_us_paper",
        "p999_us_paper",
        "p99_slowdown",
        *extra,
    ]
    span_cols = ["achieved_krps", "p99_us_paper", "p99_slowdown", *extra]
    means = g[mean_cols].mean()
    mins = g[span_cols].min().add_suffix("_min")
    maxs = g[span_cols].max().add_suffix("_max")
    out = means.rename(columns={c: f"{c}_mean" for c in mean_cols if c not in ("offered_krps", "achieved_krps")})
    out = out.join(mins).join(maxs)
    out["system"] = g["system"].first()
    out["reps"] = g["point_id"].count()
    out["valid_reps"] = g["valid"].sum().astype(int)
    out["samples"] = g["samples"].sum()
    out = out.reset_index()
    out["all_valid"] = out["valid_reps"] == out["reps"]
    return out


def read_summary(run_dir: str | Path):
    """summary.parquet, analysing the run first if it is missing."""
    p = RunDir(run_dir).summary
    if not p.exists():
        return analyze(run_dir)
    return read_table(p, SUMMARY_COLUMNS)


# -- throughput under SLO ---------------------------------------------------------------


def slo_limits(slo) -> dict[str, float]:
    """{'p99_us': x (paper time), 'p99_slowdown': y} from a Slo, a dict or a number
    (a bare number is a p99 slowdown)."""
    if slo is None:
        return {}
    if isinstance(slo, (int, float)):
        return {"p99_slowdown": float(slo)}
    if hasattr(slo, "model_dump"):
        slo = slo.model_dump()
    return {k: float(v) for k, v in dict(slo).items() if k in ("p99_us", "p99_slowdown") and v is not None}


def throughput_under_slo(df, slo, *, cls: str = ALL, load: str = "achieved_krps"):
    """Per curve, the highest load (mean achieved over repetitions, paper kRPS) whose
    p99 (paper time) and/or p99 slowdown stays within the SLO. Loads are walked
    upwards and the walk stops at the first load that breaks the SLO or whose
    repetitions are not all valid (a point that could not hold its load, lost
    requests or lacked samples does not count as meeting anything), so a noisy
    recovery past the knee is not credited.

    Returns a DataFrame: curve, throughput_krps (NaN if even the lowest load
    fails), load_krps (the nominal load of that point), p99_us_paper,
    p99_slowdown, first_violation_krps, stopped_by (why the walk ended there: "slo",
    "invalid", or "" when every load met the SLO) and the SLO used."""
    import pandas as pd

    limits = slo_limits(slo)
    if not limits:
        raise ValueError("throughput_under_slo needs an SLO with p99_us and/or p99_slowdown")
    sub = df[df["class"] == cls]
    if sub.empty:
        return pd.DataFrame(
            columns=[
                "curve",
                "throughput_krps",
                "load_krps",
                "p99_us_paper",
                "p99_slowdown",
                "first_violation_krps",
                "stopped_by",
                "slo",
            ]
        )
    agg = aggregate(sub)
    metric = {"p99_us": "p99_us_paper_mean", "p99_slowdown": "p99_slowdown_mean"}
    load_col = {"achieved_krps": "achieved_krps", "offered_krps": "offered_krps", "load_krps": "load_krps"}[load]
    out = []
    for curve, g in agg.groupby("curve", sort=True):
        g = g.sort_values("load_krps")
        best = None
        violation, stopped_by = math.nan, ""
        for _, r in g.iterrows():
            valid = bool(r["all_valid"])
            ok = valid and all(not math.isnan(r[metric[m]]) and r[metric[m]] <= lim for m, lim in limits.items())
            if not ok:
                violation, stopped_by = float(r[load_col]), "slo" if valid else "invalid"
                break
            best = r
        out.append(
            {
                "curve": curve,
                "throughput_krps": float(best[load_col]) if best is not None else math.nan,
                "load_krps": float(best["load_krps"]) if best is not None else math.nan,
                "p99_us_paper": float(best["p99_us_paper_mean"]) if best is not None else math.nan,
                "p99_slowdown": float(best["p99_slowdown_mean"]) if best is not None else math.nan,
                "first_violation_krps": violation,
                "stopped_by": stopped_by,
                "slo": ", ".join(f"{m} <= {v:g}" for m, v in limits.items()),
            }
        )
    return pd.DataFrame(out)


# -- the switch's and the workers' queues ------------------------------------------------


def queuing_ratio(*snapshots: dict | None) -> float:
    """Fig. 11's on-switch queuing ratio: tasks dispatched from the switch queue (a
    token met a waiting task) over all dispatched tasks, from the controller's
    snapshot after the point (its counters were zeroed before it), or the snapshots
    of a point's segments together. NaN without one."""
    q = d = 0
    for snapshot in snapshots:
        counters = (snapshot or {}).get("counters")
        events = counters.get(EVENTS_COUNTER) if isinstance(counters, dict) else None
        if not isinstance(events, dict):
            continue

        def packets(name: str, events: dict = events) -> int:
            cell = events.get(name)
            return int(cell.get("packets", 0)) if isinstance(cell, dict) else 0

        q, d = q + packets("EV_DISPATCH_QUEUED"), d + packets("EV_DISPATCH_DIRECT")
    return q / (q + d) if q + d > 0 else math.nan


def switch_queue_series(pd: PointDir) -> list[tuple[float, int, int]]:
    """(seconds since the load started, tasks queued in the switch, tokens queued in
    the switch), summed over slices, from the samples the runner took (switch/queue.jsonl)."""
    out = []
    for r in pd.read_switch_queue():
        vals = [int(v) for v in r["balance"].values() if isinstance(v, (int, float))]
        out.append((float(r["t_s"]), sum(max(-v, 0) for v in vals), sum(max(v, 0) for v in vals)))
    return out


def _worker_window(pd: PointDir, host: str, warmup_s: float, measure_s: float) -> list[dict]:
    """A worker host's samples within the measurement window. The agent's clock starts
    with the agent; the load starts when its tokens are turned on (the first sample
    with a worker enabled), so the window is a duration from there, on that host's
    own clock (clocks of different machines are never compared)."""
    rows = [r for r in pd.read_worker_samples(host) if isinstance(r.get("t"), (int, float)) and r.get("workers")]
    on = next((r["t"] for r in rows if any(w.get("enabled") for w in r["workers"])), None)
    if on is None:
        return []
    return [r for r in rows if on + warmup_s <= r["t"] <= on + warmup_s + measure_s]


def slices_over_time(pd: PointDir, point: dict) -> list[tuple[float, dict[int, tuple[int, float]]]]:
    """Algorithm 1's state after each control interval, from the worker agents'
    decisions: (seconds of paper time since the measurement window opened, {slice:
    (workers in it, their mean token quota)}), over every worker host. Each host's
    times are on its own clock, from its tokens' start, as in `_worker_window`."""
    k = float(point.get("dilation") or 1.0)
    warm = float(point.get("warmup_s") or 0.0)
    events: list[tuple[float, str, dict]] = []
    for host in pd.worker_hosts():
        rows = [r for r in pd.read_worker_samples(host) if isinstance(r.get("t"), (int, float)) and r.get("workers")]
        on = next((r["t"] for r in rows if any(w.get("enabled") for w in r["workers"])), 0.0)
        for d in pd.read_decisions(host):
            members = d.get("members")
            if isinstance(d.get("t"), (int, float)) and isinstance(members, dict):
                events.append(((float(d["t"]) - on - warm) / k, host, members))
    state: dict[str, dict] = {}
    out = []
    for t, host, members in sorted(events, key=lambda e: e[0]):
        state[host] = members
        merged: dict[int, list[int]] = {}
        for ms in state.values():
            for s, ws in ms.items():
                if isinstance(ws, dict):
                    merged.setdefault(int(s), []).extend(int(q) for q in ws.values() if isinstance(q, (int, float)))
        out.append((t, {s: (len(qs), sum(qs) / len(qs)) for s, qs in sorted(merged.items()) if qs}))
    return out


def phase_rows(data: PointData, pd: PointDir | None = None) -> list[dict]:
    """A time-varying point's latency per workload phase (Fig. 10's comparison, in
    numbers): each phase's intervals of the measurement window merged (all classes),
    paper time, and when the agents adapt, each slice's workers and mean token quota
    at the phase's end (from their decisions). Empty for a point without phases."""
    at = [float(a) for a in data.point.get("phase_at_s") or [] if isinstance(a, (int, float))]
    cube = data.latency_cube
    if not at or cube is None:
        return []
    k = data.dilation
    warm = number(data.point.get("warmup_s"), 0.0)
    measure = number(data.point.get("measure_s"), math.inf)
    sd = data.slowdown_cube
    states = slices_over_time(pd, data.point) if pd is not None else []
    out = []
    for i, start in enumerate(at):
        lo = max(start - warm, 0.0)
        hi = min(at[i + 1] - warm if i + 1 < len(at) else math.inf, measure)
        if hi <= lo:
            continue
        starts = [t for t in cube.starts if lo <= t < hi]
        lat = Hist.merge([cube.interval(ALL, t) for t in starts], cube.layout)
        p50, p99 = lat.percentiles((50.0, 99.0)) if lat.total else (math.nan, math.nan)
        s99 = math.nan
        if sd is not None:
            h = Hist.merge([sd.interval(ALL, t) for t in starts if t in sd.starts], sd.layout)
            s99 = h.percentile(99.0) / 1000.0 if h.total else math.nan
        end_paper = (hi if math.isfinite(hi) else (starts[-1] if starts else lo)) / k
        slices = [st for t, st in states if t <= end_paper]
        out.append(
            {
                "phase": i + 1,
                "from_ms_paper": lo / k * 1000.0,
                "to_ms_paper": end_paper * 1000.0,
                "samples": lat.total,
                "p50_us_paper": p50 / 1000.0 / k,
                "p99_us_paper": p99 / 1000.0 / k,
                "p99_slowdown": s99,
                "slices": slices[-1] if slices else {},
            }
        )
    return out


def queue_depths(pd: PointDir, point: dict) -> dict[str, float]:
    """Mean and largest queue depths of the measurement window (warm-up excluded):
    tasks in the switch queue, and tasks in a worker's local queue (per worker). A
    point measured in segments: every segment's window."""
    from .segments import parts

    sw: list[int] = []
    local: list[float] = []
    pieces = parts(pd)
    for part in pieces:
        p = point if len(pieces) == 1 else (part.read_point() or {})
        warmup, measure = number(p.get("warmup_s"), 0.0), number(p.get("measure_s"), math.inf) or math.inf
        sw += [tasks for t, tasks, _ in switch_queue_series(part) if warmup <= t <= warmup + measure]
        local += [
            float(w["fifo"])
            for h in part.worker_hosts()
            for r in _worker_window(part, h, warmup, measure)
            for w in r["workers"]
            if isinstance(w.get("fifo"), (int, float))
        ]
    nan = math.nan
    return {
        "switch_queue_mean": sum(sw) / len(sw) if sw else nan,
        "switch_queue_max": float(max(sw)) if sw else nan,
        "worker_queue_mean": sum(local) / len(local) if local else nan,
        "worker_queue_max": max(local) if local else nan,
    }


def mean_quota(pd: PointDir) -> float:
    """Mean token quota (the bound of a worker's queue, Fig. 9b) over the run: from the
    worker agents' decisions (adaptive points), else their samples (every segment's,
    for a point measured in segments). NaN when neither."""
    from .segments import parts, segmented

    if segmented(pd):
        vals = [q for q in (mean_quota(part) for part in parts(pd)) if not math.isnan(q)]
        return sum(vals) / len(vals) if vals else math.nan
    vals: list[float] = []
    hosts = pd.worker_hosts()
    for h in hosts:
        for row in pd.read_decisions(h):
            q = [float(x) for x in row.get("quotas", []) if isinstance(x, (int, float))]
            if q:
                vals.append(sum(q) / len(q))
    if not vals:
        for h in hosts:
            for row in pd.read_worker_samples(h):
                q = [float(w["quota"]) for w in row.get("workers", []) if isinstance(w.get("quota"), (int, float))]
                if q:
                    vals.append(sum(q) / len(q))
    return sum(vals) / len(vals) if vals else math.nan
