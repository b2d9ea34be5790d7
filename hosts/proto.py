"""Python view of the Rain wire protocol declared in hosts/dpdk/include/rain_proto.h.

tests/unit/test_proto_layout.py compiles the C header and checks every size, offset
and constant here against it, so the two cannot drift. Used by the software switch,
the test peers and the analysis code; it depends on nothing but the standard library
(agents are deployed with it).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field, replace

UDP_PORT = 21057
VERSION = 1
HDR_LEN = 32
INLINE_BYTES = 8
SLOT_MAGIC = 0x5241494E
SLOT_HDR_LEN = 24

ROCE_UDP_PORT = 4791
ROCE_OP_RC_WRITE_ONLY = 0x0A
ROCE_OP_UC_WRITE_ONLY = 0x2A
ROCE_PKEY_DEFAULT = 0xFFFF
ROCE_ICRC_LEN = 4
ROCE_BTH_LEN = 12
ROCE_RETH_LEN = 16


class Kind(enum.IntEnum):
    TASK = 1
    DISPATCH = 2
    TOKEN = 3
    RESPONSE = 4
    REJECT = 5
    PULL = 6
    EMPTY = 7
    REPORT = 8
    FETCH = 9
    FETCH_REPLY = 10


KIND_MAX = 10


class Flag(enum.IntFlag):
    LARGE = 0x01
    DESC = 0x02
    INT = 0x04
    RESUBMIT = 0x08
    FAILED = 0x10
    RECIRC = 0x20


# (name, struct code, offset) in wire order; `data` is the 8-byte inline union.
HDR_FIELDS: list[tuple[str, str, int]] = [
    ("version", "B", 0),
    ("kind", "B", 1),
    ("flags", "B", 2),
    ("task_type", "B", 3),
    ("slice", "H", 4),
    ("client_id", "H", 6),
    ("request_id", "I", 8),
    ("worker_id", "H", 12),
    ("report", "H", 14),
    ("data", "8s", 16),
    ("int_qdelay_ns", "I", 24),
    ("int_qlen", "I", 28),
]
_HDR = struct.Struct("!" + "".join(code for _, code, _ in HDR_FIELDS))
assert _HDR.size == HDR_LEN

SLOT_FIELDS: list[tuple[str, str, int]] = [
    ("magic", "I", 0),
    ("client_id", "H", 4),
    ("task_type", "B", 6),
    ("flags", "B", 7),
    ("request_id", "I", 8),
    ("length", "I", 12),
    ("arg", "8s", 16),
]
_SLOT = struct.Struct("!" + "".join(code for _, code, _ in SLOT_FIELDS))
assert _SLOT.size == SLOT_HDR_LEN

_BTH = struct.Struct("!BBHB3sB3s")
_RETH = struct.Struct("!QII")
assert _BTH.size == ROCE_BTH_LEN and _RETH.size == ROCE_RETH_LEN


class ProtoError(ValueError):
    """A datagram that is not a valid Rain message; `reason` names the drop counter."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Header:
    kind: int
    flags: int = 0
    task_type: int = 0
    slice: int = 0
    client_id: int = 0
    request_id: int = 0
    worker_id: int = 0
    report: int = 0
    data: bytes = bytes(INLINE_BYTES)
    int_qdelay_ns: int = 0
    int_qlen: int = 0
    version: int = VERSION

    # The inline data viewed as the synthetic workload's service time, or as a descriptor.
    @property
    def service_ns(self) -> int:
        return int.from_bytes(self.data, "big")

    @property
    def desc(self) -> tuple[int, int]:
        slot, length = struct.unpack("!II", self.data)
        return slot, length

    def with_service_ns(self, ns: int) -> Header:
        return replace(self, data=ns.to_bytes(8, "big"))

    def with_desc(self, slot: int, length: int) -> Header:
        return replace(self, data=struct.pack("!II", slot, length), flags=(self.flags | Flag.DESC) & ~Flag.LARGE)

    def pack(self) -> bytes:
        return _HDR.pack(
            self.version,
            self.kind,
            self.flags,
            self.task_type,
            self.slice,
            self.client_id,
            self.request_id,
            self.worker_id,
            self.report,
            self.data,
            self.int_qdelay_ns,
            self.int_qlen,
        )

    @classmethod
    def unpack(cls, buf: bytes) -> Header:
        """Parse a header; raise ProtoError(reason) for anything a switch or worker must drop."""
        if len(buf) < HDR_LEN:
            raise ProtoError("truncated", f"{len(buf)} < {HDR_LEN} bytes")
        v = _HDR.unpack_from(buf)
        h = cls(
            version=v[0],
            kind=v[1],
            flags=v[2],
            task_type=v[3],
            slice=v[4],
            client_id=v[5],
            request_id=v[6],
            worker_id=v[7],
            report=v[8],
            data=v[9],
            int_qdelay_ns=v[10],
            int_qlen=v[11],
        )
        if h.version != VERSION:
            raise ProtoError("bad_version", str(h.version))
        if not 1 <= h.kind <= KIND_MAX:
            raise ProtoError("bad_kind", str(h.kind))
        return h


