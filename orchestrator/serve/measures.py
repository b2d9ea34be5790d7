"""A point's p99 and the p99 of the model beside it, in paper time, as the validity
check `model_agreement` computes them (the clients' merged latency logs over k; the
model's own, already in paper time); cached on the logs' modification times, since
merging a long window's interval logs is the costly part of a page."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ..experiment.layout import CLIENTS, LATENCY_HLOG, MODEL, MODEL_INFO, PointDir
from ..experiment.points import ALL, load_model, load_point, read_model_info


@dataclass(frozen=True)
class PointP99:
    p99_us: float | None  # paper time, all classes; None: no latency logged (yet)
    requests: int
    model_p99_us: float | None  # None: no model beside the point, or it failed
    model_note: str  # why there is no model p99, or the model's network
    problems: tuple[str, ...]

    @property
    def ratio(self) -> float | None:
        if self.p99_us is None or not self.model_p99_us:
            return None
        return self.p99_us / self.model_p99_us


def _signature(pd: PointDir) -> tuple:
    files = []
    for base in (pd.path, pd.model):
        try:
            with os.scandir(base / CLIENTS) as it:
                files += [Path(e.path) / LATENCY_HLOG for e in it if e.is_dir()]
        except OSError:
            pass
    files.append(pd.model / MODEL_INFO)
    out = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(f), None, None))
    return tuple(out)


_cache: dict[Path, tuple[tuple, PointP99]] = {}
_lock = threading.Lock()


def p99_of(pd: PointDir, *, model: bool = True) -> PointP99:
    """The point's (or segment's) p99 and its model's; never raises on bad files."""
    sig = _signature(pd) + (model,)
    with _lock:
        hit = _cache.get(pd.path)
    if hit is not None and hit[0] == sig:
        return hit[1]
    value = _compute(pd, model)
    with _lock:
        _cache[pd.path] = (sig, value)
    return value


def _compute(pd: PointDir, model: bool) -> PointP99:
    from ..experiment.model_beside import network_text

    data = load_point(pd)
    h = data.latency.get(ALL)
    p99 = None
    if h is not None and h.total:
        k = data.dilation
        p99 = h.percentile(99.0) / 1000.0 / (k if k > 0 and not math.isnan(k) else 1.0)
    requests = int(h.total) if h is not None else 0
    m_p99, note = None, ""
    if model:
        info = read_model_info(pd)
        if info is None:
            note = f"no model beside the point ({MODEL}/{MODEL_INFO}): computed when the point ends"
        elif info.get("error"):
            note = f"the model could not be computed: {info['error']}"
        else:
            try:
                md = load_model(pd)
            except Exception as e:  # a damaged model folder: said, not raised
                md, note = None, f"the model's files are unreadable: {e}"
            mh = md.latency.get(ALL) if md is not None else None
            if mh is not None and mh.total:
                m_p99 = mh.percentile(99.0) / 1000.0
                note = network_text(info)
            elif not note:
                note = f"the model has no latency histograms ({MODEL}/)"
    return PointP99(p99, requests, m_p99, note, tuple(data.problems))
