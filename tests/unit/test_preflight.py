"""The preflight (orchestrator/preflight): its probe run as on a machine (collect.run_here:
the same python3 -c bootstrap and one argument) against the roles' mocks, a mock
ConnectX host tree (tests/mock_connectx) and a mock SDE (tests/mock_sde); the checks
judged from what it found; and `rainmaker run` refusing on a needed failure."""

from __future__ import annotations

import ast
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.inventory import load
from orchestrator.preflight import FAIL, NA, OK, WARN, PreflightFailed, Report, judge, needs_of
from orchestrator.preflight import collect as pf_collect
from orchestrator.preflight.checks import host_checks, switch_checks
from tests.mock_connectx.mock_connectx import build, icrc_drops, tools

REPO = Path(__file__).resolve().parents[2]
PCI = "0000:3b:00.0"
NETDEV = "enp59s0f0np0"
ETHTOOL_HW = """Time stamping parameters for {dev}:
Capabilities:
	hardware-transmit
	software-transmit
	hardware-receive
	software-receive
	software-system-clock
	hardware-raw-clock
PTP Hardware Clock: 2
Hardware Transmit Timestamp Modes:
	off
	on
"""


def inventory(tmp_path: Path, **changes):
    data = yaml.safe_load((REPO / "orchestrator/inventory/examples/rack1.yaml").read_text())
    data["ssh"] = {}
    for k, v in changes.items():
        data[k] = v
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(data))
    return load(p)


def spec(systems: list[str]):
    from orchestrator.experiment.spec import Spec

    base = yaml.safe_load((REPO / "experiments/demo.yaml").read_text())
    if any(s not in ("rain", "r2p2", "racksched", "draconis", "pallas") for s in systems):
        base = yaml.safe_load((REPO / "experiments/rakaia-micro-20us.yaml").read_text())
    # other systems than the spec's: its claims name curves this one would not draw
    return Spec.model_validate({**base, "systems": systems, "claims": [], "references": []})


DPKG_QUERY = """#!/bin/sh
# dpkg-query --show --showformat=FORMAT NAME...: every package installed, DPDK 22.11.4
for a in "$@"; do case "$a" in -*) ;; *) printf '%s\tii \t22.11.4-1\n' "$a" ;; esac; done
"""


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Path:
    """A ConnectX host: the mock's tree, a kernel config, huge pages, a clock, an ethtool,
    and a dpkg that has every package (this machine's own need not)."""
    root = tmp_path / "m"
    root.mkdir()
    build(str(root), pci=PCI, cpus=18)
    (root / "bin/dpkg-query").write_text(DPKG_QUERY)
    (root / "bin/dpkg-query").chmod(0o755)
    monkeypatch.setenv("PATH", f"{root / 'bin'}:{os.environ['PATH']}")
    config(root, AF_KCM="m", TLS="m", INFINIBAND="y", INFINIBAND_USER_ACCESS="m", MLX5_INFINIBAND="y")
    pages(root, nr=4096, free=4096)
    clock = root / "sys/devices/system/clocksource/clocksource0"
    clock.mkdir(parents=True)
    (clock / "current_clocksource").write_text("tsc\n")
    (clock / "available_clocksource").write_text("tsc hpet acpi_pm\n")
    ethtool(root, ETHTOOL_HW)
    return root


def config(root: Path, **opts: str) -> None:
    lines = [f"CONFIG_{k}={v}" if v != "n" else f"# CONFIG_{k} is not set" for k, v in opts.items()]
    with gzip.open(root / "proc/config.gz", "wt") as fh:
        fh.write("\n".join(["CONFIG_BPF_SYSCALL=y", *lines]) + "\n")


def pages(root: Path, nr: int, free: int, kb: int = 2048) -> None:
    d = root / f"sys/kernel/mm/hugepages/hugepages-{kb}kB"
    d.mkdir(parents=True, exist_ok=True)
    (d / "nr_hugepages").write_text(f"{nr}\n")
    (d / "free_hugepages").write_text(f"{free}\n")


def ethtool(root: Path, text: str) -> None:
    p = root / "bin/ethtool"
    p.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text.format(dev=NETDEV)}EOF\n")
    p.chmod(0o755)


