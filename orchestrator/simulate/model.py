"""The simulated testbed's parameters: the network, the workload, the workers, and
build(), which turns a spec's planned point into them as `rainmaker run` would set up
a testbed (threads, slices, quota, queue capacity, the client's admission cap and
timeout).

Paper time throughout, in integer nanoseconds; rates in requests/s.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from switch.control.constants import QUEUE_ENTRIES  # the switch's queue entries, shared by the slices

from ..errors import UsageError
from ..experiment.plan import Point
from ..experiment.spec import Bimodal, Constant, Exponential, Keys, Memcached, Spec


@dataclass(frozen=True)
class Network:
    """One-way delays and per-packet costs, paper time. The defaults (paper()) are the
    Rain paper's testbed where it says (100 Gbps links, section 5.1) and public
    measurements of its parts where it does not (docs/simulator.md lists each source)."""

    client_switch_ns: int  # one-way, client NIC -> switch (and back): wire + NIC + stack
    switch_worker_ns: int  # one-way, switch -> worker NIC (and back)
    switch_pkt_ns: int  # switch pipeline latency per packet (Tofino port to port)
    worker_pkt_ns: int  # worker per-packet cost (rx of a task, tx of a reply or token), on the worker thread
    link_gbps: float  # serialisation at each host link (the paper: 100 Gbps); inf: none
    prewrite_ns: int  # extra latency of an RDMA WRITE into a worker ring (NIC DMA)

    @classmethod
    def paper(cls) -> Network:
        """The paper's testbed: Tofino, ConnectX-5 100 GbE, DPDK (Rain, CoNEXT 2026, 5.1)."""
        return cls(
            # A small-RPC round trip between kernel-bypass hosts through one switch is ~2.3 us
            # (eRPC, NSDI 2019, ConnectX NICs): 4 host legs + 2 switch passes, so with the
            # switch's 0.5 us, ~0.35 us per host leg (NIC, PCIe, wire).
            client_switch_ns=350,
            switch_worker_ns=350,
            # Tofino port-to-port latency, a few hundred ns (Franco et al., "A comprehensive
            # latency profiling study of the Tofino P4 programmable ASIC-based hardware",
            # Computer Communications 2024).
            switch_pkt_ns=500,
            # A DPDK core forwards ~20 Mpps with one rx and one tx per packet (DPDK's Mellanox
            # NIC performance reports, l3fwd): ~50 ns per packet received or sent.
            worker_pkt_ns=50,
            link_gbps=100.0,  # ConnectX-5 100 GbE (Rain, 5.1)
            # PCIe posted write into host memory, ~0.3 us (Neugebauer et al., "Understanding
            # PCIe performance for end host networking", SIGCOMM 2018).
            prewrite_ns=300,
        )

    @classmethod
    def ideal(cls) -> Network:
        """No delay, no cost, no serialisation: the pure queueing model (theory checks)."""
        return cls(0, 0, 0, 0, math.inf, 0)


SERVICE_KINDS = ("const", "exp", "bimodal", "keys-const", "keys-exp")


@dataclass(frozen=True)
class ServiceModel:  # paper time
    kind: str  # "const" | "exp" | "bimodal" | "keys-const" | "keys-exp"
    a_ns: int  # const: the time; exp: the mean; bimodal: mode a; keys-*: ns per key
    b_ns: int = 0  # bimodal: mode b
    p_a: float = 1.0  # bimodal: P(mode a)
    keys: float = 0.0  # keys-*: the key count (constant) or its mean (exponential)

    @property
    def mean_ns(self) -> float:
        if self.kind == "bimodal":
            return self.p_a * self.a_ns + (1 - self.p_a) * self.b_ns
        if self.kind.startswith("keys"):
            return self.keys * self.a_ns
        return float(self.a_ns)


@dataclass(frozen=True)
class ClassModel:
    name: str
    weight: float
    task_type: int
    slice: int  # the slice its task type maps to (0 without slices)
    service: ServiceModel
    payload_bytes: int
    large_fraction: float
    large_bytes: int


@dataclass(frozen=True)
class PhaseModel:
    at_ns: int  # from the start of the run (warm-up included)
    rate_rps: float  # offered requests/s in this phase
    classes: tuple[int, ...]  # indices into SimPoint.classes active in this phase


