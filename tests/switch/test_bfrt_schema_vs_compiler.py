"""The emulator's bf-rt.json against the compiler's, for every program it runs
(switch/emulator/programs.py; switch/p4/<name>.p4).

bf_switchd serves the bfrt.json bf-p4c wrote; the emulator serves one derived from its
pipeline's declarations (switch/emulator/schema.py). A client sees every table, key
field, action, data field and attribute of it, so they must agree: names, widths,
match types, mandatory/repeated/read-only flags, annotations, sizes, the keys each table
object carries. Each difference is reported. What may differ is listed below with the
reason; nothing else may.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from switch.emulator import programs
from switch.emulator.rain import PROGRAM
from switch.emulator.schema import layout
from tests.p4c import compiled

pytestmark = pytest.mark.timeout(1200)

# Differences a client cannot be hurt by, or that the emulator cannot have, with why.
ALLOWED = {
    "ids": "table and action ids: the emulator numbers its own (clients resolve names, and "
    "bf-p4c's ids are hashes of names that change with the program)",
    "tbl_dbg_counter": "per-stage table hit/miss debug counters: the emulator has no MAU stages",
    "snapshot PHV fields": "the snapshot trigger/capture fields named after PHV containers (trig.hdr..., "
    "hdr..., ig_md...) and the capture's table_info container describe the compiler's PHV and stage "
    "allocation, which the emulator does not have; their program-independent fields are compared",
}


def _snapshot_phv(table: dict, field: dict) -> bool:
    return table["table_type"] in ("SnapshotTrigger", "SnapshotData") and (
        field["id"] < 1 << 16 or "container" in field
    )


def _field(f: dict, wrapper: dict | None = None) -> dict[str, Any]:
    """What a client sees of one key field, data field or action parameter."""
    out = {
        "id": f["id"],
        "repeated": f.get("repeated"),
        "annotations": sorted((a["name"], a.get("value")) for a in f.get("annotations", [])),
        "type": f.get("type"),
    }
    if "container" in f:
        out["container"] = [_field(c["singleton"], c) for c in f["container"]]
    if "match_type" in f:
        out["match_type"] = f["match_type"]
    src = wrapper if wrapper is not None else f
    for flag in ("mandatory", "read_only"):
        if flag in src:
            out[flag] = src[flag]
    return out


def _show(table: dict, key: str) -> str:
    return repr(table[key]) if key in table else "absent"


def compare(emulator: dict, compiler: dict) -> list[str]:
    """Every client-visible difference between two bf-rt.json documents (none: the same)."""
    out: list[str] = []
    emu = {t["name"]: t for t in emulator["tables"]}
    ref = {t["name"]: t for t in compiler["tables"]}
    emu_names = {t["id"]: t["name"] for t in emulator["tables"]}
    ref_names = {t["id"]: t["name"] for t in compiler["tables"]}
    for name in sorted(set(ref) - set(emu) - {"tbl_dbg_counter"}):
        out.append(f"{name}: the compiler serves it, the emulator does not")
    for name in sorted(set(emu) - set(ref)):
        out.append(f"{name}: the emulator serves it, the compiler does not")
    for name in sorted(set(emu) & set(ref)):
        e, r = emu[name], ref[name]
        for k in sorted(set(e) | set(r)):
            if k in ("id", "key", "data", "action_specs", "depends_on"):
                continue
            if (k in e) != (k in r) or e.get(k) != r.get(k):
                out.append(f"{name}: {k}: emulator {_show(e, k)}, compiler {_show(r, k)}")
        deps = (
            sorted(emu_names.get(i, i) for i in e.get("depends_on", [])),
            sorted(ref_names.get(i, i) for i in r.get("depends_on", [])),
        )
        if deps[0] != deps[1] or ("depends_on" in e) != ("depends_on" in r):
            out.append(f"{name}: depends_on: emulator {deps[0]}, compiler {deps[1]}")
        ek = [(k["name"], _field(k)) for k in e.get("key", [])]
        rk = [(k["name"], _field(k)) for k in r.get("key", [])]
        if [n for n, _ in ek] != [n for n, _ in rk]:
            out.append(f"{name}: key fields: emulator {[n for n, _ in ek]}, compiler {[n for n, _ in rk]}")
        for (n, ef), (_, rf) in zip(ek, rk):
            if ef != rf:
                out.append(f"{name}: key {n}: emulator {ef}, compiler {rf}")
        ed = {d["singleton"]["name"]: _field(d["singleton"], d) for d in e.get("data", [])}
        rd = {
            d["singleton"]["name"]: _field(d["singleton"], d)
            for d in r.get("data", [])
            if not _snapshot_phv(r, d["singleton"])
        }
        if list(ed) != list(rd):
            out.append(f"{name}: data fields: emulator {list(ed)}, compiler {list(rd)}")
        for n in ed.keys() & rd.keys():
            if ed[n] != rd[n]:
                out.append(f"{name}: data {n}: emulator {ed[n]}, compiler {rd[n]}")
        ea = {a["name"]: a for a in e.get("action_specs", [])}
        ra = {a["name"]: a for a in r.get("action_specs", [])}
        if ("action_specs" in e) != ("action_specs" in r) or list(ea) != list(ra):
            out.append(f"{name}: actions: emulator {list(ea)}, compiler {list(ra)}")
        for n in ea.keys() & ra.keys():
            for k in ("action_scope", "annotations"):
                if ea[n].get(k) != ra[n].get(k):
                    out.append(f"{name}: action {n}: {k}: emulator {ea[n].get(k)!r}, compiler {ra[n].get(k)!r}")
            ep = [(p["name"], _field(p)) for p in ea[n]["data"]]
            rp = [(p["name"], _field(p)) for p in ra[n]["data"]]
            if ep != rp:
                out.append(f"{name}: action {n}: parameters: emulator {ep}, compiler {rp}")
    for k in ("schema_version", "learn_filters"):
        if emulator.get(k) != compiler.get(k):
            out.append(f"{k}: emulator {emulator.get(k)!r}, compiler {compiler.get(k)!r}")
    return out


def test_compare_finds_what_a_client_would_see():
    """The comparison itself, on the emulator's own schema with faults put in."""
    mine = layout(PROGRAM).p4_json()
    assert compare(mine, mine) == []
    other = json.loads(json.dumps(mine))
    reg = next(t for t in other["tables"] if t["table_type"] == "Register")
    reg["data"][0]["singleton"]["repeated"] = True
    reg["data"][0]["mandatory"] = False
    fwd = next(t for t in other["tables"] if t["table_type"] == "MatchAction_Direct" and t["key"])
    fwd["key"][0]["mandatory"] = not fwd["key"][0]["mandatory"]
    fwd["action_specs"][0]["data"].append(
        {
            "id": 99,
            "name": "x",
            "repeated": False,
            "mandatory": True,
            "read_only": False,
            "annotations": [],
            "type": {"type": "bytes", "width": 1},
        }
    )
    del fwd["has_const_default_action"]
    other["tables"].pop()
    found = compare(mine, other)
    assert any(reg["name"] in d and "repeated" in d for d in found)
    assert any(fwd["name"] in d and "key" in d for d in found)
    assert any(fwd["name"] in d and "parameters" in d for d in found)
    assert any(fwd["name"] in d and "has_const_default_action" in d for d in found)
    assert any("the emulator serves it, the compiler does not" in d for d in found)


@pytest.mark.parametrize("program", programs.NAMES)
def test_emulator_schema_matches_the_compilers(program):
    c = compiled(program)
    if not c.bfrt_json.exists():
        pytest.fail(f"the compiler wrote no bfrt.json for {program}.p4:\n{c.log[-3000:]}")
    # bfrt.json is written by p4c-barefoot before the assembler runs: compared even if
    # a later step failed (test_p4_compile says whether the program fits the switch).
    compiler = json.loads(c.bfrt_json.read_text())
    differences = compare(layout(programs.load(program).PROGRAM).p4_json(), compiler)
    assert not differences, "the emulator's bf-rt.json differs from the compiler's:\n" + "\n".join(differences)
