"""Provisioning with real Ansible on the emulated testbed: the whole site converged,
verified and converged again (nothing changes); check runs that report what broke
without touching it; the host roles (dpdk_host, roce, rainmaker_deploy) against the
same machines claimed as ConnectX hosts (every missing device reported, what would
change still listed) and a mock ConnectX; a build on the host; and `provision --check`
on a testbed that claims a Tofino and ConnectX hosts.

Every provisioning test lives in this file: one process runs it, and the testbed is
converged from scratch once (`provisioned`), not once per process of `make test`.

RAINMAKER_TEST_SLOT picks the testbed's slot (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator import provision as provision_mod
from orchestrator.deploy import VERSION, bundle
from orchestrator.errors import ProvisionError
from orchestrator.experiment import machines
from orchestrator.inventory import load
from orchestrator.provision import VERIFY, provision
from tests.cli import rainmaker

from .hardware_view import FAKE_PCI, FAKE_SDE, as_hardware

pytestmark = pytest.mark.integration

BUILD_TASK = "Build the host programs (rain-client and rain-worker with the host's DPDK, rpc-client, rpc-server)"


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def deployed_as_bundled(inv, build: str = "local") -> dict[str, list[str]]:
    """host -> files of its deploy root that differ from the bundle (read directly: the
    emulated hosts share this machine's file system)."""
    b = bundle(build)
    out = {}
    for h in inv.hosts:
        bad = [
            f.dest
            for f in b.all_files()
            if not (h.deploy_root / f.dest).is_file() or sha256(h.deploy_root / f.dest) != f.sha256
        ]
        version = h.deploy_root / VERSION
        if not version.is_file() or version.read_text().strip() != b.digest:
            bad.append(VERSION)
        out[h.name] = bad
    return out


def changed_items(report, task_suffix: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for c in report.changed:
        if c.task.endswith(task_suffix):
            out.setdefault(c.host, set()).update(c.items)
    return out


@pytest.fixture(scope="module")
def converged(provisioned):
    """The testbed provisioned (every role, once per session: tests/conftest.py), as
    every test here starts."""
    tb, inv, first = provisioned
    return inv, first


def test_converge_verify_then_nothing_changes(converged):
    inv, first = converged  # the first converge of the whole site
    assert set(first.hosts) == {"sw0", "client0", "worker0", "worker1"} and not first.missing
    assert all(c.failed == 0 and c.unreachable == 0 for c in first.hosts.values())
    for h in inv.hosts:  # the common role made each host's deploy root
        for sub in ("bin", "agent", "run", "log"):
            assert (h.deploy_root / sub).is_dir()
    assert deployed_as_bundled(inv) == {h.name: [] for h in inv.hosts}
    for h in inv.hosts:  # the roce role: emulated workers say so, clients record nothing
        facts = h.deploy_root / "facts" / "roce.json"
        if h.role == "worker":
            assert json.loads(facts.read_text()) == {"transport": "emulated"}
        else:
            assert not facts.exists()
    notes = " ".join(first.notes)
    assert "RoCEv2 is emulated by rain-worker (no NIC to configure)" in notes
    assert "no NIC to bind, and CPU isolation is not checked" in notes

    verified = provision(inv, progress=False, limit="hosts", playbook=VERIFY)
    assert all(c.failed == 0 and c.ok > 0 for c in verified.hosts.values())

    second = provision(inv, progress=False)  # the whole site again, the switch's play too
    assert set(second.hosts) == set(first.hosts)
    assert {n: c.changed for n, c in second.hosts.items()} == {n: 0 for n in second.hosts}, second.summary()
    check = provision(inv, check=True, progress=False)
    assert check.total_changed == 0 and not check.missing, check.summary()


def test_check_reports_what_would_change_and_changes_nothing(converged):
    inv, _ = converged
    victim = inv.host("worker1").deploy_root / "log"  # the common role made it
    victim.rmdir()
    try:
        report = provision(inv, check=True, progress=False, limit="worker1")
        assert report.hosts["worker1"].changed >= 1
        assert not victim.exists()
    finally:
        victim.mkdir(exist_ok=True)


def test_run_after_provision_copies_nothing_and_records_the_facts(converged):
    inv, _ = converged
    logs: list[str] = []
    tb = machines.Testbed(inv)
    try:
        machines.deploy(tb, logs.append)
        facts = machines.host_facts(tb)
    finally:
        tb.close()
    assert logs == [f"bundle {bundle().digest} already on all {len(inv.hosts)} hosts"]
    assert facts["worker0"]["roce"] == {"transport": "emulated"} and "roce" not in facts["client0"]


def test_check_reports_a_broken_deploy_and_converge_repairs_it(converged):
    inv, _ = converged
    w0, w1 = inv.host("worker0").deploy_root, inv.host("worker1").deploy_root
    (w1 / "bin/rain-worker").unlink()
    agent = w0 / "agent/hosts/agent/common.py"
    agent.write_text(agent.read_text() + "# changed on the host\n")
    with pytest.raises(ProvisionError) as e:
        provision(inv, progress=False, limit="workers", playbook=VERIFY, tags=["deploy"])
    failed = {f.host: f.message for f in e.value.failures}
    assert set(failed) == {"worker0", "worker1"}
    assert "agent/hosts/agent/common.py" in failed["worker0"] and "bin/rain-worker" in failed["worker1"]
    assert "rainmaker provision --tags deploy" in failed["worker0"]

    check = provision(inv, check=True, progress=False, limit="workers", tags=["deploy"])
    assert changed_items(check, "Copy the files that differ from the bundle") == {
        "worker0": {"agent/hosts/agent/common.py"},
        "worker1": {"bin/rain-worker"},
    }
    assert not (w1 / "bin/rain-worker").exists() and "# changed on the host" in agent.read_text()

    fixed = provision(inv, progress=False, limit="workers", tags=["deploy"])
    assert {n: c.changed for n, c in fixed.hosts.items()} == {"worker0": 1, "worker1": 1}
    assert deployed_as_bundled(inv) == {h.name: [] for h in inv.hosts}
    provision(inv, progress=False, limit="workers", playbook=VERIFY, tags=["deploy"])


def test_a_real_run_on_claimed_hardware_stops_at_what_is_missing(converged, tmp_path):
    """A real run stops the host at the first role that finds something missing, and
    changes nothing. (What a check run reports against the same claims, host by host:
    test_check_against_claimed_hardware_reports_what_is_missing_and_changes_nothing.)"""
    inv, _ = converged
    hw = as_hardware(inv, tmp_path / "hw.yaml")
    pci = FAKE_PCI.format([h.name for h in inv.hosts].index("worker0") % 8)
    with pytest.raises(ProvisionError) as e:
        provision(hw, progress=False, limit="worker0", tags=["dpdk_host"])
    assert e.value.report.missing == {
        "worker0": [f"no PCI device {pci}; fix: `lspci -D` on the host, then hosts[].nic.pci"]
    }
    assert e.value.report.total_changed == 0


def test_build_on_the_host(converged, tmp_path):
    inv, _ = converged
    inv_path = tmp_path / "inv.yaml"
    data = inv.model_dump(mode="json", exclude_none=True)
    data["deploy"] = {"build": "host"}
    inv_path.write_text(yaml.safe_dump(data, sort_keys=False))
    host_inv = load(inv_path)
    root = host_inv.host("worker0").deploy_root
    try:
        built = provision(host_inv, progress=False, limit="worker0", tags=["deploy"])
        tasks = {c.task for c in built.changed}
        assert BUILD_TASK in tasks
        assert (root / "src/dpdk/Makefile").is_file() and (root / "src/rpc/Makefile").is_file()
        for b in ("rain-client", "rain-worker", "rpc-client", "rpc-server"):
            exe = root / "bin" / b
            assert exe.read_bytes()[:4] == b"\x7fELF" and exe.stat().st_mode & 0o111
        ldd = subprocess.run(["ldd", str(root / "bin/rain-worker")], capture_output=True, text=True).stdout
        assert "librte_eal" in ldd and "not found" not in ldd
        assert (root / VERSION).read_text().strip() == bundle("host").digest
        again = provision(host_inv, progress=False, limit="worker0", tags=["deploy"])
        assert again.hosts["worker0"].changed == 0
        provision(host_inv, progress=False, limit="worker0", tags=["deploy"], playbook=VERIFY)
        # A changed source is copied and rebuilt.
        (root / "src/dpdk/worker/main.c").write_text("/* changed on the host */\n")
        rebuilt = provision(host_inv, progress=False, limit="worker0", tags=["deploy"])
        assert changed_items(rebuilt, "Copy the sources that differ from the bundle") == {
            "worker0": {"src/dpdk/worker/main.c"}
        }
        assert BUILD_TASK in {c.task for c in rebuilt.changed}
    finally:  # back to the binaries built here, for the other tests
        provision(inv, progress=False, limit="worker0", tags=["deploy"])
    assert deployed_as_bundled(inv)["worker0"] == []


# -- the hardware path, against a mock ConnectX ---------------------------------------------------

MOCK_TASKS = {  # what a first converge of worker0 must change on the mock, by task
    "dpdk_host : Load the NIC's kernel modules",
    "roce : Load rdma_cm (its configfs folder)",
    "roce : Mount configfs",
    "roce : Create the RDMA CM's configfs folder of the device",
    "roce : Make RoCE v2 the RDMA CM's default mode",
    "roce : Give the RDMA CM's QPs the TOS of the RoCE DSCP",
    "roce : Map the RoCE DSCP to the RoCE priority (DSCP trust)",
    "roce : Set PFC on the RoCE priority only (or off)",
    "roce : Set ECN (DCQCN) on the RoCE priority",
    "roce : Set the netdev MTU for the RDMA MTU",
    "roce : Bring the netdev up",
    "roce : Give the netdev the data IP",
    "roce : Route the switch's service address through the netdev",
    "roce : Pin the switch's service MAC as a permanent neighbour",
    "roce : Turn the NIC's iCRC check off (once per boot)",
    "roce : Record the RoCE facts of the host",
}


@pytest.fixture
def mock_connectx(converged, tmp_path):
    """worker0 claimed as a ConnectX host whose /sys, /proc and tools are a mock's
    (tests/mock_connectx: this machine has no RDMA device)."""
    from tests.mock_connectx.mock_connectx import build, tools

    inv, _ = converged
    root = tmp_path / "machine"
    root.mkdir()
    build(str(root), pci=FAKE_PCI.format(1), numa_node=1)
    hw = as_hardware(inv, tmp_path / "hw.yaml")
    data = yaml.safe_load((tmp_path / "hw.yaml").read_text())
    data["roce"] = {"icrc_disable_command": f"echo off >> {root}/icrc.log"}
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    hw = load(tmp_path / "hw.yaml")
    extra = {
        "dpdk_host_root": f"{root}/",
        "dpdk_host_tools": tools(str(root)),
        "roce_root": f"{root}/",
        "roce_tools": tools(str(root)),
        # The packages these roles install for a ConnectX that this machine already has
        # (kmod and ibverbs-utils are not: the mock stands in for modprobe and ibv_devinfo).
        "dpdk_host_mlx5_packages": ["rdma-core", "ibverbs-providers", "libibverbs1"],
        "roce_packages": ["rdma-core", "iproute2"],
    }
    yield hw, root, extra
    provision(inv, progress=False, limit="worker0", tags=["roce"])  # back to the emulated worker's facts


def test_roles_converge_a_connectx_host(mock_connectx):
    from tests.mock_connectx.mock_connectx import calls, icrc_drops

    hw, root, extra = mock_connectx
    go = dict(progress=False, limit="worker0", tags=["dpdk_host", "roce"], extra_vars=extra)
    check = provision(hw, check=True, **go)
    assert not check.missing and not check.failures, check.summary()
    assert {c.label for c in check.changed} == MOCK_TASKS
    assert calls(str(root)) == [] and not (root / "icrc.log").exists()  # check mode touched nothing

    first = provision(hw, **go)
    assert {c.label for c in first.changed} == MOCK_TASKS, first.summary()
    netdev = "enp59s0f0np0"
    assert calls(str(root)) == [
        ["modprobe", "mlx5_core"],
        ["modprobe", "mlx5_ib"],
        ["modprobe", "rdma_cm"],
        ["mount", "-t", "configfs", "none", f"{root}/sys/kernel/config"],
        ["mkdir", f"{root}/sys/kernel/config/rdma_cm/mlx5_0"],
        ["dcb", "app", "replace", "dev", netdev, "dscp-prio", "26:3"],
        [
            "dcb",
            "pfc",
            "set",
            "dev",
            netdev,
            "prio-pfc",
            "0:off",
            "1:off",
            "2:off",
            "3:on",
            "4:off",
            "5:off",
            "6:off",
            "7:off",
        ],
        ["ip", "link", "set", "dev", netdev, "mtu", "4200"],
        ["ip", "link", "set", "dev", netdev, "up"],
        ["ip", "addr", "add", f"{hw.host('worker0').nic.ip}/24", "dev", netdev],
        ["ip", "route", "replace", f"{hw.switch.service_ip}/32", "dev", netdev],
        [
            "ip",
            "neigh",
            "replace",
            hw.switch.service_ip,
            "lladdr",
            hw.switch.service_mac,
            "dev",
            netdev,
            "nud",
            "permanent",
        ],
    ]
    cm = root / "sys/kernel/config/rdma_cm/mlx5_0/ports/1"
    assert (cm / "default_roce_mode").read_text() == "RoCE v2" and (cm / "default_roce_tos").read_text() == "104"
    for side in ("roce_np", "roce_rp"):
        assert (root / f"sys/class/net/{netdev}/ecn/{side}/enable/3").read_text() == "1"
        assert (root / f"sys/class/net/{netdev}/ecn/{side}/enable/2").read_text().strip() == "0"
    assert (root / "icrc.log").read_text() == "off\n"
    # the stamp of this boot: how the check went off, and the NIC's iCRC drop count then
    assert json.loads((root / "run/rainmaker-icrc-disabled").read_text()) == {
        "by": "command",
        "rx_icrc_encapsulated": 0,
    }
    facts = json.loads((hw.host("worker0").deploy_root / "facts/roce.json").read_text())
    ip = hw.host("worker0").nic.ip
    assert facts == {
        "transport": "ibverbs",
        "rdma_device": "mlx5_0",
        "netdev": netdev,
        "port": 1,
        "gid_index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:"
        + "".join(f"{int(o):02x}" for o in ip.split(".")[:2])
        + ":"
        + "".join(f"{int(o):02x}" for o in ip.split(".")[2:]),
        "mtu": 4096,
        "active_mtu": 4096,
        "netdev_mtu": 4200,
        "priority": 3,
        "dscp": 26,
        "pfc": True,
        "ecn": True,
        "qp_type": "uc",
        "icrc_check": "off",
        "icrc_off_by": "command",
    }
    notes = " ".join(first.notes)
    assert "is on NUMA node 1, but hosts[].numa_node is 0" in notes
    assert "interrupts 100,101,102 of the NIC" in notes and "smp_affinity_list" in notes
    assert "iCRC" not in notes  # the command was given, so no by-hand warning

    again = provision(hw, **go)
    assert again.hosts["worker0"].changed == 0, again.summary()
    assert (root / "icrc.log").read_text() == "off\n"  # once per boot
    provision(hw, playbook=VERIFY, **go)

    # The NIC drops RoCE packets for their iCRC all the same (the command did not take).
    icrc_drops(str(root), n=5)
    with pytest.raises(ProvisionError) as e:
        provision(hw, playbook=VERIFY, **go)
    msg = e.value.failures[0].message
    assert "mlx5_0 dropped 5 RoCE packets for a bad iCRC since its check was turned off" in msg
    assert "(rx_icrc_encapsulated 0 -> 5): the check is still on" in msg
    # A reboot (the check is on again, the stamp gone): verify says so, converge turns it off.
    (root / "run/rainmaker-icrc-disabled").unlink()
    with pytest.raises(ProvisionError) as e:
        provision(hw, playbook=VERIFY, **go)
    assert "iCRC check has not been turned off since the last boot" in e.value.failures[0].message
    rebooted = provision(hw, **go)
    assert {c.label for c in rebooted.changed} == {"roce : Turn the NIC's iCRC check off (once per boot)"}
    assert (root / "icrc.log").read_text() == "off\noff\n"
    provision(hw, playbook=VERIFY, **go)

    # The NIC drifts (someone reset its MTU and flushed the neighbour): check says so, converge repairs.
    state = json.loads((root / "mock/state.json").read_text())
    state["neigh"] = {}
    (root / "mock/state.json").write_text(json.dumps(state))
    (root / f"sys/class/net/{netdev}/mtu").write_text("1500\n")
    with pytest.raises(ProvisionError) as e:
        provision(hw, playbook=VERIFY, **go)
    assert "RoCE differs from the inventory: mtu, neigh" in e.value.failures[0].message
    drift = provision(hw, check=True, **go)
    assert {c.label for c in drift.changed} == {
        "roce : Set the netdev MTU for the RDMA MTU",
        "roce : Pin the switch's service MAC as a permanent neighbour",
        "roce : Record the RoCE facts of the host",
    }
    provision(hw, **go)
    provision(hw, playbook=VERIFY, **go)


def test_an_icrc_check_left_on_or_turned_off_by_hand(mock_connectx, tmp_path):
    """roce.icrc_check, against the mock ConnectX: left on (no command), converge warns
    and verify fails naming the field and the fix; turned off by hand, the stamp records
    it and verify holds the NIC to its iCRC drop count."""
    from tests.mock_connectx.mock_connectx import icrc_drops

    hw, root, extra = mock_connectx
    go = dict(progress=False, limit="worker0", tags=["dpdk_host", "roce"], extra_vars=extra)
    stamp, facts = root / "run/rainmaker-icrc-disabled", hw.host("worker0").deploy_root / "facts/roce.json"

    def with_roce(roce: dict):
        data = yaml.safe_load((tmp_path / "hw.yaml").read_text())
        data["roce"] = roce
        (tmp_path / "hw-icrc.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        return load(tmp_path / "hw-icrc.yaml")

    on = with_roce({})
    first = provision(on, **go)
    notes = " ".join(first.notes)
    assert "warning: mlx5_0 checks the RoCEv2 iCRC (a ConnectX does unless turned off)" in notes
    assert "fix: give the command as roce.icrc_disable_command" in notes
    assert not stamp.exists() and not (root / "icrc.log").exists()
    assert {k: json.loads(facts.read_text())[k] for k in ("icrc_check", "icrc_off_by")} == {
        "icrc_check": "on",
        "icrc_off_by": None,
    }
    with pytest.raises(ProvisionError) as e:
        provision(on, playbook=VERIFY, **go)
    msg = e.value.failures[0].message
    assert "mlx5_0 checks the RoCEv2 iCRC" in msg and "would drop every task pre-written to it" in msg
    assert "give roce.icrc_disable_command" in msg and "set roce.icrc_check: off" in msg

    icrc_drops(str(root), n=3)  # the switch's WRITEs it dropped meanwhile
    off = with_roce({"icrc_check": "off"})
    done = provision(off, **go)
    assert {c.label for c in done.changed} == {
        "roce : Note that the iCRC check was turned off by hand (once per boot)",
        "roce : Record the RoCE facts of the host",
    }
    assert json.loads(stamp.read_text()) == {"by": "hand", "rx_icrc_encapsulated": 3}
    assert "iCRC" not in " ".join(done.notes)
    assert {k: json.loads(facts.read_text())[k] for k in ("icrc_check", "icrc_off_by")} == {
        "icrc_check": "off",
        "icrc_off_by": "hand",
    }
    provision(off, playbook=VERIFY, **go)
    icrc_drops(str(root), n=4)
    with pytest.raises(ProvisionError) as e:
        provision(off, playbook=VERIFY, **go)
    assert "dropped 1 RoCE packets for a bad iCRC since its check was turned off" in e.value.failures[0].message


def test_a_dpdk_source_build_is_checked_in_place(converged, tmp_path):
    """dpdk.source: prefix: no package is installed; the build's libdpdk.pc, version and
    PMDs are checked, and a wrong one is named with its fix."""
    inv, _ = converged
    prefix = tmp_path / "dpdk-22.11"
    pc = prefix / "lib/x86_64-linux-gnu/pkgconfig/libdpdk.pc"
    pc.parent.mkdir(parents=True)
    (prefix / "lib/x86_64-linux-gnu/librte_net_af_packet.so.23").write_text("")
    data = inv.model_dump(mode="json", exclude_none=True)
    data["dpdk"] = {"source": "prefix", "prefix": str(prefix)}
    data["deploy"] = {"build": "host"}  # a source build of DPDK: the binaries are built on the hosts
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    src_inv = load(tmp_path / "inv.yaml")
    go = dict(progress=False, limit="worker0", tags=["dpdk_host"])

    check = provision(src_inv, check=True, **go)
    assert [m for m in check.missing["worker0"] if m.startswith("no DPDK build below")], check.missing

    pc.write_text("Name: DPDK\nVersion: 21.11.2\n")
    with pytest.raises(ProvisionError) as e:
        provision(src_inv, **go)
    assert e.value.report.missing["worker0"][0].startswith(f"the DPDK below {prefix} is 21.11.2, not 22.11")

    pc.write_text("Name: DPDK\nVersion: 22.11.4\n")
    ok = provision(src_inv, **go)
    assert ok.total_changed == 0 and not ok.missing
    assert any(
        n.startswith(f"DPDK 22.11.4 from the source build below {prefix}") and "af_packet" in n for n in ok.notes
    )
    provision(src_inv, playbook=VERIFY, **go)


def test_a_nic_for_vfio_pci(converged, tmp_path):
    """An Intel NIC (mock) goes to vfio-pci: without an IOMMU that is missing; with one, a
    check run reports the binding, and a real run refuses it when the NIC carries the
    management address. (The bind itself needs a kernel: the mock has none.)"""
    from tests.mock_connectx.mock_connectx import build, tools

    inv, _ = converged
    hw = as_hardware(inv, tmp_path / "hw.yaml")  # client0: a PCI NIC, no RDMA asked of it
    pci = hw.host("client0").nic.pci

    def machine(name: str, iommu: bool) -> tuple[Path, dict]:
        root = tmp_path / name
        root.mkdir()
        build(str(root), pci=pci, netdev="ens1f0", other_vendor=True, iommu=iommu)
        return root, {"dpdk_host_root": f"{root}/", "dpdk_host_tools": tools(str(root)), "dpdk_host_vfio_packages": []}

    go = dict(progress=False, limit="client0", tags=["dpdk_host"])
    _, extra = machine("no-iommu", iommu=False)
    check = provision(hw, check=True, extra_vars=extra, **go)
    assert [m for m in check.missing["client0"] if m.startswith("no IOMMU on client0, so vfio-pci cannot take")]
    assert "dpdk_host : Bind the NIC to vfio-pci" not in {c.label for c in check.changed}

    root, extra = machine("iommu", iommu=True)
    check = provision(hw, check=True, extra_vars=extra, **go)
    assert not check.missing
    assert {"dpdk_host : Load the NIC's kernel modules", "dpdk_host : Bind the NIC to vfio-pci"} <= {
        c.label for c in check.changed
    }
    assert any("would be bound to vfio-pci until the next boot" in n and "ens1f0" in n for n in check.notes)

    mgmt = hw.host("client0").mgmt.address
    subprocess.run([tools(str(root))["ip"], "addr", "add", f"{mgmt}/24", "dev", "ens1f0"], check=True)
    with pytest.raises(ProvisionError) as e:
        provision(hw, extra_vars=extra, **go)
    assert "would remove ens1f0, which carries the management address" in e.value.failures[0].message
    assert (root / f"sys/bus/pci/devices/{pci}/driver_override").read_text() == "(null)\n"  # untouched


# -- a testbed that claims a Tofino and ConnectX hosts ------------------------------------

SITE_ROLES = ["common", "hugepages", "dpdk_host", "roce", "rainmaker_deploy", "tofino_sde"]


def tree_digest(*roots: Path) -> str:
    """Everything under the deploy roots (names, modes, contents), and the page pool."""
    h = hashlib.sha256()
    for root in roots:
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            h.update(f"{p}:{st.st_mode}:{st.st_size}".encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    h.update(Path("/proc/sys/vm/nr_hugepages").read_bytes())
    return h.hexdigest()


def test_check_against_claimed_hardware_reports_what_is_missing_and_changes_nothing(
    converged, tmp_path, monkeypatch, capsys
):
    """`rainmaker provision --check` with an inventory (hardware_view.py) that names real
    hardware at the emulated machines' SSH addresses: every role of the site playbook
    runs in check mode, says what each machine lacks (the Tofino, its SDE, the PCI NICs,
    their RDMA devices) one item a line with its fix, still says what would change,
    exits 1 because a real run would stop, and changes nothing."""
    inv, _ = converged  # a provisioned emulated testbed: what is left to say is the hardware
    victim = inv.host("worker1").deploy_root / "bin" / "rain-worker"
    victim.unlink()  # and things a converge would change
    agent_victim = inv.host("client0").deploy_root / "agent/hosts/proto.py"
    agent_victim.unlink()
    hw = as_hardware(inv, tmp_path / "hw.yaml")
    roots = [h.deploy_root for h in inv.hosts] + [inv.switch.deploy_root]
    before = tree_digest(*roots)

    # The command a person types, run in-process so that the report it printed can be
    # held as data too (one Ansible run, not two).
    reports = []

    def keep(*args, **kw):
        reports.append(real_provision(*args, **kw))
        return reports[-1]

    real_provision = provision_mod.provision
    monkeypatch.setattr(provision_mod, "provision", keep)
    monkeypatch.setattr(cli.console, "width", 200)
    code, out, err = rainmaker(monkeypatch, capsys, "provision", "--check", "-i", str(tmp_path / "hw.yaml"))
    out = out + err
    assert code == 1, out  # a real run would stop: said by the exit status too
    assert "check mode: nothing was changed" in out
    assert "missing (a real run would stop here; hardware or vendor software):" in out
    lines = out.splitlines()
    for i, h in enumerate(hw.hosts):
        assert (
            f"  {h.name}: no PCI device {FAKE_PCI.format(i % 8)}; fix: `lspci -D` on the host, then hosts[].nic.pci"
            in lines
        ), out
    for w in hw.workers:
        assert any(line.startswith(f"  {w.name}: no RDMA device") and "fix:" in line for line in lines), out
    sw = [line for line in lines if line.startswith(f"  {hw.switch.name}: ")]
    assert any(FAKE_SDE in line and "fix:" in line for line in sw), out  # the SDE is not there
    assert any("Tofino" in line and "1d1c" in line for line in sw), out  # nor the ASIC on PCI
    assert "would change:" in out and "rainmaker_deploy : " in out  # the binary a converge would put back
    assert before == tree_digest(*roots) and not victim.exists() and not agent_victim.exists()  # nothing changed

    # The same run as data: every role ran, and the report holds it all.
    [report] = reports
    assert report.roles == SITE_ROLES or set(report.roles) == set(SITE_ROLES), report.roles
    assert set(report.missing) == {h.name for h in hw.hosts} | {hw.switch.name}
    assert not report.failures and not report.ok
    assert any(
        c.host == "worker1" and c.role == "rainmaker_deploy" and "bin/rain-worker" in c.items for c in report.changed
    ), report.changed
    assert changed_items(report, "Copy the files that differ from the bundle") == {
        "client0": {"agent/hosts/proto.py"},
        "worker1": {"bin/rain-worker"},
    }
    for i, h in enumerate(inv.hosts):
        items = report.missing[h.name]
        assert f"no PCI device {FAKE_PCI.format(i % 8)}; fix: `lspci -D` on the host, then hosts[].nic.pci" in items
        rdma = [m for m in items if m.startswith("no RDMA device")]
        # Workers use ibverbs (hardware_view); the client sends plain UDP: no RoCE asked of it.
        assert (len(rdma) == 1) == (h.role == "worker"), items
    notes = " ".join(report.notes)
    assert "are not isolated" in notes and "isolcpus=" in notes  # the isolation checks ran, as warnings
    assert "client0 is a client: it sends tasks as plain UDP" in notes
    assert "missing (a real run would stop here" in report.summary()

    real_provision(inv, progress=False, limit="worker1,client0", tags=["deploy"])  # put the testbed back
    assert victim.is_file() and agent_victim.is_file()
