"""The host roles' inspection scripts (dpdk_host's inspect_host.py, roce's inspect_roce.py)
against a mock ConnectX's tree (tests/mock_connectx: fake /sys, /proc, /lib/modules and
tools), run as the roles run them: one JSON argument in, one JSON object out."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mock_connectx.mock_connectx import build, gid_of, tools

REPO = Path(__file__).resolve().parents[2]
HOST_PROBE = REPO / "playbooks/roles/dpdk_host/files/inspect_host.py"
ROCE_PROBE = REPO / "playbooks/roles/roce/files/inspect_roce.py"
PCI = "0000:3b:00.0"
NETDEV = "enp59s0f0np0"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def probe(script: Path, **args) -> dict:
    r = subprocess.run([sys.executable, str(script), json.dumps(args)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def machine(tmp_path) -> Path:
    root = tmp_path / "m"
    root.mkdir()
    build(str(root), pci=PCI, numa_node=1, irq_affinity="0-3")
    return root


def host_args(root: Path, **kw) -> dict:
    args = dict(
        dpdk_source="debian",
        dpdk_prefix="",
        packages=["dpdk"],
        hugepage_kb=2048,
        pci=PCI,
        mgmt="192.0.2.22",
        cores=[2, 3, 8, 9],
        isolation=True,
        root=f"{root}/",
        tools=tools(str(root)),
    )
    args.update(kw)
    return args


def test_cpu_lists_and_masks():
    m = load(HOST_PROBE)
    assert m.cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert m.cpulist("(null)") == [] and m.cpulist("") == [] and m.cpulist(None) == []
    assert m.cpumask("0000003c") == [2, 3, 4, 5] and m.cpumask("00000001,00000000") == [32]
    assert m.ranges([8, 2, 3, 4]) == "2-4,8" and m.ranges([]) == ""


def test_a_connectx_is_found_with_its_numa_node_irqs_and_modules(machine):
    out = probe(HOST_PROBE, **host_args(machine))
    nic = out["nic"]
    assert nic["present"] and nic["vendor"] == "0x15b3" and nic["driver"] == "mlx5_core"
    assert nic["numa_node"] == 1 and nic["netdevs"] == [NETDEV] and nic["rdma_devices"] == ["mlx5_0"]
    assert nic["irqs"] == [100, 101, 102] and nic["mgmt_netdevs"] == []
    k = out["kernel"]
    assert k["available"]["mlx5_core"] and k["available"]["mlx5_ib"] and not k["loaded"]["mlx5_core"]
    assert k["iommu"] is False
    assert out["hugetlbfs"] == {"mounts": [{"path": "/dev/hugepages", "size_kb": 2048}], "mounted": True}
    assert probe(HOST_PROBE, **host_args(machine, hugepage_kb=1048576))["hugetlbfs"]["mounted"] is False
    assert probe(HOST_PROBE, **host_args(machine, pci="0000:3b:00.1"))["nic"] == {"present": False}


def test_the_management_address_on_the_nic_is_noticed(machine):
    subprocess.run([tools(str(machine))["ip"], "addr", "add", "192.0.2.22/24", "dev", NETDEV], check=True)
    nic = probe(HOST_PROBE, **host_args(machine))["nic"]
    assert nic["addresses"] == {NETDEV: ["192.0.2.22"]} and nic["mgmt_netdevs"] == [NETDEV]


def test_isolation_irqbalance_irqs_and_governors(machine):
    cpu = machine / "sys/devices/system/cpu"
    (cpu / "isolated").write_text("2-3\n")
    (cpu / "nohz_full").write_text("2-3\n")
    for c, g in ((2, "performance"), (3, "performance"), (8, "powersave"), (9, "schedutil")):
        (cpu / f"cpu{c}/cpufreq").mkdir(parents=True)
        (cpu / f"cpu{c}/cpufreq/scaling_governor").write_text(g + "\n")
    (machine / "proc/4242").mkdir()
    (machine / "proc/4242/comm").write_text("irqbalance\n")
    iso = probe(HOST_PROBE, **host_args(machine))["isolation"]
    assert iso["not_isolated"] == [8, 9] and iso["not_nohz_full"] == [8, 9] and iso["absent"] == [8, 9]
    assert iso["irqbalance"] and iso["irqbalance_on_cores"] == [8, 9]  # it leaves isolated cores alone
    assert iso["irq_on_cores"] == {"100": [2, 3], "101": [2, 3], "102": [2, 3]}
    assert iso["cpufreq"] and iso["not_performance"] == [8, 9] and iso["cores_range"] == "2-3,8-9"
    (machine / "etc/default").mkdir(parents=True)
    (machine / "etc/default/irqbalance").write_text('IRQBALANCE_BANNED_CPULIST="8-9"\n')
    assert probe(HOST_PROBE, **host_args(machine))["isolation"]["irqbalance_on_cores"] == []
    (machine / "etc/default/irqbalance").write_text("IRQBALANCE_BANNED_CPUS=00000300\n")
    assert probe(HOST_PROBE, **host_args(machine))["isolation"]["irqbalance_on_cores"] == []


def test_a_dpdk_source_build_is_read_from_its_prefix(tmp_path, machine):
    prefix = tmp_path / "dpdk"
    pc = prefix / "lib/x86_64-linux-gnu/pkgconfig/libdpdk.pc"
    pc.parent.mkdir(parents=True)
    pc.write_text("prefix=/opt/dpdk\nName: DPDK\nVersion: 22.11.4\nLibs: -lrte_eal\n")
    pmds = prefix / "lib/x86_64-linux-gnu/dpdk/pmds-23.0"
    pmds.mkdir(parents=True)
    (pmds / "librte_net_af_packet.so.23.0").write_text("")
    out = probe(HOST_PROBE, **host_args(machine, dpdk_source="prefix", dpdk_prefix=str(prefix), packages=[]))
    assert out["prefix"]["pc"] == str(pc) and out["prefix"]["version"] == "22.11.4"
    assert out["prefix"]["pmds"] == ["af_packet"] and out["prefix"]["mlx5_pmd"] is False
    (pmds / "librte_net_mlx5.so.23.0").write_text("")
    out = probe(HOST_PROBE, **host_args(machine, dpdk_source="prefix", dpdk_prefix=str(prefix), packages=[]))
    assert out["prefix"]["mlx5_pmd"] is True
    empty = probe(
        HOST_PROBE, **host_args(machine, dpdk_source="prefix", dpdk_prefix=str(tmp_path / "none"), packages=[])
    )
    assert empty["prefix"]["exists"] is False and empty["prefix"]["pc"] is None


def roce_args(root: Path, **kw) -> dict:
    args = dict(
        pci=PCI,
        rdma_device=None,
        netdev=None,
        ip="10.10.1.2",
        service_ip="10.10.1.254",
        priority=3,
        packages=[],
        facts_file=str(root / "facts/roce.json"),
        root=f"{root}/",
        tools=tools(str(root)),
    )
    args.update(kw)
    return args


def test_roce_finds_the_device_port_and_settings(machine):
    out = probe(ROCE_PROBE, **roce_args(machine))
    assert out["rdma_device"] == "mlx5_0" and out["netdev"] == NETDEV and out["port"] == 1
    assert out["link_layer"] == "Ethernet" and out["netdev_mtu"] == 1500 and out["active_mtu"] == 1024
    assert out["gid_index_found"] is None and out["want_gid"] == "0000:0000:0000:0000:0000:ffff:0a0a:0102"
    assert out["dscp_prio"] == {} and out["pfc"] == {str(p): False for p in range(8)}
    assert out["ecn_sysfs"] and out["ecn"] == {"roce_np": "0", "roce_rp": "0"}
    assert out["configfs_mounted"] is False and out["rdma_cm_loaded"] is False and out["cm_mode"] is None
    assert out["service_route_dev"] is None and out["service_neigh"] is None and out["ipv4"] == []
    assert out["facts"] is None and out["facts_dir"] is False and out["problems"] == []


def test_roce_reads_back_what_the_tools_changed(machine):
    t = tools(str(machine))
    for argv in (
        [t["ip"], "addr", "add", "10.10.1.2/24", "dev", NETDEV],
        [t["ip"], "link", "set", "dev", NETDEV, "mtu", "4200"],
        [t["dcb"], "app", "replace", "dev", NETDEV, "dscp-prio", "26:3"],
        [t["dcb"], "pfc", "set", "dev", NETDEV, "prio-pfc", "3:on"],
        [t["ip"], "neigh", "replace", "10.10.1.254", "lladdr", "02:52:4d:00:ff:fe", "dev", NETDEV, "nud", "permanent"],
    ):
        subprocess.run(argv, check=True)
    out = probe(ROCE_PROBE, **roce_args(machine))
    # The v1 entry of the address comes first; the role wants the RoCE v2 one.
    assert [(e["index"], e["type"]) for e in out["gid_entries"] if e["gid"] == gid_of("10.10.1.2")] == [
        (2, "IB/RoCE v1"),
        (3, "RoCE v2"),
    ]
    assert out["gid_index_found"] == 3 and out["active_mtu"] == 4096
    assert out["dscp_prio"] == {"26": [3]} and out["pfc"]["3"] is True
    assert out["ipv4"] == ["10.10.1.2/24"] and out["service_route_dev"] == NETDEV  # on the data subnet
    assert out["service_neigh"] == {"lladdr": "02:52:4d:00:ff:fe", "state": ["PERMANENT"]}


def test_roce_names_what_it_cannot_find(machine):
    out = probe(ROCE_PROBE, **roce_args(machine, rdma_device="mlx5_9", netdev="eth9"))
    assert out["rdma_device"] is None and out["netdev"] is None
    assert out["problems"] == [
        "no RDMA device mlx5_9 (hosts[].nic.rdma_device)",
        "no network interface eth9 (hosts[].nic.netdev)",
    ]
    gone = probe(ROCE_PROBE, **roce_args(machine, pci="0000:fe:00.0"))
    assert gone["pci_present"] is False and gone["rdma_device"] is None
    only_facts = probe(ROCE_PROBE, **roce_args(machine, facts_only=True))
    assert only_facts["rdma_device"] is None and "port" not in only_facts


def test_roce_reads_the_icrc_stamp_and_the_nics_icrc_drops(machine):
    from tests.mock_connectx.mock_connectx import icrc_drops

    stamp = machine / "run/rainmaker-icrc-disabled"
    out = probe(ROCE_PROBE, **roce_args(machine, icrc_stamp=str(stamp)))
    assert out["icrc_stamp"] is None and out["icrc_drops"] == 0  # not turned off since boot; counter at 0
    stamp.write_text('{"by": "command", "rx_icrc_encapsulated": 0}\n')
    icrc_drops(str(machine), n=7)
    out = probe(ROCE_PROBE, **roce_args(machine, icrc_stamp=str(stamp)))
    assert out["icrc_stamp"] == {"by": "command", "rx_icrc_encapsulated": 0} and out["icrc_drops"] == 7
    stamp.write_text("")  # an older role's stamp: turned off, nothing recorded
    assert probe(ROCE_PROBE, **roce_args(machine, icrc_stamp=str(stamp)))["icrc_stamp"] == {}
    # a driver without the counter (or firmware without it)
    (machine / "sys/class/infiniband/mlx5_0/ports/1/hw_counters/rx_icrc_encapsulated").unlink()
    assert probe(ROCE_PROBE, **roce_args(machine))["icrc_drops"] is None
