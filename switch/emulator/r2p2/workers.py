"""Workers (switch/p4/r2p2/workers.p4): the worker table, keyed by worker id."""

from __future__ import annotations

from ..headers import MAX_WORKERS
from ..schema import Action, Key, Param, Table

SELECT_WORKER = Table(
    "pipe.SwitchIngress.workers.select_worker",
    keys=[Key("hdr.rain.worker_id", 16)],
    actions=[
        Action("SwitchIngress.workers.to_worker", [Param("port", 9), Param("dmac", 48), Param("dip", 32)]),
        Action("SwitchIngress.workers.no_worker"),
    ],
    size=MAX_WORKERS,
    default_action="no_worker",
)

TABLES = (SELECT_WORKER,)
REGISTERS = ()
COUNTERS = ()


class Workers:
    """control Workers: known, port and addresses of hdr.worker_id into r2."""

    def __init__(self, store):
        self.table = store.table(SELECT_WORKER.name)
        self._find = self.table.finder
        self._macs: dict[int, bytes] = {}  # dmac parameter -> its 6 bytes (converted once)

    def apply(self, hdr, r2) -> None:
        entry = self._find((hdr.worker_id,))
        call = self.table.default if entry is None else entry.call
        if call.action == "to_worker":
            p = call.params
            r2.known = 1
            r2.port = p["port"]
            dmac = p["dmac"]
            mac = self._macs.get(dmac)
            if mac is None:
                if len(self._macs) > 4096:
                    self._macs.clear()
                mac = self._macs[dmac] = dmac.to_bytes(6, "big")
            r2.dmac = mac
            r2.dip = p["dip"]
        else:  # no_worker
            r2.known = 0
