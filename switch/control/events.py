"""Events (switch/p4/events.p4): one packets-and-bytes counter per outcome, indexed by
the EV_* constants of switch/p4/types.p4 (read from the source, never retyped)."""

from __future__ import annotations

from switch.bfrt.client import Client, CounterValue

from .constants import P4

# index -> "EV_DISPATCH_DIRECT", ...
NAMES: dict[int, str] = {v: k for k, v in sorted(P4.items()) if k.startswith("EV_")}


class Events:
    COUNTER = "pipe.SwitchIngress.events.events"

    def __init__(self, client: Client):
        self.counter = client.counter(self.COUNTER)

    def read(self) -> dict[str, CounterValue]:
        """EV name -> (packets, bytes); unnamed indexes appear (as "16", ...) only if counted."""
        out: dict[str, CounterValue] = {}
        for i, v in enumerate(self.counter.read_all()):
            if i in NAMES:
                out[NAMES[i]] = v
            elif v.packets or v.bytes:
                out[str(i)] = v
        return out

    def clear(self) -> None:
        self.counter.clear()
