"""Push (switch/p4/pallas/push.p4): the task leaves at once to the worker the
schedule chose (kind DISPATCH, the worker's addresses, counted per pool), or goes
back to its client as REJECT."""

from __future__ import annotations

from ..headers import EV_DISPATCH_DIRECT, EV_NO_WORKER, KIND_DISPATCH, KIND_REJECT, MAX_SLICES
from ..schema import Counter
from ..worker_table import WorkerLookup, select_worker

SELECT_WORKER = select_worker("push")

DISPATCHES = Counter("pipe.SwitchIngress.push.dispatches", size=MAX_SLICES)

TABLES = (SELECT_WORKER,)
REGISTERS = ()
COUNTERS = (DISPATCHES,)

_POOL_MASK = MAX_SLICES - 1  # the counter's index keeps the bits that address it


class Push:
    """control Push: select_worker for a task that can be pushed, reject otherwise."""

    def __init__(self, store):
        self._worker = WorkerLookup(store, SELECT_WORKER)
        ctr = store.counter(DISPATCHES.name)
        self._packets, self._bytes = ctr.packets, ctr.bytes

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
        w = self._worker(hdr.worker_id)
        if w is not None:
            ig_md.ucast_egress_port, hdr.eth_dst, hdr.ip_dst = w
            hdr.kind = KIND_DISPATCH
            hdr.slice = ig_md.slice
            i = ig_md.slice & _POOL_MASK
            self._packets[i] += 1
            self._bytes[i] += nbytes
        else:  # no_worker
            self.reject(hdr, ig_md)
            ig_md.event = EV_NO_WORKER
