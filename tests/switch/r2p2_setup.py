"""Programming the R2P2-SW switch (switch/p4/r2p2.p4) for packet tests, through
BFRuntime only, and the frames the tests send (decoding is rain_setup's)."""

from __future__ import annotations

import time

from hosts.proto import Header, Kind
from tests.netpeer import frame
from tests.switch.harness import SwitchUnderTest
from tests.switch.program_setup import ProgramSetup
from tests.switch.rain_setup import RAIN_PORT, SERVICE, ip_int, mac_int

P4_TABLES = ("forward", "jbsq", "select_worker")
REGISTERS = ("depth", "cursor")
EV = dict(
    NO_WORKER=10,
    FORWARDED=12,
    NO_ROUTE=13,
    BAD_RAIN=14,
    PARSER_ERROR=15,
    DISPATCHED=16,
    RECIRCULATED=17,
    REPORT=18,
    REJECTED=19,
)
MAX_PASSES = 0xFFFF  # the most a 16-bit pass count allows


class R2p2(ProgramSetup):
    """The switch under test, programmed as an R2P2-SW switch through BFRuntime."""

    P4_TABLES, REGISTERS, EV = P4_TABLES, REGISTERS, EV

    def __init__(self, sw: SwitchUnderTest):
        super().__init__(sw)
        self.depth = self.c.register("depth")
        self.cursor = self.c.register("cursor")

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        for t in P4_TABLES:
            self.c.table(t).clear()
            self.c.table(t).reset_default()
        # nothing may still recirculate from an earlier test: an unconfigured switch
        # rejects every pass, and no worker has an entry
        self.wait_quiet()
        self.clear()
        self.sw.drain()
        self.sent = 0

    def configure(self, workers: int, n: int, max_passes: int = MAX_PASSES) -> None:
        """Workers 0..workers-1 take tasks, JBSQ(n), at most `max_passes` passes a task."""
        self.c.table("jbsq").set_default(
            "set_config", {"last_worker": workers - 1, "bound": n, "max_passes": max_passes}
        )

    def worker(self, wid: int, port: int) -> None:
        s = self.sw.side(port)
        self.c.table("select_worker").add(
            wid, "to_worker", {"port": self.sw.dev(port), "dmac": mac_int(s), "dip": ip_int(s)}
        )

    # ---------------------------------------------------------------- packets
    def task(self, port: int, client_id: int, request_id: int, *, data: bytes = bytes(8), flags: int = 0) -> bytes:
        h = Header(kind=Kind.TASK, flags=flags, client_id=client_id, request_id=request_id, data=data)
        return frame(self.sw.side(port), SERVICE, h.pack(), 40000 + port, RAIN_PORT)

    def report(self, port: int, worker_id: int, depth: int) -> bytes:
        """What `rain-worker --mode report` sends: its queue depth, to the switch."""
        h = Header(kind=Kind.REPORT, worker_id=worker_id, report=depth)
        return frame(self.sw.side(port), SERVICE, h.pack(), 42000 + port, RAIN_PORT)

    # ---------------------------------------------------------------- reading
    def ends(self) -> int:
        """Frames that ended: every ingress pass counts one event, and every frame sent
        makes zero or more RECIRCULATED passes and then exactly one other."""
        return sum(v.packets for i, v in enumerate(self.events.read_all()) if i != EV["RECIRCULATED"])

    def wait_recirculations(self, at_least: int, timeout: float = 3.0) -> int:
        deadline = time.monotonic() + timeout
        while (n := self.event("RECIRCULATED")) < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"{n} recirculations, not {at_least}")
            time.sleep(0.01)
        return n

    def wait_quiet(self, timeout: float = 3.0) -> None:
        """Until the recirculation count stops moving (no task recirculates)."""
        deadline = time.monotonic() + timeout
        last = self.event("RECIRCULATED")
        while True:
            time.sleep(0.05)
            now = self.event("RECIRCULATED")
            if now == last:
                return
            if time.monotonic() > deadline:
                raise AssertionError("tasks still recirculate")
            last = now

    def depths(self, *wids: int) -> list[int]:
        return [self.depth.read(w)[0] for w in wids]
