"""The emulator's table store: schema checks, bf-rt.json shape, lookup semantics, concurrency."""

from __future__ import annotations

import threading

import pytest

from switch.emulator import schema
from switch.emulator.schema import Action, Key, Param, Program, Register, Table
from switch.emulator.tables import (
    AlreadyExists,
    Code,
    InvalidArgument,
    NotFound,
    OutOfRange,
    TableFull,
    TableStore,
)
from tests.bfrt_program import PROGRAM


@pytest.fixture
def store():
    return TableStore(PROGRAM, pipes=2)


def test_bfrt_json_shape():
    lay = schema.layout(PROGRAM)
    p4 = {t["name"]: t for t in lay.p4_json()["tables"]}
    fwd = p4["pipe.SwitchIngress.forward.forward"]
    assert fwd["table_type"] == "MatchAction_Direct" and fwd["size"] == 4
    assert [k["name"] for k in fwd["key"]] == ["hdr.ethernet.dst_addr"]
    assert fwd["key"][0]["match_type"] == "Exact" and fwd["key"][0]["type"] == {"type": "bytes", "width": 48}
    assert {a["name"] for a in fwd["action_specs"]} == {
        "SwitchIngress.forward.set_egress",
        "SwitchIngress.forward.drop",
    }
    acl = p4["pipe.SwitchIngress.acl.acl"]
    assert [(k["name"], k["match_type"]) for k in acl["key"]][-1] == ("$MATCH_PRIORITY", "Exact")
    assert next(k for k in acl["key"] if k["name"] == "$MATCH_PRIORITY")["id"] == 65537
    route = p4["pipe.SwitchIngress.route.route"]
    assert "$MATCH_PRIORITY" not in [k["name"] for k in route["key"]]
    assert "NoAction" in [a["name"] for a in route["action_specs"]]
    assert p4["pipe.SwitchEgress.acl.acl"]["has_const_default_action"] is True
    reg = p4["pipe.SwitchIngress.bidir_queue.balance"]
    assert reg["table_type"] == "Register" and reg["supported_operations"] == ["Sync"]
    assert reg["key"] == [
        {
            "id": 65557,
            "name": "$REGISTER_INDEX",
            "repeated": False,
            "annotations": [],
            "mandatory": True,
            "match_type": "Exact",
            "type": {"type": "uint32"},
        }
    ]
    # As bf-p4c writes a register: one mandatory, non-repeated cell (a read repeats the
    # field once per pipe); no table annotations, no has_const_default_action.
    assert reg["data"][0]["mandatory"] is True and reg["data"][0]["singleton"]["repeated"] is False
    assert "annotations" not in reg and "has_const_default_action" not in reg and "action_specs" not in reg
    cell = reg["data"][0]["singleton"]
    assert cell["name"] == "SwitchIngress.bidir_queue.balance.f1" and cell["id"] == 1
    assert cell["type"] == {"type": "bytes", "width": 32}
    assert {"name": "$bfrt_field_class", "value": "register_data"} in cell["annotations"]
    ctr = p4["pipe.SwitchIngress.events.events"]
    assert ctr["key"][0]["name"] == "$COUNTER_INDEX"
    assert {d["singleton"]["name"]: d["singleton"]["id"] for d in ctr["data"]} == {
        "$COUNTER_SPEC_BYTES": 65553,
        "$COUNTER_SPEC_PKTS": 65554,
    }
    assert all(k["mandatory"] is False for k in fwd["key"])  # bf-p4c marks no P4 key field mandatory
    assert "has_const_default_action" not in ctr and "annotations" in ctr
    common = {"name", "id", "table_type", "size", "depends_on", "key", "data", "supported_operations", "attributes"}
    for t in p4.values():
        assert set(t) >= common
        if t["table_type"] == "MatchAction_Direct":
            assert set(t) >= {"annotations", "has_const_default_action", "action_specs"}
    assert p4["pipe.SwitchIngressParser.$PORT_METADATA"]["key"][0]["name"] == "ig_intr_md.ingress_port"
    assert {n for n in p4 if n.startswith("pipe.snapshot.")} == {
        f"pipe.snapshot.{n}"
        for n in ("cfg", *(f"{g}_{t}" for g in ("ingress", "egress") for t in ("trigger", "data", "liveness")))
    }
    cfg = p4["pipe.snapshot.cfg"]
    assert cfg["depends_on"] == [p4["pipe.snapshot.egress_trigger"]["id"], p4["pipe.snapshot.ingress_trigger"]["id"]]
    fixed = {t["name"]: t for t in lay.non_p4_json()["tables"]}
    assert fixed["$pre.mgid"]["id"] == 0xFF020001 and fixed["$pre.node"]["id"] == 0xFF020002
    assert fixed["$PORT"]["id"] == 0xFF010001 and fixed["$PORT_STAT"]["id"] == 0xFF010002
    node = {d["singleton"]["name"]: d for d in fixed["$pre.node"]["data"]}
    assert node["$MULTICAST_RID"]["mandatory"] and node["$MULTICAST_RID"]["singleton"]["type"]["type"] == "uint16"
    assert node["$DEV_PORT"]["singleton"]["repeated"] and node["$DEV_PORT"]["singleton"]["id"] == 3
    port = {d["singleton"]["name"]: d for d in fixed["$PORT"]["data"]}
    assert port["$PORT_UP"]["read_only"] and port["$PORT_UP"]["singleton"]["id"] == 25
    assert (
        port["$SPEED"]["singleton"]["type"]["type"] == "string"
        and "BF_SPEED_100G" in port["$SPEED"]["singleton"]["type"]["choices"]
    )


