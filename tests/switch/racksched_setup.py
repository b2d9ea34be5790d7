"""Programming the RackSched-SW switch (switch/p4/racksched.p4) for packet tests,
through BFRuntime only, and the frames the tests send."""

from __future__ import annotations

import time

from hosts.proto import Header, Kind
from switch.control.racksched import pick_entries
from tests.netpeer import frame
from tests.switch.harness import SwitchUnderTest
from tests.switch.rain_setup import RAIN_PORT, SERVICE, ip_int, mac_int

EV = dict(
    DISPATCH=2,
    NO_WORKER=10,
    FORWARDED=12,
    NO_ROUTE=13,
    BAD_RAIN=14,
    PARSER_ERROR=15,
    CHOSEN=16,
    REPORT=17,
    UNKNOWN_WORKER=18,
)


class RackSched:
    """The switch under test, programmed as a RackSched-SW switch through BFRuntime."""

    def __init__(self, sw: SwitchUnderTest):
        self.sw = sw
        self.c = sw.bfrt
        self.events = self.c.counter("pipe.SwitchIngress.events.events")
        self.dispatches = self.c.counter("dispatches")
        self.reports = self.c.counter("reports")
        self.load_a = self.c.register("load_a")
        self.load_b = self.c.register("load_b")
        self.passes = 0  # ingress passes the switch will count: a dispatched task takes two

    def reset(self) -> None:
        for t in ("forward", "pick", "select_worker"):
            self.c.table(t).clear()
            self.c.table(t).reset_default()
        for r in (self.load_a, self.load_b):
            r.clear()
        for k in (self.events, self.dispatches, self.reports):
            k.clear()
        self.sw.drain()
        self.passes = 0

    def route(self, *ports: int) -> None:
        for i in ports:
            s = self.sw.side(i)
            self.c.table("forward").add(ip_int(s), "set_egress", {"port": self.sw.dev(i), "dmac": mac_int(s)})

    def worker(self, wid: int, port: int) -> None:
        s = self.sw.side(port)
        self.c.table("select_worker").add(
            wid, "to_worker", {"port": self.sw.dev(port), "dmac": mac_int(s), "dip": ip_int(s)}
        )

    def choices(self, *workers: int) -> None:
        """The pick table as the controller fills it: every ordered pair of `workers`."""
        pick = self.c.table("pick")
        for low, high, first, second in pick_entries(workers):
            pick.add({"rand": (low, high)}, "choose", {"first": first, "second": second}, priority=1)

    # ---------------------------------------------------------------- packets
    def task(self, port: int, request_id: int, *, client_id: int = 0x0100, data: bytes = bytes(8)) -> bytes:
        h = Header(kind=Kind.TASK, client_id=client_id, request_id=request_id, data=data)
        return frame(self.sw.side(port), SERVICE, h.pack(), 40000 + port, RAIN_PORT)

    def report(self, port: int, worker_id: int, load: int) -> bytes:
        h = Header(kind=Kind.REPORT, worker_id=worker_id, report=load)
        return frame(self.sw.side(port), SERVICE, h.pack(), 41000 + port, RAIN_PORT)

    def send(self, port: int, f: bytes, passes: int = 1) -> None:
        """Send a frame the switch counts `passes` times (2: a task it resubmits)."""
        self.sw.send(port, f)
        self.passes += passes

    def settle(self, timeout: float = 3.0) -> None:
        """Wait until the switch counted every pass of every frame sent so far."""
        deadline = time.monotonic() + timeout
        while (n := sum(v.packets for v in self.events.read_all())) < self.passes:
            if time.monotonic() > deadline:
                raise AssertionError(f"the switch counted {n} passes of {self.passes}")
            time.sleep(0.01)

    def event(self, name: str) -> int:
        return self.events.read(EV[name]).packets

    def loads(self, wid: int) -> tuple[int, int]:
        """Both copies of a worker's load."""
        return self.load_a.read(wid)[0], self.load_b.read(wid)[0]
