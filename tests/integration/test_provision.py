"""Provisioning the emulated testbed with real Ansible: converge, then nothing to change."""

from __future__ import annotations

import pytest

from orchestrator.provision import provision

pytestmark = pytest.mark.integration


def test_provision_converges_then_changes_nothing(provisioned):
    tb, inv, first = provisioned  # the first converge, shared with the other provisioning tests
    assert set(first.hosts) == {"sw0", "client0", "worker0", "worker1"}
    assert all(h.failed == 0 and h.unreachable == 0 for h in first.hosts.values())
    for h in inv.hosts:  # the common role made each host's deploy root
        for sub in ("bin", "agent", "run", "log"):
            assert (h.deploy_root / sub).is_dir()
    second = provision(inv, progress=False)
    assert {name: h.changed for name, h in second.hosts.items()} == {n: 0 for n in second.hosts}
    check = provision(inv, check=True, progress=False)
    assert all(h.changed == 0 for h in check.hosts.values())


def test_provision_check_reports_what_would_change(provisioned):
    tb, inv, _ = provisioned  # converged: the common role made every deploy root's log/
    victim = inv.host("worker1").deploy_root / "log"
    victim.rmdir()
    report = provision(inv, check=True, progress=False, limit="worker1")
    assert report.hosts["worker1"].changed >= 1
    assert not victim.exists()  # check mode changed nothing
    provision(inv, progress=False, limit="worker1")
    assert victim.is_dir()