def test_schema_rejects_bad_declarations():
    a = Action("C.a", [Param("x", 8)])
    with pytest.raises(schema.SchemaError, match="more than one LPM"):
        Program("p", tables=[Table("pipe.C.t", [Key("a", 8, "LPM"), Key("b", 8, "LPM")], [a], 4)])
    with pytest.raises(schema.SchemaError, match="default_params"):
        Program("p", tables=[Table("pipe.C.t", [Key("a", 8)], [a], 4, default_action="a")])
    with pytest.raises(schema.SchemaError, match="declared twice"):
        Program("p", registers=[Register("pipe.C.r", 32, 4), Register("pipe.C.r", 32, 4)])
    with pytest.raises(schema.SchemaError, match="width"):
        Program("p", registers=[Register("pipe.C.r", 12, 4)])


def test_names_resolve_by_unique_suffix(store):
    assert store.table("forward").name == "pipe.SwitchIngress.forward.forward"
    assert store.table("SwitchIngress.acl.acl").name == "pipe.SwitchIngress.acl.acl"
    with pytest.raises(NotFound, match="ambiguous"):
        store.table("acl")  # ingress and egress both end in acl.acl
    with pytest.raises(NotFound) as unknown:
        store.table("forwrd")
    assert "forward" in unknown.value.fix
    assert store.register("balance").name == "pipe.SwitchIngress.bidir_queue.balance"


def test_exact_lookup_default_and_limits(store):
    fwd = store.table("forward")
    assert fwd.lookup(0xAA) == ("drop", {})
    fwd.add(0xAA, "set_egress", {"port": 5})
    action, params = fwd.lookup(0xAA)
    assert (action, params) == ("set_egress", {"port": 5})
    assert fwd.find(0xAB) is None
    with pytest.raises(AlreadyExists):
        fwd.add(0xAA, "drop")
    for mac in (1, 2, 3):
        fwd.add(mac, "drop")
    with pytest.raises(TableFull) as full:
        fwd.add(4, "drop")
    assert full.value.code == Code.RESOURCE_EXHAUSTED
    with pytest.raises(InvalidArgument, match="does not fit|not an unsigned"):
        fwd.modify(0xAA, "set_egress", {"port": 512})
    with pytest.raises(InvalidArgument, match="missing parameters"):
        fwd.modify(0xAA, "set_egress", {})
    fwd.modify(0xAA, "set_egress", {"port": 7})
    assert fwd.lookup(0xAA).params == {"port": 7}
    fwd.set_default("set_egress", {"port": 1})
    assert fwd.lookup(0x99) == ("set_egress", {"port": 1})
    fwd.reset_default()
    assert fwd.default == ("drop", {})
    fwd.delete(0xAA)
    with pytest.raises(NotFound):
        fwd.delete(0xAA)
    assert len(fwd.clear()) == 3 and len(fwd) == 0
    with pytest.raises(InvalidArgument, match="const"):
        store.table("pipe.SwitchEgress.acl.acl").set_default("deny")


