"""The R2P2-SW program (switch/p4/r2p2.p4): the Rain paper's R2P2 baseline, JBSQ(n)
in the switch by recirculation. As data, assembled from one module per P4 control
(same names as the P4 instances), and its runtime store.

    from switch.emulator.r2p2 import PROGRAM, make_store, pipeline
    store = make_store()
    pipe = pipeline(store)          # .process(port, frame, n, emit), .recirculate(emit, budget)
"""

from __future__ import annotations

from .. import events, forward
from ..schema import Program
from ..tables import TableStore
from . import config, jbsq, round_robin, workers

NAME = "r2p2"

# In r2p2.p4's instantiation order (ingress; egress has no control).
CONTROLS = (forward, config, round_robin, workers, jbsq, events)

PROGRAM = Program(
    NAME,
    tables=[t for c in CONTROLS for t in c.TABLES],
    registers=[r for c in CONTROLS for r in c.REGISTERS],
    counters=[k for c in CONTROLS for k in c.COUNTERS],
)


def make_store(pipes: int = 1) -> TableStore:
    """A fresh TableStore of the R2P2-SW program (all tables empty, registers zero)."""
    return TableStore(PROGRAM, pipes=pipes)


def pipeline(store: TableStore, on_drop=None):
    """The R2P2-SW data plane over `store` (pipe.py: not pipeline.py, whose import would replace this function on the package)."""
    from .pipe import Pipeline

    return Pipeline(store, on_drop=on_drop)
