"""BidirQueue (switch/p4/bidir_queue.p4): the per-slice bidirectional queue of tasks
and tokens (paper 3.2.1): a signed token balance, a head and a tail per slice."""

from __future__ import annotations

from .headers import (
    BALANCE_FULL,
    FLAG_LARGE,
    KIND_TASK,
    MAX_SLICES,
    QOP_FULL,
    QOP_TASK_MATCHED,
    QOP_TASK_QUEUED,
    QOP_TOKEN_MATCHED,
    QOP_TOKEN_QUEUED,
    wrap_s32,
)
from .schema import Action, Key, Param, Register, Table

CONFIG_SLICE = Table(
    "pipe.SwitchIngress.bidir_queue.config_slice",
    keys=[Key("ig_md.slice", 16)],
    actions=[
        Action(
            "SwitchIngress.bidir_queue.set_slice_config",
            [
                Param("first", 32),
                Param("last", 32),
                Param("neg_cap", 32),
                Param("neg_large_cap", 32),
                Param("last_slot", 32),
                Param("mgid", 16),
            ],
        ),
        Action("SwitchIngress.bidir_queue.unconfigured"),
    ],
    size=MAX_SLICES,
    default_action="unconfigured",
)

BALANCE = Register("pipe.SwitchIngress.bidir_queue.balance", width=32, size=MAX_SLICES, signed=True)
HEAD = Register("pipe.SwitchIngress.bidir_queue.head", width=32, size=MAX_SLICES)
TAIL = Register("pipe.SwitchIngress.bidir_queue.tail", width=32, size=MAX_SLICES)

TABLES = (CONFIG_SLICE,)
REGISTERS = (BALANCE, HEAD, TAIL)
COUNTERS = ()

_SLICE_MASK = MAX_SLICES - 1  # a register's index keeps the bits that address its cells


def _signed(raw: int) -> int:
    """int<32> from the raw bits BFRuntime carries."""
    return raw - 0x100000000 if raw & 0x80000000 else raw


class BidirQueue:
    """control BidirQueue: config_slice, then one RegisterAction on balance and one on
    head or tail, exactly as the P4's (see switch/p4/bidir_queue.p4).

    The balance actions return a value whose top two bits say what happened: a task
    returns the balance it leaves (>= 0: it took a token, < 0: it waits), a token the
    balance it found (< 0: it took a task, >= 0: it waits); BALANCE_FULL: no room."""

    def __init__(self, store):
        self.table = store.table(CONFIG_SLICE.name)
        self._find = self.table.finder
        self.balance = store.register(BALANCE.name).values
        self.head = store.register(HEAD.name).values
        self.tail = store.register(TAIL.name).values

    # ---- RegisterActions (return the P4's `out` value)
    def task_arrives(self, i: int, ig_md) -> int:
        value = self.balance[i]
        if value > ig_md.neg_cap:  # a token waits, or a task fits
            self.balance[i] = wrap_s32(value - 1)
            return wrap_s32(value - 1)
        return BALANCE_FULL

    def large_task_arrives(self, i: int, ig_md) -> int:
        value = self.balance[i]
        if value > ig_md.neg_large_cap:  # a token waits, or a ring slot is free
            self.balance[i] = wrap_s32(value - 1)
            return wrap_s32(value - 1)
        return BALANCE_FULL

    def token_arrives(self, i: int, ig_md) -> int:
        value = self.balance[i]
        if wrap_s32(value + ig_md.neg_cap) < 0:  # value < cap: a task waits, or a token fits
            self.balance[i] = wrap_s32(value + 1)
            return value
        return BALANCE_FULL

    @staticmethod
    def _step(cells: list, i: int, ig_md) -> int:  # pop and push: idx = value; wrap in [first, last]
        value = cells[i]
        cells[i] = ig_md.region_first if value == ig_md.region_last else (value + 1) & 0xFFFFFFFF
        return value

    def apply(self, hdr, ig_md) -> None:
        entry = self._find((ig_md.slice,))
        call = self.table.default if entry is None else entry.call
        if call.action == "set_slice_config":
            p = call.params
            ig_md.region_first = p["first"]
            ig_md.region_last = p["last"]
            ig_md.neg_cap = _signed(p["neg_cap"])
            ig_md.neg_large_cap = _signed(p["neg_large_cap"])
            ig_md.last_slot = p["last_slot"]
            ig_md.mgid = p["mgid"]
        else:  # unconfigured: holds nothing
            ig_md.neg_cap = 0
            ig_md.neg_large_cap = 0
            ig_md.mgid = 0
        i = ig_md.slice & _SLICE_MASK
        if hdr.kind == KIND_TASK:
            ig_md.owner = hdr.client_id
            if hdr.flags & FLAG_LARGE:
                ig_md.balance = self.large_task_arrives(i, ig_md)
            else:
                ig_md.balance = self.task_arrives(i, ig_md)
        else:
            ig_md.owner = hdr.worker_id
            ig_md.balance = self.token_arrives(i, ig_md)
        side = (ig_md.balance >> 30) & 3
        if side == 2:  # BAL_FULL
            ig_md.queue_op = QOP_FULL
        elif hdr.kind == KIND_TASK:
            if side == 0:  # BAL_NONNEG
                ig_md.queue_op = QOP_TASK_MATCHED
                ig_md.qidx = self._step(self.head, i, ig_md)
            else:
                ig_md.queue_op = QOP_TASK_QUEUED
                ig_md.qidx = self._step(self.tail, i, ig_md)
        elif side == 3:  # BAL_NEG
            ig_md.queue_op = QOP_TOKEN_MATCHED
            ig_md.qidx = self._step(self.head, i, ig_md)
        else:
            ig_md.queue_op = QOP_TOKEN_QUEUED
            ig_md.qidx = self._step(self.tail, i, ig_md)
