"""Kernel TCP between two emulated hosts through the emulated switch running
ipv4_forward (Rakaia's measured layer): hosts/agent/kernel_net.py gives the data
interfaces their IPs and routes through the switch, rpc-client's requests reach
rpc-server and every answer comes back, the switch forwards every frame (and counts
them), and detach leaves the interfaces as Rain's DPDK programs need them: no kernel IP.
"""

from __future__ import annotations

import json
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
        for h, peer in ((client, server), (server, client)):
            kernel_net(ns[h.name], "detach", h, peer)
        switchd.stop(inv)
    for h in (client, server):
        addrs = in_ns(ns[h.name], "ip", "-4", "-o", "addr", "show", "dev", "data0", timeout=10).stdout
        assert "inet " not in addrs, addrs  # as Rain's DPDK programs need it
    kernel_net(ns["client0"], "detach", client, server)  # again: idempotent
