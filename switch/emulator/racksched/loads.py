"""Loads (switch/p4/racksched/loads.p4): each worker's load in two copies, load_a and
load_b, so one pass can read two workers'. A REPORT sets both copies of its worker, a
dispatch adds one to both copies of its winner, and a task's first pass reads its first
choice from load_a, its second from load_b, and resubmits itself with the less loaded
(ties: the first)."""

from __future__ import annotations

from ..headers import MAX_WORKERS
from ..schema import Counter, Register
from .constants import RS_CHOOSE, RS_DISPATCH, RS_REPORT, WORKER_INDEX_MASK

LOAD_A = Register("pipe.SwitchIngress.loads.load_a", width=32, size=MAX_WORKERS)
LOAD_B = Register("pipe.SwitchIngress.loads.load_b", width=32, size=MAX_WORKERS)
REPORTS = Counter("pipe.SwitchIngress.loads.reports", size=MAX_WORKERS)

TABLES = ()
REGISTERS = (LOAD_A, LOAD_B)
COUNTERS = (REPORTS,)


class Loads:
    """control Loads: one RegisterAction on each copy per pass, as the P4's."""

    def __init__(self, store):
        self.load_a = store.register(LOAD_A.name).values
        self.load_b = store.register(LOAD_B.name).values
        ctr = store.counter(REPORTS.name)
        self._packets, self._bytes = ctr.packets, ctr.bytes

    def apply(self, hdr, ig_md, nbytes: int) -> None:
        op = ig_md.rs_op
        if op == RS_CHOOSE:
            la = ig_md.rs_load_a = self.load_a[ig_md.rs_a & WORKER_INDEX_MASK]  # read_a
            lb = ig_md.rs_load_b = self.load_b[ig_md.rs_b & WORKER_INDEX_MASK]  # read_b
            ig_md.rs_diff = (lb - la) & 0xFFFFFFFF  # difference
            # resubmit_to: the first choice unless the sign bit says load_b < load_a
            ig_md.resubmit_worker = ig_md.rs_a if ig_md.rs_diff >> 31 == 0 else ig_md.rs_b
            ig_md.resubmit_type = 1
        elif op == RS_DISPATCH:
            i = ig_md.rs_a & WORKER_INDEX_MASK
            self.load_a[i] = (self.load_a[i] + 1) & 0xFFFFFFFF  # add_a
            self.load_b[i] = (self.load_b[i] + 1) & 0xFFFFFFFF  # add_b
        elif op == RS_REPORT:
            i = ig_md.rs_a & WORKER_INDEX_MASK
            self.load_a[i] = self.load_b[i] = hdr.report  # set_a, set_b
            self._packets[i] += 1
            self._bytes[i] += nbytes
