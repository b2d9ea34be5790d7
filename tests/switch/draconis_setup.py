"""Programming the Draconis-SW switch (switch/p4/draconis.p4) for packet tests, through
BFRuntime only, and building the frames clients and pull-mode workers send. Frame
decoding is rain_setup's (the wire protocol is the same)."""

from __future__ import annotations

import json
import time

from hosts.proto import Header, Kind
from tests.netpeer import frame
from tests.switch.harness import SwitchUnderTest
from tests.switch.rain_setup import EV as RAIN_EV
from tests.switch.rain_setup import SERVICE, ip_int, mac_int

RAIN_PORT = 21057
P4_TABLES = ("forward", "config_queue", "client_addr")
REGISTERS = ("waiting", "head", "tail", "owner", "request", "meta", "tstamp", *(f"data{i}" for i in range(8)))
EV = {**RAIN_EV, "PULL_EMPTY": 16}

# the switch's address: where clients send tasks and workers their pulls
SWITCH = SERVICE


class Draconis:
    """The switch under test, programmed as a Draconis-SW switch through BFRuntime."""

    def __init__(self, sw: SwitchUnderTest):
        self.sw = sw
        self.c = sw.bfrt
        self.events = self.c.counter("pipe.SwitchIngress.events.events")
        self.sent = 0

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        c = self.c
        for t in P4_TABLES:
            c.table(t).clear()
            c.table(t).reset_default()
        for r in REGISTERS:
            c.register(r).clear()
        self.events.clear()
        for i in range(1, self.sw.nports + 1):
            c.ports.modify(self.sw.dev(i), enable=True)
        self.sw.drain()
        self.sent = 0

    def route(self, *ports: int) -> None:
        """forward: each port's peer IP -> that port, its MAC."""
        for i in ports:
            s = self.sw.side(i)
            self.c.table("forward").add(ip_int(s), "set_egress", {"port": self.sw.dev(i), "dmac": mac_int(s)})

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

    def send(self, port: int, f: bytes) -> None:
        self.sw.send(port, f)
        self.sent += 1

    def events_total(self) -> int:
        return sum(v.packets for v in self.events.read_all())

    def settle(self, timeout: float = 3.0) -> None:
        """Wait until the switch counted every frame sent so far (each ingress frame
        counts exactly one event): a probe, not a sleep."""
        deadline = time.monotonic() + timeout
        while (n := self.events_total()) < self.sent:
            if time.monotonic() > deadline:
                raise AssertionError(f"the switch counted {n} frames of {self.sent} sent")
            time.sleep(0.01)

    def event(self, name: str) -> int:
        return self.events.read(EV[name]).packets

    def waiting(self) -> int:
        return self.c.register("waiting", signed=True).read(0)[0]

    def reg(self, name: str, index: int = 0) -> int:
        return self.c.register(name).read(index)[0]

    def stats(self) -> dict | None:
        """The emulator's drop statistics (None on a switch the harness did not start)."""
        if self.sw.external:
            return None
        path = self.sw.log_dir / "stats.json"
        deadline = time.monotonic() + 3
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return json.loads(path.read_text())
