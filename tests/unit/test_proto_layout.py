"""The wire protocol and the control block are declared once, in C; every other view is
checked against the declaration here (sizes, offsets, constants)."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hosts import ctl, kv, proto

INCLUDE = Path(__file__).resolve().parents[2] / "hosts/dpdk/include"


def c_layout(tmp_path: Path, body: str) -> dict:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to read the C declaration")
    src = tmp_path / "layout.c"
    src.write_text(
        '#include <stdio.h>\n#include <stddef.h>\n#include "rain_proto.h"\n#include "rain_ctl.h"\n#include "rain_kv.h"\n'
        'int main(void) {\n  printf("{");\n' + body + '  printf("\\"end\\": 0}\\n");\n  return 0;\n}\n'
    )
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE}", "-o", str(exe), str(src)], check=True)
    return json.loads(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


def emit(key: str, expr: str) -> str:
    return f'  printf("\\"{key}\\": %llu, ", (unsigned long long)({expr}));\n'


def test_wire_header_matches_c(tmp_path):
    body = emit("size", "sizeof(struct rain_hdr)") + emit("slot_size", "sizeof(struct rain_slot_hdr)")
    for name, _, _ in proto.HDR_FIELDS:
        member = "u.data" if name == "data" else name
        body += emit(f"off.{name}", f"offsetof(struct rain_hdr, {member})")
        body += emit(f"len.{name}", f"sizeof(((struct rain_hdr *)0)->{member})")
    for name, _, _ in proto.SLOT_FIELDS:
        body += emit(f"soff.{name}", f"offsetof(struct rain_slot_hdr, {name})")
        body += emit(f"slen.{name}", f"sizeof(((struct rain_slot_hdr *)0)->{name})")
    body += emit("desc.slot", "offsetof(struct rain_hdr, u.desc.slot)") + emit(
        "desc.length", "offsetof(struct rain_hdr, u.desc.length)"
    )
    c = c_layout(tmp_path, body)
    import struct

    assert c["size"] == proto.HDR_LEN and c["slot_size"] == proto.SLOT_HDR_LEN
    for name, code, off in proto.HDR_FIELDS:
        assert c[f"off.{name}"] == off, name
        assert c[f"len.{name}"] == struct.calcsize("!" + code), name
    for name, code, off in proto.SLOT_FIELDS:
        assert c[f"soff.{name}"] == off, name
        assert c[f"slen.{name}"] == struct.calcsize("!" + code), name
    # The descriptor overlays the inline data: slot first, then length.
    assert c["desc.slot"] == 16 and c["desc.length"] == 20
    h = proto.Header(kind=proto.Kind.DISPATCH).with_desc(7, 300)
    assert h.pack()[16:24] == (7).to_bytes(4, "big") + (300).to_bytes(4, "big")


def test_constants_match_c(tmp_path):
    pairs = {
        "UDP_PORT": "RAIN_UDP_PORT",
        "VERSION": "RAIN_VERSION",
        "HDR_LEN": "RAIN_HDR_LEN",
        "INLINE_BYTES": "RAIN_INLINE_BYTES",
        "SLOT_MAGIC": "RAIN_SLOT_MAGIC",
        "SLOT_HDR_LEN": "RAIN_SLOT_HDR_LEN",
        "ROCE_UDP_PORT": "ROCE_UDP_PORT",
        "ROCE_OP_RC_WRITE_ONLY": "ROCE_OP_RC_WRITE_ONLY",
        "ROCE_OP_UC_WRITE_ONLY": "ROCE_OP_UC_WRITE_ONLY",
        "ROCE_PKEY_DEFAULT": "ROCE_PKEY_DEFAULT",
        "ROCE_ICRC_LEN": "ROCE_ICRC_LEN",
        "ROCE_BTH_LEN": "ROCE_BTH_LEN",
        "ROCE_RETH_LEN": "ROCE_RETH_LEN",
        "KIND_MAX": "RAIN_KIND_MAX",
    }
    body = "".join(emit(py, c) for py, c in pairs.items())
    body += "".join(emit(f"kind.{k.name}", f"RAIN_{k.name}") for k in proto.Kind)
    body += "".join(emit(f"flag.{f.name}", f"RAIN_F_{f.name}") for f in proto.Flag)
    body += emit("ctl.MAGIC", "RAIN_CTL_MAGIC") + emit("ctl.VERSION", "RAIN_CTL_VERSION")
    body += emit("ctl.MAX_WORKERS", "RAIN_CTL_MAX_WORKERS") + emit("ctl.SAMPLES", "RAIN_CTL_SAMPLES")
    body += emit("ctl.CACHE_LINE", "RAIN_CACHE_LINE")
    c = c_layout(tmp_path, body)
    for py in pairs:
        assert c[py] == getattr(proto, py), py
    for k in proto.Kind:
        assert c[f"kind.{k.name}"] == k.value, k
    for f in proto.Flag:
        assert c[f"flag.{f.name}"] == f.value, f
    for name in ("MAGIC", "VERSION", "MAX_WORKERS", "SAMPLES", "CACHE_LINE"):
        assert c[f"ctl.{name}"] == getattr(ctl, name), name


@pytest.mark.parametrize(
    "cstruct,pystruct",
    [
        ("rain_ctl_header", ctl.Header),
        ("rain_ctl_knobs", ctl.Knobs),
        ("rain_ctl_stats", ctl.Stats),
        ("rain_ctl_sample", ctl.Sample),
        ("rain_ctl_worker", ctl.Worker),
    ],
)
def test_control_block_matches_c(tmp_path, cstruct, pystruct):
    body = emit("size", f"sizeof(struct {cstruct})")
    for name, _ in pystruct._fields_:
        body += emit(f"off.{name}", f"offsetof(struct {cstruct}, {name})")
    c = c_layout(tmp_path, body)
    assert c["size"] == ctypes.sizeof(pystruct)
    for name, _ in pystruct._fields_:
        assert c[f"off.{name}"] == getattr(pystruct, name).offset, name


def test_control_block_total_size(tmp_path):
    c = c_layout(tmp_path, emit("n3", "rain_ctl_size(3)"))
    assert c["n3"] == ctl.size(3)


def test_header_round_trip_and_drops():
    h = proto.Header(kind=proto.Kind.TASK, task_type=3, client_id=0x0102, request_id=99).with_service_ns(10_000)
    assert proto.Header.unpack(h.pack()) == h and h.service_ns == 10_000
    with pytest.raises(proto.ProtoError) as e:
        proto.Header.unpack(h.pack()[:20])
    assert e.value.reason == "truncated"
    bad = bytearray(h.pack())
    bad[1] = 42
    with pytest.raises(proto.ProtoError) as e:
        proto.Header.unpack(bytes(bad))
    assert e.value.reason == "bad_kind"
    big = proto.Message(proto.Header(kind=proto.Kind.TASK, flags=proto.Flag.LARGE), proto.large_payload(1, 2, 100)[:50])
    with pytest.raises(proto.ProtoError):
        proto.Message.unpack(big.pack())


def test_roce_test_vector():
    """The RoCEv2 WRITE test vector of docs/tofino.md: BTH + RETH bytes."""
    bth = proto.Bth(opcode=proto.ROCE_OP_RC_WRITE_ONLY, dst_qp=0x000123, psn=16)
    reth = proto.Reth(va=0x00007F0000001000, rkey=0x00ABCDEF, dma_len=16)
    assert (bth.pack() + reth.pack()).hex() == "0a40ffff0000012300000010" + "00007f000000100000abcdef00000010"
    assert proto.Bth.unpack(bth.pack()) == bth and proto.Reth.unpack(reth.pack()) == reth


def test_key_value_requests_match_c(tmp_path):
    """rain_kv.h and hosts/kv.py agree on the constants, the request's bytes, the
    checks of a request, the result's bytes and every item's key and value."""
    body = "".join(
        emit(k, v)
        for k, v in {
            "get": "RAIN_KV_GET",
            "scan": "RAIN_KV_SCAN",
            "max_count": "RAIN_KV_MAX_COUNT",
            "min_key": "RAIN_KV_MIN_KEY_BYTES",
            "max_key": "RAIN_KV_MAX_KEY_BYTES",
            "max_item": "RAIN_KV_MAX_ITEM_BYTES",
            "result_len": "RAIN_KV_RESULT_LEN",
            "enc": "rain_kv_req_encode(&(struct rain_kv_req){ .op = 2, .count = 500, .start = 123456 })",
            "valid_ok": "rain_kv_req_valid(&(struct rain_kv_req){ .op = 1, .count = 10, .start = 90 }, 100)",
            "valid_past": "rain_kv_req_valid(&(struct rain_kv_req){ .op = 1, .count = 11, .start = 90 }, 100)",
            "valid_op": "rain_kv_req_valid(&(struct rain_kv_req){ .op = 3, .count = 1, .start = 0 }, 100)",
            "valid_zero": "rain_kv_req_valid(&(struct rain_kv_req){ .op = 2, .count = 0, .start = 0 }, 100)",
        }.items()
    )
    body += (
        "  { uint8_t k[20], v[21], r[RAIN_KV_RESULT_LEN];\n"
        "    rain_kv_key(k, 20, 12345); rain_kv_value(v, 21, 99, 7);\n"
        "    rain_kv_result_encode(r, &(struct rain_kv_result){ .service_ns = 8000, .found = 10, .digest = 0x0102030405060708ull });\n"
        '    printf("\\"key\\": \\""); for (int i = 0; i < 20; i++) printf("%02x", k[i]); printf("\\", ");\n'
        '    printf("\\"value\\": \\""); for (int i = 0; i < 21; i++) printf("%02x", v[i]); printf("\\", ");\n'
        '    printf("\\"result\\": \\""); for (int i = 0; i < RAIN_KV_RESULT_LEN; i++) printf("%02x", r[i]); printf("\\", "); }\n'
    )
    c = c_layout(tmp_path, body)
    assert (c["get"], c["scan"]) == (kv.Op.GET, kv.Op.SCAN)
    assert (c["max_count"], c["min_key"], c["max_key"]) == (kv.MAX_COUNT, kv.MIN_KEY_BYTES, kv.MAX_KEY_BYTES)
    assert (c["max_item"], c["result_len"]) == (kv.MAX_ITEM_BYTES, kv.RESULT_LEN)
    req = kv.Request(kv.Op.SCAN, 500, 123456)
    assert c["enc"].to_bytes(8, "big") == req.encode() and kv.Request.decode(req.encode()) == req
    assert (
        [c["valid_ok"], c["valid_past"], c["valid_op"], c["valid_zero"]]
        == [
            kv.Request(1, 10, 90).valid(100),
            kv.Request(1, 11, 90).valid(100),
            kv.Request(3, 1, 0).valid(100),
            kv.Request(2, 0, 0).valid(100),
        ]
        == [True, False, False, False]
    )
    assert bytes.fromhex(c["key"]) == kv.key(12345, 20) == b"0000000000012345...."
    assert bytes.fromhex(c["value"]) == kv.value(7, 21, 99)
    assert kv.Result.decode(bytes.fromhex(c["result"])) == kv.Result(8000, 10, 0x0102030405060708)