def configure_roce(root: Path) -> None:
    """What the roce role does, through the mock's tools (roles/roce/tasks/configure.yml)."""
    t = tools(str(root))
    for argv in (
        [t["ip"], "addr", "add", "10.10.1.2/24", "dev", NETDEV],
        [t["ip"], "link", "set", "dev", NETDEV, "mtu", "4200"],
        [t["dcb"], "app", "replace", "dev", NETDEV, "dscp-prio", "26:3"],
        [t["dcb"], "pfc", "set", "dev", NETDEV, "prio-pfc", "3:on"],
        [t["modprobe"], "rdma_cm"],
        [t["mount"], "-t", "configfs", "none", str(root / "sys/kernel/config")],
        [t["mkdir"], str(root / "sys/kernel/config/rdma_cm/mlx5_0")],
    ):
        subprocess.run(argv, check=True)
    port = root / "sys/kernel/config/rdma_cm/mlx5_0/ports/1"
    (port / "default_roce_mode").write_text("RoCE v2\n")
    (port / "default_roce_tos").write_text("104\n")
    for side in ("roce_np", "roce_rp"):
        (root / f"sys/class/net/{NETDEV}/ecn/{side}/enable/3").write_text("1\n")
    (root / "run/rainmaker-icrc-disabled").write_text('{"by": "command", "rx_icrc_encapsulated": 0}\n')


def probe_host(inv, name: str, root: Path) -> dict:
    t = tools(str(root)) | {"ethtool": str(root / "bin/ethtool")}
    return pf_collect.run_here(pf_collect.host_args(inv, inv.host(name), root=f"{root}/", tools=t))


def by_name(checks) -> dict:
    return {c.name: c for c in checks}


# -- the probe on a mock ConnectX ---------------------------------------------------------


def test_a_provisioned_connectx_worker_passes_every_needed_check(tmp_path, machine):
    inv = inventory(tmp_path, roce={"icrc_disable_command": "mstmcra mlx5_0 0x5363c.12:1 0"})
    configure_roce(machine)
    out = probe_host(inv, "worker0", machine)
    assert out["errors"] == {}
    c = by_name(host_checks(inv, inv.host("worker0"), out, needs_of(None)))
    for name in ("kernel.rdma", "dpdk", "nic", "roce", "icrc"):
        assert c[name].needed and c[name].status == OK, c[name]
    assert c["hugepages"].status == OK and "4096 pages of 2048 kB, 4096 free" in c["hugepages"].detail
    assert c["roce"].detail.endswith("RoCE v2, DSCP 26 -> 3, PFC on 3, GID 3")
    assert c["timestamping"].status == OK and "PTP clock 2" in c["timestamping"].detail
    assert c["clocksource"].status == OK
    # the mock has no cpufreq; its 18 CPUs are not isolated
    assert c["governor"].status == NA
    assert c["isolation"].status == WARN and "isolcpus=2-17" in c["isolation"].fix


def test_an_unprovisioned_connectx_worker_fails_with_the_roles_fixes(tmp_path, machine):
    inv = inventory(tmp_path)  # no icrc_disable_command: the ConnectX checks the iCRC
    c = by_name(host_checks(inv, inv.host("worker0"), probe_host(inv, "worker0", machine), needs_of(None)))
    roce = c["roce"]
    assert roce.status == FAIL and roce.needed and roce.fix == "`rainmaker provision --tags roce`"
    for what in ("RDMA CM mode None", "DSCP 26 -> priority None", "netdev MTU 1500 (want 4200)", "no RoCE v2 GID"):
        assert what in roce.detail
    assert c["icrc"].status == FAIL and "icrc_disable_command" in c["icrc"].fix
    # a client on the same ConnectX: no RoCE to configure (rdma: auto on a client sends UDP)
    client = by_name(host_checks(inv, inv.host("client0"), probe_host(inv, "client0", machine), needs_of(None)))
    assert client["nic"].status == OK and "0x15b3" in client["nic"].detail


def test_the_icrc_check_follows_the_roles_stamp_and_the_nics_drops(tmp_path, machine):
    inv = inventory(tmp_path, roce={"icrc_check": "off"})
    configure_roce(machine)
    (machine / "run/rainmaker-icrc-disabled").unlink()
    icrc = by_name(host_checks(inv, inv.host("worker0"), probe_host(inv, "worker0", machine), needs_of(None)))["icrc"]
    assert icrc.status == FAIL and "not turned off since the last boot" in icrc.detail
    (machine / "run/rainmaker-icrc-disabled").write_text('{"by": "hand", "rx_icrc_encapsulated": 2}\n')
    icrc_drops(str(machine), n=9)
    icrc = by_name(host_checks(inv, inv.host("worker0"), probe_host(inv, "worker0", machine), needs_of(None)))["icrc"]
    assert icrc.status == FAIL and "dropped 7 RoCE packets" in icrc.detail


