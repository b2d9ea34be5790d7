"""rain-worker's baseline options on a virtual port, against a Python peer that plays the
switch and the client: Draconis-SW's large tasks (a header-only DISPATCH, the payload
FETCHed from the client) and RackSched's second layer (--dispatcher: one FIFO in the
server, first come first served across its threads). Every loop is bounded.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time

import pytest

from hosts import proto
from tests.integration.test_worker import CLIENT_IP, DPDK, Switch, Worker, worker_cmd
from tests.netpeer import NetnsPair, parse_udp

pytestmark = pytest.mark.integration

TAG = "rmtb"  # its own namespaces: test_worker.py may run at the same time elsewhere
CLIENT = 0x0101
FETCH_TIMEOUT_NS = 300_000_000  # a Python peer on a busy machine answers well within it


@pytest.fixture(scope="module")
def pair():
    r = subprocess.run(["make", "-C", str(DPDK), "build/rain-worker"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    with NetnsPair(TAG) as p:
        yield p


@pytest.fixture
def switch(pair):
    s = Switch(pair)
    yield s
    s.close()


def fnv1a64(b: bytes) -> int:
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def next_fetch(sw: Switch, timeout: float = 3.0) -> tuple[proto.Header, bytes]:
    """The next FETCH the worker sends (header, frame); tokens, responses and the rest
    are sorted as Switch does."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        got = sw.raw.recv(min(left, 0.1))
        if got is None:
            continue
        fr = got[1]
        u = parse_udp(fr)
        if u is None or u[1] != proto.UDP_PORT:
            continue
        h = proto.Header.unpack(u[2])
        if h.kind == proto.Kind.FETCH:
            return h, fr
        if h.kind == proto.Kind.RESPONSE:
            sw.responses[(h.client_id, h.request_id)] = (got[0], h, fr)
        else:
            sw.other.append(h)
    raise AssertionError("no FETCH from the worker")


def reply(sw: Switch, worker: int, rid: int, payload: bytes, *, client_id: int = CLIENT) -> None:
    h = proto.Header(
        kind=proto.Kind.FETCH_REPLY, flags=proto.Flag.LARGE, client_id=client_id, request_id=rid, worker_id=worker
    )
    sw.send_rain(h.pack() + payload)


