"""What a system is to rainmaker: one declaration, read by the run, the simulator, the
planner, analysis and validity (docs/adding-a-system.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The switch program behind a server-side system: it forwards, the server schedules.
FORWARD_PROGRAM = "ipv4_forward"

# The clients' admission cap for a baseline (Rain's is its switch queue's capacity and the
# quotas, section 4): a switch queue of this many tasks, as Draconis-SW's holds on a testbed.
BASELINE_QUEUE = 4096


@dataclass(frozen=True)
class Policy:
    """The system in the simulated testbed: its C policy (simulate/core/policy_<name>.c,
    registered in core/sim.c) and how a point's parameters become its numbers."""

    name: str  # the C policy's name (rs_config.policy)
    description: str
    # the point's params (plan.Point.params) -> up to 8 numbers for rs_config.params
    params: Callable[[dict], list[float]] = field(default=lambda _: [])
    tokens: bool = False  # workers issue tokens under a quota


@dataclass(frozen=True)
class System:
    """One scheduling system: what runs where, and what its results mean.

    The switch: `program` is switch/p4/<program>.p4, served by the emulator under the same
    name and programmed by switch.control.registry's controller for it, with the settings
    `settings(spec, params, inventory)` returns for a point. The hosts: rain-worker runs in
    `worker_mode`; `fetches_payloads` gives it a FETCH timeout (a large task's payload is
    fetched from its client). The clients' admission cap is the switch queue (the
    system's own, sized by the spec, or the baselines' BASELINE_QUEUE) plus
    `worker_bound(params)` tasks per worker thread. `tokens_first`: the workers' tokens
    must be in the switch before the load starts. The simulator runs `policy`.
    `counters` names the switch counters analysis reads, with what they mean; a
    validity check in `not_applicable` is reported "not run", with the reason.

    A server-side system (Rakaia's family, systems/rpc.py) has no program, controller
    or worker mode: its policy schedules a server's messages over its cores, and on a
    testbed rpc-server runs it in `server_mode` (hosts/rpc, behind ipv4_forward.p4)."""

    name: str  # the spec's `systems:` entry and the plan's Point.system
    title: str  # as the paper names it
    program: str | None  # None: a server-side system (no switch program)
    params_block: str  # the spec's block its points' parameters come from: `rain`, `baseline` or `rpc`
    worker_mode: str | None  # rain-worker --mode (hosts/dpdk/worker/modes.c); None: server-side
    policy: Policy
    settings: Callable[[Any, dict, Any], Any] | None  # (spec, point params, inventory) -> controller settings
    worker_bound: Callable[[dict], int] = field(default=lambda _: 1)
    own_queue: bool = False  # the switch queue is the system's own (its size from the spec)
    queue_capacity: int | None = None  # a switch queue of fixed size (Draconis-SW's FIFO); None: the spec's
    tokens_first: bool = False
    # a point's variant changes the controller's settings (the baselines' jbsq_n, k, pools);
    # Rain's are the run's, its variants change the hosts' parameters only
    variant_settings: bool = True
    fetches_payloads: bool = False
    # extra emulator arguments for a point at dilation k (the emulated switch only)
    emulator_args: Callable[[float], list[str]] = field(default=lambda _k: [])
    counters: dict[str, str] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)  # validity check -> why
    paper: str = "Rain"  # the paper whose system (or baseline) it is
    server_mode: str | None = None  # rpc-server --mode of a server-side system (hosts/rpc/server.c)

    @property
    def switch_program(self) -> str:
        """What the switch runs for this system: its own program, or for a server-side
        system the plain forwarder (switch/p4/ipv4_forward.p4)."""
        return self.program if self.program is not None else FORWARD_PROGRAM

    @property
    def server_side(self) -> bool:
        """Scheduling inside one server (Rakaia's family): its cores are the worker
        threads of one host, with no switch program between the clients and them."""
        return self.program is None

    def admission_cap(self, own_queue_entries: int, worker_threads: int, params: dict) -> int:
        """The clients' Q_max (paper 4): what the switch queue holds (the system's own,
        `own_queue_entries`, or a baseline's BASELINE_QUEUE) and each worker thread's bound."""
        queue = own_queue_entries if self.own_queue else BASELINE_QUEUE
        return queue + self.worker_bound(params) * worker_threads
