"""R2P2Controller: programs a switch running switch/p4/r2p2.p4 (R2P2-SW, JBSQ(n) by
recirculation; docs/r2p2.md) through BFRuntime.

What it writes: forward (every inventory host), select_worker (worker id -> its
host's port, MAC, IP) and config.jbsq's default set_config(last_worker, bound = n,
max_passes). The round-robin cursor visits workers 0..last_worker and a pass on an id
without an entry drops its task, so the workers' ids must be 0..n-1.

A worker that leaves from the middle of that range cannot be skipped by the cursor:
its entry stays and its depth is pinned at the register's maximum, so every pass on
it finds it full and recirculates on to the next worker (a REPORT from it would unpin
it; a deregistered worker sends none). The highest worker leaving lowers last_worker
instead, taking any pinned ids below it along. A worker joining takes a pinned id or
the next one.
"""

from __future__ import annotations

from typing import ClassVar

from .baseline import BaselineController, Worker
from .errors import ControllerError
from .registration import ClientRegistration

PASS_BITS = 16  # the task's pass count and set_config's parameters are bit<16>
DEPTH_FULL = (1 << 16) - 1  # a depth no bound reaches: the cursor's passes skip the worker
QUIET_POLL_S = 0.02
QUIET_TIMEOUT_S = 5.0


class R2p2Controller(BaselineController):
    PROGRAM = "r2p2"
    TITLE = "R2P2-SW"
    CONFIG = "pipe.SwitchIngress.config.jbsq"
    SELECT = "pipe.SwitchIngress.workers.select_worker"
    CURSOR = "pipe.SwitchIngress.round_robin.cursor"
    DEPTH = "pipe.SwitchIngress.jbsq.depth"
    TABLES: ClassVar[tuple[str, ...]] = (CONFIG, SELECT)
    REGISTERS: ClassVar[tuple[str, ...]] = (CURSOR, DEPTH)

    def check_settings(self) -> None:
        s = self.settings
        top = (1 << PASS_BITS) - 2  # DEPTH_FULL stays above every bound
        if not 1 <= s.jbsq_n <= top:
            raise ControllerError(
                f"R2P2-SW: jbsq_n = {s.jbsq_n} is not a JBSQ bound the program takes (1..{top})",
                subject="baseline.jbsq_n",
                fix="set the spec's baseline.jbsq_n to 1 or more (the paper runs 1..16)",
            )
        if not 1 <= s.max_passes <= (1 << PASS_BITS) - 1:
            raise ControllerError(
                f"R2P2-SW: max_passes = {s.max_passes} is not in 1..{(1 << PASS_BITS) - 1} (a 16-bit pass count)",
                subject="max_passes",
                fix="leave max_passes out (65535) or give a smaller pass bound",
            )

    def _forget(self) -> None:
        super()._forget()
        self._pinned: dict[int, Worker] = {}  # left from the middle: entry kept, depth full

    # -- what the cursor covers ------------------------------------------------------------
    def check_workers(self, workers: dict[int, Worker], *, programming: bool) -> None:
        ids = sorted(workers) if programming else sorted({*workers, *self._pinned})
        if ids != list(range(len(ids))):
            missing = sorted(set(range(ids[-1] + 1)) - set(ids)) if ids else []
            raise ControllerError(
                f"R2P2-SW: worker ids {_ranges(ids)} leave a gap at {_ranges(missing)}; the round robin visits "
                "workers 0..last_worker and a task that lands on an id without a worker is lost",
                subject=missing[0] if missing else None,
                fix="number the worker threads 0..n-1 across the servers (rain-worker --worker-base)",
            )

    def _set_config(self, last: int | None) -> None:
        if last is None:
            self.tables[self.CONFIG].reset_default()  # unconfigured: every task rejected
        else:
            self.tables[self.CONFIG].set_default(
                "set_config",
                {"last_worker": last, "bound": self.settings.jbsq_n, "max_passes": self.settings.max_passes},
            )

    def _entry(self, w: Worker) -> None:
        self.tables[self.SELECT].upsert(w.id, "to_worker", {"port": w.dev_port, "dmac": w.mac, "dip": w.ip})

    # -- writing -----------------------------------------------------------------------
    def _install(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        batch = self.client.batch()
        for w in sorted(workers.values(), key=lambda x: x.id):
            batch.add(self.tables[self.SELECT], w.id, "to_worker", {"port": w.dev_port, "dmac": w.mac, "dip": w.ip})
        batch.send()
        for w in self._pinned.values():
            self._entry(w)
            self.registers[self.DEPTH].write(w.id, DEPTH_FULL)
        # the cursor reaches the workers only once each has its entry
        self._set_config(max([*workers, *self._pinned]) if workers else None)

    def _add_workers(self, new: dict[int, Worker], everyone: dict[int, Worker]) -> None:
        for w in new.values():
            self._entry(w)
            self.registers[self.DEPTH].write(w.id, 0)  # unpinned (a REPORT sets it from here on)
            self._pinned.pop(w.id, None)
        self._set_config(max([*everyone, *self._pinned]))

    def _remove_worker(self, w: Worker, rest: dict[int, Worker]) -> None:
        last = max([*rest, *self._pinned], default=None)
        if last is not None and w.id < last:
            # the cursor still visits it: full, so every pass on it moves on
            self.registers[self.DEPTH].write(w.id, DEPTH_FULL)
            self._pinned[w.id] = w
            return
        # the highest: the cursor stops short of it (and of pinned ids just below it) first
        live = max(rest, default=None)
        self._set_config(live)
        for pid in [p for p in self._pinned if live is None or p > live]:
            self.tables[self.SELECT].delete(pid)
            del self._pinned[pid]
        self.tables[self.SELECT].delete(w.id)
        self.registers[self.DEPTH].write(w.id, 0)

    def _resume(self) -> None:
        for pid in self._pinned:
            self.registers[self.DEPTH].write(pid, DEPTH_FULL)
        self._set_config(max([*self._workers, *self._pinned]) if self._workers else None)

    def _quiesce(self) -> None:
        """Tasks may still recirculate from the last load: with the config unset each
        one is rejected on its next pass. Wait (probed) until no pass is counted."""
        import time

        self._set_config(None)
        events = self.counters[self.EVENTS]
        idx = self.p4["EV_R2P2_RECIRCULATED"]
        deadline = time.monotonic() + QUIET_TIMEOUT_S
        last = events.read(idx).packets
        while True:
            time.sleep(QUIET_POLL_S)
            now = events.read(idx).packets
            if now == last:
                return
            if time.monotonic() > deadline:
                raise ControllerError(
                    f"R2P2-SW: tasks still recirculate {QUIET_TIMEOUT_S:g} s after the switch stopped taking them",
                    subject="recirculation",
                    fix="stop the clients before resetting the switch",
                )
            last = now

    # -- reading back ----------------------------------------------------------------
    def config(self) -> dict | None:
        """config.jbsq's set_config parameters as the switch holds them (None: unconfigured)."""
        d = self.tables[self.CONFIG].default()
        return dict(d.data) if d.action and d.action.endswith("set_config") else None

    def _state(self, regs: dict[str, dict]) -> dict:
        depth = self.pipe_cells(regs, "depth")
        return {
            "config": self.config(),
            "cursor": self.pipe_cells(regs, "cursor")[0],
            "depth": {str(w): depth[w] for w in sorted({*self._workers, *self._pinned})},
            "pinned": sorted(self._pinned),
        }


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> "0..2, 5"."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}..{ids[j]}")
        i = j + 1
    return ", ".join(out) or "none"
