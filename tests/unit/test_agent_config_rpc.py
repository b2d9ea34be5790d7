"""The agent configurations of Rakaia's measured layer (agent_config.rpc_server and
rpc_client): what the RPC agents (hosts/agent/rpc.py) are told for a point."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import yaml

from orchestrator.errors import UsageError
from orchestrator.experiment import agent_config
from orchestrator.experiment.machines import shape_of
from orchestrator.experiment.plan import plan
from orchestrator.experiment.spec import load as load_spec
from orchestrator.inventory import load
from orchestrator.systems import get as get_system

REPO = Path(__file__).resolve().parents[2]
OUT = PurePosixPath("/tmp/out")


def _inv(tmp_path, **nic):
    data = yaml.safe_load((REPO / "orchestrator/inventory/examples/rack1.yaml").read_text())
    for h in data["hosts"]:
        h["nic"] |= nic
    if "vdev" in nic:  # virtual ports: a tofino-model switch
        data["switch"]["target"] = "model"
        for i, port in enumerate(data["switch"]["ports"]):
            port["iface"] = f"veth{i}"
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(data))
    return load(tmp_path / "inv.yaml")


def _spec(tmp_path, **over):
    d = yaml.safe_load((REPO / "experiments/rakaia-sim-bimodal.yaml").read_text()) | over
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(d))
    return load_spec(tmp_path / "spec.yaml")


def test_the_server_runs_the_systems_mode_on_its_data_ip(tmp_path):
    inv = _inv(tmp_path)
    spec = _spec(tmp_path)
    points = plan(spec, shape_of(inv))
    p = next(p for p in points if p.system == "cs")
    w = inv.workers[0]
    cfg = agent_config.rpc_server(inv, spec, p, get_system("cs"), w.name, OUT)
    assert cfg["binary"] == str(PurePosixPath(w.deploy_root) / "bin" / "rpc-server")
    assert cfg["server"] == {
        "listen": f"{w.nic.ip}:{agent_config.RPC_PORT}",
        "mode": "cs",
        "threads": p.worker_threads,
        "service": "spin" if p.handler == "spin" else "sleep",
    }
    assert cfg["net"] == {
        "iface": w.nic.netdev,
        "ip": w.nic.ip,
        "peers": [c.nic.ip for c in inv.clients],
        "gateway_mac": inv.switch.service_mac,
    }
    rakaia = next(p for p in points if p.system == "rakaia")
    assert agent_config.rpc_server(inv, spec, rakaia, get_system("rakaia"), w.name, OUT)["server"]["mode"] == "ms-user"
    with pytest.raises(UsageError) as e:
        agent_config.rpc_server(inv, spec, p, get_system("rain"), w.name, OUT)
    assert "schedules in the switch" in e.value.message


def test_the_client_gets_its_share_of_load_and_connections_and_the_dilated_service(tmp_path):
    inv = _inv(tmp_path)
    spec = _spec(tmp_path)
    p = next(p for p in plan(spec, shape_of(inv)) if p.params.get("connections") == 80)
    c, w = inv.clients[0], inv.workers[0]
    cfg = agent_config.rpc_client(inv, spec, p, c.name, w.name, OUT)
    n = len(inv.clients)
    assert cfg["wait_start"] is True and cfg["binary"].endswith("/bin/rpc-client")
    assert cfg["cpu_wake_latency_us"] is None  # hardware: the hosts' own cores (emulated: 0, held)
    cl = cfg["client"]
    assert cl["connect"] == f"{w.nic.ip}:{agent_config.RPC_PORT}"
    assert cl["connections"] == 80 // n + (1 if 80 % n else 0)
    assert cl["threads"] == min(cl["connections"], len(c.cores))  # a thread on each of the host's cores
    assert cl["rate"] == pytest.approx(p.offered_rps / n, abs=1e-3)
    (a, b) = spec.workload.classes[0].service.modes
    assert cl["service"].startswith(f"bimodal:{round(a.us * 1000 * p.dilation)}:{round(b.us * 1000 * p.dilation)}:")
    assert cfg["net"]["peers"] == [w.nic.ip]
    assert cfg["net"]["pci"] == c.nic.pci and "iface" not in cfg["net"]  # no netdev given: the agent finds it
    # the seed is the point's and the client's, stable
    assert cl["seed"] == agent_config.rpc_client(inv, spec, p, c.name, w.name, OUT)["client"]["seed"]


def test_a_nic_the_kernel_does_not_see_and_a_mixed_workload_are_refused(tmp_path):
    inv = _inv(tmp_path, pci=None, netdev=None, rdma_device=None, rdma="emulated", vdev="net_ring0")  # no interface
    spec = _spec(tmp_path)
    p = plan(spec, shape_of(inv))[0]
    h = inv.workers[0]
    with pytest.raises(UsageError) as e:
        agent_config.rpc_server(inv, spec, p, get_system("cp"), h.name, OUT)
    assert f"hosts[{h.name}].nic.netdev" in e.value.fix
    inv = _inv(tmp_path)
    two = _spec(tmp_path, workload={"classes": [
        {"name": "a", "weight": 1, "service": {"dist": "exponential", "mean_us": 100}},
        {"name": "b", "weight": 1, "service": {"dist": "exponential", "mean_us": 10}},
    ]})  # fmt: skip
    with pytest.raises(UsageError) as e:
        agent_config.rpc_client(inv, two, p, inv.clients[0].name, inv.workers[1].name, OUT)
    assert "one class" in e.value.fix


def test_the_agent_finds_a_pci_nics_interface_or_says_why_not(tmp_path):
    from hosts.agent.common import AgentError
    from hosts.agent.rpc import net_of

    net = {"ip": "10.0.0.1", "peers": ["10.0.0.2"], "gateway_mac": "02:00:00:00:00:01"}
    (tmp_path / "bus/pci/devices/0000:3b:00.0/net/enp59s0f0np0").mkdir(parents=True)
    assert net_of({"net": net | {"pci": "0000:3b:00.0"}}, tmp_path)["iface"] == "enp59s0f0np0"
    with pytest.raises(AgentError) as e:
        net_of({"net": net | {"pci": "0000:af:00.0"}}, tmp_path)
    assert "PCI device 0000:af:00.0 has no kernel interface" in str(e.value) and "nic.netdev" in str(e.value)
    assert net_of({"net": net | {"iface": "data0"}}, tmp_path)["iface"] == "data0"


def test_every_client_setting_reaches_rpc_clients_command_line(tmp_path):
    """What agent_config tells the client agent is what rpc-client is run with (a setting
    the agent dropped once: its drain), and each segment of a point draws anew."""
    from hosts.agent.rpc import CLIENT_FLAGS, CLIENT_OPTIONS, client_argv

    inv = _inv(tmp_path)
    spec = _spec(tmp_path)
    p = plan(spec, shape_of(inv))[0]
    c, w = inv.clients[0].name, inv.workers[0].name
    cfg = agent_config.rpc_client(inv, spec, p, c, w, OUT)
    fixed = {"connect", "connections", "rate", "service", "warmup_s", "measure_s"}
    known = set(CLIENT_OPTIONS) | set(CLIENT_FLAGS)
    assert set(cfg["client"]) - fixed <= known, set(cfg["client"]) - fixed - known
    assert cfg["client"]["trace"] is True  # a window this size is traced
    argv = client_argv(cfg, PurePosixPath("/o"))
    for key, value in cfg["client"].items():
        flag = {"warmup_s": "--warmup", "measure_s": "--duration"}.get(key, "--" + key.replace("_", "-"))
        if key in CLIENT_FLAGS:
            assert (flag in argv) == bool(value), (key, argv)
        else:
            assert argv[argv.index(flag) + 1] == str(value), (key, argv)
    assert cfg["client"]["late_ns"] == round(1000 * p.dilation)  # 1 us of paper time
    assert cfg["client"]["drain"] == agent_config.timeout_us(spec, p) / 1e6
    seeds = {agent_config.rpc_client(inv, spec, p, c, w, OUT, seg)["client"]["seed"] for seg in (None, 1, 2)}
    assert len(seeds) == 3


def test_an_attach_that_fails_half_way_leaves_nothing_attached(monkeypatch):
    from hosts.agent import kernel_net
    from hosts.agent.common import AgentError
    from hosts.agent.rpc import Attached

    calls = []

    def attach(*a):
        calls.append("attach")
        raise kernel_net.KernelNetError("`ip route replace ...` failed: Network is unreachable")

    monkeypatch.setattr(kernel_net, "attach", attach)
    monkeypatch.setattr(kernel_net, "detach", lambda *a: calls.append("detach"))
    net = {"iface": "data0", "ip": "10.0.0.1", "peers": ["10.0.0.2"], "gateway_mac": "02:00:00:00:00:01"}
    with pytest.raises(AgentError) as e:
        with Attached(net):
            pass
    assert "Network is unreachable" in str(e.value) and calls == ["attach", "detach"]
