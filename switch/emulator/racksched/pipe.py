"""The RackSched-SW pipeline (switch/p4/racksched.p4) wired as the P4 wires it:

    SwitchIngressParser -> SwitchIngress -> (resubmitted: SwitchIngressParser ->
    SwitchIngress again) -> SwitchIngressDeparser -> traffic manager (unicast only)

The egress does nothing to a packet (the program's SwitchEgress is empty, and the shared
egress deparser over unchanged fields writes what came in), so a copy leaves as the
ingress deparser wrote it, as in Rain's pipeline.

Resubmit, as TNA does it: the first pass's changes to headers and metadata are
discarded, the original frame goes through the parser again with the resubmit header
(the winner) where port metadata would be, and only the second pass's outcome leaves.
Each pass counts its own event.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..deparser import emit_udp_rain, switch_ingress_deparser
from ..events import Events
from ..forward import Forward
from ..headers import (
    EV_BAD_RAIN,
    EV_NO_ROUTE,
    EV_PARSER_ERROR,
    KIND_MAX,
    KIND_REPORT,
    KIND_TASK,
    RAIN_VERSION,
    Headers,
    IngressMd,
)
from ..parser import switch_ingress_parser
from ..tables import TableStore
from .choose import Choose
from .constants import RS_NONE
from .dispatch import Dispatch
from .loads import Loads

Emit = Callable[[int, object], None]


class RackschedIngressMd(IngressMd):
    """ingress_md_t's RackSched-SW fields (rs_*, resubmit) beside the shared ones, plus
    TNA's resubmit intrinsics: ig_intr_md.resubmit_flag, ig_dprsr_md.resubmit_type."""

    __slots__ = (
        "rs_op",
        "rs_rand",
        "rs_a",
        "rs_b",
        "rs_load_a",
        "rs_load_b",
        "rs_diff",
        "resubmit_worker",
        "resubmit_flag",
        "resubmit_type",
    )

    def __init__(self):
        super().__init__()
        self.rs_op = self.rs_rand = self.rs_a = self.rs_b = 0
        self.rs_load_a = self.rs_load_b = self.rs_diff = 0
        self.resubmit_worker = self.resubmit_flag = self.resubmit_type = 0


class SwitchIngress:
    """control SwitchIngress (racksched.p4)."""

    def __init__(self, store: TableStore, rng: random.Random | None = None):
        self.forward = Forward(store)
        self.choose = Choose(store, rng)
        self.dispatch = Dispatch(store)
        self.loads = Loads(store)
        self.events = Events(store)

    def apply(self, hdr: Headers, ig_md: RackschedIngressMd, nbytes: int) -> None:
        hdr.bridged_valid = True
        hdr.bridged_prewrite = 0
        ig_md.rs_op = RS_NONE
        if ig_md.parser_err != 0:
            ig_md.drop_ctl = 1
            ig_md.event = EV_PARSER_ERROR
        elif hdr.rain_valid and (hdr.kind == KIND_TASK or hdr.kind == KIND_REPORT):
            if hdr.version != RAIN_VERSION or (hdr.kind == KIND_REPORT and hdr.worker_id >> 10):
                # a REPORT's worker id indexes the loads: out of range it would alias another's
                ig_md.drop_ctl = 1
                ig_md.event = EV_BAD_RAIN
            else:
                self.choose.apply(hdr, ig_md)
                self.dispatch.apply(hdr, ig_md, nbytes)
                self.loads.apply(hdr, ig_md, nbytes)
        elif hdr.ipv4_valid:
            self.forward.apply(hdr, ig_md)  # its actions set the event
            if hdr.rain_valid and (hdr.kind == 0 or hdr.kind > KIND_MAX):
                ig_md.drop_ctl = 1  # no kind of the protocol, whatever its address
                ig_md.event = EV_BAD_RAIN
        else:
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
        self.events.apply(ig_md, nbytes)


class Pipeline:
    """One pipe running RackSched-SW over a `TableStore`."""

    def __init__(
        self,
        store: TableStore,
        on_drop: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
    ):
        self.store = store
        self.on_drop = on_drop or (lambda reason: None)  # the program drops nothing uncounted
        self.ingress = SwitchIngress(store, rng)
        self.hdr = Headers()
        self.ig_md = RackschedIngressMd()

    def _pass(self, frame, n: int, ingress_port: int, resubmit_flag: int, worker: int) -> None:
        hdr, ig_md = self.hdr, self.ig_md
        switch_ingress_parser(frame, n, hdr, ig_md, ingress_port)
        ig_md.resubmit_flag = resubmit_flag
        ig_md.resubmit_worker = worker  # parse_resubmit (meaningful only when resubmitted)
        ig_md.resubmit_type = 0
        self.ingress.apply(hdr, ig_md, n)

    def process(self, ingress_port: int, frame, n: int, emit: Emit) -> int:
        """Run one frame (the first `n` bytes of the writable buffer `frame`) through the
        pipe; `emit(dev_port, data)` the copy that leaves. Returns the number of copies."""
        hdr, ig_md = self.hdr, self.ig_md
        self._pass(frame, n, ingress_port, 0, 0)
        if ig_md.resubmit_type:  # the deparser resubmits: nothing of this pass leaves
            self._pass(frame, n, ingress_port, 1, ig_md.resubmit_worker)
        if ig_md.drop_ctl:
            return 0
        port = ig_md.ucast_egress_port
        if port is None:
            return 0
        switch_ingress_deparser(frame, hdr, ig_md)
        if hdr.rain_valid:
            emit_udp_rain(frame, hdr, udp=False)  # the shared deparser writes rain only on Rain's queue path
        emit(port, frame if len(frame) == n else frame[:n])
        return 1
