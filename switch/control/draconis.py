"""DraconisController: programs a switch running switch/p4/draconis.p4 (Draconis-SW: one
FIFO of tasks in the switch, pulled by idle workers) through BFRuntime.

What it writes: forward (every inventory host), config_queue's default
set_capacity(last = capacity - 1, neg_cap = -capacity), the queue empty (waiting,
head, tail zero) and client_addr (client host id -> its IP, the source a DISPATCH
carries so the worker answers the client). Workers pull from the switch and are in
no table: registering one checks it against the inventory and records it. Workers
hold one task at a time (rain-worker --mode pull pulls again only when idle), so the
program is JBSQ(1) and any other jbsq_n is refused.
"""

from __future__ import annotations

from typing import ClassVar

from switch.p4.source import constants

from .baseline import BaselineController, Worker
from .errors import ControllerError
from .registration import ClientRegistration

QUEUE_ENTRIES: int = constants(program="draconis")["QUEUE_ENTRIES"]
_TQ = "pipe.SwitchIngress.task_queue."
_QE = "pipe.SwitchIngress.queue_entries."
ENTRY_ARRAYS = tuple(_QE + n for n in ("owner", "request", "meta", "tstamp", *(f"data{i}" for i in range(8))))


class DraconisController(BaselineController):
    PROGRAM = "draconis"
    TITLE = "Draconis-SW"
    CONFIG = _TQ + "config_queue"
    CLIENT_ADDR = "pipe.SwitchIngress.dispatch.client_addr"
    TABLES: ClassVar[tuple[str, ...]] = (CONFIG, CLIENT_ADDR)
    REGISTERS: ClassVar[tuple[str, ...]] = (_TQ + "waiting", _TQ + "head", _TQ + "tail", *ENTRY_ARRAYS)
    SIGNED: ClassVar[frozenset[str]] = frozenset({_TQ + "waiting"})

    @property
    def capacity(self) -> int:
        c = self.settings.queue_capacity
        return QUEUE_ENTRIES if c is None else c

    def check_settings(self) -> None:
        if self.settings.jbsq_n != 1:
            raise ControllerError(
                f"Draconis-SW is JBSQ(1): its workers pull one task at a time, so jbsq_n = "
                f"{self.settings.jbsq_n} cannot be run",
                subject="baseline.jbsq_n",
                fix="set the spec's baseline.jbsq_n to 1 for draconis (a variant can give R2P2 another)",
            )
        if not 1 <= self.capacity <= QUEUE_ENTRIES:
            raise ControllerError(
                f"Draconis-SW: queue_capacity = {self.capacity} is not in 1..{QUEUE_ENTRIES} (the queue's entries)",
                subject="queue_capacity",
                fix=f"give 1..{QUEUE_ENTRIES} tasks, or leave it out for all {QUEUE_ENTRIES}",
            )

    def _install(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        batch = self.client.batch()
        for host_id, c in sorted(clients.items()):
            batch.add(self.tables[self.CLIENT_ADDR], host_id, "set_client", {"ip": c.ip_int})
        batch.send()
        cap = self.capacity  # head and tail are zero (the registers were just cleared): entries [0, cap - 1]
        self.tables[self.CONFIG].set_default("set_capacity", {"last": cap - 1, "neg_cap": (-cap) & 0xFFFFFFFF})

    def _add_workers(self, new: dict[int, Worker], everyone: dict[int, Worker]) -> None:
        """Nothing in the switch: a worker's first PULL is its registration there."""

    def _remove_worker(self, w: Worker, rest: dict[int, Worker]) -> None:
        """Nothing in the switch: a worker that stops pulling gets no task."""

    def _state(self, regs: dict[str, dict]) -> dict:
        def cell(short: str) -> int:
            return self.pipe_cells(regs, short)[0]

        return {
            "capacity": self.capacity if self._installed else 0,
            "waiting": cell("waiting"),
            "head": cell("head"),
            "tail": cell("tail"),
            "clients": {str(i): c.ip for i, c in sorted(self._clients.items())},
        }
