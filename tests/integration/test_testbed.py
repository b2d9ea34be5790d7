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
    tb = EmulatedTestbed(slot=10)
    tb.down(log=lambda m: None)
    before = state.current_inventory()  # another testbed may be the default already
    inv_path = tb.up(clients=1, workers=2, log=lambda m: None)
    try:
        inv = load(inv_path)
        assert [h.name for h in inv.clients] == ["client0"]
        assert [h.name for h in inv.workers] == ["worker0", "worker1"]
        assert inv.is_emulated and inv.emulation.slot == 10
        assert state.current_inventory() == (before or inv_path)
        names = netns_names()
        for m in ["sw0", "client0", "worker0", "worker1"]:
            assert f"rm10-{m}" in names
        st = tb.status()
        assert st["complete"] and all(r["sshd"] == "up" for r in st["machines"])
        # Data interfaces exist, carry the inventory's MAC, and have no kernel IP.
        w0 = inv.host("worker0")
        out = subprocess.run(
            ["ip", "netns", "exec", "rm10-worker0", "ip", "-j", "addr", "show", "data0"],
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
    assert_clean(10, state_dir)
    assert state.current_inventory() == before
    # Idempotent.
    assert tb.down(log=lambda m: None) == []


def test_down_after_half_built_up(state_root, monkeypatch):
    tb = EmulatedTestbed(slot=11)
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
    assert [n for n in netns_names() if n.startswith("rm11-")]
    assert sshd_pids_of(tb.dir)
    st = tb.status()
    assert st["up"] and not st["complete"]
    state_dir = tb.dir
    removed = tb.down(log=lambda m: None)
    assert any(r.startswith("netns rm11-") for r in removed)
    assert_clean(11, state_dir)


def test_down_with_no_state_but_stray_namespace(state_root):
    """A crash before the plan was written still leaves something `down` finds by name."""
    subprocess.run(["ip", "netns", "add", "rm12-worker0"], check=True)
    subprocess.run(["ip", "link", "add", "rm12br", "type", "bridge"], check=True)
    tb = EmulatedTestbed(slot=12)
    with pytest.raises(TestbedError, match="leftovers"):
        tb.up(clients=1, workers=1, log=lambda m: None)
    tb.down(log=lambda m: None)
    assert_clean(12, tb.dir)


def test_cli_up_needs_root_message(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="needs root"):
        EmulatedTestbed(slot=13).up(1, 1, log=lambda m: None)
