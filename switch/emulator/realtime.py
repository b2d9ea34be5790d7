"""The data plane thread's real-time priority, taken only while frames flow.

On a testbed whose machines share one machine's cores, a frame must be switched when it
arrives, not when the scheduler gets round to the switch behind the hosts' pollers, so
the data plane thread may run at SCHED_FIFO (`--realtime PRIO`). But a real-time thread
that never sleeps holds its core against everything of the normal class: sshd, the
agents, another testbed's start-up. Two testbeds' clients and switches once held both
cores of a 2-core machine, and a third process waited 0.5 s for a 10 ms sleep. So:

- the thread is real-time only while frames flow: from the first frame after an idle
  spell until IDLE_S without one (a testbed's start-up, and the time between points,
  run in the normal class);
- after SLICE_S on the CPU without sleeping it sleeps REST_S, whatever waits in its
  rings: at most 80% of a core. The frames wait in the kernel's RX rings meanwhile.

Linux applies sched_setscheduler(0, ...) to the calling thread only, so the BFRuntime
server's threads keep the normal class.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

SLICE_S = 0.01
REST_S = 0.0025
IDLE_S = 1.0


class Realtime:
    def __init__(self, priority: int, *, slice_s: float = SLICE_S, rest_s: float = REST_S, idle_s: float = IDLE_S):
        self.priority = priority
        self.slice_s, self.rest_s, self.idle_s = slice_s, rest_s, idle_s
        self.on = False
        self.awake_since = 0.0  # when the loop last came back from a sleep
        self.last_busy = 0.0
        self.rests = 0  # slices that ran out
        self.error: str | None = None  # why the priority was refused (then never asked again)

    def busy(self, now: float) -> None:
        """The loop moved frames this round."""
        self.last_busy = now
        if not self.on:
            self._enter(now)
        elif now - self.awake_since > self.slice_s:
            time.sleep(self.rest_s)
            self.rests += 1
            self.awake_since = time.monotonic()

    def slept(self, now: float) -> None:
        """The loop waited in epoll this round: its slice starts again."""
        self.awake_since = now

    def housekeeping(self, now: float) -> None:
        """Back to the normal class after idle_s without a frame."""
        if self.on and now - self.last_busy > self.idle_s:
            self.leave()

    def _enter(self, now: float) -> None:
        if self.error is not None:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.priority))
        except (OSError, ValueError) as e:
            self.error = str(e)
            log.warning("could not run the data plane at SCHED_FIFO %d: %s", self.priority, e)
            return
        self.on = True
        self.awake_since = now

    def leave(self) -> None:
        if not self.on:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except OSError as e:  # (only a thread already gone could refuse)
            log.warning("could not leave SCHED_FIFO: %s", e)
        self.on = False