@dataclass(frozen=True)
class SimPoint:
    point_id: str
    policy: str  # a key of policies.POLICIES
    worker_hosts: int
    threads_per_host: int  # worker thread w belongs to host w // threads_per_host
    worker_slices: tuple[int, ...]  # initial slice of each worker thread
    quota: int  # initial token quota n_w per worker thread
    queue_capacity: int  # tasks a slice's switch queue holds before it rejects
    classes: tuple[ClassModel, ...]
    arrival: str  # "poisson" | "constant"
    phases: tuple[PhaseModel, ...]  # a static workload has one phase at 0
    warmup_ns: int
    measure_ns: int
    timeout_ns: int  # a request unanswered this long after its send is timed out (as rain-client)
    max_outstanding: int  # the client's admission cap Q_max (0: none)
    network: Network
    seed: int
    adaptive: dict | None  # s_th, r_th, n_max, sample_interval_us, k_samples (paper) or None
    interval_ns: int = 10_000_000  # histogram interval (10 ms: the paper samples p99 every 10 ms)
    sample_period_ns: int = 0  # queue/worker time series period (0: measure_ns / 50)
    policy_params: dict = field(default_factory=dict)  # the system's parameters (its Policy.params reads them)
    # (intended ns, service ns, class index) arrays: requests replayed instead of drawn
    # (model_beside.py replays what a testbed's clients drew); None: drawn
    replay: tuple | None = None

    @property
    def n_workers(self) -> int:
        return self.worker_hosts * self.threads_per_host

    @property
    def end_ns(self) -> int:
        """When the client stops scheduling requests."""
        return self.warmup_ns + self.measure_ns


# The RDMA ring each worker thread registers (agent_config.py gives rain-worker --ring-slots this).
# A large task waits only while fewer than RING_SLOTS - quota tasks wait in its slice
# (docs/p4-program.md, the ring), so the ring bounds the switch queue of large tasks:
# 64 slots rejected 0.25% of requests at paper scale (fig6b, 0.95 of capacity, 32
# threads, where 62 waiting tasks are only 20 us of queue). 1,024 slots of 2 KiB are
# 2 MiB per worker thread and bound that queue at about 340 us of work.
RING_SLOTS = 1024


def seed_of(run_seed: int, point_id: str) -> int:
    """Each point's seed: a stable hash of the run's seed and the point id (63 bits)."""
    h = hashlib.sha256(f"{run_seed}:{point_id}".encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**63 - 1)


def service_of(svc) -> ServiceModel:
    """A spec's service distribution (microseconds) as a ServiceModel (nanoseconds),
    rounded to the nanosecond as rain-client rounds its arguments."""
    if isinstance(svc, Constant):
        return ServiceModel("const", round(svc.us * 1000))
    if isinstance(svc, Exponential):
        return ServiceModel("exp", round(svc.mean_us * 1000))
    if isinstance(svc, Bimodal):
        a, b = svc.modes
        return ServiceModel("bimodal", round(a.us * 1000), round(b.us * 1000), a.weight / (a.weight + b.weight))
    if isinstance(svc, Keys):
        kind = "keys-const" if svc.keys_dist == "constant" else "keys-exp"
        return ServiceModel(kind, round(svc.us_per_key * 1000), keys=float(svc.keys))
    if isinstance(svc, Memcached):
        raise UsageError(
            "a memcached workload is served by a real memcached, whose service time no distribution gives: "
            "the simulated testbed cannot predict it",
            fix="run the spec on a testbed (emulated or hardware), or give the classes a service distribution",
        )
    raise TypeError(f"unknown service distribution {svc!r}")


def queue_capacity_of(spec: Spec) -> tuple[int, int]:
    """(entries of the smallest slice region, entries of all regions): the switch's
    QUEUE_ENTRIES split evenly over the configured slices, as the controller's Settings
    does when slices give no sizes (switch/control/settings.py)."""
    n = len(spec.rain.slices or []) or 1
    each = QUEUE_ENTRIES // n
    return each, each * n


MAX_INTERVALS = 2000  # per point and class: a long window gets longer intervals, not a huge log


