"""The IPv4 forwarding program's emulator (switch/emulator/ipv4_forward.py) without a
network: a TCP segment leaves on its route's port with the route's MAC, its TTL one
less, its IP checksum valid again and the TCP bytes untouched; every frame counts one
event, and what has no route, is not IPv4 or is cut short is dropped and counted."""

from __future__ import annotations

import struct

from switch.emulator import headers as H
from switch.emulator.ipv4_forward import make_store, pipeline

SERVER_IP, CLIENT_IP = 0x0A500902, 0x0A500901
SERVER_MAC = 0x02524D090002
SW_MAC, CLIENT_MAC = bytes.fromhex("02524d09fffe"), bytes.fromhex("02524d090001")


def ip_checksum(ip: bytes) -> int:
    s = sum(struct.unpack("!10H", ip[:20]))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp_frame(payload: bytes, dst_ip: int = SERVER_IP, ttl: int = 64) -> bytearray:
    tcp = struct.pack("!HHIIBBHHH", 40000, 7000, 1234, 5678, 5 << 4, 0x18, 65535, 0xBEEF, 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(tcp), 7, 0x4000, ttl, 6, 0, CLIENT_IP, dst_ip))
    struct.pack_into("!H", ip, 10, ip_checksum(ip))
    return bytearray(SW_MAC + CLIENT_MAC + b"\x08\x00" + bytes(ip) + tcp)


class Switch:
    def __init__(self):
        self.store = make_store()
        self.pipe = pipeline(self.store)
        self.out: list[tuple[int, bytes]] = []
        self.store.table("forward").add(SERVER_IP, "set_egress", {"port": 140, "dmac": SERVER_MAC})

    def send(self, frame: bytearray) -> int:
        return self.pipe.process(132, frame, len(frame), lambda p, d: self.out.append((p, bytes(d))))

    def events(self, ev: int) -> int:
        return self.store.counter("events").packets[ev]


def test_a_tcp_segment_is_forwarded_with_its_ttl_and_checksum_and_tcp_untouched():
    sw = Switch()
    frame = tcp_frame(b"RPC1" + bytes(28))
    sent = bytes(frame)
    assert sw.send(frame) == 1
    [(port, out)] = sw.out
    assert port == 140 and out[:6] == SERVER_MAC.to_bytes(6, "big") and out[6:12] == CLIENT_MAC
    ip = out[14:34]
    assert ip[8] == 63 and ip_checksum(ip[:10] + b"\0\0" + ip[12:]) == struct.unpack("!H", ip[10:12])[0]
    assert out[34:] == sent[34:]  # the TCP segment, its checksum included: the switch never looks
    assert sw.events(H.EV_FORWARDED) == 1


def test_what_has_no_route_is_not_ipv4_or_is_cut_short_is_dropped_and_counted():
    sw = Switch()
    assert sw.send(tcp_frame(b"x", dst_ip=0x0A5009FF)) == 0
    arp = bytearray(b"\xff" * 6 + CLIENT_MAC + b"\x08\x06" + bytes(28))
    assert sw.send(arp) == 0
    short = tcp_frame(b"")[:30]
    assert sw.send(short) == 0
    assert not sw.out
    assert sw.events(H.EV_NO_ROUTE) == 2 and sw.events(H.EV_PARSER_ERROR) == 1
    total = sum(sw.store.counter("events").packets)
    assert total == 3  # each frame exactly one event
