"""Programming the RackSched-SW switch (switch/p4/racksched.p4) for packet tests,
through BFRuntime only, and the frames the tests send."""

from __future__ import annotations

from hosts.proto import Header, Kind
from switch.control.racksched import pick_entries
from tests.netpeer import frame
from tests.switch.harness import SwitchUnderTest
from tests.switch.program_setup import ProgramSetup
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


class RackSched(ProgramSetup):
    """The switch under test, programmed as a RackSched-SW switch through BFRuntime."""

    P4_TABLES, REGISTERS, EV = ("forward", "pick", "select_worker"), ("load_a", "load_b"), EV

    def __init__(self, sw: SwitchUnderTest):
        super().__init__(sw)
        self.dispatches = self.c.counter("dispatches")
        self.reports = self.c.counter("reports")
        self.load_a = self.c.register("load_a")
        self.load_b = self.c.register("load_b")

    def reset(self) -> None:
        self.clear()
        for k in (self.dispatches, self.reports):
            k.clear()
        self.sw.drain()
        self.sent = 0  # ingress passes the switch will count: a dispatched task takes two

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

    def loads(self, wid: int) -> tuple[int, int]:
        """Both copies of a worker's load."""
        return self.load_a.read(wid)[0], self.load_b.read(wid)[0]
