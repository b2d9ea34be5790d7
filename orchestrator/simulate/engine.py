"""The simulated testbed's engine: runs a SimPoint in the C core (core/, built into
core/build/librainsim.so by `make build`) through ctypes and returns a SimResult.

The structs below mirror core/rainsim.h field for field (tests/unit/test_sim_core.py
checks their sizes against the library's). Adaptive points (Rain with Algorithm 1)
pause the core at every control interval (k_samples x sample_interval_us of paper
time): each worker host's samples go to one hosts.agent.adaptive.Controller, as on a
testbed where one agent runs per host, and its decisions are applied in the core.
"""

from __future__ import annotations

import ctypes as C
import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hosts.agent.adaptive import Controller, Params, rebalance

from ..errors import RainmakerError
from .model import SERVICE_KINDS, SimPoint
from .policies import POLICIES

CORE = Path(__file__).resolve().parent / "core"
LIB = CORE / "build" / "librainsim.so"

MAX_CLASSES, MAX_SLICES, MAX_WORKERS, MAX_PARAMS, SAMPLES = 32, 16, 4096, 8, 4096
OUTCOMES = ("answered", "rejected", "timed_out", "not_sent")  # SimResult.outcome codes 0..3


class SimError(RainmakerError):
    """The simulated testbed cannot run: the core is not built, or a point is not one
    the model can run."""


class _Network(C.Structure):
    _fields_ = [
        ("client_switch_ns", C.c_int64),
        ("switch_worker_ns", C.c_int64),
        ("switch_pkt_ns", C.c_int64),
        ("worker_pkt_ns", C.c_int64),
        ("link_gbps", C.c_double),
        ("prewrite_ns", C.c_int64),
    ]


class _Class(C.Structure):
    _fields_ = [
        ("weight", C.c_double),
        ("task_type", C.c_int32),
        ("slice", C.c_int32),
        ("kind", C.c_int32),
        ("payload_bytes", C.c_int32),
        ("a_ns", C.c_int64),
        ("b_ns", C.c_int64),
        ("p_a", C.c_double),
        ("keys", C.c_double),
        ("large_fraction", C.c_double),
        ("large_bytes", C.c_int32),
        ("pad_", C.c_int32),
    ]


class _Phase(C.Structure):
    _fields_ = [
        ("at_ns", C.c_int64),
        ("rate_rps", C.c_double),
        ("n_classes", C.c_int32),
        ("classes", C.c_uint8 * MAX_CLASSES),
        ("pad_", C.c_int32),
    ]


class _Config(C.Structure):
    _fields_ = [
        ("policy", C.c_char_p),
        ("n_workers", C.c_int32),
        ("threads_per_host", C.c_int32),
        ("worker_slices", C.POINTER(C.c_int32)),
        ("quota", C.c_int32),
        ("arrival", C.c_int32),
        ("queue_capacity", C.c_int64),
        ("n_classes", C.c_int32),
        ("n_phases", C.c_int32),
        ("classes", C.POINTER(_Class)),
        ("phases", C.POINTER(_Phase)),
        ("gen_end_ns", C.c_int64),
        ("timeout_ns", C.c_int64),
        ("max_outstanding", C.c_int64),
        ("sample_period_ns", C.c_int64),
        ("seed", C.c_uint64),
        ("net", _Network),
        ("params", C.c_double * MAX_PARAMS),
        ("n_replay", C.c_int64),
        ("replay_at_ns", C.POINTER(C.c_int64)),
        ("replay_service_ns", C.POINTER(C.c_int64)),
        ("replay_class", C.POINTER(C.c_uint8)),
        ("replay_large", C.POINTER(C.c_uint8)),
    ]


class _Sample(C.Structure):
    _fields_ = [(n, C.c_uint32) for n in ("local_qdelay_ns", "service_ns", "switch_qdelay_ns", "switch_qlen")]


class _WorkerInfo(C.Structure):
    _fields_ = [
        ("busy_ns", C.c_int64),
        ("tasks_done", C.c_int64),
        ("tokens_sent", C.c_int64),
        ("quota", C.c_int32),
        ("slice", C.c_int32),
        ("enabled", C.c_int32),
        ("fifo", C.c_int32),
        ("outstanding", C.c_int32),
        ("pad_", C.c_int32),
    ]


_COUNTERS = (
    "EV_DISPATCH_DIRECT",
    "EV_DISPATCH_QUEUED",
    "EV_TASK_QUEUED",
    "EV_TOKEN_QUEUED",
    "EV_REJECT",
    "EV_FORWARDED",
    "prewrites",
    "prewrite_bytes",
    "packets",
    "events",
    "late_replies",
    "waited_for_admission",
    "max_tokens_waiting",
    "max_held",
    "end_ns",
    "samples_lost",
    "recirculations",
    "empties",
    "fetches",
    "reports",
)


