"""The Draconis-SW pipeline (switch/p4/draconis.p4) wired as the P4 wires it:

    SwitchIngressParser -> SwitchIngress -> SwitchIngressDeparser -> unicast -> (egress)

The parsers and deparsers, Forward, QueueEntries and Events are the shared ones
(switch/emulator/). Every frame leaves by unicast, at most one copy, and the egress
control is empty: the egress deparser would write back the bytes the ingress one
wrote (the bridged header never leaves), so a frame is emitted as ingress left it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..deparser import switch_ingress_deparser
from ..events import Events
from ..forward import Forward
from ..headers import (
    EV_BAD_RAIN,
    EV_NO_ROUTE,
    EV_PARSER_ERROR,
    KIND_FETCH,
    KIND_FETCH_REPLY,
    KIND_PULL,
    KIND_RESPONSE,
    KIND_TASK,
    RAIN_VERSION,
    Headers,
    IngressMd,
)
from ..parser import switch_ingress_parser
from ..pipeline import global_tstamp
from ..queue_entries import QueueEntries
from ..tables import TableStore
from .dispatch import Dispatch
from .task_queue import TaskQueue

Emit = Callable[[int, object], None]

# Kinds forwarded by IP (to a client or a worker); a Rain frame of any other kind that
# is not TASK or PULL is the switch's own (DISPATCH, EMPTY, REJECT), another
# program's (TOKEN, REPORT) or unknown: dropped and counted.
_FORWARDED_KINDS = frozenset((KIND_RESPONSE, KIND_FETCH, KIND_FETCH_REPLY))


class SwitchIngress:
    """control SwitchIngress (draconis.p4)."""

    def __init__(self, store: TableStore):
        self.forward = Forward(store)
        self.task_queue = TaskQueue(store)
        self.queue_entries = QueueEntries(store)
        self.dispatch = Dispatch(store)
        self.events = Events(store)

    def apply(self, hdr: Headers, ig_md: IngressMd, nbytes: int, clock=global_tstamp) -> None:
        hdr.bridged_valid = True
        hdr.bridged_prewrite = 0
        if ig_md.parser_err != 0:
            ig_md.drop_ctl = 1
            ig_md.event = EV_PARSER_ERROR
        elif hdr.rain_valid and (hdr.kind == KIND_TASK or hdr.kind == KIND_PULL):
            if hdr.version != RAIN_VERSION:
                ig_md.drop_ctl = 1
                ig_md.event = EV_BAD_RAIN
            else:
                self.task_queue.apply(hdr, ig_md)
                self.queue_entries.apply(hdr, ig_md, clock())
                self.dispatch.apply(hdr, ig_md)
        elif hdr.rain_valid and hdr.kind not in _FORWARDED_KINDS:
            ig_md.drop_ctl = 1
            ig_md.event = EV_BAD_RAIN
        elif hdr.ipv4_valid:
            self.forward.apply(hdr, ig_md)  # its actions set the event
        else:
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
        self.events.apply(ig_md, nbytes)


class Pipeline:
    """One pipe running the Draconis-SW program over a `TableStore`."""

    def __init__(
        self, store: TableStore, clock: Callable[[], int] = global_tstamp, on_drop: Callable[[str], None] | None = None
    ):
        self.store = store
        self.clock = clock
        self.on_drop = on_drop or (lambda reason: None)  # nothing drops outside the P4's counters
        self.ingress = SwitchIngress(store)
        self.hdr = Headers()
        self.ig_md = IngressMd()

    def process(self, ingress_port: int, frame, n: int, emit: Emit) -> int:
        """Run one frame (the first `n` bytes of the writable buffer `frame`) through the
        pipe; `emit(dev_port, data)` the copy that leaves. Returns the number of copies."""
        hdr, ig_md = self.hdr, self.ig_md
        switch_ingress_parser(frame, n, hdr, ig_md, ingress_port)
        self.ingress.apply(hdr, ig_md, n, self.clock)
        if ig_md.drop_ctl:
            return 0
        switch_ingress_deparser(frame, hdr, ig_md)
        port = ig_md.ucast_egress_port
        if port is None:
            return 0
        emit(port, frame if len(frame) == n else frame[:n])
        return 1
