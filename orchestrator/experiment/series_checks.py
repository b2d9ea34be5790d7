"""Lancet's checks of the latency samples themselves (Kogias et al., USENIX ATC 2019):
a p99 read from a window is only as good as its samples are independent draws from one
distribution.

- **independence**: successive latencies (in intended send order) must not be rank
  correlated at lag 1 (Spearman). Where they are (a queue carries one request's delay
  to the next), the series is thinned, every 2nd, 4th, ... sample, as Lancet lowers its
  sampling rate, until the lag-1 correlation is no longer significant. The check passes
  when that leaves at least min_samples_p99 samples: that many independent ones are
  what a p99 needs. Where the correlation reaches further than the window can thin,
  the p99's interval is computed the way that holds under correlation (sectioning:
  the p99 of each of 10 to 20 consecutive sections, each longer than the correlation
  reaches, their spread by Student's t around the whole window's p99), and the check
  passes only when that interval is within max_p99_ci_width, as p99_ci asks of the
  order statistics' interval. It fails when the correlation reaches past a tenth of
  the window, or the sections' interval is too wide (a longer window is the fix),
  naming the correlation at each step.

  Why the second route: a rank test reads differences of any size. With a service of
  a few fixed times (a bimodal 20 us service is 90% one value), the ranks inside a
  mode are the hosts' own overhead, under a microsecond of paper time, drifting over
  tenths of a second. Thinning that correlation away asks for windows of minutes,
  while the p99's interval it widens stays far inside the limit (docs/experiments.md).
  Sectioning answers the question the test is for: whether the p99 rests on enough
  independent information.

  A third route, for a point measured in segments (segments.py): where the
  correlation reaches past what sections of the window can hold (the testbed's
  overhead wanders over minutes on a noisy VM), its segments are independent runs,
  each from its own warm-up, and the p99 of each is one replication (the method of
  independent replications: Law, Simulation Modeling and Analysis, ch. 9). With at
  least 10 of them, the check passes when their p99s, in order, show no significant
  lag-1 rank correlation (the same test and level: the drift did not carry from one
  run to the next) and their interval by Student's t is within max_p99_ci_width.
- **stationarity**: the p99 of the window's first half and of its second must agree
  within what two half windows' p99s differ by from draw to draw: the order
  statistics' spread at the independent sample count the independence check found,
  or the model's draw-to-draw spread (model_beside.py) where that is wider. A drift
  (a host slowing down, a queue still filling) splits them. The test's level is the
  other sample tests' (stationarity_alpha, 0.001): a run has many points. The limit is
  never below the clients' histograms' resolution (1/1024 at 3 significant figures),
  which every reported quantile has: where the p99 falls in a mode of one service
  time, the order statistics' spread is near nothing (a bimodal 110 us mode at
  k = 1000: "0.0%"), and halves 0.05% apart (0.05 us of paper time) failed points
  whose reported p99 no number of the run could tell from the model's.

Both read clients/<host>/trace.csv (every first send with its latency, short runs) and
run on a point's whole window (a segment's is a part). Each host's series is checked
on its own (their clocks are their own); the worst host decides.
"""

from __future__ import annotations

import math
from pathlib import Path

from .histograms import HIGHEST, LOWEST, SIGFIGS, Layout
from .points import ALL, PointData, read_model_info
from .verdict import Check, pct

EXTRA_DEFAULTS = {
    # lag-1 Spearman: correlated below this p-value; the suite's goodness-of-fit level
    # (gof_alpha): many points, each with its tests, make a stricter level raise false alarms
    "independence_alpha": 0.001,
    # the halves' p99s: apart beyond what two half windows differ by at this level, by
    # the same reasoning: at 0.05 (a 95% interval's), one stationary point in twenty
    # failed, and a run of 32 passed whole 19% of the time however steady its host
    "stationarity_alpha": 0.001,
}
PASS_TARGET = 0.99  # a window is sized so that the model's series would pass this often
RESOLUTION = Layout(LOWEST, HIGHEST, SIGFIGS).relative_resolution  # of every p99 reported (the clients')


def steps_tried(n: int, min_n: int) -> list[int]:
    """The thinning steps Lancet's test goes through on n samples: 1, 2, 4, ... while
    min_n samples remain, and last the largest step that leaves min_n."""
    out, step = [], 1
    while n // step >= max(min_n, 3):
        out.append(step)
        step *= 2
    last = n // max(min_n, 3)
    if last >= 1 and (not out or last > out[-1]):
        out.append(last)
    return out


