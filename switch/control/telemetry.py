"""Telemetry (switch/p4/telemetry.p4): INT stamping of dispatched tasks, on or off by
the default action of config_int."""

from __future__ import annotations

from switch.bfrt.client import Client


class Telemetry:
    TABLE = "pipe.SwitchIngress.telemetry.config_int"
    STAMP = "SwitchIngress.telemetry.stamp"
    DONT_STAMP = "SwitchIngress.telemetry.dont_stamp"

    def __init__(self, client: Client):
        self.table = client.table(self.TABLE)

    def set(self, enabled: bool) -> None:
        self.table.set_default(self.STAMP if enabled else self.DONT_STAMP)

    def enabled(self) -> bool:
        return self.table.default().action == self.STAMP

    def clear(self) -> None:
        self.table.reset_default()