def interval_of(measure_ns: int) -> int:
    """The histogram interval: 10 ms of paper time (the paper samples p99 every 10 ms),
    longer for a window of more than 20 s, in whole milliseconds."""
    need = -(-measure_ns // MAX_INTERVALS)
    return max(10_000_000, -(-need // 1_000_000) * 1_000_000)


def client_timeout_us(mean_service_us: float) -> float:
    """rain-client's timeout (experiment/agent_config.py), in the testbed's microseconds for a workload whose
    mean service time is `mean_service_us` there: 200 ms, or 200 mean tasks when longer."""
    return max(200_000.0, 200.0 * mean_service_us)


def build(
    spec: Spec, point: Point, *, worker_hosts: int, network: Network, seed: int, dilation: float = 1.0
) -> SimPoint:
    """A plan.Point of `spec` as a SimPoint (threads, slices, classes, phases, quota,
    queue capacity, Q_max and the clients' timeout as the run computes them (experiment/point.py) for a
    testbed). `dilation`: the k of the testbed a measured point ran on (the point itself
    is in paper time), for what the testbed sets in its own time: the timeout."""
    from ..experiment.plan import phase_schedule, worker_slices
    from ..systems import get as get_system

    threads = point.worker_threads
    per_host = max(1, threads // max(1, worker_hosts))
    slices = worker_slices(spec, threads)
    slice_of_type = {t: s.id for s in spec.rain.slices or [] for t in s.task_types}
    classes = tuple(
        ClassModel(
            name=c.name,
            weight=float(c.weight),
            task_type=c.task_type,
            slice=slice_of_type.get(c.task_type, 0),  # unmapped types go to slice 0, as the P4 default
            service=service_of(c.service),
            payload_bytes=c.payload.bytes,
            large_fraction=c.payload.large_fraction,
            large_bytes=c.payload.large_bytes,
        )
        for c in spec.workload.classes
    )
    k = point.dilation or 1.0
    warmup_ns = round(point.warmup_s / k * 1e9)
    measure_ns = round(point.measure_s / k * 1e9)
    names = [c.name for c in spec.workload.classes]
    if spec.workload.phases:  # the phases start on the testbed's clock: its seconds / k in paper time
        phases = tuple(
            PhaseModel(round(at / k * 1e9), rate, tuple(names.index(n) for n in cls))
            for at, rate, cls in phase_schedule(spec, point)
        )
    else:
        phases = (PhaseModel(0, point.load_krps * 1000.0, tuple(range(len(classes)))),)
    system = get_system(point.system)
    rain = system.name == "rain"
    quota = int(point.params.get("initial_quota", 1)) if system.tokens_first else 1
    cap, entries = queue_capacity_of(spec)
    # admission control (paper 4): Q_max = the switch queue's capacity + the workers' bounds, as the run caps them (experiment/point.py)
    q_max = system.admission_cap(entries, threads, point.params)
    cap = system.queue_capacity or cap
    k_tb = dilation or 1.0
    timeout_ns = round(client_timeout_us(spec.workload.mean_service_us * k_tb) / k_tb * 1000)
    adaptive = None
    if rain and point.params.get("adaptive"):
        adaptive = {k2: point.params[k2] for k2 in ("s_th", "r_th", "n_max", "sample_interval_us", "k_samples")}
    return SimPoint(
        point_id=point.id,
        policy=point.system,
        worker_hosts=worker_hosts,
        threads_per_host=per_host,
        worker_slices=tuple(slices),
        quota=quota,
        queue_capacity=cap,
        classes=classes,
        arrival=spec.workload.arrival,
        phases=phases,
        warmup_ns=warmup_ns,
        measure_ns=measure_ns,
        timeout_ns=timeout_ns,
        max_outstanding=max(1, q_max),
        network=network,
        seed=seed,
        adaptive=adaptive,
        interval_ns=interval_of(measure_ns),
        # a large task waits only while its ring slot cannot wrap onto a task still waiting
        # or held: ring slots - the largest registered quota (switch/control/controller.py)
        policy_params={**point.params, "large_cap": RING_SLOTS - quota} if rain else dict(point.params),
    )


@dataclass
class Plan:
    """The points of a simulated run and what builds their SimPoints."""

    spec: Spec
    points: list[Point]
    worker_hosts: int
    threads_per_host: int
    network: Network
    like: dict | None = None  # like.py: the measured run's identity
    extra: dict = field(default_factory=dict)
