"""One point, measured on the testbed: a pipeline of named steps that reads top to bottom.

    prepare_hosts -> program_switch -> start_agents -> await_ready
        -> start_load -> measure -> collect -> judge

Each step is a function of the bench (bench.py) and of what the step before returned.
The load's two steps hold this machine's cores for the point (testbed/measure_lock.py):
from the workers' tokens to the clients' end, never set-up or collection. Retries,
stall re-measurement and segments wrap the whole pipeline, once each (sweeper.py).
Where each file goes is layout.py's."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from ..remote import Background
from ..systems import get as get_system
from ..systems.base import System
from ..testbed.cpu import confined_to, format_cpus, mark, outside, steal_s, testbed_cores, used_s
from ..testbed.measure_lock import measuring
from . import agent_config, layout, outcome, segments
from .bench import AGENT_DONE, REMOTE_PYTHON, Bench
from .coordinator import AgentSite, Coordinator
from .dilation import CAL_IDLE_S, CAL_REST_MAX_S
from .layout import PointDir, RunDir
from .plan import Point, worker_slices
from .queue_sampler import QueueSampler
from .switch_side import PointFailed

if TYPE_CHECKING:
    from switch.control.registration import WorkerRegistration

    from .validity import Verdict

# What a measurement is for, and so where it goes and whether it is judged.
POINT, SEGMENT, CALIBRATION, PROBE = "point", "segment", "calibration", "probe"


def measure_point(
    b: Bench, p: Point, attempt: int = 1, *, calibration: bool = False, probe: bool = False, segment: int | None = None
) -> Verdict | None:
    """Measure p once. A calibration point (calibrate.py) goes to calibration/ and a
    service probe (dilation.probe_service) to service-probe/, and neither has a model or
    a verdict. A segment (segments.py) goes to the point's segments/<segment>/ and is
    checked without the window's checks. `attempt` only names the attempt in the log."""
    kind = CALIBRATION if calibration else PROBE if probe else SEGMENT if segment is not None else POINT
    a = prepare_hosts(b, p, attempt, kind, segment)
    a = program_switch(b, a)
    started = start_agents(b, a)
    ready = await_ready(b, started)
    with cores_for(b, p):
        load = start_load(b, ready)
        window = measure(b, load)
    return judge(b, collect(b, window))


# -- the steps' records, each what one step hands the next ------------------------------
@dataclass
class Attempt:
    p: Point
    system: System
    kind: str
    segment: int | None
    pd: PointDir
    epoch: int
    t0: float  # when the attempt started (time.monotonic())


@dataclass
class Started:
    a: Attempt
    workers: dict[str, Background]
    clients: dict[str, Background]
    slices: list[int]
    threads: int  # per worker host


@dataclass
class Ready:
    s: Started
    regs: dict[str, WorkerRegistration]


@dataclass
class Load:
    r: Ready
    sampler: QueueSampler
    coordinator: Coordinator | None
    links_before: dict
    t_links: float
    delivered: float  # when the first client's start signal arrived
    setup_s: float
    cpu: dict | None  # the calibration's idle and busy marks on this machine's cores


@dataclass
class Window:
    load: Load
    t1: float  # the load's end
    queue_sampling: dict
    coordination: dict | None


# -- the steps ---------------------------------------------------------------------------
def prepare_hosts(b: Bench, p: Point, attempt: int, kind: str, segment: int | None) -> Attempt:
    """Stop what an earlier attempt or run left on the hosts, and give the measurement a
    fresh folder (an interrupted attempt's files are not trusted) with its epoch."""
    t0 = time.monotonic()
    b.phases = []
    b.phase("clean hosts")
    b.clear_leftovers(p, attempt)
    rd = RunDir(b.run_dir)
    pd = {
        CALIBRATION: lambda: rd.calibration,
        PROBE: lambda: rd.service_probe,
        SEGMENT: lambda: segments.segment_dir(rd.point(p.id), segment),
        POINT: lambda: rd.point(p.id),
    }[kind]().fresh()
    epoch = b.next_epoch()
    pd.write_point(asdict(p) | {"epoch": epoch} | ({"segment": segment} if segment is not None else {}))
    return Attempt(p, get_system(p.system), kind, segment, pd, epoch, t0)


def program_switch(b: Bench, a: Attempt) -> Attempt:
    """The point's program on the switch (restarted if the point's system needs another),
    its variant's settings, and its queues and tables reset."""
    ctl = switch_for(b, a)
    if a.system.variant_settings:
        ctl.configure(b.settings(a.p))  # this point's variant, written by reset()
    ctl.reset()
    return a


