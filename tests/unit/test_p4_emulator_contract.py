"""The emulator's Rain program against the P4 sources (read as data by switch.p4.source).

Every table (keys: name, match type, width; size), action of a table (params: name,
width), register (width, signedness, size) and counter in switch/p4/*.p4 appears in the
bf-rt.json the emulator serves, and nothing else does.
"""

from __future__ import annotations

import pytest

from switch.emulator import schema
from switch.emulator.rain import PROGRAM
from switch.p4 import source

P4_TABLES = {k: v for k, v in source.table_schema().items() if k != "actions"}
P4_ACTIONS = source.table_schema()["actions"]
P4_OBJECTS = source.register_schema()
NAMES = source.qualified_names()

BFRT = {t["name"]: t for t in schema.layout(PROGRAM).p4_json()["tables"]}


def _of_type(*types: str) -> dict[str, dict]:
    return {n: t for n, t in BFRT.items() if t["table_type"] in types}


def test_same_tables():
    assert set(_of_type("MatchAction_Direct")) == set(P4_TABLES) == set(NAMES.tables)


def test_same_registers_and_counters():
    assert set(_of_type("Register")) == set(NAMES.registers)
    assert set(_of_type("Counter")) == set(NAMES.counters)


@pytest.mark.parametrize("name", sorted(P4_TABLES))
def test_table_keys_and_size(name):
    t = BFRT[name]
    keys = [(k["name"], k["match_type"], k["type"]["width"]) for k in t["key"] if k["name"] != "$MATCH_PRIORITY"]
    assert keys == P4_TABLES[name]["keys"]
    assert t["size"] == P4_TABLES[name]["size"]


@pytest.mark.parametrize("name", sorted(P4_TABLES))
def test_table_actions_and_params(name):
    t = BFRT[name]
    got = {a["name"]: [(p["name"], p["type"]["width"]) for p in a["data"]] for a in t["action_specs"]}
    assert set(got) == set(P4_TABLES[name]["actions"]) == set(NAMES.table_actions[name])
    for action, params in got.items():
        assert params == P4_ACTIONS[action]["params"], action


@pytest.mark.parametrize("name", sorted(n for n, o in P4_OBJECTS.items() if o["kind"] == "Register"))
def test_register_shape(name):
    t = BFRT[name]
    cell = t["data"][0]["singleton"]
    assert cell["name"] == name[len("pipe.") :] + ".f1"
    assert cell["type"]["width"] == P4_OBJECTS[name]["width"]
    assert t["size"] == P4_OBJECTS[name]["size"]
    decl = next(r for r in PROGRAM.registers if r.name == name)
    assert decl.signed == P4_OBJECTS[name]["signed"]


@pytest.mark.parametrize("name", sorted(n for n, o in P4_OBJECTS.items() if o["kind"] == "Counter"))
def test_counter_shape(name):
    t = BFRT[name]
    assert t["size"] == P4_OBJECTS[name]["size"]
    assert {d["singleton"]["name"] for d in t["data"]} == {"$COUNTER_SPEC_BYTES", "$COUNTER_SPEC_PKTS"}


def test_default_actions_are_the_p4s():
    # The defaults the P4 declares (source.py does not read them; they are few and fixed).
    want = {
        "pipe.SwitchIngress.forward.forward": ("SwitchIngress.forward.drop", {}),
        "pipe.SwitchIngress.slice_map.map_slice": ("SwitchIngress.slice_map.set_slice", {"slice": 0}),
        "pipe.SwitchIngress.bidir_queue.config_slice": ("SwitchIngress.bidir_queue.unconfigured", {}),
        "pipe.SwitchIngress.dispatch.select_worker": ("SwitchIngress.dispatch.no_worker", {}),
        "pipe.SwitchIngress.dispatch.client_addr": ("NoAction", {}),
        "pipe.SwitchIngress.telemetry.config_int": ("SwitchIngress.telemetry.dont_stamp", {}),
        "pipe.SwitchEgress.rdma_writer.build_write": ("SwitchEgress.rdma_writer.skip_replica", {}),
    }
    got = {}
    for t in PROGRAM.tables:
        got[t.name] = (t.action(t.default_action).name, dict(t.default_params))
    assert got == want


def test_emulator_modules_are_named_like_the_p4_instances():
    from switch.emulator import rain

    instances = {n.split(".")[2] for n in (*NAMES.tables, *NAMES.registers, *NAMES.counters)}
    assert {c.__name__.rsplit(".", 1)[1] for c in rain.CONTROLS} == instances
