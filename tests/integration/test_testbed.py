"""The emulated testbed's life cycle: up builds it, down leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import TestbedError
from orchestrator.inventory import load
from orchestrator.testbed import emulated, state
from orchestrator.testbed.emulated import EmulatedTestbed

pytestmark = pytest.mark.integration

# Two slots next to the run's own (RAINMAKER_TEST_SLOT, default 9), so that two test
# runs on one machine, each with its own slot, never build in the same one.
BASE = int(os.environ.get("RAINMAKER_TEST_SLOT", "9"))
SLOT_A, SLOT_B = ((BASE + 1) % 16, (BASE + 2) % 16)


def netns_names() -> list[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout
    return [n["name"] for n in json.loads(out or "[]")]


def links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout
    return [x["ifname"] for x in json.loads(out or "[]")]


def sshd_pids_of(state_dir: Path) -> list[int]:
    """sshd processes whose command line names a config under `state_dir`."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "sshd" in cmd and str(state_dir) in cmd:
                pids.append(int(p.name))
    return pids


def assert_clean(slot: int, state_dir: Path) -> None:
    prefix = f"rm{slot}"
    assert not [n for n in netns_names() if n.startswith(prefix + "-")]
    assert not [k for k in links() if k == f"{prefix}br" or k.startswith((f"{prefix}m-", f"{prefix}d"))]
    assert not sshd_pids_of(state_dir)
    assert not list(Path("/var/run/dpdk").glob(f"{prefix}-*")) if Path("/var/run/dpdk").exists() else True
    assert not state_dir.exists()
    others = [n for n in netns_names() if n.startswith("rm")]
    routes = subprocess.run(["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True).stdout
    if not others:
        assert emulated.BLACKHOLE not in routes


def test_up_status_down_leaves_nothing(state_root):
    tb = EmulatedTestbed(slot=SLOT_A)
    tb.down(log=lambda m: None)
    inv_path = tb.up(clients=1, workers=2, log=lambda m: None)
    try:
        inv = load(inv_path)
        assert [h.name for h in inv.clients] == ["client0"]
        assert [h.name for h in inv.workers] == ["worker0", "worker1"]
        assert inv.is_emulated and inv.emulation.slot == SLOT_A
        assert (SLOT_A, inv_path) in [(t.slot, t.inventory) for t in state.testbeds_up()]
        names = netns_names()
        for m in ["sw0", "client0", "worker0", "worker1"]:
            assert f"rm{SLOT_A}-{m}" in names
        st = tb.status()
        assert st["complete"] and all(r["sshd"] == "up" for r in st["machines"])
        # Data interfaces exist, carry the inventory's MAC, and have no kernel IP.
        w0 = inv.host("worker0")
        out = subprocess.run(
            ["ip", "netns", "exec", f"rm{SLOT_A}-worker0", "ip", "-j", "addr", "show", "data0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        d0 = json.loads(out)[0]
        assert d0["address"] == w0.nic.mac
        assert not [a for a in d0.get("addr_info", []) if a["family"] == "inet"]
        # Each deploy root is the host's own folder.
        assert len({h.deploy_root for h in inv.hosts}) == 3 and all(h.deploy_root.is_dir() for h in inv.hosts)
        # The blackhole guards the range.
        routes = subprocess.run(["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True).stdout
        assert emulated.BLACKHOLE in routes
        # A second `up` of the same shape is a no-op; of another shape, a clear error.
        assert tb.up(clients=1, workers=2, log=lambda m: None) == inv_path
        with pytest.raises(TestbedError, match="already exists"):
            tb.up(clients=2, workers=2, log=lambda m: None)
        state_dir = tb.dir
    finally:
        tb.down(log=lambda m: None)
    assert_clean(SLOT_A, state_dir)
    assert SLOT_A not in [t.slot for t in state.testbeds_up()]
    # Idempotent.
    assert tb.down(log=lambda m: None) == []


def test_down_after_half_built_up(state_root, monkeypatch):
    tb = EmulatedTestbed(slot=SLOT_B)
    tb.down(log=lambda m: None)

    def crash(self, plan, log):
        # Start one sshd, then die as a crash would: namespaces, links, keys, one daemon.
        raise RuntimeError("simulated crash in the middle of `up`")

    real_sshd = EmulatedTestbed._sshd

    def half_sshd(self, plan, log):
        real_sshd(self, emulated.Plan(plan.slot, 1, 0), log)  # only some daemons start
        crash(self, plan, log)

    monkeypatch.setattr(EmulatedTestbed, "_sshd", half_sshd)
    with pytest.raises(RuntimeError, match="simulated crash"):
        tb.up(clients=1, workers=2, log=lambda m: None)
    monkeypatch.undo()
    assert [n for n in netns_names() if n.startswith(f"rm{SLOT_B}-")]
    assert sshd_pids_of(tb.dir)
    st = tb.status()
    assert st["up"] and not st["complete"]
    state_dir = tb.dir
    removed = tb.down(log=lambda m: None)
    assert any(r.startswith(f"netns rm{SLOT_B}-") for r in removed)
    assert_clean(SLOT_B, state_dir)


def test_down_with_no_state_but_stray_namespace(state_root):
    """A crash before the plan was written still leaves something `down` finds by name."""
    subprocess.run(["ip", "netns", "add", f"rm{SLOT_A}-worker0"], check=True)
    subprocess.run(["ip", "link", "add", f"rm{SLOT_A}br", "type", "bridge"], check=True)
    tb = EmulatedTestbed(slot=SLOT_A)
    with pytest.raises(TestbedError, match="in use on this machine.*or leftovers"):
        tb.up(clients=1, workers=1, log=lambda m: None)
    tb.down(log=lambda m: None)
    assert_clean(SLOT_A, tb.dir)


def test_cli_up_needs_root_message(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="needs root"):
        EmulatedTestbed(slot=SLOT_A).up(1, 1, log=lambda m: None)


def test_two_testbeds_up_no_command_guesses(state_root, monkeypatch, capsys):
    """With a testbed up, a demo-style `up --slot free` builds beside it, a command
    without -i refuses and lists both, -i reaches only the testbed it names, and
    `testbed down -i` takes down that one alone."""
    from tests.cli import rainmaker

    monkeypatch.delenv("RAINMAKER_INVENTORY", raising=False)
    # A state folder of its own: the suite's shared testbed (tests/conftest.py) is up in
    # the session's, and "one testbed up is the default" must not count it.
    own = state_root / "two-testbeds"
    own.mkdir(mode=0o755, exist_ok=True)
    monkeypatch.setenv("RAINMAKER_STATE_DIR", str(own))
    first, second = EmulatedTestbed(slot=SLOT_A), EmulatedTestbed(slot=SLOT_B)
    for tb in (first, second):
        tb.down(log=lambda m: None)
    try:
        inv_a = first.up(clients=1, workers=1, log=lambda m: None)
        inv_b = emulated.up_in_free_slot(1, 1, log=lambda m: None, slots=(SLOT_A, SLOT_B))
        assert inv_b == second.inventory_path and first.healthy()

        code, out, err = rainmaker(monkeypatch, capsys, "exec", "--", "echo $RAINMAKER_DEPLOY_ROOT")
        assert code == 2 and out == ""
        assert str(inv_a) in err and str(inv_b) in err and "-i FILE" in err

        code, out, _ = rainmaker(monkeypatch, capsys, "exec", "-i", str(inv_b), "--", "echo $RAINMAKER_DEPLOY_ROOT")
        assert code == 0
        assert str(second.dir) in out and str(first.dir) not in out

        code, _, _ = rainmaker(monkeypatch, capsys, "testbed", "down", "-i", str(inv_b))
        assert code == 0
        assert_clean(SLOT_B, second.dir)
        assert first.healthy()
        # One testbed up again: it is the default.
        code, out, _ = rainmaker(monkeypatch, capsys, "exec", "--", "echo $RAINMAKER_DEPLOY_ROOT")
        assert code == 0 and str(first.dir) in out
    finally:
        for tb in (first, second):
            tb.down(log=lambda m: None)
