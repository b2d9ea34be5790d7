"""`rainmaker switch start | status | tables | registers | stop` on the emulated testbed:
the emulator runs on the switch machine over SSH, the controller programs it through
BFRuntime, and a token and a task sent on the data links meet in it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hosts import proto
from orchestrator import switchd
from orchestrator.switchd import SwitchdError
from switch.bfrt.client import Client
from switch.control import RainController
from tests.netpeer import RawPeer, Side, frame, parse_udp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")


def cli(inv_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAINMAKER_INVENTORY": str(inv_path)}
    return subprocess.run([RAINMAKER, "switch", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def inv_path(testbed):
    tb, inv = testbed
    path = Path(inv.emulation.state_dir) / "inventory.yaml"
    yield path
    switchd.stop(inv)  # whatever a test left running


def test_start_status_read_stop(testbed, inv_path):
    tb, inv = testbed
    cli(inv_path, "stop")  # other tests share this testbed and may have left it running
    r = cli(inv_path, "start")
    assert r.returncode == 0, r.stderr
    assert "emulator ready" in r.stdout and f"ports: {len(inv.switch.ports)} of {len(inv.switch.ports)} up" in r.stdout

    again = cli(inv_path, "start")
    assert again.returncode == 1 and "already runs" in again.stderr

    st = switchd.status(inv)
    assert st.running and st.answers and st.program == "rain" and all(p["up"] for p in st.ports.values())

    with Client(inv.switch.bfrt, "rain") as c:
        RainController(c, inv).program()
    tables = cli(inv_path, "tables")
    assert tables.returncode == 0 and inv.hosts[0].nic.ip in tables.stdout
    regs = cli(inv_path, "registers")
    assert regs.returncode == 0 and "queue of slice 0" in regs.stdout

    r = cli(inv_path, "stop")
    assert r.returncode == 0 and "terminated" in r.stdout
    r = cli(inv_path, "status")
    assert r.returncode == 1 and "not running" in r.stdout
    assert "not running" in cli(inv_path, "stop").stdout


def test_a_failed_start_leaves_nothing_running(testbed, inv_path):
    tb, inv = testbed
    # a program the switch does not have is refused before anything starts
    r = cli(inv_path, "start", "--program", "nosuch")
    assert r.returncode == 1 and "no P4 program 'nosuch'" in r.stderr and "rain" in r.stderr
    assert not switchd.status(inv).running
    # an emulator that exits as it starts (an option it refuses) is reported with its log
    with pytest.raises(SwitchdError, match="did not come up") as e:
        switchd.start(inv, "rain", emulator_args=["--link-delay-us", "-1"])
    assert "link-delay" in e.value.render()
    assert not switchd.status(inv).running


def test_a_token_and_a_task_meet_in_the_programmed_switch(testbed, inv_path):
    tb, inv = testbed
    switchd.start(inv)
    with Client(inv.switch.bfrt, "rain") as c:
        ctl = RainController(c, inv)
        from switch.control import WorkerRegistration

        w = inv.workers[0]
        ctl.program([WorkerRegistration(w.name, (0,), w.nic.mac, w.nic.ip, {0: 0})])
        c0 = inv.clients[0]
        svc = Side("", "", inv.switch.service_mac, inv.switch.service_ip)
        cs = Side(c0.netns, "data0", c0.nic.mac, c0.nic.ip)
        ws = Side(w.netns, "data0", w.nic.mac, w.nic.ip)
        cp, wp = RawPeer(cs), RawPeer(ws)
        port = proto.UDP_PORT
        try:
            wp.send(frame(ws, svc, proto.Header(kind=proto.Kind.TOKEN, worker_id=0, slice=0).pack(), port, port))
            cp.send(
                frame(
                    cs,
                    svc,
                    proto.Header(kind=proto.Kind.TASK, client_id=0x0001, request_id=7, data=b"abcdefgh").pack(),
                    port,
                    port,
                )
            )
            got = wp.recv_until(lambda f: (u := parse_udp(f)) is not None and u[1] == port, 2.0)
        finally:
            cp.close()
            wp.close()
        heads = [proto.Header.unpack(parse_udp(f)[2][: proto.HDR_LEN]) for _, f in got]
        assert [(h.kind, h.worker_id, h.request_id, h.data) for h in heads] == [
            (proto.Kind.DISPATCH, 0, 7, b"abcdefgh")
        ]
        snap = ctl.snapshot()
        assert snap["counters"]["pipe.SwitchIngress.events.events"]["EV_DISPATCH_DIRECT"]["packets"] == 1
        ctl.reset()
        assert ctl.snapshot()["counters"]["pipe.SwitchIngress.events.events"]["EV_DISPATCH_DIRECT"]["packets"] == 0