def test_kernel_options_come_from_the_config_else_from_the_running_kernel(tmp_path, machine):
    inv = inventory(tmp_path)
    kcm = needs_of(spec(["cp", "kcm"]))
    assert kcm.worker_options.keys() == {"AF_KCM", "BPF_SYSCALL"} and not kcm.dpdk
    config(machine, AF_KCM="n", TLS="y", INFINIBAND="y", INFINIBAND_USER_ACCESS="y", MLX5_INFINIBAND="n")
    out = probe_host(inv, "worker0", machine)
    c = by_name(judge(inv, kcm, {"worker0": out}, None))  # only worker0 answered
    assert c["kernel.kcm"].status == FAIL and c["kernel.kcm"].needed and "CONFIG_AF_KCM=n" in c["kernel.kcm"].detail
    assert "CONFIG_AF_KCM" in c["kernel.kcm"].fix
    assert c["kernel.tls"].status == OK and not c["kernel.tls"].needed
    # an RPC spec runs no DPDK: RDMA is not needed, so what is missing only warns
    assert c["kernel.rdma"].status == WARN and "CONFIG_MLX5_INFINIBAND=n" in c["kernel.rdma"].detail
    assert c["hugepages"].status == NA and "runs no DPDK program" in c["hugepages"].detail
    # no config file at all: the running kernel is asked (socket(AF_KCM), TCP_ULP tls)
    (machine / "proc/config.gz").unlink()
    out = probe_host(inv, "worker0", machine)
    assert out["kernel"]["source"] is None and out["kernel"]["offers"]["af_kcm"] in ("yes", "EAFNOSUPPORT")
    kc = by_name(judge(inv, kcm, {"worker0": out}, None))["kernel.kcm"]
    assert kc.status == (OK if out["kernel"]["offers"]["af_kcm"] == "yes" else FAIL)
    assert "the running kernel" in kc.detail


def test_huge_pages_dpdk_clock_and_timestamps_name_their_fixes(tmp_path, machine):
    inv = inventory(tmp_path, dpdk={"source": "debian", "version": "21.11"})
    pages(machine, nr=1024, free=1024)
    (machine / "sys/devices/system/clocksource/clocksource0/current_clocksource").write_text("hpet\n")
    ethtool(
        machine, "Time stamping parameters for {dev}:\nCapabilities:\n\tsoftware-receive\nPTP Hardware Clock: none\n"
    )
    c = by_name(host_checks(inv, inv.host("client0"), probe_host(inv, "client0", machine), needs_of(None)))
    assert c["hugepages"].status == FAIL and "1024 pages of 2048 kB" in c["hugepages"].detail
    assert "--tags hugepages" in c["hugepages"].fix
    pages(machine, nr=4096, free=100)
    c = by_name(host_checks(inv, inv.host("client0"), probe_host(inv, "client0", machine), needs_of(None)))
    assert c["hugepages"].status == WARN and "others hold some" in c["hugepages"].detail
    dpdk = c["dpdk"]
    assert dpdk.status == FAIL and "DPDK 22.11.4-1 (Debian's dpdk package), but" in dpdk.detail
    assert "built for 21.11 (dpdk.version)" in dpdk.detail and "--tags dpdk_host" in dpdk.fix
    assert c["clocksource"].status == WARN and "clocksource=tsc" in c["clocksource"].fix
    assert c["timestamping"].status == WARN and "no hardware timestamps" in c["timestamping"].detail


def test_a_nic_on_the_wrong_driver_or_missing_fails(tmp_path, machine):
    inv = inventory(tmp_path)
    out = probe_host(inv, "client0", machine)
    out["host"]["nic"]["driver"] = "vfio-pci"
    nic = by_name(host_checks(inv, inv.host("client0"), out, needs_of(None)))["nic"]
    assert nic.status == FAIL and "expected mlx5_core" in nic.detail and "--tags dpdk_host" in nic.fix
    data = yaml.safe_load((REPO / "orchestrator/inventory/examples/rack1.yaml").read_text())
    data["ssh"], data["hosts"][0]["nic"]["pci"] = {}, "0000:af:00.0"
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(data))
    other = load(tmp_path / "other.yaml")
    nic = by_name(host_checks(other, other.host("client0"), probe_host(other, "client0", machine), needs_of(None)))
    assert nic["nic"].status == FAIL and "no PCI device 0000:af:00.0" in nic["nic"].detail


