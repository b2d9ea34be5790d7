"""The Draconis-SW program (switch/p4/draconis.p4) as data, assembled from one module
per P4 control (same names as the P4 instances; forward, queue_entries and events are
the shared modules, as the P4 includes the shared files), and its runtime store.

    from switch.emulator.draconis import PROGRAM, make_store, pipeline
"""

from __future__ import annotations

from .. import events, forward, queue_entries
from ..schema import Program
from ..tables import TableStore
from . import dispatch, task_queue

NAME = "draconis"

# In draconis.p4's instantiation order.
CONTROLS = (forward, task_queue, queue_entries, dispatch, events)

PROGRAM = Program(
    NAME,
    tables=[t for c in CONTROLS for t in c.TABLES],
    registers=[r for c in CONTROLS for r in c.REGISTERS],
    counters=[k for c in CONTROLS for k in c.COUNTERS],
)


def make_store(pipes: int = 1) -> TableStore:
    """A fresh TableStore of the Draconis-SW program (all tables empty, registers zero)."""
    return TableStore(PROGRAM, pipes=pipes)


def pipeline(store: TableStore, on_drop=None):
    """The Draconis-SW data plane over `store`."""
    from .pipe import Pipeline

    return Pipeline(store, on_drop=on_drop)
