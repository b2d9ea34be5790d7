"""The worker table R2P2-SW, RackSched-SW and Pallas-SW declare alike, each in its own
control (select_worker: hdr.rain.worker_id -> to_worker(port, dmac, dip) or no_worker),
and a MAC parameter's six bytes, converted once (forward.py uses that too)."""

from __future__ import annotations

from .headers import MAX_WORKERS
from .schema import Action, Key, Param, Table


def select_worker(control: str) -> Table:
    """The table as `control` (the P4 instance name in SwitchIngress) declares it."""
    return Table(
        f"pipe.SwitchIngress.{control}.select_worker",
        keys=[Key("hdr.rain.worker_id", 16)],
        actions=[
            Action(f"SwitchIngress.{control}.to_worker", [Param("port", 9), Param("dmac", 48), Param("dip", 32)]),
            Action(f"SwitchIngress.{control}.no_worker"),
        ],
        size=MAX_WORKERS,
        default_action="no_worker",
    )


class MacBytes:
    """dmac parameter (an int) -> its 6 bytes, cached: the data plane's hot path converts
    the same few MACs on every frame. Bounded: a table rewritten many times cannot grow it."""

    LIMIT = 4096

    def __init__(self):
        self._cache: dict[int, bytes] = {}

    def __call__(self, dmac: int) -> bytes:
        mac = self._cache.get(dmac)
        if mac is None:
            if len(self._cache) > self.LIMIT:
                self._cache.clear()
            mac = self._cache[dmac] = dmac.to_bytes(6, "big")
        return mac


class WorkerLookup:
    """The data plane's read of a select_worker table: (port, dmac bytes, dip) of a worker
    id, or None on no_worker (a miss, or the default)."""

    def __init__(self, store, table: Table):
        self.table = store.table(table.name)
        self._find = self.table.finder
        self._mac = MacBytes()

    def __call__(self, worker_id: int) -> tuple[int, bytes, int] | None:
        entry = self._find((worker_id,))
        call = self.table.default if entry is None else entry.call
        if call.action != "to_worker":
            return None
        p = call.params
        return p["port"], self._mac(p["dmac"]), p["dip"]
