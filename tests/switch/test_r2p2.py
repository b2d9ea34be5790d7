"""Packet tests of the R2P2-SW program (switch/p4/r2p2.p4): JBSQ(n) by recirculation.
Frames into ports, what comes out checked, the switch programmed and read only through
BFRuntime.

Topology: port 1 = client, ports 2, 3, 4 = workers A, B, C (one worker thread each,
worker ids 0, 1, 2). Run against the emulator by default (tests/switch/harness.py).
"""

from __future__ import annotations

import os
import random

import pytest

from hosts.proto import Flag, Header, Kind
from tests.netpeer import frame, mac_bytes
from tests.switch.harness import SwitchUnderTest
from tests.switch.r2p2_setup import R2p2
from tests.switch.rain_setup import RAIN_PORT, SERVICE, decode, is_rain

pytestmark = pytest.mark.integration

CLIENT, WA, WB, WC = 1, 2, 3, 4
PORT_OF = {0: WA, 1: WB, 2: WC}


@pytest.fixture(scope="module")
def sw():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with SwitchUnderTest(ports=4, program="r2p2") as s:
        yield s


@pytest.fixture
def r2(sw):
    r = R2p2(sw)
    r.reset()
    r.route(CLIENT, WA, WB, WC)
    r.worker(0, WA)
    r.worker(1, WB)
    yield r
    for i in sw.unexpected:
        sw.unexpected[i].clear()


def cid(n: int = 0) -> int:
    return 1 << 8 | n


# ------------------------------------------------------------------ dispatch below the bound


def test_task_goes_to_a_worker_below_the_bound(r2, sw):
    r2.configure(workers=2, n=1)
    sent = r2.task(CLIENT, cid(3), 77, data=b"ABCDEFGH")
    r2.send(CLIENT, sent)
    d = decode(sw.expect(WA, is_rain(Kind.DISPATCH)))
    h = d.rain
    assert (h.worker_id, h.client_id, h.request_id, h.data) == (0, cid(3), 77, b"ABCDEFGH")
    assert h.report == 0 and not h.flags & Flag.RECIRC  # no pass recirculated
    # the worker answers the client: the client's addresses stay the source
    assert d.ip_src == sw.side(CLIENT).ip and d.ip_dst == sw.side(WA).ip and d.ip_ok
    assert d.eth_dst == mac_bytes(sw.side(WA).mac) and d.eth_src == mac_bytes(sw.side(CLIENT).mac)
    assert (d.sport, d.dport) == (decode(sent).sport, RAIN_PORT)
    r2.settle()
    sw.expect_nothing([CLIENT, WB, WC], 0.05)
    assert r2.depths(0, 1) == [1, 0] and r2.cursor.read(0)[0] == 1
    assert (r2.event("DISPATCHED"), r2.event("RECIRCULATED")) == (1, 0)


def test_reported_depths_decide_and_a_full_worker_is_passed_by_recirculation(r2, sw):
    r2.configure(workers=2, n=2)
    r2.send(WA, r2.report(WA, 0, 2))  # worker 0 at the bound
    r2.send(WB, r2.report(WB, 1, 1))  # worker 1 one below it
    r2.settle()
    assert r2.depths(0, 1) == [2, 1] and r2.event("REPORT") == 2
    sw.expect_nothing([CLIENT, WA, WB, WC], 0.05)  # a REPORT ends in the switch
    r2.send(CLIENT, r2.task(CLIENT, cid(), 5))
    h = decode(sw.expect(WB, is_rain(Kind.DISPATCH, request_id=5))).rain
    # pass 1 found worker 0 full and recirculated; pass 2 took worker 1
    assert h.worker_id == 1 and h.report == 1 and h.flags & Flag.RECIRC
    r2.settle()
    assert r2.depths(0, 1) == [2, 2]
    assert (r2.event("RECIRCULATED"), r2.event("DISPATCHED")) == (1, 1)
    sw.expect_nothing([CLIENT, WA, WC], 0.05)


# ------------------------------------------------------------------ every worker at the bound


