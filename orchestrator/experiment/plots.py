"""Figures of a run, the kinds of the Rain paper's section 5, from summary.parquet
(and timeseries.parquet, and the points' optional worker/switch/agent files).

Every axis is in paper time (loads in kRPS x dilation, latencies in us / dilation),
every figure says so in its caption line together with the testbed kind; repetitions
are combined into their mean with min-max error bars; a marker is hollow when at least
one repetition of that point failed its validity checks. Each figure is written as
PNG and SVG to run_dir/plots/.

Kinds (spec.PLOTS):
  p99_vs_load           p99 latency vs load, one line per curve (Fig. 6, Fig. 1)
  p99_per_class         the same per request class, one panel each (Fig. 7b/c, 8b/c)
  p99_slowdown_vs_load  p99 slowdown vs load with the SLO line (Fig. 7a, 8a)
  queue_depth           worker FIFO / switch queue depth over time (periodic stats)
  p99_over_time         p99 per interval of the measurement window (Fig. 10)
  queuing_ratio         tasks dispatched from the switch queue / all dispatched (Fig. 11)
  quota_vs_load         mean token quota (worker queue depth) vs load (Fig. 9b)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .analyze import (
    ALL,
    aggregate,
    experiment_name,
    point_dirs,
    read_manifest,
    read_summary,
    spec_of,
    switch_queue_series,
    switch_snapshot,
    testbed_kind,
    worker_queue_series,
)
from .spec import PLOTS

KINDS = PLOTS
MARKERS = "osD^v<>ph*"


class _Ctx:
    def __init__(self, run_dir: Path):
        import pandas as pd

        self.run_dir = run_dir
        self.manifest = read_manifest(run_dir)
        self.spec = spec_of(self.manifest)
        self.df = read_summary(run_dir)
        ts = run_dir / "timeseries.parquet"
        self.ts = pd.read_parquet(ts) if ts.exists() else pd.DataFrame()
        self.agg = aggregate(self.df) if not self.df.empty else self.df
        self.experiment = experiment_name(run_dir, self.manifest)
        curves = sorted(self.df["curve"].unique()) if not self.df.empty else []
        self.style = {c: (f"C{i % 10}", MARKERS[i % len(MARKERS)]) for i, c in enumerate(curves)}
        ks = sorted(self.df["dilation"].unique()) if not self.df.empty else []
        self.k = ", ".join(f"{k:g}" for k in ks) or "?"
        self.kind = testbed_kind(self.manifest)
        self.out = run_dir / "plots"
        self.skipped: dict[str, str] = {}

    def caption(self) -> str:
        return (
            f"{self.experiment} ({self.run_dir.name}) | testbed: {self.kind} | time dilation k = {self.k}: "
            f"paper time (loads x k, latencies / k) | mean of repetitions, bars min-max | "
            f"hollow marker: failed validity checks"
        )

    def figure(self, ncols: int = 1, width: float = 5.2, height: float = 3.8):
        w, h = width * ncols, height + 0.5
        fig = Figure(figsize=(w, h))
        # fixed margins (constrained layout costs more than the drawing); room at the
        # bottom for the caption line
        fig.subplots_adjust(left=0.75 / w, right=1 - 0.15 / w, bottom=1.0 / h, top=1 - 0.35 / h, wspace=0.9 / width)
        axes = fig.subplots(1, ncols, squeeze=False)[0]
        return fig, list(axes)

    def save(self, fig: Figure, name: str) -> list[Path]:
        self.out.mkdir(parents=True, exist_ok=True)
        fig.text(0.01, 0.01, self.caption(), fontsize=5.5, color="0.35", ha="left", va="bottom", wrap=True)
        files = []
        # SVG text stays text (editable, searchable); no date, so reruns are byte-stable
        with rc_context({"svg.fonttype": "none", "svg.hashsalt": "rainmaker"}):
            for ext, kw in (("png", {"dpi": 120}), ("svg", {"metadata": {"Date": None}})):
                p = self.out / f"{name}.{ext}"
                fig.savefig(p, **kw)
                files.append(p)
        return files

    def title(self, what: str) -> str:
        fig = self.spec.figure if self.spec is not None else None
        return f"{self.experiment} (Fig. {fig}): {what}" if fig else f"{self.experiment}: {what}"

    def slo(self, key: str) -> float | None:
        if self.spec is None or self.spec.slo is None:
            return None
        return getattr(self.spec.slo, key)


def _curves(ctx: _Ctx, ax, agg, mean: str, lo: str, hi: str, *, x: str = "load_krps") -> bool:
    """One line per curve: means, min-max bars, hollow markers where not all valid."""
    drawn = False
    for curve, g in agg.groupby("curve", sort=True):
        g = g.sort_values(x)
        g = g[g[mean].notna()]
        if g.empty:
            continue
        color, marker = ctx.style.get(curve, ("C0", "o"))
        xs, ys = g[x].to_numpy(), g[mean].to_numpy()
        err = [ys - g[lo].to_numpy(), g[hi].to_numpy() - ys]
        ax.errorbar(xs, ys, yerr=err, color=color, fmt="none", capsize=2.5, lw=0.9)
        ax.plot(xs, ys, color=color, lw=1.4, label=curve)
        valid = g["all_valid"].to_numpy().astype(bool)
        ax.plot(xs[valid], ys[valid], ls="none", marker=marker, color=color, ms=5)
        ax.plot(xs[~valid], ys[~valid], ls="none", marker=marker, ms=6, mfc="white", mec=color, mew=1.3)
        drawn = True
    return drawn


def _scale(ax, values) -> None:
    v = [x for x in values if x is not None and not math.isnan(x) and x > 0]
    if v and max(v) / min(v) > 30:
        ax.set_yscale("log")


def _legend(ax, ctx: _Ctx) -> None:
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], ls="none", marker="o", mfc="white", mec="0.3", color="0.3"))
    labels.append("invalid (hollow)")
    ax.legend(handles, labels, fontsize=7, frameon=False)


def _slo_line(ax, value: float | None, label: str) -> None:
    if value is not None:
        ax.axhline(value, color="0.2", ls="--", lw=1)
        ax.annotate(label, xy=(0.01, value), xycoords=("axes fraction", "data"), fontsize=7, va="bottom")


def _load_label(ctx: _Ctx) -> str:
    return "offered load (kRPS, paper time)"


# -- the kinds -----------------------------------------------------------------------------


def _p99_vs_load(ctx: _Ctx) -> list[Path]:
    agg = ctx.agg[ctx.agg["class"] == ALL]
    fig, (ax,) = ctx.figure()
    if not _curves(ctx, ax, agg, "p99_us_paper_mean", "p99_us_paper_min", "p99_us_paper_max"):
        ctx.skipped["p99_vs_load"] = "no latency histograms"
        return []
    _slo_line(ax, ctx.slo("p99_us"), "SLO p99")
    _scale(ax, agg["p99_us_paper_max"])
    ax.set_xlabel(_load_label(ctx))
    ax.set_ylabel("99% tail latency (us)")
    ax.set_title(ctx.title("p99 vs load"), fontsize=9)
    ax.grid(alpha=0.3)
    _legend(ax, ctx)
    return ctx.save(fig, "p99_vs_load")


def _p99_per_class(ctx: _Ctx) -> list[Path]:
    classes = [c for c in ctx.agg["class"].unique() if c != ALL]
    if not classes:
        ctx.skipped["p99_per_class"] = "no request classes"
        return []
    fig, axes = ctx.figure(ncols=len(classes), width=4.4)
    for ax, cls in zip(axes, classes):
        agg = ctx.agg[ctx.agg["class"] == cls]
        _curves(ctx, ax, agg, "p99_us_paper_mean", "p99_us_paper_min", "p99_us_paper_max")
        _scale(ax, agg["p99_us_paper_max"])
        ax.set_title(f"{cls}: 99% tail latency", fontsize=9)
        ax.set_xlabel(_load_label(ctx))
        ax.set_ylabel("99% tail latency (us)")
        ax.grid(alpha=0.3)
    _slo_line(axes[0], ctx.slo("p99_us"), "SLO p99")
    _legend(axes[0], ctx)
    return ctx.save(fig, "p99_per_class")


def _p99_slowdown_vs_load(ctx: _Ctx) -> list[Path]:
    agg = ctx.agg[ctx.agg["class"] == ALL]
    fig, (ax,) = ctx.figure()
    if not _curves(ctx, ax, agg, "p99_slowdown_mean", "p99_slowdown_min", "p99_slowdown_max"):
        ctx.skipped["p99_slowdown_vs_load"] = "no slowdown histograms"
        return []
    slo = ctx.slo("p99_slowdown")
    _slo_line(ax, slo, f"SLO: p99 slowdown {slo:g}" if slo else "")
    _scale(ax, list(agg["p99_slowdown_max"]) + ([slo] if slo else []))
    ax.set_xlabel(_load_label(ctx))
    ax.set_ylabel("99% tail slowdown")
    ax.set_title(ctx.title("p99 slowdown vs load"), fontsize=9)
    ax.grid(alpha=0.3)
    _legend(ax, ctx)
    return ctx.save(fig, "p99_slowdown_vs_load")


def _first_rep(ctx: _Ctx):
    """(curve, load, point_id, dilation) of the first repetition of each point."""
    d = ctx.df[ctx.df["class"] == ALL].sort_values(["curve", "load_krps", "repetition"])
    return d.groupby(["curve", "load_krps"], sort=True).first().reset_index()


def _p99_over_time(ctx: _Ctx) -> list[Path]:
    if ctx.ts.empty:
        ctx.skipped["p99_over_time"] = "no per-interval histograms (timeseries.parquet)"
        return []
    ts = ctx.ts[ctx.ts["class"] == ALL]
    firsts = _first_rep(ctx)
    curves = sorted(firsts["curve"].unique())
    fig, axes = ctx.figure(ncols=len(curves), width=4.4)
    for ax, curve in zip(axes, curves):
        rows = firsts[firsts["curve"] == curve]
        for i, (_, r) in enumerate(rows.iterrows()):
            s = ts[ts["point_id"] == r["point_id"]].sort_values("t_s")
            if s.empty:
                continue
            ax.plot(
                s["t_s_paper"] * 1000.0,
                s["p99_us_paper"],
                marker=".",
                ms=3,
                lw=1.1,
                color=f"C{i % 10}",
                label=f"{r['load_krps']:g} kRPS" + ("" if r["valid"] else " (invalid)"),
                ls="-" if r["valid"] else ":",
            )
        ax.set_title(curve, fontsize=9)
        ax.set_xlabel("time in the measurement window (ms, paper time)")
        ax.set_ylabel("99% tail latency (us)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, frameon=False)
    _slo_line(axes[0], ctx.slo("p99_us"), "SLO p99")
    return ctx.save(fig, "p99_over_time")


def _queue_depth(ctx: _Ctx) -> list[Path]:
    firsts = _first_rep(ctx)
    by_id = {d.name: d for d in point_dirs(ctx.run_dir)}
    series = []
    for _, r in firsts.iterrows():
        d = by_id.get(r["point_id"])
        if d is None:
            continue
        k = float(r["dilation"]) or 1.0
        for host, s in worker_queue_series(d).items():
            series.append((r["curve"], f"{r['load_krps']:g} kRPS, {host} FIFOs", s, k, "-"))
        sw = switch_queue_series(switch_snapshot(d))
        if len(sw) > 1:
            series.append((r["curve"], f"{r['load_krps']:g} kRPS, switch queue", sw, k, "--"))
    if not series:
        ctx.skipped["queue_depth"] = "no periodic worker stats (workers/<host>/stats.jsonl) or timed switch snapshots"
        return []
    curves = sorted({s[0] for s in series})
    fig, axes = ctx.figure(ncols=len(curves), width=4.4)
    for ax, curve in zip(axes, curves):
        for i, (_, label, s, k, ls) in enumerate(x for x in series if x[0] == curve):
            t0 = s[0][0]
            ax.step(
                [(t - t0) / k * 1000.0 for t, _ in s],
                [v for _, v in s],
                where="post",
                ls=ls,
                color=f"C{i % 10}",
                lw=1.1,
                label=label,
            )
        ax.set_title(curve, fontsize=9)
        ax.set_xlabel("time (ms, paper time)")
        ax.set_ylabel("queued tasks")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, frameon=False)
    return ctx.save(fig, "queue_depth")


def _per_point_metric(ctx: _Ctx, kind: str, col: str, ylabel: str, title: str, missing: str) -> list[Path]:
    agg = ctx.agg[ctx.agg["class"] == ALL]
    if agg.empty or agg[f"{col}_mean"].notna().sum() == 0:
        ctx.skipped[kind] = missing
        return []
    fig, (ax,) = ctx.figure()
    _curves(ctx, ax, agg, f"{col}_mean", f"{col}_min", f"{col}_max")
    ax.set_xlabel(_load_label(ctx))
    ax.set_ylabel(ylabel)
    ax.set_title(ctx.title(title), fontsize=9)
    ax.grid(alpha=0.3)
    _legend(ax, ctx)
    return ctx.save(fig, kind)


def _queuing_ratio(ctx: _Ctx) -> list[Path]:
    return _per_point_metric(
        ctx,
        "queuing_ratio",
        "queuing_ratio",
        "on-switch queuing ratio",
        "tasks dispatched from the switch queue / all dispatched",
        "no switch event counters (switch/snapshot.json)",
    )


def _quota_vs_load(ctx: _Ctx) -> list[Path]:
    return _per_point_metric(
        ctx,
        "quota_vs_load",
        "mean_quota",
        "worker queue depth (mean token quota)",
        "token quota vs load",
        "no agent decisions (agent/<host>/decisions.jsonl)",
    )


_KIND_FN = {
    "p99_vs_load": _p99_vs_load,
    "p99_per_class": _p99_per_class,
    "p99_slowdown_vs_load": _p99_slowdown_vs_load,
    "queue_depth": _queue_depth,
    "p99_over_time": _p99_over_time,
    "queuing_ratio": _queuing_ratio,
    "quota_vs_load": _quota_vs_load,
}


def plot(run_dir: str | Path, kinds: Iterable[str] | None = None, *, skipped: dict | None = None) -> list[Path]:
    """Draw the figures of `kinds` (default: the spec's `plots`, or every kind without
    a spec) into run_dir/plots/ and return the files written (PNG and SVG of each).
    A kind whose inputs the run lacks is skipped; `skipped`, if given, receives
    {kind: reason}."""
    run_dir = Path(run_dir)
    ctx = _Ctx(run_dir)
    if kinds is None:
        kinds = ctx.spec.plots if ctx.spec is not None else KINDS
    kinds = list(kinds)
    unknown = [k for k in kinds if k not in _KIND_FN]
    if unknown:
        raise ValueError(f"unknown plot kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    files: list[Path] = []
    if ctx.df.empty:
        ctx.skipped.update({k: "no analysed points" for k in kinds})
    else:
        for k in kinds:
            files += _KIND_FN[k](ctx)
    if skipped is not None:
        skipped.update(ctx.skipped)
    return files