@dataclass(frozen=True)
class SlotHeader:
    client_id: int
    request_id: int
    length: int
    task_type: int = 0
    flags: int = 0
    arg: bytes = bytes(INLINE_BYTES)
    magic: int = SLOT_MAGIC

    def pack(self) -> bytes:
        return _SLOT.pack(
            self.magic, self.client_id, self.task_type, self.flags, self.request_id, self.length, self.arg
        )

    @classmethod
    def unpack(cls, buf: bytes) -> SlotHeader:
        if len(buf) < SLOT_HDR_LEN:
            raise ProtoError("truncated", f"slot header needs {SLOT_HDR_LEN} bytes")
        m, cid, tt, fl, rid, ln, arg = _SLOT.unpack_from(buf)
        return cls(client_id=cid, request_id=rid, length=ln, task_type=tt, flags=fl, arg=arg, magic=m)


def large_payload(
    client_id: int, request_id: int, total_len: int, *, task_type: int = 0, arg: bytes = bytes(8), fill: int = 0xA5
) -> bytes:
    """The bytes a client puts after the header of a large task (slot header + filler)."""
    if total_len < SLOT_HDR_LEN:
        raise ValueError(f"a large payload is at least {SLOT_HDR_LEN} bytes")
    hdr = SlotHeader(client_id, request_id, total_len, task_type=task_type, arg=arg).pack()
    return hdr + bytes([fill]) * (total_len - SLOT_HDR_LEN)


@dataclass(frozen=True)
class Bth:
    opcode: int
    dst_qp: int
    psn: int
    pkey: int = ROCE_PKEY_DEFAULT
    se_m_pad_tver: int = 0x40  # MigReq=1, as NICs send
    ack_req: bool = False

    def pack(self) -> bytes:
        return _BTH.pack(
            self.opcode,
            self.se_m_pad_tver,
            self.pkey,
            0,
            self.dst_qp.to_bytes(3, "big"),
            0x80 if self.ack_req else 0,
            (self.psn & 0xFFFFFF).to_bytes(3, "big"),
        )

    @classmethod
    def unpack(cls, buf: bytes) -> Bth:
        if len(buf) < ROCE_BTH_LEN:
            raise ProtoError("truncated", "BTH")
        op, smpt, pkey, _, qp, ack, psn = _BTH.unpack_from(buf)
        return cls(op, int.from_bytes(qp, "big"), int.from_bytes(psn, "big"), pkey, smpt, bool(ack & 0x80))


@dataclass(frozen=True)
class Reth:
    va: int
    rkey: int
    dma_len: int

    def pack(self) -> bytes:
        return _RETH.pack(self.va, self.rkey, self.dma_len)

    @classmethod
    def unpack(cls, buf: bytes) -> Reth:
        if len(buf) < ROCE_RETH_LEN:
            raise ProtoError("truncated", "RETH")
        return cls(*_RETH.unpack_from(buf))


@dataclass
class Message:
    """A parsed Rain datagram payload: header plus whatever follows it."""

    hdr: Header
    payload: bytes = field(default=b"")

    def pack(self) -> bytes:
        return self.hdr.pack() + self.payload

    @classmethod
    def unpack(cls, buf: bytes) -> Message:
        h = Header.unpack(buf)
        payload = bytes(buf[HDR_LEN:])
        if h.flags & Flag.LARGE:
            s = SlotHeader.unpack(payload)
            if s.magic != SLOT_MAGIC:
                raise ProtoError("bad_slot_magic", hex(s.magic))
            if s.length < SLOT_HDR_LEN:
                raise ProtoError("bad_payload", f"slot header says {s.length} bytes, less than itself")
            if s.length > len(payload):
                raise ProtoError("truncated", f"payload says {s.length} bytes, has {len(payload)}")
        return cls(h, payload)
