"""An emulated testbed confined to some of this machine's cores: `emulation.cpus` checked
and carried from `rainmaker testbed up --cpus` into the inventory, and the threads that
stray beyond them found (the confinement itself, on a real testbed, is
tests/integration/test_testbed_cpus.py)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import yaml

from orchestrator.errors import InventoryError
from orchestrator.inventory import load
from orchestrator.testbed import cpu, emulated
from tests.cli import rainmaker


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAINMAKER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RAINMAKER_INVENTORY", raising=False)
    return tmp_path / "state"


def written(slot: int, cpus: tuple[int, ...] = ()) -> emulated.EmulatedTestbed:
    """A testbed's state folder and inventory as `up` writes them (no namespaces)."""
    tb = emulated.EmulatedTestbed(slot)
    tb.dir.mkdir(parents=True)
    tb.plan_path.write_text(json.dumps({"clients": 1, "workers": 1, "cpus": list(cpus), "complete": True}))
    tb._write_inventory(emulated.Plan(slot, 1, 1, False, cpus))
    return tb


# -- the inventory -------------------------------------------------------------------------
def test_the_inventory_carries_the_cores_and_rejects_bad_ones(state_dir):
    tb = written(3, (2, 3))
    inv = load(tb.inventory_path)
    assert inv.emulation.cpus == [2, 3] and cpu.confined_to(inv) == [2, 3] and cpu.testbed_cores(inv) == 2
    data = yaml.safe_load(tb.inventory_path.read_text())
    for cpus, said, fix in (
        ([2, 2], "CPU 2 is listed more than once", "list each core once"),
        ([-1], "-1 is not a CPU number (0..1023)", "/sys/devices/system/cpu/online"),
        ([1024], "1024 is not a CPU number", "e.g. cpus: [2, 3]"),
    ):
        data["emulation"]["cpus"] = cpus
        tb.inventory_path.write_text(yaml.safe_dump(data))
        with pytest.raises(InventoryError) as e:
            load(tb.inventory_path)
        assert "emulation.cpus" in str(e.value) and said in str(e.value) and fix in str(e.value)


def test_an_unconfined_testbed_has_every_core(state_dir, monkeypatch):
    inv = load(written(4).inventory_path)
    assert inv.emulation.cpus == [] and cpu.confined_to(inv) == []
    assert "cpus" not in yaml.safe_load(written(5).inventory_path.read_text())["emulation"]
    monkeypatch.setattr(cpu, "online_cpus", lambda: [0, 1, 2, 3])
    assert cpu.testbed_cpus(inv) == [0, 1, 2, 3]
    assert cpu.testbed_cores(inv) == cpu.cores()  # as before: the cores the runner may run on


# -- `up` and the CLI ----------------------------------------------------------------------
def test_up_refuses_cores_this_machine_does_not_have_online(state_dir, monkeypatch):
    monkeypatch.setattr(emulated, "online_cpus", lambda: [0, 1, 2, 3])
    tb = emulated.EmulatedTestbed(7)
    with pytest.raises(emulated.TestbedError) as e:
        tb.up(1, 1, cpus=[3, 4, 5], log=lambda m: None)
    assert "no CPU 4-5 online (its online CPUs: 0-3)" in e.value.message and "--cpus 2-3" in e.value.fix
    with pytest.raises(emulated.TestbedError, match="CPU 1 is named twice"):
        tb.up(1, 1, cpus=[1, 1], log=lambda m: None)
    with pytest.raises(emulated.TestbedError, match="-2 is not a CPU number"):
        emulated.up_in_free_slot(1, 1, cpus=[-2], log=lambda m: None)
    assert not tb.dir.exists()  # refused before anything was made