class _Counters(C.Structure):
    _fields_ = [(n, C.c_int64) for n in _COUNTERS]


_lib: C.CDLL | None = None


def _stale() -> str | None:
    """Why the built core cannot be used (missing, or older than a source), or None."""
    if not LIB.exists():
        return f"the simulator's core is not built ({LIB} is missing)"
    built = LIB.stat().st_mtime
    newer = [p.name for p in sorted(CORE.iterdir()) if p.suffix in (".c", ".h") or p.name == "Makefile"]
    newer = [n for n in newer if (CORE / n).stat().st_mtime > built]
    if newer:
        return f"the simulator's core is older than its sources ({', '.join(newer)} changed since it was built)"
    return None


def load() -> C.CDLL:
    """The core, loaded once; a SimError that says `make build` when it is missing or stale."""
    global _lib
    if _lib is not None:
        return _lib
    why = _stale()
    if why:
        raise SimError(why, fix="run `make build` in the repository (or `make -C orchestrator/simulate/core`)")
    lib = C.CDLL(str(LIB))
    P = C.POINTER
    sim = C.c_void_p
    lib.rs_create.restype = sim
    lib.rs_create.argtypes = [P(_Config), C.c_char_p, C.c_int]
    lib.rs_destroy.argtypes = [sim]
    lib.rs_error.restype = C.c_char_p
    lib.rs_error.argtypes = [sim]
    lib.rs_run_until.restype = C.c_int
    lib.rs_run_until.argtypes = [sim, C.c_int64]
    lib.rs_worker.argtypes = [sim, C.c_int32, P(_WorkerInfo)]
    lib.rs_take_samples.argtypes = [sim, C.c_int32, P(_Sample), C.c_int32, P(C.c_int64)]
    lib.rs_set_worker.argtypes = [sim, C.c_int32, C.c_int32, C.c_int32]
    lib.rs_n_requests.restype = C.c_int64
    lib.rs_n_requests.argtypes = [sim]
    lib.rs_requests.argtypes = [sim] + [C.c_void_p] * 7
    lib.rs_counters.argtypes = [sim, P(_Counters)]
    lib.rs_n_series.restype = C.c_int64
    lib.rs_n_series.argtypes = [sim]
    lib.rs_series.argtypes = [sim, C.c_void_p, C.c_void_p, C.c_void_p]
    lib.rs_policies.restype = C.c_char_p
    lib.rs_sizes.restype = None
    lib.rs_sizes.argtypes = [P(C.c_int64)]
    _lib = lib
    return lib


def struct_sizes() -> dict[str, tuple[int, int]]:
    """name -> (size in the core, size of the ctypes mirror): they must agree."""
    lib = load()
    out = (C.c_int64 * 7)()
    lib.rs_sizes(out)
    mine = [_Network, _Class, _Phase, _Config, _Sample, _WorkerInfo, _Counters]
    return {t.__name__.strip("_").lower(): (int(out[i]), C.sizeof(t)) for i, t in enumerate(mine)}


def core_policies() -> list[str]:
    return load().rs_policies().decode().split(",")


@dataclass
class SimResult:
    point: SimPoint
    # one entry per request the client scheduled (warm-up included), in send order
    intended_ns: np.ndarray  # int64, intended send time from the run's start
    cls: np.ndarray  # uint8, class index
    outcome: np.ndarray  # uint8: 0 answered, 1 rejected, 2 timed out, 3 not sent
    latency_ns: np.ndarray  # int64, reply time - intended send time (-1 unless answered)
    service_ns: np.ndarray  # int64, the task's service time (drawn at the client)
    large: np.ndarray  # bool, carries large_bytes
    worker: np.ndarray  # int16, worker thread that ran it (-1 if none)
    counters: dict
    switch_queue: list  # [(t_s, {slice: balance})]
    worker_series: list  # [(t_s, [{fifo, outstanding, done, busy_ns, quota, slice, enabled}])]
    decisions: list = field(default_factory=list)
    end_ns: int = 0
    events: int = 0
    wall_s: float = 0.0


