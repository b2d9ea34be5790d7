"""Packet tests of Pallas-SW (switch/p4/pallas.p4): frames into ports, what comes out
checked, the switch programmed and read only through BFRuntime.

Topology: port 1 = the client, ports 2 and 3 = workers A and B, ports 4 and 5 =
workers C and D. Run against the emulator by default (tests/switch/harness.py).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from hosts.proto import Flag, Header, Kind, large_payload
from tests.netpeer import frame, mac_bytes
from tests.switch.harness import SwitchUnderTest
from tests.switch.pallas_setup import Pallas
from tests.switch.rain_setup import SERVICE, decode, is_rain

pytestmark = pytest.mark.integration

CLIENT, WA, WB, WC, WD = 1, 2, 3, 4, 5
A, B, C, D = 11, 12, 13, 14  # worker ids
PORT_OF = {A: WA, B: WB, C: WC, D: WD}
WORKER_PORTS = (WA, WB, WC, WD)


@pytest.fixture(scope="module")
def sw():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with SwitchUnderTest(ports=5, program="pallas") as s:
        yield s


@pytest.fixture
def pallas(sw):
    p = Pallas(sw)
    p.reset()
    p.route(CLIENT, WA, WB, WC, WD)
    for wid, port in PORT_OF.items():
        p.worker(wid, port)
    yield p
    for i in sw.unexpected:
        sw.unexpected[i].clear()


CLIENT_ID = 0x0103


def push_one(pallas: Pallas, sw, rid: int, task_type: int, timeout: float = 2.0) -> Header:
    """Send one task; return the DISPATCH header, from whichever worker port it left."""
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, rid, task_type=task_type))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for port in WORKER_PORTS:
            got = sw.peers[port].recv(0.01)
            if got is None:
                continue
            if not is_rain(Kind.DISPATCH, request_id=rid)(got[1]):
                sw.unexpected[port].append(got[1])
                continue
            d = decode(got[1])
            assert d.eth_dst == mac_bytes(sw.side(port).mac) and d.ip_dst == sw.side(port).ip
            assert PORT_OF[d.rain.worker_id] == port  # the worker id names the worker it reached
            return d.rain
    raise AssertionError(f"task {rid} (type {task_type}) left at no worker port within {timeout} s")


# ------------------------------------------------------------------ weighted round robin


def test_wrr_order_within_a_pool(pallas, sw):
    pallas.map_type(1, 1)
    assert pallas.pool(1, [(A, 2), (B, 1)]) == [A, A, B]
    order = []
    for rid in range(9):
        pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, rid, task_type=1, data=bytes([rid]) * 8))
        want = [A, A, B][rid % 3]
        f = sw.expect(PORT_OF[want], is_rain(Kind.DISPATCH, request_id=rid))
        d = decode(f)
        h = d.rain
        order.append(h.worker_id)
        # the task itself, pushed: addressed to the worker, the client's source kept
        # (the worker answers it directly), the rest of the header untouched
        assert (h.client_id, h.data, h.task_type, h.slice, h.flags) == (CLIENT_ID, bytes([rid]) * 8, 1, 1, 0)
        assert d.eth_dst == mac_bytes(sw.side(PORT_OF[want]).mac)
        assert d.eth_src == mac_bytes(sw.side(CLIENT).mac)
        assert (d.ip_src, d.ip_dst, d.ip_ok) == (sw.side(CLIENT).ip, sw.side(PORT_OF[want]).ip, True)
        assert (d.sport, d.dport) == (40000 + CLIENT, 21057)
    assert order == [A, A, B] * 3
    pallas.settle()
    sw.expect_nothing([CLIENT, *WORKER_PORTS], 0.1)
    assert pallas.event("DISPATCH_DIRECT") == 9 and pallas.pushed(1) == 9
    assert pallas.cursor.read(1)[0] == 3  # the position of the pool's last task


def test_no_queue_and_no_bound_on_a_worker(pallas, sw):
    """Push: every task leaves at once, however many the worker already has; nothing
    waits in the switch (no worker ever sends a token)."""
    pallas.map_type(0, 0)
    pallas.pool(0, [(C, 1)])
    for rid in range(30):
        pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, rid))
    got = sw.expect_all(WC, 30, is_rain(Kind.DISPATCH))
    assert sorted(decode(f).rain.request_id for f in got) == list(range(30))
    assert pallas.event("DISPATCH_DIRECT") == 30 and pallas.pushed(0) == 30


def test_a_type_goes_only_to_its_pools_workers(pallas, sw):
    pallas.map_type(1, 1)
    pallas.map_type(3, 1)  # two types sharing pool 1 share its cursor
    pallas.map_type(2, 2)
    pallas.pool(1, [(A, 1), (B, 1)])
    pallas.pool(2, [(C, 1), (D, 3)])
    rng = random.Random(5)
    types = [rng.choice((1, 2, 3)) for _ in range(24)]
    got = {1: [], 2: []}
    for rid, t in enumerate(types):
        h = push_one(pallas, sw, rid, t)
        assert h.task_type == t and h.slice == (2 if t == 2 else 1)
        got[h.slice].append(h.worker_id)
    n1, n2 = len(got[1]), len(got[2])
    # each pool's tasks in its own WRR order, whatever the other pool's traffic
    assert got[1] == ([A, B] * n1)[:n1]
    assert got[2] == ([C, D, D, D] * n2)[:n2]
    assert (pallas.pushed(1), pallas.pushed(2)) == (n1, n2)
    assert pallas.event("DISPATCH_DIRECT") == len(types)
    sw.expect_nothing([CLIENT, *WORKER_PORTS], 0.1)


def test_a_large_task_is_pushed_whole(pallas, sw):
    """No RDMA pre-writing in Pallas-SW: a large task leaves as it came, payload and all."""
    pallas.map_type(0, 0)
    pallas.pool(0, [(B, 1)])
    body = large_payload(CLIENT_ID, 40, 1000) + b"\xee" * 4  # + the 4-byte pad rain-client sends
    h = Header(kind=Kind.TASK, flags=Flag.LARGE, client_id=CLIENT_ID, request_id=40)
    sent = frame(sw.side(CLIENT), SERVICE, h.pack() + body, 40001, 21057)
    pallas.send(CLIENT, sent)
    d = decode(sw.expect(WB, is_rain(Kind.DISPATCH, request_id=40)))
    assert d.rain.flags == Flag.LARGE and d.payload[32:] == body and d.ip_ok
    assert len(d.payload) == len(decode(sent).payload)
    assert pallas.event("DISPATCH_DIRECT") == 1


# ------------------------------------------------------------------ rejects


def test_a_type_with_no_pool_is_rejected(pallas, sw):
    pallas.map_type(1, 1)
    pallas.pool(1, [(A, 1)])
    sent = pallas.task(CLIENT, CLIENT_ID, 7, task_type=9)  # type 9: no map_pool entry
    pallas.send(CLIENT, sent)
    d = decode(sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=7)))
    s = decode(sent)
    # a reply: back out of the client's port, addresses and UDP ports swapped
    assert d.eth_dst == mac_bytes(sw.side(CLIENT).mac) and d.eth_src == mac_bytes(SERVICE.mac)
    assert (d.ip_src, d.ip_dst, d.ip_ok) == (SERVICE.ip, sw.side(CLIENT).ip, True)
    assert (d.sport, d.dport) == (s.dport, s.sport)
    assert (d.rain.client_id, d.rain.task_type) == (CLIENT_ID, 9)
    pallas.settle()
    sw.expect_nothing(WORKER_PORTS, 0.1)
    assert pallas.event("NO_POOL") == 1 and pallas.event("DISPATCH_DIRECT") == 0
    assert pallas.cursor.read(1)[0] == 0 and pallas.pushed(1) == 0


def test_a_pool_with_no_workers_is_rejected(pallas, sw):
    pallas.map_type(4, 4)  # pool 4: no config_pool entry, no schedule
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, 1, task_type=4))
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=1))
    assert pallas.cursor.read(4)[0] == 0  # the cursor moves only for a pool with workers
    # a length with a hole in the schedule: position 2 has no worker
    pallas.c.table("config_pool").add(4, "set_pool_config", {"length": 2})
    pallas.c.table("schedule").add({"pool": 4, "position": 1}, "set_worker", {"worker": B})
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, 2, task_type=4))
    sw.expect(WB, is_rain(Kind.DISPATCH, request_id=2))
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, 3, task_type=4))
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=3))
    # a schedule naming a worker with no address: rejected too, counted apart
    pallas.c.table("schedule").add({"pool": 4, "position": 2}, "set_worker", {"worker": 99})
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, 4, task_type=4))  # position 1: B
    sw.expect(WB, is_rain(Kind.DISPATCH, request_id=4))
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, 5, task_type=4))  # position 2: worker 99
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=5))
    pallas.settle()
    sw.expect_nothing([WA, WC, WD], 0.05)
    assert (pallas.event("POOL_EMPTY"), pallas.event("NO_WORKER"), pallas.event("DISPATCH_DIRECT")) == (2, 1, 2)
    assert pallas.pushed(4) == 2


def test_a_schedule_changed_through_bfruntime_takes_effect_on_the_next_task(pallas, sw):
    pallas.map_type(1, 1)
    pallas.pool(1, [(A, 1), (B, 1)])
    assert push_one(pallas, sw, 1, 1).worker_id == A  # position 1
    sched = pallas.c.table("schedule")
    sched.modify({"pool": 1, "position": 2}, "set_worker", {"worker": C})
    assert push_one(pallas, sw, 2, 1).worker_id == C  # position 2, rewritten
    # new weights: D 3, A 1 (length 4): the cursor goes on from position 2
    with pallas.c.batch() as b:
        b.modify("schedule", {"pool": 1, "position": 1}, "set_worker", {"worker": D})
        b.modify("schedule", {"pool": 1, "position": 2}, "set_worker", {"worker": D})
        b.add("schedule", {"pool": 1, "position": 3}, "set_worker", {"worker": D})
        b.add("schedule", {"pool": 1, "position": 4}, "set_worker", {"worker": A})
        b.modify("config_pool", 1, "set_pool_config", {"length": 4})
    assert [push_one(pallas, sw, rid, 1).worker_id for rid in range(3, 9)] == [D, A, D, D, D, A]
    assert pallas.cursor.read(1)[0] == 4
    # shortened under a cursor beyond its end: the pool starts over at position 1
    pallas.c.table("config_pool").modify(1, "set_pool_config", {"length": 1})
    assert [push_one(pallas, sw, rid, 1).worker_id for rid in (9, 10)] == [D, D]
    assert pallas.event("DISPATCH_DIRECT") == 10 and pallas.pushed(1) == 10
    # and a type moved to another pool follows it from the next task on
    pallas.pool(2, [(B, 1)])
    pallas.c.table("map_pool").modify(1, "set_pool", {"pool": 2})
    h = push_one(pallas, sw, 11, 1)
    assert (h.worker_id, h.slice) == (B, 2)
    sw.expect_nothing([CLIENT, *WORKER_PORTS], 0.05)


# ------------------------------------------------------------------ other traffic, bad input


def test_responses_are_forwarded_by_ip(pallas, sw):
    h = Header(kind=Kind.RESPONSE, client_id=CLIENT_ID, request_id=4, worker_id=A)
    pallas.send(WA, frame(sw.side(WA), sw.side(CLIENT), h.pack() + b"result", 5000, 21057))
    d = decode(sw.expect(CLIENT, is_rain(Kind.RESPONSE)))
    assert d.eth_dst == mac_bytes(sw.side(CLIENT).mac) and d.ttl == 63 and d.ip_ok
    assert d.payload[32:] == b"result"
    # a token (Rain's workers send them; Pallas's do not) is not a task: forwarded by
    # address, and the service address has no route
    pallas.send(WA, frame(sw.side(WA), SERVICE, Header(kind=Kind.TOKEN, worker_id=A).pack(), 41000, 21057))
    pallas.settle()
    assert pallas.event("FORWARDED") == 1 and pallas.event("NO_ROUTE") == 1
    sw.expect_nothing([CLIENT, *WORKER_PORTS], 0.05)


def test_malformed_frames_are_dropped_and_counted(pallas, sw):
    pallas.map_type(0, 0)
    pallas.pool(0, [(A, 1)])
    rng = random.Random(3)
    good = pallas.task(CLIENT, CLIENT_ID, 1)
    truncated = [
        good[: 14 + 10],  # IPv4
        good[: 14 + 20 + 4],  # UDP
        good[: 14 + 20 + 8 + 20],  # the rain header
    ]
    bad_version = bytearray(good)
    bad_version[42] = 9
    large_too_short = bytearray(good)
    large_too_short[44] = Flag.LARGE  # a large task needs a payload of 4..2048 bytes
    garbage = [bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 300))) for _ in range(50)]
    garbage = [b"\xff" * 6 + bytes(6) + b"\x08\x00" + g[14:] for g in garbage]  # IPv4-typed garbage
    for f in [*truncated, bytes(bad_version), bytes(large_too_short), *garbage]:
        pallas.send(CLIENT, f)
    pallas.settle()
    assert pallas.event("PARSER_ERROR") >= 3
    assert pallas.event("BAD_RAIN") >= 2
    assert pallas.event("DISPATCH_DIRECT") == 0 and pallas.cursor.read(0)[0] == 0
    if not sw.external:
        assert pallas.stats()["drops"]["internal_error"] == 0
    sw.drain()
    # still works
    pallas.send(CLIENT, pallas.task(CLIENT, CLIENT_ID, 77))
    sw.expect(WA, is_rain(Kind.DISPATCH, request_id=77))
