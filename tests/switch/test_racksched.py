"""Packet tests of RackSched-SW (switch/p4/racksched.p4): frames into ports, what comes
out checked, the switch programmed and read only through BFRuntime.

Topology: port 1 = client host, port 2 = worker A (id 1), port 3 = worker B (id 2).
With only these two workers configured the two random choices are always both of them
(in either order), so which one a task goes to depends on their loads alone.
"""

from __future__ import annotations

import os
import time

import pytest

from hosts.proto import Header, Kind
from switch.emulator.racksched import constants as emulated
from switch.p4 import source
from tests.netpeer import frame, mac_bytes
from tests.switch.harness import SwitchUnderTest
from tests.switch.racksched_setup import EV, RackSched
from tests.switch.rain_setup import RAIN_PORT, SERVICE, decode, is_rain

pytestmark = pytest.mark.integration

CLIENT, WA, WB = 1, 2, 3
A, B = 1, 2  # worker ids
PORT_OF = {A: WA, B: WB}


@pytest.fixture(scope="module")
def sw():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with SwitchUnderTest(ports=3, program="racksched") as s:
        yield s


@pytest.fixture
def rs(sw):
    r = RackSched(sw)
    r.reset()
    r.route(CLIENT, WA, WB)
    r.worker(A, WA)
    r.worker(B, WB)
    r.choices(A, B)
    yield r
    for i in sw.unexpected:
        sw.unexpected[i].clear()


