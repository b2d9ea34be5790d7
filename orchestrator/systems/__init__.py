"""The systems rainmaker runs, one declaration each (base.System): Rain (rain.py), the
paper's baselines (baselines.py), and Rakaia's one-server RPC scheduling (rpc.py). The run, the simulator, the planner, analysis and
validity look a system up here and nowhere else; docs/adding-a-system.md lists what a
new one adds.

    from orchestrator.systems import SYSTEMS, get
    get("r2p2").worker_mode          # "report"
"""

from __future__ import annotations

from ..errors import UsageError
from .base import BASELINE_QUEUE, Policy, System
from .baselines import DRACONIS, PALLAS, R2P2, RACKSCHED
from .rain import RAIN
from .rpc import SERVER_SIDE

SYSTEMS: dict[str, System] = {s.name: s for s in (RAIN, R2P2, RACKSCHED, DRACONIS, PALLAS, *SERVER_SIDE)}
NAMES = tuple(SYSTEMS)


def get(name: str) -> System:
    """The system of that name, or a UsageError naming the known ones."""
    try:
        return SYSTEMS[name]
    except KeyError:
        raise UsageError(f"no system {name!r}", fix=f"use one of {', '.join(NAMES)}") from None


__all__ = ["BASELINE_QUEUE", "NAMES", "SYSTEMS", "Policy", "System", "get"]