def switch_for(b: Bench, a: Attempt):
    """The point's program on the switch, and its controller over a live session (a new
    one if the switch restarted since the last point: said in the log)."""
    b.phase("reset switch")
    b.use_program(a.p)
    ctl = b.switch.ctl
    took = ctl.ensure_session()
    if took is not None:
        b.log(f"{a.p.id}: the switch had restarted: new BFRuntime session, ports up again ({took:.1f} s)")
    return ctl


def start_agents(b: Bench, a: Attempt) -> Started:
    """Every host's agent, started together and each waited for until ready: workers
    with their tokens off, clients holding their load until their start signal."""
    b.phase("start agents")
    inv, spec, p = b.inv, b.spec, a.p
    threads = spec.workers.threads(inv.shared_system)
    slices = worker_slices(spec, threads * len(inv.workers))
    ctl = b.switch.ctl
    # Admission control (paper 4): Q_max = switch queue capacity + the workers' quotas,
    # shared by the clients; a client at its cap holds new requests back.
    own_queue = sum(r.size for r in ctl.settings.regions().values()) if a.system.own_queue else 0
    q_max = a.system.admission_cap(own_queue, threads * len(inv.workers), p.params)

    def start(name: str) -> Background:
        h = inv.host(name)
        out = b.remote_dir(h, p, h.role)
        if h.role == "worker":
            cfg = agent_config.worker(inv, spec, p, a.system, name, out, slices=slices)
        else:
            cfg = agent_config.client(inv, spec, p, name, out, q_max=q_max, epoch=a.epoch, segment=a.segment)
        return b.start_agent(name, h.role, cfg, out)

    started = b.tb.parallel(start, [h.name for h in inv.hosts])
    workers = {w.name: started[w.name] for w in inv.workers}
    clients = {c.name: started[c.name] for c in inv.clients}
    return Started(a, workers, clients, slices, threads)


def await_ready(b: Bench, s: Started) -> Ready:
    """The workers' registrations (their ids and where their rings are), programmed into
    the switch: after this, a task to any worker has somewhere to go."""
    from switch.control.registration import WorkerRegistration

    inv, p, pd = b.inv, s.a.p, s.a.pd

    def fetch(name: str) -> WorkerRegistration:
        out = b.remote_dir(inv.host(name), p, "worker")
        local = pd.worker(name) / layout.REGISTRATION
        b.tb.remotes[name].get(str(out / layout.REGISTRATION), local)
        data = json.loads(local.read_text())
        i = [w.name for w in inv.workers].index(name)
        per = {wid: s.slices[i * s.threads + j] for j, wid in enumerate(data["worker_ids"])}
        return WorkerRegistration.from_json(name, data, slices=per)

    regs = b.tb.parallel(fetch, list(s.workers))
    b.phase("program switch")
    b.switch.ctl.program(workers=list(regs.values()))
    return Ready(s, regs)


@contextmanager
def cores_for(b: Bench, p: Point):
    """One load at a time on each of the testbed's cores (testbed/measure_lock.py): its
    own when it is confined to some (emulation.cpus), else every core of this machine."""
    inv = b.inv
    if not inv.shared_system:
        yield
        return
    own = confined_to(inv)
    with measuring(inv.emulation.slot if inv.emulation else None, p.id, b.log, cpus=own) as waited:
        if waited >= 1:
            which = f"cores {format_cpus(own)}" if own else "this machine's cores"
            b.log(f"{p.id}: {which} are free after {waited:.0f} s: measuring")
        yield


def start_load(b: Bench, r: Ready) -> Load:
    """Tokens first, then the load. The workers' tokens are on, and waiting in the
    switch, before the first task arrives: started together, the clients' first tasks
    would wait for tokens still on their way and the point would open with a backlog
    that the warm-up must drain (large tasks beyond the rings rejected). The switch's
    queue is sampled from before the clients' start signals until they are done; the
    links are read just outside that (the sampler has the session meanwhile)."""
    b.phase("start load")
    s, a = r.s, r.s.a
    p, inv, ctl = a.p, b.inv, b.switch.ctl
    links_before, t_links = ctl.links(), time.monotonic()
    b.tb.parallel(lambda n: b.signal(n, s.workers[n]), list(s.workers))
    if a.system.tokens_first:  # the baselines' workers hold nothing in the switch before the load
        b.switch.await_tokens(int(p.params.get("initial_quota", 1)) * s.threads * len(inv.workers))
    cpu = idle_marks(b, a)
    ctl_lock = threading.Lock()
    sampler = QueueSampler(ctl, p.warmup_s + p.measure_s, ctl_lock)
    try:
        coordinator = _coordinator(b, r, ctl_lock)
        cpu = load_marks(b, cpu)
        delivered = b.tb.parallel(lambda n: b.signal(n, s.clients[n]), list(s.clients))
    except BaseException:
        sampler.stop(a.pd)
        raise
    first = min(delivered.values())
    sampler.load_started(first)
    if coordinator is not None:
        coordinator.start(first)
    return Load(r, sampler, coordinator, links_before, t_links, first, time.monotonic() - a.t0, cpu)


