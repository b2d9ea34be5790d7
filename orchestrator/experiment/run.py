"""Running a spec on a testbed: the resumable sweeper.

    run_dir = run(spec_path, inventory)                   # a new run
    run_dir = run(spec_path, inventory, resume=run_dir)   # continue an interrupted one

Per point: reset the switch, start the worker agents and wait until they are ready,
program the switch with their registrations, turn their tokens on, start the client
agents (warm-up, measurement) while sampling the switch's queues, stop everything,
collect every file over SFTP into points/<id>/, snapshot the switch's registers and
counters, run the validity checks, and only then mark the point done (with its
verdict). Where each file goes is layout.py's. Infrastructure failures (a host, the switch, an
agent) are retried a bounded number of times, each retry after waiting (bounded) until
the testbed answers again (retry.py), then the point is marked failed with each
attempt's reason and the sweep goes on. Ctrl-C stops the remote processes, puts the
point back to todo and leaves a run that `--resume` continues (failed points included).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..errors import RainmakerError, UsageError, one_line
from ..inventory import Host, Inventory
from ..remote import Background
from ..simulate.model import RING_SLOTS, client_timeout_us
from ..systems import get as get_system
from ..testbed.cpu import cores, mark, steal_s, used_s
from ..testbed.measure_lock import measuring
from . import layout, outcome, segments
from .coordinator import AgentSite, Coordinator
from .dilation import (
    CAL_IDLE_S,
    CAL_REST_MAX_S,
    choose_dilation,
    probe_service,
    size_windows,
    with_service,
    with_windows,
)
from .layout import PointDir, RunDir
from .machines import Testbed, deploy, host_facts
from .plan import Point, TestbedShape, phase_schedule, plan, worker_slices
from .progress import Progress
from .provenance import manifest
from .retry import DEFAULT_BUDGET_S, Backoff, Waiter, testbed_answers
from .spec import Spec
from .spec import load as load_spec
from .sweep import DONE, FAILED, Sweep

if TYPE_CHECKING:
    from .validity import Verdict

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = {"adaptive", "baselines", "time_varying", "rocksdb"}
NOT_YET = {
    "baselines": "the baseline switch programs (R2P2-SW, RackSched-SW, Draconis-SW, Pallas-SW) are not built yet; "
    "run with systems: [rain]",
}
REMOTE_PYTHON = "python3"  # the host's own Python runs the agents (standard library only)


def kv_path(spec: Spec, h: Host) -> str:
    """The host's RocksDB folder for the spec's database: named by its parameters, so a
    run reuses a database built before and another parameter set gets its own."""
    db = spec.database
    name = f"k{db.keys}-kb{db.key_bytes}-ib{db.item_bytes}-s{db.seed}"
    return str(PurePosixPath(h.deploy_root) / "kv" / name)


def _kv(spec: Spec, h: Host, k: float) -> dict:
    db = spec.database
    return {
        "path": kv_path(spec, h),
        "keys": db.keys,
        "key_bytes": db.key_bytes,
        "item_bytes": db.item_bytes,
        "seed": db.seed,
        "dilation": k,  # run the operation, then hold it until k x its run time
    }


def _kv_build_s(spec: Spec) -> float:
    """How long rain-worker may take to get ready when it must build the database:
    RocksDB writes a batch-loaded database at tens of MB/s even on a small VM."""
    db = spec.database
    return 60.0 + db.keys * (db.key_bytes + db.item_bytes) / 5e6


def _service_arg(c, p: Point, k: float, spec: Spec) -> str:
    if p.handler == "rocksdb":
        return c.service.client_arg(k, spec.database)
    return c.service.client_arg(k)


class PointFailed(RainmakerError):
    """A point could not be measured (after its retries)."""


def supported_or_explain(spec: Spec) -> None:
    missing = sorted(spec.needs() - SUPPORTED)
    if missing:
        lines = [f"{spec.name} needs what this version of rainmaker cannot run yet:"]
        lines += [f"  - {m}: {NOT_YET.get(m, 'not supported')}" for m in missing]
        raise UsageError("\n".join(lines), fix="`rainmaker plan` shows its points; trim the spec to run part of it now")


def shape_of(inv: Inventory) -> TestbedShape:
    # Time is dilated wherever the machines share this one (an emulated switch, or
    # tofino-model with namespace hosts), not only with the software switch.
    return TestbedShape(worker_hosts=len(inv.workers), client_hosts=len(inv.clients), emulated=inv.shared_system)


# -- provenance ------------------------------------------------------------------------


# -- the run ---------------------------------------------------------------------------


def _eal(inv: Inventory, host: Host, role: str, lcores: str) -> dict:
    prefix = f"rm{inv.emulation.slot}-{host.name}-{role}" if inv.emulation else f"rain-{host.name}-{role}"
    # Namespace hosts share this machine's few huge pages: they run without (virtual
    # ports need none); a real host uses the pages provisioning reserved for it.
    return {
        "lcores": lcores,
        "no_huge": host.netns is not None,
        "devices": host.nic.eal_device_args,
        "file_prefix": prefix,
    }


def client_seed(p: Point, client: int, segment: int | None = None) -> int:
    """A client's random seed for a point: a stable hash of the point id (system, load,
    repetition) and the client. Each point draws its own arrivals and service times, and
    the same point the same ones in every run. One seed per repetition, as before, gave
    every load of a curve the same draws: its points erred together (measured: each of
    8 points drew 2-5% below its rate). A point measured in segments (segments.py) draws
    anew in each: with one seed its 15 segments were 15 runs of the same requests, and
    the merged window held no more independent samples than one segment."""
    key = f"{p.id}/client{client}" + (f"/segment{segment}" if segment is not None else "")
    h = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**62 - 1)  # rain-client adds the lcore index


def _lcores(inv: Inventory, host: Host) -> str:
    if host.netns is not None:
        return "0@(0-1)"  # float over this machine's two cores, shared by everything
    return ",".join(str(c) for c in host.cores) or "0"


def _idle(inv: Inventory, k: float, mean_service_ns: float) -> str:
    """What polling loops do when idle. Hardware: spin (dedicated cores). Emulated: every
    busy poller steals one of two shared cores from the switch, so sleep between polls,
    for at most ~0.5 us of paper time (k x 0.5 us, capped at 100 us). Measured here:
    shorter naps for the client starve the switch more than they sharpen the sends.
    After 100 dilated mean tasks without a frame (at least 100 ms of wall-clock time: no
    load gets there) a poller naps 10 ms, so that an idle testbed costs next to nothing."""
    if not inv.shared_system:
        return "spin"
    long_ns = round(_long_idle_s(mean_service_ns) * 1e9)
    return f"sleep:{int(min(100_000, max(1_000, 500 * k)))}:{long_ns}"


def _long_idle_s(mean_service_ns: float) -> float:
    """After how long without a frame a poller takes its long naps: 100 dilated mean
    tasks, at least 100 ms."""
    return max(100e6, 100 * mean_service_ns) / 1e9


class QueueSampler:
    """Samples the switch's queues while the load runs: each configured slice's signed
    token balance (negative: tasks queued in the switch, positive: tokens), read from a
    thread through the controller's BFRuntime session; stop() writes switch/queue.jsonl.

    One Read of one small register per sample, at most MAX_HZ and at most MAX_SAMPLES
    per point: bf_switchd answers from its own CPU, but the emulator shares this
    machine's two cores with the load, and a read there takes milliseconds. The main
    thread only waits on the hosts meanwhile, so the session has no other user.

    Sampling starts before the start signals; time 0 is the load's start, which the
    runner marks when the client's signal has been delivered (its pkill returned):
    opening an SSH command takes long on a busy machine, so the signals' start is not it."""

    MAX_HZ = 10.0
    MAX_SAMPLES = 200

    def __init__(self, ctl, expected_s: float, lock: threading.Lock | None = None):
        self.ctl = ctl
        self.lock = lock or threading.Lock()  # shared with the coordinator, the session's other user
        # Rain's signed balance per slice; a baseline's program has no such register
        self.enabled = hasattr(ctl, "balances")
        self.period_s = max(1.0 / self.MAX_HZ, expected_s / self.MAX_SAMPLES)
        self.samples: list[tuple[float, dict[int, int]]] = []  # (monotonic time, balance per slice)
        self.reads_s: list[float] = []
        self.error: str | None = None
        self.load_start: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switch-queue-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if not self.enabled:
            return
        try:
            while not self._stop.is_set():
                t = time.monotonic()
                with self.lock:
                    balance = self.ctl.balances()
                self.reads_s.append(time.monotonic() - t)
                self.samples.append((t, balance))
                # a period from this read's start, never less: a slow read is not caught up
                self._stop.wait(max(0.0, t + self.period_s - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - the point goes on without the series; timing.json says why
            self.error = one_line(e)

    def load_started(self, when: float) -> None:
        """The load's start (time.monotonic()): time 0 of the series."""
        self.load_start = when

    def stop(self, pd: PointDir) -> dict:
        """Stop sampling, write the series (times from the load's start, or from the
        first sample if it was never marked); what it cost, for timing.json."""
        self._stop.set()
        self._thread.join(timeout=10)
        t0 = self.load_start if self.load_start is not None else (self.samples[0][0] if self.samples else 0.0)
        if self.enabled:
            pd.write_switch_queue([(t - t0, b) for t, b in self.samples])
        r = sorted(self.reads_s)
        return {
            "samples": len(self.samples),
            "period_s": round(self.period_s, 4),
            "read_ms_median": round(1000 * r[len(r) // 2], 2) if r else None,
            "read_ms_max": round(1000 * r[-1], 2) if r else None,
            "load_start_marked": self.load_start is not None,
            "error": self.error,
        }


class Runner:
    def __init__(
        self,
        spec_path: Path,
        spec: Spec,
        inv: Inventory,
        inv_path: Path | None,
        run_dir: Path,
        points: list[Point],
        sweep: Sweep,
        *,
        retries: int,
        log,
        progress,
        backoff: Backoff | None = None,
    ):
        self.spec_path, self.spec, self.inv, self.inv_path = spec_path, spec, inv, inv_path
        self.run_dir, self.points, self.sweep = run_dir, points, sweep
        self.retries, self.log, self.progress = retries, log, progress
        self.backoff = backoff or Backoff()  # the waits between attempts (retry.py)
        self.tb = Testbed(inv)
        self.stamp = run_dir.name
        self.bfrt = None
        self.ctl = None
        self.program: str | None = None  # the P4 program the switch runs for this run
        self.emulator_args: list[str] = []  # and the arguments its emulator was started with
        self.running: list[tuple[str, Background]] = []
        self.overheads: list[float] = []
        self._phases: list[tuple[str, float]] = []
        # Each measurement's identity in its requests (rain-client --epoch): consecutive
        # ones always differ, and a run starts where another is unlikely to have been.
        self._epoch = int.from_bytes(os.urandom(1), "little")

    # -- set-up ----------------------------------------------------------------------
    def prepare(self) -> None:
        self.phase("clean")
        hosts = [h.name for h in self.inv.hosts]  # not the switch: its software may be kept running
        killed = self.tb.parallel(lambda n: self.tb.remotes[n].kill_leftovers(), hosts)
        n_killed = sum(len(v) for v in killed.values())
        if n_killed:
            self.log(f"stopped {n_killed} leftover process group(s) of an earlier run")
        self.phase("deploy")
        deploy(self.tb, self.log)
        self.phase("switch")
        self._use_program(self.points[0].system if self.points else "rain")
        # Heavy imports (pandas, scipy.stats) now, not inside the first point's timing.
        import pandas  # noqa: F401
        import scipy.stats  # noqa: F401

        from . import analyze, validity  # noqa: F401

    def _use_program(self, system: str) -> None:
        """The switch runs `system`'s P4 program, and self.ctl is its controller: at
        set-up the first point's, then another whenever a point's system needs it (points
        are planned system by system, so a run of five systems restarts the switch four
        times per repetition)."""
        args = self._emulator_args(system)
        # the same program started with other arguments (R2P2's pass time is k x 1 us, and
        # an automatic dilation chooses k after the set-up started the first program)
        if self.program == system and self.ctl is not None and args == self.emulator_args:
            return
        from switch.control.registry import controller_class

        from .. import switchd

        if self.program is None and not args and switchd.status(self.inv).program in (system, None):
            # a healthy switch that runs this program (or is down, or cannot tell) is kept
            self.bfrt = switch_session(self.inv, self.log, system)
        else:
            if self.bfrt is not None:
                self.bfrt.close()
                self.bfrt = None
            self.log(f"switch {self.inv.switch.name}: starting the {system} program")
            switchd.start(self.inv, system, restart=True, log=self.log, emulator_args=args)
            self.bfrt = switchd.connect(self.inv, program=system, bind=True, client_id=1)
        first = next((p for p in self.points if p.system == system), None)
        self.ctl = controller_class(get_system(system).program)(self.bfrt, self.inv, self._settings(system, first))
        waited = self.ctl.bring_up_ports()
        self.program, self.emulator_args = system, args
        self.log(f"switch runs {system}; ports up ({waited:.1f} s)")

    def _emulator_args(self, system: str) -> list[str]:
        if self.inv.switch.kind != "emulated":
            return []
        k = next((p.dilation for p in self.points if p.system == system), 1.0)
        return get_system(system).emulator_args(k)

    def _settings(self, system: str, p: Point | None):
        """The controller's settings for a point of `system` (its variant's parameters)."""
        return get_system(system).settings(self.spec, p.params if p is not None else {}, self.inv)

    def _await_tokens(self, expected: int, timeout: float = 15.0) -> None:
        """Wait until the switch holds `expected` tokens over its slices: every worker
        thread has issued its quota (readiness probed, not slept for)."""
        deadline = time.monotonic() + timeout
        seen: dict[int, int] = {}
        while True:
            seen = self.ctl.balances()
            if sum(v for v in seen.values() if v > 0) >= expected:
                return
            if time.monotonic() > deadline:
                raise PointFailed(
                    f"the workers' tokens did not reach the switch in {timeout:g} s: {sum(seen.values())} "
                    f"of {expected} waiting (balance per slice {seen}); see the workers' worker.log"
                )
            time.sleep(0.01)

    def bfrt_sha(self) -> str | None:
        try:
            # The bf-rt.json the switch serves: the program's identity as the control plane sees it.
            return hashlib.sha256(json.dumps(self.bfrt.info.p4_json, sort_keys=True).encode()).hexdigest()
        except AttributeError:
            return None

    def phase(self, name: str) -> None:
        now = time.monotonic()
        if self._phases:
            last, t = self._phases[-1]
            self._phases[-1] = (last, round(now - t, 3))
        self._phases.append((name, now))
        self.progress.phase(name)

    # -- one point -------------------------------------------------------------------
    def remote_dir(self, host: Host, p: Point, role: str) -> PurePosixPath:
        return PurePosixPath(host.deploy_root) / "run" / "points" / self.stamp / p.id / role

    def run_point(
        self, p: Point, *, calibration: bool = False, probe: bool = False, segment: int | None = None
    ) -> Verdict | None:
        """Measure one point; a calibration point (calibrate.py) goes to calibration/
        and a service probe (dilation.probe_service) to service-probe/, and neither has a
        model or a verdict. A segment (segments.py) goes to the point's
        segments/<segment>/ and is checked without the window's checks."""
        spec, inv = self.spec, self.inv
        rd = RunDir(self.run_dir)
        if calibration:
            pd = rd.calibration
        elif probe:
            pd = rd.service_probe
        elif segment is not None:
            pd = segments.segment_dir(rd.point(p.id), segment)
        else:
            pd = rd.point(p.id)
        pd.fresh()  # an interrupted attempt's files are not trusted
        self._epoch = self._epoch % 255 + 1  # 1..255
        epoch = self._epoch
        pd.write_point(asdict(p) | {"epoch": epoch} | ({"segment": segment} if segment is not None else {}))
        t0 = time.monotonic()
        self._phases = []
        self.phase("reset switch")
        system = get_system(p.system)
        self._use_program(p.system)
        if system.variant_settings:
            self.ctl.configure(self._settings(p.system, p))  # this point's variant, written by reset()
        took = self.ctl.ensure_session()
        if took is not None:
            self.log(f"{p.id}: the switch had restarted: new BFRuntime session, ports up again ({took:.1f} s)")
        self.ctl.reset()
        # Workers: agents start rain-worker with tokens off; registrations come back.
        self.phase("start agents")
        threads = spec.workers.threads(inv.shared_system)
        slices = worker_slices(spec, threads * len(inv.workers))
        quota = int(p.params.get("initial_quota", 1))
        k = p.dilation
        mean_service_ns = spec.workload.mean_service_us * 1000 * k
        adaptive = None
        if p.system == "rain" and p.params.get("adaptive"):
            r = p.params
            # K samples of dt each, in testbed time (paper: 1000 x 10 us = 10 ms).
            adaptive = {
                "s_th": r["s_th"],
                "r_th": r["r_th"],
                "n_max": r["n_max"],
                "control_interval_s": r["k_samples"] * r["sample_interval_us"] * 1e-6 * k,
            }
        regs = {}

        def start_worker(name: str) -> dict:
            h = inv.host(name)
            i = [w.name for w in inv.workers].index(name)
            out = self.remote_dir(h, p, "worker")
            cfg = {
                "binary": str(PurePosixPath(h.deploy_root) / "bin" / "rain-worker"),
                "out_dir": str(out),
                "eal": _eal(inv, h, "worker", _lcores(inv, h)),
                "sample_period_s": max(0.01, min(0.5, p.measure_s / 50)),
                "adaptive": adaptive,
                "worker": {
                    "switch_mac": inv.switch.service_mac,
                    "switch_ip": inv.switch.service_ip,
                    "src_ip": h.nic.ip,
                    "threads": threads,
                    "worker_base": i * threads,
                    "mode": system.worker_mode,
                    "handler": p.handler,
                    "quota": quota,
                    "slice": slices[i * threads],
                    "slot_size": 2048,
                    "ring_slots": RING_SLOTS,
                    "idle": _idle(inv, k, mean_service_ns),
                    "start_disabled": True,
                },
            }
            if p.handler == "rocksdb":
                cfg["worker"]["kv"] = _kv(spec, h, k)
                # the first point on a host builds its database before rain-worker is ready
                cfg["ready_timeout_s"] = _kv_build_s(spec)
            # How the switch's WRITEs reach the ring: the NIC (ibverbs) or the worker itself,
            # and whether that NIC checks their iCRC (the switch leaves it zero).
            rdma = {
                "transport": h.nic.rdma_transport,
                "qp_type": inv.roce.qp_type,
                "icrc_check": inv.roce.nic_checks_icrc(h.nic.rdma_transport),
            }
            if h.nic.rdma_transport == "ibverbs":
                rdma.update(
                    device=h.nic.rdma_device,
                    gid_index=h.nic.gid_index,
                    mtu=inv.roce.mtu,
                    dscp=inv.roce.dscp,
                    roce_facts=str(PurePosixPath(h.deploy_root) / "facts" / "roce.json"),
                )
            cfg["worker"]["rdma"] = rdma
            # a large task's payload fetched from its client (Draconis-SW's pulls; Rain's
            # descriptors of a slot pre-written before a move): a few round trips' wait
            if system.fetches_payloads:
                cfg["worker"]["fetch_timeout_ns"] = int(min(6e10, max(1e6, 20 * mean_service_ns)))
            return self._start_agent(name, "worker", cfg, out)

        # Clients: the load profile; latency from intended send times.
        # Admission control (paper 4): Q_max = switch queue capacity + the workers' quotas,
        # shared by the clients; a client at its cap holds new requests back.
        own_queue = sum(r.size for r in self.ctl.settings.regions().values()) if system.own_queue else 0
        q_max = system.admission_cap(own_queue, threads * len(inv.workers), p.params)
        n_clients = len(inv.clients)
        timeout_us = int(client_timeout_us(mean_service_ns / 1000))
        large = [c.payload for c in spec.workload.classes]
        classes = [
            f"{c.name}:{c.weight}:{c.task_type}:{_service_arg(c, p, k, spec)}:{c.payload.bytes}"
            for c in spec.workload.classes
        ]
        rate = p.offered_rps / n_clients
        trace = rate * (p.warmup_s + p.measure_s) <= 2_000_000
        # A time-varying workload: each phase's rate (dilated, this client's share) and classes.
        schedule = ",".join(
            f"{at:g}:{rps / k / n_clients:.3f}:{'+'.join(names)}" for at, rps, names in phase_schedule(spec, p)
        )

        def start_client(name: str) -> Background:
            h = inv.host(name)
            i = [c.name for c in inv.clients].index(name)
            out = self.remote_dir(h, p, "client")
            c = {
                "client_id": i,
                "src_ip": h.nic.ip,
                "dst_mac": inv.switch.service_mac,
                "dst_ip": inv.switch.service_ip,
                "arrival": spec.workload.arrival,
                "rate": round(rate, 3),
                "classes": classes,
                "warmup_s": p.warmup_s,
                "measure_s": p.measure_s,
                "max_outstanding": max(1, q_max // n_clients),
                "timeout_us": timeout_us,
                "dilation": k,
                "seed": client_seed(p, i, segment),
                "trace": trace,
                "idle": _idle(inv, k, mean_service_ns),
                "wait_start": True,
                "epoch": epoch,
            }
            if schedule:
                del c["rate"]
                c["schedule"] = schedule
            if large and large[0].large_fraction > 0:
                c["large_fraction"], c["large_bytes"] = large[0].large_fraction, large[0].large_bytes
            cfg = {
                "binary": str(PurePosixPath(h.deploy_root) / "bin" / "rain-client"),
                "out_dir": str(out),
                "eal": _eal(inv, h, "client", _lcores(inv, h)),
                "client": c,
                # Above the switch's data plane (20): the client is the measuring instrument.
                "realtime": 30 if inv.shared_system else 0,
                # and on shared cores (a VM) its CPU must wake when a send is due (WakeLatency)
                "cpu_wake_latency_us": 0 if inv.shared_system else None,
            }
            return self._start_agent(name, "client", cfg, out)

        # Workers and clients initialise together; clients hold their load until the
        # switch is programmed and the workers' tokens are on (SIGUSR1, below).
        started = self.tb.parallel(
            lambda n: start_worker(n) if inv.host(n).role == "worker" else start_client(n), [h.name for h in inv.hosts]
        )
        bgs = {n: started[n] for n in (w.name for w in inv.workers)}
        cbgs = {n: started[n] for n in (c.name for c in inv.clients)}
        from switch.control.registration import WorkerRegistration

        def fetch_reg(name: str) -> WorkerRegistration:
            out = self.remote_dir(inv.host(name), p, "worker")
            local = pd.worker(name) / layout.REGISTRATION
            self.tb.remotes[name].get(str(out / layout.REGISTRATION), local)
            data = json.loads(local.read_text())
            i = [w.name for w in inv.workers].index(name)
            per = {wid: slices[i * threads + j] for j, wid in enumerate(data["worker_ids"])}
            return WorkerRegistration.from_json(name, data, slices=per)

        regs = self.tb.parallel(fetch_reg, list(bgs))
        self.phase("program switch")
        self.ctl.program(workers=list(regs.values()))
        # One step on every host, SIGUSR1 to the agent (only: the programs it runs have
        # their own meaning for it): worker agents turn their tokens on, client agents
        # start the load. Tasks that arrive before a worker's first token wait in the switch.
        self.phase("start load")
        go = {**{n: bgs[n].pgid for n in bgs}, **{n: cbgs[n].pgid for n in cbgs}}

        def signal(n: str) -> float:
            # Anchored: the group's shell wrapper has the same words later in its command line.
            self.tb.remotes[n].run(
                ["pkill", "-USR1", "-g", str(go[n]), "-f", r"^[^ ]*python3[^ ]* -m hosts\.agent "], timeout=20
            )
            return time.monotonic()  # delivered: the host has started

        # One load at a time on this machine's cores (testbed/measure_lock.py): from the
        # tokens to the clients' end, never set-up or collection.
        turn = ExitStack()
        try:
            if inv.shared_system:
                waited = turn.enter_context(measuring(inv.emulation.slot if inv.emulation else None, p.id, self.log))
                if waited >= 1:
                    self.log(f"{p.id}: this machine's cores are free after {waited:.0f} s: measuring")
            # Tokens first: the workers' tokens are on, and waiting in the switch, before the
            # first task arrives. Started together, the clients' first tasks would wait for
            # tokens still on their way and the point would open with a backlog that the
            # warm-up must drain (large tasks beyond the rings rejected).
            links_before, t_links = self.ctl.links(), time.monotonic()
            self.tb.parallel(signal, list(bgs))
            if system.tokens_first:  # the baselines' workers hold nothing in the switch before the load
                self._await_tokens(quota * threads * len(inv.workers))
            machine_cpu = calibration and inv.shared_system  # this machine's cores are the testbed's
            if machine_cpu:
                machines = {m.name: m.netns for m in [inv.switch, *inv.hosts] if m.netns}
                idle = self._idle_cpu(machines, _long_idle_s(mean_service_ns))
            # The switch queue is sampled from before the clients' start signals until they
            # are done; the links are read just outside that (the sampler has the session meanwhile).
            ctl_lock = threading.Lock()
            sampler = QueueSampler(self.ctl, p.warmup_s + p.measure_s, ctl_lock)
            coordinator = None
            if adaptive is not None:  # Algorithm 1's slice moves, across the worker hosts
                coordinator = Coordinator(
                    [
                        AgentSite(
                            host=n,
                            remote=self.tb.remotes[n],
                            out_dir=self.remote_dir(inv.host(n), p, "worker"),
                            agent_dir=PurePosixPath(inv.host(n).deploy_root) / "agent",
                            base=regs[n].worker_ids[0],
                            threads=threads,
                        )
                        for n in bgs
                    ],
                    self.ctl,
                    ctl_lock,
                    adaptive["control_interval_s"],
                    REMOTE_PYTHON,
                    self.log,
                )
            coordination = None
            try:
                busy0, w0 = (mark(machines) if machine_cpu else None), time.monotonic()
                steal0 = steal_s()  # this machine's: on a shared-core testbed, the testbed's
                delivered = self.tb.parallel(signal, list(cbgs))
                sampler.load_started(min(delivered[n] for n in cbgs))
                if coordinator is not None:
                    coordinator.start(min(delivered[n] for n in cbgs))
                setup_s = time.monotonic() - t0
                self.phase(f"measure ({p.warmup_s:g} s warm-up + {p.measure_s:g} s)")
                budget = p.warmup_s + p.measure_s + 2 * timeout_us / 1e6 + 30
                self.tb.parallel(
                    lambda n: self.tb.remotes[n].wait_ready(
                        cbgs[n], log_regex="rain-agent done", timeout=budget, quiet_s=p.warmup_s + p.measure_s
                    ),
                    list(cbgs),
                )
            finally:
                if coordinator is not None:
                    coordination = coordinator.stop(pd)
                queue_sampling = sampler.stop(pd)
        finally:
            turn.close()
        t1 = time.monotonic()
        if inv.shared_system:
            # The hypervisor's share of this machine's cores during the load (a VM's steal
            # time): while it runs something else, the client cannot keep its schedule,
            # and the validity checks of that schedule say so.
            cpu = {"cores": cores(), "steal_share": round((steal_s() - steal0) / ((t1 - w0) * cores()), 5)}
            if machine_cpu:
                cpu.update(
                    idle,
                    load_busy_s=round(used_s(busy0, mark(machines)), 3),
                    load_wall_s=round(t1 - w0, 3),
                    requests=round(p.offered_rps * (p.warmup_s + p.measure_s)),
                )
            pd.write_cpu(cpu)
        if self.ctl.switch_restarted:
            # Its queues and tables were gone mid-measurement: the point is not trusted.
            raise PointFailed(f"{p.id}: the switch restarted during the measurement")
        links = self.ctl.links_between(links_before, self.ctl.links())
        pd.write_links({"window_s": round(time.monotonic() - t_links, 3), "ports": links})
        self.phase("stop")
        agents = {**{f"w:{n}": (n, bgs[n], 15) for n in bgs}, **{f"c:{n}": (n, cbgs[n], 5) for n in cbgs}}
        how = self.tb.parallel(
            lambda key: self.tb.remotes[agents[key][0]].stop(agents[key][1], grace=agents[key][2]), list(agents)
        )
        self.running = []
        self.phase("collect")

        def get(n: str) -> None:
            role = inv.host(n).role
            self.tb.remotes[n].get_tree(str(self.remote_dir(inv.host(n), p, role)), pd.host_dir(role, n))
            self.tb.remotes[n].get(
                str(PurePosixPath(self.tb.remotes[n].target.run_dir) / f"{role}-agent.log"),
                pd.host_dir(role, n) / layout.AGENT_LOG,
                check=False,
            )

        self.tb.parallel(get, [h.name for h in inv.hosts])
        pd.write_snapshot(self.ctl.snapshot())
        # A worker or agent that died during the measurement: the point is not done (outcome.py).
        gone = [n for n in bgs if how[f"w:{n}"] == "not running"]
        died = outcome.problems(pd, list(bgs), list(cbgs), gone_before_stop=gone)
        if died:
            raise PointFailed("; ".join(died))
        if coordinator is not None and coordinator.error:
            raise PointFailed(f"{p.id}: the coordinator could not move a worker: {coordinator.error}")
        if calibration or probe:
            self.phase("done")
            return None
        self.phase("validity")
        from .model_beside import write as write_model
        from .validity import check_point

        if segment is None:
            write_model(pd, asdict(p), RunDir(self.run_dir).read_manifest(), spec)  # for model_agreement
        verdict = check_point(pd.path, asdict(p), spec.validity, segment=segment is not None)
        self.phase("done")
        self.overheads.append(setup_s + (time.monotonic() - t1))
        pd.write_timing(
            {
                "setup_s": round(setup_s, 3),
                "measure_wall_s": round(t1 - t0 - setup_s, 3),
                "teardown_s": round(time.monotonic() - t1, 3),
                "overhead_s": round(self.overheads[-1], 3),
                "phases_s": dict(self._phases[:-1]),
                "switch_queue_sampling": queue_sampling,
                "coordinator": coordination,
            }
        )
        return verdict

    def _idle_cpu(self, machines: dict[str, str], long_idle_s: float) -> dict:
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

    def calibrate(self) -> dict | None:
        """Measure the testbed itself before the first point (calibrate.py) and record it
        in the manifest, where the model beside every point takes its overheads from.
        A calibration that fails is logged; the run goes on with the default model."""
        from . import calibrate as cal

        if not self.points:
            return None
        point = cal.calibration_point(self.points[0], self.spec.workload.mean_service_us)
        spec = self.spec
        self.spec = cal.calibration_spec(spec)
        self.log("calibrating the testbed: one light point of constant tasks")
        try:
            self._clear_leftovers(point, 1)
            self.run_point(point, calibration=True)
            result = cal.summarise(RunDir(self.run_dir).calibration, point, spec.workload.mean_service_us)
        except (RainmakerError, OSError, TimeoutError, ValueError, KeyError) as e:
            self.stop_all()
            self.log(f"calibration failed: {one_line(e)}; the model uses the testbed kind's defaults")
            return None
        finally:
            self.spec = spec
        rd = RunDir(self.run_dir)
        rd.write_manifest(cal.record(rd.path, rd.read_manifest(), result, point))
        self.log(cal.describe(result))
        return result

    def _start_agent(self, name: str, role: str, cfg: dict, out: PurePosixPath) -> Background:
        r = self.tb.remotes[name]
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(cfg, fh, indent=1)
        try:
            # An earlier attempt's files must not pass for this one's: its worker.log already
            # says "rain-worker ready", its agent.json a clean exit.
            r.run(["rm", "-rf", "--", str(out)], timeout=20)
            r.put(fh.name, str(out / "agent-config.json"))  # creates the folders
        finally:
            Path(fh.name).unlink()
        bg = r.start(
            f"{role}-agent",
            [REMOTE_PYTHON, "-m", "hosts.agent", role, "--config", str(out / "agent-config.json")],
            cwd=str(PurePosixPath(r.target.deploy_root) / "agent"),
        )
        self.running.append((name, bg))
        # the agent is ready once its program is (a database build may hold it)
        r.wait_ready(bg, log_regex="rain-agent ready", timeout=max(60.0, float(cfg.get("ready_timeout_s", 0)) + 30))
        return bg

    def stop_all(self) -> None:
        """Stop whatever agents this run started (Ctrl-C, a failed attempt)."""
        for name, bg in self.running:
            try:
                self.tb.remotes[name].stop(bg, grace=10)
            except RainmakerError:
                pass
        self.running = []

    # -- the sweep -------------------------------------------------------------------
    def sweep_all(self) -> None:
        from .validity import invalid_reason

        pending = self.sweep.pending()
        self.progress.start(len(self.points), len(self.points) - len(pending))
        failed_before = False  # the last attempt failed: the next one waits for the testbed
        for p in pending:
            self.progress.point(p)
            waiter = self._waiter()  # one budget of waiting per point
            last: str | None = None
            failures = stalls = 0  # attempts an outage ended; measurements a stall discarded
            remeasure = self.spec.validity.remeasure_stalled
            while failures <= self.retries:
                attempt = failures + stalls + 1
                if failed_before:
                    try:
                        waiter.until_answering(self._answers, lambda m, pid=p.id: self.log(f"{pid}: {m}"))
                        self._recover()
                    except KeyboardInterrupt:  # Ctrl-C while waiting: the point is todo, its reason kept
                        self.sweep.requeue(p.id, self.sweep.state[p.id].reason or "interrupted")
                        raise
                self.sweep.start(p.id)
                try:
                    self._clear_leftovers(p, attempt)
                    cuts = self._segments(p)
                    verdict = self.run_point(p) if len(cuts) == 1 else self.run_segments(p, cuts)
                except KeyboardInterrupt:
                    self.stop_all()
                    self.sweep.requeue(p.id, "interrupted")
                    raise
                except (RainmakerError, OSError, TimeoutError) as e:  # a switch's errors included
                    last = one_line(e)
                    self.sweep.attempt_failed(p.id, last)
                    self.stop_all()
                    self.log(f"{p.id}: attempt {attempt} failed: {last}")
                    failed_before = True
                    failures += 1
                    continue
                failed_before = False
                if verdict.stalled and stalls < remeasure and len(cuts) == 1:  # a segment is measured again alone
                    # The host, not the system, broke the schedule: measure again, and keep
                    # this attempt where the analysis does not read it (stalled/).
                    stalls += 1
                    why = invalid_reason(verdict)
                    self.sweep.attempt_failed(p.id, f"the host stalled the client, measured again: {why}")
                    RunDir(self.run_dir).set_aside(p.id, self.sweep.state[p.id].attempts)
                    self.log(
                        f"{p.id}: the host stalled the client ({', '.join(verdict.failed)}); "
                        f"measuring it again ({stalls} of at most {remeasure})"
                    )
                    continue
                if not verdict.valid:
                    self.log(f"{p.id}: measured, but not valid: {', '.join(verdict.failed)}")
                self.sweep.finish(p.id, DONE, None if verdict.valid else invalid_reason(verdict), valid=verdict.valid)
                break
            else:
                self.sweep.finish(p.id, FAILED, last)
            self.progress.advance()
        try:
            self._clear_leftovers(None, 0)  # the last point's DPDK runtime folders
        except RainmakerError as e:
            self.log(f"clean-up after the sweep: {one_line(e)}")

    def _segments(self, p: Point) -> list[float]:
        """The lengths of the segments p's window is measured in (segments.py): the
        spec's segment_s, for a static workload's point that does not adapt (a phase or
        a quota decision must see the window whole)."""
        if self.spec.workload.phases or p.params.get("adaptive"):
            return [p.measure_s]
        return segments.lengths(p.measure_s, self.spec.durations(shape_of(self.inv).emulated).segment_s)

    def run_segments(self, p: Point, cuts: list[float]) -> Verdict:
        """Measure p as segments of `cuts` seconds, each its own run checked alone; a
        segment the host stalled (its schedule checks failed) is set aside under
        stalled/ and measured again, up to validity.remeasure_stalled times; then the
        segments merge into p's folder, the model is computed beside the whole window,
        and the point is checked whole."""
        from .model_beside import write as write_model
        from .validity import check_point

        rd = RunDir(self.run_dir)
        pd = rd.point(p.id).fresh()
        pd.write_point(asdict(p) | {"segments": cuts})
        remeasure = self.spec.validity.remeasure_stalled
        for i, seconds in enumerate(cuts, 1):
            for again in range(remeasure + 1):
                if i > 1 or again:
                    self._clear_leftovers(p, again + 1)
                self.log(
                    f"{p.id}: segment {i} of {len(cuts)} ({seconds:g} s)" + (f", again ({again})" if again else "")
                )
                v = self.run_point(replace(p, measure_s=seconds), segment=i)
                if not (v.stalled and again < remeasure):
                    break
                rd.set_aside_segment(p.id, i, again + 1)
                self.log(
                    f"{p.id}: segment {i}: the host stalled the client ({', '.join(v.failed)}); measuring it again"
                )
            if not v.valid:
                self.log(f"{p.id}: segment {i} kept, not valid: {', '.join(v.failed)}")
        self.phase("merge segments")
        for problem in segments.merge(pd):
            self.log(f"{p.id}: merging the segments: {problem}")
        self.phase("validity")
        write_model(pd, asdict(p), rd.read_manifest(), self.spec)
        verdict = check_point(pd.path, asdict(p), self.spec.validity)
        self.phase("done")
        return verdict

    def _waiter(self) -> Waiter:
        return Waiter(self.backoff)

    def _answers(self) -> dict[str, str]:
        return testbed_answers(self.inv)

    def _clear_leftovers(self, p: Point | None, attempt: int) -> None:
        """Before every attempt: stop whatever an earlier attempt or run left on the hosts
        (agents, and rain-worker and rain-client with them: one process group each), and
        remove DPDK runtime folders no process holds any more (a killed program leaves its
        own). Not only after a failure: an attempt that failed while a host was away could
        not stop that host's agent, and the next start would meet it."""
        inv = self.inv

        def one(n: str) -> list:
            h = inv.host(n)
            return self.tb.remotes[n].kill_leftovers(stale_dirs=[_dpdk_runtime_dir(inv, h, h.role)])

        hosts = [h.name for h in inv.hosts]
        stopped = self.tb.parallel(one, hosts)
        found = [f"{n}: {s.name} ({s.how})" for n in hosts for s in stopped[n]]
        if found and p is not None:
            self.log(f"{p.id}: before attempt {attempt}, stopped what was left running: {', '.join(found)}")

    def _recover(self) -> None:
        """Between attempts: drop connections (a host may have come back) and reconnect the
        switch (restarted only if it is down: switch_session). Leftovers are cleared before
        every attempt (_clear_leftovers)."""
        for r in self.tb.remotes.values():
            r.close()
        try:
            if self.bfrt is not None:
                self.bfrt.close()
            program, self.program, self.ctl, self.bfrt = self.program, None, None, None
            self._use_program(program or "rain")
        except Exception as e:  # noqa: BLE001 - the next attempt reports it
            self.log(f"recovery: {one_line(e)}")


def switch_session(inv: Inventory, log, program: str = "rain"):
    """Start the switch's software if it is known to be down, and open this run's
    BFRuntime session (bound, as the program's one writer). A switch whose state cannot
    be told (a status read that times out, a reader that holds a client id) is not
    restarted: killing a healthy switch mid-run loses every point's state on it."""
    from .. import switchd

    state, why = switchd.liveness(inv)
    if state == switchd.DOWN:
        log(f"switch {inv.switch.name} is down ({why}): (re)starting its software")
        switchd.start(inv, program, log=log, restart=inv.switch.kind == "emulated")  # a live one not serving: stop it
    elif state == switchd.UNKNOWN:
        log(f"switch {inv.switch.name}: state unknown ({why}); not restarting it, connecting")
    return switchd.connect(inv, program=program, bind=True, client_id=1)


def _dpdk_runtime_dir(inv: Inventory, host: Host, role: str) -> str:
    """Where DPDK keeps a program's runtime files (per --file-prefix): /var/run/dpdk for
    root, which the agents run as."""
    return f"/var/run/dpdk/{_eal(inv, host, role, '')['file_prefix']}"


def run(
    spec_path: str | Path,
    inv: Inventory,
    inv_path: Path | None = None,
    *,
    resume: Path | None = None,
    results_root: Path = Path("results"),
    retries: int = 2,
    retry_wait: float = DEFAULT_BUDGET_S,
    console=None,
    progress: bool = True,
    analyze_after: bool = True,
    calibrate: bool = True,
    calibrate_only: bool = False,
) -> Path:
    """`retries`: attempts after the first for a point that meets an infrastructure
    failure; `retry_wait`: the most seconds a point waits, in all, for the testbed to
    answer again between its attempts (retry.py). On `resume`, failed points are
    measured again, interrupted ones too; done points are kept. `calibrate`: on a
    shared-core testbed, measure the testbed before the first point (calibrate.py)."""
    spec_path = Path(spec_path)
    spec = load_spec(spec_path)
    supported_or_explain(spec)
    not_root = [h.name for h in inv.hosts if h.mgmt.user != "root"]
    if not_root:
        # rain-worker and rain-client need root (huge pages, the NIC, real-time priority),
        # and the agents run as the SSH login: provisioning can become root, a run cannot.
        raise UsageError(
            f"{', '.join(not_root)} log in as {inv.host(not_root[0]).mgmt.user!r}, but the agents must run "
            "as root (DPDK needs huge pages and the NIC)",
            fix="let the orchestrator's key log in as root (e.g. `sudo cp ~/.ssh/authorized_keys "
            "/root/.ssh/` on each host; key-only root login is sshd's default) and set mgmt.user: root",
        )
    shape = shape_of(inv)
    auto = shape.emulated and spec.dilation.emulated == "auto"
    if resume is not None:
        rd = RunDir(resume)
        if not rd.sweep.exists():
            raise UsageError(
                f"{rd.path} is not a run directory (no {layout.SWEEP})", fix="pass the folder a run printed"
            )
        # a resumed run keeps the k its calibration chose
        chosen = rd.read_manifest().get("dilation") if auto and rd.manifest.exists() else None
        service = rd.read_manifest().get("service") if rd.manifest.exists() else None
        if isinstance(service, dict) and isinstance(service.get("measured_us"), dict):
            spec = with_service(spec, service["measured_us"])  # the service times its probe measured
        points = plan(spec, shape, k=chosen.get("k") if isinstance(chosen, dict) else None)
        if rd.manifest.exists():  # and the windows it sized
            points = with_windows(points, rd.read_manifest())
    else:
        points = plan(spec, shape)
        rd = RunDir.new(results_root, spec.name, time.strftime("%Y%m%d-%H%M%S"))
    run_dir = rd.path
    sweep = Sweep(run_dir, points, resume=resume is not None)
    from rich.console import Console

    console = console or Console(highlight=False, soft_wrap=True)
    logf = open(rd.log, "a")

    def log(msg: str) -> None:
        line = time.strftime("%H:%M:%S ") + msg
        logf.write(line + "\n")
        logf.flush()
        console.print(f"[dim]·[/] {msg}", markup=True, highlight=False)

    log(
        f"{'resuming' if resume else 'run'} {spec.name}: {len(points)} points, {sweep.counts()['done']} done; results in {run_dir}"
    )
    if sweep.retried:
        log(f"resume measures failed points again: {', '.join(sweep.retried)}")
    with Progress(console, enabled=progress) as prog:
        runner = Runner(
            spec_path,
            spec,
            inv,
            inv_path,
            run_dir,
            points,
            sweep,
            retries=retries,
            log=log,
            progress=prog,
            backoff=Backoff(budget_s=retry_wait),
        )
        try:
            runner.prepare()
            if resume is None or not rd.manifest.exists():
                rd.write_manifest(
                    manifest(spec_path, spec, inv, inv_path, points, host_facts(runner.tb), runner.bfrt_sha())
                )
            if calibrate_only:
                # `rainmaker calibrate`: the testbed's numbers, and a run whose points are todo
                cal = runner.calibrate()
                if cal is None:
                    raise PointFailed(
                        "the calibration point failed (see the log above)",
                        fix="check the testbed with `rainmaker provision --verify` and `rainmaker switch status`",
                    )
                if auto:
                    choose_dilation(runner, rd, spec, shape, cal, log)
                return run_dir
            if inv.shared_system and calibrate and resume is None:  # a resumed run keeps its own
                cal = runner.calibrate()
                if auto and cal is not None:
                    choose_dilation(runner, rd, spec, shape, cal, log)
            if resume is None and points and points[0].handler == "rocksdb":
                probe_service(runner, rd, spec, shape, log)
                spec = runner.spec
            if resume is None:
                size_windows(runner, rd, spec, shape, log)
            runner.sweep_all()
        except KeyboardInterrupt:
            log(f"interrupted: done points are kept; continue with `rainmaker run {spec_path} --resume {run_dir}`")
            raise
        finally:
            runner.stop_all()
            if runner.bfrt is not None:
                runner.bfrt.close()
            runner.tb.close()
    counts = runner.sweep.counts()  # auto dilation may have planned the sweep again
    if runner.overheads:
        ov = sorted(runner.overheads)
        log(
            f"orchestration overhead per point (beyond warm-up + measurement): median {ov[len(ov) // 2]:.2f} s, "
            f"max {ov[-1]:.2f} s"
        )
    log(runner.sweep.summary())
    if analyze_after and counts["done"]:
        from .report import finish

        finish(run_dir, spec.plots, log)
    logf.close()
    return run_dir
