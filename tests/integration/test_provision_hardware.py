"""`rainmaker provision --check` on a testbed that claims a Tofino and ConnectX hosts.

The inventory (tests/integration/hardware_view.py) names real hardware, but its SSH
addresses are the emulated testbed's machines, which have none of it. A dry run must
run every role of the site playbook in check mode, say what each machine lacks (the
Tofino, its SDE, the PCI NICs, their RDMA devices) one item a line with its fix, still
say what would change, exit 1 because a real run would stop, and change nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator import provision as provision_mod
from tests.cli import rainmaker

from .hardware_view import FAKE_PCI, FAKE_SDE, as_hardware

pytestmark = pytest.mark.integration

ROLES = ["common", "hugepages", "dpdk_host", "roce", "rainmaker_deploy", "tofino_sde"]


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
    provisioned, tmp_path, monkeypatch, capsys
):
    tb, inv, _ = provisioned  # a provisioned emulated testbed: what is left to say is the hardware
    victim = inv.host("worker1").deploy_root / "bin" / "rain-worker"
    victim.unlink()  # and one thing a converge would change
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
    assert before == tree_digest(*roots) and not victim.exists()  # nothing changed

    # The same run as data: every role ran, and the report holds it all.
    [report] = reports
    assert report.roles == ROLES or set(report.roles) == set(ROLES), report.roles
    assert set(report.missing) == {h.name for h in hw.hosts} | {hw.switch.name}
    assert not report.failures and not report.ok
    assert any(
        c.host == "worker1" and c.role == "rainmaker_deploy" and "bin/rain-worker" in c.items for c in report.changed
    ), report.changed

    real_provision(inv, progress=False, limit="worker1", tags=["deploy"])  # put the testbed back
    assert victim.is_file()
