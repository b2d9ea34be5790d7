"""Workers (switch/p4/r2p2/workers.p4): the worker table, keyed by worker id."""

from __future__ import annotations

from ..worker_table import WorkerLookup, select_worker

SELECT_WORKER = select_worker("workers")

TABLES = (SELECT_WORKER,)
REGISTERS = ()
COUNTERS = ()


class Workers:
    """control Workers: known, port and addresses of hdr.worker_id into r2."""

    def __init__(self, store):
        self._worker = WorkerLookup(store, SELECT_WORKER)

    def apply(self, hdr, r2) -> None:
        w = self._worker(hdr.worker_id)
        if w is not None:
            r2.known = 1
            r2.port, r2.dmac, r2.dip = w
        else:  # no_worker
            r2.known = 0
