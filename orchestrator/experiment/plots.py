"""Figures of a run, the kinds of the Rain paper's section 5, from summary.parquet
(and timeseries.parquet, and the points' optional worker/switch/agent files).

Every axis is in paper time (loads in kRPS x dilation, latencies in us / dilation),
every figure says so in its caption line together with the testbed kind; repetitions
are combined into their mean with min-max error bars; a marker is hollow when at least
one repetition of that point failed its validity checks. On a measured run, the p99
and p99 slowdown figures draw the model beside each point (model_beside.py) dashed,
in the curve's colour, labelled '<curve> (model)'. Each figure is written as
PNG and SVG to run_dir/plots/. The spec's references (the numbers the paper printed)
are drawn as stars. One module of about 670 lines: every kind shares the context and
the drawing helpers above it, and reads as one page of a figure's anatomy.

Kinds (spec.PLOTS):
  p99_vs_load           p99 latency vs load, one line per curve (Fig. 6, Fig. 1)
  p99_per_class         the same per request class, one panel each (Fig. 7b/c, 8b/c)
  p99_slowdown_vs_load  p99 slowdown vs load with the SLO line (Fig. 7a, 8a)
  queue_depth           worker and switch queue depth vs load (Fig. 9b), and the switch
                        queue over time per load as small multiples
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

from ..errors import UsageError
from . import layout
from .analyze import TIMESERIES_COLUMNS, aggregate, read_summary, read_table, switch_queue_series
from .layout import RunDir
from .points import ALL, experiment_name, spec_of, testbed_kind
from .spec import PLOTS

KINDS = PLOTS
MARKERS = "osD^v<>ph*"


class _Ctx:
    def __init__(self, run_dir: Path):
        import pandas as pd

        self.run_dir = run_dir
        self.manifest = RunDir(run_dir).check().read_manifest()
        self.spec = spec_of(self.manifest)
        self.df = read_summary(run_dir)
        ts = RunDir(run_dir).timeseries
        self.ts = read_table(ts, TIMESERIES_COLUMNS) if ts.exists() else pd.DataFrame()
        self.agg = aggregate(self.df) if not self.df.empty else self.df
        self.experiment = experiment_name(run_dir, self.manifest)
        curves = sorted(self.df["curve"].unique()) if not self.df.empty else []
        self.style = {c: (f"C{i % 10}", MARKERS[i % len(MARKERS)]) for i, c in enumerate(curves)}
        ks = sorted(self.df["dilation"].unique()) if not self.df.empty else []
        self.k = ", ".join(f"{k:g}" for k in ks) or "?"
        self.kind = testbed_kind(self.manifest)
        self.out = RunDir(run_dir).plots
        self.skipped: dict[str, str] = {}
        self.has_model = "model_p99_us_paper" in self.df.columns and bool(self.df["model_p99_us_paper"].notna().any())

    def caption(self) -> str:
        return (
            f"{self.experiment} ({self.run_dir.name}) | testbed: {self.kind} | time dilation k = {self.k}: "
            f"paper time (loads x k, latencies / k) | mean of repetitions, bars min-max | "
            f"hollow marker: failed validity checks"
            + (" | dashed: the model, the same points simulated with this testbed's delays" if self.has_model else "")
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
                tmp = p.with_name(f".{p.name}.tmp")  # an interrupted drawing leaves no torn figure
                fig.savefig(tmp, format=ext, **kw)
                tmp.replace(p)
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


def _model_curves(ctx: _Ctx, ax, agg, col: str, *, x: str = "load_krps") -> list:
    """The model beside the measurement (model_beside.py): per curve, the model's `col`
    dashed in the curve's colour, labelled '<curve> (model)'. Returns the values drawn
    (for the axis' scale); nothing where the run has no model (a simulated run, an
    older one)."""
    drawn: list = []
    if col not in agg.columns:
        return drawn
    for curve, g in agg.groupby("curve", sort=True):
        g = g[g[col].notna()].sort_values(x)
        if g.empty:
            continue
        color, _ = ctx.style.get(curve, ("C0", "o"))
        ax.plot(g[x], g[col], color=color, ls="--", lw=1.2, label=f"{curve} (model)")
        drawn += list(g[col])
    return drawn


def _references(ctx: _Ctx, ax, metric: str, cls: str = ALL) -> list[float]:
    """The numbers the paper printed (the spec's references) for `metric`, as stars in
    their curve's colour at their load: what the paper saw beside what this run saw."""
    refs = [r for r in getattr(ctx.spec, "references", []) if r.metric == metric and r.cls == cls]
    drawn = []
    for r in refs:
        if r.at.krps is not None:
            x = r.at.krps
        else:
            rows = ctx.df[(ctx.df["capacity_fraction"] - r.at.fraction).abs() <= 1e-6]
            if rows.empty:
                continue
            x = float(rows["load_krps"].iloc[0])
        color, _ = ctx.style.get(r.curve, ("0.3", "o"))
        ax.plot([x], [r.value], ls="none", marker="*", ms=10, mfc="none", mec=color, mew=1.2)
        drawn.append(r.value)
    if drawn:
        ax.plot([], [], ls="none", marker="*", ms=10, mfc="none", mec="0.3", label="the paper's number")
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
    model = _model_curves(ctx, ax, agg, "model_p99_us_paper_mean")
    paper = _references(ctx, ax, "p99_us")
    _slo_line(ax, ctx.slo("p99_us"), "SLO p99")
    _scale(ax, list(agg["p99_us_paper_max"]) + model + paper)
    ax.set_xlabel(_load_label(ctx))
    ax.set_ylabel("99% tail latency (us)")
    ax.set_title(ctx.title("p99 vs load"), fontsize=9)
    ax.grid(alpha=0.3)
    _legend(ax, ctx)
    return ctx.save(fig, "p99_vs_load")


def _title(system: str) -> str:
    """A system as its paper names it (its declaration's title), else as given."""
    from ..systems import SYSTEMS

    return SYSTEMS[system].title if system in SYSTEMS else system


def _p99_vs_load_by_variant(ctx: _Ctx) -> list[Path]:
    """p99 against load, one panel per variant (Rakaia's figures: one per connection
    count), every system a curve in the same colour across the panels."""
    agg = ctx.agg[ctx.agg["class"] == ALL].copy()
    if agg.empty or agg["p99_us_paper_mean"].isna().all():
        ctx.skipped["p99_vs_load_by_variant"] = "no latency histograms"
        return []
    split = agg["curve"].str.extract(r"^(?P<system>.*?)(?: \((?P<variant>.*)\))?$")
    agg["curve"], agg["panel"] = split["system"], split["variant"].fillna("")
    order = [v.label or v.name for v in (ctx.spec.variants or [])] if ctx.spec is not None else []
    panels = sorted(dict.fromkeys(agg["panel"]), key=lambda x: order.index(x) if x in order else len(order))
    systems = list(ctx.spec.systems) if ctx.spec is not None else sorted(dict.fromkeys(agg["curve"]))
    agg["curve"] = [_title(c) for c in agg["curve"]]
    systems = [_title(c) for c in systems]
    markers = "osD^vP*X"
    style, ctx.style = ctx.style, {c: (f"C{i % 10}", markers[i % len(markers)]) for i, c in enumerate(systems)}
    try:
        fig, axes = ctx.figure(ncols=len(panels), width=4.4)
        for ax, panel in zip(axes, panels):
            g = agg[agg["panel"] == panel]
            _curves(ctx, ax, g, "p99_us_paper_mean", "p99_us_paper_min", "p99_us_paper_max")
            _slo_line(ax, ctx.slo("p99_us"), "SLO p99")
            ax.set_yscale("log")  # curves an order of magnitude apart: the close ones stay apart
            ax.set_title(panel or ctx.title("p99 vs load"), fontsize=9)
            ax.set_xlabel(_load_label(ctx))
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("99% tail latency (us)")
        _legend(axes[0], ctx)
    finally:
        ctx.style = style
    return ctx.save(fig, "p99_vs_load_by_variant")


def _p99_per_class(ctx: _Ctx) -> list[Path]:
    classes = [c for c in ctx.agg["class"].unique() if c != ALL]
    if not classes:
        ctx.skipped["p99_per_class"] = "no request classes"
        return []
    fig, axes = ctx.figure(ncols=len(classes), width=4.4)
    for ax, cls in zip(axes, classes):
        agg = ctx.agg[ctx.agg["class"] == cls]
        _curves(ctx, ax, agg, "p99_us_paper_mean", "p99_us_paper_min", "p99_us_paper_max")
        model = _model_curves(ctx, ax, agg, "model_p99_us_paper_mean")
        _scale(ax, list(agg["p99_us_paper_max"]) + model)
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
    model = _model_curves(ctx, ax, agg, "model_p99_slowdown_mean")
    slo = ctx.slo("p99_slowdown")
    _slo_line(ax, slo, f"SLO: p99 slowdown {slo:g}" if slo else "")
    _scale(ax, list(agg["p99_slowdown_max"]) + model + ([slo] if slo else []))
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


def _phase_marks(ax, point: dict | None, *, from_window: bool = True) -> None:
    """A time-varying workload's phase starts, as dotted lines labelled with their number
    (ms of paper time from the window's opening, or from the load's start)."""
    if not point:
        return
    k = float(point.get("dilation") or 1.0)
    warm = float(point.get("warmup_s") or 0.0) if from_window else 0.0
    for i, at in enumerate(point.get("phase_at_s") or []):
        x = (float(at) - warm) / k * 1000.0
        if x > 0:
            ax.axvline(x, color="0.5", lw=0.8, ls=":")
            ax.text(x, 1.0, f" {i + 1}", transform=ax.get_xaxis_transform(), fontsize=6, color="0.4", va="top")


def _p99_over_time(ctx: _Ctx) -> list[Path]:
    """p99 per interval of each curve's points (Fig. 10), the workload's phases marked;
    below it, for points that adapt, each slice's workers and mean token quota after
    every control interval (Algorithm 1's decisions), and the tasks waiting in the
    switch's queue, on the same time axis."""
    from .analyze import slices_over_time

    if ctx.ts.empty:
        ctx.skipped["p99_over_time"] = "no per-interval histograms (timeseries.parquet)"
        return []
    ts = ctx.ts[ctx.ts["class"] == ALL]
    firsts = _first_rep(ctx)
    curves = sorted(firsts["curve"].unique())
    if not curves:  # no point has a load (their point.json are damaged)
        ctx.skipped["p99_over_time"] = "no point with a load"
        return []
    rd = RunDir(ctx.run_dir)
    extra: dict[str, tuple] = {}  # curve -> (point, slices over time, switch queue)
    for _, r in firsts.iterrows():
        pdir = rd.point(r["point_id"])
        point = pdir.read_point() or {}
        k = float(r["dilation"]) or 1.0
        warm = float(r["warmup_s"])
        sl = slices_over_time(pdir, point)
        q = [((t - warm) / k, n) for t, n, _ in switch_queue_series(pdir) if t >= warm]
        extra.setdefault(r["curve"], (point, sl, q))
    adapt = any(e[1] for e in extra.values())
    queue = any(e[2] for e in extra.values())
    nrows = 1 + adapt + queue
    width, height = 4.4, 3.4 + 2.2 * (nrows - 1)
    w, h = width * len(curves), height + 0.5
    fig = Figure(figsize=(w, h))
    fig.subplots_adjust(
        left=0.75 / w, right=1 - 0.15 / w, bottom=1.0 / h, top=1 - 0.35 / h, wspace=0.9 / width, hspace=0.45
    )
    grid = fig.subplots(nrows, len(curves), squeeze=False, sharex="col")
    for col, curve in enumerate(curves):
        ax = grid[0][col]
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
                label=("phases, mean " if extra.get(curve, ({},))[0].get("phase_at_s") else "")
                + f"{r['load_krps']:,.4g} kRPS"
                + ("" if r["valid"] else " (invalid)"),
                ls="-" if r["valid"] else ":",
            )
        point, sl, q = extra.get(curve, ({}, [], []))
        _phase_marks(ax, point)
        ax.set_title(curve, fontsize=9)
        ax.set_ylabel("99% tail latency (us)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, frameon=False)
        row = 1
        if adapt:
            _slices_panel(grid[row][col], point, sl)
            row += 1
        if queue:
            _switch_queue_panel_over_time(grid[row][col], point, q)
        grid[nrows - 1][col].set_xlabel("time in the measurement window (ms, paper time)")
    _slo_line(grid[0][0], ctx.slo("p99_us"), "SLO p99")
    return ctx.save(fig, "p99_over_time")


def _slices_panel(ax, point: dict, sl: list) -> None:
    """Each slice's workers and mean token quota after every control interval."""
    slices = sorted({s for _, st in sl for s in st})
    for j, s in enumerate(slices):
        xs = [t * 1000.0 for t, st in sl if s in st]
        for k, lw, ls, what in ((0, 1.2, "-", "workers"), (1, 1.0, "--", "mean quota")):
            ax.step(
                xs,
                [st[s][k] for _, st in sl if s in st],
                where="post",
                color=f"C{j}",
                lw=lw,
                ls=ls,
                label=f"slice {s}: {what}",
            )
    _phase_marks(ax, point)
    ax.set_ylabel("workers / quota")
    ax.grid(alpha=0.3)
    if slices:
        ax.legend(fontsize=6, frameon=False)
    else:
        ax.text(0.5, 0.5, "static: no decisions", transform=ax.transAxes, ha="center", fontsize=7)


def _switch_queue_panel_over_time(ax, point: dict, q: list) -> None:
    """The tasks waiting in the switch over the measurement window."""
    if q:
        ax.plot([t * 1000.0 for t, _ in q], [n for _, n in q], color="0.3", lw=1.0)
    _phase_marks(ax, point)
    ax.set_ylabel("tasks in the switch")
    ax.grid(alpha=0.3)


def _queue_depth(ctx: _Ctx) -> list[Path]:
    """Queue depth against load (Fig. 9b: a worker's queue and its bound, the token
    quota; the switch queue), and below it the switch's queue over the time of each
    load's first repetition, as small multiples on one scale: tasks waiting in the
    switch upwards, tokens waiting for tasks downwards (the bidirectional queue)."""
    agg = ctx.agg[ctx.agg["class"] == ALL]
    firsts = _first_rep(ctx)
    series, points = _switch_queue_of(ctx, firsts)
    has_worker = agg["worker_queue_mean_mean"].notna().any() or agg["mean_quota_mean"].notna().any()
    if not series and not has_worker:
        ctx.skipped["queue_depth"] = (
            f"no switch queue samples (points/<id>/{layout.SWITCH}/{layout.SWITCH_QUEUE}) and no worker "
            f"agent samples (points/<id>/{layout.WORKERS}/<host>/{layout.WORKER_SAMPLES})"
        )
        return []
    curves = sorted(firsts["curve"].unique())
    loads = sorted(firsts["load_krps"].unique())
    rows = [c for c in curves if any((c, x) in series for x in loads)]
    ncols = max(2, len(loads))
    cell_w, top_h, row_h = 2.6, 3.0, 1.9
    w, h = max(10.4, cell_w * ncols), top_h + row_h * len(rows) + 0.9 + (1.0 if rows else 0.0)
    fig = Figure(figsize=(w, h))
    outer = fig.add_gridspec(
        2,
        1,
        height_ratios=[top_h, max(row_h * len(rows), 0.01)],
        hspace=1.0 / ((top_h + row_h * len(rows)) / 2) if rows else 0.0,  # about an inch
        left=0.75 / w,
        right=1 - 0.2 / w,
        bottom=0.95 / h,
        top=1 - 0.45 / h,
    )
    top = outer[0].subgridspec(1, 2, wspace=0.3)
    _worker_queue_panel(ctx, fig.add_subplot(top[0]), agg)
    _switch_queue_panel(ctx, fig.add_subplot(top[1]), agg, bool(series))
    if rows:
        grid = outer[1].subgridspec(len(rows), ncols, wspace=0.12, hspace=0.6)
        _switch_queue_over_time(fig, grid, rows, loads, series, points)
    return ctx.save(fig, "queue_depth")


def _switch_queue_of(ctx: _Ctx, firsts) -> tuple[dict, dict]:
    """(curve, load) -> the switch queue's samples of its first repetition, up to the
    window's end (after it the clients stop sending and wait out their replies), with k,
    warm-up, window and validity; and -> its point.json (a workload's phases are marked)."""
    rd = RunDir(ctx.run_dir)
    series, points = {}, {}
    for _, r in firsts.iterrows():
        warm, measure = float(r["warmup_s"]), float(r["measure_s"])
        s = [x for x in switch_queue_series(rd.point(r["point_id"])) if x[0] <= warm + measure]
        if s:
            series[(r["curve"], r["load_krps"])] = (s, float(r["dilation"]) or 1.0, warm, measure, bool(r["valid"]))
            points[(r["curve"], r["load_krps"])] = rd.point(r["point_id"]).read_point()
    return series, points


def _worker_queue_panel(ctx: _Ctx, ax, agg) -> None:
    """A worker's local queue against load, and its bound (the token quota, dashed)."""
    from matplotlib.ticker import MaxNLocator

    for curve, g in agg.groupby("curve", sort=True):
        g = g.sort_values("load_krps")
        color, marker = ctx.style.get(curve, ("C0", "o"))
        q = g[g["mean_quota_mean"].notna()]
        if not q.empty:
            ax.plot(
                q["load_krps"],
                q["mean_quota_mean"],
                color=color,
                ls="--",
                lw=1.2,
                label=f"{curve}: token quota (bound)",
            )
    _curves(ctx, ax, agg, "worker_queue_mean_mean", "worker_queue_mean_min", "worker_queue_mean_max")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=2))
    ax.set_xlabel(_load_label(ctx))
    ax.set_ylabel("tasks in a worker's queue")
    ax.set_title("worker queue depth vs load (dashed: its bound)", fontsize=9)
    ax.grid(alpha=0.3)
    _legend(ax, ctx)


