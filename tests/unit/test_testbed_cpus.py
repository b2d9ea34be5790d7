"""An emulated testbed confined to some of this machine's cores: `emulation.cpus` checked
and carried from `rainmaker testbed up --cpus` through the inventory to DPDK's lcores,
the testbed's cores, the per-CPU measurement locks and the calibration's record (the
confinement itself, on a real testbed, is tests/integration/test_testbed_cpus.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml

from orchestrator.errors import InventoryError
from orchestrator.experiment import agent_config, calibrate
from orchestrator.experiment.layout import PointDir
from orchestrator.experiment.plan import Point
from orchestrator.inventory import load
from orchestrator.testbed import cpu, emulated
from orchestrator.testbed.measure_lock import MeasureLockError, measuring
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


# -- DPDK's lcores ---------------------------------------------------------------------------
def test_a_namespace_hosts_lcore_floats_over_the_testbeds_cores(state_dir, monkeypatch):
    monkeypatch.setattr(cpu, "online_cpus", lambda: [0, 1, 2, 3])
    pinned = load(written(3, (2, 3)).inventory_path)
    assert agent_config.lcores(pinned, pinned.host("client0")) == "0@(2-3)"
    spread = load(written(4, (1, 4, 5)).inventory_path)
    assert agent_config.lcores(spread, spread.host("worker0")) == "0@(1,4-5)"
    free = load(written(5).inventory_path)
    assert agent_config.lcores(free, free.host("worker0")) == "0@(0-3)"  # every online CPU, not 0-1
    real = free.host("worker0").model_copy(update={"netns": None, "cores": [4, 5]})
    assert agent_config.lcores(free, real) == "4,5"  # a real host: its own cores, one lcore each


def test_nothing_runs_real_time_on_a_testbed_of_one_core(state_dir, monkeypatch):
    from orchestrator import switchd

    monkeypatch.setattr(cpu, "online_cpus", lambda: [0, 1, 2, 3])
    for cpus, rt in (((), True), ((2,), False), ((2, 3), True)):
        inv = load(written(6 + len(cpus), cpus).inventory_path)
        assert inv.realtime_fits is rt, cpus
        argv = switchd.emulator_argv(inv, "rain", "/tmp/emulator.log")
        assert ("--realtime" in argv) is rt, argv  # the switch's data plane (the clients' load: agent_config)


# -- the measurement locks, one per CPU ---------------------------------------------------------
HOLDER = """
import sys, time
from pathlib import Path
from orchestrator.testbed.measure_lock import measuring
cpus = [int(c) for c in sys.argv[2].split(",")]
with measuring(12, "rain-f0.9-r1", print, cpus=cpus, directory=Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def hold(tmp_path):
    """hold("0,1"): a process of another testbed measuring on those cores."""
    procs = []

    def start(cpus: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), cpus], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "holding"
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(5)
        p.stdout.close()


def test_testbeds_on_disjoint_cores_measure_at_once(tmp_path, hold):
    hold("0,1")
    with measuring(9, "rain-f0.3-r1", pytest.fail, cpus=[3, 2], directory=tmp_path) as waited:
        assert waited < 1
        with measuring(10, "rain-f0.5-r1", pytest.fail, cpus=[4], directory=tmp_path) as waited:
            assert waited < 1  # a third testbed, on a core of its own
    assert json.loads((tmp_path / "rainmaker-measure-cpu2.json").read_text())["cpus"] == [2, 3]


