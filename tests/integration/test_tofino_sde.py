"""The tofino_sde role on the emulated testbed, with a mock SDE (tests/mock_sde).

The emulated testbed's switch machine becomes a `tofino` switch with `target: model`
and `sde:` pointing at the mock SDE installed on the shared file system: the role
checks it, compiles rain.p4 with the mock bf-p4c, installs it and bf_switchd's conf,
starts the mock tofino-model and bf_switchd with start-stop-daemon (PID 1 is not
systemd here), and probes readiness through rainmaker's BFRuntime client (the mock
bf_switchd runs rainmaker's emulator, so ports really come up on the testbed's veths).
Then: verify, a second converge that changes nothing, `rainmaker switch status|stop|
start`, a changed and a broken program, the emulated variant, and the hardware view
(no SDE, target asic) whose check run names what is missing.

Run with RAINMAKER_TEST_SLOT=6 (the shared `testbed` fixture of tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import switchd
from orchestrator.errors import ProvisionError
from orchestrator.inventory import load
from orchestrator.provision import VERIFY, provision
from switch.bfrt.client import Client
from switch.control import RainController
from tests.integration.hardware_view import as_hardware
from tests.mock_sde import install as install_mock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")
# The emulated testbed shares this machine's kernel: no sysctl file for it (see hugepages).
NO_PERSIST = {"hugepages_persist": False}


def as_tofino_model(inv, out: Path, sde: Path) -> Path:
    """`inv` (the emulated testbed) with its switch as a Tofino running tofino-model on its veths."""
    data = inv.model_dump(mode="json", exclude_none=True)
    data["name"] = f"{inv.name}-model"
    data["switch"].update(
        {
            "kind": "tofino",
            "target": "model",
            "sde": str(sde),
            "sde_version": "9.13.0",
            # the testbed's hosts ask for 64 pages: keep this machine's pool where it is
            "hugepages": {"size": "2M", "count": 64},
        }
    )
    out.write_text(
        "# tests/integration/test_tofino_sde.py: a tofino-model switch on the emulated testbed\n"
        + yaml.safe_dump(data, sort_keys=False)
    )
    return out


@pytest.fixture(scope="module")
def model(testbed):
    tb, inv = testbed
    state = Path(inv.emulation.state_dir)
    sde = install_mock(state / "mock-sde", grpc=inv.switch.bfrt)
    path = as_tofino_model(inv, state / "tofino-model.yaml", sde)
    minv = load(path)
    switchd.stop(inv)  # an emulator another test left on the switch would hold the BFRuntime address
    yield minv, path, sde
    switchd.stop(minv)


def run_dir(minv) -> Path:
    return minv.switch.deploy_root / "run"


def pid_alive(pidfile: Path) -> bool:
    try:
        stat = Path(f"/proc/{int(pidfile.read_text())}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def changed(report, host="sw0") -> list[str]:
    return [c.task for c in report.changed if c.host == host]


def cli(inv_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAINMAKER_INVENTORY": str(inv_path)}
    return subprocess.run([RAINMAKER, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_check_converge_verify_then_nothing_changes(model):
    minv, _, sde = model
    conf = sde / "install/share/p4/targets/tofino/rain.conf"
    switchd.stop(minv)
    shutil.rmtree(minv.switch.deploy_root / "p4", ignore_errors=True)

    check = provision(minv, check=True, limit="sw0", progress=False, extra_vars=NO_PERSIST)
    would = changed(check)
    for task in (
        "Copy the P4 sources of the program, rain",
        "Compile the program with the SDE's compiler, rain",
        "Install the program for bf_switchd, rain",
        "Write bf_switchd's conf file for rain",
        "Start tofino-model",
        "Start bf_switchd",
    ):
        assert task in would, (task, would)
    assert check.missing == {}
    assert not conf.exists() and not (minv.switch.deploy_root / "p4").exists()  # check mode changed nothing

    t0 = time.monotonic()
    first = provision(minv, limit="sw0", progress=False, extra_vars=NO_PERSIST)
    converge_s = time.monotonic() - t0
    done = changed(first)
    assert "Compile the program with the SDE's compiler, rain" in done and "Start bf_switchd" in done
    assert any("bf_switchd serves rain on" in n and "3 ports up (1/0, 2/0, 3/0)" in n for n in first.notes), first.notes
    assert pid_alive(run_dir(minv) / "bf_switchd.pid") and pid_alive(run_dir(minv) / "tofino-model.pid")
    c = json.loads(conf.read_text())
    assert (
        c["p4_devices"][0]["p4_programs"][0]["program-name"] == "rain" and "pcie_sysfs_prefix" not in c["chip_list"][0]
    )
    ports = json.loads((minv.switch.deploy_root / "p4/tofino-model-ports.json").read_text())["PortToIf"]
    assert ports == [{"device_port": p.dev_port, "if": p.iface} for p in minv.switch.ports]
    assert (minv.switch.deploy_root / "log/p4c-rain.log").read_text().startswith("+ ")
    log = (minv.switch.deploy_root / "log/bf_switchd.log").read_text()
    assert "MOCK" in log and "rain emulator ready" in log

    st = switchd.status(minv)
    assert st.answers and st.program == "rain" and all(p["up"] for p in st.ports.values()), st

    verify = provision(minv, limit="sw0", progress=False, playbook=VERIFY)
    assert verify.hosts["sw0"].failed == 0 and verify.hosts["sw0"].changed == 0

    t0 = time.monotonic()
    second = provision(minv, limit="sw0", progress=False, extra_vars=NO_PERSIST)
    again_s = time.monotonic() - t0
    assert second.hosts["sw0"].changed == 0, changed(second)
    assert provision(minv, check=True, limit="sw0", progress=False, extra_vars=NO_PERSIST).hosts["sw0"].changed == 0
    print(f"converge {converge_s:.1f} s, second converge {again_s:.1f} s")


def test_verify_finds_what_was_tampered_with(model):
    minv, _, sde = model
    provision(minv, limit="sw0", progress=False, extra_vars=NO_PERSIST)
    binary = sde / "install/share/tofinopd/rain/pipe/tofino.bin"
    binary.write_bytes(binary.read_bytes() + b"x")
    with pytest.raises(ProvisionError) as e:
        provision(minv, limit="sw0", progress=False, playbook=VERIFY)
    assert "files of rain in" in str(e.value) and "differ from the ones installed" in str(e.value)
    fixed = provision(minv, limit="sw0", progress=False, extra_vars=NO_PERSIST)
    assert "Install the program for bf_switchd, rain" in changed(fixed)
    assert "Start bf_switchd" not in changed(fixed)  # the same build: the running daemon is kept
    provision(minv, limit="sw0", progress=False, playbook=VERIFY)


def test_switch_status_stop_start_through_the_role(model):
    minv, path, _ = model
    assert cli(path, "switch", "start").returncode == 0
    r = cli(path, "switch", "status")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bf_switchd, a service of the tofino_sde role" in r.stdout and "program rain" in r.stdout
    assert f"ports: {len(minv.switch.ports)} of {len(minv.switch.ports)} up" in r.stdout

    r = cli(path, "switch", "stop")
    assert r.returncode == 0 and "switch sw0: stopped" in r.stdout, r.stdout + r.stderr
    assert not pid_alive(run_dir(minv) / "bf_switchd.pid") and not pid_alive(run_dir(minv) / "tofino-model.pid")
    r = cli(path, "switch", "status")
    assert r.returncode == 1 and "no answer" in r.stdout
    r = cli(path, "switch", "stop")
    assert r.returncode == 0 and "switch sw0: not running" in r.stdout

    t0 = time.monotonic()
    r = cli(path, "switch", "start")
    start_s = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Start tofino-model" in r.stdout and "Start bf_switchd" in r.stdout and "program rain" in r.stdout
    assert "Compile" not in r.stdout  # nothing changed in the sources: no build
    with Client(minv.switch.bfrt, "rain") as c:  # the controller programs it like any switch
        RainController(c, minv).program()
    r = cli(path, "switch", "start", "--restart")
    assert r.returncode == 0 and "Stop bf_switchd" in r.stdout and "Start bf_switchd" in r.stdout
    r = cli(path, "switch", "start", "--program", "nosuch")
    assert r.returncode == 1 and "no P4 program 'nosuch'" in r.stderr and "rain" in r.stderr
    assert switchd.status(minv).program == "rain"  # refused before anything was touched
    print(f"switch start (no build) {start_s:.1f} s")


def test_switchd_tasks_alone_start_only_an_installed_program(model, tmp_path):
    """`--tags switchd` never builds: it starts what is installed, and refuses a program
    whose sources changed since, naming the run that builds it."""
    minv, _, _ = model
    switchd.stop(minv)
    r = provision(minv, limit="sw0", tags=["switchd"], progress=False, extra_vars={"tofino_sde_state": "started"})
    assert "Start bf_switchd" in changed(r) and not any("Compile" in t for t in changed(r))
    assert switchd.status(minv).answers
    src = tmp_path / "p4"
    shutil.copytree(REPO / "switch/p4", src, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (src / "sizes.p4").write_text((src / "sizes.p4").read_text() + "/* changed */\n")
    with pytest.raises(ProvisionError) as e:
        provision(
            minv,
            limit="sw0",
            tags=["switchd"],
            progress=False,
            extra_vars={"tofino_sde_state": "restarted", "tofino_sde_p4_dir": str(src)},
        )
    assert "is not installed on sw0 as this checkout would build it" in str(e.value)
    assert "rainmaker provision --tags tofino_sde" in str(e.value)


def test_a_bf_switchd_that_is_not_the_roles_is_not_fought_over(testbed, model, tmp_path):
    """A bf_switchd someone started by hand (here: a process of that name, sleeping) holds
    the device: the role refuses to start another and names it. One on another machine
    (here: another network namespace of this one) is none of its business."""
    _, inv = testbed
    minv, _, _ = model
    provision(
        minv, limit="sw0", tags=["tofino_sde"], progress=False
    )  # the program installed (a no-op after the others)
    switchd.stop(minv)
    fake = tmp_path / "bf_switchd"
    shutil.copy("/bin/sleep", fake)
    elsewhere = subprocess.Popen([str(fake), "300"])  # this machine's root namespace: not the switch
    try:
        r = provision(minv, limit="sw0", tags=["switchd"], progress=False, extra_vars={"tofino_sde_state": "stopped"})
        assert not r.failures
    finally:
        elsewhere.kill()
        elsewhere.wait()
    other = subprocess.Popen(["ip", "netns", "exec", inv.switch.netns, str(fake), "300"])  # on the switch itself
    try:
        with pytest.raises(ProvisionError) as e:
            provision(minv, limit="sw0", tags=["switchd"], progress=False, extra_vars={"tofino_sde_state": "started"})
        assert f"already runs, not as rainmaker's service: {other.pid} {fake} 300" in str(e.value)
        assert not switchd.status(minv).answers
    finally:
        other.kill()
        other.wait()
    r = provision(minv, limit="sw0", tags=["switchd"], progress=False, extra_vars={"tofino_sde_state": "started"})
    assert "Start bf_switchd" in changed(r)


def test_a_changed_program_is_rebuilt_and_restarted_and_a_broken_one_is_refused(model, tmp_path):
    minv, _, _ = model
    src = tmp_path / "p4"
    src.mkdir()
    for f in (REPO / "switch/p4").glob("*.p4"):
        shutil.copy(f, src / f.name)
    with (src / "sizes.p4").open("a") as f:
        f.write("/* a change that the build id sees */\n")
    r = provision(minv, limit="sw0", tags=["tofino_sde"], progress=False, extra_vars={"tofino_sde_p4_dir": str(src)})
    for task in (
        "Copy the P4 sources of the program, rain",
        "Compile the program with the SDE's compiler, rain",
        "Stop bf_switchd",
        "Start bf_switchd",
    ):
        assert task in changed(r), changed(r)

    text = (src / "rain.p4").read_text()
    (src / "rain.p4").write_text(text.replace('#include "slice_map.p4"', '#include "slice_mapp.p4"'))
    with pytest.raises(ProvisionError) as e:
        provision(minv, limit="sw0", tags=["tofino_sde"], progress=False, extra_vars={"tofino_sde_p4_dir": str(src)})
    (failure,) = e.value.failures
    assert failure.task == "tofino_sde : Compile the program with the SDE's compiler, rain"
    assert "fatal error: slice_mapp.p4: No such file or directory" in failure.message
    assert "log/p4c-rain.log" in failure.message
    assert switchd.status(minv).answers  # the switch that ran keeps running

    back = provision(minv, limit="sw0", tags=["tofino_sde"], progress=False)
    assert "Compile the program with the SDE's compiler, rain" in changed(back) and "Start bf_switchd" in changed(back)
    provision(minv, limit="sw0", progress=False, playbook=VERIFY)


def test_the_emulated_switch_only_has_its_interfaces_checked(testbed, tmp_path):
    tb, inv = testbed
    r = provision(inv, limit="sw0", tags=["tofino_sde"], progress=False)
    assert r.hosts["sw0"].changed == 0 and r.missing == {}
    assert any("is an emulated switch: nothing to install" in n for n in r.notes), r.notes
    data = inv.model_dump(mode="json", exclude_none=True)
    data["switch"]["ports"][0]["iface"] = "swp99"
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    r = provision(load(path), check=True, limit="sw0", tags=["tofino_sde"], progress=False)
    (item,) = r.missing["sw0"]
    assert item.startswith("the interface swp99 behind a port of the emulated switch on sw0; fix: rebuild the testbed")


def test_hardware_view_names_what_is_missing(model, tmp_path):
    """No SDE at all, target asic: the check run lists the SDE, the ASIC and the module,
    and still reports what would change; a real run stops with the same list."""
    minv, _, _ = model
    tb_inv = load(Path(minv.emulation.state_dir) / "inventory.yaml")
    hw = as_hardware(tb_inv, tmp_path / "hw.yaml")
    report = provision(hw, check=True, limit="sw0", progress=False)
    items = report.missing["sw0"]
    text = "\n".join(items)
    assert "the SDE folder /opt/rainmaker-test-no-sde/bf-sde-9.13.0 on sw0" in text
    assert "the SDE install folder /opt/rainmaker-test-no-sde/bf-sde-9.13.0/install" in text
    assert "a Tofino ASIC on PCI (no device of vendor 0x1d1c" in text
    assert "the kernel module bf_kdrv (not loaded" in text
    assert all("; fix: " in i for i in items)
    assert "Copy the P4 sources of the program, rain" in changed(report)  # what would change still shows
    assert "missing (a real run would stop here" in report.summary()

    with pytest.raises(ProvisionError) as e:
        provision(hw, limit="sw0", tags=["tofino_sde"], progress=False)
    assert e.value.report.missing["sw0"] == items
    assert not Path("/opt/rainmaker-test-no-sde").exists()
    r = cli(tmp_path / "hw.yaml", "provision", "--check", "--limit", "sw0")
    assert r.returncode == 1 and "a Tofino ASIC on PCI" in r.stdout
