"""A switch that restarts under the controller: detected, then a new session.

bf_switchd (or the emulator) that stops ends every BFRuntime stream and forgets every
table. The client notices (its stream ends, or a call finds the server unavailable),
and RainController.reconnect opens a new session on the same address, binds again and
brings the ports up, ready to be programmed. The emulator's BFRuntime server over
loopback stands in for bf_switchd; nothing here reaches into the server's state.
"""

from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest

from switch.bfrt.client import Client
from switch.bfrt.errors import BfrtError
from switch.control import RainController
from switch.emulator.bfrt_server import serve
from switch.emulator.rain import make_store
from tests.poll import until
from tests.unit.test_controller import inventory, two_slices, worker_reg

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_restarted_switch_is_detected_and_reprogrammed_after_reconnect():
    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    client = Client(f"127.0.0.1:{port}", "rain", client_id=0)
    try:
        ctl = RainController(client, inventory(), two_slices())
        ctl.bring_up_ports()
        ctl.program(workers=[worker_reg()])
        assert not ctl.switch_restarted and ctl.ensure_session() is None
        assert set(ctl.workers) == {0, 1}

        srv.stop(0).wait()  # the switch goes away: our stream ends
        assert until(lambda: ctl.switch_restarted, 10), "the client did not notice the switch stopping"

        srv = serve(make_store(), "127.0.0.1", port)  # it comes back, with a blank program
        took = ctl.ensure_session(timeout=20)
        assert took is not None and client.reconnects == 1 and not ctl.switch_restarted
        assert ctl.workers == {}  # what we installed died with the old switch
        ports = client.ports.all()
        assert len(ports) == 4 and all(p["$PORT_UP"] for p in ports.values())  # brought up again
        ctl.program(workers=[worker_reg()])  # the new session is bound: writes go through
        assert set(ctl.workers) == {0, 1}
        with Client(f"127.0.0.1:{port}", "rain", client_id=5, bind=False) as reader:
            assert len(reader.table("pipe.SwitchEgress.rdma_writer.build_write").entries()) == 2
    finally:
        client.close()
        srv.stop(0)


def test_a_call_to_a_switch_that_is_gone_marks_the_session_lost():
    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    client = Client(f"127.0.0.1:{port}", "rain", client_id=0, timeout=3)
    try:
        srv.stop(0).wait()
        with pytest.raises(BfrtError):
            client.table("pipe.SwitchIngress.forward.forward").entries()
        assert client.lost
    finally:
        client.close()


def test_reconnect_gives_up_with_a_clear_error_when_the_switch_stays_away():
    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    client = Client(f"127.0.0.1:{port}", "rain", client_id=0)
    srv.stop(0).wait()
    try:
        assert until(lambda: client.lost, 10)
        t0 = time.monotonic()
        with pytest.raises(BfrtError) as ei:
            client.reconnect(timeout=1.0)
        assert time.monotonic() - t0 < 10
        assert "did not answer" in ei.value.render()
    finally:
        client.close()


def test_closing_the_session_ourselves_is_not_a_restart():
    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    try:
        client = Client(f"127.0.0.1:{port}", "rain", client_id=0)
        client.close()
        time.sleep(0.2)
        assert not client.lost
    finally:
        srv.stop(0)


class _WedgedCall(grpc.RpcError):
    """A Read that gRPC core never completes, as after a GOAWAY race, until its
    channel is closed."""

    def __init__(self, closed: threading.Event):
        self.closed = closed

    def __iter__(self):
        return self

    def __next__(self):
        assert self.closed.wait(30), "the client never closed its wedged channel"
        raise self

    def code(self):
        return grpc.StatusCode.CANCELLED

    def cancel(self):
        pass  # the wedged core ignores it


def test_a_read_that_outlives_its_deadline_drops_the_session_with_a_clear_error():
    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    client = Client(f"127.0.0.1:{port}", "rain", client_id=0, timeout=0.5)
    closed = threading.Event()
    real_close = client._channel.close

    def close():
        closed.set()
        real_close()

    try:
        client._channel.close = close
        client.stub.Read = lambda request, timeout: _WedgedCall(closed)
        t0 = time.monotonic()
        with pytest.raises(BfrtError) as ei:
            client.table("pipe.SwitchIngress.forward.forward").entries()
        assert 1.0 <= time.monotonic() - t0 < 5
        assert "did not answer within 0.5 s" in ei.value.render() and client.lost
    finally:
        client.close()
        srv.stop(0)