def test_lpm_longest_prefix_wins(store):
    route = store.table("route")
    route.add((0, (0x0A000000, 8)), "set_nexthop", {"nexthop": 1})
    route.add({"vrf": 0, "dst_addr": (0x0A010000, 16)}, "set_nexthop", {"nexthop": 2})
    route.add((0, 0x0A010203), "set_nexthop", {"nexthop": 3})  # a bare value is a /32
    route.add((1, None), "set_nexthop", {"nexthop": 4})  # default route of VRF 1
    assert route.lookup(0, 0x0A010203).params == {"nexthop": 3}
    assert route.lookup(0, 0x0A010204).params == {"nexthop": 2}
    assert route.lookup(0, 0x0A020304).params == {"nexthop": 1}
    assert route.lookup(0, 0x0B000000).action == "NoAction"
    assert route.lookup(1, 0x01020304).params == {"nexthop": 4}
    route.delete((0, (0x0A010000, 16)))
    assert route.lookup(0, 0x0A010204).params == {"nexthop": 1}
    assert route.get((0, (0x0A0000FF, 8))).key == (0, (0x0A000000, 8))  # host bits are masked off


def test_tcam_priority_ranges_and_optional(store):
    acl = store.table("SwitchIngress.acl.acl")
    with pytest.raises(InvalidArgument, match="MATCH_PRIORITY"):
        acl.add((None, None, None), "deny")
    acl.add(((0x0A000000, 0xFF000000), (1000, 2000), None), "deny", priority=20)
    acl.add((None, None, 5), "mark", {"dscp": 46}, priority=10)
    acl.add((None, 80, None), "permit", priority=30)
    assert acl.lookup(0x0A000001, 1500, 5) == ("mark", {"dscp": 46})  # lowest priority value wins
    assert acl.lookup(0x0A000001, 1500, 6).action == "deny"
    assert acl.lookup(0x0A000001, 2001, 6).action == "permit"  # the default
    assert acl.lookup(0x0B000001, 80, 6).action == "permit"
    acl.add((None, None, None), "deny", priority=10)  # same priority as `mark`: the older entry wins
    assert acl.lookup(0x0B000001, 80, 5).action == "mark"
    assert acl.lookup(0x0B000001, 80, 6).action == "deny"
    with pytest.raises(InvalidArgument, match="low"):
        acl.add((None, (9, 3), None), "deny", priority=1)
    with pytest.raises(InvalidArgument, match="only be the default|cannot be the default"):
        acl.set_default("mark", {"dscp": 1})


def test_registers_are_per_pipe_and_wrap(store):
    reg = store.register("balance")
    reg[3] = -1
    assert reg[3] == -1 and reg.read(3) == [-1, 0] and reg.unsigned(reg[3]) == 0xFFFFFFFF
    reg[4] = 2**31  # wraps into the signed range
    assert reg[4] == -(2**31)
    reg.write(5, 7)
    assert reg.read(5) == [7, 7] and reg.read(5, pipe=1) == [7]
    with pytest.raises(OutOfRange):
        reg.read(16)
    with pytest.raises(OutOfRange):
        reg.write(0, 1, pipe=2)
    values = reg.values
    reg.clear()
    assert values is reg.values and reg[3] == 0


def test_counters(store):
    ctr = store.counter("events")
    ctr.count(2, 100)
    ctr.count(2, 50)
    assert ctr.read(2) == (2, 150)
    assert ctr.write(2) == (2, 150) and ctr.read(2) == (0, 0)


def test_pre_groups(store):
    pre = store.pre
    pre.add_node(1, rid=10, dev_ports=[4, 5])
    pre.add_node(2, rid=11, dev_ports=[6])
    with pytest.raises(NotFound):
        pre.add_group(7, [1, 3])
    pre.add_group(7, [1, 2])
    assert store.mcast_group(7) == ((10, (4, 5)), (11, (6,)))
    assert store.mcast_group(8) == ()
    pre.modify_node(2, dev_ports=[8])
    assert store.mcast_group(7)[1] == (11, (8,))
    pre.delete_node(1)  # dissociated from group 7 first, as the driver does
    assert store.mcast_group(7) == ((11, (8,)),) and 1 not in store.pre.nodes
    pre.delete_group(7)
    assert store.mcast_group(7) == ()


