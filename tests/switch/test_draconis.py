"""Packet tests of the Draconis-SW program (switch/p4/draconis.p4): frames into ports,
what comes out checked, the switch programmed and read only through BFRuntime.

Topology: port 1 = client host 1, port 2 = worker host A, port 3 = worker host B,
port 4 = client host 2. Workers behave as `rain-worker --mode pull`: an idle worker
sends one PULL and gets a DISPATCH or an EMPTY back.
"""

from __future__ import annotations

import os
import random
from collections import deque

import pytest

from hosts.proto import Flag, Header, Kind, large_payload
from tests.netpeer import frame, mac_bytes
from tests.switch.draconis_setup import SWITCH, Draconis
from tests.switch.harness import SwitchUnderTest
from tests.switch.rain_setup import decode, is_rain

pytestmark = pytest.mark.integration

CLIENT, WA, WB, CLIENT2 = 1, 2, 3, 4
ALL = (CLIENT, WA, WB, CLIENT2)


@pytest.fixture(scope="module")
def sw():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with SwitchUnderTest(ports=4, program="draconis") as s:
        yield s


@pytest.fixture
def dr(sw):
    d = Draconis(sw)
    d.reset()
    d.route(*ALL)
    d.capacity(64)
    d.client_host(1, CLIENT)
    d.client_host(2, CLIENT2)
    yield d
    for i in sw.unexpected:
        sw.unexpected[i].clear()


def client_id(host: int, n: int = 0) -> int:
    return host << 8 | n


def test_pull_on_an_empty_queue_is_answered_empty(dr, sw):
    pull = dr.pull(WA, 1, seq=5)
    dr.send(WA, pull)
    f = sw.expect(WA, is_rain(Kind.EMPTY))
    d, sent = decode(f), decode(pull)
    assert (d.rain.worker_id, d.rain.request_id) == (1, 5)
    # back to the worker: addresses and UDP ports swapped, IP checksum valid, UDP's none
    assert d.eth_dst == mac_bytes(sw.side(WA).mac) and d.eth_src == mac_bytes(SWITCH.mac)
    assert d.ip_dst == sw.side(WA).ip and d.ip_src == SWITCH.ip and d.ip_ok
    assert (d.sport, d.dport) == (sent.dport, sent.sport) and d.udp_csum == 0
    assert len(f) == len(pull)
    sw.expect_nothing([CLIENT, WB, CLIENT2], 0.1)
    assert dr.event("PULL_EMPTY") == 1 and dr.waiting() == 0
    assert dr.reg("head") == dr.reg("tail") == 0  # an empty pull moves no pointer


def test_task_then_pull_dispatches_it_to_the_puller(dr, sw):
    dr.send(CLIENT, dr.task(CLIENT, client_id(1, 3), 77, task_type=4, data=b"ABCDEFGH", flags=Flag.INT))
    dr.settle()
    sw.expect_nothing(ALL, 0.1)
    assert dr.waiting() == 1 and dr.event("TASK_QUEUED") == 1
    pull = dr.pull(WB, 2, seq=9)
    dr.send(WB, pull)
    f = sw.expect(WB, is_rain(Kind.DISPATCH))
    d = decode(f)
    h = d.rain
    assert (h.client_id, h.request_id, h.task_type, h.data) == (client_id(1, 3), 77, 4, b"ABCDEFGH")
    assert (h.worker_id, h.flags, h.report) == (2, Flag.INT, 0)  # the puller's id; the task's flags
    # to the puller; from the client (client_addr), so the worker answers the client directly
    assert d.ip_dst == sw.side(WB).ip and d.ip_src == sw.side(CLIENT).ip and d.ip_ok
    assert d.eth_dst == mac_bytes(sw.side(WB).mac) and d.udp_csum == 0
    assert len(f) == len(pull)  # the task frame: header only
    sw.expect_nothing([CLIENT, WA, CLIENT2], 0.1)
    assert dr.waiting() == 0 and dr.event("DISPATCH_QUEUED") == 1
    # taken once: the next pull finds the queue empty
    dr.send(WB, dr.pull(WB, 2, seq=10))
    assert decode(sw.expect(WB, is_rain(Kind.EMPTY))).rain.request_id == 10


def test_fifo_order_over_pulls_from_two_workers(dr, sw):
    for rid in range(10, 16):
        host, port = (1, CLIENT) if rid % 3 else (2, CLIENT2)
        dr.send(port, dr.task(port, client_id(host, rid), rid, data=bytes([rid]) * 8))
        dr.settle()  # two ports: the switch's order across them is not the sender's, unless each is in
    assert dr.waiting() == 6
    got = []
    for k in range(6):
        port, wid = (WA, 1) if k % 2 == 0 else (WB, 2)
        dr.send(port, dr.pull(port, wid, seq=k))
        d = decode(sw.expect(port, is_rain(Kind.DISPATCH)))
        client = CLIENT if d.rain.client_id >> 8 == 1 else CLIENT2
        assert d.ip_src == sw.side(client).ip and d.rain.worker_id == wid
        got.append((d.rain.request_id, d.rain.data, d.rain.client_id & 0xFF))
    assert got == [(rid, bytes([rid]) * 8, rid) for rid in range(10, 16)]
    sw.expect_nothing(ALL, 0.05)
    # the entries and pointers read back through BFRuntime
    assert [dr.reg("request", i) for i in range(6)] == list(range(10, 16))
    assert dr.reg("head") == dr.reg("tail") == 6 and dr.waiting() == 0
    assert (dr.event("TASK_QUEUED"), dr.event("DISPATCH_QUEUED")) == (6, 6)


