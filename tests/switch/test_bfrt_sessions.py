"""Many BFRuntime clients at once, and clients that die, freeze or stop reading.

The emulator's server holds no thread for an idle session, so 64 of them (some idle,
some frozen by SIGSTOP, some that never read their stream) leave it answering a fresh
client and `rainmaker switch status`; readers take a free client id instead of failing
on a held one; a frozen or non-reading client's session ends, and frees its id, once
the server notices (keepalive pings, a full outbox); past the session limit a new
stream is refused RESOURCE_EXHAUSTED, which the client reports with a fix.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from orchestrator import switchd
from orchestrator.inventory import load
from switch.bfrt import bfruntime_pb2 as pb
from switch.bfrt import bfruntime_pb2_grpc as pb_grpc
from switch.bfrt.client import Client
from switch.bfrt.errors import BfrtConnectError
from switch.control import RainController, Settings
from switch.emulator.bfrt_server import BfrtServicer, Limits, serve
from switch.emulator.rain import make_store
from tests.cli import rainmaker
from tests.poll import until
from tests.unit.test_cli_switch import write_inventory

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
# Short enough that a frozen client's session ends within the test.
FAST = Limits(keepalive_s=1.0, keepalive_timeout_s=0.5, send_timeout_s=0.5, outbox=16)

# A process holding one subscribed session per id given, then waiting (to be frozen).
HOLDER = """
import sys, queue, grpc
from switch.bfrt import bfruntime_pb2 as pb, bfruntime_pb2_grpc as pb_grpc
address, ids = sys.argv[1], [int(x) for x in sys.argv[2:]]
held = []
for cid in ids:
    channel = grpc.insecure_channel(address)
    out = queue.Queue()
    replies = pb_grpc.BfRuntimeStub(channel).StreamChannel(iter(out.get, None))
    out.put(pb.StreamMessageRequest(client_id=cid, subscribe=pb.Subscribe(device_id=0)))
    assert next(replies).subscribe.status.code == 0, cid
    held.append((channel, out, replies))
