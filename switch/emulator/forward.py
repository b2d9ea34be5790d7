"""Forward (switch/p4/forward.p4): plain IPv4 delivery by destination address.

Responses (worker -> client), rejects and any non-Rain traffic take this path.
"""

from __future__ import annotations

from .headers import EV_FORWARDED, EV_NO_ROUTE, FORWARD_ENTRIES
from .schema import Action, Key, Param, Table
from .worker_table import MacBytes

FORWARD = Table(
    "pipe.SwitchIngress.forward.forward",
    keys=[Key("hdr.ipv4.dst_addr", 32)],
    actions=[
        Action("SwitchIngress.forward.set_egress", [Param("port", 9), Param("dmac", 48)]),
        Action("SwitchIngress.forward.drop"),
    ],
    size=FORWARD_ENTRIES,
    default_action="drop",
)

TABLES = (FORWARD,)
REGISTERS = ()
COUNTERS = ()


class Forward:
    """control Forward: its actions set the event (a condition on the table's hit would
    cost a stage on Tofino)."""

    def __init__(self, store):
        self.table = store.table(FORWARD.name)
        self._find = self.table.finder
        self._mac = MacBytes()

    def apply(self, hdr, ig_md) -> None:
        entry = self._find((hdr.ip_dst,))
        call = self.table.default if entry is None else entry.call
        if call.action == "set_egress":
            p = call.params
            ig_md.ucast_egress_port = p["port"]
            hdr.eth_dst = self._mac(p["dmac"])
            hdr.ip_ttl = (hdr.ip_ttl - 1) & 0xFF
            ig_md.event = EV_FORWARDED
        else:  # drop
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
