"""What the four baseline controllers (R2P2-SW, RackSched-SW, Draconis-SW, Pallas-SW)
share beyond SwitchController: their settings (from the spec's `baseline` block and
its slices, which Pallas-SW takes as its pools), workers resolved against the
inventory, program/register/deregister/reset in one order, and a snapshot of every
register and counter of the program.

    ctl = controller_class("r2p2")(client, inventory, BaselineSettings(jbsq_n=2))
    ctl.bring_up_ports()
    ctl.program(workers=[WorkerRegistration.from_json("worker0", json.load(f))])
    ...
    json.dump(ctl.snapshot(), out)
    ctl.reset()

A subclass names its tables, registers and counters (full names: binding them is
the check that the switch runs its program), checks the settings it uses, and writes
its own tables in _install(). Everything it installs is kept, so reset() can write
it again and a register_worker() only adds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from switch.bfrt.client import Client
from switch.p4.source import constants

from . import _cells
from .base import SwitchController
from .constants import MAX_SLICES, TASK_TYPES
from .errors import ControllerError
from .forward import Forward
from .registration import ClientRegistration, WorkerRegistration

SETTINGS_KEYS = ("jbsq_n", "k", "max_passes", "queue_capacity", "pools", "port_up_timeout_s")
BIG_REGISTER = 4096  # cells: a snapshot summarises larger registers unless asked for all


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class PoolSettings:
    """A pool of Pallas-SW (a slice of the spec): the task types it serves, and the
    weight of each worker in its weighted round robin (a worker not named: 1)."""

    task_types: tuple[int, ...] = ()
    weights: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "task_types", tuple(self.task_types))
        object.__setattr__(self, "weights", dict(self.weights))


def _all_types() -> dict[int, PoolSettings]:
    return {0: PoolSettings(task_types=tuple(range(TASK_TYPES)))}


@dataclass(frozen=True)
class BaselineSettings:
    """What a baseline controller is asked to set up. Each program uses its part and
    checks its ranges (a controller refuses a value its program cannot run):
    jbsq_n       R2P2-SW: n of JBSQ(n); Draconis-SW: 1 (workers pull one task at a time)
    k            RackSched-SW: the power-of-k choices (the program does 2)
    max_passes   R2P2-SW: a task's recirculation passes before it is rejected
    queue_capacity  Draconis-SW: tasks its queue holds (None: every queue entry)
    pools        Pallas-SW: pool -> PoolSettings (default: every task type to pool 0)
    """

    jbsq_n: int = 1
    k: int = 2
    max_passes: int = 0xFFFF
    queue_capacity: int | None = None
    pools: Mapping[int, PoolSettings] = field(default_factory=_all_types)
    port_up_timeout_s: float = 30.0

    def __post_init__(self):
        object.__setattr__(self, "pools", {p: self.pools[p] for p in sorted(self.pools)})
        for name in ("jbsq_n", "k", "max_passes"):
            if not _int(getattr(self, name)):
                raise ControllerError(f"settings.{name}: {getattr(self, name)!r} is not an integer", subject=name)
        if self.queue_capacity is not None and not _int(self.queue_capacity):
            raise ControllerError(
                f"settings.queue_capacity: {self.queue_capacity!r} is not a number of tasks", subject="queue_capacity"
            )
        if not isinstance(self.port_up_timeout_s, (int, float)) or self.port_up_timeout_s <= 0:
            raise ControllerError(
                f"settings.port_up_timeout_s: {self.port_up_timeout_s!r} is not a positive number of seconds",
                subject="port_up_timeout_s",
            )
        seen: dict[int, int] = {}
        for p, pool in self.pools.items():
            where = f"settings.pools.{p}"
            if not _int(p) or not 0 <= p < MAX_SLICES:
                raise ControllerError(
                    f"settings.pools: pool {p!r} is not in 0..{MAX_SLICES - 1}",
                    subject=p,
                    fix=f"the programs have MAX_SLICES = {MAX_SLICES} pools (the spec's slice ids)",
                )
            if not isinstance(pool, PoolSettings):
                raise ControllerError(f"{where}: expected PoolSettings, got {type(pool).__name__}", subject=p)
            for t in pool.task_types:
                if not _int(t) or not 0 <= t < TASK_TYPES:
                    raise ControllerError(
                        f"{where}.task_types: {t!r} is not a task type (0..{TASK_TYPES - 1})", subject=p
                    )
                if t in seen:
                    raise ControllerError(
                        f"{where}.task_types: task type {t} is also in pool {seen[t]}",
                        subject=p,
                        fix="map each task type to one pool",
                    )
                seen[t] = p
            for w, weight in pool.weights.items():
                if not _int(w) or not _int(weight) or weight < 1:
                    raise ControllerError(
                        f"{where}.weights: worker {w!r} weight {weight!r} is not a worker id and a weight >= 1",
                        subject=p,
                        fix="give each worker a whole-number weight of 1 or more (its share of the pool's tasks)",
                    )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BaselineSettings:
        """From plain data: the spec's `baseline` block (jbsq_n, k) plus, for Pallas-SW,
        `pools: {id: {task_types: [...], weights: {worker: weight}}}`."""
        if not isinstance(d, Mapping):
            raise ControllerError("settings: expected a mapping", subject="settings")
        unknown = set(d) - set(SETTINGS_KEYS)
        if unknown:
            raise ControllerError(
                f"settings: unknown key(s) {', '.join(sorted(map(str, unknown)))}",
                subject="settings",
                fix=f"use {', '.join(SETTINGS_KEYS)}",
            )
        kw = dict(d)
        if "pools" in d:
            pools = {}
            for p, pool in (d["pools"] or {}).items():
                pool = pool or {}
                bad = set(pool) - {"task_types", "weights"}
                if bad:
                    raise ControllerError(
                        f"settings.pools.{p}: unknown key(s) {', '.join(sorted(bad))}",
                        subject=f"pools.{p}",
                        fix="use task_types, weights",
                    )
                try:
                    weights = {int(w): v for w, v in (pool.get("weights") or {}).items()}
                    pools[int(p)] = PoolSettings(tuple(pool.get("task_types") or ()), weights)
                except (TypeError, ValueError):
                    raise ControllerError(
                        f"settings.pools: {p!r} is not a pool number, or its weights' keys not worker ids",
                        subject="pools",
                    ) from None
            kw["pools"] = pools
        return cls(**kw)


@dataclass(frozen=True)
class Worker:
    """One registered worker thread, resolved against the inventory."""

    id: int
    host: str
    pool: int  # its slice in the registration (Pallas-SW's pool; the others ignore it)
    dev_port: int
    mac: int
    ip: int


class BaselineController(SwitchController):
    TABLES: ClassVar[tuple[str, ...]] = ()  # full names; forward is every program's
    REGISTERS: ClassVar[tuple[str, ...]] = ()
    SIGNED: ClassVar[frozenset[str]] = frozenset()  # registers of a signed type
    COUNTERS: ClassVar[tuple[str, ...]] = ()
    EVENTS = "pipe.SwitchIngress.events.events"

    def __init__(self, client: Client, inventory: Any, settings: BaselineSettings | None = None):
        super().__init__(client, inventory)
        settings = settings if settings is not None else BaselineSettings()
        if not isinstance(settings, BaselineSettings):
            raise ControllerError(
                f"{self.TITLE}: expected BaselineSettings, got {type(settings).__name__}",
                subject="settings",
                fix="build them with BaselineSettings.from_dict(spec's baseline block)",
            )
        self.settings = settings
        self.pipe = self.topology.rain_pipe()  # registers exist once per pipe, as for Rain
        self.check_settings()
        p4 = constants(program=self.PROGRAM)
        self.p4 = p4
        self.event_names = {v: k for k, v in sorted(p4.items()) if k.startswith("EV_")}
        self._attach(client)
        self._forget()

    def check_settings(self) -> None:
        """Refuse the settings this program cannot run (ControllerError with a fix)."""

    def configure(self, settings: BaselineSettings) -> None:
        """Other settings (a sweep point's variant: another jbsq_n, other pools), checked
        now; the switch gets them at the next program() or reset()."""
        if not isinstance(settings, BaselineSettings):
            raise ControllerError(
                f"{self.TITLE}: expected BaselineSettings, got {type(settings).__name__}", subject="settings"
            )
        old, self.settings = self.settings, settings
        try:
            self.check_settings()
        except ControllerError:
            self.settings = old
            raise

    def _bind(self, client: Client) -> None:
        self.forward = Forward(client)
        self.tables = {n: client.table(n) for n in self.TABLES}
        self.registers = {n: client.register(n, signed=n in self.SIGNED) for n in self.REGISTERS}
        self.counters = {n: client.counter(n) for n in (self.EVENTS, *self.COUNTERS)}

    def _forget(self) -> None:
        self._workers: dict[int, Worker] = {}
        self._clients: dict[int, ClientRegistration] = {}
        self._installed = False

    def table(self, short: str):
        """One of TABLES by its last part (e.g. "select_worker")."""
        (name,) = [n for n in self.TABLES if n.rsplit(".", 1)[1] == short]
        return self.tables[name]

    def register(self, short: str):
        (name,) = [n for n in self.REGISTERS if n.rsplit(".", 1)[1] == short]
        return self.registers[name]

    # -- programming -----------------------------------------------------------------
    def program(
        self, workers: Iterable[WorkerRegistration] = (), clients: Iterable[ClientRegistration] | None = None
    ) -> None:
        """Install exactly this: forwarding to every inventory host, the program's tables
        for these workers (and client hosts: default the inventory's clients, host ids
        0, 1, ... in inventory order), every register and counter zero. Everything is
        checked before the first write."""
        recs = self._resolve_workers(list(workers), existing={})
        cls = self._resolve_clients(self.default_clients() if clients is None else list(clients))
        self.check_workers(recs, programming=True)
        self._forget()  # replaces whatever was installed
        self._write_all(recs, cls)
        self._workers, self._clients, self._installed = recs, cls, True

    def register_worker(self, reg: WorkerRegistration) -> None:
        """Add a server's workers to a programmed switch, where tasks find them last."""
        self._require_programmed("register a worker")
        recs = self._resolve_workers([reg], existing=self._workers)
        everyone = {**self._workers, **recs}
        self.check_workers(everyone, programming=False)
        self._add_workers(recs, everyone)
        self._workers = everyone

    def deregister_worker(self, worker_id: int) -> None:
        """Take a worker out: no task is sent to it afterwards."""
        self._require_programmed("deregister a worker")
        w = self._registered(worker_id)
        rest = {k: v for k, v in self._workers.items() if k != worker_id}
        self._remove_worker(w, rest)
        self._workers = rest

    def reset(self, *, tables: bool = True) -> None:
        """Clean state between sweep points, idempotent: every register and counter zero;
        with `tables` the tables are rewritten to what the controller installed (emptied
        if it installed nothing), which also repairs any drift."""
        if not self._installed:
            self.clear()
        elif tables:
            self._write_all(self._workers, self._clients)
        else:
            self._quiesce()
            self._zero_state()
            self._resume()

    def clear(self) -> None:
        """Every table of the program empty with its P4 default, registers and counters zero."""
        self._quiesce()
        self.forward.clear()
        for t in self.tables.values():
            _cells.empty(t)
        self._zero_state()
        self._forget()

    def _write_all(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        self._quiesce()
        self.forward.program(self.routes())
        for t in self.tables.values():
            _cells.empty(t)
        self._zero_state()
        self._install(workers, clients)

    def _zero_state(self) -> None:
        for r in self.registers.values():
            r.clear()
        for c in self.counters.values():
            c.clear()

    def _quiesce(self) -> None:
        """Let packets the switch still handles end before state is rewritten (R2P2-SW's
        recirculating tasks); the others keep none."""

    def _resume(self) -> None:
        """After reset(tables=False) zeroed the state: what _quiesce() stopped, again."""

    # -- per program ------------------------------------------------------------------
    def check_workers(self, workers: dict[int, Worker], *, programming: bool) -> None:
        """Refuse a set of workers the program cannot serve (all of them, after the change)."""

    def _install(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        raise NotImplementedError

    def _add_workers(self, new: dict[int, Worker], everyone: dict[int, Worker]) -> None:
        raise NotImplementedError

    def _remove_worker(self, w: Worker, rest: dict[int, Worker]) -> None:
        raise NotImplementedError

    def _state(self, regs: dict[str, dict]) -> dict:
        """The program's state in its own terms, from the registers read (snapshot)."""
        return {}

    # -- reading back ----------------------------------------------------------------
    @property
    def workers(self) -> dict[int, dict]:
        """worker id -> {host, pool, dev_port} as installed."""
        return {
            w.id: {"host": w.host, "pool": w.pool, "dev_port": w.dev_port}
            for w in sorted(self._workers.values(), key=lambda x: x.id)
        }

    def snapshot(self, entries: str = "summary") -> dict:
        """Every register and counter as plain data, ready for json.dump.

        registers: name -> {size, width, signed, pipes: [[cell per index] per pipe]};
        one over BIG_REGISTER cells only with entries="all" (else its size, skipped).
        counters: name -> index (events: EV_* name) -> {packets, bytes}, the events'
        every name, other indexes when non-zero. state: the program's own summary.
        "occupied" (Rain's mode that reads its queues' cells) reads as "summary" here."""
        if entries not in ("summary", "occupied", "all"):
            raise ControllerError(f"snapshot: entries={entries!r}; use summary, occupied or all", subject="entries")
        regs: dict[str, dict] = {}
        for name, reg in sorted(self.registers.items()):
            if reg.size > BIG_REGISTER and entries != "all":
                regs[name] = {"size": reg.size, "width": reg.field.width, "signed": reg.signed, "skipped": True}
            else:
                regs[name] = self._register_dump(reg)
        counters = {
            name: self._counter_dump(c, self.event_names if name == self.EVENTS else None)
            for name, c in sorted(self.counters.items())
        }
        return {
            "program": self.client.p4_name,
            "pipe": self.pipe,
            "registers": regs,
            "counters": counters,
            "state": self._state(regs),
        }

    def pipe_cells(self, regs: dict[str, dict], short: str) -> list[int]:
        """A register's cells in the program's pipe, from a snapshot's registers."""
        pipes = regs[next(n for n in self.REGISTERS if n.rsplit(".", 1)[1] == short)]["pipes"]
        return pipes[self.pipe] if self.pipe < len(pipes) else pipes[0]

    # -- validation --------------------------------------------------------------------
    def _require_programmed(self, what: str) -> None:
        if not self._installed:
            raise ControllerError(
                f"cannot {what} before the switch is programmed", subject="program", fix="call program() first"
            )

    def _registered(self, worker_id: int) -> Worker:
        w = self._workers.get(worker_id)
        if w is None:
            raise ControllerError(
                f"worker {worker_id} is not registered",
                subject=worker_id,
                fix=f"registered: {', '.join(map(str, sorted(self._workers))) or 'none'}",
            )
        return w

    def _resolve_workers(self, regs: Sequence[WorkerRegistration], existing: dict[int, Worker]) -> dict[int, Worker]:
        out: dict[int, Worker] = {}
        for reg in regs:
            host = self._host_of(reg)
            for wid in reg.worker_ids:
                self._check_new_id(reg, wid, existing, out)
                out[wid] = Worker(wid, reg.host, reg.slice_of(wid), host.port.dev_port, reg.mac_int, reg.ip_int)
        return out