def test_all_at_the_bound_recirculates_until_a_report_lowers_a_depth(r2, sw):
    r2.configure(workers=2, n=1)
    r2.send(WA, r2.report(WA, 0, 1))
    r2.send(WB, r2.report(WB, 1, 1))
    r2.settle()
    r2.send(CLIENT, r2.task(CLIENT, cid(), 9))
    r2.sent -= 1  # it does not end until a worker takes it
    r2.wait_recirculations(20)
    sw.expect_nothing([CLIENT, WA, WB, WC], 0.1)
    assert r2.event("DISPATCHED") == 0 and r2.depths(0, 1) == [1, 1]
    r2.send(WB, r2.report(WB, 1, 0))  # worker 1 finished its task
    h = decode(sw.expect(WB, is_rain(Kind.DISPATCH, request_id=9))).rain
    assert h.worker_id == 1 and h.flags & Flag.RECIRC
    r2.sent += 1
    r2.settle()
    r2.wait_quiet()
    passes = r2.event("RECIRCULATED")
    assert h.report == passes >= 20  # the frame counted its own passes, the switch too
    assert r2.depths(0, 1) == [1, 1] and r2.event("DISPATCHED") == 1
    sw.expect_nothing([CLIENT, WA, WC], 0.05)


def test_n2_allows_two_outstanding_per_worker_and_not_three(r2, sw):
    r2.configure(workers=1, n=2)
    for rid in (1, 2, 3):
        r2.send(CLIENT, r2.task(CLIENT, cid(), rid))
    got = [decode(sw.expect(WA, is_rain(Kind.DISPATCH))).rain.request_id for _ in range(2)]
    assert got == [1, 2]
    r2.sent -= 1
    r2.settle()
    r2.wait_recirculations(5)
    sw.expect_nothing([CLIENT, WA, WB, WC], 0.1)  # the third waits in recirculation
    assert r2.depths(0) == [2] and r2.event("DISPATCHED") == 2
    r2.send(WA, r2.report(WA, 0, 1))  # one of the two done
    h = decode(sw.expect(WA, is_rain(Kind.DISPATCH, request_id=3))).rain
    assert h.worker_id == 0 and h.report > 0
    r2.sent += 1
    r2.settle()
    assert r2.depths(0) == [2] and r2.event("DISPATCHED") == 3


def test_round_robin_order_across_workers(r2, sw):
    r2.worker(2, WC)
    r2.configure(workers=3, n=8)
    for rid in range(7):
        r2.send(CLIENT, r2.task(CLIENT, cid(), rid))
    for rid in range(7):
        wid = rid % 3
        h = decode(sw.expect(PORT_OF[wid], is_rain(Kind.DISPATCH, request_id=rid))).rain
        assert h.worker_id == wid and h.report == 0
    r2.settle()
    assert r2.depths(0, 1, 2) == [3, 2, 2] and r2.cursor.read(0)[0] == 1
    assert (r2.event("DISPATCHED"), r2.event("RECIRCULATED")) == (7, 0)


# ------------------------------------------------------------------ the pass bound


def test_the_pass_bound_rejects_back_to_the_client(r2, sw):
    r2.configure(workers=2, n=1, max_passes=5)
    r2.send(WA, r2.report(WA, 0, 3))
    r2.send(WB, r2.report(WB, 1, 1))
    sent = r2.task(CLIENT, cid(4), 21)
    r2.send(CLIENT, sent)
    d = decode(sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=21)))
    h = d.rain
    assert h.client_id == cid(4) and h.report == 4 and h.flags & Flag.RECIRC  # 4 recirculated, the 5th rejected
    assert d.eth_dst == mac_bytes(sw.side(CLIENT).mac) and d.eth_src == mac_bytes(SERVICE.mac)
    assert d.ip_dst == sw.side(CLIENT).ip and d.ip_src == SERVICE.ip and d.ip_ok
    assert (d.sport, d.dport) == (RAIN_PORT, decode(sent).sport)  # a reply: UDP ports swapped
    r2.settle()
    assert (r2.event("RECIRCULATED"), r2.event("REJECTED"), r2.event("DISPATCHED")) == (4, 1, 0)
    assert r2.depths(0, 1) == [3, 1]  # a rejected task takes no slot
    sw.expect_nothing([WA, WB, WC], 0.05)


