"""The RackSched-SW program (switch/p4/racksched.p4) as data, assembled from one module
per P4 control (same names as the P4 instances), and its runtime store.

    from switch.emulator import racksched
    store = racksched.make_store()
    pipe = racksched.pipeline(store)    # .process(port, frame, n, emit)
"""

from __future__ import annotations

from .. import events, forward
from ..schema import Program
from ..tables import TableStore
from . import choose, dispatch, loads

NAME = "racksched"

# In racksched.p4's instantiation order (ingress; the egress has no controls).
CONTROLS = (forward, choose, dispatch, loads, events)

PROGRAM = Program(
    NAME,
    tables=[t for c in CONTROLS for t in c.TABLES],
    registers=[r for c in CONTROLS for r in c.REGISTERS],
    counters=[k for c in CONTROLS for k in c.COUNTERS],
)


def make_store(pipes: int = 1) -> TableStore:
    """A fresh TableStore of the RackSched-SW program (tables empty, loads zero)."""
    return TableStore(PROGRAM, pipes=pipes)


def pipeline(store: TableStore, on_drop=None):
    """The RackSched-SW data plane over `store` (pipe.py: not pipeline.py, whose import would replace this function on the package)."""
    from .pipe import Pipeline

    return Pipeline(store, on_drop=on_drop)
