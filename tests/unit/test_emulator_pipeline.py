"""The emulator's Rain pipeline in-process (no sockets): edge cases of the P4's
semantics that packet tests reach only slowly, the RoCEv2 test vector of
docs/tofino.md, and garbage that must never raise."""

from __future__ import annotations

import random
import struct

import pytest

from hosts.proto import Flag, Header, Kind, large_payload
from switch.emulator import headers as H
from switch.emulator.pipeline import Pipeline
from switch.emulator.rain import make_store

CLIENT_MAC, SW_MAC = bytes.fromhex("02524d000001"), bytes.fromhex("02524d0000fe")
CLIENT_IP, SERVICE_IP = 0x0A540101, 0x0A54FFFE


def udp_frame(
    payload: bytes,
    dport: int = 21057,
    *,
    src_ip: int = CLIENT_IP,
    dst_ip: int = SERVICE_IP,
    ident: int = 0,
    ttl: int = 64,
    src_mac: bytes = CLIENT_MAC,
    dst_mac: bytes = SW_MAC,
    sport: int = 40000,
) -> bytearray:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(udp), ident, 0x4000, ttl, 17, 0, src_ip, dst_ip))
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    struct.pack_into("!H", ip, 10, ~s & 0xFFFF)
    return bytearray(dst_mac + src_mac + b"\x08\x00" + bytes(ip) + udp)


class Switch:
    def __init__(self):
        self.store = make_store()
        self.now = 1000
        self.pipe = Pipeline(self.store, clock=lambda: self.now)
        self.out: list[tuple[int, bytes]] = []

    def run(self, frame: bytes, port: int = 1) -> list[tuple[int, bytes]]:
        self.out = []
        buf = bytearray(frame)
        self.pipe.process(port, buf, len(buf), lambda p, d: self.out.append((p, bytes(d))))
        return self.out

    def events(self) -> dict[str, int]:
        pk = self.store.counter("events").packets
        return {H.EVENT_NAMES[i][3:]: pk[i] for i in range(16) if pk[i]}

    def slice(
        self, s: int, first: int, last: int, last_slot: int = 0, mgid: int = 0, large_cap: int | None = None
    ) -> None:
        cap = last - first + 1
        if large_cap is None:  # what the controller sets with no ring_hold
            large_cap = min(cap, last_slot + 1) if mgid else 0
        self.store.table("config_slice").add(
            s,
            "set_slice_config",
            {
                "first": first,
                "last": last,
                "neg_cap": -cap & 0xFFFFFFFF,
                "neg_large_cap": -large_cap & 0xFFFFFFFF,
                "last_slot": last_slot,
                "mgid": mgid,
            },
        )
        self.store.register("head")[s] = first
        self.store.register("tail")[s] = first


def task(rid: int = 1, **kw) -> bytearray:
    payload = kw.pop("payload", b"")
    return udp_frame(Header(kind=Kind.TASK, client_id=0x0100, request_id=rid, **kw).pack() + payload)


def token(wid: int = 1, s: int = 0) -> bytearray:
    return udp_frame(Header(kind=Kind.TOKEN, worker_id=wid, slice=s).pack(), sport=41000)


@pytest.fixture
def sw():
    s = Switch()
    s.store.table("select_worker").add(1, "to_worker", {"port": 2, "dmac": 0x02524D000002, "dip": 0x0A540102})
    s.store.table("select_worker").add(2, "to_worker", {"port": 3, "dmac": 0x02524D000003, "dip": 0x0A540103})
    return s


def test_constants_match_the_p4():
    from switch.p4 import source

    c = source.constants()
    assert sorted(set(c) - set(vars(H))) == []  # every constant of types.p4 and sizes.p4 ...
    for k, want in c.items():  # ... with the P4's value
        assert getattr(H, k) == want, k
    assert H.BALANCE_FULL == -(2**31)