def test_pull_fetches_large_tasks_from_their_client(pair, switch, tmp_path):
    w = Worker(
        pair,
        tmp_path,
        "fetch",
        ["--threads", "1", "--worker-base", "6", "--mode", "pull", "--handler", "digest"]
        + ["--fetch-timeout", str(FETCH_TIMEOUT_NS)],
        tag=TAG,
    )
    pulls = lambda: sum(h.kind == proto.Kind.PULL for h in switch.other)  # noqa: E731
    large = proto.Flag.LARGE | proto.Flag.INT
    try:
        switch.pump(0.3)
        assert pulls() == 1

        # The switch dispatches a large task as its header only; the worker asks the
        # task's client (the DISPATCH's source) for the payload, via the switch.
        switch.dispatch(6, 500, flags=large, service_ns=777)
        f, fr = next_fetch(switch)
        assert (f.client_id, f.request_id, f.worker_id) == (CLIENT, 500, 6)
        assert fr[0:6] == bytes.fromhex(pair.b.mac.replace(":", ""))  # next hop: the switch
        assert fr[30:34] == bytes(map(int, CLIENT_IP.split(".")))  # IPv4 destination: the client
        assert parse_udp(fr)[:2] == (proto.UDP_PORT, proto.UDP_PORT)
        assert (CLIENT, 500) not in switch.responses and pulls() == 1  # it waits, and holds the task

        body = os.urandom(300)
        payload = proto.SlotHeader(CLIENT, 500, proto.SLOT_HDR_LEN + len(body), arg=struct.pack("!Q", 777)).pack()
        reply(switch, 6, 500, payload + body)
        switch.wait_responses([(CLIENT, 500)], timeout=3)
        _, h, rfr = switch.responses[(CLIENT, 500)]
        assert not h.flags & proto.Flag.FAILED and h.worker_id == 6
        # the handler saw the payload intact: its digest comes back as the result
        assert parse_udp(rfr)[2][proto.HDR_LEN :] == struct.pack("!Q", fnv1a64(body))
        switch.pump(0.3)
        assert pulls() == 2  # the thread pulls again

        # A lost FETCH_REPLY: the task fails after the timeout, and the thread pulls again.
        switch.dispatch(6, 501, flags=large)
        next_fetch(switch)
        t0 = time.monotonic()
        switch.wait_responses([(CLIENT, 501)], timeout=3)
        waited = time.monotonic() - t0
        assert switch.responses[(CLIENT, 501)][1].flags & proto.Flag.FAILED
        assert waited > 0.8 * FETCH_TIMEOUT_NS / 1e9
        switch.pump(0.3)
        assert pulls() == 3
        # ... and its reply, when it comes late, runs nothing
        reply(switch, 6, 501, proto.large_payload(CLIENT, 501, 64))

        # A reply whose payload names another task is refused, not run.
        switch.dispatch(6, 502, flags=large)
        next_fetch(switch)
        reply(switch, 6, 502, proto.large_payload(CLIENT, 999, 64))
        switch.wait_responses([(CLIENT, 502)], timeout=3)
        assert switch.responses[(CLIENT, 502)][1].flags & proto.Flag.FAILED
        switch.pump(0.3)
        assert pulls() == 4

        st = w.wait_stats(lambda s: s["workers"][0]["fetch_stale"] == 1)["workers"][0]
        assert (st["fetches"], st["fetch_replies"], st["fetch_timeouts"], st["fetch_stale"], st["fetch_bad"]) == (
            3,
            1,
            1,
            1,
            1,
        )
        assert (st["tasks_done"], st["failed"], st["pulls_sent"]) == (1, 2, 4)
    finally:
        final = w.stop()
    assert final["drops_total"] == 0


def test_a_descriptor_of_a_slot_never_written_is_fetched_from_its_client(pair, switch, tmp_path):
    """Rain: a worker that joins a slice (Algorithm 1 moves it) never received the tasks
    pre-written there before; a descriptor of one of them names a slot it does not hold.
    It asks the task's client for the payload instead of failing the task, and runs it
    from the FETCH_REPLY; one that no reply answers fails after the timeout."""
    w = Worker(
        pair,
        tmp_path,
        "descfetch",
        ["--threads", "1", "--worker-base", "4", "--mode", "rain", "--handler", "digest", "--quota", "1"]
        + ["--ring-slots", "8", "--slot-size", "512", "--fetch-timeout", str(FETCH_TIMEOUT_NS)],
        tag=TAG,
    )
    try:
        switch.dispatch(4, 600, desc=(3, proto.SLOT_HDR_LEN + 300))  # slot 3 was never written
        f, fr = next_fetch(switch)
        assert (f.client_id, f.request_id, f.worker_id) == (CLIENT, 600, 4)
        assert fr[30:34] == bytes(map(int, CLIENT_IP.split(".")))  # to the task's client
        body = os.urandom(300)
        payload = proto.SlotHeader(CLIENT, 600, proto.SLOT_HDR_LEN + len(body), arg=struct.pack("!Q", 5)).pack()
        reply(switch, 4, 600, payload + body)
        switch.wait_responses([(CLIENT, 600)], timeout=3)
        _, h, rfr = switch.responses[(CLIENT, 600)]
        assert not h.flags & proto.Flag.FAILED
        assert parse_udp(rfr)[2][proto.HDR_LEN :] == struct.pack("!Q", fnv1a64(body))  # the fetched payload ran
        # no reply: the task fails after the fetch timeout, never hangs
        switch.dispatch(4, 601, desc=(5, proto.SLOT_HDR_LEN + 300))
        next_fetch(switch)
        switch.wait_responses([(CLIENT, 601)], timeout=3)
        assert switch.responses[(CLIENT, 601)][1].flags & proto.Flag.FAILED
        st = w.wait_stats(lambda s: s["workers"][0]["fetch_timeouts"] == 1)["workers"][0]
        assert (st["desc_fetches"], st["desc_mismatch"], st["fetch_replies"], st["tasks_done"], st["failed"]) == (
            2,
            2,
            1,
            1,
            1,
        )
    finally:
        w.stop()