print("held", flush=True)
sys.stdin.read()
"""


class RawSession:
    """A StreamChannel subscribed as `client_id`, bare (no bf-rt.json, no binding).
    It reads its stream on a thread, or (`reads=False`) never after the subscribe reply."""

    def __init__(self, address: str, client_id: int, *, reads: bool = True):
        # A small flow-control window, so that unread messages back up at the server soon.
        self.channel = grpc.insecure_channel(
            address, options=[("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
        )
        self.out: queue.Queue = queue.Queue()
        self.replies = pb_grpc.BfRuntimeStub(self.channel).StreamChannel(iter(self.out.get, None))
        self.out.put(pb.StreamMessageRequest(client_id=client_id, subscribe=pb.Subscribe(device_id=0)))
        self.ok = next(self.replies).subscribe.status.code == 0
        self.heard = 0  # messages read after the subscribe reply
        self.reader = threading.Thread(target=self._read, daemon=True) if reads else None
        if self.reader:
            self.reader.start()

    def _read(self) -> None:
        try:
            for _ in self.replies:
                self.heard += 1
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self.out.put(None)
        if self.reader:
            self.reader.join(5)
        self.replies.cancel()
        self.channel.close()


def subscribes(address: str, client_id: int) -> bool:
    """Whether a new session as `client_id` is accepted now."""
    s = RawSession(address, client_id, reads=False)
    s.close()
    return s.ok


@pytest.fixture
def switch():
    srv = serve(make_store(), "127.0.0.1", 0, limits=FAST)
    yield srv
    srv.stop(None).wait(5)


def test_64_clients_idle_frozen_and_unread_leave_the_switch_answering(switch, tmp_path, monkeypatch, capsys):
    address = f"127.0.0.1:{switch.port}"
    inv_path = write_inventory(tmp_path, address)
    inv = load(inv_path)
    with Client(address, "rain", client_id=0) as c:
        RainController(c, inv, Settings()).bring_up_ports()

    # 16 sessions in a process that is then frozen; 8 that never read, one of them
    # holding the readers' id 7 (a hung reader); 40 idle ones that read.
    frozen_ids = list(range(100, 116))
    unread_ids = [switchd.READER_CLIENT_ID, *range(200, 207)]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, address, *map(str, frozen_ids)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    unread: list[RawSession] = []
    idle: list[RawSession] = []
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        unread = [RawSession(address, cid, reads=False) for cid in unread_ids]
        idle = [RawSession(address, cid) for cid in range(300, 340)]
        assert all(s.ok for s in unread + idle) and len(frozen_ids) + len(unread) + len(idle) == 64

        # A fresh client binds, writes and reads at once.
        t0 = time.monotonic()
        with Client(address, "rain", client_id=1) as fresh:
            fwd = fresh.table("pipe.SwitchIngress.forward.forward")
            before = fwd.usage()
            fresh.register("balance", signed=True).write(3, -2)
            assert fresh.register("balance", signed=True).read(3) == [-2]
        assert time.monotonic() - t0 < 5 and before == 0

        # Readers do not wait for the hung holder of id 7: each takes a free id.
        readers: list = []
        threads = [threading.Thread(target=lambda: readers.append(switchd.connect(inv))) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        try:
            ids = sorted(r.client_id for r in readers)
            assert len(ids) == 5 and len(set(ids)) == 5 and switchd.READER_CLIENT_ID not in ids
        finally:
            for r in readers:
                r.close()
        code, out, _ = rainmaker(monkeypatch, capsys, "switch", "status", "-i", str(inv_path))
        assert code == 0 and "program rain" in out and "2 of 2 up" in out, out

        # Messages pile up for the sessions that never read: the server ends them
        # (their ids are free again); the idle sessions that read are untouched.
        stub = pb_grpc.BfRuntimeStub(idle[0].channel)
        end = pb.SetForwardingPipelineConfigRequest(action=pb.SetForwardingPipelineConfigRequest.WARM_INIT_END)
        freed = lambda: all(subscribes(address, cid) for cid in unread_ids)  # noqa: E731
        for _ in range(20):
            for _ in range(50):
                stub.SetForwardingPipelineConfig(end)
            if freed():
                break
        assert freed(), "sessions that never read were not ended"
        sent = until(lambda: all(s.heard == idle[0].heard for s in idle), 5) and idle[0].heard
        assert sent >= 50 and all(s.reader.is_alive() for s in idle)  # each heard every message

        with switchd.connect(inv) as reader:  # id 7 is free again
            assert reader.client_id == switchd.READER_CLIENT_ID

        # The frozen process answers no keepalive ping: its sessions end, its ids are free.
        assert until(lambda: subscribes(address, frozen_ids[0]), 10), "the frozen sessions did not end"
        assert all(subscribes(address, cid) for cid in frozen_ids)
    finally:
        for s in unread:
            s.close()
        for c in idle:
            c.close()
        holder.kill()
        holder.wait(10)


def test_beyond_the_session_limit_a_new_stream_is_refused_resource_exhausted():
    srv = serve(make_store(), "127.0.0.1", 0, limits=Limits(sessions=3))
    address = f"127.0.0.1:{srv.port}"
    held = [Client(address, client_id=cid, bind=False) for cid in range(3)]
    try:
        channel = grpc.insecure_channel(address)
        replies = pb_grpc.BfRuntimeStub(channel).StreamChannel(iter([]))
        with pytest.raises(grpc.RpcError) as e:
            next(replies)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "at most 3" in e.value.details()
        channel.close()

        with pytest.raises(BfrtConnectError) as e:
            Client(address, client_id=9, bind=False)
        assert e.value.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "refused a new session" in e.value.message and "close idle ones" in e.value.fix
        # Writes and reads of the open sessions go on; a closed session frees its slot.
        assert held[0].table("$PORT").usage() == 0
        held.pop().close()
        assert until(lambda: subscribes(address, 9), 5)
    finally:
        for c in held:
            c.close()
        srv.stop(None).wait(5)


def test_a_held_client_id_is_skipped_by_a_reader_and_refused_to_a_fixed_one(switch):
    address = f"127.0.0.1:{switch.port}"
    inv = SimpleNamespace(switch=SimpleNamespace(name="sw0", bfrt=address, bfrt_via_ssh=False, programmable=True))
    with switchd.connect(inv) as first, switchd.connect(inv) as second:
        assert (first.client_id, second.client_id) == (7, 8)
        with pytest.raises(BfrtConnectError, match="already subscribed") as e:
            Client(address, client_id=7, bind=False, subscribe_retries=1)
        assert e.value.fix
        # A reader that finds every id of its range taken says so, with a fix.
        with pytest.raises(BfrtConnectError, match="client ids 7 to 8 are all taken") as e:
            Client(address, client_id=7, spare_ids=1, bind=False)
        assert "close some" in e.value.fix


class SwitchdStreams(BfrtServicer):
    """bf_switchd's answer to a subscribe with a client id another session holds: the
    stream ends INVALID_ARGUMENT (the emulator answers in the subscribe reply instead)."""

    held = {7, 8}

    def StreamChannel(self, request_iterator, context):
        for request in request_iterator:
            if request.client_id in self.held:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Can't have two clients with the same client id")
            yield pb.StreamMessageResponse(subscribe=pb.Subscribe(device_id=0))


def test_a_reader_skips_ids_bf_switchd_refuses_by_ending_the_stream():
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BfRuntimeServicer_to_server(SwitchdStreams(make_store()), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        inv = SimpleNamespace(
            switch=SimpleNamespace(name="sw0", bfrt=f"127.0.0.1:{port}", bfrt_via_ssh=False, programmable=True)
        )
        with switchd.connect(inv) as reader:
            assert reader.client_id == 9
        with pytest.raises(BfrtConnectError, match="same client id") as e:
            Client(f"127.0.0.1:{port}", client_id=8, bind=False)
        assert e.value.fix
    finally:
        server.stop(None)


def test_bringup_verify_reads_while_the_reader_id_is_held(switch, capsys):
    from tests.unit.test_tofino_sde import bringup_args, run_bringup

    address = f"127.0.0.1:{switch.port}"
    args = bringup_args(**{"--bfrt": address, "--timeout": "5"})
    assert run_bringup(capsys, *args)[0] == 0  # ports up, as the tofino_sde role brings them
    held = RawSession(address, switchd.READER_CLIENT_ID)  # a hung reader
    try:
        assert held.ok
        code, report, _ = run_bringup(capsys, *args, "--verify")
        assert code == 0 and report["ok"] and not report["bound"], report
    finally:
        held.close()
