"""The Rain paper's baselines (section 5.2), each as its switch program does it: R2P2-SW,
RackSched-SW, Draconis-SW and Pallas-SW."""

from __future__ import annotations

from .base import BASELINE_QUEUE, Policy, System
from .counters import EVENTS

R2P2_PASS_NS = 1000  # a recirculation pass on Tofino: about 1 us (docs/r2p2.md)
R2P2_MAX_PASSES = 0xFFFF  # the most the program's 16-bit pass count allows
# One recirculation pass of a Tofino pipe, paper time: the emulated R2P2-SW switch holds a
# recirculated task this long, dilated (without it, a task at its bound spins the switch).
RECIRC_PASS_US = 1.0


def _baseline(program: str, data: dict):
    from switch.control.registry import settings_from

    return settings_from(program, data)


def _pools(spec) -> dict:
    """Pallas-SW's pools: the spec's slices, or one pool of every task type."""
    pools = {s.id: {"task_types": list(s.task_types)} for s in spec.rain.slices or []}
    return pools or {0: {"task_types": sorted({c.task_type for c in spec.workload.classes})}}


R2P2 = System(
    name="r2p2",
    title="R2P2-SW",
    program="r2p2",
    params_block="baseline",
    worker_mode="report",
    policy=Policy(
        "r2p2",
        "R2P2-SW: JBSQ(n) by recirculation, one round-robin worker per pass, depths from worker reports",
        # n; one pass's time (Tofino's recirculation, about 1 us); the passes allowed (16 bits)
        params=lambda p: [
            float(p.get("jbsq_n", 1)),
            float(p.get("recirc_ns", R2P2_PASS_NS)),
            float(p.get("max_passes", R2P2_MAX_PASSES)),
        ],
    ),
    settings=lambda spec, p, inv: _baseline("r2p2", {"jbsq_n": p.get("jbsq_n", 1)}),
    worker_bound=lambda p: int(p.get("jbsq_n", 1)),
    emulator_args=lambda k: ["--recirc-delay-us", f"{RECIRC_PASS_US * k:g}"],
    counters=dict(EVENTS),
)

RACKSCHED = System(
    name="racksched",
    title="RackSched-SW",
    program="racksched",
    params_block="baseline",
    worker_mode="report",
    policy=Policy(
        "racksched",
        "RackSched-SW: power-of-2 choices over reported loads, pushed, no bound on worker queues",
        params=lambda p: [float(p.get("k", 2))],
    ),
    settings=lambda spec, p, inv: _baseline("racksched", {"k": p.get("k", 2)}),
    counters=dict(EVENTS),
)

DRACONIS = System(
    name="draconis",
    title="Draconis-SW",
    program="draconis",
    params_block="baseline",
    worker_mode="pull",
    policy=Policy(
        "draconis",
        "Draconis-SW: one FIFO in the switch, idle workers pull (JBSQ(1)), EMPTY when none waits; "
        "large payloads fetched from the client",
        tokens=True,
    ),
    # JBSQ(1) by design: a pulling worker holds one task
    settings=lambda spec, p, inv: _baseline("draconis", {"queue_capacity": BASELINE_QUEUE}),
    queue_capacity=BASELINE_QUEUE,
    fetches_payloads=True,
    counters=dict(EVENTS),
)

PALLAS = System(
    name="pallas",
    title="Pallas-SW",
    program="pallas",
    params_block="baseline",
    worker_mode="push",
    policy=Policy(
        "pallas",
        "Pallas-SW: task type -> worker pool (the slices), weighted round robin push in the pool, no bound",
    ),
    settings=lambda spec, p, inv: _baseline("pallas", {"pools": _pools(spec)}),
    counters=dict(EVENTS),
)