def check(sp: SimPoint) -> None:
    """A SimError naming what is wrong with `sp`, before the core sees it."""

    def bad(msg: str, fix: str) -> SimError:
        return SimError(f"simulated point {sp.point_id}: {msg}", fix=fix)

    if sp.policy not in POLICIES:
        raise bad(f"unknown policy '{sp.policy}'", f"use one of {', '.join(POLICIES)}")
    if sp.worker_hosts < 1 or sp.threads_per_host < 1 or sp.n_workers > MAX_WORKERS:
        raise bad(
            f"{sp.worker_hosts} worker host(s) x {sp.threads_per_host} thread(s)",
            f"give at least one worker host and one thread per host, at most {MAX_WORKERS} threads",
        )
    if len(sp.worker_slices) != sp.n_workers or any(not 0 <= s < MAX_SLICES for s in sp.worker_slices):
        raise bad("worker_slices must give each worker thread a slice in 0..15", "one slice per worker thread")
    if sp.quota < 0 or sp.queue_capacity < 0 or sp.max_outstanding < 0:
        raise bad("quota, queue_capacity and max_outstanding must be >= 0", "give non-negative numbers")
    n = sp.network
    delays = (n.client_switch_ns, n.switch_worker_ns, n.switch_pkt_ns, n.worker_pkt_ns, n.prewrite_ns)
    if any(d < 0 for d in delays) or not n.link_gbps > 0:
        raise bad(f"negative delay or cost, or a link speed <= 0 in {n}", "use Network.paper() or Network.ideal()")
    if not 1 <= len(sp.classes) <= MAX_CLASSES:
        raise bad(f"{len(sp.classes)} classes", f"give 1 to {MAX_CLASSES} request classes")
    for c in sp.classes:
        if c.service.kind not in SERVICE_KINDS:
            raise bad(f"class {c.name}: unknown service kind '{c.service.kind}'", f"use one of {SERVICE_KINDS}")
        if not 0 <= c.slice < MAX_SLICES or not c.weight > 0:
            raise bad(f"class {c.name}: slice {c.slice}, weight {c.weight}", "slices 0..15, weights > 0")
    if not sp.phases or sp.phases[0].at_ns != 0:
        raise bad("the first phase must start at 0", "add a phase at 0")
    for p in sp.phases:
        if not (p.rate_rps >= 0 and math.isfinite(p.rate_rps)) or not p.classes:
            raise bad(f"phase at {p.at_ns} ns: rate {p.rate_rps}, classes {p.classes}", "a finite rate and a class")
    if sp.replay is not None:
        if len(sp.replay) not in (3, 4):
            raise bad("a replay is (times, service times, classes[, large])", "fix the replay")
        at, svc, cls = sp.replay[:3]
        if not len(at) == len(svc) == len(cls) or len(sp.replay) == 4 and len(sp.replay[3]) != len(at):
            raise bad("a replay gives one time, service time and class per request (and large flag)", "fix the replay")
        if len(at) and (np.any(np.diff(at) < 0) or at[0] < 0 or np.any(svc < 0) or np.any(cls >= len(sp.classes))):
            raise bad("a replay's times must not decrease, its service times be >= 0, its classes exist", "fix it")
    if sp.arrival not in ("poisson", "constant"):
        raise bad(f"arrival '{sp.arrival}'", "poisson or constant")
    if sp.warmup_ns < 0 or sp.measure_ns <= 0 or sp.timeout_ns <= 0:
        raise bad("warm-up must be >= 0, the measurement and the timeout > 0", "fix the durations")
    if sp.adaptive is not None:
        need = ("s_th", "r_th", "n_max", "sample_interval_us", "k_samples")
        missing = [k for k in need if k not in sp.adaptive]
        if missing:
            raise bad(f"adaptive lacks {', '.join(missing)}", f"give {', '.join(need)} (the spec's rain section)")
        if not float(sp.adaptive["k_samples"]) * float(sp.adaptive["sample_interval_us"]) * 1000 >= 1:
            raise bad("a control interval (k_samples x sample_interval_us) under 1 ns", "raise k_samples")


