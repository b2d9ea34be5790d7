"""The Pallas-SW pipe (switch/p4/pallas.p4) wired as the P4 wires it:

    SwitchIngressParser -> SwitchIngress -> SwitchIngressDeparser -> one unicast copy

The parsers and deparsers are Rain's (parsers.p4 is shared). The egress control is
empty and no packet is replicated: the one copy leaves as ingress deparsed it (the
egress deparser's checksum over unchanged fields equals the ingress deparser's), so
egress is not run again, as Rain's pipeline does for its unicast copies.
"""

from __future__ import annotations

from collections.abc import Callable

from ..deparser import emit_udp_rain, switch_ingress_deparser
from ..events import Events
from ..forward import Forward
from ..headers import (
    EV_BAD_RAIN,
    EV_DISPATCH_DIRECT,
    EV_NO_ROUTE,
    EV_PARSER_ERROR,
    KIND_TASK,
    RAIN_VERSION,
    Headers,
    IngressMd,
)
from ..parser import switch_ingress_parser
from ..tables import TableStore
from .pool_map import PoolMap
from .push import Push
from .wrr import Wrr

Emit = Callable[[int, object], None]


class SwitchIngress:
    """control SwitchIngress (pallas.p4)."""

    def __init__(self, store: TableStore):
        self.forward = Forward(store)
        self.pool_map = PoolMap(store)
        self.wrr = Wrr(store)
        self.push = Push(store)
        self.events = Events(store)

    def apply(self, hdr: Headers, ig_md: IngressMd, nbytes: int) -> bool:
        """Returns whether the task path ran (its deparser then writes udp and rain)."""
        hdr.bridged_valid = True
        hdr.bridged_prewrite = 0
        task = False
        if ig_md.parser_err != 0:
            ig_md.drop_ctl = 1
            ig_md.event = EV_PARSER_ERROR
        elif hdr.rain_valid and hdr.kind == KIND_TASK:
            if hdr.version != RAIN_VERSION or ig_md.bad_length:
                ig_md.drop_ctl = 1
                ig_md.event = EV_BAD_RAIN
            else:
                task = True
                self.pool_map.apply(hdr, ig_md)
                if ig_md.event == EV_DISPATCH_DIRECT:
                    self.wrr.apply(hdr, ig_md)
                self.push.apply(hdr, ig_md, nbytes)
        elif hdr.ipv4_valid:
            self.forward.apply(hdr, ig_md)  # its actions set the event
        else:
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
        self.events.apply(ig_md, nbytes)
        return task


class Pipeline:
    """One pipe running Pallas-SW over a `TableStore`."""

    def __init__(self, store: TableStore, on_drop: Callable[[str], None] | None = None):
        self.store = store
        # Drops the P4 does not count itself: Pallas-SW has none (egress does nothing).
        self.on_drop = on_drop or (lambda reason: None)
        self.ingress = SwitchIngress(store)
        self.hdr = Headers()
        self.ig_md = IngressMd()

    def process(self, ingress_port: int, frame, n: int, emit: Emit) -> int:
        """Run one frame (the first `n` bytes of the writable buffer `frame`) through the
        pipe; `emit(dev_port, data)` the copy that leaves. Returns the number of copies."""
        hdr, ig_md = self.hdr, self.ig_md
        switch_ingress_parser(frame, n, hdr, ig_md, ingress_port)
        task = self.ingress.apply(hdr, ig_md, n)
        if ig_md.drop_ctl:
            return 0
        switch_ingress_deparser(frame, hdr, ig_md)  # ethernet and ipv4, in place
        if task:  # a pushed or rejected task: kind, slice, worker_id, and a reject's ports
            emit_udp_rain(frame, hdr)
        port = ig_md.ucast_egress_port
        if port is None:
            return 0
        emit(port, frame if len(frame) == n else frame[:n])
        return 1