def test_unconfigured_switch_rejects_on_the_first_pass(r2, sw):
    r2.send(CLIENT, r2.task(CLIENT, cid(), 8))  # config's default: no worker takes a task
    h = decode(sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=8))).rain
    assert h.report == 0
    r2.settle()
    assert (r2.event("REJECTED"), r2.event("RECIRCULATED")) == (1, 0) and r2.depths(0) == [0]


# ------------------------------------------------------------------ bad input


def test_report_for_unknown_or_out_of_range_worker_is_dropped_and_counted(r2, sw):
    r2.configure(workers=2, n=1)
    r2.send(WC, r2.report(WC, 5, 3))  # no worker table entry for 5
    r2.send(WC, r2.report(WC, 1024 + 1, 3))  # beyond the depth register: would alias worker 1
    r2.settle()
    sw.expect_nothing([CLIENT, WA, WB, WC], 0.05)
    assert (r2.event("NO_WORKER"), r2.event("BAD_RAIN"), r2.event("REPORT")) == (1, 1, 0)
    assert r2.depths(0, 1, 5) == [0, 0, 0]
    # a task to a worker id without an entry (the cursor reaches 2) is dropped and counted
    r2.configure(workers=3, n=1)
    for rid in range(3):
        r2.send(CLIENT, r2.task(CLIENT, cid(), rid))
    sw.expect(WA, is_rain(Kind.DISPATCH, request_id=0))
    sw.expect(WB, is_rain(Kind.DISPATCH, request_id=1))
    r2.settle()
    assert r2.event("NO_WORKER") == 2 and r2.depths(2) == [0]


def test_malformed_frames_are_dropped_and_counted_and_the_switch_still_works(r2, sw):
    r2.configure(workers=2, n=1)
    rng = random.Random(5)
    good = r2.task(CLIENT, cid(), 1)
    truncated = [good[: 14 + 10], good[: 14 + 20 + 4], good[: 14 + 20 + 8 + 20]]
    bad_version = bytearray(good)
    bad_version[42] = 9
    bad_kinds = []
    for kind in (0, 11, 200):
        f = bytearray(good)
        f[43] = kind
        bad_kinds.append(bytes(f))
    recirc_from_host = r2.task(CLIENT, cid(), 2, flags=Flag.RECIRC)  # hosts never set it
    garbage = [bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 200))) for _ in range(30)]
    garbage = [b"\xff" * 6 + bytes(6) + b"\x08\x00" + g[14:] for g in garbage]
    for f in truncated + [bytes(bad_version), *bad_kinds, recirc_from_host]:
        r2.send(CLIENT, f)
    r2.settle()
    assert r2.event("PARSER_ERROR") == 3 and r2.event("BAD_RAIN") == 5
    for f in garbage:
        r2.send(CLIENT, f)
    r2.settle()
    sw.expect_nothing([CLIENT, WA, WB, WC], 0.05)
    assert r2.depths(0, 1) == [0, 0] and r2.cursor.read(0)[0] == 0 and r2.event("DISPATCHED") == 0
    if not sw.external:
        import json

        assert json.loads((sw.log_dir / "stats.json").read_text())["drops"]["internal_error"] == 0
    r2.send(CLIENT, r2.task(CLIENT, cid(), 77))
    sw.expect(WA, is_rain(Kind.DISPATCH, request_id=77))


def test_responses_and_other_traffic_are_forwarded(r2, sw):
    h = Header(kind=Kind.RESPONSE, client_id=cid(), request_id=4, worker_id=0, report=0)
    r2.send(WA, frame(sw.side(WA), sw.side(CLIENT), h.pack(), 5000, RAIN_PORT))
    got = decode(sw.expect(CLIENT, is_rain(Kind.RESPONSE, request_id=4)))
    assert got.ip_ok and got.ttl == 63
    r2.settle()
    assert r2.event("FORWARDED") == 1 and r2.depths(0) == [0]  # a response is no report