def test_modes_without_fetch_drop_header_only_large_tasks(pair, switch, tmp_path):
    w = Worker(pair, tmp_path, "nofetch", ["--threads", "1", "--mode", "push", "--handler", "echo"], tag=TAG)
    try:
        switch.dispatch(0, 1, flags=proto.Flag.LARGE)
        st = w.wait_stats(lambda s: s["drops"]["truncated"] == 1)
        assert st["drops"]["truncated"] == 1 and st["workers"][0]["fetches"] == 0
        switch.pump(0.2)
        assert not switch.responses and not switch.other
    finally:
        w.stop()


def test_dispatcher_serves_the_server_first_come_first_served(pair, switch, tmp_path):
    w = Worker(
        pair,
        tmp_path,
        "disp",
        ["--threads", "2", "--worker-base", "3", "--mode", "report", "--handler", "sleep", "--dispatcher"],
        tag=TAG,
    )
    long_ns, short_ns = 600_000_000, 30_000_000
    try:
        assert w.reg["dispatcher"] is True
        switch.pump(0.3)
        # one server, one target: a single REPORT at start, from worker_base
        assert [(h.kind, h.worker_id, h.report) for h in switch.other] == [(proto.Kind.REPORT, 3, 0)]
        t0 = time.monotonic()
        switch.dispatch(3, 1, service_ns=long_ns)
        for rid in (2, 3, 4):  # all for the same worker id: one FIFO would put them behind task 1
            switch.dispatch(3 if rid != 3 else 4, rid, service_ns=short_ns)
        switch.wait_responses([(CLIENT, r) for r in (2, 3, 4)], timeout=3)
        # the short tasks did not wait for the long one: the other thread took them
        assert (CLIENT, 1) not in switch.responses, "the short tasks waited behind the long one"
        assert time.monotonic() - t0 < long_ns / 1e9
        switch.wait_responses([(CLIENT, 1)], timeout=3)
        r = switch.responses
        busy = r[(CLIENT, 1)][1].worker_id
        assert {r[(CLIENT, k)][1].worker_id for k in (2, 3, 4)} == {3, 4} - {busy}
        # first come, first served: in arrival order
        assert r[(CLIENT, 2)][0] < r[(CLIENT, 3)][0] < r[(CLIENT, 4)][0] < r[(CLIENT, 1)][0]
        switch.pump(0.2)
        # REPORTs carry the server's total (waiting + running), always as worker_base
        reports = [(h.worker_id, h.report) for h in switch.other if h.kind == proto.Kind.REPORT]
        assert reports == [(3, 0), (3, 3), (3, 2), (3, 1), (3, 0)]
        st = w.wait_stats(lambda s: s["dispatcher"]["dispatched"] == 4)
        assert st["dispatcher"] == {"dispatched": 4, "fifo_full": 0, "fifo_len": 0, "held": 0}
        took = {x["worker_id"]: x["dispatched"] for x in st["workers"]}
        assert took == {busy: 1, ({3, 4} - {busy}).pop(): 3}
    finally:
        w.stop()


@pytest.mark.parametrize("mode", ["rain", "pull"])
def test_dispatcher_refuses_per_thread_modes(pair, mode):
    prefix = f"{TAG}-bad-{os.getpid()}"
    try:
        r = subprocess.run(
            worker_cmd(pair, prefix, ["--mode", mode, "--dispatcher"]), capture_output=True, text=True, timeout=30
        )
    finally:
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)  # rte_exit leaves it
    assert r.returncode != 0
    assert "--dispatcher works with --mode report or push" in r.stderr and "fix:" in r.stderr
