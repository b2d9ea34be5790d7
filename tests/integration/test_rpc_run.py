"""`rainmaker run` of a server-side spec (Rakaia's family) on the emulated testbed: the
switch runs the forwarder, rpc-server serves in each system's mode on the first worker
host, rpc-client loads it from the client host over kernel TCP, and the point's results
are read, judged and modelled as any point's (rpc_point.py). The hosts' data interfaces
are bare again afterwards, as Rain's DPDK programs need them."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from orchestrator import switchd
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.run import run
from orchestrator.testbed import cpu

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def mechanics_spec(tmp_path, name: str, systems: list[str], k: float | str = 200):
    """A short server-side spec: 4 threads, 100 us exponential at 0.5, 12 connections."""
    spec = {
        "name": name,
        "systems": systems,
        "workers": {"per_host_threads": 4},
        "workload": {"classes": [{"name": "rpc", "service": {"dist": "exponential", "mean_us": 100}}]},
        "load": {"capacity_fraction": [0.5]},
        "emulated": {"warmup_s": 0.5, "measure_s": 2},
        "dilation": {"emulated": k},
        "rpc": {"connections": 12},
        # the mechanics, not the statistics: a short window, no re-measuring
        "validity": {"min_samples_p99": 100, "remeasure_stalled": 0},
    }
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(spec))
    return f


def test_a_server_side_spec_runs_each_mode_through_the_forwarder(testbed, tmp_path):
    tb, inv = testbed
    # k left to the calibration, as Rain's: its 2 s window holds 100 mean requests, and
    # its p99 the samples it needs, up to k = 200
    f = mechanics_spec(tmp_path, "rpc-mechanics", ["cs", "rakaia"], k="auto")
    switchd.stop(inv)  # what another test left on the shared testbed
    try:
        rd = RunDir(
            run(f, inv, tb.inventory_path, results_root=tmp_path / "r", progress=False, retries=0, analyze_after=False)
        )
    finally:
        switchd.stop(inv)
    points = {pd.read_point()["system"]: pd for pd in rd.points()}
    assert set(points) == {"cs", "rakaia"}
    assert all(v["status"] == "done" for v in rd.read_sweep().values()), rd.read_sweep()
    worker = inv.workers[0].name
    # the calibration: the first point's mode (cs) and connections, rpc-client's round
    # trip through the forwarder and rpc-server's own cost, as the RPC model's network
    m = json.loads(rd.manifest.read_text())
    cal, k = m["calibration"], m["dilation"]["k"]
    assert m["dilation"]["auto"] is True and k in (100, 200), m["dilation"]
    assert cal["point"]["system"] == "cs" and cal["point"]["params"]["connections"] == 12, cal["point"]
    assert cal["k"] == k and cal["requests"] > 0 and cal["round_trip_us"]["mean"] > 0, cal
    assert cal["network"]["client_switch_ns"] > 0 and cal["network"]["switch_worker_ns"] == 0, cal["network"]
    assert cal["cpu"]["cores"] >= 1 and cal["cpu"]["per_request_ms"] >= 0, cal.get("cpu")
    assert (rd.path / "calibration" / "workers" / worker / "server.json").is_file()
    for system, pd in points.items():
        s = json.loads((pd.client("client0") / "summary.json").read_text())
        t = s["totals"]
        # 4 threads / 100 us x 0.5, dilated k times: 20,000 / k requests/s over the 2 s window
        rate = 20_000 / k
        assert 1.5 * rate <= t["offered"] <= 2.5 * rate and t["lost"] == 0 and t["received"] == t["sent"], t
        assert s["connections"] == 12 and s["realtime"]["priority"] == 30, s
        # a thread on each of the testbed's cores, every one sending what falls due
        assert s["threads"] == len(cpu.testbed_cpus(inv)) == len(s["run"]["sent_by_thread"]), s
        outcome = json.loads((pd.client("client0") / "agent.json").read_text())
        assert outcome["cpu_wake_latency"] == "held at 0 us", outcome  # shared cores: idle CPUs poll
        server = json.loads((pd.path / "workers" / worker / "server.json").read_text())
        assert server["served"] == t["sent"] and server["connections"] == 12 and server["malformed"] == 0, server
        cfg = json.loads((pd.path / "workers" / worker / "agent-config.json").read_text())
        assert cfg["server"]["mode"] == {"cs": "cs", "rakaia": "ms-user"}[system]
        v = {c["name"]: c for c in json.loads((pd.path / "validity.json").read_text())["checks"]}
        for name in ("complete", "load", "lost", "links_up"):
            assert v[name]["passed"] is True, v[name]
        assert v["tasks_intact"]["passed"] is None and "server-side" in v["tasks_intact"]["message"]
        model = json.loads((pd.path / "model" / "model.json").read_text())  # beside it: the system's policy
        assert model["network_from"].startswith("the run's calibration"), model["network_from"]
        assert model["network"]["client_switch_ns"] == cal["network"]["client_switch_ns"], model["network"]
        assert 0 <= json.loads((pd.path / "cpu.json").read_text())["steal_share"] < 1
        events = json.loads((pd.path / "switch" / "snapshot.json").read_text())["counters"]
        forwarded = next(v for k, v in events.items() if k.endswith("events"))["EV_FORWARDED"]["packets"]
        assert forwarded >= 2 * t["sent"]  # a request and its answer each a frame at least
    for h in (inv.host("client0"), inv.workers[0]):
        addrs = subprocess.run(
            ["ip", "netns", "exec", f"rm{tb.slot}-{h.name}", "ip", "-4", "-o", "addr", "show", "dev", "data0"],
            capture_output=True, text=True, timeout=10,
        ).stdout  # fmt: skip
        assert "inet " not in addrs, addrs  # detached: as Rain's DPDK programs need it


def test_a_plain_lan_carries_a_server_side_spec_by_arp(testbed, tmp_path):
    """The same hosts on a plain LAN (switch.kind: lan, as CloudLab's xl170 nodes are):
    here a Linux bridge in the switch's namespace stands for the cluster's Ethernet, and
    no emulator runs. Nothing programs it: the agents give the data interfaces their IPs
    and the hosts find each other by ARP; no switch counters are read."""
    tb, inv = testbed
    switchd.stop(inv)  # the forwarder must not be what carries the frames
    sw_ns, br = inv.switch.netns, f"rmlan{tb.slot}"

    def in_switch(*argv: str) -> None:
        subprocess.run(["ip", "netns", "exec", sw_ns, "ip", "link", *argv], check=True, timeout=10)

    data = yaml.safe_load(tb.inventory_path.read_text())
    data["switch"] = {"name": "lan", "kind": "lan"}
    for h in data["hosts"]:
        h["nic"].pop("switch_port")
    lan_path = tmp_path / "lan.yaml"
    lan_path.write_text(yaml.safe_dump(data, sort_keys=False))
    from orchestrator.inventory import load

    lan = load(lan_path)
    f = mechanics_spec(tmp_path, "rpc-lan", ["rakaia"])
    in_switch("add", br, "type", "bridge")
    try:
        for p in inv.switch.ports:
            in_switch("set", str(p.iface), "master", br)
        in_switch("set", br, "up")
        rd = RunDir(run(f, lan, lan_path, results_root=tmp_path / "r", progress=False, retries=0, analyze_after=False))
    finally:
        subprocess.run(["ip", "netns", "exec", sw_ns, "ip", "link", "del", br], timeout=10, check=False)
    (pd,) = rd.points()
    assert all(v["status"] == "done" for v in rd.read_sweep().values()), rd.read_sweep()
    t = json.loads((pd.client("client0") / "summary.json").read_text())["totals"]
    assert 150 <= t["offered"] <= 250 and t["lost"] == 0 and t["received"] == t["sent"], t
    server = json.loads((pd.path / "workers" / inv.workers[0].name / "server.json").read_text())
    assert server["served"] == t["sent"] and server["connections"] == 12, server
    assert not (pd.path / "switch" / "links.json").exists() and not (pd.path / "switch" / "snapshot.json").exists()
    v = {c["name"]: c for c in json.loads((pd.path / "validity.json").read_text())["checks"]}
    assert v["links_up"]["passed"] is None and v["complete"]["passed"] is True, v["links_up"]
    assert json.loads(rd.manifest.read_text())["testbed"]["switch"] == "lan"
    for h in (inv.host("client0"), inv.workers[0]):
        ns = f"rm{tb.slot}-{h.name}"
        addrs = subprocess.run(
            ["ip", "netns", "exec", ns, "ip", "-4", "-o", "addr", "show", "dev", "data0"],
            capture_output=True, text=True, timeout=10,
        ).stdout  # fmt: skip
        assert "inet " not in addrs, addrs  # what the agents added, taken away again
