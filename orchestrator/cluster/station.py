"""A station: the emulated testbed one Dask worker owns for one run, and the tasks the
coordinator (coordinator.py) gives it.

    prepare(key)        bring the testbed up (its own slot, its own cores), provision it,
                        hold it (experiment/bench.py), calibrate it (its own k), size the
                        windows: returns what the testbed is (Prepared)
    measure(key, pid)   measure one point through the sweep's rules (sweeper.py), returns
                        the point's folder packed (Measured)
    stop(key)           Ctrl-C on the coordinator: stop the agents, measure nothing more
    close(key)          take the testbed down; returns the station's own files

The station keeps a run folder of its own on its machine (a shard: `<root>/<run>/<id>/`,
laid out as any run, its manifest holding its calibration), so a point is measured by
exactly the code of a local run, and the shard stays there for a post-mortem. Its log
lines go to the shard's run.log and, as Dask events, to the coordinator's console.

State lives on the worker in a WorkerPlugin (TestbedPlugin), registered under the run's
key: Dask calls its teardown when the coordinator unregisters it or the worker closes,
and the testbed goes down with it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from distributed import WorkerPlugin

from ..errors import RainmakerError, UsageError, one_line

PLUGIN_PREFIX = "rainmaker-testbed-"
EVENTS_PREFIX = "rainmaker-run-"  # the Dask event topic of a run's stations (their log lines)


@dataclass(frozen=True)
class Order:
    """What every station of a run is told (pickled to the workers): the spec as text (a
    worker may be another machine), the testbed's shape and how to measure."""

    key: str  # the run's key: its experiment and stamp, unique on the cluster
    spec_name: str  # the spec file's name (the station writes the text under it)
    spec_text: str
    clients: int = 1
    workers: int = 2
    link_delay_us: float = 0.0
    calibrate: bool = True
    provision: bool = True
    preflight: bool = True
    retries: int = 2
    retry_wait: float = 120.0
    root: str | None = None  # where shards go on the worker (default: the worker's local directory)
    cpus: dict[str, list[int]] = field(default_factory=dict)  # worker address -> its testbed's cores
    slots: dict[str, int] = field(default_factory=dict)  # worker address -> its testbed's slot (else a free one)


@dataclass
class Prepared:
    """A station's testbed, as the coordinator records it (manifest `testbeds`)."""

    testbed: str  # its id: host and slot
    worker: str
    host: str
    slot: int
    cpus: list[int]
    k: float  # the dilation its points are measured at
    calibration: dict | None
    dilation: dict | None  # how k was chosen (auto), else None
    windows: dict | None
    service: dict | None
    host_facts: dict
    prepare_s: float
    files: bytes  # its manifest.json, calibration/ and service-probe/, packed (shard.pack)
    manifest: dict  # the shard's manifest (provenance the coordinator's manifest starts from)


@dataclass
class Measured:
    point: str
    testbed: str
    state: dict  # the point's sweep.json entry on the station (sweep.PointState)
    files: bytes  # points/<id>/ and stalled/<id>/, packed
    wall_s: float


class Stopped(RainmakerError):
    """The coordinator stopped the run (Ctrl-C): this station measures nothing more."""


class TestbedPlugin(WorkerPlugin):
    """Holds a worker's Station between tasks (registered with Client.register_plugin
    under `name`)."""

    __test__ = False

    def __init__(self, order: Order):
        self.order = order
        self.name = PLUGIN_PREFIX + order.key
        self.station: Station | None = None

    def setup(self, worker) -> None:
        from . import stacks

        self.worker = worker
        self.lock = threading.Lock()  # made here: the plugin travels pickled
        try:  # where the coordinator reads a wedged worker's threads
            self.stacks: str | None = stacks.arm(worker.local_directory)
        except (OSError, ValueError, RuntimeError):  # e.g. a directory it cannot write: the run goes on
            self.stacks = None

    def teardown(self, worker) -> None:
        if self.station is not None:
            self.station.close()


def _plugin(key: str) -> TestbedPlugin:
    from distributed import get_worker

    w = get_worker()
    p = w.plugins.get(PLUGIN_PREFIX + key)
    if p is None:
        raise UsageError(
            f"this Dask worker ({w.address}) has no testbed for run {key}",
            fix="the coordinator registers it before the first task: a worker that joined later holds none",
        )
    return p


def _station(key: str) -> Station:
    p = _plugin(key)
    with p.lock:
        if p.station is None:
            p.station = Station(p.order, p.worker, p.stacks)
        return p.station


# -- the tasks (importable by name on every worker) -----------------------------------
def prepare(key: str) -> Prepared:
    return _station(key).prepare()


def measure(key: str, point_id: str) -> Measured:
    return _station(key).measure(point_id)


