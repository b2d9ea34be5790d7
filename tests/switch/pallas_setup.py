"""Programming the Pallas-SW switch (switch/p4/pallas.p4) for packet tests, through
BFRuntime only: what a controller does, written out plainly so the tests do not
depend on one. Frames are built and decoded with Rain's helpers (the wire protocol
is the same)."""

from __future__ import annotations

from collections.abc import Sequence

from hosts.proto import Header, Kind
from tests.netpeer import frame
from tests.switch.harness import SwitchUnderTest
from tests.switch.program_setup import ProgramSetup
from tests.switch.rain_setup import RAIN_PORT, SERVICE, ip_int, mac_int

P4_TABLES = ("forward", "map_pool", "config_pool", "schedule", "select_worker")
EV = dict(
    DISPATCH_DIRECT=2,  # a task pushed to a worker
    NO_WORKER=10,
    FORWARDED=12,
    NO_ROUTE=13,
    BAD_RAIN=14,
    PARSER_ERROR=15,
    NO_POOL=16,
    POOL_EMPTY=17,
)


def wrr_schedule(weights: Sequence[tuple[int, int]]) -> list[int]:
    """The schedule a controller writes for (worker, weight) pairs: each worker as many
    times as its weight, in the order given, so the WRR order is the schedule's."""
    return [wid for wid, weight in weights for _ in range(weight)]


class Pallas(ProgramSetup):
    """The switch under test, programmed as a Pallas-SW switch through BFRuntime."""

    P4_TABLES, REGISTERS, EV = P4_TABLES, ("cursor",), EV

    def __init__(self, sw: SwitchUnderTest):
        super().__init__(sw)
        self.cursor = self.c.register("cursor")
        self.dispatches = self.c.counter("dispatches")

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        self.clear()
        self.dispatches.clear()
        self.sw.drain()
        self.sent = 0

    def worker(self, wid: int, port: int) -> None:
        s = self.sw.side(port)
        self.c.table("select_worker").add(
            wid, "to_worker", {"port": self.sw.dev(port), "dmac": mac_int(s), "dip": ip_int(s)}
        )

    def map_type(self, task_type: int, pool: int) -> None:
        self.c.table("map_pool").add(task_type, "set_pool", {"pool": pool})

    def pool(self, pool: int, weights: Sequence[tuple[int, int]]) -> list[int]:
        """Install a pool's schedule (positions 1..n) and length, its cursor at the
        start; returns the schedule."""
        order = wrr_schedule(weights)
        with self.c.batch() as b:
            for pos, wid in enumerate(order, start=1):
                b.add("schedule", {"pool": pool, "position": pos}, "set_worker", {"worker": wid})
            b.add("config_pool", pool, "set_pool_config", {"length": len(order)})
        self.cursor.write(pool, 0)
        return order

    # ---------------------------------------------------------------- packets
    def task(self, port: int, client_id: int, request_id: int, *, task_type: int = 0, data: bytes = bytes(8)) -> bytes:
        h = Header(kind=Kind.TASK, task_type=task_type, client_id=client_id, request_id=request_id, data=data)
        return frame(self.sw.side(port), SERVICE, h.pack(), 40000 + port, RAIN_PORT)

    def pushed(self, pool: int) -> int:
        return self.dispatches.read(pool).packets