class NoLatencies(ValueError):
    """A trace without per-request latencies (a client that does not write them)."""


def latency_series(trace: Path, summary: dict):
    """The answered requests' latencies (ns) of the measurement window, in intended
    send order: the series Lancet's tests take."""
    import numpy as np
    import pandas as pd

    cols = ["intended_ns", "latency_ns"]
    with open(trace) as f:
        header = f.readline().strip().split(",")
    if not set(cols) <= set(header):
        raise NoLatencies(f"{trace.name} has no {', '.join(c for c in cols if c not in header)} column")
    try:
        df = pd.read_csv(trace, usecols=cols, engine="pyarrow")
    except Exception:
        df = pd.read_csv(trace, usecols=cols)
    w0 = float(summary.get("warmup_s", 0.0)) * 1e9
    w1 = w0 + float(summary.get("duration_s", math.inf)) * 1e9
    df = df[(df["intended_ns"] >= w0) & (df["intended_ns"] < w1) & (df["latency_ns"] > 0)]
    return df.sort_values("intended_ns", kind="stable")["latency_ns"].to_numpy(dtype=np.float64)


def thinned(x, alpha: float, min_n: int) -> dict:
    """Lancet's independence test with down-sampling: the smallest step (1, 2, 4, ...)
    at which every step-th sample has no significant lag-1 rank correlation, while at
    least `min_n` samples remain. Returns the step (None when none does), the samples
    kept and each step's (step, n, rho, p)."""
    from scipy.stats import spearmanr

    steps = []
    for step in steps_tried(len(x), min_n):
        y = x[::step]
        if float(y.min()) == float(y.max()):  # constant: no ranks to correlate, trivially independent
            return {"step": step, "n": len(y), "steps": steps + [(step, len(y), 0.0, 1.0)]}
        r = spearmanr(y[:-1], y[1:])
        rho, p = float(r.statistic), float(r.pvalue)
        steps.append((step, len(y), rho, p))
        if p >= alpha:
            return {"step": step, "n": len(y), "steps": steps}
    return {"step": None, "n": 0, "steps": steps}


SECTIONS_MOST, SECTIONS_LEAST = 20, 10  # sectioning's usual range: fewer sections widen Student's t


def _rank_autocorrelation(x, min_pairs: int = 2):
    """rho(lag) of the series' standardized ranks (ranked once, each lag computed once);
    0 where fewer than `min_pairs` pairs are that far apart."""
    import numpy as np
    from scipy.stats import rankdata

    r = rankdata(x)
    r = (r - r.mean()) / (r.std() or 1.0)
    seen: dict[int, float] = {}

    def rho(lag: int) -> float:
        if lag not in seen:
            seen[lag] = float(np.mean(r[:-lag] * r[lag:])) if len(r) - lag >= min_pairs else 0.0
        return seen[lag]

    return rho


def reach(x, alpha: float) -> int | None:
    """How far the series' rank correlation reaches: the first lag of 1, 2, 4, ...
    at which it is no longer significant (|rho| below the two-sided normal quantile
    at alpha over sqrt(n)), or None when it still is at a tenth of the series."""
    from scipy.stats import norm

    n = len(x)
    limit = float(norm.ppf(1 - alpha / 2)) / math.sqrt(max(n, 1))
    rho = _rank_autocorrelation(x)
    lag = 1
    while lag <= n // SECTIONS_LEAST:
        if abs(rho(lag)) < limit:
            return lag
        lag *= 2
    return None


