"""Constants and per-packet metadata of the R2P2-SW program (switch/p4/r2p2/types.p4).
tests/unit/test_r2p2_emulator.py holds the constants here to the P4."""

from __future__ import annotations

R2P2_KIND_REPORT = 8
R2P2_KIND_MAX = 10
R2P2_FLAG_RECIRC = 0x20
R2P2_RECIRC_PORT = 68  # local port of each pipe: dev_port = pipe << 7 | 68
R2P2_WORKER_BITS = 10

EV_R2P2_DISPATCHED = 16
EV_R2P2_RECIRCULATED = 17
EV_R2P2_REPORT = 18
EV_R2P2_REJECTED = 19


def recirc_port(ingress_port: int) -> int:
    """ingress_port[8:7] ++ R2P2_RECIRC_PORT: the recirculation port of the packet's pipe."""
    return (ingress_port & 0x180) | R2P2_RECIRC_PORT


def is_recirc_port(port: int) -> bool:
    """ingress_port[6:0] == R2P2_RECIRC_PORT."""
    return port & 0x7F == R2P2_RECIRC_PORT


class R2p2Md:
    """r2p2_md_t: the state SwitchIngress passes between the R2P2 controls."""

    __slots__ = ("last_worker", "bound", "passes_left", "known", "took", "forward", "reject", "port", "dmac", "dip")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)
        self.dmac = bytes(6)
