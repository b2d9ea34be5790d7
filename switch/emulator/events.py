"""Events (switch/p4/events.p4): one counter per outcome (EV_*); every ingress packet
counts exactly once."""

from __future__ import annotations

from .headers import EVENT_COUNTERS
from .schema import Counter

EVENTS = Counter("pipe.SwitchIngress.events.events", size=EVENT_COUNTERS)

TABLES = ()
REGISTERS = ()
COUNTERS = (EVENTS,)


class Events:
    """control Events: events.count(ig_md.event), packets and bytes."""

    def __init__(self, store):
        ctr = store.counter(EVENTS.name)
        self.packets = ctr.packets
        self.bytes = ctr.bytes

    def apply(self, ig_md, nbytes: int) -> None:
        ev = ig_md.event
        self.packets[ev] += 1
        self.bytes[ev] += nbytes
