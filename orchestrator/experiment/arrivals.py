"""The interarrival check: do the clients' actual send times follow the configured
arrival process? Gaps rescaled by the schedule's intensity (the time-rescaling
theorem) are Exp(1) for a Poisson process of the scheduled rate and 1 for a constant
one; a KS test (Poisson) or the gaps' spread (constant) says whether they are."""

from __future__ import annotations

import math
from pathlib import Path

from .points import PointData
from .verdict import Check, pct


def _cum_intensity(schedule: list, lcores: int):
    """Breakpoints (ns) and the cumulative per-lcore intensity at them, for np.interp:
    the schedule is [[t_s, rps(, classes)], ...], piecewise constant from t_s on."""
    import numpy as np

    ts = [float(row[0]) for row in schedule]
    rates = [float(row[1]) / max(lcores, 1) for row in schedule]
    ts.append(ts[-1] + 1e6)  # far past the end
    bp = np.array(ts) * 1e9
    cum = np.concatenate([[0.0], np.cumsum(np.diff(bp) / 1e9 * np.array(rates))])
    return bp, cum


def rescaled_gaps(trace: Path, summary: dict, column: str = "sent_ns"):
    """Inter-send gaps of each lcore within the measurement window, rescaled by the
    schedule's intensity (time-rescaling theorem): Exp(1) for a Poisson process of the
    scheduled rate, 1 for a constant one. Returns a numpy array."""
    import numpy as np
    import pandas as pd

    try:
        df = pd.read_csv(trace, usecols=["lcore", column], engine="pyarrow")
    except Exception:
        df = pd.read_csv(trace, usecols=["lcore", column])
    schedule = summary.get("schedule") or []
    if not schedule:
        return np.array([])
    lcores = int(summary.get("lcores") or df["lcore"].nunique() or 1)
    w0 = float(summary.get("warmup_s", 0.0)) * 1e9
    w1 = w0 + float(summary.get("duration_s", math.inf)) * 1e9
    bp, cum = _cum_intensity(schedule, lcores)
    out = []
    for _, g in df.groupby("lcore", sort=False):
        t = np.sort(g[column].to_numpy(dtype=np.float64))
        t = t[(t >= w0) & (t < w1)]
        if len(t) > 1:
            out.append(np.diff(np.interp(t, bp, cum)))
    return np.concatenate(out) if out else np.array([])


def check_interarrival(data: PointData, arrival: str | None, alpha: float, th: dict, seed: int = 1) -> Check:
    import numpy as np
    from scipy import stats

    if not data.traces:
        return Check(
            "interarrival",
            None,
            None,
            alpha,
            "not run: no trace (clients/<host>/trace.csv; run rain-client with --trace)",
        )
    if arrival not in ("poisson", "constant"):
        return Check("interarrival", None, None, alpha, f"not run: no test for arrival process '{arrival}'")
    gaps = {"sent_ns": [], "intended_ns": []}
    for host, path in data.traces.items():
        summary = data.summaries.get(host)
        if summary is None:
            continue
        for col in gaps:
            try:
                gaps[col].append(rescaled_gaps(path, summary, col))
            except Exception as e:
                return Check("interarrival", None, None, alpha, f"not run: unreadable trace of {host}: {e}")
    g = {k: np.concatenate(v) if v else np.array([]) for k, v in gaps.items()}
    if len(g["sent_ns"]) < 20:
        return Check(
            "interarrival", None, None, alpha, f"not run: only {len(g['sent_ns'])} inter-send gaps in the window"
        )
    rng = np.random.default_rng(seed)
    m = int(th["gof_max_samples"])
    if arrival == "poisson":
        res = {}
        for col, x in g.items():
            if len(x) < 20:
                continue
            if len(x) > m:
                x = rng.choice(x, m, replace=False)
            ks = stats.kstest(x, "expon")
            res[col] = (float(ks.statistic), float(ks.pvalue), len(x))
        p_sent = res["sent_ns"][1]
        p_int = res.get("intended_ns", (math.nan, math.nan, 0))[1]
        p = min(p_sent, p_int) if not math.isnan(p_int) else p_sent
        msg = (
            f"KS vs exponential of the scheduled rate: actual sends D={res['sent_ns'][0]:.4f} p={p_sent:.3g} "
            f"(n={res['sent_ns'][2]:,})"
            + (f", intended p={p_int:.3g}" if not math.isnan(p_int) else "")
            + f"; reject below {alpha:g}"
        )
        if p < alpha:
            msg += (
                ": the sends are not Poisson at the scheduled rate"
                if p_sent < alpha
                else ": the generator's schedule is not Poisson"
            )
        return Check(
            "interarrival", p >= alpha, p, alpha, msg, {k: {"D": v[0], "p": v[1], "n": v[2]} for k, v in res.items()}
        )
    x = g["sent_ns"]
    mean = float(np.mean(x))
    cv = float(np.std(x) / mean) if mean > 0 else math.inf
    lim = float(th["constant_max_cv"])
    tol = float(th["load_tolerance"])
    ok = cv <= lim and abs(mean - 1.0) <= tol
    msg = (
        f"constant arrivals: gap CV {cv:.3g} (limit {lim:g}), mean gap {mean:.4g} x scheduled "
        f"(tolerance {pct(tol)}), n={len(x):,}"
    )
    return Check("interarrival", ok, cv, lim, msg, {"cv": cv, "mean": mean, "n": len(x)})
