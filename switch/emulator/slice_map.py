"""SliceMap (switch/p4/slice_map.p4): a task's type decides its slice (paper 3.2.3).

Unmapped types go to slice 0 (the default action is set_slice(0)).
"""

from __future__ import annotations

from .headers import TASK_TYPES
from .schema import Action, Key, Param, Table

MAP_SLICE = Table(
    "pipe.SwitchIngress.slice_map.map_slice",
    keys=[Key("hdr.rain.task_type", 8)],
    actions=[Action("SwitchIngress.slice_map.set_slice", [Param("slice", 16)])],
    size=TASK_TYPES,
    default_action="set_slice",
    default_params={"slice": 0},
)

TABLES = (MAP_SLICE,)
REGISTERS = ()
COUNTERS = ()


class SliceMap:
    """control SliceMap: ig_md.slice from the task's type."""

    def __init__(self, store):
        self.table = store.table(MAP_SLICE.name)
        self._find = self.table.finder

    def apply(self, hdr, ig_md) -> None:
        entry = self._find((hdr.task_type,))
        call = self.table.default if entry is None else entry.call
        # set_slice is the table's only action
        ig_md.slice = call.params["slice"]
