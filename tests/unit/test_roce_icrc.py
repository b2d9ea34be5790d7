"""rain-worker's RoCEv2 iCRC (hosts/dpdk/worker/roce_icrc.c), called through ctypes,
against the definition computed here with zlib.crc32, against scapy's own iCRC
(scapy.contrib.roce, an implementation written apart from both) and against a fixed
packet whose iCRC is known."""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "hosts/dpdk/worker/roce_icrc.c"

# One RC RDMA WRITE ONLY, 90 bytes on the wire (Ethernet, IPv4 10.10.1.254 -> 10.10.1.2,
# UDP 49152 -> 4791 with a zero checksum, BTH to QP 0x123 with PSN 16, RETH VA
# 0x7f0000001000 rkey 0xabcdef length 16, 16 payload bytes), as scapy builds it and
# tshark decodes it; its iCRC 0x60e72530 travels as 30 25 e7 60.
KNOWN = bytes.fromhex(
    "0c42a1dd6011 0200000000fe 0800"
    "4500004c 00014000 4011238d 0a0a01fe 0a0a0102"
    "c000 12b7 0038 0000"
    "0a 40 ffff 00 000123 00 000010"
    "00007f0000001000 00abcdef 00000010"
    "000102030405060708090a0b0c0d0e0f"
    "3025e760".replace(" ", "")
)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the C under test")
    so = tmp_path_factory.mktemp("icrc") / "roce_icrc.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(so), str(SRC), "-lz"],
        check=True,
        capture_output=True,
        text=True,
    )
    lib = ctypes.CDLL(str(so))
    lib.rw_roce_icrc.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint32)]
    lib.rw_roce_icrc_ok.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def c_icrc(lib, ip: bytes) -> int | None:
    out = ctypes.c_uint32()
    return out.value if lib.rw_roce_icrc(ip, len(ip), ctypes.byref(out)) == 0 else None


def definition(ip: bytes) -> int:
    """The iCRC from its definition: CRC-32 over 8 bytes of ones (the LRH RoCEv2 has
    not), then IPv4, UDP, BTH and the rest up to the trailer, with IPv4 TOS, TTL and
    checksum, the UDP checksum and BTH byte 4 (resv8a) as ones."""
    b = bytearray(ip[:-4])
    ihl = (b[0] & 0x0F) * 4
    b[1] = 0xFF
    b[8] = 0xFF
    b[10:12] = b"\xff\xff"
    b[ihl + 6 : ihl + 8] = b"\xff\xff"
    b[ihl + 8 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(b))


def test_the_lrh_stand_in_is_what_linux_soft_roce_starts_from():
    # Linux's soft RoCE (rxe_icrc.c) seeds its CRC with 0xdebb20e3: the CRC-32
    # register after the 8 bytes of ones, so the definition here starts the same way.
    assert zlib.crc32(b"\xff" * 8) ^ 0xFFFFFFFF == 0xDEBB20E3


def test_a_known_packet(lib):
    ip = KNOWN[14:]
    assert definition(ip) == 0x60E72530 == c_icrc(lib, ip)
    assert ip[-4:] == (0x60E72530).to_bytes(4, "little")  # least significant byte first
    assert lib.rw_roce_icrc_ok(ip, len(ip)) == 1
    # What the switch sends: the same WRITE with a zero iCRC. A checking NIC drops it.
    assert lib.rw_roce_icrc_ok(ip[:-4] + bytes(4), len(ip)) == 0


def test_variant_fields_do_not_count_and_every_other_byte_does(lib):
    ip = bytearray(KNOWN[14:])
    # a router may rewrite TOS (DSCP/ECN), TTL and the checksums; ECN marks set FECN/BECN
    for off, val in ((1, 0x68), (8, 17), (10, 0x12), (11, 0x34), (26, 0xAB), (27, 0xCD), (32, 0xC0)):
        v = bytearray(ip)
        v[off] = val
        assert lib.rw_roce_icrc_ok(bytes(v), len(v)) == 1, off
    for off in range(len(ip) - 4):
        if off in (1, 8, 10, 11, 26, 27, 32):
            continue
        v = bytearray(ip)
        v[off] ^= 0x80  # (the IHL nibble of byte 0 stays)
        assert lib.rw_roce_icrc_ok(bytes(v), len(v)) == 0, off


def test_agrees_with_scapy_on_random_writes(lib):
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    rng = random.Random(7)
    for _ in range(200):
        body = rng.randbytes(16) + rng.randbytes(rng.randrange(0, 1500))  # RETH + payload
        p = (
            IP(src=f"10.{rng.randrange(256)}.1.2", dst="10.10.1.9", tos=rng.randrange(256), ttl=rng.randrange(1, 256))
            / UDP(sport=rng.randrange(49152, 65536), dport=4791, chksum=rng.randrange(65536))
            / BTH(opcode=rng.choice((0x0A, 0x2A)), migreq=1, dqpn=rng.randrange(1 << 24), psn=rng.randrange(1 << 24))
            / Raw(body)
        )
        ip = bytes(p)
        want = int.from_bytes(ip[-4:], "little")  # scapy's iCRC
        assert c_icrc(lib, ip) == want == definition(ip)
        assert lib.rw_roce_icrc_ok(ip, len(ip)) == 1


def test_ip_options_are_covered(lib):
    ip = bytearray(KNOWN[14:])
    opt = bytes([0x01, 0x01, 0x01, 0x00])  # NOP, NOP, NOP, EOL
    v = bytearray([0x46]) + ip[1:20] + opt + ip[20:-4]
    v[2:4] = (len(v) + 4).to_bytes(2, "big")
    v += definition(bytes(v) + bytes(4)).to_bytes(4, "little")
    assert c_icrc(lib, bytes(v)) == definition(bytes(v))
    assert lib.rw_roce_icrc_ok(bytes(v), len(v)) == 1


def test_too_short_is_refused(lib):
    ip = KNOWN[14:]
    assert c_icrc(lib, ip[: 20 + 8 + 12 + 3]) is None  # no room for the trailer
    assert c_icrc(lib, ip[: 20 + 8 + 12 + 4]) is not None
    assert lib.rw_roce_icrc_ok(b"\x44" + ip[1:], len(ip)) == -1  # IHL 4: not an IPv4 header
    assert lib.rw_roce_icrc_ok(ip[:10], 10) == -1
