"""Dispatch (switch/p4/racksched/dispatch.p4): a task's second pass leaves as DISPATCH
to its winner, addressed from the worker table; a REPORT from a worker id the table does
not hold is dropped and counted and sets no load."""

from __future__ import annotations

from ..headers import EV_DISPATCH_DIRECT, EV_NO_WORKER, KIND_DISPATCH, MAX_WORKERS
from ..schema import Counter
from ..worker_table import WorkerLookup, select_worker
from .constants import EV_REPORT, EV_UNKNOWN_WORKER, RS_DISPATCH, RS_NONE, RS_REPORT, WORKER_INDEX_MASK

SELECT_WORKER = select_worker("dispatch")

DISPATCHES = Counter("pipe.SwitchIngress.dispatch.dispatches", size=MAX_WORKERS)

TABLES = (SELECT_WORKER,)
REGISTERS = ()
COUNTERS = (DISPATCHES,)


class Dispatch:
    """control RackschedDispatch."""

    def __init__(self, store):
        self._worker = WorkerLookup(store, SELECT_WORKER)
        ctr = store.counter(DISPATCHES.name)
        self._packets, self._bytes = ctr.packets, ctr.bytes

    def apply(self, hdr, ig_md, nbytes: int) -> None:
        op = ig_md.rs_op
        if op != RS_DISPATCH and op != RS_REPORT:
            return
        w = self._worker(hdr.worker_id)
        if w is not None:  # hit
            ig_md.ucast_egress_port, hdr.eth_dst, hdr.ip_dst = w
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
