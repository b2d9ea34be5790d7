"""What every program's packet-test helper shares (tests/switch/<program>_setup.py): the
switch under test programmed only through BFRuntime, frames sent and counted, the
switch's event counter probed until it has seen them all."""

from __future__ import annotations

import json
import time

from tests.netpeer import Side, ip_bytes, mac_bytes
from tests.switch.harness import SwitchUnderTest


def ip_int(side: Side) -> int:
    return int.from_bytes(ip_bytes(side.ip), "big")


def mac_int(side: Side) -> int:
    return int.from_bytes(mac_bytes(side.mac), "big")


class ProgramSetup:
    """A subclass names its program's tables (P4_TABLES), registers (REGISTERS) and event
    numbers (EV); every ingress frame counts exactly one event, which settle() probes."""

    P4_TABLES: tuple[str, ...] = ()
    REGISTERS: tuple[str, ...] = ()
    EV: dict[str, int] = {}

    def __init__(self, sw: SwitchUnderTest):
        self.sw = sw
        self.c = sw.bfrt
        self.events = self.c.counter("pipe.SwitchIngress.events.events")
        self.sent = 0

    def clear(self) -> None:
        """Every table empty with its default action, every register and the events zero."""
        for t in self.P4_TABLES:
            self.c.table(t).clear()
            self.c.table(t).reset_default()
        for r in self.REGISTERS:
            self.c.register(r).clear()
        self.events.clear()

    def route(self, *ports: int) -> None:
        """forward: each port's peer IP -> that port, its MAC."""
        for i in ports:
            s = self.sw.side(i)
            self.c.table("forward").add(ip_int(s), "set_egress", {"port": self.sw.dev(i), "dmac": mac_int(s)})

    def send(self, port: int, f: bytes, passes: int = 1) -> None:
        """Send a frame the switch counts `passes` times (2: a task it resubmits)."""
        self.sw.send(port, f)
        self.sent += passes

    def events_total(self) -> int:
        return sum(v.packets for v in self.events.read_all())

    def settle(self, timeout: float = 3.0) -> None:
        """Wait until the switch counted every frame sent so far: a probe, not a sleep."""
        deadline = time.monotonic() + timeout
        while (n := self.events_total()) < self.sent:
            if time.monotonic() > deadline:
                raise AssertionError(f"the switch counted {n} frames of {self.sent} sent")
            time.sleep(0.01)

    def event(self, name: str) -> int:
        return self.events.read(self.EV[name]).packets

    def stats(self) -> dict | None:
        """The emulator's drop statistics (None on a switch the harness did not start)."""
        if self.sw.external:
            return None
        path = self.sw.log_dir / "stats.json"
        deadline = time.monotonic() + 3
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return json.loads(path.read_text())
