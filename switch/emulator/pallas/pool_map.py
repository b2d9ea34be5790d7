"""PoolMap (switch/p4/pallas/pool_map.p4): a task's type decides its pool; an
unmapped type has none (the task is rejected, EV_NO_POOL)."""

from __future__ import annotations

from ..headers import EV_DISPATCH_DIRECT, TASK_TYPES
from ..schema import Action, Key, Param, Table
from .defs import EV_NO_POOL

MAP_POOL = Table(
    "pipe.SwitchIngress.pool_map.map_pool",
    keys=[Key("hdr.rain.task_type", 8)],
    actions=[
        Action("SwitchIngress.pool_map.set_pool", [Param("pool", 16)]),
        Action("SwitchIngress.pool_map.no_pool"),
    ],
    size=TASK_TYPES,
    default_action="no_pool",
)

TABLES = (MAP_POOL,)
REGISTERS = ()
COUNTERS = ()


class PoolMap:
    """control PoolMap: ig_md.slice (the pool) and the verdict so far, in the actions."""

    def __init__(self, store):
        self.table = store.table(MAP_POOL.name)
        self._find = self.table.finder

    def apply(self, hdr, ig_md) -> None:
        entry = self._find((hdr.task_type,))
        call = self.table.default if entry is None else entry.call
        if call.action == "set_pool":
            ig_md.slice = call.params["pool"]
            ig_md.event = EV_DISPATCH_DIRECT
        else:  # no_pool
            ig_md.event = EV_NO_POOL