def test_head_and_tail_wrap_inside_the_region(sw):
    sw.slice(0, 100, 102)
    for rid in range(3):
        assert sw.run(task(rid)) == []
    assert sw.store.register("tail")[0] == 100  # wrapped from 102 to first
    assert sw.store.register("balance")[0] == -3
    out = sw.run(task(9))  # full: rejected to the ingress port
    assert out and out[0][0] == 1 and Header.unpack(out[0][1][42:]).kind == Kind.REJECT
    for rid in range(3):
        ((port, f),) = sw.run(token(1))
        assert Header.unpack(f[42:]).request_id == rid
    assert sw.store.register("head")[0] == 100
    sw.run(task(10))
    assert sw.store.register("tail")[0] == 101
    assert sw.events() == {"TASK_QUEUED": 4, "TASK_REJECTED": 1, "DISPATCH_QUEUED": 3}


def test_balance_full_is_returned_not_stored(sw):
    sw.slice(0, 0, 0)  # capacity 1
    sw.run(token(1))
    assert sw.store.register("balance")[0] == 1
    assert sw.run(token(1)) == []
    assert sw.store.register("balance")[0] == 1
    assert sw.events()["TOKEN_DROPPED"] == 1


def test_int_qlen_and_qdelay(sw):
    sw.slice(0, 0, 15)
    sw.store.table("config_int").set_default("stamp")
    for rid in range(4):
        sw.now = 0xFFFFFF00 + rid  # the clock's low 32 bits wrap between enqueue and dequeue
        sw.run(task(rid))
    sw.now = 0x100
    for left in (3, 2, 1, 0):
        ((_, f),) = sw.run(token(1))
        h = Header.unpack(f[42:])
        assert h.int_qlen == left and h.flags & Flag.INT
        assert h.int_qdelay_ns == (0x100 - (0xFFFFFF00 + 3 - left)) & 0xFFFFFFFF


def test_dispatch_keeps_udp_and_fixes_the_ip_checksum(sw):
    sw.slice(0, 0, 15)
    sw.run(token(2))
    ((port, f),) = sw.run(task(5, data=b"abcdefgh"))
    assert port == 3
    ip = f[14:34]
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    assert s == 0xFFFF
    assert struct.unpack_from("!HHHH", f, 34) == (40000, 21057, 8 + 32, 0)
    h = Header.unpack(f[42:])
    assert (h.kind, h.worker_id, h.data) == (Kind.DISPATCH, 2, b"abcdefgh")


def test_token_slice_beyond_the_registers_is_dropped_as_bad(sw):
    """A token's slice comes from the packet and indexes the registers: rain.p4 drops
    one out of range (it would alias another slice's cells) and counts EV_BAD_RAIN."""
    sw.slice(1, 16, 31)
    sw.store.table("map_slice").add(5, "set_slice", {"slice": 1})
    assert sw.run(task(1, task_type=5)) == []
    assert sw.run(token(1, s=17)) == []
    assert sw.store.register("balance")[1] == -1  # the task still waits in slice 1
    assert sw.events()["BAD_RAIN"] == 1


@pytest.mark.parametrize("payload_len", [0, 2100])
def test_large_task_that_fits_no_ring_slot_is_dropped_as_bad(sw, payload_len):
    """A large task's length becomes its descriptor and its WRITEs' length: one with no
    payload, or more than a ring slot holds, would wrap or overrun; rain.p4 drops it."""
    sw.slice(0, 0, 15, last_slot=7, mgid=1)
    f = task(7, flags=Flag.LARGE, payload=bytes(payload_len) + b"\0\0\0\0")
    assert sw.run(f) == []
    assert sw.events() == {"BAD_RAIN": 1} and sw.store.register("balance")[0] == 0


