"""The IPv4 forwarding program (switch/p4/ipv4_forward.p4): the switch of the
server-side systems, where the network only carries kernel TCP between the hosts. As
data, its two controls (Rain's Forward and Events, same names), its store, and its
pipeline:

    SwitchIngressParser -> SwitchIngress (Forward, Events) -> SwitchIngressDeparser
        -> one unicast copy (SwitchEgress is empty: it leaves as ingress deparsed it)

    from switch.emulator.ipv4_forward import PROGRAM, make_store, pipeline
"""

from __future__ import annotations

from collections.abc import Callable

from . import events, forward
from .deparser import switch_ingress_deparser
from .headers import EV_NO_ROUTE, EV_PARSER_ERROR, Headers, IngressMd
from .parser import switch_ingress_parser
from .schema import Program
from .tables import TableStore

NAME = "ipv4_forward"

# In ipv4_forward.p4's instantiation order (ingress; egress has no control).
CONTROLS = (forward, events)

PROGRAM = Program(
    NAME,
    tables=[t for c in CONTROLS for t in c.TABLES],
    registers=[r for c in CONTROLS for r in c.REGISTERS],
    counters=[k for c in CONTROLS for k in c.COUNTERS],
)

Emit = Callable[[int, object], None]


def make_store(pipes: int = 1) -> TableStore:
    """A fresh TableStore of the program (no routes, counters zero)."""
    return TableStore(PROGRAM, pipes=pipes)


class Pipeline:
    """One pipe running ipv4_forward.p4 over a `TableStore`."""

    def __init__(self, store: TableStore, on_drop: Callable[[str], None] | None = None):
        self.store = store
        self.on_drop = on_drop or (lambda reason: None)  # egress drops nothing here: kept for the contract
        self.forward = forward.Forward(store)
        self.events = events.Events(store)
        self.hdr = Headers()
        self.ig_md = IngressMd()

    def process(self, ingress_port: int, frame, n: int, emit: Emit) -> int:
        """Run one frame (the first `n` bytes of the writable buffer `frame`); `emit(dev_port,
        data)` the copy that leaves. Returns the number of copies (0 or 1)."""
        hdr, ig_md = self.hdr, self.ig_md
        switch_ingress_parser(frame, n, hdr, ig_md, ingress_port)
        hdr.bridged_valid = True
        hdr.bridged_prewrite = 0
        if ig_md.parser_err != 0:
            ig_md.drop_ctl = 1
            ig_md.event = EV_PARSER_ERROR
        elif hdr.ipv4_valid:
            self.forward.apply(hdr, ig_md)  # its actions set the event
        else:
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
        self.events.apply(ig_md, n)
        if ig_md.drop_ctl:
            return 0
        switch_ingress_deparser(frame, hdr, ig_md)
        port = ig_md.ucast_egress_port
        if port is None:
            return 0
        emit(port, frame if len(frame) == n else frame[:n])
        return 1


def pipeline(store: TableStore, on_drop=None) -> Pipeline:
    """The IPv4 forwarding data plane over `store`."""
    return Pipeline(store, on_drop=on_drop)
