"""The Rain pipeline (switch/p4/rain.p4) wired exactly as the P4 wires it:

    SwitchIngressParser -> SwitchIngress -> SwitchIngressDeparser
        -> traffic manager (unicast / PRE multicast)
        -> per copy: SwitchEgressParser -> SwitchEgress -> SwitchEgressDeparser

Tables, registers and counters are the `TableStore`'s data, so what BFRuntime writes
the data plane sees on the next packet, and what the data plane changes BFRuntime
reads. `Pipeline.process(port, frame, n, emit)` runs one frame (modified in place,
so pass a writable buffer) and calls `emit(dev_port, data)` for each frame that leaves.

An egress copy whose bridged header says prewrite == 0 passes egress unchanged
(RdmaWriter does nothing to it and the egress deparser's checksum over unchanged
fields equals the ingress deparser's), so it is emitted without being parsed again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .bidir_queue import BidirQueue
from .deparser import switch_egress_deparser, switch_ingress_deparser
from .dispatch import Dispatch
from .events import Events
from .forward import Forward
from .headers import (
    EV_BAD_RAIN,
    EV_NO_ROUTE,
    EV_PARSER_ERROR,
    KIND_TASK,
    KIND_TOKEN,
    MAX_SLICES,
    RAIN_VERSION,
    EgressMd,
    Headers,
    IngressMd,
)
from .parser import switch_egress_parser, switch_ingress_parser
from .queue_entries import QueueEntries
from .rdma_engine import RdmaEngine
from .rdma_writer import RdmaWriter
from .slice_map import SliceMap
from .tables import TableStore
from .telemetry import Telemetry
from .traffic_manager import TrafficManager

Emit = Callable[[int, object], None]


def global_tstamp() -> int:
    """ig_prsr_md.global_tstamp[31:0]: the low 32 bits of a monotonic ns clock."""
    return time.monotonic_ns() & 0xFFFFFFFF


class SwitchIngress:
    """control SwitchIngress (rain.p4)."""

    def __init__(self, store: TableStore):
        self.forward = Forward(store)
        self.slice_map = SliceMap(store)
        self.bidir_queue = BidirQueue(store)
        self.rdma_engine = RdmaEngine(store)
        self.queue_entries = QueueEntries(store)
        self.dispatch = Dispatch(store)
        self.telemetry = Telemetry(store)
        self.events = Events(store)

    def apply(self, hdr: Headers, ig_md: IngressMd, nbytes: int, clock=global_tstamp) -> None:
        hdr.bridged_valid = True
        hdr.bridged_prewrite = 0
        if ig_md.parser_err != 0:
            ig_md.drop_ctl = 1
            ig_md.event = EV_PARSER_ERROR
        elif hdr.rain_valid and (hdr.kind == KIND_TASK or hdr.kind == KIND_TOKEN):
            if (
                hdr.version != RAIN_VERSION
                or (hdr.kind == KIND_TOKEN and hdr.slice >= MAX_SLICES)
                or ig_md.bad_length  # the parser's length test of a large task
            ):
                ig_md.drop_ctl = 1
                ig_md.event = EV_BAD_RAIN
            else:
                now = ig_md.now = clock()
                if hdr.kind == KIND_TASK:
                    self.slice_map.apply(hdr, ig_md)
                else:
                    ig_md.slice = hdr.slice
                self.bidir_queue.apply(hdr, ig_md)
                self.rdma_engine.apply(hdr, ig_md)
                self.queue_entries.apply(hdr, ig_md, now)
                self.dispatch.apply(hdr, ig_md)
                self.telemetry.apply(hdr, ig_md, now)
        elif hdr.ipv4_valid:
            self.forward.apply(hdr, ig_md)  # its actions set the event
        else:
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
        self.events.apply(ig_md, nbytes)


class SwitchEgress:
    """control SwitchEgress (rain.p4)."""

    def __init__(self, store: TableStore):
        self.rdma_writer = RdmaWriter(store)

    def apply(self, hdr: Headers, eg_md: EgressMd, nbytes: int) -> None:
        self.rdma_writer.apply(hdr, eg_md, nbytes)


class Pipeline:
    """One pipe running the Rain program over a `TableStore`."""

    def __init__(
        self, store: TableStore, clock: Callable[[], int] = global_tstamp, on_drop: Callable[[str], None] | None = None
    ):
        self.store = store
        self.clock = clock
        # Drops the P4 does not count itself (egress has no event counter): reported here.
        self.on_drop = on_drop or (lambda reason: None)
        self.ingress = SwitchIngress(store)
        self.egress = SwitchEgress(store)
        self.tm = TrafficManager(store)
        self.hdr = Headers()
        self.ig_md = IngressMd()
        self.eg_hdr = Headers()
        self.eg_md = EgressMd()
        # the frame being processed, for the egress callback (no closure per packet)
        self._frame = None
        self._n = 0
        self._emit: Emit | None = None

    def process(self, ingress_port: int, frame, n: int, emit: Emit) -> int:
        """Run one frame (the first `n` bytes of the writable buffer `frame`) through the
        pipe; `emit(dev_port, data)` each copy that leaves. Returns the number of copies."""
        hdr, ig_md = self.hdr, self.ig_md
        switch_ingress_parser(frame, n, hdr, ig_md, ingress_port)
        self.ingress.apply(hdr, ig_md, n, self.clock)
        if ig_md.drop_ctl:
            return 0
        switch_ingress_deparser(frame, hdr, ig_md)
        if not ig_md.mcast_grp_a and not hdr.bridged_prewrite:
            # The common case, the traffic manager's unicast copy inlined: at most one
            # copy, and egress leaves a prewrite == 0 copy unchanged (see above).
            port = ig_md.ucast_egress_port
            if port is None:
                return 0
            emit(port, frame if len(frame) == n else frame[:n])
            return 1
        self._frame, self._n, self._emit = frame, n, emit
        return self.tm.replicate(ig_md, self._egress)

    def _egress(self, dev_port: int, rid: int) -> None:
        hdr = self.hdr
        frame, n = self._frame, self._n
        if not hdr.bridged_prewrite:
            self._emit(dev_port, frame if len(frame) == n else frame[:n])
            return
        eg_hdr, eg_md = self.eg_hdr, self.eg_md
        eg_md.egress_port, eg_md.egress_rid, eg_md.drop_ctl, eg_md.offset = dev_port, rid, 0, 0
        switch_egress_parser(frame, n, eg_hdr, hdr.bridged_prewrite, hdr.bridged_slot, hdr.bridged_desc_len)
        self.egress.apply(eg_hdr, eg_md, n)
        if eg_md.drop_ctl:  # skip_replica: a worker of the group without build_write state
            self.on_drop("egress_skip_replica")
            return
        self._emit(dev_port, switch_egress_deparser(frame, n, eg_hdr))
