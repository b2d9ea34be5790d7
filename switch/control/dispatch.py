"""Dispatch (switch/p4/dispatch.p4): where a dispatched task goes (select_worker:
worker id -> its host's dev_port, MAC and IP) and, for a task that waited, the
address of the client host it came from (client_addr: client host id -> IP), so the
worker answers the client directly."""

from __future__ import annotations

from collections.abc import Mapping

from switch.bfrt.client import Client

from . import _cells
from .addr import ipv4_str, mac_str


class Dispatch:
    SELECT_WORKER = "pipe.SwitchIngress.dispatch.select_worker"
    CLIENT_ADDR = "pipe.SwitchIngress.dispatch.client_addr"
    TO_WORKER = "SwitchIngress.dispatch.to_worker"
    SET_CLIENT = "SwitchIngress.dispatch.set_client"

    def __init__(self, client: Client):
        self.client = client
        self.select_worker = client.table(self.SELECT_WORKER)
        self.client_addr = client.table(self.CLIENT_ADDR)

    def program(self, workers: Mapping[int, tuple[int, int, int]], clients: Mapping[int, int]) -> None:
        """Exactly these: worker id -> (dev_port, dmac, dip); client host id -> ip."""
        self.clear()
        batch = self.client.batch()
        for wid, (port, dmac, dip) in sorted(workers.items()):
            batch.add(self.select_worker, wid, self.TO_WORKER, {"port": port, "dmac": dmac, "dip": dip})
        for host_id, ip in sorted(clients.items()):
            batch.add(self.client_addr, host_id, self.SET_CLIENT, {"ip": ip})
        batch.send()

    def set_worker(self, wid: int, port: int, dmac: int, dip: int) -> None:
        self.select_worker.upsert(wid, self.TO_WORKER, {"port": port, "dmac": dmac, "dip": dip})

    def remove_worker(self, wid: int) -> None:
        self.select_worker.delete(wid)

    def set_client(self, host_id: int, ip: int) -> None:
        self.client_addr.upsert(host_id, self.SET_CLIENT, {"ip": ip})

    def workers(self) -> dict[int, dict]:
        return {
            e.key["hdr.rain.worker_id"]: {
                "port": e.data["port"],
                "dmac": mac_str(e.data["dmac"]),
                "dip": ipv4_str(e.data["dip"]),
            }
            for e in self.select_worker.entries()
        }

    def clients(self) -> dict[int, str]:
        return {e.key["client_host"]: ipv4_str(e.data["ip"]) for e in self.client_addr.entries()}

    def clear(self) -> None:
        _cells.empty(self.select_worker)
        _cells.empty(self.client_addr)