def test_roce_write_matches_the_tofino_facts_test_vector():
    """docs/tofino.md's RC WRITE ONLY vector, byte for byte, from a client's large task."""
    vector = bytes.fromhex(
        "0c42a1dd6011"
        "0200000000fe"
        "0800"
        "4500004c"
        "00014000"
        "4011238d"
        "0a0a01fe"
        "0a0a0102"
        "c000"
        "12b7"
        "0038"
        "0000"
        "0a"
        "40"
        "ffff"
        "00"
        "000123"
        "00"
        "000010"
        "00007f0000001000"
        "00abcdef"
        "00000010"
        "000102030405060708090a0b0c0d0e0f"
        "3025e760"
    )
    s = Switch()
    s.slice(0, 0, 15, last_slot=7, mgid=9)
    s.store.pre.add_node(1, rid=4, dev_ports=[140])
    s.store.pre.add_group(9, [1])
    s.store.table("build_write").add(
        4,
        "make_write",
        {
            "smac": 0x0200000000FE,
            "dmac": 0x0C42A1DD6011,
            "sip": 0x0A0A01FE,
            "dip": 0x0A0A0102,
            "tos": 0,  # the vector's TOS (the controller sets the inventory's DSCP)
            "opcode": 0x0A,
            "qpn": 0x123,
            "rkey": 0xABCDEF,
            "va_hi": 0x7F00,
            "va_lo": 0x1000,
        },
    )
    s.store.register("psn")[4] = 16
    body = bytes(range(16)) + bytes.fromhex("3025e760")  # payload + the pad the WRITE keeps as its iCRC
    hdr = Header(kind=Kind.TASK, flags=Flag.LARGE, client_id=0x0100, request_id=1).pack()
    f = udp_frame(hdr + body, ident=1, ttl=64)
    out = s.run(f, port=132)
    assert out == [(140, vector)]
    assert s.store.register("psn")[4] == 17 and s.store.register("ring_offset")[0] == 1
    assert s.store.counter("writes").packets[4] == 1
    assert s.events() == {"PREWRITE": 1}
    # the queued descriptor: slot 0, 16 bytes, FLAG_DESC instead of FLAG_LARGE
    i = 0
    assert s.store.register("meta")[i] == Flag.DESC
    assert bytes(s.store.register(f"data{k}")[i] for k in range(8)) == struct.pack("!II", 0, 16)


def test_prewrite_va_adds_only_the_low_32_bits_and_psn_keeps_24():
    s = Switch()
    s.slice(0, 0, 15, last_slot=3, mgid=9)
    s.store.pre.add_node(1, rid=7, dev_ports=[5])
    s.store.pre.add_group(9, [1])
    s.store.table("build_write").add(
        7,
        "make_write",
        {
            "smac": 1,
            "dmac": 2,
            "sip": 3,
            "dip": 4,
            "tos": 0,
            "opcode": 0x0A,
            "qpn": 5,
            "rkey": 6,
            "va_hi": 0x1,
            "va_lo": 0xFFFFF800,
        },
    )
    s.store.register("psn")[7] = 0xFFFFFF
    body = large_payload(0x0100, 1, 40) + bytes(4)
    hdr = Header(kind=Kind.TASK, flags=Flag.LARGE, client_id=0x0100, request_id=1).pack()
    vas, psns = [], []
    for _ in range(3):
        ((_, w),) = s.run(udp_frame(hdr + body))
        psns.append(int.from_bytes(w[42 + 9 : 42 + 12], "big"))
        vas.append(struct.unpack_from("!Q", w, 54)[0])
    assert vas == [0x1FFFFF800, 0x100000000, 0x100000800]  # no carry into va_hi
    assert psns == [0xFFFFFF, 0, 1]


def test_every_frame_counts_exactly_one_event_and_garbage_never_raises():
    s = Switch()
    s.slice(0, 0, 7, last_slot=3, mgid=9)
    s.store.pre.add_node(1, rid=1, dev_ports=[2])
    s.store.pre.add_group(9, [1])
    s.store.table("build_write").add(
        1,
        "make_write",
        {"smac": 1, "dmac": 2, "sip": 3, "dip": 4, "tos": 0, "opcode": 10, "qpn": 5, "rkey": 6, "va_hi": 0, "va_lo": 0},
    )
    s.store.table("forward").add(SERVICE_IP, "set_egress", {"port": 3, "dmac": 9})
    rng = random.Random(11)
    frames = []
    for n in range(3000):
        kind = rng.random()
        if kind < 0.3:
            f = bytearray(rng.getrandbits(8) for _ in range(rng.randint(0, 120)))
        else:
            hdr = Header(
                kind=rng.choice([0, 1, 2, 3, 4, 5, 99]),
                flags=rng.getrandbits(8),
                task_type=rng.getrandbits(8),
                slice=rng.getrandbits(16),
                client_id=rng.getrandbits(16),
                request_id=n,
                worker_id=rng.getrandbits(16),
                version=rng.choice([1, 1, 1, 2]),
            ).pack()
            f = udp_frame(hdr + bytes(rng.randint(0, 60)), dport=rng.choice([21057, 21057, 4791, 53]))
            if kind < 0.5:
                f = f[: rng.randint(0, len(f))]
            elif kind < 0.6:
                f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
        frames.append(f)
    for f in frames:
        s.run(f)
    assert sum(s.store.counter("events").packets) == len(frames)


