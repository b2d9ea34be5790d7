"""Front-panel ports ($PORT): added with the inventory's speed, FEC and autoneg,
enabled, and waited for until $PORT_UP (probed, never slept for)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from switch.bfrt.client import Client

from .errors import ControllerError
from .topology import PortSpec

_AUTONEG = {"default": "default", "enable": True, "disable": False}


class Ports:
    POLL_S = 0.05

    def __init__(self, client: Client):
        self.client = client

    def configure(self, ports: Iterable[PortSpec]) -> None:
        """Add each port (or bring an existing one to this configuration) and enable it."""
        have = self.client.ports.all()
        for p in ports:
            autoneg = _AUTONEG.get(p.autoneg, p.autoneg)
            if p.dev_port in have:
                self.client.ports.modify(p.dev_port, speed=p.speed, fec=p.fec, enable=True, autoneg=autoneg)
            else:
                self.client.ports.add(p.dev_port, p.speed, p.fec, enable=True, autoneg=autoneg)

    def wait_up(
        self, ports: Iterable[PortSpec], timeout: float, *, clock: Callable[[], float] = time.monotonic
    ) -> float:
        """Block until every port reports $PORT_UP; returns the seconds waited."""
        ports = list(ports)
        t0 = clock()
        while True:
            state = self.client.ports.all()
            down = [p for p in ports if not state.get(p.dev_port, {}).get("$PORT_UP")]
            if not down:
                return clock() - t0
            if clock() - t0 >= timeout:
                names = ", ".join(
                    f"{p.name} (dev_port {p.dev_port}{'' if p.dev_port in state else ', not added'})" for p in down
                )
                raise ControllerError(
                    f"port(s) not up after {timeout:g} s: {names}",
                    subject=[p.dev_port for p in down],
                    fix="check the cables (or, emulated, the veths behind the ports) and that speed/FEC match the peer",
                )
            time.sleep(self.POLL_S)

    def bring_up(self, ports: Iterable[PortSpec], timeout: float) -> float:
        ports = list(ports)
        self.configure(ports)
        return self.wait_up(ports, timeout)

    def status(self) -> dict[int, dict]:
        """dev_port -> {speed, fec, enabled, up} as the switch reports them."""
        return {
            p: {
                "speed": d.get("$SPEED"),
                "fec": d.get("$FEC"),
                "enabled": bool(d.get("$PORT_ENABLE")),
                "up": bool(d.get("$PORT_UP")),
            }
            for p, d in sorted(self.client.ports.all().items())
        }