def _switch_queue_panel(ctx: _Ctx, ax, agg, sampled: bool) -> None:
    """The switch queue against load: its mean, and its max dotted."""
    from matplotlib.ticker import MaxNLocator

    _curves(ctx, ax, agg, "switch_queue_mean_mean", "switch_queue_mean_min", "switch_queue_mean_max")
    for curve, g in agg.groupby("curve", sort=True):
        g = g[g["switch_queue_max_mean"].notna()].sort_values("load_krps")
        if not g.empty:
            color, _ = ctx.style.get(curve, ("C0", "o"))
            ax.plot(g["load_krps"], g["switch_queue_max_mean"], color=color, ls=":", lw=1.2, label=f"{curve}: max")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=2))
    ax.set_xlabel(_load_label(ctx))
    ax.set_ylabel("tasks in the switch queue")
    ax.set_title("switch queue depth vs load (dotted: max)", fontsize=9)
    ax.grid(alpha=0.3)
    if sampled:
        _legend(ax, ctx)
    else:
        ax.text(0.5, 0.5, "no switch queue samples", transform=ax.transAxes, ha="center", color="0.4")


def _switch_queue_over_time(fig, grid, rows: list, loads: list, series: dict, points: dict) -> None:
    """The switch's queue over time, one small panel per load (a row per curve), all on
    the first panel's scale."""
    hi = max(max(t for _, t, _ in s) for s, *_ in series.values())
    lo = max(max(k for _, _, k in s) for s, *_ in series.values())
    log = max(hi, lo) > 50
    first = None
    for i, curve in enumerate(rows):
        for j, load in enumerate(loads):
            ax = fig.add_subplot(grid[i, j], sharey=first, sharex=None)
            first = first or ax
            ax.set_title(f"{load:g} kRPS" + (f", {curve}" if len(rows) > 1 else ""), fontsize=8)
            ax.tick_params(labelsize=7)
            got = series.get((curve, load))
            if got is None:
                ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", fontsize=7, color="0.4")
                continue
            _switch_queue_cell(ax, got, points.get((curve, load)))
            if j == 0:
                ax.set_ylabel("switch queue\n(tasks up, tokens down" + (", log)" if log else ")"), fontsize=7)
            else:
                ax.tick_params(labelleft=False)
            if i == len(rows) - 1:
                ax.set_xlabel("ms since the load started (paper time)", fontsize=7)
            ax.grid(alpha=0.25)
    _switch_queue_scale(first, hi, lo)


