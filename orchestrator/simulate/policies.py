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


# The clients' admission cap for a baseline (Rain's is its switch queue's capacity and the
# quotas, section 4): a switch queue of this many tasks, as Draconis-SW's holds on a testbed.
BASELINE_QUEUE = 4096
R2P2_PASS_NS = 1000  # a recirculation pass on Tofino: about 1 us (docs/r2p2.md)
R2P2_MAX_PASSES = 0xFFFF  # the most the program's 16-bit pass count allows

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
    # The baselines of the Rain paper, section 5.2, as their switch programs (switch/p4) do them.
    "r2p2": Policy(
        "r2p2",
        "R2P2-SW: JBSQ(n) by recirculation, one round-robin worker per pass, depths from worker reports",
        # n; one pass's time (Tofino's recirculation, about 1 us); the passes allowed (16 bits)
        params=lambda p: [
            float(p.get("jbsq_n", 1)),
            float(p.get("recirc_ns", R2P2_PASS_NS)),
            float(p.get("max_passes", R2P2_MAX_PASSES)),
        ],
    ),
    "racksched": Policy(
        "racksched",
        "RackSched-SW: power-of-2 choices over reported loads, pushed, no bound on worker queues",
        params=lambda p: [float(p.get("k", 2))],
    ),
    "draconis": Policy(
        "draconis",
        "Draconis-SW: one FIFO in the switch, idle workers pull (JBSQ(1)), EMPTY when none waits; "
        "large payloads fetched from the client",
        tokens=True,
    ),
    "pallas": Policy(
        "pallas",
        "Pallas-SW: task type -> worker pool (the slices), weighted round robin push in the pool, no bound",
    ),
}
