"""Rain (the paper): per-slice bidirectional queues of tasks and worker tokens in the
switch, a token quota per worker thread, RDMA pre-writes of large tasks that wait."""

from __future__ import annotations

from .base import Policy, System
from .counters import EVENTS


def _settings(spec, params: dict, inv):
    from switch.control.settings import Settings, SliceSettings

    slices = {s.id: SliceSettings(task_types=tuple(s.task_types)) for s in spec.rain.slices or []}
    if not slices:
        slices = {0: SliceSettings(task_types=tuple(sorted({c.task_type for c in spec.workload.classes})))}
    return Settings(
        slices=slices,
        int_enabled=spec.rain.int_enabled,
        service_mac=inv.switch.service_mac,
        service_ip=inv.switch.service_ip,
    )


RAIN = System(
    name="rain",
    title="Rain",
    program="rain",
    params_block="rain",
    worker_mode="rain",
    policy=Policy(
        "rain",
        "Rain: per-slice bidirectional queue of tasks and worker tokens, token quota per worker, "
        "RDMA pre-write of large tasks that wait",
        # large_cap: a large task waits only while fewer tasks wait in its slice (0: no bound)
        params=lambda p: [float(p.get("large_cap", 0))],
        tokens=True,
    ),
    settings=_settings,
    worker_bound=lambda p: int(p.get("initial_quota", 1)),
    own_queue=True,
    tokens_first=True,
    variant_settings=False,
    fetches_payloads=True,  # a descriptor of a slot pre-written before a move
    counters={
        **EVENTS,
        "pipe.SwitchEgress.rdma_writer.writes": "RDMA WRITEs of waiting large tasks into each worker's ring",
    },
)