def idle_marks(b: Bench, a: Attempt) -> dict | None:
    """A calibration's idle testbed on a shared-core testbed (idle_cpu): its programs
    up, no load yet. None for any other measurement."""
    inv = b.inv
    if a.kind != CALIBRATION or not inv.shared_system:  # this machine's cores are the testbed's
        return None
    machines = {m.name: m.netns for m in [inv.switch, *inv.hosts] if m.netns}
    idle = idle_cpu(machines, agent_config.long_idle_s(agent_config.mean_service_ns(b.spec, a.p)))
    return {"machines": machines, "idle": idle}


def load_marks(b: Bench, cpu: dict | None) -> dict:
    """Just before the load starts: the testbed's CPU so far (a calibration's), and the
    hypervisor's steal on this machine's cores (on a shared-core testbed, the
    testbed's), or on those it is confined to."""
    if cpu is not None:
        cpu["busy0"] = mark(cpu["machines"])
    return (cpu or {}) | {"w0": time.monotonic(), "steal0": steal_s(confined_to(b.inv) or None)}


def write_cpu(b: Bench, a: Attempt, cpu: dict, t1: float) -> None:
    """cpu.json, on a shared-core testbed: the hypervisor's share of the testbed's cores
    during the load (a VM's steal time: while it runs something else, the client cannot
    keep its schedule, and the validity checks of that schedule say so), and a
    calibration's CPU (calibrate.summarise: the CPU a request costs)."""
    inv, p = b.inv, a.p
    if not inv.shared_system:
        return
    w0, own, n = cpu["w0"], confined_to(inv), testbed_cores(inv)
    out = {"cores": n, "steal_share": round((steal_s(own or None) - cpu["steal0"]) / ((t1 - w0) * n), 5)}
    if "busy0" in cpu:
        out.update(
            cpu["idle"],
            load_busy_s=round(used_s(cpu["busy0"], mark(cpu["machines"])), 3),
            load_wall_s=round(t1 - w0, 3),
            requests=round(p.offered_rps * (p.warmup_s + p.measure_s)),
        )
        if own:  # the calibration: does every thread of the testbed, its programs up, stay on them?
            out.update(cpus=own, outside=[asdict(t) for t in outside(cpu["machines"], own)])
    a.pd.write_cpu(out)


def _coordinator(b: Bench, r: Ready, ctl_lock: threading.Lock) -> Coordinator | None:
    """Algorithm 1's slice moves across the worker hosts, for a point that adapts."""
    p, inv = r.s.a.p, b.inv
    adaptive = agent_config.adaptive(p)
    if adaptive is None:
        return None
    sites = [
        AgentSite(
            host=n,
            remote=b.tb.remotes[n],
            out_dir=b.remote_dir(inv.host(n), p, "worker"),
            agent_dir=PurePosixPath(inv.host(n).deploy_root) / "agent",
            base=r.regs[n].worker_ids[0],
            threads=r.s.threads,
        )
        for n in r.s.workers
    ]
    return Coordinator(sites, b.switch.ctl, ctl_lock, adaptive["control_interval_s"], REMOTE_PYTHON, b.log)


def measure(b: Bench, load: Load) -> Window:
    """Warm-up and measurement: until every client agent says it is done."""
    s, a = load.r.s, load.r.s.a
    p = a.p
    b.phase(f"measure ({p.warmup_s:g} s warm-up + {p.measure_s:g} s)")
    budget = p.warmup_s + p.measure_s + 2 * agent_config.timeout_us(b.spec, p) / 1e6 + 30
    coordination = None
    try:
        b.tb.parallel(
            lambda n: b.tb.remotes[n].wait_ready(
                s.clients[n], log_regex=AGENT_DONE, timeout=budget, quiet_s=p.warmup_s + p.measure_s
            ),
            list(s.clients),
        )
    finally:
        if load.coordinator is not None:
            coordination = load.coordinator.stop(a.pd)
        queue_sampling = load.sampler.stop(a.pd)
    t1 = time.monotonic()
    write_cpu(b, a, load.cpu, t1)
    return Window(load, t1, queue_sampling, coordination)


