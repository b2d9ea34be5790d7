"""Shared test set-up.

Integration tests (marked `integration`) build emulated testbeds: they need root and
run only then. They use their own state folder and slots 9-12, so a testbed a person
has up (slot 0) is never touched.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0 and Path("/usr/sbin/sshd").exists():
        return
    skip = pytest.mark.skip(reason="integration tests need root and openssh-server (run `make test` as root)")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def state_root():
    """A private state folder (root-owned, outside /tmp: sshd's StrictModes refuses /tmp)."""
    d = Path(f"/var/lib/rainmaker-test/{os.getpid()}")
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d.parent, 0o755)
    os.chmod(d, 0o755)
    old = os.environ.get("RAINMAKER_STATE_DIR")
    os.environ["RAINMAKER_STATE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("RAINMAKER_STATE_DIR", None)
    else:
        os.environ["RAINMAKER_STATE_DIR"] = old
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def testbed(state_root):
    """One emulated testbed (1 client, 2 workers) shared by the integration tests."""
    from orchestrator.inventory import load
    from orchestrator.testbed.emulated import EmulatedTestbed

    # RAINMAKER_TEST_SLOT: another slot, so that two test runs can share a machine.
    tb = EmulatedTestbed(slot=int(os.environ.get("RAINMAKER_TEST_SLOT", "9")))
    tb.down(log=lambda m: None)  # leftovers of an interrupted earlier run
    path = tb.up(clients=1, workers=2, log=lambda m: None)
    try:
        yield tb, load(path)
    finally:
        tb.down(log=lambda m: None)


@pytest.fixture(scope="session")
def provisioned(testbed):
    """The shared testbed converged once with the whole site playbook, and that first
    run's report. Tests that need a provisioned testbed share this run instead of each
    converging from scratch (each Ansible run costs seconds per host); a test that
    breaks something puts it back before it ends."""
    from orchestrator.provision import provision

    tb, inv = testbed
    return tb, inv, provision(inv, progress=False)
