"""RoundRobin (switch/p4/r2p2/round_robin.p4): the worker a task pass looks at."""

from __future__ import annotations

from ..schema import Register

CURSOR = Register("pipe.SwitchIngress.round_robin.cursor", width=16, size=1)

TABLES = ()
REGISTERS = (CURSOR,)
COUNTERS = ()


class RoundRobin:
    """control RoundRobin: the cursor's RegisterAction `advance` into hdr.worker_id."""

    def __init__(self, store):
        self.cursor = store.register(CURSOR.name).values

    def apply(self, hdr, r2) -> None:
        value = self.cursor[0]
        hdr.worker_id = value
        self.cursor[0] = 0 if value >= r2.last_worker else (value + 1) & 0xFFFF
