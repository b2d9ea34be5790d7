"""Dispatch (switch/p4/racksched/dispatch.p4): a task's second pass leaves as DISPATCH
to its winner, addressed from the worker table; a REPORT from a worker id the table does
not hold is dropped and counted and sets no load."""

from __future__ import annotations

from ..headers import EV_DISPATCH_DIRECT, EV_NO_WORKER, KIND_DISPATCH, MAX_WORKERS
from ..schema import Action, Counter, Key, Param, Table
from .constants import EV_REPORT, EV_UNKNOWN_WORKER, RS_DISPATCH, RS_NONE, RS_REPORT, WORKER_INDEX_MASK

SELECT_WORKER = Table(
    "pipe.SwitchIngress.dispatch.select_worker",
    keys=[Key("hdr.rain.worker_id", 16)],
    actions=[
        Action("SwitchIngress.dispatch.to_worker", [Param("port", 9), Param("dmac", 48), Param("dip", 32)]),
        Action("SwitchIngress.dispatch.no_worker"),
    ],
    size=MAX_WORKERS,
    default_action="no_worker",
)

DISPATCHES = Counter("pipe.SwitchIngress.dispatch.dispatches", size=MAX_WORKERS)

TABLES = (SELECT_WORKER,)
REGISTERS = ()
COUNTERS = (DISPATCHES,)


class Dispatch:
    """control RackschedDispatch."""

    def __init__(self, store):
        self.table = store.table(SELECT_WORKER.name)
        self._find = self.table.finder
        ctr = store.counter(DISPATCHES.name)
        self._packets, self._bytes = ctr.packets, ctr.bytes
        self._macs: dict[int, bytes] = {}

    def apply(self, hdr, ig_md, nbytes: int) -> None:
        op = ig_md.rs_op
        if op != RS_DISPATCH and op != RS_REPORT:
            return
        entry = self._find((hdr.worker_id,))
        call = self.table.default if entry is None else entry.call
        if call.action == "to_worker":  # hit
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
            if op == RS_DISPATCH:
                hdr.kind = KIND_DISPATCH
                ig_md.event = EV_DISPATCH_DIRECT
                i = ig_md.rs_a & WORKER_INDEX_MASK
                self._packets[i] += 1
                self._bytes[i] += nbytes
            else:
                ig_md.drop_ctl = 1  # a report ends here
                ig_md.event = EV_REPORT
        else:  # no_worker (miss)
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_WORKER if op == RS_DISPATCH else EV_UNKNOWN_WORKER
            ig_md.rs_op = RS_NONE
