"""PallasController: programs a switch running switch/p4/pallas.p4 (Pallas-SW: task
types isolated onto worker pools, a weighted round robin in each) through BFRuntime.

What it writes: forward (every inventory host), map_pool (task type -> pool, from the
settings' pools: the spec's slices), select_worker (worker id -> its host's port,
MAC, IP), and per pool its schedule (positions 1..length, each worker as many times
as its weight) and config_pool's length; cursors zero. A worker's pool is its slice
in its registration.

The schedule interleaves: round r holds, in id order, every worker whose weight is
above r, so weights 2:1 give a, b, a rather than a, a, b and a pool's tasks spread
over its workers within each cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from switch.p4.source import constants

from .baseline import BaselineController, Worker
from .errors import ControllerError
from .registration import ClientRegistration

SCHEDULE_ENTRIES: int = constants(program="pallas")["SCHEDULE_ENTRIES"]


def wrr_order(weights: Mapping[int, int]) -> list[int]:
    """The schedule of a pool: worker id -> weight, interleaved (see the module's doc)."""
    order = []
    for r in range(max(weights.values(), default=0)):
        order += [w for w in sorted(weights) if weights[w] > r]
    return order


class PallasController(BaselineController):
    PROGRAM = "pallas"
    TITLE = "Pallas-SW"
    MAP = "pipe.SwitchIngress.pool_map.map_pool"
    CONFIG = "pipe.SwitchIngress.wrr.config_pool"
    SCHEDULE = "pipe.SwitchIngress.wrr.schedule"
    SELECT = "pipe.SwitchIngress.push.select_worker"
    TABLES: ClassVar[tuple[str, ...]] = (MAP, CONFIG, SCHEDULE, SELECT)
    REGISTERS: ClassVar[tuple[str, ...]] = ("pipe.SwitchIngress.wrr.cursor",)
    COUNTERS: ClassVar[tuple[str, ...]] = ("pipe.SwitchIngress.push.dispatches",)

    def _forget(self) -> None:
        super()._forget()
        self._lengths: dict[int, int] = {}  # pool -> schedule length installed

    def schedules(self, workers: dict[int, Worker]) -> dict[int, list[int]]:
        """pool -> its schedule, for every configured pool (empty: no workers)."""
        out = {}
        for p, pool in self.settings.pools.items():
            mine = {w.id: pool.weights.get(w.id, 1) for w in workers.values() if w.pool == p}
            out[p] = wrr_order(mine)
        return out

    def check_workers(self, workers: dict[int, Worker], *, programming: bool) -> None:
        pools = self.settings.pools
        for w in sorted(workers.values(), key=lambda x: x.id):
            if w.pool not in pools:
                raise ControllerError(
                    f"Pallas-SW: worker {w.id} on {w.host} is in pool {w.pool}, which the settings do not configure",
                    subject=w.id,
                    fix=f"configure pool {w.pool} (a slice of the spec), or put the worker in one of: "
                    f"{', '.join(map(str, pools))}",
                )
        for p, pool in pools.items():
            for wid in pool.weights:
                if wid in workers and workers[wid].pool != p:
                    raise ControllerError(
                        f"Pallas-SW: pool {p} weighs worker {wid}, which registered in pool {workers[wid].pool}",
                        subject=wid,
                        fix="weigh each worker in its own pool",
                    )
        if programming:
            empty = [
                p for p, pool in pools.items() if pool.task_types and not any(w.pool == p for w in workers.values())
            ]
            if empty:
                raise ControllerError(
                    f"Pallas-SW: pool(s) {', '.join(map(str, empty))} serve task types but have no worker: every "
                    "task of them would be rejected",
                    subject=empty[0],
                    fix="give every pool at least one worker (the spec's slices' workers), or drop the pool",
                )
        total = sum(len(s) for s in self.schedules(workers).values())
        if total > SCHEDULE_ENTRIES:
            raise ControllerError(
                f"Pallas-SW: the pools' schedules take {total} entries (a worker one per unit of its weight); "
                f"the schedule table holds {SCHEDULE_ENTRIES}",
                subject="pools",
                fix="lower the weights, or use fewer workers",
            )

    def _write_schedule(self, pool: int, order: list[int]) -> None:
        """Positions 1..len(order) and the pool's length; positions past it removed.
        Longer: positions first, then the length; shorter: the length first."""
        sched, config = self.tables[self.SCHEDULE], self.tables[self.CONFIG]
        old = self._lengths.get(pool, 0)
        if not order:
            if old:
                config.delete(pool)  # no workers: its tasks are rejected (EV_POOL_EMPTY)
        elif len(order) < old:
            config.upsert(pool, "set_pool_config", {"length": len(order)})
        batch = self.client.batch()
        for pos, wid in enumerate(order, start=1):
            batch.upsert(sched, {"pool": pool, "position": pos}, "set_worker", {"worker": wid})
        for pos in range(len(order) + 1, old + 1):
            batch.delete(sched, {"pool": pool, "position": pos})
        batch.send()
        if order and len(order) >= old:
            config.upsert(pool, "set_pool_config", {"length": len(order)})
        self._lengths[pool] = len(order)

    def _entries(self, workers) -> None:
        batch = self.client.batch()
        for w in sorted(workers, key=lambda x: x.id):
            batch.upsert(self.tables[self.SELECT], w.id, "to_worker", {"port": w.dev_port, "dmac": w.mac, "dip": w.ip})
        batch.send()

    def _install(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        self._lengths = {}
        self._entries(workers.values())
        for p, order in self.schedules(workers).items():
            self._write_schedule(p, order)
        batch = self.client.batch()  # task types last: a task reaches a pool once it is complete
        for p, pool in self.settings.pools.items():
            for t in pool.task_types:
                batch.add(self.tables[self.MAP], t, "set_pool", {"pool": p})
        batch.send()

    def _add_workers(self, new: dict[int, Worker], everyone: dict[int, Worker]) -> None:
        self._entries(new.values())
        scheds = self.schedules(everyone)
        for p in sorted({w.pool for w in new.values()}):
            self._write_schedule(p, scheds[p])

    def _remove_worker(self, w: Worker, rest: dict[int, Worker]) -> None:
        self._write_schedule(w.pool, self.schedules(rest)[w.pool])
        self.tables[self.SELECT].delete(w.id)

    def _state(self, regs: dict[str, dict]) -> dict:
        cursor = self.pipe_cells(regs, "cursor")
        scheds = self.schedules(self._workers)
        return {
            str(p): {
                "task_types": list(pool.task_types),
                "schedule": scheds[p] if self._installed else [],
                "cursor": cursor[p],
            }
            for p, pool in self.settings.pools.items()
        }