def dispatched_to(sw, rs, request_id: int, timeout: float = 2.0) -> int:
    """Send one task and return the worker id its DISPATCH went to (checked against the
    port it left by); frames that are no DISPATCH are kept in `sw.unexpected`."""
    rs.send(CLIENT, rs.task(CLIENT, request_id), passes=2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for wid, port in PORT_OF.items():
            got = sw._recv(port, 0.005)
            if got is None:
                continue
            if not is_rain(Kind.DISPATCH)(got[1]):
                sw.unexpected[port].append(got[1])
                continue
            h = decode(got[1]).rain
            assert h.request_id == request_id and h.worker_id == wid, h
            return wid
    raise AssertionError(f"task {request_id} was not dispatched")


def test_constants_match_the_p4():
    c = source.constants(program="racksched")
    for name in ("CHOICE_PAIRS", "RS_NONE", "RS_CHOOSE", "RS_DISPATCH", "RS_REPORT"):
        assert getattr(emulated, name) == c[name], name
    for name in ("CHOSEN", "REPORT", "UNKNOWN_WORKER"):
        assert getattr(emulated, f"EV_{name}") == c[f"EV_{name}"] == EV[name], name
    assert emulated.WORKER_INDEX_MASK == c["MAX_WORKERS"] - 1


def test_dispatch_is_the_task_addressed_to_its_worker(rs, sw):
    rs.send(WB, rs.report(WB, B, 0))
    rs.send(WA, rs.report(WA, A, 3))
    rs.settle()
    rs.send(CLIENT, rs.task(CLIENT, 42, client_id=0x0105, data=b"ABCDEFGH"), passes=2)
    d = decode(sw.expect(WB, is_rain(Kind.DISPATCH)))
    h = d.rain
    assert (h.worker_id, h.request_id, h.client_id, h.data) == (B, 42, 0x0105, b"ABCDEFGH")
    # the worker answers the client directly: the client's addresses stay as the source
    assert d.ip_src == sw.side(CLIENT).ip and d.ip_dst == sw.side(WB).ip and d.ip_ok
    assert d.eth_dst == mac_bytes(sw.side(WB).mac) and d.dport == RAIN_PORT
    sw.expect_nothing([CLIENT, WA], 0.1)
    rs.settle()
    assert rs.event("CHOSEN") == 1 and rs.event("DISPATCH") == 1 and rs.event("REPORT") == 2
    assert rs.loads(B) == (1, 1) and rs.loads(A) == (3, 3)
    assert rs.dispatches.read(B).packets == 1 and rs.dispatches.read(A).packets == 0


def test_power_of_two_picks_the_lower_reported_load(rs, sw):
    rs.send(WA, rs.report(WA, A, 50))
    rs.send(WB, rs.report(WB, B, 10))
    rs.settle()
    assert rs.loads(A) == (50, 50) and rs.loads(B) == (10, 10)
    rs.send(WB, rs.report(WB, B, 0))  # a report sets the load, whatever it was
    for n in range(30):
        rs.send(CLIENT, rs.task(CLIENT, n), passes=2)
    got = sw.expect_all(WB, 30, is_rain(Kind.DISPATCH, worker_id=B))
    assert [decode(f).rain.request_id for f in got] == list(range(30))
    sw.expect_nothing([CLIENT, WA], 0.1)
    rs.settle()
    assert rs.loads(B) == (30, 30) and rs.loads(A) == (50, 50)  # each dispatch added one
    assert rs.dispatches.read(B).packets == 30 and rs.dispatches.read(A).packets == 0
    assert rs.reports.read(A).packets == 1 and rs.reports.read(B).packets == 2
    assert rs.event("CHOSEN") == rs.event("DISPATCH") == 30


def test_a_dispatch_raises_the_load_so_the_next_tasks_alternate(rs, sw):
    rs.send(WA, rs.report(WA, A, 7))
    rs.send(WB, rs.report(WB, B, 7))
    rs.settle()
    order = [dispatched_to(sw, rs, n) for n in range(20)]
    # equal loads: each pair of tasks goes one to each worker (which first is the tie's)
    for i in range(0, 20, 2):
        assert {order[i], order[i + 1]} == {A, B}, order
    rs.settle()
    assert rs.loads(A) == rs.loads(B) == (17, 17)
    # a REPORT replaces what the dispatches added: B is idle again, so it takes the next two
    rs.send(WB, rs.report(WB, B, 15))
    rs.settle()
    assert [dispatched_to(sw, rs, n) for n in (20, 21)] == [B, B]
    assert rs.loads(B) == (17, 17) and rs.loads(A) == (17, 17)


def test_no_bound_on_worker_queues(rs, sw):
    """Both choices deep in work: the task still goes out, to the less loaded."""
    rs.send(WA, rs.report(WA, A, 60000))
    rs.send(WB, rs.report(WB, B, 60002))
    rs.settle()
    order = [dispatched_to(sw, rs, n) for n in range(6)]
    assert order[:2] == [A, A] and sorted(order[2:]) == [A, A, B, B]
    rs.settle()
    assert rs.loads(A) == rs.loads(B) == (60004, 60004)
    assert rs.event("DISPATCH") == 6 and rs.event("NO_WORKER") == 0
    sw.expect_nothing([CLIENT], 0.05)  # nothing rejected


def test_report_from_an_unknown_worker_is_dropped_and_counted(rs, sw):
    rs.send(WA, rs.report(WA, 7, 3))  # no select_worker entry for 7
    rs.send(WA, rs.report(WA, 1024, 3))  # beyond the loads' index: malformed
    rs.settle()
    sw.expect_nothing([CLIENT, WA, WB], 0.1)
    assert rs.event("UNKNOWN_WORKER") == 1 and rs.event("BAD_RAIN") == 1 and rs.event("REPORT") == 0
    assert rs.loads(7) == (0, 0) and rs.loads(0) == (0, 0)  # 1024 would have aliased 0
    assert rs.reports.read(7).packets == 0


def test_task_with_no_workers_configured_is_dropped_and_counted(rs, sw):
    rs.c.table("pick").clear()
    rs.send(CLIENT, rs.task(CLIENT, 1))
    rs.settle()
    sw.expect_nothing([CLIENT, WA, WB], 0.1)
    assert rs.event("NO_WORKER") == 1 and rs.event("CHOSEN") == 0


def test_malformed_frames_are_dropped_and_counted(rs, sw):
    task = rs.task(CLIENT, 1)
    rs.send(CLIENT, task[: 42 + 20])  # rain header cut short
    rs.send(CLIENT, task[:30])  # IPv4 header cut short
    bad_version = bytearray(task)
    bad_version[42] = 9
    rs.send(CLIENT, bytes(bad_version))
    # kinds outside the protocol are dropped even when their address has a route
    for kind in (0, 11, 200):
        h = bytearray(Header(kind=Kind.RESPONSE).pack())
        h[1] = kind
        rs.send(WA, frame(sw.side(WA), sw.side(CLIENT), bytes(h), 41002, RAIN_PORT))
    rs.settle()
    sw.expect_nothing([CLIENT, WA, WB], 0.1)
    assert rs.event("PARSER_ERROR") == 2 and rs.event("BAD_RAIN") == 4
    assert rs.event("CHOSEN") == rs.event("DISPATCH") == 0
    assert rs.loads(A) == rs.loads(B) == (0, 0)


def test_responses_and_other_traffic_are_forwarded_by_address(rs, sw):
    resp = Header(kind=Kind.RESPONSE, client_id=0x0100, request_id=5, worker_id=A)
    rs.send(WA, frame(sw.side(WA), sw.side(CLIENT), resp.pack(), 41002, RAIN_PORT))
    d = decode(sw.expect(CLIENT, is_rain(Kind.RESPONSE, request_id=5)))
    assert d.ip_ok and d.eth_dst == mac_bytes(sw.side(CLIENT).mac)
    rs.send(WA, frame(sw.side(WA), SERVICE, b"x" * 20, 5000, 6000))  # no route: dropped
    rs.settle()
    assert rs.event("FORWARDED") == 1 and rs.event("NO_ROUTE") == 1
    assert rs.loads(A) == (0, 0)  # a response changes no load: the worker's REPORT does


def test_every_pass_counts_one_event(rs, sw):
    """Counted per ingress pass: a dispatched task twice (CHOSEN, then DISPATCH)."""
    rs.send(WA, rs.report(WA, A, 1))
    for n in range(5):
        rs.send(CLIENT, rs.task(CLIENT, n), passes=2)
    sw.expect_all(WB, 1, is_rain(Kind.DISPATCH))
    rs.settle()
    total = sum(v.packets for v in rs.events.read_all())
    assert total == 1 + 2 * 5 == rs.sent