def _switch_queue_cell(ax, got: tuple, point: dict | None) -> None:
    """One load's switch queue over time: tasks waiting up, tokens waiting down, the
    warm-up shaded and the window's largest queue written."""
    s, k, warm, measure, valid = got
    t = [x / k * 1000.0 for x, _, _ in s]
    end = (warm + measure) / k * 1000.0
    ax.fill_between(t, [v for _, v, _ in s], step="post", color="C3", alpha=0.75, lw=0, label="tasks waiting")
    ax.fill_between(t, [-v for _, _, v in s], step="post", color="C0", alpha=0.45, lw=0, label="tokens waiting")
    ax.axvspan(0, warm / k * 1000.0, color="0.9", lw=0, label="warm-up", zorder=0)
    _phase_marks(ax, point, from_window=False)
    ax.axhline(0, color="0.2", lw=0.6)
    ax.set_xlim(max(min(t[0], 0.0), -0.25 * end), end)  # a little of before the start
    in_window = [v for x, v, _ in s if x >= warm]
    if in_window:
        most = max(in_window)
        ax.text(
            0.98,
            0.95,
            f"window max: {most} task{'s' if most != 1 else ''}",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7,
            color="0.25",
        )
    if not valid:
        ax.set_title(ax.get_title() + " (invalid)", fontsize=8, color="0.4")


