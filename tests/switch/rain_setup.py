"""Programming the Rain switch for packet tests, through BFRuntime only (what the
controller will do, written out plainly so the tests do not depend on it), and
building/decoding the frames the tests send and expect."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hosts.proto import HDR_LEN, Bth, Flag, Header, Kind, Reth
from tests.netpeer import Side, frame
from tests.switch.harness import SwitchUnderTest
from tests.switch.program_setup import ProgramSetup, ip_int, mac_int

RAIN_PORT = 21057
P4_TABLES = ("forward", "map_slice", "config_slice", "select_worker", "client_addr", "config_int", "build_write")
REGISTERS = (
    "balance",
    "head",
    "tail",
    "ring_offset",
    "psn",
    "owner",
    "request",
    "meta",
    "tstamp",
    *(f"data{i}" for i in range(8)),
)
EV = dict(
    DISPATCH_DIRECT=2,
    DISPATCH_QUEUED=3,
    TASK_QUEUED=4,
    TOKEN_QUEUED=5,
    TASK_REJECTED=6,
    TOKEN_DROPPED=7,
    PREWRITE=8,
    NO_WORKER=10,
    LARGE_REJECTED=11,
    FORWARDED=12,
    NO_ROUTE=13,
    BAD_RAIN=14,
    PARSER_ERROR=15,
)

# where clients send tasks (the switch does not look at it)
SERVICE = Side("-", "-", "02:52:4d:ff:ff:fe", "10.84.255.254")


@dataclass
class Decoded:
    eth_dst: bytes
    eth_src: bytes
    ip_src: str
    ip_dst: str
    ttl: int
    ip_ok: bool  # header checksum verifies
    sport: int
    dport: int
    payload: bytes
    ip_total_len: int
    udp_len: int
    udp_csum: int

    @property
    def rain(self) -> Header:
        return Header.unpack(self.payload)


def decode(f: bytes) -> Decoded | None:
    """Ethernet/IPv4/UDP fields of a frame (None if it is not one)."""
    if len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
        return None
    ihl = (f[14] & 0x0F) * 4
    words = struct.unpack_from(f"!{ihl // 2}H", f, 14)
    s = sum(words)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    total_len = struct.unpack_from("!H", f, 16)[0]
    sport, dport, ulen, csum = struct.unpack_from("!HHHH", f, 14 + ihl)
    import socket as _s

    return Decoded(
        f[0:6],
        f[6:12],
        _s.inet_ntoa(f[26:30]),
        _s.inet_ntoa(f[30:34]),
        f[22],
        s == 0xFFFF,
        sport,
        dport,
        f[14 + ihl + 8 : 14 + ihl + ulen],
        total_len,
        ulen,
        csum,
    )


def is_rain(kind: int | None = None, **fields):
    """A predicate: a Rain frame of this kind whose header fields equal `fields` (to the
    Rain port, or from it: a REJECT goes back to the client's source port)."""

    def pred(f: bytes) -> bool:
        d = decode(f)
        if d is None or RAIN_PORT not in (d.dport, d.sport) or len(d.payload) < HDR_LEN:
            return False
        try:
            h = d.rain
        except ValueError:
            return False
        return (kind is None or h.kind == kind) and all(getattr(h, k) == v for k, v in fields.items())

    return pred


def is_roce(f: bytes) -> bool:
    d = decode(f)
    return d is not None and d.dport == 4791


def roce(f: bytes) -> tuple[Decoded, Bth, Reth, bytes]:
    d = decode(f)
    return d, Bth.unpack(d.payload), Reth.unpack(d.payload[12:]), d.payload[28:]


class Rain(ProgramSetup):
    """The switch under test, programmed as a Rain switch through BFRuntime."""

    P4_TABLES, REGISTERS, EV = P4_TABLES, REGISTERS, EV

    def __init__(self, sw: SwitchUnderTest):
        super().__init__(sw)
        self.balance = self.c.register("balance", signed=True)

    # ---------------------------------------------------------------- state
    def reset(self) -> None:
        c = self.c
        self.clear()
        c.counter("writes").clear()
        c.pre.clear()
        for i in range(1, self.sw.nports + 1):
            c.ports.modify(self.sw.dev(i), enable=True)
        self.sw.drain()
        self.sent = 0

    def slice(self, s: int, first: int, last: int, *, last_slot: int = 0, mgid: int = 0) -> None:
        cap = last - first + 1
        large_cap = min(cap, last_slot + 1) if mgid else 0  # the controller's bound, no ring_hold
        self.c.table("config_slice").add(
            s,
            "set_slice_config",
            {
                "first": first,
                "last": last,
                "neg_cap": (-cap) & 0xFFFFFFFF,
                "neg_large_cap": (-large_cap) & 0xFFFFFFFF,
                "last_slot": last_slot,
                "mgid": mgid,
            },
        )
        self.c.register("head").write(s, first)
        self.c.register("tail").write(s, first)

    def worker(self, wid: int, port: int) -> None:
        s = self.sw.side(port)
        self.c.table("select_worker").add(
            wid, "to_worker", {"port": self.sw.dev(port), "dmac": mac_int(s), "dip": ip_int(s)}
        )

    def client_host(self, host: int, port: int) -> None:
        self.c.table("client_addr").add(host, "set_client", {"ip": ip_int(self.sw.side(port))})

    def map_type(self, task_type: int, s: int) -> None:
        self.c.table("map_slice").add(task_type, "set_slice", {"slice": s})

    # ---------------------------------------------------------------- packets
    def task(
        self,
        port: int,
        client_id: int,
        request_id: int,
        *,
        task_type: int = 0,
        data: bytes = bytes(8),
        flags: int = 0,
        payload: bytes = b"",
    ) -> bytes:
        h = Header(
            kind=Kind.TASK, flags=flags, task_type=task_type, client_id=client_id, request_id=request_id, data=data
        )
        return frame(self.sw.side(port), SERVICE, h.pack() + payload, 40000 + port, RAIN_PORT)

    def token(self, port: int, worker_id: int, s: int = 0) -> bytes:
        h = Header(kind=Kind.TOKEN, slice=s, worker_id=worker_id)
        return frame(self.sw.side(port), SERVICE, h.pack(), 41000 + port, RAIN_PORT)

    def bal(self, s: int = 0) -> int:
        return self.balance.read(s)[0]


def with_flag(h: Header, flag: int) -> bool:
    return bool(h.flags & flag)


__all__ = [
    "Rain",
    "decode",
    "is_rain",
    "is_roce",
    "roce",
    "Flag",
    "Kind",
    "Header",
    "EV",
    "SERVICE",
    "ip_int",
    "mac_int",
    "with_flag",
]