def test_short_frames_are_parser_errors():
    s = Switch()
    good = task(1)
    for cut, event in (
        (10, "PARSER_ERROR"),
        (14 + 19, "PARSER_ERROR"),
        (34 + 7, "PARSER_ERROR"),
        (42 + 31, "PARSER_ERROR"),
        (14, "NO_ROUTE"),
    ):
        s2 = Switch()
        f = good[:cut]
        if cut == 14:
            f = bytearray(f)
            f[12:14] = b"\x08\x06"  # ARP-typed, complete Ethernet header: not IPv4, no route
        assert s2.run(f) == []
        assert s2.events() == {event: 1}, cut
    # IPv4 with options (ihl 6) stops the parse after IPv4: forwarded by address, never a Rain packet
    f = bytearray(task(1))
    f[14] = 0x46
    s.store.table("forward").add(SERVICE_IP, "set_egress", {"port": 3, "dmac": 9})
    ((port, out),) = s.run(f)
    assert port == 3 and s.events() == {"FORWARDED": 1}


def test_the_emulator_respects_the_walls():
    """switch/emulator imports nothing from orchestrator or switch/control; of the rest
    of the repository only switch.errors, switch.bfrt and hosts.proto (docs/architecture.md)."""
    import ast
    from pathlib import Path

    allowed = ("switch.errors", "switch.bfrt", "hosts.proto", "switch.emulator")
    for path in Path(__file__).resolve().parents[2].joinpath("switch", "emulator").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("orchestrator", "switch", "hosts", "tests"):
                    assert name.startswith(allowed), f"{path.name} imports {name}"


def _ring_switch(last_slot: int, large_cap: int | None = None) -> Switch:
    """One worker (rid 7 on port 5, worker id 1 on port 2) in slice 0's multicast group."""
    s = Switch()
    s.slice(0, 0, 15, last_slot=last_slot, mgid=9, large_cap=large_cap)
    s.store.pre.add_node(1, rid=7, dev_ports=[5])
    s.store.pre.add_group(9, [1])
    p = {"smac": 1, "dmac": 2, "sip": 3, "dip": 4, "tos": 26 << 2, "opcode": 0x0A, "qpn": 5, "rkey": 6}
    p |= {"va_hi": 0, "va_lo": 0}
    s.store.table("build_write").add(7, "make_write", p)
    s.store.table("select_worker").add(1, "to_worker", {"port": 2, "dmac": 0x02524D000002, "dip": 0x0A540102})
    return s


def _large(rid: int) -> bytearray:
    body = large_payload(0x0100, rid, 40) + bytes(4)
    return udp_frame(Header(kind=Kind.TASK, flags=Flag.LARGE, client_id=0x0100, request_id=rid).pack() + body)


def test_waiting_large_tasks_never_outnumber_the_ring_slots():
    """4 ring slots, 10 large tasks and no token: the first 4 are pre-written into slots
    0..3, the others go back to the client as REJECT (EV_LARGE_REJECTED) instead of
    overwriting a slot whose task still waits; tokens then dispatch the 4 in order, each
    descriptor naming its own slot."""
    s = _ring_switch(last_slot=3)
    rejects = []
    for rid in range(10):
        for port, frame in s.run(_large(rid)):
            if port == 1:
                rejects.append(Header.unpack(frame[42:74]).request_id)
    assert rejects == [4, 5, 6, 7, 8, 9]
    assert s.events() == {"PREWRITE": 4, "LARGE_REJECTED": 6}
    assert s.store.register("balance")[0] == -4
    descs = []
    for _ in range(4):
        ((port, d),) = s.run(token(1))
        h = Header.unpack(d[42:74])
        assert port == 2 and h.kind == Kind.DISPATCH and h.flags & Flag.DESC
        descs.append((h.request_id, h.desc[0]))
    assert descs == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # the ring is free again: the next large task waits in slot 0 (the offset wrapped)
    ((port, w),) = s.run(_large(10))
    assert port == 5 and struct.unpack_from("!Q", w, 54)[0] == 0


