"""Python view of the key-value requests declared in hosts/dpdk/include/rain_kv.h (the
RocksDB application): a request in a task's 8 inline bytes, the response's result, and
how the database's items are made.

tests/unit/test_proto_layout.py checks the constants and the encodings here against
the C header; the handler's tests use `expected` to know what a request must return.
Standard library only, like hosts/proto.py.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

MAX_COUNT = 10_000
MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 1024
MAX_ITEM_BYTES = 65536
RESULT_LEN = 20
FNV_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
GOLDEN = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1


class Op(enum.IntEnum):
    GET = 1
    SCAN = 2


@dataclass(frozen=True)
class Request:
    op: int
    count: int
    start: int
    resv: int = 0

    def encode(self) -> bytes:
        """The task's 8 inline bytes."""
        return struct.pack("!BBHI", self.op, self.resv, self.count, self.start)

    @classmethod
    def decode(cls, data: bytes) -> Request:
        op, resv, count, start = struct.unpack("!BBHI", data[:8])
        return cls(op, count, start, resv)

    def valid(self, keys: int) -> bool:
        return (
            self.op in (Op.GET, Op.SCAN)
            and self.resv == 0
            and 1 <= self.count <= MAX_COUNT
            and self.start + self.count <= keys
        )


@dataclass(frozen=True)
class Result:
    service_ns: int
    found: int
    digest: int

    @classmethod
    def decode(cls, data: bytes) -> Result:
        if len(data) < RESULT_LEN:
            raise ValueError(f"a key-value result is {RESULT_LEN} bytes, got {len(data)}")
        return cls(*struct.unpack("!QIQ", data[:RESULT_LEN]))


def key(i: int, key_bytes: int) -> bytes:
    """Item i's key: i as 16 zero-padded digits, then '.' up to the key size."""
    return f"{i:016d}".encode() + b"." * (key_bytes - 16)


def value(i: int, item_bytes: int, seed: int) -> bytes:
    """Item i's value: splitmix64's stream from the state splitmix64(seed ^ (i * golden)),
    big-endian words (rain_kv.h says why the start is mixed)."""
    x = _splitmix64((seed ^ (i * GOLDEN)) & _M64)[1]
    out = bytearray()
    while len(out) < item_bytes:
        x, z = _splitmix64(x)
        out += struct.pack("!Q", z)
    return bytes(out[:item_bytes])


def _splitmix64(x: int) -> tuple[int, int]:
    """(the next state, its output)."""
    x = (x + GOLDEN) & _M64
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return x, z ^ (z >> 31)


def fnv(data: bytes, h: int = FNV_BASIS) -> int:
    """FNV-1a 64 by big-endian 8-byte words, the last one zero-padded (rain_kv.h)."""
    if len(data) % 8:
        data += bytes(8 - len(data) % 8)
    for (w,) in struct.iter_unpack("!Q", data):
        h = ((h ^ w) * FNV_PRIME) & _M64
    return h


def expected(req: Request, keys: int, item_bytes: int, seed: int) -> tuple[int, int]:
    """(found, digest) that a database of `keys` items must answer `req` with."""
    h, found = FNV_BASIS, 0
    for i in range(req.start, min(req.start + req.count, keys)):
        h = fnv(value(i, item_bytes, seed), h)
        found += 1
    return found, h