# Client.run runs these on every worker at once, outside the task queue (a point being
# measured holds the worker's testbed resource), in a thread: off the worker's event loop.
async def stop(key: str, dask_worker=None) -> str | None:
    p = dask_worker.plugins.get(PLUGIN_PREFIX + key) if dask_worker is not None else None
    if p is None or p.station is None:
        return None
    await asyncio.get_running_loop().run_in_executor(None, p.station.stop)
    return p.station.id


async def close(key: str, dask_worker=None) -> dict | None:
    """Take the worker's testbed down; its shard's log and where the shard is."""
    p = dask_worker.plugins.get(PLUGIN_PREFIX + key) if dask_worker is not None else None
    if p is None or p.station is None:
        return None
    return await asyncio.get_running_loop().run_in_executor(None, p.station.close)


class Station:
    def __init__(self, order: Order, worker, stacks: str | None = None):
        self.order, self.worker, self.stacks = order, worker, stacks
        self.cpus = list(order.cpus.get(worker.address, []))
        self.slot: int | None = order.slots.get(worker.address)
        self.host = socket.gethostname()
        self.id = f"{self.host}-s{self.slot}" if self.slot is not None else self.host
        self.tb = None  # the EmulatedTestbed
        self.sweeper = None
        self.rd = None
        self.runlog = None
        self.stopping = threading.Event()
        self.closed = False
        self.busy = threading.Lock()  # one point at a time, whatever the worker's threads

    # -- log ---------------------------------------------------------------------------
    def log(self, line: str, **about) -> None:
        """A line of the shard's run.log, and an event to the coordinator (`about`: what
        it says in data, e.g. point and started)."""
        if self.runlog is not None:
            self.runlog(line)
        # where this station is, so that the coordinator can read a wedged worker's stacks
        # and take down the testbed of one that never finished preparing
        here = {"worker": self.worker.address, "host": self.host, "slot": self.slot, "pid": os.getpid()}
        try:
            self.worker.log_event(
                EVENTS_PREFIX + self.order.key,
                {"testbed": self.id, "line": line, **here, "stacks": self.stacks, **about},
            )
        except Exception:  # noqa: BLE001 - the line is in the shard's run.log whatever the link does
            pass

    # -- prepare -----------------------------------------------------------------------
    def _confine(self) -> None:
        """This worker process (the runner of its testbed) on the testbed's cores: every
        thread now, and those it starts later inherit it."""
        if not self.cpus:
            return
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), set(self.cpus))
            except OSError:
                pass  # a thread that ended meanwhile

    def _up(self):
        from ..inventory import load as load_inv
        from ..testbed.emulated import EmulatedTestbed, up_in_free_slot

        o = self.order
        kw: dict = {"link_delay_us": o.link_delay_us, "log": self.log}
        if self.cpus:
            kw["cpus"] = self.cpus
        if self.slot is not None:
            tb = EmulatedTestbed(self.slot)
            tb.down(log=lambda m: None)  # leftovers of an earlier run in this slot
            path = tb.up(o.clients, o.workers, **kw)
        else:
            path = up_in_free_slot(o.clients, o.workers, **kw)
        inv = load_inv(path)
        self.slot = inv.emulation.slot
        self.id = f"{self.host}-s{self.slot}"
        self.tb = EmulatedTestbed(self.slot)
        return inv, path

    def prepare(self) -> Prepared:
        from ..experiment.bench import Bench
        from ..experiment.layout import PREFLIGHT, RunDir
        from ..experiment.machines import host_facts, shape_of
        from ..experiment.plan import plan
        from ..experiment.progress import Progress, RunLog
        from ..experiment.provenance import manifest
        from ..experiment.retry import Backoff
        from ..experiment.run import before_sweep, checked_machines, refuse_what_cannot_run
        from ..experiment.spec import load as load_spec
        from ..experiment.sweep import Sweep
        from ..experiment.sweeper import Sweeper
        from . import shard

        with self.busy:
            if self.sweeper is not None:
                raise UsageError(f"testbed {self.id} is already prepared for run {self.order.key}")
            t0 = time.monotonic()
            o = self.order
            self._confine()
            inv, inv_path = self._up()
            root = Path(o.root or Path(self.worker.local_directory) / "rainmaker") / o.key.replace("/", "-")
            root.mkdir(parents=True, exist_ok=True)
            spec_path = root / o.spec_name
            spec_path.write_text(o.spec_text)
            spec = load_spec(spec_path)
            shape = shape_of(inv)
            auto = shape.emulated and spec.dilation.emulated == "auto"
            refuse_what_cannot_run(spec, inv, auto)
            self.rd = RunDir.new(root, self.id, "shard")
            self.runlog = RunLog(self.rd, echo=False)
            self.log(
                f"testbed {self.id} up (slot {self.slot}, cores {_cores_text(self.cpus)}); shard in {self.rd.path}"
            )
            if o.provision:
                from ..provision import provision

                self.log("provisioning the testbed (Ansible)")
                provision(inv, progress=False)
            if o.preflight:
                checked = checked_machines(spec, inv)  # PreflightFailed: this testbed cannot run the spec
                self.log(f"{checked.summary()} ({checked.write(self.rd.path / PREFLIGHT).name})")
            points = plan(spec, shape)
            sweep = Sweep(self.rd.path, points, resume=False)
            bench = Bench(spec, inv, self.rd.path, log=self.log, progress=Progress(None, enabled=False))
            s = Sweeper(bench, points, sweep, retries=o.retries, backoff=Backoff(budget_s=o.retry_wait))
            s.measure = self._guarded(s.measure)
            self.sweeper = s
            bench.prepare(points[0] if points else None)
            facts = host_facts(bench.tb)
            self.rd.write_manifest(manifest(spec_path, spec, inv, inv_path, points, facts, bench.switch.bfrt_sha()))
            before_sweep(s, self.rd, shape, auto=auto, calibrate=o.calibrate, fresh=True)
            m = self.rd.read_manifest()
            k = s.points[0].dilation if s.points else spec.dilation.planned(True)
            self.log(f"testbed {self.id} ready: k = {k:g}, {time.monotonic() - t0:.0f} s to prepare")
            cal = m.get("calibration")
            return Prepared(
                testbed=self.id,
                worker=self.worker.address,
                host=self.host,
                slot=self.slot,
                cpus=self.cpus,
                k=k,
                calibration={x: v for x, v in cal.items() if x != "point"} if isinstance(cal, dict) else None,
                dilation=m.get("dilation"),
                windows=m.get("windows"),
                service=m.get("service"),
                host_facts=facts,
                prepare_s=round(time.monotonic() - t0, 1),
                files=shard.pack(self.rd.path, shard.STATION_FILES),
                manifest=m,
            )

    def _guarded(self, measure):
        """The sweeper's measurement, refused once the coordinator has stopped the run:
        a retry must not start a testbed the user asked to stop."""

        def guarded(*a, **kw):
            if self.stopping.is_set():
                raise KeyboardInterrupt  # the sweeper's own Ctrl-C path: agents stopped, the point back to todo
            return measure(*a, **kw)

        return guarded

    # -- measure -----------------------------------------------------------------------
    def measure(self, point_id: str) -> Measured:
        from ..experiment.sweep import TODO
        from . import shard

        with self.busy:
            s = self.sweeper
            if s is None:
                raise UsageError(f"testbed {self.id} was not prepared before point {point_id}")
            if self.stopping.is_set():
                raise Stopped(f"testbed {self.id}: the run was stopped")
            p = next((x for x in s.points if x.id == point_id), None)
            if p is None:
                raise UsageError(f"point {point_id} is not one of the spec's on testbed {self.id}")
            s.sweep.state[p.id].status = TODO  # a point measured again (the cluster lost its first result)
            t0 = time.monotonic()
            self.log(f"{p.id}: measuring on testbed {self.id}", point=p.id, started=True)
            try:
                s.sweep_one(p)
            except KeyboardInterrupt:
                raise Stopped(f"testbed {self.id}: the run was stopped while {p.id} was measured") from None
            state = asdict(s.sweep.state[p.id])
            files = shard.pack(self.rd.path, [f"points/{p.id}", f"stalled/{p.id}"])
            return Measured(p.id, self.id, state, files, round(time.monotonic() - t0, 3))

    # -- stop and close ----------------------------------------------------------------
    def stop(self) -> None:
        self.stopping.set()
        s = self.sweeper
        if s is not None:
            try:
                s.stop_all()
            except Exception as e:  # noqa: BLE001 - close() takes the testbed down anyway
                self.log(f"stopping the agents: {one_line(e)}")

    def close(self) -> dict:
        """Take the testbed down (once): after the point being measured, if any, ends
        (bounded: a stopped station's point ends with its agents)."""
        if self.closed:
            return {"testbed": self.id, "shard": str(self.rd.path) if self.rd else None}
        self.stopping.set()
        got = self.busy.acquire(timeout=120)
        try:
            self.closed = True
            if self.sweeper is not None:
                try:
                    self.sweeper.bench.clear_leftovers(None, 0)
                    self.sweeper.bench.close()
                except Exception as e:  # noqa: BLE001 - down() below removes the machines whatever is left
                    self.log(f"closing the testbed's sessions: {one_line(e)}")
            if self.tb is not None:
                self.tb.down(log=lambda m: None)
                self.log(f"testbed {self.id} down")
            log = self.rd.log.read_text() if self.rd is not None and self.rd.log.exists() else ""
            if self.runlog is not None:
                self.runlog.close()
                self.runlog = None
            return {"testbed": self.id, "shard": str(self.rd.path) if self.rd else None, "log": log}
        finally:
            if got:
                self.busy.release()


def _cores_text(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus) if cpus else "all of the machine's"
