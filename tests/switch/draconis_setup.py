"""Programming the Draconis-SW switch (switch/p4/draconis.p4) for packet tests, through
BFRuntime only, and building the frames clients and pull-mode workers send. Frame
decoding is rain_setup's (the wire protocol is the same)."""

from __future__ import annotations

from hosts.proto import Header, Kind
from tests.netpeer import frame
from tests.switch.program_setup import ProgramSetup
from tests.switch.rain_setup import EV as RAIN_EV
from tests.switch.rain_setup import SERVICE, ip_int

RAIN_PORT = 21057
P4_TABLES = ("forward", "config_queue", "client_addr")
REGISTERS = ("waiting", "head", "tail", "owner", "request", "meta", "tstamp", *(f"data{i}" for i in range(8)))
EV = {**RAIN_EV, "PULL_EMPTY": 16}

# the switch's address: where clients send tasks and workers their pulls
SWITCH = SERVICE


class Draconis(ProgramSetup):
    """The switch under test, programmed as a Draconis-SW switch through BFRuntime."""

    P4_TABLES, REGISTERS, EV = P4_TABLES, REGISTERS, EV

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        self.clear()
        for i in range(1, self.sw.nports + 1):
            self.c.ports.modify(self.sw.dev(i), enable=True)
        self.sw.drain()
        self.sent = 0

    def capacity(self, n: int) -> None:
        """The queue holds n tasks in entries [0, n - 1] (what a controller would set)."""
        self.c.table("config_queue").set_default("set_capacity", {"last": n - 1, "neg_cap": (-n) & 0xFFFFFFFF})
        self.c.register("head").write(0, 0)
        self.c.register("tail").write(0, 0)

    def client_host(self, host: int, port: int) -> None:
        self.c.table("client_addr").add(host, "set_client", {"ip": ip_int(self.sw.side(port))})

    # ---------------------------------------------------------------- packets
    def task(
        self,
        port: int,
        client_id: int,
        request_id: int,
        *,
        task_type: int = 0,
        data: bytes = bytes(8),
        flags: int = 0,
        payload: bytes = b"",
    ) -> bytes:
        h = Header(
            kind=Kind.TASK, flags=flags, task_type=task_type, client_id=client_id, request_id=request_id, data=data
        )
        return frame(self.sw.side(port), SWITCH, h.pack() + payload, 40000 + port, RAIN_PORT)

    def pull(self, port: int, worker_id: int, seq: int = 0, s: int = 0) -> bytes:
        """What `rain-worker --mode pull` sends when idle (report 1, request_id its count)."""
        h = Header(kind=Kind.PULL, slice=s, worker_id=worker_id, report=1, request_id=seq)
        return frame(self.sw.side(port), SWITCH, h.pack(), RAIN_PORT, RAIN_PORT)

    def waiting(self) -> int:
        return self.c.register("waiting", signed=True).read(0)[0]

    def reg(self, name: str, index: int = 0) -> int:
        return self.c.register(name).read(index)[0]