def test_up_of_a_testbed_up_on_other_cores_says_so(state_dir, monkeypatch):
    tb = written(8, (1,))
    monkeypatch.setattr(emulated.os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulated.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(emulated.EmulatedTestbed, "healthy", lambda self, plan=None: True)
    monkeypatch.setattr(emulated, "online_cpus", lambda: [0, 1, 2, 3])
    assert tb.up(1, 1, cpus=[1], log=lambda m: None) == tb.inventory_path  # the same: it stays
    with pytest.raises(emulated.TestbedError) as e:
        tb.up(1, 1, cpus=[2, 3], log=lambda m: None)
    assert "up on cores 1, not cores 2-3" in e.value.message and "inherited its cores" in e.value.message
    assert "--cpus 2-3" in e.value.fix and "testbed down --slot 8" in e.value.fix
    with pytest.raises(emulated.TestbedError, match="up on cores 1, not every core"):
        tb.up(1, 1, log=lambda m: None)
    with pytest.raises(
        emulated.TestbedError, match=r"already exists in slot 8 \(1 client\(s\), 1 worker\(s\), on cores 1\)"
    ):
        tb.up(2, 1, cpus=[1], log=lambda m: None)


def test_cpu_lists_parse_and_print_as_the_kernel_writes_them():
    assert cpu.parse_cpus("0-3") == [0, 1, 2, 3]
    assert cpu.parse_cpus("0,2,4-5\n") == [0, 2, 4, 5]
    assert cpu.parse_cpus("3,1,1-2") == [1, 2, 3]
    for bad, said in (("", "''"), ("0-", "'0-'"), ("a", "'a'"), ("1,,2", "''"), ("5-2", "runs backwards")):
        with pytest.raises(ValueError, match=said):
            cpu.parse_cpus(bad)
    assert cpu.format_cpus([0, 1, 2, 3]) == "0-3" and cpu.format_cpus([5, 4, 2, 0]) == "0,2,4-5"
    assert cpu.format_cpus([7]) == "7" and cpu.parse_cpus(cpu.format_cpus([0, 3, 4, 9])) == [0, 3, 4, 9]
    assert cpu.online_cpus() == cpu.parse_cpus(cpu.ONLINE.read_text())


def test_testbed_up_takes_cpus_and_status_shows_them(state_dir, monkeypatch, capsys):
    seen = {}

    def up(self, clients, workers, *, link_delay_us=0.0, bastion=False, cpus=None, log=print):
        seen["cpus"] = cpus
        return self.inventory_path

    monkeypatch.setattr(emulated.EmulatedTestbed, "up", up)
    code, _, _ = rainmaker(monkeypatch, capsys, "testbed", "up", "--slot", "6", "--cpus", "0,2-3")
    assert code == 0 and seen["cpus"] == [0, 2, 3]
    seen.clear()
    code, _, _ = rainmaker(monkeypatch, capsys, "testbed", "up", "--slot", "6")
    assert code == 0 and seen["cpus"] is None  # not given: every core
    code, _, err = rainmaker(monkeypatch, capsys, "testbed", "up", "--slot", "6", "--cpus", "2-")
    assert code == 2 and "'2-'" in err and "like 0-3 or 0,2,4-5" in err
    written(6, (1,))
    monkeypatch.setattr(emulated, "_ssh_banner", lambda ip: True)
    monkeypatch.setattr(emulated, "_pid_alive", lambda pid: True)
    code, out, _ = rainmaker(monkeypatch, capsys, "testbed", "status", "--slot", "6")
    assert "cpus: 1 (every process of the testbed runs on these 1 core(s) only)" in out
    code, out, _ = rainmaker(monkeypatch, capsys, "testbed", "status", "--slot", "6", "--json")
    assert json.loads(out)["cpus"] == [1]


# -- threads outside the cores, and what the calibration says of them ---------------------------
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin a thread to one")
def test_outside_lists_the_threads_allowed_beyond_the_cores(monkeypatch):
    mine = sorted(os.sched_getaffinity(0))
    pinned_to, tid, done = mine[-1], [], threading.Event()

    def pinned() -> None:
        os.sched_setaffinity(0, {pinned_to})  # this thread only
        tid.append(threading.get_native_id())
        done.wait(10)

    t = threading.Thread(target=pinned, name="pinned")
    t.start()
    try:
        while not tid:
            time.sleep(0.01)
        monkeypatch.setattr(cpu, "namespace_pids", lambda netns: [os.getpid()])
        strays = cpu.outside({"client0": "rm9-client0"}, [pinned_to])
        assert cpu.allowed_cpus(os.getpid(), tid[0]) == [pinned_to]
        assert tid[0] not in {s.tid for s in strays} and os.getpid() in {s.tid for s in strays}
        main = next(s for s in strays if s.tid == os.getpid())
        assert main.machine == "client0" and main.allowed == cpu.format_cpus(mine)
        assert cpu.outside({"client0": "rm9-client0"}, mine) == []
    finally:
        done.set()
        t.join()
