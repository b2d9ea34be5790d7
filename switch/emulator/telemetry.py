"""Telemetry (switch/p4/telemetry.p4): INT on every dispatched task (paper 3.3). The
controller turns stamping on with config_int's default action."""

from __future__ import annotations

from .headers import FLAG_INT, QOP_TASK_MATCHED, QOP_TOKEN_MATCHED
from .schema import Action, Table

CONFIG_INT = Table(
    "pipe.SwitchIngress.telemetry.config_int",
    keys=[],
    actions=[Action("SwitchIngress.telemetry.stamp"), Action("SwitchIngress.telemetry.dont_stamp")],
    size=1,
    default_action="dont_stamp",
)

TABLES = (CONFIG_INT,)
REGISTERS = ()
COUNTERS = ()


class Telemetry:
    """control Telemetry: INT on dispatched tasks when config_int says stamp."""

    def __init__(self, store):
        self.table = store.table(CONFIG_INT.name)
        self._find = self.table.finder

    def apply(self, hdr, ig_md, now: int) -> None:
        entry = self._find(())  # keyless: the default action, unless an entry was added
        ig_md.stamp_int = (self.table.default if entry is None else entry.call).action == "stamp"
        if ig_md.stamp_int:
            op = ig_md.queue_op
            if op == QOP_TASK_MATCHED:
                hdr.int_qdelay_ns = 0
                hdr.int_qlen = 0
                hdr.flags |= FLAG_INT
            elif op == QOP_TOKEN_MATCHED:
                hdr.int_qdelay_ns = (now - ig_md.entry_tstamp) & 0xFFFFFFFF
                # a token returns the balance it found, -n (n tasks waited); n - 1 remain
                hdr.int_qlen = ~ig_md.balance & 0xFFFFFFFF
                hdr.flags |= FLAG_INT
