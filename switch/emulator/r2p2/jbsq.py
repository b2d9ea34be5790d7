"""Jbsq (switch/p4/r2p2/jbsq.p4): JBSQ(n) by recirculation: a depth per worker, set by
its REPORTs and raised by each dispatch, and what a task pass does with it."""

from __future__ import annotations

from ..headers import EV_NO_WORKER, KIND_DISPATCH, KIND_REJECT, KIND_TASK, MAX_WORKERS
from ..schema import Register
from .headers import EV_R2P2_DISPATCHED, EV_R2P2_RECIRCULATED, EV_R2P2_REPORT, R2P2_FLAG_RECIRC, recirc_port

DEPTH = Register("pipe.SwitchIngress.jbsq.depth", width=16, size=MAX_WORKERS)

TABLES = ()
REGISTERS = (DEPTH,)
COUNTERS = ()

_WORKER_MASK = MAX_WORKERS - 1  # a register's index keeps the bits that address its cells


class Jbsq:
    """control Jbsq: one RegisterAction on depth per packet (take or set_depth), then
    dispatch, recirculate, reject, or the end of a REPORT, as the P4's."""

    def __init__(self, store):
        self.depth = store.register(DEPTH.name).values

    # ---- RegisterActions
    def take(self, i: int, r2) -> int:
        value = self.depth[i]
        if value < r2.bound:
            self.depth[i] = (value + 1) & 0xFFFF
            return 1
        return 0

    def set_depth(self, i: int, hdr) -> None:
        self.depth[i] = hdr.report

    # ---- actions
    @staticmethod
    def dispatch(hdr, ig_md, r2) -> None:
        hdr.kind = KIND_DISPATCH
        hdr.eth_dst = r2.dmac
        hdr.ip_dst = r2.dip
        ig_md.ucast_egress_port = r2.port
        ig_md.event = EV_R2P2_DISPATCHED

    @staticmethod
    def recirculate(hdr, ig_md) -> None:
        hdr.report = (hdr.report + 1) & 0xFFFF
        hdr.flags |= R2P2_FLAG_RECIRC
        ig_md.ucast_egress_port = recirc_port(ig_md.ingress_port)
        ig_md.event = EV_R2P2_RECIRCULATED

    @staticmethod
    def reject(hdr, r2) -> None:
        hdr.eth_dst, hdr.eth_src = hdr.eth_src, hdr.eth_dst
        hdr.ip_dst, hdr.ip_src = hdr.ip_src, hdr.ip_dst
        hdr.udp_dst_port, hdr.udp_src_port = hdr.udp_src_port, hdr.udp_dst_port
        hdr.kind = KIND_REJECT
        r2.forward = 1
        r2.reject = 1

    @staticmethod
    def drop_no_worker(ig_md) -> None:
        ig_md.drop_ctl = 1
        ig_md.event = EV_NO_WORKER

    def apply(self, hdr, ig_md, r2) -> None:
        i = hdr.worker_id & _WORKER_MASK
        if hdr.kind == KIND_TASK:
            r2.took = self.take(i, r2) if r2.known else 0
            if not r2.known:
                self.drop_no_worker(ig_md)
            elif r2.took:
                self.dispatch(hdr, ig_md, r2)
            elif r2.passes_left >> 1 == 0:  # passes_left[15:1] == 0: the last pass allowed
                self.reject(hdr, r2)
            else:
                self.recirculate(hdr, ig_md)
        elif r2.known:  # a REPORT
            self.set_depth(i, hdr)
            ig_md.drop_ctl = 1  # report_done: a REPORT ends here
            ig_md.event = EV_R2P2_REPORT
        else:
            self.drop_no_worker(ig_md)
