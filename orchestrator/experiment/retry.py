"""Between a point's attempts: wait, with growing pauses, until the testbed answers.

An attempt that failed because a host or the switch went away fails again at once if it
is retried at once: a 10 s sshd outage used up three attempts in under 10 s. So after a
failed attempt (of any point), the next attempt waits until every host answers SSH and
the switch answers BFRuntime: a pause, a look at every machine, a longer pause, another
look, until all answer or the point's budget of waiting is spent (then the attempt is
made anyway, and fails or not on its own). Pauses grow over the point's attempts too: a
fault that the testbed survives but the point does not is not hammered.

The budget (DEFAULT_BUDGET_S, `rainmaker run --retry-wait`) bounds the waiting per point,
so a host that is gone for good costs each remaining point at most that much.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..inventory import Inventory

DEFAULT_BUDGET_S = 120.0
PROBE_TIMEOUT_S = 5.0  # one look at one machine: a silent one is not waited for longer


@dataclass(frozen=True)
class Backoff:
    """Pauses first_s, first_s x factor, ... capped at max_s, summing to at most budget_s."""

    first_s: float = 1.0
    factor: float = 2.0
    max_s: float = 16.0
    budget_s: float = DEFAULT_BUDGET_S

    def __post_init__(self) -> None:
        if self.first_s <= 0 or self.factor < 1 or self.max_s < self.first_s or self.budget_s < 0:
            raise ValueError(f"not a back-off schedule: {self}")

    def pauses(self) -> Iterator[float]:
        """The pauses in order; they end when the next would overrun the budget (the
        last one is shortened to what is left)."""
        left, pause = self.budget_s, self.first_s
        while left > 1e-9:
            yield min(pause, left)
            left -= min(pause, left)
            pause = min(pause * self.factor, self.max_s)


class Waiter:
    """The waits between one point's attempts, against one budget."""

    def __init__(
        self,
        backoff: Backoff,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.backoff = backoff
        self.clock, self.sleep = clock, sleep
        self.spent = 0.0  # seconds waited and probed so far, against backoff.budget_s
        self._pauses = backoff.pauses()

    def until_answering(self, probe: Callable[[], dict[str, str]], log: Callable[[str], None]) -> bool:
        """Pause, then probe() (machine -> why it does not answer; empty when all do), and
        again with growing pauses, until all answer (True) or the budget is spent (False).
        Time spent probing counts against the budget too."""
        waiting_for: dict[str, str] = {}
        for pause in self._pauses:
            pause = min(pause, self.backoff.budget_s - self.spent)
            if pause <= 0:
                break
            if not waiting_for:
                log(f"waiting {pause:g} s, then asking every host (SSH) and the switch (BFRuntime)")
            t = self.clock()
            self.sleep(pause)
            waiting_for = probe()
            self.spent += self.clock() - t
            if not waiting_for:
                log("every host and the switch answer: trying again")
                return True
            left = max(0.0, self.backoff.budget_s - self.spent)
            log(
                "still waiting for "
                + "; ".join(f"{m} ({why})" for m, why in waiting_for.items())
                + f" ({left:.0f} s of the retry budget left)"
            )
        if waiting_for:
            log(
                f"gave up waiting: the retry budget of {self.backoff.budget_s:g} s is spent and "
                f"{', '.join(waiting_for)} still not answering; trying anyway"
            )
        else:
            log(f"the retry budget of {self.backoff.budget_s:g} s is spent: trying again without waiting")
        return False


def testbed_answers(inv: Inventory, timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """Every machine that does not answer now, with why: hosts over SSH (a new
    connection running `true`), the switch over BFRuntime (switchd.liveness: a gRPC
    handshake, no session)."""
    from .. import switchd
    from ..remote import Remote, targets

    def host(t) -> str | None:
        with Remote(t, connect_timeout=min(timeout, t.connect_timeout_s)) as r:
            res = r.run(["true"], timeout=timeout, check=False)
        return None if res.ok else (res.error or f"`true` exited with status {res.exit_code}")

    def switch() -> str | None:
        state, why = switchd.liveness(inv, timeout=timeout)
        return None if state == switchd.UP else f"{state}: {why}"

    hosts = targets(inv, include_switch=False)
    with ThreadPoolExecutor(max_workers=len(hosts) + 1, thread_name_prefix="rm-probe") as pool:
        sw = pool.submit(switch)
        per = {t.name: pool.submit(host, t) for t in hosts}
        out = {inv.switch.name: sw.result()} | {n: f.result() for n, f in per.items()}
    return {n: why for n, why in out.items() if why is not None}
