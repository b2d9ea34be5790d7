"""rain-client answers FETCHes (Draconis-SW: the switch dispatches a large task as its
header only and the worker asks the client for the payload), against a Python peer
that plays the switch and a worker. The client makes the payload again from the
request, so the FETCH_REPLY must carry exactly the bytes the TASK carried."""

from __future__ import annotations

import subprocess
import threading

import pytest

from hosts import proto
from tests.integration.test_client import CLIENT, DPDK, PATIENT, Client
from tests.netpeer import NetnsPair, RawPeer, frame, parse_udp

pytestmark = pytest.mark.integration

WORKER_IP = "10.81.0.77"  # a worker behind the switch: where FETCHes come from
WORKER_ID = 0x0123


@pytest.fixture(scope="module")
def pair():
    subprocess.run(["make", "-s", "-C", str(DPDK), "build/rain-client"], check=True, capture_output=True)
    assert CLIENT.exists()
    with NetnsPair("rmtf") as p:
        yield p


class FetchingPeer:
    """Side b: a switch that keeps large tasks' payloads away from its worker. For a large
    TASK it sends a FETCH as the worker would, answers the task once the FETCH_REPLY is
    in; inline tasks are answered at once. The first large task is also FETCHed under an
    id never sent, the first inline one under its own id: both must be ignored."""

    def __init__(self, pair: NetnsPair):
        self.pair = pair
        self.worker = type(pair.b)(pair.b.netns, pair.b.iface, pair.b.mac, WORKER_IP)
        self.raw = RawPeer(pair.b)
        self.tasks: dict[int, tuple[proto.Header, bytes]] = {}
        self.replies: dict[int, tuple[proto.Header, bytes, bytes]] = {}  # rid -> (header, payload, frame)
        self.bogus_sent = {"unknown": False, "inline": False}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FetchingPeer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.raw.close()

    def _send(self, src, h: proto.Header, sport: int = proto.UDP_PORT) -> None:
        self.raw.send(frame(src, self.pair.a, h.pack(), sport, proto.UDP_PORT))

    def _fetch(self, h: proto.Header, rid: int) -> None:
        f = proto.Header(
            kind=proto.Kind.FETCH, client_id=h.client_id, request_id=rid, worker_id=WORKER_ID, task_type=h.task_type
        )
        self._send(self.worker, f)

    def _respond(self, h: proto.Header) -> None:
        self._send(self.pair.b, proto.Header(kind=proto.Kind.RESPONSE, client_id=h.client_id, request_id=h.request_id))

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self.raw.recv(0.05)
            if got is None:
                continue
            u = parse_udp(got[1])
            if u is None or u[1] != proto.UDP_PORT:
                continue
            h = proto.Header.unpack(u[2])
            if h.kind == proto.Kind.TASK and h.flags & proto.Flag.LARGE:
                self.tasks[h.request_id] = (h, u[2][proto.HDR_LEN :])
                self._fetch(h, h.request_id)
                if not self.bogus_sent["unknown"]:
                    self._fetch(h, h.request_id + 1_000_000)
                    self.bogus_sent["unknown"] = True
            elif h.kind == proto.Kind.TASK:
                self.tasks[h.request_id] = (h, b"")
                self._respond(h)
                if not self.bogus_sent["inline"]:
                    self._fetch(h, h.request_id)  # inline: nothing to fetch (and answered already)
                    self.bogus_sent["inline"] = True
            elif h.kind == proto.Kind.FETCH_REPLY:
                self.replies[h.request_id] = (h, u[2][proto.HDR_LEN :], got[1])
                self._respond(h)


def test_client_answers_fetches_with_the_payload(pair, tmp_path):
    args = PATIENT + ["--rate", "400", "--duration", "1", "--large-fraction", "0.5", "--large-bytes", "200"]
    with FetchingPeer(pair) as peer, Client(pair, tmp_path / "out", args) as c:
        s = c.wait(30)
    large = {rid: t for rid, t in peer.tasks.items() if t[0].flags & proto.Flag.LARGE}
    assert len(large) == s["totals"]["large"] > 50 and peer.bogus_sent == {"unknown": True, "inline": True}
    assert s["totals"]["timed_out"] == 0, f"the peer answered too late for the client: {s['totals']}, {s['run']}"
    assert set(peer.replies) == set(large)
    for rid, (task, task_payload) in large.items():
        h, payload, fr = peer.replies[rid]
        assert (h.kind, h.flags, h.client_id, h.worker_id, h.task_type) == (
            proto.Kind.FETCH_REPLY,
            proto.Flag.LARGE,
            task.client_id,
            WORKER_ID,  # echoed: the worker's RX loop hands the reply to the thread that asked
            task.task_type,
        )
        assert h.service_ns == task.service_ns
        # the TASK's bytes exactly, without the iCRC trailer a WRITE would need
        assert payload == task_payload[:200] and len(task_payload) == 200 + proto.ROCE_ICRC_LEN
        assert fr[0:6] == bytes.fromhex(pair.b.mac.replace(":", ""))  # back via the switch ...
        assert fr[30:34] == bytes(map(int, WORKER_IP.split(".")))  # ... to the worker that asked
    run = s["run"]
    assert (run["fetches"], run["fetch_unknown"], run["fetch_dropped"]) == (len(large), 2, 0)
    t = s["totals"]
    assert t["received"] == t["sent"] and t["timed_out"] == t["lost"] == 0
    assert run["unexpected_kind"] == 0
