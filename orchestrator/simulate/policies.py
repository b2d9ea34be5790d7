"""The scheduling policies of the simulated testbed, the Python side of the core's
plug-ins: one entry per system, naming its C policy (core/policy_<name>.c, registered
in core/sim.c) and how the point's parameters become the policy's numeric parameters.

A baseline adds one C file, one line in the core's registry and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Policy:
    name: str  # the C policy's name (rs_config.policy)
    description: str
    # the point's params (plan.Point.params) -> up to 8 numbers for rs_config.params
    params: Callable[[dict], list[float]] = field(default=lambda _: [])
    tokens: bool = False  # workers issue tokens under a quota


POLICIES: dict[str, Policy] = {
    "rain": Policy(
        "rain",
        "Rain: per-slice bidirectional queue of tasks and worker tokens, token quota per worker, "
        "RDMA pre-write of large tasks that wait",
        # large_cap: a large task waits only while fewer tasks wait in its slice (0: no bound)
        params=lambda p: [float(p.get("large_cap", 0))],
        tokens=True,
    ),
    "random": Policy("random", "uniform random push to a worker thread: no tokens, no switch queue"),
}
