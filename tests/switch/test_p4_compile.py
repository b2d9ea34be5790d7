"""Every P4 program compiles for Tofino 1 (p4c-barefoot, then the assembler bfas) and
fits its 12 stages; the stage and memory use is read from the compiler's output.

Skips, saying why, when no Tofino compiler is at hand (tests/p4c.py: RAINMAKER_P4C or
an SDE's bf-p4c). What the compiler rejects the hardware cannot do, so this is the
test that the P4 is real; docs/p4-program.md explains the layout it reports.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from switch.p4.source import P4_DIR
from tests.p4c import Compiled, compiled

STAGES = 12  # Tofino 1: match-action stages per pipe (ingress and egress share them)
SRAMS_PER_STAGE = 80  # 1024 x 128 b blocks
MAPRAMS_PER_STAGE = 48
SALUS_PER_STAGE = 4

# The top files: a P4 file that declares `main` (the others are included by them).
PROGRAMS = sorted(p.stem for p in P4_DIR.glob("*.p4") if re.search(r"^\s*Switch\s*\(", p.read_text(), re.M))


@dataclass
class Usage:
    """What the compiler placed, per stage (ingress and egress together)."""

    stages: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))  # gress -> stages
    srams: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # stage -> blocks (with spares)
    maprams: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    salus: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))  # stage -> registers
    tcams: int = 0

    @property
    def n_stages(self) -> int:
        return max((max(s) + 1 for s in self.stages.values() if s), default=0)

    def summary(self) -> str:
        lines = [
            f"stages: {self.n_stages} of {STAGES} ("
            + ", ".join(f"{g} {min(s)}..{max(s)}" for g, s in sorted(self.stages.items()) if s)
            + ")"
        ]
        total_sram = sum(self.srams.values())
        lines.append(
            f"SRAM: {total_sram} of {SRAMS_PER_STAGE * STAGES} blocks "
            f"({100 * total_sram / (SRAMS_PER_STAGE * STAGES):.1f}%), map RAM: {sum(self.maprams.values())} "
            f"of {MAPRAMS_PER_STAGE * STAGES}, TCAM: {self.tcams}, stateful ALUs: "
            f"{sum(len(v) for v in self.salus.values())}"
        )
        for st in sorted(set(self.srams) | set(self.salus) | set(self.maprams)):
            names = ", ".join(r.rsplit(".", 1)[-1] for r in self.salus.get(st, []))
            lines.append(
                f"  stage {st:2}: SRAM {self.srams.get(st, 0):2}, map RAM {self.maprams.get(st, 0):2}, "
                f"stateful [{names}]"
            )
        return "\n".join(lines)


def usage(c: Compiled) -> Usage:
    """Stages from the assembly (.bfa), memories from the driver's context.json."""
    u = Usage()
    pipe = c.outdir / "pipe"
    bfa = next(pipe.glob("*.bfa"))
    stage, in_maprams = None, False
    for line in bfa.read_text().splitlines():
        m = re.match(r"^stage (\d+) (ingress|egress):", line)
        if m:
            stage = int(m.group(1))
            u.stages[m.group(2)].add(stage)
            continue
        if not line.startswith(" "):
            stage = None
        if stage is None:
            continue
        m = re.match(r"^\s+maprams:\s*(\[.*\])?\s*$", line)
        if m:
            in_maprams = m.group(1) is None
            if m.group(1):
                u.maprams[stage] += len(re.findall(r"\d+", m.group(1)))
            continue
        if in_maprams and re.match(r"^\s+- (\[|\d)", line):
            u.maprams[stage] += len(re.findall(r"\d+", line))
        else:
            in_maprams = False
    ctx = json.loads((pipe / "context.json").read_text())
    for t in ctx["tables"]:
        for st in _stage_tables(t):
            n = st["stage_number"]
            for mra in _allocations(st):
                units = [x for v in mra.get("memory_units_and_vpns", []) for x in v["memory_units"]]
                spare = 1 if mra.get("spare_bank_memory_unit") is not None else 0
                if mra.get("memory_type") == "sram":
                    u.srams[n] += len(units) + spare
                elif mra.get("memory_type") == "tcam":
                    u.tcams += len(units)
            if t.get("table_type") == "stateful":
                u.salus[n].append(t["name"])
    return u


def _stage_tables(o) -> list[dict]:
    """Every stage_tables entry in a context.json table (match tables nest them)."""
    if isinstance(o, dict):
        return [x for k, v in o.items() for x in (v if k == "stage_tables" else _stage_tables(v))]
    if isinstance(o, list):
        return [x for v in o for x in _stage_tables(v)]
    return []


