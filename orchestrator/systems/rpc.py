"""One-server RPC scheduling (Rakaia, OSDI 2026): TCP RPCs from many client
connections, scheduled over one server's cores by the server itself. The paper's
simulation compares three queueing models (CP, CS, MS), and Rakaia's own policy; KCM-
like is how the paper explains KCM's result. Each is a C policy of the simulated
testbed (simulate/core/policy_<name>.c, rpc.h); the spec's `rpc:` block gives the
connections (simulate/core/rpc.h draws each request's connection)."""

from __future__ import annotations

from .base import Policy, System


def _params(p: dict) -> list[float]:
    """[connections, Zipf exponent (0: uniform)], as rpc.h reads them."""
    zipf = float(p.get("zipf_s", 1.0)) if p.get("spread") == "zipf" else 0.0
    return [float(p.get("connections", 20)), zipf]


def _server_side(name: str, title: str, description: str, server_mode: str) -> System:
    return System(
        name=name,
        title=title,
        program=None,
        params_block="rpc",
        worker_mode=None,
        policy=Policy(name, description, params=_params),
        settings=None,
        paper="Rakaia",
        server_mode=server_mode,
        not_applicable={
            "tasks_intact": "a server-side system: no RDMA ring",
            # links_up applies: the forwarder's ports carry the point (links.json)
            "frames_delivered": "a server-side system: its frames are kernel TCP's (segments, ACKs, "
            "retransmissions), not one per request, and no host agent counts them",
        },
    )


MS = _server_side(
    "ms", "MS", "message-shared FIFO: one queue of messages, any idle core takes the oldest (M/G/c)", "pool"
)
CP = _server_side(
    "cp", "CP", "connection-partitioned FIFO: each connection bound to one core, which serves it in order", "cp"
)
CS = _server_side(
    "cs",
    "CS",
    "connection-shared FIFO: any idle core takes a ready connection, one message of it at a time (HOL blocking)",
    "cs",
)
RAKAIA = _server_side(
    "rakaia",
    "Rakaia",
    "per-core FIFOs, power of two choices, direct handoff to an idle core, stealing through a bitmap",
    "ms-user",
)
KCM = _server_side(
    "kcm", "KCM-like", "messages detached but kept on their connection's core (local scheduling only)", "kcm"
)

# A real application in place of rpc-server: Debian's memcached with its own threads. A
# listener hands each new connection to one worker thread (round robin), whose event
# loop serves it from then on: connection-partitioned, as TCP-CP. Its service time is
# memcached's own, so no model stands beside its points.
MEMCACHED = System(
    name="memcached",
    title="memcached",
    program=None,
    params_block="rpc",
    worker_mode=None,
    policy=Policy("cp", "memcached's threads: each connection owned by one thread, served in order", params=_params),
    settings=None,
    paper="Rakaia",
    server_mode="memcached",
    not_applicable=MS.not_applicable
    | {"model_agreement": "memcached decides its own service time: no distribution gives the model its draws"},
)

SERVER_SIDE = (MS, CP, CS, RAKAIA, KCM, MEMCACHED)
