"""A switch is restarted only when it is known to be down (issue 11): switchd.liveness
tells up, down and unknown apart without a BFRuntime session, and the run's
switch_session restarts only on down, logging why. The emulator's BFRuntime server on
loopback stands in for the switch; the switch machine's SSH is a fake."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from orchestrator import switchd
from orchestrator.errors import HostResult, RemoteError
from orchestrator.experiment import switch_side
from orchestrator.inventory import Inventory
from switch.bfrt.client import Client
from switch.emulator.bfrt_server import serve
from switch.emulator.rain import make_store
from tests.unit.test_controller import inventory

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inv(port: int) -> Inventory:
    d = inventory().model_dump(mode="json")
    d["switch"]["bfrt"] = f"127.0.0.1:{port}"
    return Inventory.model_validate(d)


class FakeRemote:
    """The switch machine over SSH: whether the emulator's process runs, or no answer."""

    running: bool | None = True  # None: SSH fails

    def __init__(self, target, **kw):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def find(self, name):
        if FakeRemote.running is None:
            raise RemoteError(HostResult("sw0", "find switch", None, error="unreachable: connect timed out"))
        return SimpleNamespace(pgid=4242) if FakeRemote.running else None


@pytest.fixture(autouse=True)
def fake_ssh(monkeypatch):
    monkeypatch.setattr(switchd, "Remote", FakeRemote)
    FakeRemote.running = True


def test_down_only_when_the_process_is_gone_or_the_port_refuses():
    port = free_port()
    FakeRemote.running = False
    assert switchd.liveness(_inv(port)) == (switchd.DOWN, "the emulator's process is not running on sw0")
    FakeRemote.running = True
    state, why = switchd.liveness(_inv(port))  # nothing listens
    assert state == switchd.DOWN and "refuses connections" in why


def test_unknown_when_ssh_fails_or_the_server_does_not_answer():
    FakeRemote.running = None
    state, why = switchd.liveness(_inv(free_port()))
    assert state == switchd.UNKNOWN and "connect timed out" in why
    FakeRemote.running = True
    with socket.socket() as mute:  # accepts connections (the kernel does) and never speaks: a frozen server
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        state, why = switchd.liveness(_inv(mute.getsockname()[1]), timeout=0.5)
    assert state == switchd.UNKNOWN and "did not answer within 0.5 s" in why


def test_up_although_a_reader_holds_the_id_the_cli_s_readers_used():
    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    try:
        with Client(f"127.0.0.1:{port}", "rain", client_id=7, bind=False):
            assert switchd.liveness(_inv(port))[0] == switchd.UP
    finally:
        srv.stop(0)


@pytest.mark.parametrize("state", [switchd.UNKNOWN, switchd.UP, switchd.DOWN])
def test_a_run_restarts_the_switch_only_when_it_is_down(monkeypatch, state):
    inv = _inv(free_port())
    started, logs = [], []
    monkeypatch.setattr(switchd, "liveness", lambda inv: (state, "why: because"))
    monkeypatch.setattr(switchd, "start", lambda inv, program, **kw: started.append((program, kw.get("restart"))))
    monkeypatch.setattr(switchd, "connect", lambda inv, **kw: ("session", kw["client_id"], kw["bind"]))
    assert switch_side.switch_session(inv, logs.append) == ("session", 1, True)
    if state == switchd.DOWN:
        assert started == [("rain", True)]
        assert logs == ["switch sw0 is down (why: because): (re)starting its software"]
    else:
        assert started == []
        assert all("(re)starting" not in m for m in logs)
