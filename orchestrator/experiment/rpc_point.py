"""One point of a server-side system (Rakaia's family), measured on the testbed: the
pipeline of point.py, with the steps that differ for kernel TCP RPCs.

    prepare_hosts -> forward -> start_server -> start_clients
        -> start_load -> measure -> collect -> judge

The switch runs the plain forwarder (ipv4_forward: every host's data IP to its port);
the scheduling is rpc-server's, in the point's system's mode, on the first worker host
(the paper's one server; the other worker hosts stay idle). Each client host's
rpc-client opens its share of the spec's connections to it and sends its share of the
load. Both run under the RPC agents (hosts/agent/rpc.py), which give the hosts' data
interfaces their kernel IPs for the point and take them away after it. A client's
results are rain-client's files (rpc-client writes its formats), so validity, the model
beside the point and analysis read them as any point's."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..remote import Background
from . import agent_config, layout
from .bench import AGENT_DONE, Bench
from .layout import PointDir
from .plan import Point
from .point import (
    CALIBRATION,
    POINT,
    SEGMENT,
    Attempt,
    cores_for,
    idle_marks,
    judge_attempt,
    load_marks,
    prepare_hosts,
    switch_for,
    write_cpu,
)
from .switch_side import PointFailed

SERVER_ROLE, CLIENT_ROLE = "rpc-server", "rpc-client"


def measure_rpc_point(
    b: Bench, p: Point, attempt: int = 1, *, calibration: bool = False, probe: bool = False, segment: int | None = None
):
    """Measure p once (point.measure_point's contract): its verdict, or None for a
    calibration (calibrate.py: rpc-client's round trip through the forwarder and
    rpc-server's own cost). The service probe measures a real handler's times
    (RocksDB's), which no server-side system has."""
    if probe:
        raise PointFailed(
            f"{p.id}: a server-side system has no service probe: its service times are the ones rpc-client asks for",
            fix="give the RPC spec's workload a constant, exponential or bimodal service",
        )
    kind = CALIBRATION if calibration else SEGMENT if segment is not None else POINT
    a = prepare_hosts(b, p, attempt, kind, segment)
    a = forward(b, a)
    s = start_server(b, a)
    s = start_clients(b, s)
    with cores_for(b, p):
        run = start_load(b, s)
        run = measure(b, run)
    collect(b, run)
    return judge_attempt(b, a, run.setup_s, run.t1, {"server": run.s.server_host})


@dataclass
class Servers:
    a: Attempt
    server_host: str
    server: Background
    clients: dict[str, Background]


@dataclass
class Running:
    s: Servers
    links_before: dict
    t_links: float
    setup_s: float
    cpu: dict  # point.load_marks: the hypervisor's steal, and a calibration's CPU
    t1: float = 0.0


def forward(b: Bench, a: Attempt) -> Attempt:
    """The forwarder on the switch (started once for every server-side point of the
    run), its routes written again and its counters zeroed (program installs exactly
    that). A plain LAN (switch.kind: lan) has no program: the hosts' own ARP finds each
    other."""
    if b.inv.switch.programmable:
        switch_for(b, a).program()
    return a


def start_server(b: Bench, a: Attempt) -> Servers:
    """rpc-server on the first worker host, listening once its agent says ready."""
    b.phase("start server")
    host = b.inv.workers[0]
    out = b.remote_dir(host, a.p, "worker")
    cfg = agent_config.rpc_server(b.inv, b.spec, a.p, a.system, host.name, out)
    bg = b.start_agent(host.name, SERVER_ROLE, cfg, out)
    return Servers(a, host.name, bg, {})


def start_clients(b: Bench, s: Servers) -> Servers:
    """Every client host's agent, its data interface up, holding its load."""
    b.phase("start clients")
    a, inv = s.a, b.inv

    def start(name: str) -> Background:
        out = b.remote_dir(inv.host(name), a.p, "client")
        cfg = agent_config.rpc_client(inv, b.spec, a.p, name, s.server_host, out, a.segment)
        return b.start_agent(name, CLIENT_ROLE, cfg, out)

    s.clients = b.tb.parallel(start, [c.name for c in inv.clients])
    return s


def start_load(b: Bench, s: Servers) -> Running:
    b.phase("start load")
    ctl = b.switch.ctl  # None on a plain LAN: no counters to read
    links_before, t_links = (ctl.links() if ctl is not None else {}), time.monotonic()
    cpu = load_marks(b, idle_marks(b, s.a))  # a calibration's idle testbed: the server and clients up
    b.tb.parallel(lambda n: b.signal(n, s.clients[n]), list(s.clients))
    return Running(s, links_before, t_links, time.monotonic() - s.a.t0, cpu)


def measure(b: Bench, run: Running) -> Running:
    """Warm-up, measurement and the drain: until every client agent says it is done.
    Connecting thousands of connections happens in the warm-up."""
    s, p = run.s, run.s.a.p
    b.phase(f"measure ({p.warmup_s:g} s warm-up + {p.measure_s:g} s)")
    budget = p.warmup_s + p.measure_s + agent_config.timeout_us(b.spec, p) / 1e6 + 60  # the drain: rpc-client's
    b.tb.parallel(
        lambda n: b.tb.remotes[n].wait_ready(
            s.clients[n], log_regex=AGENT_DONE, timeout=budget, quiet_s=p.warmup_s + p.measure_s
        ),
        list(s.clients),
    )
    run.t1 = time.monotonic()
    write_cpu(b, s.a, run.cpu, run.t1)
    return run


def collect(b: Bench, run: Running) -> None:
    """The switch's links, the server's counts (its agent stopped: SIGTERM), every
    host's files; a server or client that did not live through the point fails it."""
    s = run.s
    a, inv, ctl = s.a, b.inv, b.switch.ctl
    pd: PointDir = a.pd
    if ctl is not None and ctl.switch_restarted:
        raise PointFailed(f"{a.p.id}: the switch restarted during the measurement")
    if ctl is not None:  # a plain LAN's switch is not ours to read: no links.json
        pd.write_links(
            {
                "window_s": round(time.monotonic() - run.t_links, 3),
                "ports": ctl.links_between(run.links_before, ctl.links()),
            }
        )
    b.phase("stop")
    how = b.tb.remotes[s.server_host].stop(s.server, grace=15)
    for n, bg in s.clients.items():
        b.tb.remotes[n].stop(bg, grace=5)
    b.running = []
    b.phase("collect")

    def get(n: str) -> None:
        role = inv.host(n).role
        b.tb.remotes[n].get_tree(str(b.remote_dir(inv.host(n), a.p, role)), pd.host_dir(role, n))
        agent_role = SERVER_ROLE if role == "worker" else CLIENT_ROLE
        b.tb.remotes[n].get(
            f"{b.tb.remotes[n].target.run_dir}/{agent_role}-agent.log",
            pd.host_dir(role, n) / layout.AGENT_LOG,
            check=False,
        )

    b.tb.parallel(get, [s.server_host, *s.clients])
    if ctl is not None:
        pd.write_snapshot(ctl.snapshot())
    problems = []
    if how == "not running":
        problems.append(f"{s.server_host}: rpc-server's agent had ended before the load did (see its agent.log)")
    server = layout.read_json(pd.host_dir("worker", s.server_host) / layout.SERVER_COUNTS)
    if not isinstance(server, dict) or server.get("stopped_by") != "signal":
        problems.append(f"{s.server_host}: rpc-server did not serve until it was stopped (server.json: {server})")
    for n in s.clients:
        out = layout.read_json(pd.client(n) / layout.AGENT_OUTCOME)
        if not isinstance(out, dict) or out.get("client_exit") != 0:
            problems.append(f"{n}: rpc-client did not finish its load (agent.json: {out})")
    if problems:
        raise PointFailed("; ".join(problems))
