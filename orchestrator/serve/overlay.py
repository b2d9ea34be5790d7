"""Runs of one spec overlaid, as `rainmaker compare` draws them (simulate/compare.py:
its reading of the runs, their curves labelled by testbed kind, and its drawing),
rendered to a PNG in memory instead of files. Only analysed runs are drawn: a run
without summary.parquet is named as such, never analysed here (that would write
into it)."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RainmakerError
from ..experiment.layout import RunDir


@dataclass
class Overlay:
    kinds: list[str] = field(default_factory=list)  # the kinds the runs' spec draws
    kind: str | None = None
    curves: list[str] = field(default_factory=list)  # the legend's labels
    drawn: list[str] = field(default_factory=list)  # the runs in the figure
    png: bytes | None = None
    problems: list[str] = field(default_factory=list)


_cache: dict[tuple, Overlay] = {}
_lock = threading.Lock()


def _signature(paths: list[Path], kind: str | None) -> tuple:
    sig = []
    for p in paths:
        for f in (RunDir(p).summary, RunDir(p).manifest):
            try:
                st = f.stat()
                sig.append((str(f), st.st_mtime_ns, st.st_size))
            except OSError:
                sig.append((str(f), None, None))
    return (tuple(sig), kind)


def overlay(paths: list[Path], names: list[str], kind: str | None = None) -> Overlay:
    """The overlay of the runs at `paths` (named `names` on the page) for one plot
    kind (default: the first the spec lists, as compare draws them)."""
    key = _signature(paths, kind)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    out = _draw(paths, names, kind)
    with _lock:
        if len(_cache) > 64:
            _cache.clear()
        _cache[key] = out
    return out


def _draw(paths: list[Path], names: list[str], kind: str | None) -> Overlay:
    import pandas as pd

    from ..experiment.points import spec_of
    from ..simulate import compare

    out = Overlay()
    ready, ready_names = [], []
    for p, n in zip(paths, names):
        if RunDir(p).summary.is_file():
            ready.append(p)
            ready_names.append(n)
        else:
            out.problems.append(f"{n}: not analysed (no summary.parquet), so not drawn")
    if not ready:
        out.problems.append("no analysed run to draw")
        return out
    try:
        runs = compare.load_runs(ready, force=False)  # each has its summary: read, never analysed
    except RainmakerError as e:
        out.problems.append(e.message)
        return out
    with_rows = [(r, n) for r, n in zip(runs, ready_names) if len(r.agg)]
    out.problems += [f"{n}: its summary has no points" for r, n in zip(runs, ready_names) if not len(r.agg)]
    if not with_rows:
        return out
    agg = pd.concat([r.agg for r, _ in with_rows], ignore_index=True)
    spec = next((s for s in (spec_of(r.manifest) for r in runs) if s is not None), None)
    out.kinds = [k for k in (spec.plots if spec else []) if k in compare.KINDS] or ["p99_vs_load"]
    out.kind = kind if kind in compare.KINDS else out.kinds[0]
    curves = sorted(agg["curve"].unique())
    ctx = compare._Style({c: (f"C{i % 10}", compare.MARKERS[i % len(compare.MARKERS)]) for i, c in enumerate(curves)})
    title = runs[0].experiment + (f" (Fig. {spec.figure})" if spec and spec.figure else "")
    fig = compare._draw(out.kind, ctx, agg, spec, title)
    if fig is None:
        out.problems.append(f"nothing to draw for {out.kind} in these runs")
        return out
    caption = " | ".join(f"{n}: {r.kind}" for r, n in with_rows) + " | paper time | mean of repetitions, bars min-max"
    fig.text(0.01, 0.01, caption, fontsize=5.5, color="0.35", ha="left", va="bottom", wrap=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    out.png, out.curves, out.drawn = buf.getvalue(), [str(c) for c in curves], [n for _, n in with_rows]
    return out