def test_full_queue_rejects_to_the_client(dr, sw):
    dr.capacity(2)
    for rid in (1, 2):
        dr.send(CLIENT, dr.task(CLIENT, client_id(1), rid))
    dr.settle()
    task = dr.task(CLIENT, client_id(1), 3, data=b"rejected")
    dr.send(CLIENT, task)
    d, sent = decode(sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=3))), decode(task)
    assert d.eth_dst == mac_bytes(sw.side(CLIENT).mac) and d.eth_src == mac_bytes(SWITCH.mac)
    assert d.ip_dst == sw.side(CLIENT).ip and d.ip_src == SWITCH.ip and d.ip_ok
    assert (d.sport, d.dport) == (sent.dport, sent.sport) and d.rain.data == b"rejected"
    sw.expect_nothing([WA, WB, CLIENT2], 0.05)
    assert dr.waiting() == 2 and dr.event("TASK_REJECTED") == 1 and dr.event("TASK_QUEUED") == 2
    # the rejected task was not stored: the two before it come out, then nothing
    for rid in (1, 2):
        dr.send(WA, dr.pull(WA, 1))
        assert decode(sw.expect(WA, is_rain(Kind.DISPATCH))).rain.request_id == rid
    dr.send(WA, dr.pull(WA, 1))
    sw.expect(WA, is_rain(Kind.EMPTY))


def test_the_ring_wraps_at_the_capacity(dr, sw):
    dr.capacity(3)
    order = deque()
    rid = 0
    for enq, deq in ((3, 2), (2, 3), (3, 1)):  # tail 0 -> 0 -> 2 -> 2; head 0 -> 2 -> 2 -> 0
        for _ in range(enq):
            dr.send(CLIENT, dr.task(CLIENT, client_id(1), rid, data=rid.to_bytes(8, "big")))
            order.append(rid)
            rid += 1
        dr.settle()
        for _ in range(deq):
            dr.send(WA, dr.pull(WA, 1))
            h = decode(sw.expect(WA, is_rain(Kind.DISPATCH))).rain
            want = order.popleft()
            assert (h.request_id, h.data) == (want, want.to_bytes(8, "big"))
    assert dr.waiting() == 2 and (dr.reg("head"), dr.reg("tail")) == (0, 2)
    assert dr.event("TASK_REJECTED") == 0


def test_unconfigured_queue_holds_nothing(dr, sw):
    dr.c.table("config_queue").reset_default()
    dr.send(CLIENT, dr.task(CLIENT, client_id(1), 9))
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=9))
    dr.send(WA, dr.pull(WA, 1))
    sw.expect(WA, is_rain(Kind.EMPTY))
    assert dr.waiting() == 0 and dr.event("TASK_REJECTED") == 1 and dr.event("PULL_EMPTY") == 1


