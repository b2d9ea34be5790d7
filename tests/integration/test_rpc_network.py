"""Kernel TCP between two emulated hosts through the emulated switch running
ipv4_forward (Rakaia's measured layer): hosts/agent/kernel_net.py gives the data
interfaces their IPs and routes through the switch, rpc-client's requests reach
rpc-server and every answer comes back, the switch forwards every frame (and counts
them), and detach leaves the interfaces as Rain's DPDK programs need them: no kernel IP.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import switchd
from switch.bfrt.client import Client
from switch.control import controller_class

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
RPC = REPO / "hosts" / "rpc" / "build"


def in_ns(ns: str, *argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, cwd=REPO, **kw)


def kernel_net(ns: str, action: str, host, peer, gateway_mac: str | None = None) -> None:
    argv = [sys.executable, "-m", "hosts.agent.kernel_net", action, "--iface", "data0", "--ip", host.nic.ip]
    argv += ["--peer", peer.nic.ip] + (["--gateway-mac", gateway_mac] if gateway_mac else [])
    r = in_ns(ns, *argv, timeout=60)
    assert r.returncode == 0, r.stderr


def detach_both(ns: dict, client, server) -> None:
    for h, peer in ((client, server), (server, client)):
        kernel_net(ns[h.name], "detach", h, peer)


def assert_no_kernel_ip(ns: dict, *hosts) -> None:
    for h in hosts:
        addrs = in_ns(ns[h.name], "ip", "-4", "-o", "addr", "show", "dev", "data0", timeout=10).stdout
        assert "inet " not in addrs, addrs


def test_tcp_rpcs_cross_the_forwarding_switch_and_detach_leaves_no_kernel_ip(testbed, tmp_path):
    tb, inv = testbed
    subprocess.run(["make", "-s", "-C", str(RPC.parent)], check=True, timeout=120)
    client, server = inv.host("client0"), inv.host("worker0")
    ns = {h.name: f"rm{tb.slot}-{h.name}" for h in (client, server)}
    switchd.stop(inv)  # what another test left on the shared testbed
    switchd.start(inv, "ipv4_forward")
    srv = None
    try:
        with Client(inv.switch.bfrt, "ipv4_forward") as c:
            ctl = controller_class("ipv4_forward")(c, inv)
            ctl.program()
            kernel_net(ns["client0"], "attach", client, server, inv.switch.service_mac)
            kernel_net(ns["worker0"], "attach", server, client, inv.switch.service_mac)
            srv = subprocess.Popen(
                ["ip", "netns", "exec", ns["worker0"], str(RPC / "rpc-server"), "--listen", f"{server.nic.ip}:7000",
                 "--mode", "ms-user", "--threads", "2"],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            ready = srv.stdout.readline()  # readiness: its ready line
            assert ready.startswith("rpc-server ready"), ready
            r = in_ns(
                ns["client0"], str(RPC / "rpc-client"), "--connect", f"{server.nic.ip}:7000", "--connections", "20",
                "--threads", "2", "--rate", "1000", "--service", "exp:100000", "--warmup", "0.2", "--duration", "1",
                "--out", str(tmp_path / "rpc"), timeout=60,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            s = json.loads((tmp_path / "rpc" / "summary.json").read_text())
            t = s["totals"]
            assert t["sent"] == t["received"] > 900 and t["outstanding"] == 0, t
            events = ctl.snapshot()["counters"][ctl.EVENTS]
            # a request and its answer each a frame at least, connection set-up and ACKs beside
            assert events["EV_FORWARDED"]["packets"] >= 2 * t["sent"], events
            assert events["EV_PARSER_ERROR"]["packets"] == 0, events
    finally:
        if srv is not None:
            srv.terminate()
            srv.wait(timeout=10)
        detach_both(ns, client, server)
        switchd.stop(inv)
    assert_no_kernel_ip(ns, client, server)  # as Rain's DPDK programs need it
    kernel_net(ns["client0"], "detach", client, server)  # again: idempotent


def _agent(ns: str, role: str, cfg: dict, path: Path) -> subprocess.Popen:
    path.write_text(json.dumps(cfg))
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "hosts.agent", role, "--config", str(path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _ready(p: subprocess.Popen) -> None:
    line = p.stdout.readline()  # readiness: the agent's ready line (or its exit)
    assert line.strip() == "rain-agent ready", line + (p.stderr.read() if p.poll() is not None else "")


def test_the_rpc_agents_attach_serve_load_and_detach(testbed, tmp_path):
    """hosts/agent/rpc.py as the orchestrator runs it: each agent gives its host the data
    IP, the server agent serves until SIGTERM and leaves its counts, the client agent
    starts the load at SIGUSR1 and leaves rpc-client's results; both detach at the end."""
    tb, inv = testbed
    subprocess.run(["make", "-s", "-C", str(RPC.parent)], check=True, timeout=120)
    client, server = inv.host("client0"), inv.host("worker0")
    ns = {h.name: f"rm{tb.slot}-{h.name}" for h in (client, server)}
    mac = inv.switch.service_mac
    switchd.stop(inv)
    switchd.start(inv, "ipv4_forward")
    srv = cli = None
    try:
        with Client(inv.switch.bfrt, "ipv4_forward") as c:
            controller_class("ipv4_forward")(c, inv).program()
        net = {"iface": "data0", "gateway_mac": mac}
        srv = _agent(
            ns["worker0"], "rpc-server",
            {"binary": str(RPC / "rpc-server"), "out_dir": str(tmp_path / "server"),
             "net": net | {"ip": server.nic.ip, "peers": [client.nic.ip]},
             "server": {"listen": f"{server.nic.ip}:7001", "mode": "cs", "threads": 2}},
            tmp_path / "server.json",
        )  # fmt: skip
        _ready(srv)
        cli = _agent(
            ns["client0"], "rpc-client",
            {"binary": str(RPC / "rpc-client"), "out_dir": str(tmp_path / "client"), "wait_start": True,
             "net": net | {"ip": client.nic.ip, "peers": [server.nic.ip]},
             "client": {"connect": f"{server.nic.ip}:7001", "connections": 8, "threads": 2, "rate": 800,
                        "service": "exp:100000", "warmup_s": 0.2, "measure_s": 0.8, "seed": 3}},
            tmp_path / "client.json",
        )  # fmt: skip
        _ready(cli)
        assert not (tmp_path / "client" / "summary.json").exists()  # held until its start signal
        cli.send_signal(signal.SIGUSR1)
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 0 and "rain-agent done" in out, out + err
        s = json.loads((tmp_path / "client" / "summary.json").read_text())
        assert s["totals"]["sent"] == s["totals"]["received"] > 600, s["totals"]
        assert json.loads((tmp_path / "client" / "agent.json").read_text())["client_exit"] == 0
        srv.send_signal(signal.SIGTERM)
        out, err = srv.communicate(timeout=30)
        assert srv.returncode == 0 and "rain-agent done" in out, out + err
        done = json.loads((tmp_path / "server" / "server.json").read_text())
        assert done["served"] == s["totals"]["sent"] and done["connections"] == 8 and done["malformed"] == 0, done
    finally:
        for p in (srv, cli):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        detach_both(ns, client, server)
        switchd.stop(inv)
    assert_no_kernel_ip(ns, client, server)


def test_an_rpc_agent_with_a_bad_config_names_what_is_wrong(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"binary": "/bin/true", "out_dir": str(tmp_path / "o"),
                               "net": {"iface": "data0", "ip": "10.0.0.1", "peers": [], "gateway_mac": "02:00:00:00:00:01"},
                               "server": {"listen": "10.0.0.1:1", "mode": "fifo", "threads": 2}}))  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "hosts.agent", "rpc-server", "--config", str(cfg)],
                       cwd=REPO, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 1
    assert "server.mode 'fifo': expected one of cp, cs, pool, ms-user, kcm" in r.stderr, r.stderr