def collect(b: Bench, w: Window) -> Window:
    """The switch's links and registers, every host's files, and whether every agent
    and program lived through the measurement (outcome.py): if not, the point failed."""
    load = w.load
    s, a = load.r.s, load.r.s.a
    p, pd, inv, ctl = a.p, a.pd, b.inv, b.switch.ctl
    if ctl.switch_restarted:
        # Its queues and tables were gone mid-measurement: the point is not trusted.
        raise PointFailed(f"{p.id}: the switch restarted during the measurement")
    links = ctl.links_between(load.links_before, ctl.links())
    pd.write_links({"window_s": round(time.monotonic() - load.t_links, 3), "ports": links})
    b.phase("stop")
    agents = {
        **{f"w:{n}": (n, bg, 15) for n, bg in s.workers.items()},
        **{f"c:{n}": (n, bg, 5) for n, bg in s.clients.items()},
    }
    how = b.tb.parallel(
        lambda key: b.tb.remotes[agents[key][0]].stop(agents[key][1], grace=agents[key][2]), list(agents)
    )
    b.running = []
    b.phase("collect")

    def get(n: str) -> None:
        role = inv.host(n).role
        b.tb.remotes[n].get_tree(str(b.remote_dir(inv.host(n), p, role)), pd.host_dir(role, n))
        b.tb.remotes[n].get(
            str(PurePosixPath(b.tb.remotes[n].target.run_dir) / f"{role}-agent.log"),
            pd.host_dir(role, n) / layout.AGENT_LOG,
            check=False,
        )

    b.tb.parallel(get, [h.name for h in inv.hosts])
    pd.write_snapshot(ctl.snapshot())
    gone = [n for n in s.workers if how[f"w:{n}"] == "not running"]
    died = outcome.problems(pd, list(s.workers), list(s.clients), gone_before_stop=gone)
    if died:
        raise PointFailed("; ".join(died))
    if load.coordinator is not None and load.coordinator.error:
        raise PointFailed(f"{p.id}: the coordinator could not move a worker: {load.coordinator.error}")
    return w


def judge(b: Bench, w: Window) -> Verdict | None:
    """The model beside the point and its validity checks (a segment's without the
    window's); a calibration or a probe is not judged. Then the point's timing."""
    extra = {"switch_queue_sampling": w.queue_sampling, "coordinator": w.coordination}
    return judge_attempt(b, w.load.r.s.a, w.load.setup_s, w.t1, extra)


def judge_attempt(b: Bench, a: Attempt, setup_s: float, t1: float, extra: dict) -> Verdict | None:
    """judge's work for any pipeline (rpc_point.py's too): `setup_s` the seconds before
    the load started, `t1` when it ended, `extra` more of the point's timing record."""
    if a.kind in (CALIBRATION, PROBE):
        b.phase("done")
        return None
    b.phase("validity")
    from .model_beside import write as write_model
    from .validity import check_point

    if a.kind == POINT:
        write_model(a.pd, asdict(a.p), RunDir(b.run_dir).read_manifest(), b.spec)  # for model_agreement
    verdict = check_point(a.pd.path, asdict(a.p), b.spec.validity, segment=a.kind == SEGMENT)
    b.phase("done")
    b.overheads.append(setup_s + (time.monotonic() - t1))
    a.pd.write_timing(
        {
            "setup_s": round(setup_s, 3),
            "measure_wall_s": round(t1 - a.t0 - setup_s, 3),
            "teardown_s": round(time.monotonic() - t1, 3),
            "overhead_s": round(b.overheads[-1], 3),
            "phases_s": dict(b.phases[:-1]),
            **extra,
        }
    )
    return verdict


def idle_cpu(machines: dict[str, str], long_idle_s: float) -> dict:
    """The calibration's idle testbed: agents and programs started, tokens on, no
    load, once the pollers have gone to their long naps (no frame comes meanwhile),
    over CAL_IDLE_S: the testbed's processes alone, and with the runner."""
    if long_idle_s > CAL_REST_MAX_S:
        return {}
    time.sleep(long_idle_s + 0.1)  # no frame arrives: the pollers' own long-idle threshold passes
    t0, before = time.monotonic(), mark(machines)
    time.sleep(CAL_IDLE_S)  # the measurement window itself
    after = mark(machines)
    wall = time.monotonic() - t0
    runner = after.own_s - before.own_s
    return {
        "idle_testbed_cores": round((used_s(before, after) - runner) / wall, 4),
        "idle_cores": round(used_s(before, after) / wall, 4),
    }
