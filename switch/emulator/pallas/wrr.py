"""Wrr (switch/p4/pallas/wrr.p4): weighted round robin inside a pool. The pool's
length (config_pool), its cursor (a register cell per pool, advanced once per task,
positions 1..length), and the schedule (pool, position) -> worker the controller
fills with each worker as many times as its weight."""

from __future__ import annotations

from ..headers import EV_DISPATCH_DIRECT, MAX_SLICES
from ..schema import Action, Key, Param, Register, Table
from .defs import EV_POOL_EMPTY, SCHEDULE_ENTRIES

CONFIG_POOL = Table(  # key ig_md.slice @name("pool")
    "pipe.SwitchIngress.wrr.config_pool",
    keys=[Key("pool", 16)],
    actions=[
        Action("SwitchIngress.wrr.set_pool_config", [Param("length", 16)]),
        Action("SwitchIngress.wrr.no_workers"),
    ],
    size=MAX_SLICES,
    default_action="no_workers",
)

SCHEDULE = Table(  # keys ig_md.slice @name("pool"), ig_md.qidx[15:0] @name("position")
    "pipe.SwitchIngress.wrr.schedule",
    keys=[Key("pool", 16), Key("position", 16)],
    actions=[
        Action("SwitchIngress.wrr.set_worker", [Param("worker", 16)]),
        Action("SwitchIngress.wrr.no_position"),
    ],
    size=SCHEDULE_ENTRIES,
    default_action="no_position",
)

CURSOR = Register("pipe.SwitchIngress.wrr.cursor", width=32, size=MAX_SLICES)

TABLES = (CONFIG_POOL, SCHEDULE)
REGISTERS = (CURSOR,)
COUNTERS = ()

_POOL_MASK = MAX_SLICES - 1  # a register's index keeps the bits that address its cells


class Wrr:
    """control Wrr: config_pool, then (while the task can still be pushed) the cursor's
    one RegisterAction and the schedule, exactly as the P4's."""

    def __init__(self, store):
        self.config = store.table(CONFIG_POOL.name)
        self.schedule = store.table(SCHEDULE.name)
        self._find_config = self.config.finder
        self._find_position = self.schedule.finder
        self.cursor = store.register(CURSOR.name).values

    def advance(self, i: int, length: int) -> int:
        """RegisterAction advance: the next position, 1 after `length` (or after a
        cursor beyond a shortened schedule); the new value is the output."""
        value = self.cursor[i]
        value = value + 1 if value < length else 1
        self.cursor[i] = value
        return value

    def apply(self, hdr, ig_md) -> None:
        entry = self._find_config((ig_md.slice,))
        call = self.config.default if entry is None else entry.call
        if call.action == "set_pool_config":
            ig_md.region_last = call.params["length"]
        else:  # no_workers
            ig_md.event = EV_POOL_EMPTY
        if ig_md.event != EV_DISPATCH_DIRECT:
            return
        ig_md.qidx = self.advance(ig_md.slice & _POOL_MASK, ig_md.region_last)
        entry = self._find_position((ig_md.slice, ig_md.qidx & 0xFFFF))
        call = self.schedule.default if entry is None else entry.call
        if call.action == "set_worker":
            hdr.worker_id = call.params["worker"]
        else:  # no_position
            ig_md.event = EV_POOL_EMPTY
