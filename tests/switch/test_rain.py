"""Packet tests of the Rain program (switch/p4/rain.p4): frames into ports, what comes
out checked, the switch programmed and read only through BFRuntime.

Topology: port 1 = client host 1, port 2 = worker host A, port 3 = worker host B,
port 4 = client host 2. Run against the emulator by default (tests/switch/harness.py).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from hosts.proto import Flag, Header, Kind, large_payload
from tests.netpeer import frame, mac_bytes
from tests.switch.harness import SwitchUnderTest
from tests.switch.rain_setup import SERVICE, Rain, decode, ip_int, is_rain, is_roce, mac_int, roce

pytestmark = pytest.mark.integration

CLIENT, WA, WB, CLIENT2 = 1, 2, 3, 4


@pytest.fixture(scope="module")
def sw():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with SwitchUnderTest(ports=4) as s:
        yield s


@pytest.fixture
def rain(sw):
    r = Rain(sw)
    r.reset()
    r.route(CLIENT, WA, WB, CLIENT2)
    r.slice(0, 0, 63)
    r.worker(1, WA)
    r.worker(2, WB)
    r.client_host(1, CLIENT)
    r.client_host(2, CLIENT2)
    yield r
    for i in sw.unexpected:
        sw.unexpected[i].clear()


def client_id(host: int, n: int = 0) -> int:
    return host << 8 | n


# ------------------------------------------------------------------ the bidirectional queue


def test_task_then_token(rain, sw):
    rain.send(CLIENT, rain.task(CLIENT, client_id(1, 3), 77, data=b"ABCDEFGH"))
    rain.settle()
    sw.expect_nothing([CLIENT, WA, WB, CLIENT2], 0.1)
    assert rain.bal() == -1 and rain.event("TASK_QUEUED") == 1
    rain.send(WB, rain.token(WB, 2))
    f = sw.expect(WB, is_rain(Kind.DISPATCH))
    d = decode(f)
    h = d.rain
    assert (h.client_id, h.request_id, h.data, h.worker_id, h.slice) == (client_id(1, 3), 77, b"ABCDEFGH", 2, 0)
    assert h.flags & Flag.INT == 0  # config_int's default: dont_stamp
    # the worker answers the client: the client's IP is restored (client_addr), dst is the worker
    assert d.ip_src == sw.side(CLIENT).ip and d.ip_dst == sw.side(WB).ip and d.ip_ok
    assert d.eth_dst == mac_bytes(sw.side(WB).mac)
    sw.expect_nothing([CLIENT, WA, CLIENT2], 0.1)
    assert rain.bal() == 0 and rain.event("DISPATCH_QUEUED") == 1


def test_token_then_task(rain, sw):
    rain.send(WA, rain.token(WA, 1))
    rain.settle()
    sw.expect_nothing([CLIENT, WA, WB, CLIENT2], 0.1)
    assert rain.bal() == 1 and rain.event("TOKEN_QUEUED") == 1
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 5, data=b"12345678"))
    f = sw.expect(WA, is_rain(Kind.DISPATCH))
    d = decode(f)
    assert (d.rain.worker_id, d.rain.request_id, d.rain.data, d.rain.client_id) == (1, 5, b"12345678", client_id(1))
    assert d.ip_src == sw.side(CLIENT).ip and d.ip_dst == sw.side(WA).ip and d.ip_ok
    assert d.eth_src == mac_bytes(sw.side(CLIENT).mac) and d.eth_dst == mac_bytes(sw.side(WA).mac)
    assert rain.bal() == 0 and rain.event("DISPATCH_DIRECT") == 1


def test_only_one_side_is_ever_non_empty(rain, sw):
    """Random tasks and tokens; after each, the balance read through BFRuntime equals
    tokens waiting (> 0) or minus tasks waiting (< 0), and dispatches happen exactly
    when the other side was non-empty."""
    rng = random.Random(7)
    tasks = tokens = 0  # what waits in the switch (model)
    dispatched = 0
    for n in range(40):
        if rng.random() < 0.5:
            rain.send(CLIENT, rain.task(CLIENT, client_id(1), n))
            if tokens:
                tokens -= 1
                dispatched += 1
                sw.expect(WA, is_rain(Kind.DISPATCH, request_id=n))
            else:
                tasks += 1
        else:
            rain.send(WA, rain.token(WA, 1))
            if tasks:
                tasks -= 1
                dispatched += 1
                sw.expect(WA, is_rain(Kind.DISPATCH))
            else:
                tokens += 1
        rain.settle()
        assert tasks == 0 or tokens == 0
        assert rain.bal() == tokens - tasks
    assert rain.event("DISPATCH_DIRECT") + rain.event("DISPATCH_QUEUED") == dispatched
    sw.expect_nothing([CLIENT, WB, CLIENT2], 0.05)


def test_fifo_order_of_tasks(rain, sw):
    for rid in range(10, 16):
        rain.send(CLIENT, rain.task(CLIENT, client_id(1), rid, data=bytes([rid]) * 8))
    rain.settle()
    assert rain.bal() == -6
    got = []
    for k in range(6):
        port = WA if k % 2 == 0 else WB
        rain.send(port, rain.token(port, 1 if port == WA else 2))
        h = decode(sw.expect(port, is_rain(Kind.DISPATCH))).rain
        got.append((h.request_id, h.data))
    assert got == [(rid, bytes([rid]) * 8) for rid in range(10, 16)]
    # the entries read back through BFRuntime: owner/request at the ring's indexes 0..5
    assert [rain.c.register("request").read(i)[0] for i in range(6)] == list(range(10, 16))
    assert rain.c.register("head").read(0)[0] == 6 and rain.c.register("tail").read(0)[0] == 6


def test_fifo_order_of_tokens(rain, sw):
    rain.worker(3, WA)
    rain.worker(4, WB)
    order = [(WA, 1), (WB, 2), (WB, 4), (WA, 3), (WA, 1)]
    for port, wid in order:
        rain.send(port, rain.token(port, wid))
        rain.settle()  # frames on different ports have no order between them, here or on a Tofino
    assert rain.bal() == 5
    assert [rain.c.register("owner").read(i)[0] for i in range(5)] == [w for _, w in order]
    for k, (port, wid) in enumerate(order):
        rain.send(CLIENT, rain.task(CLIENT, client_id(1), 100 + k))
        h = decode(sw.expect(port, is_rain(Kind.DISPATCH, request_id=100 + k))).rain
        assert h.worker_id == wid


def test_slices_are_isolated(rain, sw):
    rain.slice(1, 64, 127)
    rain.map_type(9, 1)
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 1, task_type=9))  # slice 1
    rain.send(WA, rain.token(WA, 1, s=0))  # slice 0: must not take it
    rain.settle()
    sw.expect_nothing([WA, WB], 0.1)
    assert (rain.bal(0), rain.bal(1)) == (1, -1)
    assert rain.c.register("tail").read(1)[0] == 65  # slice 1 writes its own region
    rain.send(WB, rain.token(WB, 2, s=1))
    h = decode(sw.expect(WB, is_rain(Kind.DISPATCH, request_id=1))).rain
    assert (h.slice, h.task_type, h.worker_id) == (1, 9, 2)
    # an unmapped type goes to slice 0, where worker 1's token waits
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 2, task_type=3))
    assert decode(sw.expect(WA, is_rain(Kind.DISPATCH, request_id=2))).rain.slice == 0
    assert (rain.bal(0), rain.bal(1)) == (0, 0)


# ------------------------------------------------------------------ capacity


def test_queue_full_rejects_tasks_back_to_the_client(rain, sw):
    rain.slice(2, 200, 201)  # capacity 2
    rain.map_type(2, 2)
    for rid in (1, 2):
        rain.send(CLIENT, rain.task(CLIENT, client_id(1), rid, task_type=2))
    rain.settle()
    assert rain.bal(2) == -2
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 3, task_type=2))
    sent = decode(rain.task(CLIENT, client_id(1), 3, task_type=2))
    f = sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=3))
    d = decode(f)
    assert d.eth_dst == mac_bytes(sw.side(CLIENT).mac) and d.eth_src == mac_bytes(SERVICE.mac)
    assert d.ip_dst == sw.side(CLIENT).ip and d.ip_src == SERVICE.ip and d.ip_ok
    assert (d.sport, d.dport) == (sent.dport, sent.sport)  # a reply: UDP ports swapped
    assert rain.bal(2) == -2 and rain.event("TASK_REJECTED") == 1
    sw.expect_nothing([WA, WB, CLIENT2], 0.05)


def test_surplus_tokens_are_dropped_and_counted(rain, sw):
    rain.slice(3, 300, 302)  # capacity 3
    for _ in range(5):
        rain.send(WA, rain.token(WA, 1, s=3))
    rain.settle()
    sw.expect_nothing([CLIENT, WA, WB, CLIENT2], 0.1)
    assert rain.bal(3) == 3
    assert (rain.event("TOKEN_QUEUED"), rain.event("TOKEN_DROPPED")) == (3, 2)


def test_unconfigured_slice_holds_nothing(rain, sw):
    rain.map_type(5, 5)  # slice 5 has no config_slice entry
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 9, task_type=5))
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=9))
    rain.send(WA, rain.token(WA, 1, s=5))
    rain.settle()
    assert rain.event("TOKEN_DROPPED") == 1 and rain.bal(5) == 0


def test_dispatch_to_unknown_worker_is_dropped_and_counted(rain, sw):
    rain.send(WA, rain.token(WA, 99))  # no select_worker entry for 99
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 1))
    rain.settle()
    sw.expect_nothing([CLIENT, WA, WB, CLIENT2], 0.1)
    assert rain.event("NO_WORKER") == 1


# ------------------------------------------------------------------ the RDMA engine

QPN = {1: 0x000123, 2: 0x000456}
RKEY = {1: 0x00ABCDEF, 2: 0x11223344}
BASE = {1: 0x00007F0000001000, 2: 0x00007F10FFFFF000}  # worker 2's low half wraps when the slot is added
PSN0 = {1: 16, 2: 0xFFFFFF}  # worker 2's 24-bit PSN wraps after one WRITE
SWITCH_MAC, SWITCH_IP = 0x0200000000FE, 0x0A0A01FE


def rdma(rain: Rain, sw, last_slot: int = 3, mgid: int = 5) -> None:
    rain.c.table("config_slice").modify(
        0,
        "set_slice_config",
        {
            "first": 0,
            "last": 63,
            "neg_cap": (-64) & 0xFFFFFFFF,
            "neg_large_cap": (-min(64, last_slot + 1) if mgid else 0) & 0xFFFFFFFF,
            "last_slot": last_slot,
            "mgid": mgid,
        },
    )
    for wid, port in ((1, WA), (2, WB)):
        s = sw.side(port)
        rain.c.pre.add_node(wid, rid=wid, dev_ports=[sw.dev(port)])
        rain.c.table("build_write").add(
            wid,
            "make_write",
            {
                "smac": SWITCH_MAC,
                "dmac": mac_int(s),
                "sip": SWITCH_IP,
                "dip": ip_int(s),
                "tos": 26 << 2,
                "opcode": 0x0A,
                "qpn": QPN[wid],
                "rkey": RKEY[wid],
                "va_hi": BASE[wid] >> 32,
                "va_lo": BASE[wid] & 0xFFFFFFFF,
            },
        )
        rain.c.register("psn").write(wid, PSN0[wid])
    rain.c.pre.add_group(mgid, [1, 2])


def large_task(rain: Rain, rid: int, size: int = 200) -> tuple[bytes, bytes]:
    body = large_payload(client_id(1), rid, size) + b"\xee\xee\xee\xee"  # + the 4-byte pad that becomes the iCRC
    return rain.task(CLIENT, client_id(1), rid, flags=Flag.LARGE, payload=body), body


def test_large_task_without_token_is_prewritten_to_every_slice_worker(rain, sw):
    rdma(rain, sw)
    sizes = (200, 64, 1000)
    bodies = []
    for k, size in enumerate(sizes):
        f, body = large_task(rain, 50 + k, size)
        bodies.append(body)
        rain.send(CLIENT, f)
    for wid, port in ((1, WA), (2, WB)):
        s = sw.side(port)
        for k, size in enumerate(sizes):
            d, bth, reth, payload = roce(sw.expect(port, is_roce))
            assert d.eth_dst == mac_bytes(s.mac) and d.eth_src == SWITCH_MAC.to_bytes(6, "big")
            assert (d.ip_src, d.ip_dst, d.ip_ok) == ("10.10.1.254", s.ip, True)
            assert (d.sport, d.dport, d.udp_csum) == (49152, 4791, 0)
            assert d.udp_len == 8 + 28 + size + 4 and d.ip_total_len == 20 + d.udp_len
            assert (bth.opcode, bth.dst_qp, bth.pkey, bth.se_m_pad_tver) == (0x0A, QPN[wid], 0xFFFF, 0x40)
            assert bth.psn == (PSN0[wid] + k) & 0xFFFFFF  # consecutive per worker (24 bits)
            va = (BASE[wid] >> 32 << 32) | ((BASE[wid] + (k << 11)) & 0xFFFFFFFF)  # low 32 bits added only
            assert (reth.va, reth.rkey, reth.dma_len) == (va, RKEY[wid], size)
            assert payload == bodies[k]  # slot header + data, the pad standing as the iCRC
    assert rain.event("PREWRITE") == 3 and rain.bal() == -3
    assert [rain.c.register("psn").read(w)[0] for w in (1, 2)] == [PSN0[1] + 3, PSN0[2] + 3]
    assert [rain.c.counter("writes").read(w).packets for w in (1, 2)] == [3, 3]
    assert rain.c.register("ring_offset").read(0)[0] == 3
    # now worker 2's token takes the oldest: a descriptor {slot 0, length}, to worker 2 only
    rain.send(WB, rain.token(WB, 2))
    h = decode(sw.expect(WB, is_rain(Kind.DISPATCH))).rain
    assert h.flags & Flag.DESC and not h.flags & Flag.LARGE
    assert (h.request_id, h.client_id, h.desc) == (50, client_id(1), (0, 200))
    rain.send(WA, rain.token(WA, 1))
    h = decode(sw.expect(WA, is_rain(Kind.DISPATCH))).rain
    assert (h.request_id, h.desc) == (51, (1, 64))
    sw.expect_nothing([CLIENT, CLIENT2], 0.05)
    sw.expect_nothing([WA], 0.05)


def test_ring_slots_wrap_at_last_slot(rain, sw):
    rdma(rain, sw, last_slot=1)
    for k in range(2):
        rain.send(CLIENT, large_task(rain, k, 32)[0])
    rain.settle()
    vas = [roce(sw.expect(WA, is_roce))[2].va for _ in range(2)]
    rain.send(WA, rain.token(WA, 1))  # the first leaves the queue: its slot may be taken again
    assert decode(sw.expect(WA, is_rain(Kind.DISPATCH))).rain.desc[0] == 0  # slot 0
    rain.send(CLIENT, large_task(rain, 2, 32)[0])
    vas.append(roce(sw.expect(WA, is_roce))[2].va)
    base = BASE[1]
    assert vas == [base, base + 2048, base]


def test_waiting_large_tasks_are_bounded_by_the_ring(rain, sw):
    # 2 ring slots: a third waiting large task would overwrite the first one's slot
    rdma(rain, sw, last_slot=1)
    for k in range(3):
        rain.send(CLIENT, large_task(rain, k, 32)[0])
        rain.settle()
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=2))
    assert rain.event("PREWRITE") == 2 and rain.event("LARGE_REJECTED") == 1
    assert rain.bal() == -2


def test_large_task_that_finds_a_token_is_forwarded_whole(rain, sw):
    rdma(rain, sw)
    rain.send(WA, rain.token(WA, 1))
    f, body = large_task(rain, 60, 300)
    rain.send(CLIENT, f)
    d = decode(sw.expect(WA, is_rain(Kind.DISPATCH)))
    assert d.rain.flags & Flag.LARGE and not d.rain.flags & Flag.DESC
    assert d.payload[32:] == body and d.rain.request_id == 60
    sw.expect_nothing([WA, WB], 0.1)
    assert rain.event("PREWRITE") == 0 and rain.event("DISPATCH_DIRECT") == 1


def test_large_task_without_rdma_ring_is_rejected_when_no_token(rain, sw):
    # slice 0 has mgid 0 (no RDMA ring): a large task may take a token but never wait
    f, _ = large_task(rain, 61, 100)
    rain.send(CLIENT, f)
    sw.expect(CLIENT, is_rain(Kind.REJECT, request_id=61))
    assert rain.bal() == 0


def test_replica_for_worker_without_rdma_state_is_dropped(rain, sw):
    rdma(rain, sw)
    rain.c.table("build_write").delete(2)
    before = None if sw.external else rain.stats()["drops"]["egress_skip_replica"]
    rain.send(CLIENT, large_task(rain, 70, 40)[0])
    sw.expect(WA, is_roce)
    sw.expect_nothing([WB], 0.15)
    if before is None:
        return
    # the P4 counts such a drop nowhere; the emulator reports it in its drop statistics
    deadline = time.monotonic() + 3
    while rain.stats()["drops"]["egress_skip_replica"] == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rain.stats()["drops"]["egress_skip_replica"] == before + 1


# ------------------------------------------------------------------ telemetry


def test_int_on_dispatched_tasks(rain, sw):
    rain.c.table("config_int").set_default("stamp")
    for rid in range(3):
        rain.send(CLIENT, rain.task(CLIENT, client_id(1), rid))
    rain.settle()
    time.sleep(0.02)  # the tasks must wait a measurable time
    for left in (2, 1, 0):
        rain.send(WA, rain.token(WA, 1))
        h = decode(sw.expect(WA, is_rain(Kind.DISPATCH))).rain
        assert h.flags & Flag.INT
        assert h.int_qlen == left
        assert 15_000_000 < h.int_qdelay_ns < 5_000_000_000
    # a task that meets a token waited 0 ns behind 0 tasks
    rain.send(WA, rain.token(WA, 1))
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 9))
    h = decode(sw.expect(WA, is_rain(Kind.DISPATCH, request_id=9))).rain
    assert h.flags & Flag.INT and (h.int_qdelay_ns, h.int_qlen) == (0, 0)


# ------------------------------------------------------------------ forwarding


def test_responses_are_forwarded_by_ip(rain, sw):
    h = Header(kind=Kind.RESPONSE, client_id=client_id(2), request_id=4, worker_id=1)
    f = frame(sw.side(WA), sw.side(CLIENT2), h.pack() + b"result", 5000, 21057)
    rain.send(WA, f)
    d = decode(sw.expect(CLIENT2, is_rain(Kind.RESPONSE)))
    assert d.eth_dst == mac_bytes(sw.side(CLIENT2).mac) and d.ttl == 63 and d.ip_ok
    assert d.payload[32:] == b"result"
    # and plain UDP to an unknown address is dropped and counted
    rain.send(WA, frame(sw.side(WA), SERVICE, b"x", 1, 2))
    rain.settle()
    assert rain.event("FORWARDED") == 1 and rain.event("NO_ROUTE") == 1
    sw.expect_nothing([CLIENT, WB], 0.05)


def test_malformed_frames_are_counted_and_the_switch_still_works(rain, sw):
    rng = random.Random(3)
    good = rain.task(CLIENT, client_id(1), 1)
    bad = [
        bytes(good[: 14 + 10]),  # truncated IPv4
        bytes(good[: 14 + 20 + 4]),  # truncated UDP
        bytes(good[: 14 + 20 + 8 + 20]),  # truncated rain header
    ]
    bad_version = bytearray(good)
    bad_version[42] = 9
    garbage = [bytes(rng.getrandbits(8) for _ in range(rng.randint(14, 300))) for _ in range(50)]
    garbage = [b"\xff" * 6 + bytes(6) + b"\x08\x00" + g[14:] for g in garbage]  # IPv4-typed garbage
    for f in bad + [bytes(bad_version)] + garbage:
        rain.send(CLIENT, f)
    rain.settle()
    assert rain.event("PARSER_ERROR") >= 3
    assert rain.event("BAD_RAIN") >= 1
    if not sw.external:
        assert rain.stats()["drops"]["internal_error"] == 0
    sw.drain()
    # still works
    rain.send(WA, rain.token(WA, 1))
    rain.send(CLIENT, rain.task(CLIENT, client_id(1), 77))
    sw.expect(WA, is_rain(Kind.DISPATCH, request_id=77))


def test_disabled_port_drops_both_ways_and_counts(rain, sw):
    c = rain.c
    if sw.external:
        pytest.skip("checks the emulator's own drop statistics")
    c.ports.modify(sw.dev(CLIENT2), enable=False)
    assert not c.ports.is_up(sw.dev(CLIENT2))
    before = rain.stats()["drops"]
    h = Header(kind=Kind.RESPONSE, client_id=client_id(2), request_id=4, worker_id=1)
    rain.send(WA, frame(sw.side(WA), sw.side(CLIENT2), h.pack(), 5000, 21057))
    rain.settle()
    sw.send(CLIENT2, frame(sw.side(CLIENT2), sw.side(WA), b"in", 1, 2))
    sw.expect_nothing([CLIENT2, WA], 0.2)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        after = rain.stats()["drops"]
        if (
            after["tx_port_disabled"] > before["tx_port_disabled"]
            and after["rx_port_disabled"] > before["rx_port_disabled"]
        ):
            break
        time.sleep(0.1)
    assert after["tx_port_disabled"] == before["tx_port_disabled"] + 1
    assert after["rx_port_disabled"] == before["rx_port_disabled"] + 1
    c.ports.modify(sw.dev(CLIENT2), enable=True)
    assert c.ports.is_up(sw.dev(CLIENT2))


def test_counters_read_through_bfruntime_match_the_traffic(rain, sw):
    for rid in range(4):
        rain.send(CLIENT, rain.task(CLIENT, client_id(1), rid))
    for _ in range(6):
        rain.send(WA, rain.token(WA, 1))
    rain.settle()
    sw.expect_all(WA, 4, is_rain(Kind.DISPATCH))
    ev = {name: rain.event(name) for name in ("TASK_QUEUED", "DISPATCH_QUEUED", "TOKEN_QUEUED")}
    assert ev == {"TASK_QUEUED": 4, "DISPATCH_QUEUED": 4, "TOKEN_QUEUED": 2}
    assert rain.bal() == 2
    task_len = len(rain.task(CLIENT, client_id(1), 0))
    assert rain.events.read(4).bytes == 4 * task_len
    stat = rain.c.table("$PORT_STAT").get({"$DEV_PORT": sw.dev(WA)}).data
    assert stat["$FramesTransmittedOK"] >= 4 and stat["$FramesReceivedOK"] >= 6


def test_emulator_stops_cleanly_on_sigterm():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    with SwitchUnderTest(ports=1, tag=f"rmq{os.getpid() % 10000}") as s:
        assert s.stop_emulator() == 0


def test_port_without_carrier_is_down_and_drops_are_counted(rain, sw):
    if sw.external:
        pytest.skip("takes a peer's link down")
    import subprocess

    peer = sw.side(CLIENT2)

    def link(state: str) -> None:
        subprocess.run(["ip", "netns", "exec", peer.netns, "ip", "link", "set", peer.iface, state], check=True)

    def wait(pred, what: str) -> None:
        deadline = time.monotonic() + 5
        while not pred():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    response = frame(sw.side(WA), sw.side(CLIENT2), Header(kind=Kind.RESPONSE, request_id=1).pack(), 5000, 21057)
    port_stat = rain.c.table("$PORT_STAT")

    def stat() -> tuple[int, int]:  # the port's link losses and its frames dropped while down, over BFRuntime
        d = port_stat.get({"$DEV_PORT": sw.dev(CLIENT2)}).data
        return d["$LinkDownEvents"], d["$FramesDroppedPortDown"]

    events0, dropped0 = stat()
    link("down")
    try:
        wait(lambda: not rain.c.ports.is_up(sw.dev(CLIENT2)), "$PORT_UP still true")
        before = rain.stats()["drops"]["tx_link_down"]
        time.sleep(0.3)  # the data plane looks at carriers every 0.25 s
        rain.send(WA, response)
        wait(lambda: rain.stats()["drops"]["tx_link_down"] == before + 1, "tx_link_down not counted")
        assert stat() == (events0 + 1, dropped0 + 1)  # per port, where a controller reads it
    finally:
        link("up")
    wait(lambda: rain.c.ports.is_up(sw.dev(CLIENT2)), "$PORT_UP not back")
    assert stat() == (events0 + 1, dropped0 + 1)  # coming back up is no loss
    time.sleep(0.3)
    rain.send(WA, response)
    sw.expect(CLIENT2, is_rain(Kind.RESPONSE))