def test_ports_up_hook(store):
    ports = store.ports
    ports.add(4, "BF_SPEED_100G", "BF_FEC_TYP_REED_SOLOMON")
    assert ports.get(4).n_lanes == 4 and not ports.is_up(4)  # added ports start disabled, as on bf_switchd
    ports.modify(4, enable=True)
    assert ports.is_up(4)
    carrier = {4: False}
    ports.up_hook = carrier.get
    assert not ports.is_up(4)
    with pytest.raises(InvalidArgument, match="SPEED"):
        ports.add(5, "100G", "BF_FEC_TYP_NONE")
    ports.count_rx(4, 64)
    assert ports.stats(4)["$FramesReceivedOK"] == 1


def test_readers_never_see_a_torn_table(store):
    """A data-plane thread looks up while the control plane inserts and deletes."""
    acl = store.table("SwitchIngress.acl.acl")
    route = store.table("route")
    stop = threading.Event()
    seen: list[str] = []

    def reader():
        while not stop.is_set():
            a = acl.lookup(0x0A000001, 1500, 3).action
            r = route.lookup(0, 0x0A010101)
            if a not in ("deny", "permit") or r.action not in ("set_nexthop", "NoAction"):
                seen.append(f"{a} {r}")

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(300):
            acl.add(((0x0A000000, 0xFF000000), None, None), "deny", priority=i % 7)
            route.add((0, (0x0A010000, 16)), "set_nexthop", {"nexthop": i})
            acl.delete(((0x0A000000, 0xFF000000), None, None), priority=i % 7)
            route.delete((0, (0x0A010000, 16)))
    finally:
        stop.set()
        t.join()
    assert seen == []


def test_single_field_keys_may_be_bare():
    lpm = Table("pipe.C.route.route", [Key("dst", 32, "LPM")], [Action("C.route.nh", [Param("nh", 8)])], 8)
    store = TableStore(Program("p", tables=[lpm]))
    route = store.table("route")
    route.add((0x0A000000, 8), "nh", {"nh": 1})  # a bare (value, prefix_len) pair
    route.add(((0x0A0A0000, 16),), "nh", {"nh": 2})  # or in a 1-tuple
    route.add(None, "nh", {"nh": 3})  # 0/0
    assert route.lookup(0x0A0A0101).params == {"nh": 2}
    assert route.lookup(0x0A0B0101).params == {"nh": 1}
    assert route.lookup(0x0B000000).params == {"nh": 3}
    route.delete((0x0A0A0000, 16))
    assert route.lookup(0x0A0A0101).params == {"nh": 1}


def test_front_panel_names(store):
    """`--port 132=swp1:1/0` names dev_port 132 "1/0": what $PORT_STR_INFO and
    $PORT_HDL_INFO resolve (the board decides it on a Tofino)."""
    from switch.emulator.ports import PortError, PortSpec

    assert PortSpec.parse("132=swp1:1/0") == PortSpec(132, "swp1", "1/0")
    assert PortSpec.parse("140=swp2") == PortSpec(140, "swp2", None)
    for bad in ("132=swp1:1", "132=swp1:a/0", "132=:1/0"):
        with pytest.raises(PortError):
            PortSpec.parse(bad)
    store.ports.set_name(132, "1/0")
    store.ports.set_name(140, "2/0")
    assert store.ports.by_name("2/0") == 140 and store.ports.by_handle(1, 0) == 132
    with pytest.raises(AlreadyExists):
        store.ports.set_name(148, "1/0")
    with pytest.raises(NotFound):
        store.ports.by_name("3/0")
    with pytest.raises(InvalidArgument):
        store.ports.set_name(148, "3")


def test_reset_is_the_initial_state_in_place(store):
    fwd = store.table("forward")
    fwd.add(1, "set_egress", {"port": 3})
    fwd.set_default("set_egress", {"port": 9})
    reg = store.register("balance")
    cells = reg.values
    reg[2] = 5
    store.pre.add_node(1, 1, [132])
    store.pre.add_group(7, [1])
    store.ports.add(132, "BF_SPEED_100G", "BF_FEC_TYP_RS", enable=True)
    assert store.ports.get(132).fec == "BF_FEC_TYP_REED_SOLOMON"  # an alias of SDE 9.13, read back long
    store.reset()
    assert len(fwd) == 0 and fwd.default_entry() == ("SwitchIngress.forward.drop", {})
    assert reg.values is cells and reg[2] == 0
    assert store.mcast_group(7) == () and not store.pre.nodes
    assert store.ports.get(132).enable  # ports stay configured
