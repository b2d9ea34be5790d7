"""Push (switch/p4/pallas/push.p4): the task leaves at once to the worker the
schedule chose (kind DISPATCH, the worker's addresses, counted per pool), or goes
back to its client as REJECT."""

from __future__ import annotations

from ..headers import EV_DISPATCH_DIRECT, EV_NO_WORKER, KIND_DISPATCH, KIND_REJECT, MAX_SLICES, MAX_WORKERS
from ..schema import Action, Counter, Key, Param, Table

SELECT_WORKER = Table(
    "pipe.SwitchIngress.push.select_worker",
    keys=[Key("hdr.rain.worker_id", 16)],
    actions=[
        Action("SwitchIngress.push.to_worker", [Param("port", 9), Param("dmac", 48), Param("dip", 32)]),
        Action("SwitchIngress.push.no_worker"),
    ],
    size=MAX_WORKERS,
    default_action="no_worker",
)

DISPATCHES = Counter("pipe.SwitchIngress.push.dispatches", size=MAX_SLICES)

TABLES = (SELECT_WORKER,)
REGISTERS = ()
COUNTERS = (DISPATCHES,)

_POOL_MASK = MAX_SLICES - 1  # the counter's index keeps the bits that address it


class Push:
    """control Push: select_worker for a task that can be pushed, reject otherwise."""

    def __init__(self, store):
        self.table = store.table(SELECT_WORKER.name)
        self._find = self.table.finder
        ctr = store.counter(DISPATCHES.name)
        self._packets, self._bytes = ctr.packets, ctr.bytes
        self._macs: dict[int, bytes] = {}  # dmac parameter -> its 6 bytes (converted once)

    @staticmethod
    def reject(hdr, ig_md) -> None:
        hdr.eth_dst, hdr.eth_src = hdr.eth_src, hdr.eth_dst
        hdr.ip_dst, hdr.ip_src = hdr.ip_src, hdr.ip_dst
        hdr.udp_dst_port, hdr.udp_src_port = hdr.udp_src_port, hdr.udp_dst_port
        hdr.kind = KIND_REJECT
        ig_md.ucast_egress_port = ig_md.ingress_port

    def apply(self, hdr, ig_md, nbytes: int) -> None:
        if ig_md.event != EV_DISPATCH_DIRECT:
            self.reject(hdr, ig_md)
            return
        entry = self._find((hdr.worker_id,))
        call = self.table.default if entry is None else entry.call
        if call.action == "to_worker":
            p = call.params
            ig_md.ucast_egress_port = p["port"]
            dmac = p["dmac"]
            mac = self._macs.get(dmac)
            if mac is None:
                if len(self._macs) > 4096:
                    self._macs.clear()
                mac = self._macs[dmac] = dmac.to_bytes(6, "big")
            hdr.eth_dst = mac
            hdr.ip_dst = p["dip"]
            hdr.kind = KIND_DISPATCH
            hdr.slice = ig_md.slice
            i = ig_md.slice & _POOL_MASK
            self._packets[i] += 1
            self._bytes[i] += nbytes
        else:  # no_worker
            self.reject(hdr, ig_md)
            ig_md.event = EV_NO_WORKER
