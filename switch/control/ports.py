"""Front-panel ports ($PORT): added with the inventory's speed, FEC and autoneg,
enabled, and waited for until $PORT_UP (probed, never slept for); and what their links
did ($PORT_UP, and the link and frame counters of $PORT_STAT) for a runner to compare
a measurement's start and end."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from switch.bfrt.client import Client

from .errors import ControllerError
from .topology import PortSpec

_AUTONEG = {"default": "default", "enable": True, "disable": False}

# $PORT_STAT fields the emulator keeps and bf_switchd does not (docs/emulation.md):
# carrier losses of the link, and frames dropped at the port because it was down.
LINK_DOWN_EVENTS = "$LinkDownEvents"
FRAMES_DROPPED_DOWN = "$FramesDroppedPortDown"
# ... and the frames both keep: what the port sent to its host and received from it.
FRAMES_TX = "$FramesTransmittedAll"
FRAMES_RX = "$FramesReceivedAll"


@dataclass(frozen=True)
class LinkState:
    """One port's link at one moment. A counter is None where the switch keeps none."""

    up: bool
    link_down_events: int | None = None
    frames_dropped_down: int | None = None
    frames_tx: int | None = None  # to the host on the port
    frames_rx: int | None = None  # from it


def link_changes(before: LinkState | None, after: LinkState | None) -> dict:
    """What a port's link did between two reads: up at each end, and how many link
    losses and frames dropped while down in between (None: not counted, or not read)."""

    def delta(field: str) -> int | None:
        a, b = (getattr(s, field) if s is not None else None for s in (before, after))
        return None if a is None or b is None else max(0, b - a)  # counters zeroed meanwhile: no loss seen

    return {
        "up_before": None if before is None else before.up,
        "up_after": None if after is None else after.up,
        "link_down_events": delta("link_down_events"),
        "frames_dropped_port_down": delta("frames_dropped_down"),
        "frames_to_host": delta("frames_tx"),
        "frames_from_host": delta("frames_rx"),
    }


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

    def links(self, dev_ports: Iterable[int]) -> dict[int, LinkState]:
        """Each added port's link now: $PORT_UP, and from $PORT_STAT its link losses and
        frames dropped while down. Two Reads, whatever the number of ports."""
        state = self.client.ports.all()
        stats = {e.key["$DEV_PORT"]: e.data for e in self.client.table("$PORT_STAT").entries()}
        out = {}
        for d in dev_ports:
            if d not in state:
                continue
            st = stats.get(d, {})
            out[d] = LinkState(
                bool(state[d].get("$PORT_UP")),
                st.get(LINK_DOWN_EVENTS),
                st.get(FRAMES_DROPPED_DOWN),
                st.get(FRAMES_TX),
                st.get(FRAMES_RX),
            )
        return out
