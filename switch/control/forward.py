"""Forward (switch/p4/forward.p4): IPv4 delivery by destination address, for responses,
rejects and other traffic: host IP -> (egress dev_port, host MAC)."""

from __future__ import annotations

from collections.abc import Mapping

from switch.bfrt.client import Client

from . import _cells
from .addr import ipv4_str, mac_str


class Forward:
    TABLE = "pipe.SwitchIngress.forward.forward"
    SET_EGRESS = "SwitchIngress.forward.set_egress"

    def __init__(self, client: Client):
        self.client = client
        self.table = client.table(self.TABLE)

    def program(self, routes: Mapping[int, tuple[int, int]]) -> None:
        """Exactly these routes: ip -> (dev_port, dmac), integers."""
        _cells.empty(self.table)
        batch = self.client.batch()
        for ip, (port, dmac) in routes.items():
            batch.add(self.table, ip, self.SET_EGRESS, {"port": port, "dmac": dmac})
        batch.send()

    def add(self, ip: int, port: int, dmac: int) -> None:
        self.table.upsert(ip, self.SET_EGRESS, {"port": port, "dmac": dmac})

    def remove(self, ip: int) -> None:
        self.table.delete(ip)

    def entries(self) -> dict[str, dict]:
        """ "10.0.0.1" -> {"port": dev_port, "dmac": "02:..."} as the switch holds them."""
        return {
            ipv4_str(e.key["hdr.ipv4.dst_addr"]): {"port": e.data["port"], "dmac": mac_str(e.data["dmac"])}
            for e in self.table.entries()
        }

    def clear(self) -> None:
        _cells.empty(self.table)
