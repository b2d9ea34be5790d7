"""The Rain program (switch/p4/rain.p4) as data, assembled from one module per P4
control (same names as the P4 instances), and its runtime store.

    from switch.emulator.rain import PROGRAM, make_store, pipeline
    store = make_store()            # a TableStore for the data plane and BFRuntime server
    pipe = pipeline(store)          # its data plane (programs.py: every program has the three)
"""

from __future__ import annotations

from . import bidir_queue, dispatch, events, forward, queue_entries, rdma_engine, rdma_writer, slice_map, telemetry
from .schema import Program
from .tables import TableStore

NAME = "rain"

# In rain.p4's instantiation order (ingress, then egress).
CONTROLS = (forward, slice_map, bidir_queue, rdma_engine, queue_entries, dispatch, telemetry, events, rdma_writer)

PROGRAM = Program(
    NAME,
    tables=[t for c in CONTROLS for t in c.TABLES],
    registers=[r for c in CONTROLS for r in c.REGISTERS],
    counters=[k for c in CONTROLS for k in c.COUNTERS],
)


def make_store(pipes: int = 1) -> TableStore:
    """A fresh TableStore of the Rain program (all tables empty, registers zero)."""
    return TableStore(PROGRAM, pipes=pipes)


def pipeline(store: TableStore, on_drop=None):
    """The Rain data plane over `store` (pipeline.py)."""
    from .pipeline import Pipeline

    return Pipeline(store, on_drop=on_drop)