def _config(sp: SimPoint, keep: list) -> _Config:
    slices = (C.c_int32 * sp.n_workers)(*sp.worker_slices)
    classes = (_Class * len(sp.classes))()
    for i, c in enumerate(sp.classes):
        s = c.service
        classes[i] = _Class(
            weight=c.weight,
            task_type=c.task_type,
            slice=c.slice,
            kind=SERVICE_KINDS.index(s.kind),
            payload_bytes=c.payload_bytes,
            a_ns=s.a_ns,
            b_ns=s.b_ns,
            p_a=s.p_a,
            keys=s.keys,
            large_fraction=c.large_fraction,
            large_bytes=c.large_bytes,
        )
    phases = (_Phase * len(sp.phases))()
    for i, p in enumerate(sp.phases):
        phases[i].at_ns = p.at_ns
        phases[i].rate_rps = p.rate_rps
        phases[i].n_classes = len(p.classes)
        for j, k in enumerate(p.classes):
            phases[i].classes[j] = k
    n = sp.network
    params = POLICIES[sp.policy].params(sp.policy_params)
    policy = sp.policy.encode()
    keep += [slices, classes, phases, policy]
    period = sp.sample_period_ns or max(1, sp.measure_ns // 50)
    replay = {}
    if sp.replay is not None:
        types = (np.int64, np.int64, np.uint8, np.uint8)
        arrays = [np.ascontiguousarray(a, dtype=t) for a, t in zip(sp.replay, types)]
        keep += arrays
        at, svc, cls = arrays[:3]
        replay = {
            "n_replay": len(at),
            "replay_at_ns": at.ctypes.data_as(C.POINTER(C.c_int64)),
            "replay_service_ns": svc.ctypes.data_as(C.POINTER(C.c_int64)),
            "replay_class": cls.ctypes.data_as(C.POINTER(C.c_uint8)),
        }
        if len(arrays) == 4:
            replay["replay_large"] = arrays[3].ctypes.data_as(C.POINTER(C.c_uint8))
    return _Config(
        policy=policy,
        n_workers=sp.n_workers,
        threads_per_host=sp.threads_per_host,
        worker_slices=slices,
        quota=sp.quota,
        arrival=0 if sp.arrival == "poisson" else 1,
        queue_capacity=sp.queue_capacity,
        n_classes=len(sp.classes),
        n_phases=len(sp.phases),
        classes=classes,
        phases=phases,
        gen_end_ns=sp.end_ns,
        timeout_ns=sp.timeout_ns,
        max_outstanding=sp.max_outstanding,
        sample_period_ns=period,
        seed=sp.seed & (2**64 - 1),
        net=_Network(
            n.client_switch_ns, n.switch_worker_ns, n.switch_pkt_ns, n.worker_pkt_ns, n.link_gbps, n.prewrite_ns
        ),
        params=(C.c_double * MAX_PARAMS)(*params[:MAX_PARAMS]),
        **replay,
    )


class _Sim:
    """One core instance (freed on close)."""

    def __init__(self, sp: SimPoint):
        self.lib = load()
        self.sp = sp
        self._keep: list = []
        cfg = _config(sp, self._keep)
        err = C.create_string_buffer(256)
        self.h = self.lib.rs_create(C.byref(cfg), err, len(err))
        if not self.h:
            raise SimError(f"simulated point {sp.point_id}: {err.value.decode()}", fix="fix the point's parameters")
        self.wall = 0.0
        self._buf = (_Sample * SAMPLES)()

    def close(self) -> None:
        if self.h:
            self.lib.rs_destroy(self.h)
            self.h = None

    def run_until(self, t_ns: int) -> bool:
        """Run to t_ns; True when the point is over."""
        t0 = time.perf_counter()
        rc = self.lib.rs_run_until(self.h, t_ns)
        self.wall += time.perf_counter() - t0
        if rc < 0:
            raise SimError(
                f"simulated point {self.sp.point_id}: {self.lib.rs_error(self.h).decode()}",
                fix="lower the load or the duration of the point",
            )
        return rc == 1

    def worker(self, w: int) -> _WorkerInfo:
        out = _WorkerInfo()
        self.lib.rs_worker(self.h, w, C.byref(out))
        return out

    def take_samples(self, w: int) -> tuple[list[tuple[int, int, int, int]], int]:
        lost = C.c_int64()
        n = self.lib.rs_take_samples(self.h, w, self._buf, SAMPLES, C.byref(lost))
        a = np.frombuffer(self._buf, dtype=np.uint32, count=4 * n).reshape(n, 4)
        return list(map(tuple, a.tolist())), int(lost.value)

    def set_worker(self, w: int, quota: int, slice_: int) -> None:
        if self.lib.rs_set_worker(self.h, w, quota, slice_) < 0:
            raise SimError(f"simulated point {self.sp.point_id}: {self.lib.rs_error(self.h).decode()}")

    def result(self, decisions: list) -> SimResult:
        lib, h, sp = self.lib, self.h, self.sp
        n = int(lib.rs_n_requests(h))
        cols = {
            "intended_ns": np.empty(n, np.int64),
            "cls": np.empty(n, np.uint8),
            "outcome": np.empty(n, np.uint8),
            "latency_ns": np.empty(n, np.int64),
            "service_ns": np.empty(n, np.int64),
            "large": np.empty(n, np.bool_),
            "worker": np.empty(n, np.int16),
        }
        lib.rs_requests(h, *(a.ctypes.data for a in cols.values()))
        cnt = _Counters()
        lib.rs_counters(h, C.byref(cnt))
        counters = {k: int(getattr(cnt, k)) for k in _COUNTERS}
        infos = [self.worker(w) for w in range(sp.n_workers)]
        counters["tasks_done"] = [int(i.tasks_done) for i in infos]
        counters["busy_ns"] = [int(i.busy_ns) for i in infos]
        counters["tokens_sent"] = [int(i.tokens_sent) for i in infos]
        rows = int(lib.rs_n_series(h))
        t = np.empty(rows, np.int64)
        bal = np.empty((rows, MAX_SLICES), np.int64)
        wk = np.empty((rows, sp.n_workers, 7), np.int64)
        lib.rs_series(h, t.ctypes.data, bal.ctypes.data, wk.ctypes.data)
        used = sorted(set(sp.worker_slices) | {c.slice for c in sp.classes})
        keys = ("fifo", "outstanding", "done", "busy_ns", "quota", "slice", "enabled")
        switch_queue = [(t[r] / 1e9, {s: int(bal[r, s]) for s in used}) for r in range(rows)]
        worker_series = [
            (t[r] / 1e9, [dict(zip(keys, map(int, wk[r, w]))) for w in range(sp.n_workers)]) for r in range(rows)
        ]
        return SimResult(
            point=sp,
            switch_queue=switch_queue,
            worker_series=worker_series,
            counters=counters,
            decisions=decisions,
            end_ns=counters["end_ns"],
            events=counters["events"],
            wall_s=self.wall,
            **cols,
        )


def _params(adaptive: dict) -> Params:
    return Params(s_th=float(adaptive["s_th"]), r_th=float(adaptive["r_th"]), n_max=int(adaptive["n_max"]))


def run(sp: SimPoint, controllers: list[Controller] | None = None) -> SimResult:
    """Simulate one point. Adaptive points run Algorithm 1 with one Controller per worker
    host (made here unless given) every control interval."""
    check(sp)
    sim = _Sim(sp)
    try:
        decisions: list = []
        if not sp.adaptive:
            while not sim.run_until(2**62):
                pass
            return sim.result(decisions)
        T, H = sp.threads_per_host, sp.worker_hosts
        interval = round(float(sp.adaptive["k_samples"]) * float(sp.adaptive["sample_interval_us"]) * 1000)
        if controllers is not None and len(controllers) != H:
            raise SimError(
                f"simulated point {sp.point_id}: {len(controllers)} controllers for {H} worker hosts",
                fix="give one Controller per worker host",
            )
        if controllers is None:
            busy0 = [0] * T
            controllers = [Controller(_params(sp.adaptive), T, busy0, base=h * T) for h in range(H)]
        t = interval
        while not sim.run_until(t):
            reports = []
            for h, ctl in enumerate(controllers):
                ids = range(h * T, (h + 1) * T)
                for i, w in enumerate(ids):
                    samples, lost = sim.take_samples(w)
                    ctl.add_samples(i, samples, lost)
                infos = [sim.worker(w) for w in ids]
                changes, record = ctl.step(
                    t / 1e9,
                    float(interval),
                    [int(x.quota) for x in infos],
                    [int(x.slice) for x in infos],
                    [int(x.busy_ns) for x in infos],
                )
                for d in changes:
                    sim.set_worker(h * T + d.wid, d.quota, d.slice)
                record["quotas"] = [int(sim.worker(w).quota) for w in ids]
                record["host"] = h
                decisions.append(record)
                reports.append(record)
            # the coordinator over every host's report (a move is instant here; on a
            # testbed the orchestrator drains the worker first: coordinator.py)
            moves, view = rebalance(reports)
            for m in moves:
                sim.set_worker(m.worker, 1, m.dst)
            if moves or view["labels"]:
                decisions.append(
                    {"t": round(t / 1e9, 4), "coordinator": True, "moves": [m.__dict__ for m in moves], **view}
                )
            t += interval
        return sim.result(decisions)
    finally:
        sim.close()


def core_hash() -> str:
    """sha256 of what decides a simulated point: the C core and the Python model."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    files = sorted((here / "core").glob("*.[ch]")) + sorted((here / "core").glob("Makefile"))
    files += [here / n for n in ("model.py", "engine.py", "policies.py") if (here / n).exists()]
    files += sorted((here.parent / "systems").glob("*.py"))  # each system's policy and its parameters
    for p in files:
        h.update(str(p.relative_to(here.parent)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()