def _allocations(o) -> list[dict]:
    """Every memory_resource_allocation under one stage table (its ways, its action data)."""
    if isinstance(o, dict):
        own = [o["memory_resource_allocation"]] if o.get("memory_resource_allocation") else []
        return own + [x for k, v in o.items() if k != "memory_resource_allocation" for x in _allocations(v)]
    if isinstance(o, list):
        return [x for v in o for x in _allocations(v)]
    return []


def bfas_warnings(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if re.search(r"\.bfa:\d+: warning:", ln)]


@pytest.fixture(scope="module", params=PROGRAMS)
def program(request) -> Compiled:
    return compiled(request.param)


def test_the_top_files_are_found():
    """Every P4 file that declares the Switch package is compiled; rain.p4 is one."""
    assert "rain" in PROGRAMS
    assert not {"sizes", "types", "headers", "parsers"} & set(PROGRAMS)


def test_compiles_for_tofino_and_fits_its_stages(program):
    assert program.ok, f"{program.program}.p4 does not compile:\n{program.log[-6000:]}"
    assert (program.outdir / "bfrt.json").exists()
    u = usage(program)
    print(f"\n{program.program}.p4\n{u.summary()}")
    assert 0 < u.n_stages <= STAGES
    for st in range(STAGES):
        assert len(u.salus.get(st, [])) <= SALUS_PER_STAGE
        assert u.srams.get(st, 0) <= SRAMS_PER_STAGE
        assert u.maprams.get(st, 0) <= MAPRAMS_PER_STAGE


def test_rain_layout_is_the_documented_one(program):
    """The layout docs/p4-program.md describes: at most 11 stages, no TCAM in the match-action
    stages, the queue state in the order its dependencies force, and every one of the
    17 registers in some stage (each array in one stage, one access per packet)."""
    if program.program != "rain":
        pytest.skip("rain.p4's layout")
    assert program.ok, program.log[-6000:]
    u = usage(program)
    stage_of = {r.rsplit(".", 1)[-1]: st for st, regs in u.salus.items() for r in regs}
    assert u.n_stages <= 11 and u.tcams == 0  # 11 with the open back end; the paper's budget
    assert len(stage_of) == 17
    assert stage_of["balance"] < stage_of["head"] == stage_of["tail"] < stage_of["owner"]
    assert stage_of["ring_offset"] > stage_of["balance"]
    entries = ["owner", "request", "meta", "tstamp", *(f"data{i}" for i in range(8))]
    assert min(stage_of[e] for e in entries) > stage_of["head"]


def test_bfas_warnings_are_only_the_known_kinds(program):
    """bfas warns of three kinds, each explained in docs/p4-program.md: parser rows it
    cannot tell apart (the open back end writes no parser match values), and action-bus
    bytes and instruction slots shared by tables of two branches of one if/else (which
    p4c places as mutually exclusive and bfas cannot prove so). Anything else fails."""
    assert program.ok, program.log[-6000:]
    known = (
        "Can't match parser state due to previous match",
        "Conflicting instruction slot usage for non-exlusive table",
        "Action bus byte",
        "warning: here",
        "warning: and table",
    )
    other = [w for w in bfas_warnings(program.log) if not any(k in w for k in known)]
    assert other == []


def test_usage_parser_reads_a_bfa(tmp_path: Path):
    """The log reading itself, on a fixed excerpt (runs without a compiler)."""
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "x.bfa").write_text(
        "stage 0 ingress:\n  stateful s:\n    maprams: [ 0, 1 ]\n"
        "stage 3 ingress:\n  stateful t:\n    maprams: \n    - [ 0, 1, 2 ]\n    - [ 4 ]\n    home_row: 1\n"
        "stage 1 egress:\n  exact_match e:\n    row: 2\n"
    )
    ctx = {
        "tables": [
            {
                "name": "p.c.r",
                "table_type": "stateful",
                "stage_tables": [
                    {
                        "stage_number": 3,
                        "memory_resource_allocation": {
                            "memory_type": "sram",
                            "memory_units_and_vpns": [{"memory_units": [1, 2]}, {"memory_units": [3]}],
                            "spare_bank_memory_unit": 4,
                        },
                    }
                ],
            }
        ]
    }
    (pipe / "context.json").write_text(json.dumps(ctx))
    u = usage(Compiled("x", True, tmp_path, ""))
    assert u.n_stages == 4 and dict(u.stages) == {"ingress": {0, 3}, "egress": {1}}
    assert dict(u.maprams) == {0: 2, 3: 4} and dict(u.srams) == {3: 4} and u.salus[3] == ["p.c.r"]