def test_large_task_waits_as_metadata_and_the_worker_fetches_its_payload(dr, sw):
    """A large task is dispatched as its header with FLAG_LARGE (no payload); the worker
    FETCHes the payload from the client, which answers FETCH_REPLY: both forwarded by IP,
    the extra round trip Draconis pays. Then the RESPONSE goes to the client."""
    cid = client_id(2, 7)
    payload = large_payload(cid, 41, 300, task_type=3)
    task = dr.task(CLIENT2, cid, 41, task_type=3, flags=Flag.LARGE, payload=payload, data=b"\x00" * 7 + b"\x2c")
    dr.send(CLIENT2, task)
    dr.settle()
    sw.expect_nothing(ALL, 0.1)
    assert dr.waiting() == 1
    pull = dr.pull(WA, 1)
    dr.send(WA, pull)
    f = sw.expect(WA, is_rain(Kind.DISPATCH))
    d = decode(f)
    assert (d.rain.client_id, d.rain.request_id, d.rain.task_type) == (cid, 41, 3)
    assert d.rain.flags == Flag.LARGE and d.rain.data == b"\x00" * 7 + b"\x2c"
    assert len(f) == len(pull) < len(task)  # metadata only
    assert d.ip_src == sw.side(CLIENT2).ip
    # the worker answers the source address: FETCH to the client ...
    fetch = Header(kind=Kind.FETCH, client_id=cid, request_id=41, worker_id=1)
    dr.send(WA, frame(sw.side(WA), sw.side(CLIENT2), fetch.pack(), 21057, 21057))
    g = decode(sw.expect(CLIENT2, is_rain(Kind.FETCH, request_id=41)))
    assert g.eth_dst == mac_bytes(sw.side(CLIENT2).mac) and g.ttl == 63 and g.ip_ok
    assert g.ip_src == sw.side(WA).ip and g.rain.worker_id == 1
    # ... FETCH_REPLY with the payload back to the worker, intact ...
    reply = Header(kind=Kind.FETCH_REPLY, client_id=cid, request_id=41, worker_id=1)
    dr.send(CLIENT2, frame(sw.side(CLIENT2), sw.side(WA), reply.pack() + payload, 21057, 21057))
    r = decode(sw.expect(WA, is_rain(Kind.FETCH_REPLY, request_id=41)))
    assert r.payload[32:] == payload and r.eth_dst == mac_bytes(sw.side(WA).mac) and r.ip_ok
    # ... and the RESPONSE to the client
    resp = Header(kind=Kind.RESPONSE, client_id=cid, request_id=41, worker_id=1)
    dr.send(WA, frame(sw.side(WA), sw.side(CLIENT2), resp.pack() + b"result", 21057, 21057))
    assert decode(sw.expect(CLIENT2, is_rain(Kind.RESPONSE))).payload[32:] == b"result"
    dr.settle()
    sw.expect_nothing([CLIENT, WB], 0.05)
    assert dr.event("FORWARDED") == 3 and dr.event("TASK_QUEUED") == 1 and dr.event("DISPATCH_QUEUED") == 1


def test_tasks_and_pulls_at_random_keep_fifo_order_and_the_counts(dr, sw):
    """Random tasks (capacity 4) and pulls from two workers against a model FIFO: each
    outcome, the `waiting` register and the four counters agree with it."""
    dr.capacity(4)
    rng = random.Random(14)
    fifo: deque[int] = deque()
    counts = {"TASK_QUEUED": 0, "TASK_REJECTED": 0, "DISPATCH_QUEUED": 0, "PULL_EMPTY": 0}
    for n in range(48):
        if rng.random() < 0.5:
            dr.send(CLIENT, dr.task(CLIENT, client_id(1), n))
            if len(fifo) < 4:
                fifo.append(n)
                counts["TASK_QUEUED"] += 1
            else:
                sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=n))
                counts["TASK_REJECTED"] += 1
        else:
            port, wid = rng.choice(((WA, 1), (WB, 2)))
            dr.send(port, dr.pull(port, wid, seq=n))
            if fifo:
                h = decode(sw.expect(port, is_rain(Kind.DISPATCH))).rain
                assert (h.request_id, h.worker_id) == (fifo.popleft(), wid)
                counts["DISPATCH_QUEUED"] += 1
            else:
                h = decode(sw.expect(port, is_rain(Kind.EMPTY))).rain
                assert (h.request_id, h.worker_id) == (n, wid)
                counts["PULL_EMPTY"] += 1
        dr.settle()
        assert dr.waiting() == len(fifo)
    assert {k: dr.event(k) for k in counts} == counts
    assert min(counts.values()) > 0
    sw.expect_nothing(ALL, 0.05)


def test_malformed_and_foreign_frames_are_dropped_and_counted(dr, sw):
    good = dr.task(CLIENT, client_id(1), 1)
    truncated = [good[: 14 + 10], good[: 14 + 20 + 4], good[: 14 + 20 + 8 + 20]]
    bad_version = []
    for f in (good, dr.pull(WA, 1)):
        b = bytearray(f)
        b[42] = 9
        bad_version.append(bytes(b))
    # kinds this switch does not take: its own, Rain's, unknown ones
    foreign = []
    for kind in (Kind.DISPATCH, Kind.EMPTY, Kind.REJECT, Kind.TOKEN, Kind.REPORT, 0, 11, 255):
        b = bytearray(good)
        b[43] = kind
        foreign.append(bytes(b))
    for f in truncated + bad_version + foreign:
        dr.send(CLIENT, f)
    dr.settle()
    assert dr.event("PARSER_ERROR") == 3
    assert dr.event("BAD_RAIN") == len(bad_version) + len(foreign)
    rng = random.Random(3)
    garbage = [bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 300))) for _ in range(50)]
    for g in garbage:
        dr.send(CLIENT, b"\xff" * 6 + bytes(6) + b"\x08\x00" + g[14:])  # IPv4-typed garbage
    dr.settle()
    sw.expect_nothing(ALL, 0.1)
    assert dr.waiting() == 0 and dr.reg("tail") == 0 and dr.event("TASK_QUEUED") == 0
    if not sw.external:  # nothing reached the emulator's catch-all
        assert dr.stats()["drops"]["internal_error"] == 0
    # still works
    dr.send(CLIENT, dr.task(CLIENT, client_id(1), 77))
    dr.send(WA, dr.pull(WA, 1))
    sw.expect(WA, is_rain(Kind.DISPATCH, request_id=77))
