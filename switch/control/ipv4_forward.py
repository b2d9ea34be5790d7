"""Ipv4ForwardController: programs a switch running switch/p4/ipv4_forward.p4, the
plain forwarder of the server-side systems (Rakaia's measured layer), through
BFRuntime.

What it writes: forward, every inventory host's data IP -> its port and MAC, and
nothing else; the scheduling is inside the server, so no worker registers with the
switch. It shares the baselines' session, reset and snapshot (the events counter says
what the switch forwarded and dropped).
"""

from __future__ import annotations

from .baseline import BaselineController, Worker
from .errors import ControllerError
from .registration import ClientRegistration


class Ipv4ForwardController(BaselineController):
    PROGRAM = "ipv4_forward"
    TITLE = "IPv4 forwarding"

    def check_workers(self, workers: dict[int, Worker], *, programming: bool) -> None:
        if workers:
            raise ControllerError(
                f"{self.TITLE}: the switch schedules nothing, so no worker registers with it "
                f"(got {', '.join(str(w) for w in sorted(workers))})",
                subject="workers",
                fix="run a switch-side system's program (rain, r2p2, ...) for workers that register",
            )

    def _install(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        """forward is all it has: written by _write_all before this."""

    def _add_workers(self, new: dict[int, Worker], everyone: dict[int, Worker]) -> None:
        raise AssertionError("check_workers refuses every worker")  # never reached

    def _remove_worker(self, w: Worker, rest: dict[int, Worker]) -> None:
        raise AssertionError("no worker is ever registered")  # never reached
