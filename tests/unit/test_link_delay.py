"""A slower emulated testbed on purpose: the link delay, from `rainmaker testbed up
--link-delay-us` through the inventory (emulation.link_delay_us) to the emulator's
command line and the frames it holds (the frames' timing on real ports is
tests/switch/test_link_delay.py)."""

from __future__ import annotations

import json
import select
import time

import pytest
import yaml

from orchestrator import switchd
from orchestrator.errors import InventoryError
from orchestrator.inventory import load
from orchestrator.inventory.model import LINK_DELAY_US_MAX
from orchestrator.testbed import emulated
from switch.emulator import __main__ as emulator_main
from switch.emulator import ports as emulator_ports
from switch.emulator.ports import Alarm, PortError, PortSet
from switch.emulator.rain import make_store
from tests.cli import rainmaker


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAINMAKER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RAINMAKER_INVENTORY", raising=False)
    return tmp_path / "state"


def written(slot: int, link_delay_us: float = 0.0) -> emulated.EmulatedTestbed:
    """A testbed's state folder and inventory as `up` writes them (no namespaces)."""
    tb = emulated.EmulatedTestbed(slot)
    tb.dir.mkdir(parents=True)
    tb.plan_path.write_text(json.dumps({"clients": 1, "workers": 1, "complete": True}))
    tb._write_inventory(emulated.Plan(slot, 1, 1), link_delay_us)
    return tb


def test_the_inventory_carries_the_delay_to_the_emulator(state_dir):
    tb = written(3, 2000.0)
    inv = load(tb.inventory_path)
    assert inv.emulation.link_delay_us == 2000.0 and tb.link_delay_us() == 2000.0
    argv = switchd.emulator_argv(inv, "rain", "/x/emulator.log")
    assert argv[argv.index("--link-delay-us") + 1] == "2000.0"
    args = emulator_main.parse_args(argv[argv.index("--program") :])
    assert args.link_delay_us == 2000.0


def test_no_delay_writes_nothing_and_passes_nothing(state_dir):
    tb = written(4)
    assert "link_delay_us" not in tb.inventory_path.read_text()
    inv = load(tb.inventory_path)
    assert inv.emulation.link_delay_us == 0.0 and tb.link_delay_us() == 0.0
    assert "--link-delay-us" not in switchd.emulator_argv(inv, "rain", "/x/emulator.log")
    assert emulator_main.parse_args([]).link_delay_us == 0.0


@pytest.mark.parametrize("bad", [-1, 2e6, ".nan"])
def test_the_inventory_refuses_a_delay_out_of_range(state_dir, bad):
    tb = written(5)
    data = yaml.safe_load(tb.inventory_path.read_text())
    data["emulation"]["link_delay_us"] = bad
    tb.inventory_path.write_text(yaml.safe_dump(data).replace("'.nan'", ".nan"))
    with pytest.raises(InventoryError) as ei:
        load(tb.inventory_path)
    text = ei.value.render()
    assert "emulation.link_delay_us" in text and "is not 0..1000000" in text and "e.g. 2000 for 2 ms" in text


@pytest.mark.parametrize("bad", ["-1", "1000001", "nan", "inf", "two"])
def test_the_emulator_refuses_a_delay_out_of_range(capsys, bad):
    with pytest.raises(SystemExit) as ei:
        emulator_main.parse_args(["--link-delay-us", bad])
    assert ei.value.code == 2
    assert "--link-delay-us" in capsys.readouterr().err
    with pytest.raises(PortError, match="not 0..1000000"):
        PortSet(make_store(), [], link_delay_us=float(bad) if bad != "two" else -1.0)


def test_the_bounds_agree():
    assert LINK_DELAY_US_MAX == emulator_ports.LINK_DELAY_US_MAX


class _Port:
    """A RingPort's send, recorded (False: the TX ring is full)."""

    def __init__(self, room: int = 100):
        self.sent: list[bytes] = []
        self.room = room

    def send(self, data) -> bool:
        if len(self.sent) >= self.room:
            return False
        self.sent.append(bytes(data))
        return True


