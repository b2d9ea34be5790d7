"""The P4 program against the declared wire protocol (no compiler here: read as text)."""

from __future__ import annotations

import pytest

from hosts import proto
from switch.p4 import source


def test_rain_header_matches_the_c_declaration():
    fields = source.header_fields("rain_h")
    # data0..data7 are the 8-byte inline union of the C header, one byte each.
    merged: list[tuple[str, int]] = []
    for name, width in fields:
        if name.startswith("data") and name[4:].isdigit():
            if merged and merged[-1][0] == "data":
                merged[-1] = ("data", merged[-1][1] + width)
            else:
                merged.append(("data", width))
        else:
            merged.append((name, width))
    import struct

    expected = [(n, struct.calcsize("!" + code) * 8) for n, code, _ in proto.HDR_FIELDS]
    assert merged == expected
    assert sum(w for _, w in fields) == proto.HDR_LEN * 8


def test_roce_headers_match():
    assert sum(w for _, w in source.header_fields("bth_h")) == proto.ROCE_BTH_LEN * 8
    assert sum(w for _, w in source.header_fields("reth_h")) == proto.ROCE_RETH_LEN * 8


def test_constants_match():
    c = source.constants()
    assert c["RAIN_UDP_PORT"] == proto.UDP_PORT
    assert c["ROCE_UDP_PORT"] == proto.ROCE_UDP_PORT
    assert c["RAIN_VERSION"] == proto.VERSION
    assert c["RAIN_HDR_BYTES"] == proto.HDR_LEN
    assert c["ROCE_HDR_BYTES"] == proto.ROCE_BTH_LEN + proto.ROCE_RETH_LEN
    assert c["ICRC_BYTES"] == proto.ROCE_ICRC_LEN
    assert c["ROCE_OP_RC_WRITE_ONLY"] == proto.ROCE_OP_RC_WRITE_ONLY
    for k in proto.Kind:
        assert c[f"KIND_{k.name}"] == k
    for f in ("LARGE", "DESC", "INT"):
        assert c[f"FLAG_{f}"] == proto.Flag[f]
    assert c["QUEUE_ENTRIES"] == 128 * 1024


def test_names_are_qualified_like_bf_p4c():
    n = source.qualified_names()
    assert "pipe.SwitchIngress.bidir_queue.balance" in n.registers
    assert "pipe.SwitchIngress.queue_entries.data7" in n.registers
    assert "pipe.SwitchIngress.bidir_queue.config_slice" in n.tables
    assert "SwitchIngress.dispatch.to_worker" in n.actions
    assert "pipe.SwitchEgress.rdma_writer.build_write" in n.tables
    assert "pipe.SwitchEgress.rdma_writer.psn" in n.registers
    assert "pipe.SwitchIngress.events.events" in n.counters


def test_a_program_is_its_top_file_and_what_it_includes(tmp_path):
    (tmp_path / "one.p4").write_text(
        '#include <core.p4>\n#include "shared.p4"\ncontrol SwitchIngress() { table a { } }'
    )
    (tmp_path / "shared.p4").write_text('#include "deeper.p4"\nconst bit<8> SHARED = 3;')
    (tmp_path / "deeper.p4").write_text("const bit<8> DEEPER = 4;")
    (tmp_path / "two.p4").write_text('#include "shared.p4"\nconst bit<8> ONLY_TWO = 5;\ncontrol SwitchIngress() { }')
    assert [p.name for p in source.files("one", tmp_path)] == ["deeper.p4", "one.p4", "shared.p4"]
    assert source.constants(tmp_path, "one") == {"SHARED": 3, "DEEPER": 4}
    assert "ONLY_TWO" in source.constants(tmp_path, "two")
    with pytest.raises(FileNotFoundError, match="no P4 program 'three'"):
        source.files("three", tmp_path)
