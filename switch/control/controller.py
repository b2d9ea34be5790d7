"""RainController: programs a switch running switch/p4/rain.p4 through BFRuntime.

    with Client(inv.switch.bfrt, p4_name="rain") as sw:
        ctl = RainController(sw, inv, Settings(service_mac="02:00:00:00:00:fe", service_ip="10.10.1.254"))
        ctl.bring_up_ports()
        ctl.program(workers=[WorkerRegistration.from_json("worker0", json.load(f))])
        ...                                   # a sweep point runs
        json.dump(ctl.snapshot(), out)        # registers and counters, JSON-ready
        ctl.reset()                           # clean state for the next point

It reaches the switch only through switch.bfrt (never the emulator's internals), so it
drives bf_switchd unchanged. One class per P4 control does the table work (forward.py,
slice_map.py, bidir_queue.py, ...); this class validates the inputs as a whole,
keeps what it installed, and knows the order things must happen in.

Everything is validated before the first write; a refused input raises ControllerError
naming what is wrong and how to fix it. A switch that refuses a write raises BfrtError
naming the update and table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from switch.bfrt.client import Client

from . import addr
from .base import SwitchController
from .bidir_queue import BidirQueue, SliceConfig, occupied, queue_summary
from .constants import FORWARD_ENTRIES, MAX_SLICES
from .dispatch import Dispatch
from .errors import ControllerError
from .events import Events
from .forward import Forward
from .pre import Pre, mgid_of
from .queue_entries import QueueEntries
from .rdma_engine import RdmaEngine
from .rdma_writer import RdmaWriter, WriteTarget, check_ring
from .registration import ClientRegistration, WorkerRegistration
from .settings import Settings
from .slice_map import SliceMap
from .telemetry import Telemetry

EntriesMode = Literal["summary", "occupied", "all"]


@dataclass(frozen=True)
class _Worker:
    """One registered worker thread, resolved against the inventory."""

    id: int
    host: str
    slice: int
    dev_port: int
    mac: int
    ip: int
    va: int | None = None  # RDMA ring (None: the worker registered no ring)
    qpn: int = 0
    rkey: int = 0
    psn: int = 0
    slots: int = 0
    slot_size: int = 0
    qp_type: str = "rc"  # the opcode the switch sends: UC or RC WRITE ONLY
    quota: int = 0  # its token quota: descriptors it may hold dispatched but unread

    @property
    def has_ring(self) -> bool:
        return self.va is not None


class RainController(SwitchController):
    PROGRAM = "rain"
    TITLE = "Rain"

    def __init__(self, client: Client, inventory: Any, settings: Settings | None = None):
        super().__init__(client, inventory)
        settings = settings if settings is not None else Settings()
        if not isinstance(settings, Settings):
            raise ControllerError(
                f"the Rain controller takes Settings, not {type(settings).__name__}",
                subject="settings",
                fix="build them with Settings(...) or Settings.from_dict(the spec's switch block)",
            )
        if settings.service_mac is None and self.topology.service_mac and self.topology.service_ip:
            # the inventory's scheduling address is the RoCEv2 source unless the settings say otherwise
            settings = replace(settings, service_mac=self.topology.service_mac, service_ip=self.topology.service_ip)
        self.settings = settings
        self.pipe = self.topology.rain_pipe()
        self._attach(client)
        # What is installed (None until program()).
        self._slices: dict[int, SliceConfig] | None = None
        self._workers: dict[int, _Worker] = {}
        self._clients: dict[int, ClientRegistration] = {}

    def _bind(self, client: Client) -> None:
        """One object per P4 control, over this session's tables."""
        self.forward = Forward(client)
        self.slice_map = SliceMap(client)
        self.bidir_queue = BidirQueue(client)
        self.rdma_engine = RdmaEngine(client)
        self.queue_entries = QueueEntries(client)
        self.dispatch = Dispatch(client)
        self.telemetry = Telemetry(client)
        self.events = Events(client)
        self.rdma_writer = RdmaWriter(client)
        self.pre = Pre(client)

    def _forget(self) -> None:
        self._slices, self._workers, self._clients = None, {}, {}

    # -- programming -----------------------------------------------------------------
    def program(
        self, workers: Iterable[WorkerRegistration] = (), clients: Iterable[ClientRegistration] | None = None
    ) -> None:
        """Install exactly this: forwarding to every inventory host, client addresses
        (default: the inventory's clients, host ids 0, 1, ... in inventory order), the
        workers (dispatch, PRE nodes and groups, RDMA state and PSNs), the slices (task
        type map, regions, rings), INT on or off; queues empty, counters zero."""
        recs = self._resolve_workers(list(workers), existing={})
        slices = self._slice_configs(recs, current=None)
        self._check_rdma(recs, slices)
        cls = self._resolve_clients(self.default_clients() if clients is None else list(clients))
        self._write_all(slices, recs, cls)
        self._slices, self._workers, self._clients = slices, recs, cls

    def reset(self, *, tables: bool = True) -> None:
        """Clean state between sweep points, idempotent: queues empty and re-based
        (balance 0, head = tail = first entry of the slice's region, ring offsets 0),
        every entry array zeroed, counters zeroed, PSNs back to each worker's initial
        PSN (so the workers must restart or re-register their QPs too). With `tables`
        the tables and PRE are rewritten to what the controller installed (emptied if
        it installed nothing), which also repairs any drift."""
        if not tables and self._slices is not None:
            self.bidir_queue.reset(self._slices.values())
            self.rdma_engine.reset()
            self.rdma_writer.reset_psns({w.id: w.psn for w in self._workers.values() if w.has_ring})
            self.rdma_writer.writes.clear()
            self.queue_entries.clear()
            self.events.clear()
        elif self._slices is None:
            self.clear()
        else:
            self._write_all(self._slices, self._workers, self._clients)

    def clear(self) -> None:
        """Every Rain table empty with its P4 default, PRE empty, registers and counters zero."""
        for part in (self.forward, self.slice_map, self.dispatch, self.bidir_queue, self.telemetry, self.rdma_writer):
            part.clear()
        self.pre.clear()
        self.rdma_engine.reset()
        self.queue_entries.clear()
        self.events.clear()
        self._slices, self._workers, self._clients = None, {}, {}

    # -- workers joining and leaving (paper 6.1) ----------------------------------------
    def register_worker(self, reg: WorkerRegistration) -> None:
        """Add a server's workers to a programmed switch: RDMA state (build_write, PSN),
        PRE node in its slice's group, then dispatch (select_worker) last, so its first
        token finds everything in place."""
        slices = self._programmed("register a worker")
        recs = self._resolve_workers([reg], existing=self._workers)
        new_slices = self._slice_configs({**self._workers, **recs}, current=slices)
        self._check_rdma(recs, new_slices)
        self._install(recs, new_slices)

    def deregister_worker(self, worker_id: int) -> None:
        """Take a worker out (its QP failed): its tokens path first (select_worker: a
        token of it still queued in the switch then meets no entry and its task is
        dropped as EV_NO_WORKER, recovered by the client's timeout), then its PRE node,
        then its RDMA state (build_write, PSN back to 0). The slice keeps its ring."""
        slices = self._programmed("deregister a worker")
        w = self._registered(worker_id)
        self.dispatch.remove_worker(w.id)
        if slices[w.slice].ring_slots and w.has_ring:
            others = [x.id for x in self._workers.values() if x.slice == w.slice and x.has_ring and x.id != w.id]
            self.pre.set_group(w.slice, others)
            self.pre.remove_node(w.id)
            self.rdma_writer.remove(w.id)
        del self._workers[w.id]

    def move_worker(self, worker_id: int, slice_id: int) -> None:
        """Move a worker to another slice (Algorithm 1's rebalancing): it leaves the old
        slice (as deregister_worker) and joins the new one (as register_worker). The
        worker stamps its tokens with the new slice itself."""
        slices = self._programmed("move a worker")
        w = self._registered(worker_id)
        if slice_id not in slices:
            raise ControllerError(
                f"slice {slice_id} is not configured",
                subject=slice_id,
                fix=f"configured slices: {', '.join(map(str, sorted(slices)))}",
            )
        moved = replace(w, slice=slice_id)
        others = {k: v for k, v in self._workers.items() if k != worker_id}
        new_slices = self._slice_configs({**others, worker_id: moved}, current=slices)
        self._check_rdma({worker_id: moved}, new_slices)
        self.deregister_worker(worker_id)
        self._install({worker_id: moved}, new_slices)

    def _registered(self, worker_id: int) -> _Worker:
        w = self._workers.get(worker_id)
        if w is None:
            raise ControllerError(
                f"worker {worker_id} is not registered",
                subject=worker_id,
                fix=f"registered: {', '.join(map(str, sorted(self._workers))) or 'none'}",
            )
        return w

    def _install(self, recs: dict[int, _Worker], new_slices: dict[int, SliceConfig]) -> None:
        """Write validated new workers: RDMA state, PRE, slice configs, dispatch last."""
        old = self._slices or {}
        for w in recs.values():
            if new_slices[w.slice].ring_slots and w.has_ring:
                self.rdma_writer.build_write(self._write_target(w))
                self.pre.add_node(w.id, w.dev_port)
        everyone = {**self._workers, **recs}
        for s in sorted({w.slice for w in recs.values()}):
            cfg = new_slices[s]
            if cfg != old.get(s):
                self.bidir_queue.config_slice(cfg)
            if cfg.ring_slots:
                self.pre.set_group(s, [x.id for x in everyone.values() if x.slice == s and x.has_ring])
        for w in recs.values():
            self.dispatch.set_worker(w.id, w.dev_port, w.mac, w.ip)
        self._workers = everyone
        self._slices = new_slices

    # -- reading back ----------------------------------------------------------------
    @property
    def workers(self) -> dict[int, dict]:
        """worker id -> {host, slice, dev_port, rdma} as installed."""
        return {
            w.id: {"host": w.host, "slice": w.slice, "dev_port": w.dev_port, "rdma": w.has_ring}
            for w in sorted(self._workers.values(), key=lambda x: x.id)
        }

    @property
    def slices(self) -> dict[int, SliceConfig]:
        return dict(self._slices or {})

    def balances(self) -> dict[int, int]:
        """Each configured slice's signed token balance in the Rain pipe (negative: tasks
        queued, positive: tokens), in one Read: the cell itself when one slice is
        configured, else the whole (16-cell) register. Cheap enough to poll during a load."""
        reg, slices = self.bidir_queue.balance, sorted(self.slices)
        if len(slices) == 1:
            cells = {slices[0]: reg.read(slices[0])}
        else:
            every = reg.read_all()
            cells = {s: every[s] for s in slices}
        return {s: v[self.pipe] if self.pipe < len(v) else v[0] for s, v in cells.items() if v}

    def snapshot(self, entries: EntriesMode = "summary", *, max_entries: int = 4096) -> dict:
        """Every register and counter as plain data, ready for json.dump.

        registers: name -> {size, width, signed, pipes: [[cell per index] per pipe]}.
        The 128K-entry arrays are skipped unless `entries="all"`; they carry instead the
        ranges their queues occupy (from each slice's head and balance in the Rain
        pipe), and with `entries="occupied"` those cells (at most `max_entries`).
        counters: events by EV_* name, RDMA writes per worker (non-zero ones).
        queues: per configured slice its region, balance, head, tail, tasks, tokens, ring offset.
        """
        if entries not in ("summary", "occupied", "all"):
            raise ControllerError(f"snapshot: entries={entries!r}; use summary, occupied or all", subject="entries")
        big = set(self.queue_entries.REGISTERS)
        regs: dict[str, dict] = {}
        small = (
            self.bidir_queue.balance,
            self.bidir_queue.head,
            self.bidir_queue.tail,
            self.rdma_engine.ring_offset,
            self.rdma_writer.psn,
        )
        for reg in small:
            regs[reg.name] = self._register_dump(reg)
        state = {k: regs[getattr(BidirQueue, k.upper())]["pipes"] for k in ("balance", "head", "tail")}
        offsets = regs[RdmaEngine.RING_OFFSET]["pipes"]
        pipe = self.pipe if self.pipe < len(state["balance"]) else 0
        configs = self._slices if self._slices is not None else self.bidir_queue.configs()
        queues: dict[str, dict] = {}
        ranges: list[tuple[int, int]] = []
        for s, c in sorted(configs.items()):
            bal, head, tail = (state[k][pipe][s] for k in ("balance", "head", "tail"))
            q = dict(queue_summary(c, bal, head, tail))
            q["ring_slots"], q["ring_offset"], q["mgid"] = c.ring_slots, offsets[pipe][s], c.mgid
            q["large_cap"] = c.large_cap  # a large task queues only while fewer tasks wait
            q["occupied"] = [list(r) for r in occupied(c.first, c.last, head, bal)]
            ranges += occupied(c.first, c.last, head, bal)
            queues[str(s)] = q
        occupied_idx = [i for a, b in ranges for i in range(a, b + 1)]
        cells: dict[int, dict[str, int]] = {}
        truncated = False
        if entries == "occupied" and occupied_idx:
            truncated = len(occupied_idx) > max_entries
            cells = self.queue_entries.read(occupied_idx[:max_entries], pipe)
        for name in sorted(big):
            reg = self.queue_entries.registers[name.rsplit(".", 1)[1]]
            if entries == "all":
                regs[name] = self._register_dump(reg)
                continue
            d = {
                "size": reg.size,
                "width": reg.field.width,
                "signed": False,
                "skipped": True,
                "occupied": [list(r) for r in ranges],
                "occupied_count": len(occupied_idx),
            }
            if entries == "occupied":
                f = name.rsplit(".", 1)[1]
                d["cells"] = {str(i): row[f] for i, row in cells.items()}
                d["truncated"] = truncated
            regs[name] = d
        if entries == "occupied":
            for q in queues.values():
                q["entries"] = {
                    str(i): QueueEntries.describe(cells[i])
                    for a, b in q["occupied"]
                    for i in range(a, b + 1)
                    if i in cells
                }
        events = {k: {"packets": v.packets, "bytes": v.bytes} for k, v in self.events.read().items()}
        writes = {
            str(i): {"packets": v.packets, "bytes": v.bytes}
            for i, v in enumerate(self.rdma_writer.writes.read_all())
            if v.packets or v.bytes
        }
        return {
            "program": self.client.p4_name,
            "rain_pipe": self.pipe,
            "registers": dict(sorted(regs.items())),
            "counters": {Events.COUNTER: events, RdmaWriter.WRITES: writes},
            "queues": queues,
        }

    # -- validation --------------------------------------------------------------------
    def _programmed(self, what: str) -> dict[int, SliceConfig]:
        if self._slices is None:
            raise ControllerError(
                f"cannot {what} before the switch is programmed", subject="program", fix="call program() first"
            )
        return self._slices

    def _resolve_workers(self, regs: Sequence[WorkerRegistration], existing: dict[int, _Worker]) -> dict[int, _Worker]:
        out: dict[int, _Worker] = {}
        for reg in regs:
            host = self._host_of(reg)
            if self.settings.service_mac is not None:
                for mine, theirs, what in (
                    (self.settings.service_mac_int, reg.switch_mac, "MAC"),
                    (self.settings.service_ip_int, reg.switch_ip, "IP"),
                ):
                    if theirs is not None:
                        t = (addr.mac if what == "MAC" else addr.ipv4)(theirs, f"{reg.where}: switch.{what.lower()}")
                        if t != mine:
                            raise ControllerError(
                                f"{reg.where}: the worker was told the switch's {what} is {theirs}, but the switch "
                                f"sends RoCEv2 WRITEs from {self.settings.service_mac if what == 'MAC' else self.settings.service_ip}",
                                subject=reg.host,
                                fix="start rain-worker with --switch-mac/--switch-ip equal to the "
                                "controller's service_mac/service_ip",
                            )
            for wid in reg.worker_ids:
                self._check_new_id(reg, wid, existing, out)
                s = reg.slice_of(wid)
                if s not in self.settings.slices:
                    raise ControllerError(
                        f"{reg.where}: worker {wid} is in slice {s}, which the settings do not configure",
                        subject=wid,
                        fix=f"configure slice {s} in the settings, or put the worker in one of: "
                        f"{', '.join(map(str, self.settings.slices))}",
                    )
                r = reg.ring
                out[wid] = _Worker(
                    wid,
                    reg.host,
                    s,
                    host.port.dev_port,
                    reg.mac_int,
                    reg.ip_int,
                    *((r.va[wid], r.qpn[wid], r.rkey, r.psn, r.slots, r.slot_size, r.qp_type) if r else ()),
                    quota=reg.quota or 0,
                )
        return out

    def _slice_configs(
        self, workers: dict[int, _Worker], current: dict[int, SliceConfig] | None
    ) -> dict[int, SliceConfig]:
        """The config_slice entries: regions from the settings, ring slots explicit or the
        smallest ring of the slice's workers; an installed ring never changes size."""
        out = {}
        for s, region in self.settings.regions().items():
            ring = self.settings.slices[s].ring_slots
            if current is not None and current[s].ring_slots:
                ring = current[s].ring_slots
            elif ring is None:
                rings = [w.slots for w in workers.values() if w.slice == s and w.has_ring]
                ring = min(rings) if rings else 0
            # the ring bound keeps free what a worker of the slice may hold unread
            hold = self.settings.slices[s].ring_hold
            if hold is None:
                hold = max((w.quota for w in workers.values() if w.slice == s and w.has_ring), default=0)
            out[s] = SliceConfig(s, region.first, region.last, ring, mgid_of(s) if ring else 0, hold if ring else 0)
        return out

    def _check_rdma(self, workers: dict[int, _Worker], slices: dict[int, SliceConfig]) -> None:
        rdma = [c for c in slices.values() if c.ring_slots]
        if rdma and self.settings.service_mac is None:
            raise ControllerError(
                f"slice(s) {', '.join(str(c.slice) for c in rdma)} pre-write large tasks with RDMA, but the settings "
                "give no service_mac/service_ip (the switch's RoCEv2 source address)",
                subject="service_ip",
                fix="set service_mac and service_ip in the settings (the --switch-mac/--switch-ip given to the "
                "workers), or ring_slots: 0 for those slices",
            )
        for w in workers.values():
            c = slices[w.slice]
            if not c.ring_slots:
                continue
            if not w.has_ring:
                raise ControllerError(
                    f"worker {w.id} on {w.host} registered no RDMA ring, but its slice {w.slice} pre-writes large "
                    "tasks to every worker of the slice",
                    subject=w.id,
                    fix="register the worker's ring, or set ring_slots: 0 for the slice",
                )
            check_ring(w.id, w.host, w.va, w.slot_size, w.slots, c.ring_slots)
        if len(self.topology.hosts) > FORWARD_ENTRIES:
            raise ControllerError(
                f"{len(self.topology.hosts)} hosts, but forward holds {FORWARD_ENTRIES}", subject="hosts"
            )
        assert all(s < MAX_SLICES for s in slices)

    # -- writing -----------------------------------------------------------------------
    def _write_target(self, w: _Worker) -> WriteTarget:
        return WriteTarget(
            w.id,
            self.settings.service_mac_int,
            self.settings.service_ip_int,
            w.mac,
            w.ip,
            w.qpn,
            w.rkey,
            w.va,
            w.psn,
            w.qp_type,
            tos=self.topology.roce_dscp << 2,
        )

    def _write_all(
        self, slices: dict[int, SliceConfig], workers: dict[int, _Worker], clients: dict[int, ClientRegistration]
    ) -> None:
        self.forward.program(self.routes())
        self.slice_map.program(self.settings.slice_of_type())
        rdma = [w for w in workers.values() if slices[w.slice].ring_slots and w.has_ring]
        self.rdma_writer.program([self._write_target(w) for w in rdma])
        self.pre.program(
            {s: {w.id: w.dev_port for w in rdma if w.slice == s} for s, c in slices.items() if c.ring_slots}
        )
        self.bidir_queue.program(slices.values())
        self.rdma_engine.reset()
        self.queue_entries.clear()
        self.telemetry.set(self.settings.int_enabled)
        self.dispatch.program(
            {w.id: (w.dev_port, w.mac, w.ip) for w in workers.values()}, {i: c.ip_int for i, c in clients.items()}
        )
        self.events.clear()