def test_release_sends_what_is_due_in_order_and_counts_a_full_ring():
    ports = PortSet(make_store(), [], link_delay_us=1000.0)
    assert ports._emit == ports.emit_later and ports.link_delay == 0.001
    a, b = _Port(), _Port(room=0)
    ports.held.extend([(1.0, a, b"1"), (2.0, a, b"2"), (2.0, b, b"3"), (3.0, a, b"4")])
    assert ports.release(0.5) == 0 and len(ports.held) == 4
    assert ports.release(2.0) == 3
    assert a.sent == [b"1", b"2"] and ports.drops.counts["tx_ring_full"] == 1
    assert [f for _, _, f in ports.held] == [b"4"]
    ports.emit_later(8, b"x")  # no such port: dropped and counted now, nothing held
    assert ports.drops.counts["tx_unknown_port"] == 1 and len(ports.held) == 1
    # a frame for an enabled port is held as a copy: its RX ring slot is reused at once
    ports.store.ports.add(7, "BF_SPEED_100G", "BF_FEC_TYP_NONE", enable=True)
    ports.ports[7], ports._cells[7] = a, ports.store.ports.stat_cells(7)
    slot = bytearray(b"frame")
    ports.emit_later(7, memoryview(slot))
    slot[:] = b"XXXXX"
    assert ports.held[-1][1:] == (a, b"frame")


def test_the_alarm_wakes_epoll_at_its_deadline_and_is_quiet_once_read():
    alarm = Alarm.open()
    assert alarm is not None, "Linux has timerfd: the loop must not fall back to whole milliseconds"
    ep = select.epoll()
    try:
        ep.register(alarm.fd, select.EPOLLIN)
        deadline = time.monotonic() + 0.0003
        alarm.arm(deadline)
        events = ep.poll(5.0)  # the alarm, not this timeout, ends the wait
        assert time.monotonic() >= deadline and [fd for fd, _ in events] == [alarm.fd]
        alarm.clear()
        assert alarm.armed is None and ep.poll(0) == [], "read, it is reported no more"
        alarm.arm(time.monotonic() + 60)
        assert ep.poll(0.01) == [], "a later deadline does not fire early"
        alarm.arm(time.monotonic() - 1.0)  # re-armed to a past deadline: fires at once
        assert [fd for fd, _ in ep.poll(5.0)] == [alarm.fd]
    finally:
        ep.close()
        alarm.close()


def test_testbed_up_takes_a_delay_and_status_shows_it(state_dir, monkeypatch, capsys):
    seen = {}

    def up(self, clients, workers, *, link_delay_us=0.0, bastion=False, log=print):
        seen["delay"] = link_delay_us
        return self.inventory_path

    monkeypatch.setattr(emulated.EmulatedTestbed, "up", up)
    code, out, _ = rainmaker(monkeypatch, capsys, "testbed", "up", "--slot", "6", "--link-delay-us", "2500")
    assert code == 0 and seen["delay"] == 2500.0
    code, _, err = rainmaker(monkeypatch, capsys, "testbed", "up", "--slot", "6", "--link-delay-us", "2e6")
    assert code == 2 and "--link-delay-us" in err
    written(6, 2500.0)
    monkeypatch.setattr(emulated, "_ssh_banner", lambda ip: True)
    monkeypatch.setattr(emulated, "_pid_alive", lambda pid: True)
    code, out, _ = rainmaker(monkeypatch, capsys, "testbed", "status", "--slot", "6")
    assert "link delay: 2500 us" in out
    code, out, _ = rainmaker(monkeypatch, capsys, "testbed", "status", "--slot", "6", "--json")
    assert json.loads(out)["link_delay_us"] == 2500.0


def test_up_refuses_a_delay_out_of_range(state_dir):
    with pytest.raises(emulated.TestbedError, match="not 0..1000000"):
        emulated.EmulatedTestbed(7).up(1, 1, link_delay_us=-5, log=lambda m: None)


def test_up_on_a_testbed_that_is_up_rewrites_only_its_delay(state_dir, monkeypatch):
    tb = written(8)
    monkeypatch.setattr(emulated.os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulated.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(emulated.EmulatedTestbed, "healthy", lambda self, plan=None: True)
    said = []
    assert tb.up(1, 1, link_delay_us=1500, log=said.append) == tb.inventory_path
    assert load(tb.inventory_path).emulation.link_delay_us == 1500.0
    assert any("switch start --restart" in m for m in said)
    said.clear()
    tb.up(1, 1, link_delay_us=1500, log=said.append)  # the same: nothing to say, nothing written
    assert not any("link delay" in m for m in said)
    tb.up(1, 1, log=said.append)
    assert tb.link_delay_us() == 0.0 and "link_delay_us" not in tb.inventory_path.read_text()
