"""`rainmaker compare RUN_DIR...`: runs of one spec on different testbeds (simulated,
emulated, hardware) overlaid, one figure per plot type, in paper time.

Each run is read as the plots read it (summary.parquet, analysing it first if it was
not); each curve is labelled `<curve> (<testbed kind>)` (with the run's name when two
runs share a kind); repetitions are combined into their mean with min-max bars, and a
marker is filled when every repetition was valid and hollow when not (plots.py's
drawing). Kinds: p99_vs_load, p99_slowdown_vs_load, p99_per_class and queue_depth
(the queue depths against load), those the first run's spec lists or, without
any of them there, p99_vs_load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure

from ..errors import UsageError
from ..experiment.analyze import aggregate, read_summary
from ..experiment.layout import RunDir
from ..experiment.plots import MARKERS, _curves, _legend, _scale, _slo_line
from ..experiment.points import ALL, experiment_name, spec_of, testbed_kind

KINDS = ("p99_vs_load", "p99_slowdown_vs_load", "p99_per_class", "queue_depth")


@dataclass
class Run:
    path: Path
    experiment: str
    kind: str
    manifest: dict
    agg: object  # pandas DataFrame: aggregate() of its summary, curves relabelled


@dataclass
class _Style:
    """What plots._curves needs of its context: a colour and marker per curve."""

    style: dict = field(default_factory=dict)


def load_runs(paths: list[Path], force: bool) -> list[Run]:
    runs = []
    for p in paths:
        rd = RunDir(p).check()
        m = rd.read_manifest()
        df = read_summary(rd.path)
        runs.append(Run(rd.path, experiment_name(rd.path, m), testbed_kind(m), m, aggregate(df) if len(df) else df))
    names = {r.experiment for r in runs}
    if len(names) > 1 and not force:
        first = runs[0]
        other = next(r for r in runs if r.experiment != first.experiment)
        raise UsageError(
            f"{first.path} is a run of {first.experiment!r} and {other.path} one of {other.experiment!r}: "
            "their curves are not of one spec",
            fix="compare runs of one experiment, or pass --force to overlay them all the same",
        )
    kinds = [r.kind for r in runs]
    names = [r.path.name for r in runs]
    for i, r in enumerate(runs):
        if len(r.agg) == 0:
            continue
        tag = r.kind if kinds.count(r.kind) == 1 else f"{r.kind}, {r.path.name}"
        if kinds.count(r.kind) > 1 and names.count(r.path.name) > 1:
            tag += f" #{i + 1}"  # two runs of one name (from two results folders)
        r.agg = r.agg.assign(curve=r.agg["curve"].astype(str) + f" ({tag})")
    return runs


def compare(paths: list[Path], *, out: Path | None = None, force: bool = False) -> list[Path]:
    """Draw the comparison figures (PNG and SVG) into `out` (default:
    <results>/compare/<experiment>/<timestamp>/ next to the first run's experiment
    folder) and return the files written."""
    import pandas as pd

    if not paths:
        raise UsageError("no run to compare", fix="give two or more run folders")
    runs = load_runs(paths, force)
    runs_with = [r for r in runs if len(r.agg)]
    if not runs_with:
        raise UsageError("none of the runs has an analysed point", fix="run `rainmaker analyze RUN_DIR` on them")
    agg = pd.concat([r.agg for r in runs_with], ignore_index=True)
    spec = next((s for s in (spec_of(r.manifest) for r in runs) if s is not None), None)
    wanted = [k for k in (spec.plots if spec else []) if k in KINDS] or ["p99_vs_load"]
    if out is None:
        out = runs[0].path.parent.parent / "compare" / runs[0].experiment / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    ctx = _Style({c: (f"C{i % 10}", MARKERS[i % len(MARKERS)]) for i, c in enumerate(sorted(agg["curve"].unique()))})
    caption = " | ".join(f"{r.path.name}: {r.kind}" for r in runs) + (
        " | paper time (loads x k, latencies / k) | mean of repetitions, bars min-max | hollow: failed validity checks"
    )
    title = f"{runs[0].experiment}" + (f" (Fig. {spec.figure})" if spec and spec.figure else "")
    files: list[Path] = []
    for kind in wanted:
        fig = _draw(kind, ctx, agg, spec, title)
        if fig is not None:
            files += _save(fig, out / kind, caption)
    return files


def _axes(ncols: int = 1, width: float = 5.6, height: float = 4.0):
    w, h = width * ncols, height + 0.5
    fig = Figure(figsize=(w, h))
    fig.subplots_adjust(left=0.75 / w, right=1 - 0.15 / w, bottom=1.0 / h, top=1 - 0.35 / h, wspace=0.9 / width)
    return fig, list(fig.subplots(1, ncols, squeeze=False)[0])


def _slo(spec, key: str):
    return getattr(spec.slo, key) if spec is not None and spec.slo is not None else None


def _draw(kind: str, ctx: _Style, agg, spec, title: str) -> Figure | None:
    load = "offered load (kRPS, paper time)"
    if kind in ("p99_vs_load", "p99_slowdown_vs_load"):
        a = agg[agg["class"] == ALL]
        col, ylabel = (
            ("p99_us_paper", "99% tail latency (us)")
            if kind == "p99_vs_load"
            else ("p99_slowdown", "99% tail slowdown")
        )
        fig, (ax,) = _axes()
        if not _curves(ctx, ax, a, f"{col}_mean", f"{col}_min", f"{col}_max"):
            return None
        slo = _slo(spec, "p99_us" if kind == "p99_vs_load" else "p99_slowdown")
        _slo_line(ax, slo, "SLO")
        _scale(ax, list(a[f"{col}_max"]) + ([slo] if slo else []))
        ax.set_xlabel(load)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {kind.replace('_', ' ')} by testbed", fontsize=9)
        ax.grid(alpha=0.3)
        _legend(ax, ctx)
        return fig
    if kind == "p99_per_class":
        classes = [c for c in agg["class"].unique() if c != ALL]
        if not classes:
            return None
        fig, axes = _axes(len(classes), width=4.6)
        for ax, cls in zip(axes, classes):
            a = agg[agg["class"] == cls]
            _curves(ctx, ax, a, "p99_us_paper_mean", "p99_us_paper_min", "p99_us_paper_max")
            _scale(ax, a["p99_us_paper_max"])
            ax.set_title(f"{cls}: 99% tail latency by testbed", fontsize=9)
            ax.set_xlabel(load)
            ax.set_ylabel("99% tail latency (us)")
            ax.grid(alpha=0.3)
        _legend(axes[0], ctx)
        return fig
    # queue_depth: a worker's queue and the switch queue against load
    a = agg[agg["class"] == ALL]
    fig, (aw, asw) = _axes(2)
    drawn = _curves(ctx, aw, a, "worker_queue_mean_mean", "worker_queue_mean_min", "worker_queue_mean_max")
    drawn |= _curves(ctx, asw, a, "switch_queue_mean_mean", "switch_queue_mean_min", "switch_queue_mean_max")
    if not drawn:
        return None
    for ax, what in ((aw, "tasks in a worker's queue"), (asw, "tasks in the switch queue")):
        ax.set_ylim(bottom=0)
        ax.set_xlabel(load)
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        _legend(ax, ctx)
    aw.set_title(f"{title}: worker queue depth by testbed", fontsize=9)
    asw.set_title("switch queue depth (mean) by testbed", fontsize=9)
    return fig


def _save(fig: Figure, base: Path, caption: str) -> list[Path]:
    fig.text(0.01, 0.01, caption, fontsize=5.5, color="0.35", ha="left", va="bottom", wrap=True)
    files = []
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "rainmaker"}):
        for ext, kw in (("png", {"dpi": 120}), ("svg", {"metadata": {"Date": None}})):
            p = base.with_suffix(f".{ext}")
            tmp = p.with_name(f".{p.name}.tmp")
            fig.savefig(tmp, format=ext, **kw)
            tmp.replace(p)
            files.append(p)
    return files
