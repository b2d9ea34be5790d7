"""Each emulated program (switch/emulator/programs.py) against its P4 sources
(switch/p4/<name>.p4 and what it includes, read as data by switch.p4.source).

Every table (keys: name, match type, width; size), action of a table (params: name,
width), register (width, signedness, size) and counter of the program appears in the
bf-rt.json the emulator serves for it, and nothing else does.
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

import pytest

from switch.emulator import programs, schema
from switch.p4 import source


@cache
def contract(program: str) -> SimpleNamespace:
    """The program's P4 side and its emulator's bf-rt.json, read once."""
    tables = source.table_schema(program=program)
    emulated = programs.load(program).PROGRAM
    return SimpleNamespace(
        tables={k: v for k, v in tables.items() if k != "actions"},
        actions=tables["actions"],
        objects=source.register_schema(program=program),
        names=source.qualified_names(program=program),
        program=emulated,
        bfrt={t["name"]: t for t in schema.layout(emulated).p4_json()["tables"]},
    )


def _each(pick) -> list:
    """(program, name) for every name `pick(contract)` gives, for every program."""
    return [pytest.param(p, n, id=f"{p}:{n}") for p in programs.NAMES for n in sorted(pick(contract(p)))]


def _of_type(c: SimpleNamespace, *types: str) -> dict[str, dict]:
    return {n: t for n, t in c.bfrt.items() if t["table_type"] in types}


@pytest.mark.parametrize("program", programs.NAMES)
def test_same_tables(program):
    c = contract(program)
    assert set(_of_type(c, "MatchAction_Direct")) == set(c.tables) == set(c.names.tables)


@pytest.mark.parametrize("program", programs.NAMES)
def test_same_registers_and_counters(program):
    c = contract(program)
    assert set(_of_type(c, "Register")) == set(c.names.registers)
    assert set(_of_type(c, "Counter")) == set(c.names.counters)


@pytest.mark.parametrize("program, name", _each(lambda c: c.tables))
def test_table_keys_and_size(program, name):
    c = contract(program)
    t = c.bfrt[name]
    keys = [(k["name"], k["match_type"], k["type"]["width"]) for k in t["key"] if k["name"] != "$MATCH_PRIORITY"]
    assert keys == c.tables[name]["keys"]
    assert t["size"] == c.tables[name]["size"]


@pytest.mark.parametrize("program, name", _each(lambda c: c.tables))
def test_table_actions_and_params(program, name):
    c = contract(program)
    t = c.bfrt[name]
    got = {a["name"]: [(p["name"], p["type"]["width"]) for p in a["data"]] for a in t["action_specs"]}
    assert set(got) == set(c.tables[name]["actions"]) == set(c.names.table_actions[name])
    for action, params in got.items():
        assert params == c.actions[action]["params"], action


@pytest.mark.parametrize("program, name", _each(lambda c: (n for n, o in c.objects.items() if o["kind"] == "Register")))
def test_register_shape(program, name):
    c = contract(program)
    t = c.bfrt[name]
    cell = t["data"][0]["singleton"]
    assert cell["name"] == name[len("pipe.") :] + ".f1"
    assert cell["type"]["width"] == c.objects[name]["width"]
    assert t["size"] == c.objects[name]["size"]
    decl = next(r for r in c.program.registers if r.name == name)
    assert decl.signed == c.objects[name]["signed"]


@pytest.mark.parametrize("program, name", _each(lambda c: (n for n, o in c.objects.items() if o["kind"] == "Counter")))
def test_counter_shape(program, name):
    c = contract(program)
    t = c.bfrt[name]
    assert t["size"] == c.objects[name]["size"]
    assert {d["singleton"]["name"] for d in t["data"]} == {"$COUNTER_SPEC_BYTES", "$COUNTER_SPEC_PKTS"}


# The default actions each P4 program declares (source.py does not read them; they are
# few and fixed): table -> (action, parameters).
DEFAULTS = {
    "rain": {
        "pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {}),
        "pipe.SwitchIngress.slice_map.map_slice": ("SwitchIngress.slice_map.set_slice", {"slice": 0}),
        "pipe.SwitchIngress.bidir_queue.config_slice": ("SwitchIngress.bidir_queue.unconfigured", {}),
        "pipe.SwitchIngress.dispatch.select_worker": ("SwitchIngress.dispatch.no_worker", {}),
        "pipe.SwitchIngress.dispatch.client_addr": ("NoAction", {}),
        "pipe.SwitchIngress.telemetry.config_int": ("SwitchIngress.telemetry.dont_stamp", {}),
        "pipe.SwitchEgress.rdma_writer.build_write": ("SwitchEgress.rdma_writer.skip_replica", {}),
    },
    "pallas": {
        "pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {}),
        "pipe.SwitchIngress.pool_map.map_pool": ("SwitchIngress.pool_map.no_pool", {}),
        "pipe.SwitchIngress.wrr.config_pool": ("SwitchIngress.wrr.no_workers", {}),
        "pipe.SwitchIngress.wrr.schedule": ("SwitchIngress.wrr.no_position", {}),
        "pipe.SwitchIngress.push.select_worker": ("SwitchIngress.push.no_worker", {}),
    },
    "draconis": {
        "pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {}),
        "pipe.SwitchIngress.task_queue.config_queue": ("SwitchIngress.task_queue.unconfigured", {}),
        "pipe.SwitchIngress.dispatch.client_addr": ("NoAction", {}),
    },
    "r2p2": {
        "pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {}),
        "pipe.SwitchIngress.config.jbsq": ("SwitchIngress.config.unconfigured", {}),
        "pipe.SwitchIngress.workers.select_worker": ("SwitchIngress.workers.no_worker", {}),
    },
    "ipv4_forward": {"pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {})},
    "racksched": {
        "pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {}),
        "pipe.SwitchIngress.choose.pick": ("SwitchIngress.choose.no_workers", {}),
        "pipe.SwitchIngress.dispatch.select_worker": ("SwitchIngress.dispatch.no_worker", {}),
    },
}


@pytest.mark.parametrize("program", programs.NAMES)
def test_default_actions_are_the_p4s(program):
    got = {t.name: (t.action(t.default_action).name, dict(t.default_params)) for t in contract(program).program.tables}
    assert got == DEFAULTS[program]


@pytest.mark.parametrize("program", programs.NAMES)
def test_emulator_modules_are_named_like_the_p4_instances(program):
    names = contract(program).names
    instances = {n.split(".")[2] for n in (*names.tables, *names.registers, *names.counters)}
    assert {c.__name__.rsplit(".", 1)[1] for c in programs.load(program).CONTROLS} == instances


@pytest.mark.parametrize("program", programs.NAMES)
def test_a_programs_pipeline_can_be_made_twice(program):
    """programs.py's contract, twice in one process: a submodule named like the package's
    pipeline() would replace the function on first import."""
    mod = programs.load(program)
    for _ in range(2):
        assert hasattr(mod.pipeline(mod.make_store()), "process")