def sectioned_p99(x, reach_: int, confidence: float) -> dict:
    """The p99's interval by sectioning (Asmussen and Glynn, Stochastic Simulation,
    ch. III.5): the series cut into b consecutive sections of at least `reach_`
    samples (b from SECTIONS_LEAST to SECTIONS_MOST), each section's p99, and
    Student's t(b-1) on their spread around the whole series' p99. Its width is
    relative to that p99, as p99_ci's."""
    import numpy as np
    from scipy.stats import t as student

    b = min(SECTIONS_MOST, len(x) // max(reach_, 1))
    p99 = float(np.percentile(x, 99))
    q = np.array([np.percentile(part, 99) for part in np.array_split(x, b)])
    half = float(student.ppf(0.5 + confidence / 2, b - 1)) * float(q.std(ddof=1)) / math.sqrt(b)
    return {
        "sections": b,
        "section_samples": len(x) // b,
        "p99_us": round(p99 / 1000, 1),
        "rel_width": round(2 * half / p99, 5) if p99 > 0 else math.inf,
    }


def requests_for_independence(x, alpha: float, min_n: int, most: int) -> tuple[int | None, float]:
    """How many requests a window must hold for Lancet's test to pass on it with
    PASS_TARGET probability, when its latencies are correlated as the series `x` (the
    model's, in send order) is: at each step the test's statistic is about normal around
    rho(step) x sqrt(samples) (rho at that lag, from x), the steps taken as independent
    tries. Grows by a quarter from min_n, up to `most`; returns (requests or None, the
    pass probability at the last size tried)."""
    from scipy.stats import norm

    z = float(norm.ppf(1 - alpha / 2))
    at = _rank_autocorrelation(x, min_pairs=101)  # a lag's rho from at least 101 pairs

    n, p = min_n, 0.0
    while n <= most:
        fail = 1.0
        for step in steps_tried(n, min_n):
            mu = at(step) * math.sqrt(n // step)
            fail *= 1.0 - (float(norm.cdf(z - mu)) - float(norm.cdf(-z - mu)))
        p = 1.0 - fail
        if p >= PASS_TARGET:
            return n, p
        n = math.ceil(n * 1.25)
    return None, p


def _series(data: PointData) -> tuple[dict, str | None]:
    """Each client host's latency series, or why there is none."""
    if not data.traces:
        return {}, "no trace (clients/<host>/trace.csv; a run of at most 2 M sends writes one)"
    out = {}
    for host, path in data.traces.items():
        summary = data.summaries.get(host)
        if summary is None:
            continue
        try:
            out[host] = latency_series(path, summary)
        except NoLatencies as e:
            return {}, f"{host}: {e}"
        except Exception as e:  # a torn or foreign file: say which, never crash the verdict
            return {}, f"unreadable trace of {host}: {type(e).__name__}: {e}"
    return out, None


def check_series(data: PointData, th: dict) -> list[Check]:
    """Both checks, on the traces read once."""
    series, why = _series(data)
    independence = check_independence(series, why, th, lambda: segment_p99s(data.dir))
    return [independence, check_stationarity(data, series, why, th, independence)]


def segment_p99s(point_dir: Path) -> dict[str, list[float]]:
    """Each client host's p99 (ns) in each segment of a point measured in segments, in
    order: {} when it was not, or a segment has no series for a host."""
    import numpy as np

    from . import layout, segments
    from .layout import PointDir

    pd = PointDir(point_dir)
    if not segments.segmented(pd):
        return {}
    parts = segments.parts(pd)
    out: dict[str, list[float]] = {}
    for part in parts:
        for h in part.client_hosts():
            summary = layout.read_json(part.client(h) / layout.CLIENT_SUMMARY)
            trace = part.client(h) / layout.TRACE
            if not isinstance(summary, dict) or not trace.is_file():
                return {}
            try:
                x = latency_series(trace, summary)
            except Exception:  # noqa: BLE001 - a torn segment: no replications, the check says why not
                return {}
            if len(x) == 0:
                return {}
            out.setdefault(h, []).append(float(np.percentile(x, 99)))
    return {h: v for h, v in out.items() if len(v) == len(parts)}


def replicated_p99(p99s: list[float], whole_p99: float, alpha: float, confidence: float) -> dict:
    """The p99's interval by independent replications (each segment's p99): the lag-1
    rank correlation of the replications in order, and Student's t(b-1) on their
    spread, relative to the whole window's p99 as sectioning's is."""
    import numpy as np
    from scipy.stats import spearmanr
    from scipy.stats import t as student

    q = np.array(p99s)
    b = len(q)
    if float(q.min()) == float(q.max()):
        rho, p = 0.0, 1.0
    else:
        r = spearmanr(q[:-1], q[1:])
        rho, p = float(r.statistic), float(r.pvalue)
    half = float(student.ppf(0.5 + confidence / 2, b - 1)) * float(q.std(ddof=1)) / math.sqrt(b)
    return {
        "replications": b,
        "rho": round(rho, 4),
        "p": p,
        "independent": p >= alpha,
        "range_rel": round(float(q.max() - q.min()) / whole_p99, 6) if whole_p99 > 0 else math.inf,
        "rel_width": round(2 * half / whole_p99, 6) if whole_p99 > 0 else math.inf,
    }


def check_independence(series: dict, why: str | None, th: dict, replications=None) -> Check:
    """Lancet's test, then sectioning, then (for a point in segments) independent
    replications (the module's doc). `replications`: a callable giving each host's
    segment p99s (segment_p99s), asked only when the first two cannot pass."""
    import numpy as np

    alpha, min_n = float(th["independence_alpha"]), int(th["min_samples_p99"])
    if why:
        return Check("independence", None, None, alpha, f"not run: {why}")
    limit = float(th["max_p99_ci_width"])
    detail = {}
    reps: dict | None = None
    for host, x in series.items():
        t = thinned(x, alpha, min_n)
        detail[host] = {
            "samples": len(x),
            "step": t["step"],
            "independent_samples": t["n"] if t["step"] else 0,
            "lag1": [{"step": s, "n": n, "rho": round(r, 4), "p": p} for s, n, r, p in t["steps"]],
        }
        if t["step"] is None and len(x) >= SECTIONS_LEAST:
            detail[host]["reach"] = reach(x, alpha)
            if detail[host]["reach"] is not None:
                detail[host]["sectioned"] = sectioned_p99(x, detail[host]["reach"], float(th["ci_confidence"]))
        sec = detail[host].get("sectioned")
        if t["step"] is None and not (sec and sec["rel_width"] <= limit) and replications is not None and len(x):
            reps = replications() if reps is None else reps
            mine = reps.get(host) or []
            if len(mine) >= SECTIONS_LEAST:
                whole = float(np.percentile(x, 99))
                detail[host]["replicated"] = replicated_p99(mine, whole, alpha, float(th["ci_confidence"]))
    if not detail:
        return Check("independence", None, None, alpha, "not run: no client summary beside the traces")

    def badness(h: str) -> float:  # thinned < sectioned < replicated, each within the limit < failed
        d = detail[h]
        if d["step"] is not None:
            return d["step"]
        sec, rep = d.get("sectioned"), d.get("replicated")
        if sec and sec["rel_width"] <= limit:
            return 1e9 + sec["rel_width"]
        if rep and rep["independent"] and rep["rel_width"] <= limit:
            return 2e9 + rep["rel_width"]
        return math.inf

    worst = max(detail, key=badness)
    d = detail[worst]
    shown = d["lag1"] if len(d["lag1"]) <= 3 else [d["lag1"][0], "...", *d["lag1"][-2:]]  # all in detail
    steps = "; ".join(
        s if isinstance(s, str) else f"every {s['step']}: rho {s['rho']:+.3f} p={s['p']:.2g} (n={s['n']:,})"
        for s in shown
    )
    if d["step"] is not None:
        msg = (
            f"{worst}: lag-1 Spearman of successive latencies not significant (p >= {alpha:g}) at every "
            f"{d['step']} of {d['samples']:,} samples: {d['independent_samples']:,} independent (>= {min_n:,}) [{steps}]"
        )
        return Check("independence", True, d["independent_samples"], min_n, msg, detail)
    msg = (
        f"{worst}: successive latencies stay rank-correlated at lag 1 (Spearman, reject below p={alpha:g}) "
        f"however far {d['samples']:,} samples thin while {min_n:,} remain [{steps or 'too few to test'}]"
    )
    sec, rep = d.get("sectioned"), d.get("replicated")
    if sec is None:
        msg += (
            f"; the correlation reaches past a tenth of the window ({d['samples'] // SECTIONS_LEAST:,} samples), "
            "so no interval of the p99 by its sections holds"
        )
    else:
        msg += (
            f"; the correlation reaches {d['reach']:,} samples, and the p99's interval over {sec['sections']} "
            f"sections of {sec['section_samples']:,} (sectioning, which holds under correlation) is "
            f"{sec['rel_width']:.3g} wide"
        )
        if sec["rel_width"] <= limit:
            msg += f" (limit {limit:g}): the correlation leaves the p99's interval within it"
            return Check("independence", True, sec["rel_width"], limit, msg, detail)
        msg += f", over the {limit:g} limit: the correlation widens the p99's interval"
    if rep is None:
        if sec is None:
            msg += (
                ": the p99 rests on fewer independent samples than it needs; measure a longer window (in at "
                f"least {SECTIONS_LEAST} segments, whose p99s are independent replications)"
            )
        else:
            msg += "; measure a longer window"
        return Check("independence", False, None if sec is None else sec["rel_width"], limit, msg, detail)
    msg += (
        f"; its {rep['replications']} segments, independent runs, have p99s {pct(rep['range_rel'])} apart at most, "
        f"lag-1 rank correlation {rep['rho']:+.3f} (p={rep['p']:.2g}), and the p99's interval over them "
        f"(independent replications) is {rep['rel_width']:.3g} wide (limit {limit:g})"
    )
    if not rep["independent"]:
        msg += ": but the segments' p99s are correlated too (the drift carried from run to run); measure longer"
        return Check("independence", False, rep["rel_width"], limit, msg, detail)
    if rep["rel_width"] > limit:
        msg += ": over the limit; measure longer"
        return Check("independence", False, rep["rel_width"], limit, msg, detail)
    msg += ": the p99 holds over runs"
    return Check("independence", True, rep["rel_width"], limit, msg, detail)


def _half_p99s(x, step: int) -> tuple[float, float, float, float]:
    """The two halves' p99s and their relative sd from the order statistics, each half
    counted at its independent samples (n / step)."""
    import numpy as np

    half = len(x) // 2
    a, b = x[:half], x[half:]
    pa, pb = float(np.percentile(a, 99)), float(np.percentile(b, 99))
    sds = []
    for part, p99 in ((a, pa), (b, pb)):
        n = max(1, len(part) // step)
        # the order statistics' 1-sigma ranks around the 99th, as a share of the p99
        d = math.sqrt(0.99 * 0.01 / n)
        lo, hi = np.percentile(part, [100 * max(0.0, 0.99 - d), 100 * min(1.0, 0.99 + d)])
        sds.append(float(hi - lo) / 2 / p99 if p99 > 0 else math.inf)
    return pa, pb, sds[0], sds[1]


def check_stationarity(
    data: PointData, series: dict, why: str | None, th: dict, independence: Check | None = None
) -> Check:
    from scipy.stats import norm

    confidence = 1.0 - float(th["stationarity_alpha"])
    z = float(norm.ppf(0.5 + confidence / 2))
    if why:
        return Check("stationarity", None, None, confidence, f"not run: {why}")
    steps = {}
    if independence is not None and isinstance(independence.detail, dict):
        steps = {h: (d.get("step") or 0) for h, d in independence.detail.items() if isinstance(d, dict)}
    model_sd = (((read_model_info(data.dir) or {}).get("p99_spread") or {}).get("rel_sd") or {}).get(ALL)
    detail, worst, worst_r = {}, None, -1.0
    for host, x in series.items():
        if len(x) < 2 * int(th["min_samples_p99"]):
            detail[host] = {"samples": len(x), "skipped": "too few samples for a p99 of each half"}
            continue
        step = steps.get(host) or max(1, len(x) // int(th["min_samples_p99"]))  # not independent: the least trusted
        pa, pb, sa, sb = _half_p99s(x, step)
        # a half window's p99 varies sqrt(2) times as much as the whole window's, draw to draw
        drawn = float(model_sd) * math.sqrt(2) if isinstance(model_sd, (int, float)) else 0.0
        sa, sb = max(sa, drawn), max(sb, drawn)
        mid = (pa + pb) / 2
        diff = abs(pa - pb) / mid if mid > 0 else math.inf
        drawn_limit = z * math.sqrt(sa * sa + sb * sb)
        limit = max(drawn_limit, RESOLUTION)
        detail[host] = {
            "first_p99_us": round(pa / 1000, 1),
            "second_p99_us": round(pb / 1000, 1),
            "rel_diff": round(diff, 6),
            "limit": round(limit, 6),
            "step": step,
            "model_rel_sd": model_sd,
            "by": "draws" if drawn_limit >= RESOLUTION else "resolution",
        }
        r = diff / limit if limit > 0 else math.inf
        if r > worst_r:
            worst, worst_r = host, r
    if worst is None:
        return Check("stationarity", None, None, confidence, "not run: too few samples for a p99 of each half")
    d = detail[worst]
    src = "the model's draws" if d["model_rel_sd"] else "the order statistics"
    if d["by"] == "resolution":
        src = f"the histograms' resolution, wider than {src}"
    msg = (
        f"{worst}: p99 of the window's first half {d['first_p99_us']:,.1f} us, second half "
        f"{d['second_p99_us']:,.1f} us (testbed time): {pct(d['rel_diff'])} apart, "
        f"{'within' if worst_r <= 1 else 'beyond'} the {pct(d['limit'])} two half windows differ by "
        f"at {confidence:.1%} (by {src})"
    )
    if worst_r > 1:
        msg += ": the window drifted (a host slowing, a queue still filling); look at the latency over time"
    return Check("stationarity", worst_r <= 1, d["rel_diff"], d["limit"], msg, detail)