# -- the switch: a mock SDE -----------------------------------------------------------------


def test_the_sde_is_found_as_the_tofino_sde_role_lays_it_out(tmp_path):
    from tests.mock_sde import install

    sde = install(tmp_path, grpc="127.0.0.1:50052")
    inv = inventory(tmp_path, switch={**inventory(tmp_path).switch.model_dump(mode="json"), "sde": str(sde)})
    out = pf_collect.run_here(pf_collect.switch_args(inv))
    assert out["sde"]["version"] == "9.13.0" and out["sde"]["switchd"] and out["errors"] == {}
    c = by_name(switch_checks(inv, out, ("down", "its BFRuntime port refuses connections")))
    assert c["sde"].status == OK and c["sde"].needed and "SDE 9.13.0" in c["sde"].detail
    assert c["switchd"].status == WARN and "`rainmaker switch start`" in c["switchd"].fix
    assert c["hugepages"].needed  # a Tofino ASIC's bf_switchd takes its DMA buffers from them
    (sde / "bf-sde-9.13.0.manifest").rename(sde / "bf-sde-9.12.0.manifest")
    c = by_name(switch_checks(inv, pf_collect.run_here(pf_collect.switch_args(inv)), ("up", "answers")))
    assert c["sde"].status == FAIL and "switch.sde_version is 9.13.0" in c["sde"].detail
    assert c["switchd"].status == OK
    (sde / "install/bin/bf_switchd").unlink()
    c = by_name(switch_checks(inv, pf_collect.run_here(pf_collect.switch_args(inv)), None))
    assert c["sde"].status == FAIL and "bin/bf_switchd missing" in c["sde"].detail


# -- the report and the run ------------------------------------------------------------------


def test_only_needed_failures_block_and_each_names_its_fix(tmp_path):
    inv = inventory(tmp_path)
    answers = {h.name: "connection refused" for h in inv.hosts} | {"tofino1": "timed out after 20s"}
    checks = judge(inv, needs_of(None), answers, None)
    assert [(c.machine, c.name, c.status, c.needed) for c in checks] == [
        (m, "reach", FAIL, True) for m in ("tofino1", "client0", "worker0", "worker1")
    ]
    r = Report("rack1", needs_of(None).as_dict(), checks)
    err = PreflightFailed(r, what="rainmaker run demo")
    text = err.render()
    assert "rainmaker run demo: 4 needed checks of the preflight failed" in text
    assert "client0: reach: the probe did not run: connection refused" in text and "--no-preflight" in text
    d = json.loads(json.dumps(r.as_dict()))
    assert d["ok"] is False and d["blocking"][0] == "tofino1: reach" and d["counts"][FAIL] == 4


def test_run_refuses_before_making_its_folder_and_no_preflight_skips(tmp_path, monkeypatch):
    from orchestrator.experiment import run as run_mod
    from orchestrator.preflight import Check

    inv = inventory(tmp_path)
    bad = Check("worker0", "worker", "kernel.kcm", FAIL, True, "CONFIG_AF_KCM=n", "a kernel with CONFIG_AF_KCM")
    monkeypatch.setattr("orchestrator.preflight.preflight", lambda inv, spec: Report(inv.name, {}, [bad]))
    with pytest.raises(PreflightFailed) as ei:
        run_mod.run(REPO / "experiments/demo.yaml", inv, results_root=tmp_path / "results", progress=False)
    assert "worker0: kernel.kcm: CONFIG_AF_KCM=n" in ei.value.render()
    assert not (tmp_path / "results").exists()

    class Reached(Exception):
        pass

    def planned(*a, **k):
        raise Reached

    monkeypatch.setattr(run_mod, "plan", planned)  # past the preflight: stop there
    with pytest.raises(Reached):
        run_mod.run(REPO / "experiments/demo.yaml", inv, results_root=tmp_path / "r", progress=False, preflight=False)


def test_the_probe_is_sent_whole_and_uses_only_the_standard_library():
    for name, path in pf_collect.SCRIPTS.items():
        tree = ast.parse(path.read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert {m.split(".")[0] for m in mods} <= set(sys.stdlib_module_names) | {"__future__"}, name
    assert len(pf_collect.payload()) < 64_000  # one argument of one command line (Linux: 128 kB)
