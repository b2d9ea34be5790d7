"""Reading a run folder's points: one point's data as analysis, validity and the model
beside it read it (its merged histograms, counters and summaries, typed and checked),
the identity of the run it belongs to, and the model point beside a measured one. Pure
reading of the files layout.py defines: nothing here judges, models or draws."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from . import layout
from .histograms import Cube, Hist, merge_logs, read_hlog
from .layout import PointDir

_NUMBER, _TEXT = (int, float), (str, type(None))
ALL = "all"


# rain-client counters (report.c, json_counters): summed across hosts, except these
_MAX_KEYS = {"max_lag_ns"}


_SKIP_KEYS = {
    "mean_service_ns",
    "mean_keys",
    "latency_ns",
    "slowdown",
    "task_type",
    "weight",
    "payload",
    "service",
    "mean_service_ns_expected",
}


@dataclass
class PointData:
    """Everything a point directory holds, merged across client hosts."""

    dir: Path
    point: dict
    hosts: list[str] = field(default_factory=list)
    summaries: dict[str, dict] = field(default_factory=dict)
    latency: dict[str, Hist] = field(default_factory=dict)  # class (and 'all') -> whole window, ns
    slowdown: dict[str, Hist] = field(default_factory=dict)  # the same, slowdown x 1000
    latency_cube: Cube | None = None  # per class and interval
    slowdown_cube: Cube | None = None
    traces: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # missing or unreadable files

    @property
    def id(self) -> str:
        return str(self.point.get("id", self.dir.name))

    @property
    def dilation(self) -> float:
        k = number(self.point.get("dilation"))
        if math.isnan(k):
            ks = [number(s.get("dilation")) for s in self.summaries.values()]
            k = next((x for x in ks if x > 0), 1.0)
        return k

    @property
    def classes(self) -> list[str]:
        names: dict[str, None] = {}
        for s in self.summaries.values():
            for c in s.get("classes", {}):
                names.setdefault(c, None)
        for c in self.latency:
            if c != ALL:
                names.setdefault(c, None)
        return list(names)

    @property
    def partial(self) -> bool:
        return any(bool(s.get("partial")) for s in self.summaries.values())

    def counters(self, cls: str = ALL) -> dict[str, float]:
        """rain-client's counters for a class (or the totals), merged across hosts."""
        out: dict[str, float] = {}
        svc_weighted = 0.0
        for s in self.summaries.values():
            c = s.get("totals", {}) if cls == ALL else s.get("classes", {}).get(cls, {})
            for k, v in c.items():
                if k in _SKIP_KEYS or not isinstance(v, (int, float)) or isinstance(v, bool):
                    continue
                out[k] = max(out.get(k, 0), v) if k in _MAX_KEYS else out.get(k, 0) + v
            svc_weighted += float(c.get("mean_service_ns", 0.0)) * float(c.get("offered", 0))
        if out.get("offered"):
            out["mean_service_ns"] = svc_weighted / out["offered"]
        return out

    def top(self, key: str) -> float | None:
        """A top-level summary number summed across hosts (offered_rps, achieved_rps)."""
        vals = [s[key] for s in self.summaries.values() if isinstance(s.get(key), (int, float))]
        return float(sum(vals)) if vals else None

    def arrival(self) -> str | None:
        for s in self.summaries.values():
            if s.get("arrival"):
                return str(s["arrival"])
        return None


def _read_json(path: Path, problems: list[str]) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        problems.append(f"missing {path.name}")
    except (OSError, ValueError) as e:
        problems.append(f"unreadable {path}: {e}")
    return None


_POINT_TYPES = {
    "id": (str,),
    "index": (int,),
    "system": _TEXT,
    "variant": _TEXT,
    "variant_label": _TEXT,
    "curve": _TEXT,
    "repetition": (int,),
    "load_krps": _NUMBER,
    "capacity_fraction": (*_NUMBER, type(None)),
    "offered_rps": _NUMBER,
    "dilation": _NUMBER,
    "warmup_s": _NUMBER,
    "measure_s": _NUMBER,
    "handler": _TEXT,
    "worker_threads": (int,),
    "params": (dict,),
}


def _typed(obj: dict, types: dict[str, tuple], name: str, problems: list[str]) -> dict:
    """obj without the fields whose JSON type is wrong, each named in `problems`."""
    bad = [k for k, t in types.items() if k in obj and (isinstance(obj[k], bool) or not isinstance(obj[k], t))]
    for k in bad:
        problems.append(f"damaged {name}: {k} is {json.dumps(obj[k])[:40]}")
    return {k: v for k, v in obj.items() if k not in bad}


def _is_summary(s: Any) -> bool:
    """rain-client's summary.json as the counters read it: totals and classes objects."""
    if not isinstance(s, dict) or not isinstance(s.get("totals", {}), dict):
        return False
    classes = s.get("classes", {})
    return isinstance(classes, dict) and all(isinstance(c, dict) for c in classes.values())


