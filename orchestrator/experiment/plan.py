"""Planning: a spec and a testbed's shape expand into points. A pure function: no
files, no connections (docs/architecture.md, data flow). Points are ordered so that a sweep
interleaves repetitions (all loads of repetition 1, then of repetition 2) and a
partial run still covers every load.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace

from ..errors import Problem
from ..systems import get as get_system
from .spec import Spec, SpecError, capacity_krps, fmt_load

# What one client host can send, in testbed requests/s: a DPDK client core on a real
# NIC reaches line rate for small packets (~15 M/s at 10G, more at 100G; 20 M/s
# leaves room); on the emulated testbed af_packet moves a few hundred thousand
# packets/s on a shared core, so time dilation must bring the load down to that.
CLIENT_RPS_MAX = {False: 20_000_000.0, True: 200_000.0}
# A measurement window must hold many tasks of each worker, or its p99 is noise.
TASKS_PER_WINDOW_MIN = 100


@dataclass(frozen=True)
class TestbedShape:
    """What planning needs to know about a testbed."""

    __test__ = False

    worker_hosts: int
    client_hosts: int
    emulated: bool

    def worker_threads(self, spec: Spec) -> int:
        """Every worker host's threads; for a server-side spec (Rakaia's family) one
        server's, the first worker host's: the others stay idle."""
        hosts = 1 if "rpc" in spec.needs() else self.worker_hosts
        return hosts * spec.workers.threads(self.emulated)


@dataclass(frozen=True)
class Point:
    id: str
    index: int
    system: str
    variant: str | None
    variant_label: str | None
    repetition: int
    load_krps: float  # offered load in paper time
    capacity_fraction: float | None  # as the spec gave it, if it did
    offered_rps: float  # offered load on this testbed (dilated)
    dilation: float
    warmup_s: float  # testbed time
    measure_s: float
    handler: str  # spin | sleep | rocksdb
    worker_threads: int
    params: dict = field(default_factory=dict)
    phase_at_s: tuple[float, ...] = ()  # when each workload phase starts, testbed seconds from the warm-up's start

    @property
    def curve(self) -> str:
        """What a plot draws as one line: the system, or system and variant."""
        return self.system if not self.variant else f"{self.system} ({self.variant_label})"

    @property
    def digest(self) -> str:
        """A fingerprint of everything that defines the point (to refuse a resume
        whose spec changed underneath it)."""
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def plan(spec: Spec, shape: TestbedShape, *, k: float | None = None) -> list[Point]:
    """The points of `spec` on a testbed of `shape`; a SpecError when the testbed cannot
    run them (tasks dilated past the measurement, more requests than its clients send).
    `k`: the dilation, when a calibration chose it (`dilation.emulated: auto`)."""
    k = k if k is not None else spec.dilation.planned(shape.emulated)
    d = spec.durations(shape.emulated)
    handler = spec.worker_handler(shape.emulated)
    threads = shape.worker_threads(spec)
    cap = capacity_krps(spec, threads)
    if spec.load.krps is not None:
        loads = [(x, x / cap) for x in spec.load.krps]
        tag = "k"
    else:
        loads = [(f * cap, f) for f in spec.load.capacity_fraction or []]
        tag = "f"
    _check_runnable(spec, shape, k, d.measure_s, max(x for x, _ in loads))
    points: list[Point] = []
    at = tuple(spec.phase_times(shape.emulated))
    for rep in range(1, spec.repetitions + 1):
        for system in spec.systems:
            for v in spec.variant_params():
                variant, vlabel = v.name, v.label
                for krps, frac in loads:
                    label = fmt_load(krps) if tag == "k" else fmt_load(frac)
                    name = f"{system}.{variant}" if variant else system
                    point = Point(
                        id=f"{name}-{tag}{label}-r{rep}",
                        index=len(points),
                        system=system,
                        variant=variant,
                        variant_label=vlabel,
                        repetition=rep,
                        load_krps=round(krps, 6),
                        capacity_fraction=round(frac, 6),
                        offered_rps=round(krps * 1000.0 / k, 3),
                        dilation=k,
                        warmup_s=d.warmup_s,
                        measure_s=d.measure_s,
                        handler=handler,
                        worker_threads=threads,
                        params=v.block(get_system(system).params_block).model_dump(),
                        phase_at_s=at,
                    )
                    if at:  # the load is what the clients send: the phases' mean rate over the window
                        mean = window_mean_rps(phase_schedule(spec, point), d.warmup_s, d.measure_s)
                        point = replace(point, load_krps=round(mean / 1000.0, 6), offered_rps=round(mean / k, 3))
                    points.append(point)
    return points


def window_mean_rps(pieces: list[tuple[float, float, tuple[str, ...]]], warmup_s: float, measure_s: float) -> float:
    """The mean paper rate of a phase schedule over the measurement window (testbed
    seconds warmup_s .. warmup_s + measure_s), as rain-client computes its offered rate."""
    a, b = warmup_s, warmup_s + measure_s
    n = 0.0
    for i, (t, rate, _) in enumerate(pieces):
        end = pieces[i + 1][0] if i + 1 < len(pieces) else math.inf
        lo, hi = max(a, t), min(b, end)
        if hi > lo:
            n += (hi - lo) * rate
    return n / (b - a)


def phase_schedule(spec: Spec, point: Point) -> list[tuple[float, float, tuple[str, ...]]]:
    """A time-varying workload's pieces for `point`: (start in testbed seconds from the
    warm-up's start, total rate in paper requests/s, the classes it draws). A phase's
    load is its capacity_fraction (times the point's) of the capacity of all the
    point's workers, for the mean service time of its own classes."""
    wl = spec.workload
    if not wl.phases:
        return []
    frac = point.capacity_fraction if point.capacity_fraction is not None else 1.0
    at = point.phase_at_s or tuple(ph.at_s for ph in wl.phases)
    out = []
    for ph, t in zip(wl.phases, at):
        names = tuple(ph.classes or [c.name for c in wl.classes])
        cls = [c for c in wl.classes if c.name in names]
        mean_us = sum(c.weight * c.service.mean_us for c in cls) / sum(c.weight for c in cls)
        out.append((t, frac * ph.capacity_fraction * point.worker_threads / mean_us * 1e6, names))
    return out


def _check_runnable(spec: Spec, shape: TestbedShape, k: float, measure_s: float, top_krps: float) -> None:
    """Refuse points this testbed cannot run, naming the field to change."""
    where = "the emulated testbed" if shape.emulated else "a hardware testbed"
    dil = "dilation.emulated" if shape.emulated else "dilation.hardware"
    measure = ("emulated.measure_s" if spec.emulated else "measure_s") if shape.emulated else "measure_s"
    problems: list[Problem] = []
    task_s = spec.workload.mean_service_us * k / 1e6
    if task_s * TASKS_PER_WINDOW_MIN > measure_s:
        problems.append(
            Problem(
                "workload.classes",
                f"a mean task of {spec.workload.mean_service_us:,g} us takes {task_s:,.3g} s on {where} "
                f"(x{k:g}): {measure_s:g} s of measurement holds fewer than {TASKS_PER_WINDOW_MIN} of them",
                f"shorten the service times, lower {dil}, or lengthen {measure} to at least "
                f"{task_s * TASKS_PER_WINDOW_MIN:,.3g} s",
            )
        )
    rps = top_krps * 1000.0 / k
    most = CLIENT_RPS_MAX[shape.emulated] * shape.client_hosts
    if rps > most:
        load = "load.krps" if spec.load.krps is not None else "load.capacity_fraction"
        problems.append(
            Problem(
                load,
                f"the highest load, {top_krps:,.6g} kRPS of paper time, is {rps:,.0f} requests/s on {where} "
                f"(x{k:g}); its {shape.client_hosts} client host(s) send at most {most:,.0f}/s",
                "lower the loads or add client hosts"
                + (f", or raise {dil} to at least {top_krps * 1000.0 / most:,.3g}" if shape.emulated else ""),
            )
        )
    if problems:
        raise SpecError(spec.path, problems)


def worker_slices(spec: Spec, n_threads: int) -> list[int]:
    """The slice of each worker thread (global order), from the spec's slice sizes: the
    same on every testbed, simulated included."""
    sl = spec.rain.slices
    if not sl:
        return [0] * n_threads
    sizes = [s.workers for s in sl]
    if all(x is None for x in sizes):
        sizes = [1] * len(sl)
    sizes = [x or 1 for x in sizes]
    total = sum(sizes)
    raw = [n_threads * x / total for x in sizes]
    counts = [max(1, int(r)) for r in raw]
    while sum(counts) < n_threads:
        counts[max(range(len(raw)), key=lambda i: raw[i] - counts[i])] += 1
    while sum(counts) > n_threads:
        counts[counts.index(max(counts))] -= 1
    out = []
    for s, c in zip(sl, counts):
        out += [s.id] * c
    return out