def _switch_queue_scale(first, hi: float, lo: float) -> None:
    """The shared scale: tasks up to `hi`, tokens down to `lo`; log beyond 1 when a queue
    of thousands sits next to a few tokens, so both stay readable."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    if max(hi, lo) > 50:
        first.set_yscale("symlog", linthresh=1.0, linscale=0.5)
        first.set_ylim(-max(lo, 1) * 1.5, hi * 4)
        ticks = [-t for t in (lo, 1) if t >= 1] + [0] + [10**i for i in range(len(str(int(hi))) + 1)]
        first.yaxis.set_major_locator(FixedLocator(sorted(set(ticks))))
        first.yaxis.set_minor_locator(FixedLocator([]))
    else:
        first.set_ylim(-max(lo, 1) * 1.1, max(hi, 1) * 1.35)  # room for the window max
        first.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=3))
    first.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{abs(v):g}"))
    first.legend(fontsize=6, frameon=False, loc="upper left")


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
        f"no switch event counters (points/<id>/{layout.SWITCH}/{layout.SNAPSHOT})",
    )


def _quota_vs_load(ctx: _Ctx) -> list[Path]:
    return _per_point_metric(
        ctx,
        "quota_vs_load",
        "mean_quota",
        "worker queue depth (mean token quota)",
        "token quota vs load",
        f"no worker agent samples or decisions (points/<id>/{layout.WORKERS}/<host>/{layout.WORKER_SAMPLES}, "
        f"{layout.DECISIONS})",
    )


_KIND_FN = {
    "p99_vs_load": _p99_vs_load,
    "p99_vs_load_by_variant": _p99_vs_load_by_variant,
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
    unknown = [k for k in kinds or () if k not in _KIND_FN]
    if unknown:
        raise UsageError(f"unknown plot kind(s) {', '.join(unknown)}", fix=f"use one of {', '.join(KINDS)}")
    ctx = _Ctx(run_dir)
    if kinds is None:
        kinds = ctx.spec.plots if ctx.spec is not None else KINDS
    kinds = list(kinds)
    files: list[Path] = []
    if ctx.df.empty:
        ctx.skipped.update({k: "no analysed points" for k in kinds})
    else:
        for k in kinds:
            files += _KIND_FN[k](ctx)
    if skipped is not None:
        skipped.update(ctx.skipped)
    return files