def test_the_ring_bound_keeps_what_a_worker_holds_free():
    """With ring_hold 3 of 4 slots (the controller's large_cap = 1), a second waiting
    large task is refused, while a small task still queues up to the capacity."""
    s = _ring_switch(last_slot=3, large_cap=1)
    assert len(s.run(_large(0))) == 1  # pre-written (one WRITE replica)
    ((port, r),) = s.run(_large(1))
    assert port == 1 and Header.unpack(r[42:74]).kind == Kind.REJECT
    assert s.run(task(2)) == []  # a small task queues
    assert s.events() == {"PREWRITE": 1, "LARGE_REJECTED": 1, "TASK_QUEUED": 1}


def test_forward_event_comes_from_its_actions(sw):
    """A hit sets EV_FORWARDED, the default drop EV_NO_ROUTE, in the actions (no
    condition on the hit bit)."""
    sw.store.table("forward").add(0x0A540102, "set_egress", {"port": 4, "dmac": 0x02524D000002})
    resp = udp_frame(Header(kind=Kind.RESPONSE).pack(), dst_ip=0x0A540102)
    assert [p for p, _ in sw.run(resp)] == [4]
    assert sw.run(udp_frame(Header(kind=Kind.RESPONSE).pack(), dst_ip=0x0A540199)) == []
    assert sw.events() == {"FORWARDED": 1, "NO_ROUTE": 1}


def test_writes_carry_the_lossless_dscp_and_a_valid_ip_checksum():
    """build_write's tos (DSCP << 2, ECN 0) goes into every WRITE's IPv4 header, whose
    checksum the egress deparser recomputes over it."""
    s = _ring_switch(last_slot=3)
    ((port, w),) = s.run(_large(0))
    assert port == 5 and w[15] == 26 << 2  # IPv4 TOS: DSCP 26, Not-ECT
    words = struct.unpack("!10H", w[14:34])
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    assert total == 0xFFFF


def test_reject_goes_back_with_addresses_and_udp_ports_swapped(sw):
    """A REJECT is a reply: MACs, IPs and UDP ports swapped, so it reaches the client's
    port whatever it sent from; the UDP checksum (a sum over both) stays valid."""
    sw.slice(0, 0, 0)  # capacity 1
    sw.run(task(1))
    f = task(2)
    struct.pack_into("!H", f, 34 + 6, 0x1234)  # a non-zero UDP checksum
    ((port, r),) = sw.run(f, port=7)
    assert port == 7 and Header.unpack(r[42:74]).kind == Kind.REJECT
    assert (r[0:6], r[6:12]) == (f[6:12], f[0:6])
    assert struct.unpack_from("!II", r, 26) == struct.unpack_from("!II", f, 26)[::-1]
    assert struct.unpack_from("!HHHH", r, 34) == (21057, 40000, len(f) - 34, 0x1234)


def _csum_ok(hdr: bytes) -> bool:
    total = sum(struct.unpack(f"!{len(hdr) // 2}H", hdr))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def test_forwarded_ipv4_with_options_keeps_a_valid_checksum(sw):
    """The checksum update covers the options (a residual from the old checksum), so a
    header of 24 bytes stays valid after forward's TTL decrement."""
    sw.store.table("forward").add(0x0A540102, "set_egress", {"port": 4, "dmac": 0x02524D000002})
    opts = b"\x94\x04\x00\x00"  # router alert
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x46, 0, 24 + 8, 7, 0, 64, 17, 0, CLIENT_IP, 0x0A540102) + opts)
    s = sum(struct.unpack("!12H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    struct.pack_into("!H", ip, 10, ~s & 0xFFFF)
    f = bytearray(SW_MAC + CLIENT_MAC + b"\x08\x00" + bytes(ip) + struct.pack("!HHHH", 1, 2, 8, 0))
    ((port, out),) = sw.run(f)
    assert port == 4 and out[22] == 63 and out[34:38] == opts
    assert _csum_ok(out[14:38])
