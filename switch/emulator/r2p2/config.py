"""Config (switch/p4/r2p2/config.p4): the controller's settings, one keyless table."""

from __future__ import annotations

from ..schema import Action, Param, Table

JBSQ = Table(
    "pipe.SwitchIngress.config.jbsq",
    keys=[],
    actions=[
        Action(
            "SwitchIngress.config.set_config",
            [Param("last_worker", 16), Param("bound", 16), Param("max_passes", 16)],
        ),
        Action("SwitchIngress.config.unconfigured"),
    ],
    size=1,
    default_action="unconfigured",
)

TABLES = (JBSQ,)
REGISTERS = ()
COUNTERS = ()


class Config:
    """control Config: workers 0..last_worker, n of JBSQ(n), the passes left to a task."""

    def __init__(self, store):
        self.table = store.table(JBSQ.name)
        self._find = self.table.finder

    def apply(self, hdr, r2) -> None:
        entry = self._find(())  # keyless: the default action, unless an entry was added
        call = self.table.default if entry is None else entry.call
        if call.action == "set_config":
            p = call.params
            r2.last_worker = p["last_worker"]
            r2.bound = p["bound"]
            r2.passes_left = (p["max_passes"] - hdr.report) & 0xFFFF
        else:  # unconfigured: no worker takes a task, a task is rejected on its first pass
            r2.last_worker = r2.bound = r2.passes_left = 0
