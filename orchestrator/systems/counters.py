"""Switch counters every program of switch/p4 has (events.p4), as analysis reads them."""

from __future__ import annotations

EVENTS_COUNTER = "pipe.SwitchIngress.events.events"  # switch/control/events.py: Events.COUNTER

EVENTS = {
    EVENTS_COUNTER: "one packets-and-bytes count per outcome (EV_* of switch/p4/types.p4): "
    "EV_DISPATCH_DIRECT and EV_DISPATCH_QUEUED give the queuing ratio; rejections and drops",
}