def test_testbeds_that_share_a_core_take_turns_and_the_waiter_says_for_whom(tmp_path, hold):
    holder = hold("1,2")
    said: list[str] = []
    with pytest.raises(MeasureLockError) as e:
        with measuring(9, "rain-f0.3-r1", said.append, cpus=[0, 2], wait_max_s=0.5, directory=tmp_path):
            pytest.fail("entered while another testbed measured on core 2")
    assert said and said[0].startswith("rain-f0.3-r1: waiting for this machine's cores: slot 12's testbed")
    assert f"(point rain-f0.9-r1, pid {holder.pid}) on cores 1-2" in said[0] and "for core 2 of 0,2" in said[0]
    assert e.value.message.startswith("core 2 of this machine") and "rainmaker-measure-cpu2.lock" in e.value.fix
    # the locks it had taken (core 0) went with it: another testbed on core 0 measures at once
    with measuring(10, "p", pytest.fail, cpus=[0], directory=tmp_path) as waited:
        assert waited < 1
    holder.kill()  # its load ends: the kernel frees its locks
    with measuring(9, "rain-f0.3-r1", said.append, cpus=[2, 0], wait_max_s=30, directory=tmp_path) as waited:
        assert waited < 5


def test_locks_taken_in_ascending_order_never_deadlock(tmp_path):
    # Each takes the other's cores in its own order; taken in the caller's order, two of
    # them would soon each hold a core the other waits for.
    rounds, errors = 15, []

    def measure(cpus: list[int]) -> None:
        try:
            for _ in range(rounds):
                with measuring(None, str(cpus), lambda m: None, cpus=cpus, wait_max_s=20, directory=tmp_path):
                    time.sleep(0.002)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=measure, args=(c,)) for c in ([0, 1, 2], [2, 1, 0], [1, 2])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)


def test_an_unconfined_testbed_takes_every_online_cores_lock(tmp_path, monkeypatch, hold):
    monkeypatch.setattr("orchestrator.testbed.measure_lock.online_cpus", lambda: [0, 1, 2])
    hold("2")
    with pytest.raises(MeasureLockError, match="core 2 of this machine"):
        with measuring(9, "p", lambda m: None, wait_max_s=0.3, directory=tmp_path):
            pytest.fail("an unconfined testbed measured beside one on core 2")


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


def _calibration(tmp_path, cpu_json: dict) -> dict:
    pd = PointDir(tmp_path / "calibration")
    pd.worker("worker0").mkdir(parents=True)
    (pd.worker("worker0") / "stats.json").write_text(json.dumps({"workers": [{"busy_ns": 300_000, "tasks_done": 300}]}))
    pd.client("client0").mkdir(parents=True)
    lat = {"count": 300, "mean": 2000.0, "p50": 1800.0, "p99": 5000.0}
    summary = {"totals": {"sent": 300, "max_lag_ns": 0, "late_sends": 0}, "classes": {"cal": {"latency_ns": lat}}}
    (pd.client("client0") / "summary.json").write_text(json.dumps(summary))
    pd.write_cpu(cpu_json)
    p = Point("calibrate", -1, "rain", None, None, 1, 1.0, None, 100.0, 1.0, 0.3, 3.0, "sleep", 2, {})
    return calibrate.summarise(pd, p, mean_service_us=1.0)


def test_the_calibration_says_whether_the_testbed_stayed_on_its_cores(tmp_path):
    base = {"cores": 2, "idle_cores": 0.05, "load_busy_s": 0.3, "load_wall_s": 3.0, "requests": 300}
    cal = _calibration(tmp_path / "a", {**base, "cpus": [2, 3], "outside": []})
    assert cal["cpu"]["cpus"] == [2, 3] and cal["cpu"]["confined"] is True and cal["cpu"]["strays"] == []
    assert "the testbed confined to cores 2-3 (2 of this machine's)" in calibrate.describe(cal)
    stray = {"machine": "sw0", "pid": 7, "tid": 8, "name": "dataplane", "program": "python3", "allowed": "0-3"}
    cal = _calibration(tmp_path / "b", {**base, "cpus": [2, 3], "outside": [stray]})
    assert cal["cpu"]["confined"] is False and cal["cpu"]["strays"] == ["sw0: python3 (dataplane, tid 8, on 0-3)"]
    assert "but 1 thread(s) may run outside them: sw0: python3 (dataplane, tid 8, on 0-3)" in calibrate.describe(cal)
    cal = _calibration(tmp_path / "c", base)  # not confined: nothing said of it
    assert "cpus" not in cal["cpu"] and "confined" not in calibrate.describe(cal)
