"""A lab behind a gateway, emulated: the machines answer only through a bastion.

`rainmaker testbed up --bastion` takes this machine's own address off the management
bridge (the testbed's blackhole route then swallows 10.79.S.0/24) and puts a bastion
namespace with its own sshd between this machine and the machines. Its inventory has
ssh.jump (the bastion's key pinned in a known_hosts of its own) and switch.bfrt_via_ssh.
These tests first prove the direct path is closed (no TCP connection reaches a
machine's sshd, nor the switch's BFRuntime), then run through the bastion what a
researcher runs from a laptop: commands, provisioning (Ansible's ProxyCommand), the
switch started and read over the BFRuntime tunnel, one short point of an experiment;
and the tunnel's loss is a clear error, not a hang.

It builds its own testbed in the second spare slot of the run (RAINMAKER_TEST_SLOT + 2).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import bfrt_tunnel, switchd
from orchestrator.deploy import VERSION
from orchestrator.inventory import load
from orchestrator.testbed.emulated import EmulatedTestbed
from tests.integration.test_sweep import spec_file

pytestmark = pytest.mark.integration
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")
SLOT = (int(os.environ.get("RAINMAKER_TEST_SLOT", "9")) + 2) % 16


def rainmaker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([RAINMAKER, *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"rainmaker {' '.join(args)}: status {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def lab(state_root):
    """The testbed behind its bastion (1 client, 1 worker), built by the CLI."""
    tb = EmulatedTestbed(SLOT)
    tb.down(log=lambda m: None)  # leftovers of an interrupted earlier run
    try:
        out = rainmaker("testbed", "up", "--slot", str(SLOT), "--bastion", "--clients", "1", "--workers", "1")
        path = Path(out.stdout.strip().removeprefix("inventory: "))
        yield tb, path, load(path)
    finally:
        tb.down(log=lambda m: None)


def _connects(address: str, port: int) -> str | None:
    """None if a TCP connection from here (the root namespace) fails; else what answered."""
    try:
        with socket.create_connection((address, port), timeout=2) as s:
            s.settimeout(2)
            return repr(s.recv(32))
    except OSError:
        return None


def test_only_the_bastion_is_reachable_and_commands_go_through_it(lab):
    tb, path, inv = lab
    jump = inv.ssh.jump
    assert jump is not None and inv.switch.bfrt_via_ssh
    assert inv.jump_known_hosts == tb.bastion_known_hosts != inv.ssh.known_hosts  # its own pinned key
    # the direct path is closed: no machine's sshd answers this namespace
    for m in [inv.switch.mgmt, *(h.mgmt for h in inv.hosts)]:
        assert _connects(m.address, m.port) is None, f"{m.address}:22 answered directly"
    assert (_connects(jump.address, jump.port) or "").startswith("b'SSH-2.0-")  # the bastion does
    # every machine answers through the bastion, each in its own namespace
    out = rainmaker("exec", "-i", str(path), "--", "sh", "-c", "hostname; readlink /proc/self/ns/net").stdout
    for name in ("sw0", "client0", "worker0"):
        assert f"{name} (" in out and f"\n  {name}\n" in out, out
    status = rainmaker("testbed", "status", "--slot", str(SLOT)).stdout
    assert "bastion" in status and "down" not in status, status


def test_provisioning_goes_through_the_bastion(lab):
    tb, path, inv = lab
    r = rainmaker("provision", "-i", str(path), timeout=600)
    assert "0 failed" in r.stdout, r.stdout
    for h in inv.hosts:  # what the deploy role copied, through Ansible's ProxyCommand
        assert (h.deploy_root / VERSION).is_file(), h.name
    # Ansible's connections came from the bastion, not from here
    assert "from 10.79." in (tb.machine_dir(tb._saved_plan().hosts[0]) / "sshd.log").read_text()


def test_the_switch_and_a_point_run_through_the_bastion(lab, tmp_path):
    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.run import run

    tb, path, inv = lab
    out = rainmaker("switch", "start", "-i", str(path), "--restart").stdout
    assert "through an SSH tunnel to sw0" in out and "program rain" in out, out
    assert _connects(inv.switch.bfrt_host, inv.switch.bfrt_port) is None  # BFRuntime: only through the tunnel
    assert "2 of 2 up" in rainmaker("switch", "status", "-i", str(path)).stdout
    run_dir = run(
        spec_file(tmp_path, "bastion", [0.5], measure=1.0, plots=[]),
        inv,
        path,
        results_root=tmp_path / "results",
        progress=False,
        retries=0,
    )
    points = json.loads(RunDir(run_dir).sweep.read_text())["points"]
    assert [st["status"] for st in points.values()] == ["done"], points  # measured and collected, valid or not
    assert bfrt_tunnel._tunnels == {}  # the run's session closed its tunnel with it


def test_losing_the_tunnel_is_a_clear_error_not_a_hang(lab):
    from switch.control.ports import Ports
    from switch.errors import SwitchError

    tb, path, inv = lab
    if switchd.liveness(inv)[0] != switchd.UP:
        switchd.start(inv, restart=True)
    with switchd.connect(inv) as client:
        assert Ports(client).status()  # the session works through the tunnel
        # the bastion goes away (its sshd and every session it forwards): the path is lost
        pids = subprocess.run(
            ["ip", "netns", "pids", f"rm{SLOT}-bastion"], capture_output=True, text=True, check=True
        ).stdout.split()
        assert pids
        subprocess.run(["kill", "-KILL", *pids], check=True)
        t0 = time.monotonic()
        with pytest.raises(SwitchError) as e:
            for _ in range(50):  # the first read may still be under way as the connection drops
                Ports(client).status()
                time.sleep(0.1)
        waited = time.monotonic() - t0
    text = e.value.render()
    assert "switch sw0" in text and "SSH tunnel 127.0.0.1:" in text and "which is down" in text, text
    assert waited < 20, f"the loss took {waited:.1f} s to be reported"
