"""The scheduling policies of the simulated testbed, the Python side of the core's
plug-ins: each system's policy comes from its declaration (orchestrator/systems), and
`random` (a push to a random worker thread, the model's own reference) from here. A
policy names its C file (core/policy_<name>.c, registered in core/sim.c) and how a
point's parameters become the policy's numbers.
"""

from __future__ import annotations

from ..systems import SYSTEMS, Policy

POLICIES: dict[str, Policy] = {
    **{s.name: s.policy for s in SYSTEMS.values()},
    "random": Policy("random", "uniform random push to a worker thread: no tokens, no switch queue"),
}
