"""The R2P2-SW pipeline (switch/p4/r2p2.p4) wired as the P4 wires it:

    SwitchIngressParser -> SwitchIngress -> SwitchIngressDeparser
        -> traffic manager: one unicast copy, or the recirculation port of the pipe
        -> SwitchEgress (empty: every copy leaves as ingress deparsed it)

Recirculation: a copy to the pipe's recirculation port (local port 68) goes back into
this pipe's ingress, as Tofino's loopback port returns it. The pipeline keeps such
frames in its own queue instead of emitting them (the shared traffic manager is left
as it is); `recirculate(emit, budget, now)` runs the frames queued before the call and
due by `now` through ingress again (ingress_port = that port), so recirculated passes
interleave with arriving frames as on the switch, and a pass that recirculates again
waits behind them. The port loop (ports.py) calls it every round and sleeps no longer
than `next_due()`.

`recirc_delay` (seconds, `--recirc-delay-us`) is how long a pass takes to come back.
0 runs it on the next round of the loop, which then spins while a task recirculates;
on a time-dilated testbed, Tofino's pass time (about a microsecond) times the dilation
bounds both the passes and the CPU they cost to what the switch would do.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from ..deparser import emit_udp_rain, switch_ingress_deparser
from ..events import Events
from ..forward import Forward
from ..headers import (
    EV_BAD_RAIN,
    EV_FORWARDED,
    EV_NO_ROUTE,
    EV_PARSER_ERROR,
    KIND_TASK,
    RAIN_VERSION,
    Headers,
    IngressMd,
)
from ..parser import switch_ingress_parser
from ..tables import TableStore
from .config import Config
from .headers import (
    EV_R2P2_REJECTED,
    R2P2_FLAG_RECIRC,
    R2P2_KIND_MAX,
    R2P2_KIND_REPORT,
    R2P2_WORKER_BITS,
    R2p2Md,
    is_recirc_port,
)
from .jbsq import Jbsq
from .round_robin import RoundRobin
from .workers import Workers

log = logging.getLogger(__name__)

Emit = Callable[[int, object], None]


class SwitchIngress:
    """control SwitchIngress (r2p2.p4)."""

    def __init__(self, store: TableStore):
        self.forward = Forward(store)
        self.config = Config(store)
        self.round_robin = RoundRobin(store)
        self.workers = Workers(store)
        self.jbsq = Jbsq(store)
        self.events = Events(store)
        self.r2 = R2p2Md()

    def apply(self, hdr: Headers, ig_md: IngressMd, nbytes: int) -> bool:
        """Returns whether the packet took the R2P2 path (its rain header may have changed)."""
        r2 = self.r2
        hdr.bridged_valid = True
        hdr.bridged_prewrite = 0
        r2.forward = r2.reject = r2.known = 0
        r2p2_path = False
        if ig_md.parser_err != 0:
            ig_md.drop_ctl = 1
            ig_md.event = EV_PARSER_ERROR
        elif hdr.rain_valid and (hdr.kind == 0 or hdr.kind > R2P2_KIND_MAX):
            ig_md.drop_ctl = 1
            ig_md.event = EV_BAD_RAIN
        elif hdr.rain_valid and (hdr.kind == KIND_TASK or hdr.kind == R2P2_KIND_REPORT):
            recirculated = is_recirc_port(ig_md.ingress_port)
            if (
                hdr.version != RAIN_VERSION
                or (hdr.kind == R2P2_KIND_REPORT and hdr.worker_id >> R2P2_WORKER_BITS)
                or ig_md.bad_length  # the parser's length test of a large task
                or (not recirculated and hdr.flags & R2P2_FLAG_RECIRC)  # hosts never set it
            ):
                ig_md.drop_ctl = 1
                ig_md.event = EV_BAD_RAIN
            else:
                r2p2_path = True
                if hdr.kind == KIND_TASK and not recirculated:
                    hdr.report = 0  # passes taken: none yet
                self.config.apply(hdr, r2)
                if hdr.kind == KIND_TASK:
                    self.round_robin.apply(hdr, r2)
                self.workers.apply(hdr, r2)
                self.jbsq.apply(hdr, ig_md, r2)
        elif hdr.ipv4_valid:
            r2.forward = 1
        else:
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_ROUTE
        if r2.forward:
            self.forward.apply(hdr, ig_md)  # its actions set the event
            if r2.reject and ig_md.event == EV_FORWARDED:
                ig_md.event = EV_R2P2_REJECTED
        self.events.apply(ig_md, nbytes)
        return r2p2_path


class Pipeline:
    """One pipe running the R2P2-SW program over a `TableStore`."""

    def __init__(self, store: TableStore, on_drop: Callable[[str], None] | None = None):
        self.store = store
        self.on_drop = on_drop or (lambda reason: None)
        self.ingress = SwitchIngress(store)
        self.hdr = Headers()
        self.ig_md = IngressMd()
        self.recirc_delay = 0.0
        # (due, recirculation port, frame); one constant delay keeps them in due order
        self.recirc: deque[tuple[float, int, bytes]] = deque()

    @property
    def pending(self) -> int:
        """Frames waiting in the recirculation port."""
        return len(self.recirc)

    def next_due(self) -> float | None:
        """When the first waiting frame is due (time.monotonic), or None."""
        return self.recirc[0][0] if self.recirc else None

    def process(self, ingress_port: int, frame, n: int, emit: Emit) -> int:
        """Run one frame (the first `n` bytes of the writable buffer `frame`) through the
        pipe; `emit(dev_port, data)` the copy that leaves. Returns the number of copies
        (a recirculated frame does not leave: it is queued, see `recirculate`)."""
        hdr, ig_md = self.hdr, self.ig_md
        switch_ingress_parser(frame, n, hdr, ig_md, ingress_port)
        r2p2_path = self.ingress.apply(hdr, ig_md, n)
        if ig_md.drop_ctl:
            return 0
        switch_ingress_deparser(frame, hdr, ig_md)
        if r2p2_path:
            emit_udp_rain(frame, hdr)  # the reject swaps the UDP ports; every outcome writes rain
        port = ig_md.ucast_egress_port
        if port is None:
            return 0
        data = frame if len(frame) == n else frame[:n]
        if is_recirc_port(port):
            self.recirc.append((time.monotonic() + self.recirc_delay, port, bytes(data)))
            return 0
        emit(port, data)
        return 1

    def recirculate(self, emit: Emit, budget: int = 64, now: float | None = None) -> int:
        """Run up to `budget` of the frames queued in the recirculation port before this
        call and due by `now` (default: time.monotonic()) through ingress again; returns
        how many ran."""
        queue = self.recirc
        now = time.monotonic() if now is None else now
        done = 0
        for _ in range(min(budget, len(queue))):
            if queue[0][0] > now:
                break
            _due, port, data = queue.popleft()
            frame = bytearray(data)
            try:
                self.process(port, frame, len(frame), emit)
            except Exception:  # noqa: BLE001 - a frame must never stop the switch
                self.on_drop("internal_error")
                log.exception("recirculated frame %s", data[:64].hex())
            done += 1
        return done
