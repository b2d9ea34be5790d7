"""Reaching the emulated testbed's machines: SSH with pinned host keys, exec, files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.remote import Group, Remote, targets

pytestmark = pytest.mark.integration
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")


def test_fabric_reaches_every_machine_with_pinned_keys(testbed):
    tb, inv = testbed
    tg = targets(inv)
    assert [t.name for t in tg] == ["sw0", "client0", "worker0", "worker1"]
    with Group(tg) as g:
        res = g.run(["sh", "-c", 'echo "$(hostname) $RAINMAKER_DEPLOY_ROOT"'], timeout=20)
    for t in tg:
        name, root = res[t.name].stdout.split()
        assert name == t.name  # each machine its own hostname (UTS namespace)
        assert root == str(t.deploy_root)


def test_each_machine_is_in_its_own_namespace(testbed):
    tb, inv = testbed
    with Group(targets(inv)) as g:
        res = g.run(["readlink", "/proc/self/ns/net"], timeout=20)
    assert len({r.stdout.strip() for r in res.values()}) == 4
    assert os.readlink("/proc/self/ns/net") not in {r.stdout.strip() for r in res.values()}


def test_a_changed_host_key_is_refused(testbed, tmp_path):
    tb, inv = testbed
    w0 = targets(inv, hosts=["worker0"])[0]
    # known_hosts that pins worker1's key for worker0's address: a man in the middle.
    lines = Path(inv.ssh.known_hosts).read_text().splitlines()
    w1_key = next(ln for ln in lines if ln.startswith(inv.host("worker1").mgmt.address + " ")).split(" ", 1)[1]
    kh = tmp_path / "kh"
    kh.write_text(f"{w0.address} {w1_key}\n")
    from dataclasses import replace

    with Remote(replace(w0, known_hosts=kh)) as r:
        res = r.run(["true"], timeout=10, check=False)
    assert not res.ok and "host key" in (res.error or "").lower()


def test_an_unknown_host_is_refused(testbed, tmp_path):
    tb, inv = testbed
    w0 = targets(inv, hosts=["worker0"])[0]
    kh = tmp_path / "empty"
    kh.write_text("")
    from dataclasses import replace

    with Remote(replace(w0, known_hosts=kh)) as r:
        res = r.run(["true"], timeout=10, check=False)
    assert not res.ok and "unknown" in (res.error or "").lower()


def test_files_go_to_the_hosts_own_deploy_root(testbed, tmp_path):
    tb, inv = testbed
    src = tmp_path / "hello.txt"
    src.write_text("hi\n")
    with Group(targets(inv, role="worker")) as g:
        g.put(src, "hello.txt")
    for h in inv.workers:
        assert (h.deploy_root / "hello.txt").read_text() == "hi\n"
    assert not (inv.host("client0").deploy_root / "hello.txt").exists()


def test_cli_exec_across_hosts(testbed):
    tb, inv = testbed
    r = subprocess.run(
        [RAINMAKER, "exec", "-i", str(tb.inventory_path), "--", "hostname"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    for name in ("sw0", "client0", "worker0", "worker1"):
        assert name in r.stdout
    assert "4/4 hosts ok" in r.stdout
    r = subprocess.run(
        [RAINMAKER, "exec", "-i", str(tb.inventory_path), "--role", "worker", "--", "sh", "-c", "exit 3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "exit 3" in r.stdout and "0/2 hosts ok" in r.stdout


def test_cli_bad_inventory_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nswitch: {name: s, kind: tofino}\nhosts: []\n")
    r = subprocess.run([RAINMAKER, "inventory", "check", str(bad)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "switch.mgmt" in r.stderr and "fix:" in r.stderr
