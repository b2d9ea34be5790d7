"""Pallas-SW (switch/p4/pallas.p4) as data, assembled from one module per P4 control
(same names as the P4 instances; forward and events are Rain's, as the P4 shares
forward.p4 and events.p4), and its runtime store.

    from switch.emulator import pallas
    store = pallas.make_store()       # a TableStore for the data plane and BFRuntime server
    pipe = pallas.pipeline(store)     # its data plane (programs.py: every program has the three)
"""

from __future__ import annotations

from .. import events, forward
from ..schema import Program
from ..tables import TableStore
from . import pool_map, push, wrr

NAME = "pallas"

# In pallas.p4's instantiation order (ingress; egress has none).
CONTROLS = (forward, pool_map, wrr, push, events)

PROGRAM = Program(
    NAME,
    tables=[t for c in CONTROLS for t in c.TABLES],
    registers=[r for c in CONTROLS for r in c.REGISTERS],
    counters=[k for c in CONTROLS for k in c.COUNTERS],
)


def make_store(pipes: int = 1) -> TableStore:
    """A fresh TableStore of Pallas-SW (all tables empty, registers zero)."""
    return TableStore(PROGRAM, pipes=pipes)


def pipeline(store: TableStore, on_drop=None):
    """The Pallas-SW data plane over `store` (pipe.py: a submodule named `pipeline`
    would replace this function as the package's attribute once imported)."""
    from .pipe import Pipeline

    return Pipeline(store, on_drop=on_drop)