def load_point(point_dir: str | Path | PointDir, point: dict | None = None) -> PointData:
    """Read and merge one point's client results (never raises on bad or missing
    files: they are listed in `problems`, which the validity checks report). Without
    `point`, the point is point.json's with its status from the run's sweep.json."""
    pd = point_dir if isinstance(point_dir, PointDir) else PointDir(Path(point_dir))
    problems: list[str] = []
    if point is None:
        point = _read_json(pd.point_file, problems)
        if point is not None and not isinstance(point, dict):
            problems.append(f"damaged {layout.POINT}: a JSON object was expected")
        point = _typed(point if isinstance(point, dict) else {}, _POINT_TYPES, layout.POINT, problems)
        status = pd.read_status()
        if status is not None:
            point["status"] = status  # sweep.json holds it, not point.json
    elif is_dataclass(point):  # a plan.Point
        point = asdict(point) | {"curve": getattr(point, "curve", None)}
    data = PointData(dir=pd.path, point=point, problems=problems)
    hosts = pd.client_hosts()
    if not hosts:
        problems.append(f"no client results ({layout.CLIENTS}/<host>/)")
    data.hosts = hosts
    lat_logs, sd_logs = [], []
    for h in hosts:
        hd = pd.client(h)
        s = _read_json(hd / layout.CLIENT_SUMMARY, problems)
        if _is_summary(s):
            data.summaries[h] = s
        elif s is not None:
            problems.append(f"damaged {layout.CLIENTS}/{h}/{layout.CLIENT_SUMMARY}: not rain-client's summary")
        for name, logs in ((layout.LATENCY_HLOG, lat_logs), (layout.SLOWDOWN_HLOG, sd_logs)):
            p = hd / name
            if not p.exists():
                problems.append(f"missing {layout.CLIENTS}/{h}/{name}")
                continue
            try:
                logs.append(read_hlog(p))
            except Exception as e:  # a truncated or corrupt log marks the point, not the run
                problems.append(f"unreadable {layout.CLIENTS}/{h}/{name}: {e}")
        if (hd / layout.TRACE).exists():
            data.traces[h] = hd / layout.TRACE
    for logs, whole_attr, cube_attr in ((lat_logs, "latency", "latency_cube"), (sd_logs, "slowdown", "slowdown_cube")):
        if logs:
            try:
                cube = merge_logs(logs)
            except ValueError as e:
                problems.append(f"cannot merge the {whole_attr} logs: {e}")
                continue
            setattr(data, cube_attr, cube)
            setattr(data, whole_attr, cube.whole())
    return data


def spec_of(manifest: dict):
    """The experiment Spec recorded in the manifest, or None."""
    from .spec import Spec

    raw = manifest.get("spec")
    if isinstance(raw, dict):
        try:
            return Spec.model_validate(raw)
        except Exception:
            return None
    return None


def experiment_name(run_dir: Path, manifest: dict) -> str:
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    return str(manifest.get("experiment") or spec.get("name") or Path(run_dir).resolve().parent.name)


def testbed_kind(manifest: dict) -> str:
    """hardware, tofino-model or emulated: manifest.json's testbed.kind (run.py writes it)."""
    tb = manifest.get("testbed")
    return str(tb.get("kind") or "unknown") if isinstance(tb, dict) else "unknown"


def curve_of(point: dict) -> str:
    if point.get("curve"):
        return str(point["curve"])
    system = str(point.get("system", "?"))
    if point.get("variant"):
        return f"{system} ({point.get('variant_label') or point['variant']})"
    return system


def p99_interval(data: PointData, cls: str, confidence: float = 0.95) -> dict:
    """The p99's confidence interval (testbed ns), the wider of two: the order
    statistics' (binomial), which assume independent samples, and the draw-to-draw
    spread of a window this size that the model beside a measured point estimates
    (model.json `p99_spread`): near saturation neighbouring latencies move together and
    the second is several times the first. Returns ci (lo, hi), p99 and both relative
    widths (`draws` None without a model)."""
    from scipy.stats import norm

    h = data.latency.get(cls)
    if h is None or not h.total:
        return {"ci": (math.nan, math.nan), "p99": math.nan, "order_stats": math.inf, "draws": None, "width": math.inf}
    p99 = h.percentile(99.0)
    lo, hi = h.quantile_ci(0.99, confidence)
    order = (hi - lo) / p99 if p99 > 0 else math.inf
    sd = (((read_model_info(data.dir) or {}).get("p99_spread") or {}).get("rel_sd") or {}).get(cls)
    draws = 2 * float(norm.ppf(0.5 + confidence / 2)) * float(sd) if isinstance(sd, (int, float)) else None
    if draws is not None and draws > order:
        lo, hi = p99 * (1 - draws / 2), p99 * (1 + draws / 2)
    return {"ci": (lo, hi), "p99": p99, "order_stats": order, "draws": draws, "width": max(order, draws or 0.0)}


def read_model_info(point_dir: PointDir | Path) -> dict | None:
    """model/model.json, or None when the point has no model (a run before the model
    was added beside every point, or a simulated run)."""
    pd = point_dir if isinstance(point_dir, PointDir) else PointDir(Path(point_dir))
    info = layout.read_json(pd.model / layout.MODEL_INFO)
    return info if isinstance(info, dict) else None


def load_model(point_dir: PointDir | Path):
    """The model point's data (analyze.PointData, paper time, dilation 1), or None
    when there is no model or it could not be computed."""
    pd = point_dir if isinstance(point_dir, PointDir) else PointDir(Path(point_dir))
    info = read_model_info(pd)
    if info is None or info.get("error"):
        return None
    data = load_point(PointDir(pd.model))
    return data if data.latency else None


def is_measured(manifest: dict) -> bool:
    """The run was measured on a testbed (emulated, tofino-model or hardware): only
    such runs get a model beside their points (a simulated run is the model)."""
    return testbed_kind(manifest) != "simulated"


def number(v: Any, default: float = math.nan) -> float:
    """A number of point.json; the default when it is missing or not a number (a
    damaged point.json is reported by the point's verdict, not by a crash here)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default
