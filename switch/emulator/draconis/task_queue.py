"""TaskQueue (switch/p4/draconis/task_queue.p4): the one FIFO of tasks in the switch,
a count of the tasks waiting (`waiting`) and a head and a tail pointer."""

from __future__ import annotations

from ..headers import BALANCE_FULL, KIND_TASK, QOP_FULL, QOP_TASK_QUEUED, QOP_TOKEN_MATCHED, wrap_s32
from ..schema import Action, Param, Register, Table
from .consts import QOP_PULL_EMPTY

CONFIG_QUEUE = Table(
    "pipe.SwitchIngress.task_queue.config_queue",
    keys=[],
    actions=[
        Action("SwitchIngress.task_queue.set_capacity", [Param("last", 32), Param("neg_cap", 32)]),
        Action("SwitchIngress.task_queue.unconfigured"),
    ],
    size=1,
    default_action="unconfigured",
)

WAITING = Register("pipe.SwitchIngress.task_queue.waiting", width=32, size=1, signed=True)
HEAD = Register("pipe.SwitchIngress.task_queue.head", width=32, size=1)
TAIL = Register("pipe.SwitchIngress.task_queue.tail", width=32, size=1)

TABLES = (CONFIG_QUEUE,)
REGISTERS = (WAITING, HEAD, TAIL)
COUNTERS = ()


def _signed(raw: int) -> int:
    """int<32> from the raw bits BFRuntime carries."""
    return raw - 0x100000000 if raw & 0x80000000 else raw


class TaskQueue:
    """control TaskQueue: config_queue, then one RegisterAction on `waiting` and, when
    it changed, one on `head` (a pull) or `tail` (a task), exactly as the P4's.

    Both count actions return the count found, or BALANCE_FULL when nothing changed
    (a task found the queue full, a pull found it empty)."""

    def __init__(self, store):
        self.table = store.table(CONFIG_QUEUE.name)
        self._find = self.table.finder
        self.waiting = store.register(WAITING.name).values
        self.head = store.register(HEAD.name).values
        self.tail = store.register(TAIL.name).values

    # ---- RegisterActions (return the P4's `out` value)
    def task_arrives(self, ig_md) -> int:
        value = self.waiting[0]
        if wrap_s32(value + ig_md.neg_cap) < 0:  # value < capacity: room
            self.waiting[0] = wrap_s32(value + 1)
            return value
        return BALANCE_FULL

    def pull_arrives(self, ig_md) -> int:
        value = self.waiting[0]
        if value > 0:  # a task waits
            self.waiting[0] = value - 1
            return value
        return BALANCE_FULL

    @staticmethod
    def _step(cells: list, ig_md) -> int:  # pop and push: idx = value; wrap in [0, last]
        value = cells[0]
        cells[0] = 0 if value == ig_md.region_last else (value + 1) & 0xFFFFFFFF
        return value

    def apply(self, hdr, ig_md) -> None:
        entry = self._find(())  # keyless: the default action, unless an entry was added
        call = self.table.default if entry is None else entry.call
        if call.action == "set_capacity":
            ig_md.region_last = call.params["last"]
            ig_md.neg_cap = _signed(call.params["neg_cap"])
        else:  # unconfigured: holds nothing
            ig_md.region_last = 0
            ig_md.neg_cap = 0
        task = hdr.kind == KIND_TASK
        if task:
            ig_md.owner = hdr.client_id  # queue_entries stores it
            ig_md.balance = self.task_arrives(ig_md)
        else:
            ig_md.balance = self.pull_arrives(ig_md)
        if (ig_md.balance >> 30) & 3 == 2:  # BAL_FULL: nothing changed
            ig_md.queue_op = QOP_FULL if task else QOP_PULL_EMPTY
        elif task:
            ig_md.queue_op = QOP_TASK_QUEUED
            ig_md.qidx = self._step(self.tail, ig_md)
        else:
            ig_md.queue_op = QOP_TOKEN_MATCHED
            ig_md.qidx = self._step(self.head, ig_md)
