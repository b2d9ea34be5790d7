"""BFRuntime: rainmaker's client against the emulator's server, over loopback.

Also drives the server exactly as the SDE's bfrt_grpc client does (raw stubs), checks
the proto against the field numbers of docs/bfruntime.md, and sends it garbage.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from grpc_status import rpc_status

from switch.bfrt import _stubs
from switch.bfrt import bfruntime_pb2 as pb
from switch.bfrt import bfruntime_pb2_grpc as pb_grpc
from switch.bfrt.client import Client
from switch.bfrt.errors import BfrtConnectError, BfrtError, BfrtNameError, BfrtValueError
from switch.emulator.bfrt_server import BfrtServerError, serve
from switch.emulator.tables import TableStore
from tests.bfrt_program import PROGRAM

P4 = PROGRAM.name  # what a client that has not bound names in its requests

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server():
    srv = serve(TableStore(PROGRAM, pipes=2), "127.0.0.1", 0)
    yield srv
    srv.stop(None)


@pytest.fixture
def client(server):
    with Client(f"127.0.0.1:{server.port}", "bfrt_test") as c:
        yield c


@pytest.fixture
def stub(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield pb_grpc.BfRuntimeStub(channel)
    channel.close()


def details(e: grpc.RpcError) -> list[pb.Error]:
    """The per-update errors of a failed call's `grpc-status-details-bin` trailer."""
    status = rpc_status.from_call(e)
    if status is None:  # no trailer: the whole call was refused
        return []
    out = []
    for any_ in status.details:
        assert any_.type_url == "type.googleapis.com/bfrt_proto.Error"
        err = pb.Error()
        any_.Unpack(err)
        out.append(err)
    return out


# ---------------------------------------------------------------- the proto


FIELD_NUMBERS = {  # message: {field: number}, from docs/bfruntime.md
    "TargetDevice": {"device_id": 1, "pipe_id": 2, "direction": 3, "prsr_id": 4},
    "WriteRequest": {"target": 1, "client_id": 2, "updates": 3, "atomicity": 4, "p4_name": 5},
    "WriteResponse": {"status": 1},
    "ReadRequest": {"target": 1, "client_id": 2, "entities": 3, "p4_name": 4},
    "ReadResponse": {"entities": 1, "status": 2},
    "Update": {"type": 1, "entity": 2},
    "Entity": {
        "table_entry": 1,
        "table_usage": 2,
        "table_attribute": 3,
        "table_operation": 4,
        "object_id": 5,
        "handle": 6,
    },
    "TableOperation": {"table_id": 1, "table_operations_type": 2},
    "TableEntry": {
        "table_id": 1,
        "key": 2,
        "handle_id": 7,
        "data": 3,
        "is_default_entry": 4,
        "entry_tgt": 8,
        "table_flags": 9,
    },
    "TableFlags": {"from_hw": 1, "key_only": 2, "mod_del": 3, "reset_ttl": 4, "reset_stats": 5},
    "TableKey": {"fields": 1},
    "KeyField": {"field_id": 1, "exact": 2, "ternary": 3, "lpm": 4, "range": 5, "optional": 6},
    "KeyField.Exact": {"value": 1},
    "KeyField.Ternary": {"value": 1, "mask": 2},
    "KeyField.LPM": {"value": 1, "prefix_len": 2},
    "KeyField.Range": {"low": 1, "high": 2},
    "KeyField.Optional": {"value": 1, "is_valid": 2},
    "TableData": {"action_id": 1, "fields": 2},
    "DataField": {
        "field_id": 1,
        "stream": 2,
        "float_val": 3,
        "str_val": 4,
        "int_arr_val": 5,
        "bool_arr_val": 6,
        "container_arr_val": 7,
        "bool_val": 8,
        "str_arr_val": 9,
    },
    "DataField.IntArray": {"val": 1},
    "DataField.BoolArray": {"val": 1},
    "DataField.StrArray": {"val": 1},
    "TableAttribute": {"table_id": 1, "idle_table": 2, "pre_device_config": 9, "selector_update_notify": 10},
    "StreamMessageRequest": {"client_id": 1, "subscribe": 2, "digest_ack": 3},
    "Subscribe": {"is_master": 1, "device_id": 2, "notifications": 3, "status": 4},
    "Subscribe.Notifications": {
        "enable_learn_notifications": 1,
        "enable_idletimeout_notifications": 2,
        "enable_port_status_change_notifications": 3,
        "enable_entry_active_notifications": 4,
        "enable_selector_update_change_notifications": 5,
    },
    "StreamMessageResponse": {
        "subscribe": 1,
        "digest": 2,
        "idle_timeout_notification": 3,
        "port_status_change_notification": 4,
        "set_forwarding_pipeline_config_response": 5,
        "selector_update_change_notification": 6,
    },
    "SetForwardingPipelineConfigRequest": {
        "device_id": 1,
        "client_id": 2,
        "action": 3,
        "dev_init_mode": 4,
        "base_path": 5,
        "config": 6,
    },
    "SetForwardingPipelineConfigResponse": {"set_forwarding_pipeline_config_response_type": 1},
    "ForwardingPipelineConfig": {"p4_name": 1, "bfruntime_info": 2, "profiles": 3},
    "ForwardingPipelineConfig.Profile": {"profile_name": 1, "context": 2, "binary": 3, "pipe_scope": 4},
    "GetForwardingPipelineConfigRequest": {"device_id": 1, "client_id": 2},
    "GetForwardingPipelineConfigResponse": {"config": 1, "non_p4_config": 2},
    "NonP4Config": {"bfruntime_info": 1},
    "Error": {"canonical_code": 1, "message": 2, "space": 3, "code": 4},
}


def test_proto_matches_the_facts():
    fd = pb.DESCRIPTOR
    assert fd.package == "bfrt_proto"
    assert "google/rpc/status.proto" in [d.name for d in fd.dependencies]
    for path, fields in FIELD_NUMBERS.items():
        outer, _, inner = path.partition(".")
        desc = fd.message_types_by_name[outer]
        if inner:
            desc = desc.nested_types_by_name[inner]
        assert {f: desc.fields_by_name[f].number for f in fields} == fields, path
    assert dict(pb.Update.Type.items()) == {
        "UNSPECIFIED": 0,
        "INSERT": 1,
        "MODIFY": 2,
        "MODIFY_INC": 3,
        "DELETE": 4,
        "INSERT_OR_MODIFY": 5,
        "RESET": 6,
    }
    assert pb.WriteRequest.CONTINUE_ON_ERROR == 0
    assert pb.SetForwardingPipelineConfigRequest.BIND == 0 and pb.SetForwardingPipelineConfigRequest.VERIFY == 1
    service = fd.services_by_name["BfRuntime"]
    shapes = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert shapes == {
        "Write": (False, False),
        "Read": (False, True),
        "SetForwardingPipelineConfig": (False, False),
        "GetForwardingPipelineConfig": (False, False),
        "StreamChannel": (True, True),
    }


def test_stubs_are_regenerated_when_stale(tmp_path):
    dest = tmp_path / "gen"
    _stubs.generate(dest)
    made = (dest / "bfruntime_pb2.py").stat().st_mtime_ns
    assert "from . import bfruntime_pb2" in (dest / "bfruntime_pb2_grpc.py").read_text()
    _stubs.generate(dest)  # up to date: untouched
    assert (dest / "bfruntime_pb2.py").stat().st_mtime_ns == made
    (dest / ".stamp").write_text("made from another proto\n")
    _stubs.generate(dest)
    assert (dest / ".stamp").read_text().strip() == _stubs.fingerprint()


# ---------------------------------------------------------------- session


def test_connect_bind_and_names(server, client):
    assert client.p4_name == "bfrt_test" and client.bound
    assert client.table("forward").name == "pipe.SwitchIngress.forward.forward"
    assert client.table("forward.forward").name == client.table("SwitchIngress.forward.forward").name
    assert client.table("SwitchIngress.acl.acl").info.has_priority
    with pytest.raises(BfrtNameError, match="ambiguous"):
        client.table("acl")
    with pytest.raises(BfrtNameError) as e:
        client.table("forwardd")
    assert "forward" in e.value.fix
    assert client.table("$pre.mgid").info.id == 0xFF020001
    assert client.table("mgid").name == "$pre.mgid"
    assert client.table("$PORT").info.data_field("$PORT_UP").read_only


def test_second_binder_and_unsubscribed_clients_are_refused(server, client):
    with pytest.raises(BfrtConnectError, match="Client ID 0 already owns this P4"):
        Client(f"127.0.0.1:{server.port}", client_id=1)
    with pytest.raises(BfrtConnectError, match="already subscribed"):
        Client(f"127.0.0.1:{server.port}", client_id=0, bind=False, subscribe_retries=1)
    with Client(f"127.0.0.1:{server.port}", client_id=2, bind=False) as watcher:  # reading needs no binding
        assert watcher.table("forward").entries() == []
    stub = pb_grpc.BfRuntimeStub(client._channel)
    request = pb.SetForwardingPipelineConfigRequest(
        client_id=7, config=[pb.ForwardingPipelineConfig(p4_name="bfrt_test")]
    )
    with pytest.raises(grpc.RpcError) as e:
        stub.SetForwardingPipelineConfig(request)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "Unknown client" in e.value.details()  # bf_switchd's
    client.close()  # the binding goes with the stream
    deadline = time.monotonic() + 5
    while True:
        try:
            with Client(f"127.0.0.1:{server.port}", client_id=1):
                break
        except BfrtConnectError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_unreachable_switch_is_reported(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here
    with pytest.raises(BfrtConnectError, match="did not answer"):
        Client(f"127.0.0.1:{port}", connect_timeout=0.3)


def test_serve_binds_only_the_given_address(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.2", server.port), timeout=2).close()
    with pytest.raises(BfrtServerError, match="cannot listen"):
        serve(PROGRAM, "127.0.0.1", server.port)


# ---------------------------------------------------------------- entries


def test_exact_entries(server, client):
    fwd = client.table("forward")
    fwd.add({"hdr.ethernet.dst_addr": 0x0C42A1DD5F3A}, "set_egress", {"port": 132})
    fwd.add(0x0C42A1DD5F3B, "SwitchIngress.forward.set_egress", {"port": 140})
    assert server.store.table("forward").lookup(0x0C42A1DD5F3A) == ("set_egress", {"port": 132})
    one = fwd.get(0x0C42A1DD5F3A)
    assert one.key == {"hdr.ethernet.dst_addr": 0x0C42A1DD5F3A}
    assert one.action == "SwitchIngress.forward.set_egress" and one.data == {"port": 132} and not one.is_default
    fwd.modify(0x0C42A1DD5F3A, "drop")
    assert fwd.get(0x0C42A1DD5F3A).action == "SwitchIngress.forward.drop"
    fwd.upsert(0x0C42A1DD5F3C, "drop")
    fwd.upsert(0x0C42A1DD5F3C, "set_egress", {"port": 1})
    assert {e.key["hdr.ethernet.dst_addr"]: e.data for e in fwd.entries()} == {
        0x0C42A1DD5F3A: {},
        0x0C42A1DD5F3B: {"port": 140},
        0x0C42A1DD5F3C: {"port": 1},
    }
    assert fwd.usage() == 3
    fwd.delete(0x0C42A1DD5F3B)
    with pytest.raises(BfrtError) as e:
        fwd.get(0x0C42A1DD5F3B)
    assert e.value.codes == ["NOT_FOUND"]
    with pytest.raises(BfrtError) as e:
        fwd.delete(0x0C42A1DD5F3B)
    assert e.value.errors[0].table == fwd.name and e.value.errors[0].index == 0


def test_default_entry(server, client):
    fwd = client.table("forward")
    d = fwd.default()
    assert d.is_default and d.action == "SwitchIngress.forward.drop" and d.key == {}
    fwd.set_default("set_egress", {"port": 9})
    assert fwd.default().data == {"port": 9}
    assert server.store.table("forward").lookup(0x1) == ("set_egress", {"port": 9})
    fwd.reset_default()
    assert fwd.default().action == "SwitchIngress.forward.drop"
    with pytest.raises(BfrtError, match="INVALID_ARGUMENT.*INSERT on the default entry"):
        client.write([fwd.update("INSERT", None, "drop", default=True)], [fwd.name])
    with pytest.raises(BfrtError, match="const"):
        client.table("pipe.SwitchEgress.acl.acl").set_default("deny")
    assert client.table("route").default().action == "NoAction"


def test_lpm_ternary_range_optional(server, client):
    route = client.table("route")
    route.add({"vrf": 0, "dst_addr": (0x0A000000, 8)}, "set_nexthop", {"nexthop": 1})
    route.add({"vrf": 0, "dst_addr": (0x0A010000, 16)}, "set_nexthop", {"nexthop": 2})
    assert server.store.table("route").lookup(0, 0x0A010101).params == {"nexthop": 2}
    assert {e.key["hdr.ipv4.dst_addr"] for e in route.entries()} == {(0x0A000000, 8), (0x0A010000, 16)}
    assert route.get({"vrf": 0, "dst_addr": (0x0A010000, 16)}).data == {"nexthop": 2}
    acl = client.table("SwitchIngress.acl.acl")
    acl.add({"src_addr": (0x0A000000, 0xFF000000), "l4_dst_port": (1000, 2000)}, "deny", priority=20)
    acl.add({"ingress_port": 5}, "mark", {"dscp": 46}, priority=10)
    with pytest.raises(BfrtValueError, match="priority"):
        acl.add({"ingress_port": 6}, "deny")
    lookup = server.store.table("SwitchIngress.acl.acl").lookup
    assert lookup(0x0A000001, 1500, 5) == ("mark", {"dscp": 46})
    assert lookup(0x0A000001, 1500, 6).action == "deny"
    assert lookup(0x0A000001, 2500, 6).action == "permit"
    got = acl.get({"src_addr": (0x0A000000, 0xFF000000), "l4_dst_port": (1000, 2000)}, priority=20)
    assert got.priority == 20 and got.action == "SwitchIngress.acl.deny"
    assert got.key == {
        "hdr.ipv4.src_addr": (0x0A000000, 0xFF000000),
        "ig_md.l4_dst_port": (1000, 2000),
        "ig_intr_md.ingress_port": (0, False),
    }
    assert {e.priority for e in acl.entries()} == {10, 20}
    acl.delete({"ingress_port": 5}, priority=10)
    assert lookup(0x0A000001, 1500, 5).action == "deny"


def test_table_full_and_duplicates_in_a_batch(server, client):
    fwd = client.table("forward")
    with pytest.raises(BfrtError) as e:
        with client.batch() as b:
            b.add(fwd, 1, "drop")
            b.add(fwd, 2, "drop")
            b.add(fwd, 1, "set_egress", {"port": 3})  # duplicate of update 0
            b.add(fwd, 3, "drop")
            b.add(fwd, 4, "drop")
            b.add(fwd, 5, "drop")  # the table holds 4
    err = e.value
    assert [(x.index, x.code_name) for x in err.errors] == [(2, "ALREADY_EXISTS"), (5, "RESOURCE_EXHAUSTED")]
    assert err.errors[0].table == "pipe.SwitchIngress.forward.forward"
    assert "update 2 (pipe.SwitchIngress.forward.forward): ALREADY_EXISTS" in str(err)
    assert err.grpc_code == grpc.StatusCode.UNKNOWN
    assert sorted(x.key["hdr.ethernet.dst_addr"] for x in fwd.entries()) == [1, 2, 3, 4]  # CONTINUE_ON_ERROR


def test_rollback_on_error(server, client):
    fwd, route = client.table("forward"), client.table("route")
    fwd.add(1, "drop")
    with pytest.raises(BfrtError) as e:
        with client.batch("ROLLBACK_ON_ERROR") as b:
            b.add(fwd, 2, "drop")
            b.modify(fwd, 1, "set_egress", {"port": 1})
            b.add(route, {"vrf": 1, "dst_addr": (0, 0)}, "set_nexthop", {"nexthop": 1})
            b.add(fwd, 1, "drop")  # fails: everything before is undone
            b.add(fwd, 3, "drop")
    # As bf_switchd aborts the transaction: only the failure is reported.
    assert [(x.index, x.code_name) for x in e.value.errors] == [(3, "ALREADY_EXISTS")]
    assert "1 of 5 refused" in str(e.value)
    assert [(x.key["hdr.ethernet.dst_addr"], x.action) for x in fwd.entries()] == [(1, "SwitchIngress.forward.drop")]
    assert route.entries() == []


def test_clear_table(server, client):
    fwd = client.table("forward")
    for mac in (1, 2, 3):
        fwd.add(mac, "drop")
    fwd.set_default("set_egress", {"port": 2})
    fwd.clear()
    assert fwd.entries() == [] and server.store.table("forward").lookup(1) == ("set_egress", {"port": 2})
    acl = client.table("SwitchIngress.acl.acl")
    acl.add({"ingress_port": 1}, "deny", priority=1)
    acl.clear()
    assert acl.entries() == []


# ---------------------------------------------------------------- registers, counters


def test_registers(server, client):
    balance = client.register("balance", signed=True)
    assert balance.size == 16 and balance.field.name == "SwitchIngress.bidir_queue.balance.f1"
    balance.write(3, -2)
    assert balance.read(3) == [-2, -2]  # one value per pipe (2 pipes)
    assert client.register("balance").read(3) == [0xFFFFFFFE] * 2  # unsigned unless told
    reg = server.store.register("balance")
    assert reg[3] == -2
    reg[4] = 1234  # the data plane writes pipe 0
    balance.sync()
    assert balance.read(4) == [1234, 0]
    everything = balance.read_all()
    assert len(everything) == 16 and everything[3] == [-2, -2] and everything[0] == [0, 0]
    balance.clear()
    assert balance.read(3) == [0, 0] and reg[4] == 0
    with pytest.raises(BfrtError) as e:
        balance.read(16)
    assert e.value.codes == ["INVALID_ARGUMENT"]  # as bf_switchd answers an index out of range


def test_register_values_on_the_wire(server, stub):
    """Raw: one `stream` per pipe, exactly ceil(32/8) bytes; pipe targets honoured."""
    lay = server.store.layout.by_name
    spec = lay["pipe.SwitchIngress.bidir_queue.balance"]
    server.store.register("balance").write(1, 0x01020304)
    key = pb.TableKey(fields=[pb.KeyField(field_id=65557, exact=pb.KeyField.Exact(value=(1).to_bytes(4, "big")))])
    for pipe, count in ((0xFFFF, 2), (1, 1)):
        req = pb.ReadRequest(
            p4_name=P4,
            target=pb.TargetDevice(device_id=0, pipe_id=pipe, direction=0xFF, prsr_id=0xFF),
            entities=[pb.Entity(table_entry=pb.TableEntry(table_id=spec.id, key=key))],
        )
        (entity,) = [e for r in stub.Read(req) for e in r.entities]
        fields = entity.table_entry.data.fields
        assert [(f.field_id, f.stream) for f in fields] == [(1, b"\x01\x02\x03\x04")] * count
        assert entity.table_entry.data.action_id == 0
        assert not entity.table_entry.HasField("entry_tgt")


def test_counters(server, client):
    events = client.counter("events")
    server.store.counter("events").count(2, 100)
    server.store.counter("events").count(2, 28)
    assert events.read(2) == (2, 128)
    assert events.read_all()[2].bytes == 128
    events.write(2)
    assert events.read(2) == (0, 0)
    server.store.counter("events").count(5, 1)
    events.clear()
    assert events.read(5) == (0, 0)


# ---------------------------------------------------------------- multicast and ports


def test_pre_nodes_and_groups(server, client):
    pre = client.pre
    pre.add_node(1, rid=10, dev_ports=[4, 5])
    pre.add_node(2, rid=11, dev_ports=[6])
    pre.add_group(7, [1, 2], l1_xids=[None, 3])
    assert server.store.mcast_group(7) == ((10, (4, 5)), (11, (6,)))
    assert pre.groups() == {7: [1, 2]}
    assert pre.nodes() == {
        1: {"rid": 10, "dev_ports": [4, 5], "lag_ids": []},
        2: {"rid": 11, "dev_ports": [6], "lag_ids": []},
    }
    raw = client.table("$pre.mgid").get({"$MGID": 7}).data
    assert raw["$MULTICAST_NODE_L1_XID_VALID"] == [False, True] and raw["$MULTICAST_NODE_L1_XID"] == [0, 3]
    with pytest.raises(BfrtError) as e:
        pre.add_group(8, [1, 9])
    assert e.value.codes == ["NOT_FOUND"] and e.value.errors[0].table == "$pre.mgid"
    pre.delete_node(1)  # bf_switchd takes it out of its group, then deletes it
    assert pre.groups() == {7: [2]} and server.store.mcast_group(7) == ((11, (6,)),)
    pre.add_node(1, rid=10, dev_ports=[4, 5])
    # MODIFY_INC adds members (and removes them with mod_del)
    mgid = client.table("$pre.mgid")
    client.write(
        [
            mgid.update(
                "MODIFY_INC",
                {"$MGID": 7},
                data={
                    "$MULTICAST_NODE_ID": [1],
                    "$MULTICAST_NODE_L1_XID_VALID": [False],
                    "$MULTICAST_NODE_L1_XID": [0],
                },
            )
        ]
    )
    assert pre.groups() == {7: [2, 1]}
    pre.clear()
    assert pre.groups() == {} and pre.nodes() == {} and server.store.mcast_group(7) == ()


def test_ports(server, client):
    ports = client.ports
    ports.add(132, "100G", "rs")
    cfg = ports.get(132)
    assert cfg["$SPEED"] == "BF_SPEED_100G" and cfg["$FEC"] == "BF_FEC_TYP_REED_SOLOMON"
    assert cfg["$PORT_ENABLE"] is True and cfg["$N_LANES"] == 4
    assert ports.is_up(132)
    carrier = {132: False}
    server.store.ports.up_hook = lambda p: carrier.get(p, True)  # the data plane's view of the link
    assert not ports.is_up(132)
    carrier[132] = True
    assert ports.is_up(132)
    ports.modify(132, enable=False)
    assert not ports.is_up(132) and ports.get(132)["$PORT_ENABLE"] is False
    ports.add(140, "BF_SPEED_25G", "BF_FEC_TYP_NONE", enable=False)
    assert sorted(ports.all()) == [132, 140]
    ports.add(140, "100G")  # bf_switchd: an added port is kept (its speed too) and modified
    assert ports.get(140)["$SPEED"] == "BF_SPEED_25G" and ports.get(140)["$PORT_ENABLE"] is True
    with pytest.raises(BfrtValueError, match="SPEED"):
        ports.add(150, "42G")
    port = client.table("$PORT")
    with pytest.raises(BfrtError, match="read-only"):
        port.modify({"$DEV_PORT": 132}, data={"$PORT_UP": True})
    server.store.ports.count_rx(132, 64)
    stat = client.table("$PORT_STAT").get({"$DEV_PORT": 132}).data
    assert stat["$FramesReceivedOK"] == 1 and stat["$OctetsReceived"] == 64
    ports.delete(140)
    assert sorted(ports.all()) == [132]


def test_front_panel_names_and_attributes(server, client):
    """String keys ($PORT_STR_INFO) and attribute reads through rainmaker's client."""
    server.store.ports.set_name(132, "1/0")
    server.store.ports.set_name(140, "2/0")
    assert client.ports.dev_port("2/0") == 140
    names = client.table("$PORT_STR_INFO").entries()
    assert [(e.key["$PORT_NAME"], e.data["$DEV_PORT"]) for e in names] == [("1/0", 132), ("2/0", 140)]
    with pytest.raises(BfrtError) as e:
        client.ports.dev_port("7/1")
    assert e.value.codes == ["NOT_FOUND"]
    client.ports.add(132, "100G", "fc")
    assert client.ports.get(132)["$PORT_NAME"] == "1/0"
    # The switch reads firecode back as BF_FEC_TYP_FC; Ports shows the name it writes.
    assert client.table("$PORT").get({"$DEV_PORT": 132}).data["$FEC"] == "BF_FEC_TYP_FC"
    assert client.ports.get(132)["$FEC"] == client.ports.all()[132]["$FEC"] == "BF_FEC_TYP_FIRECODE"
    scope = client.table("forward").attribute("EntryScope").entry_scope
    assert scope.pipe_scope.predef == pb.Mode.ALL and scope.pipe_scope.args == 0b11  # 2 pipes
    assert client.table("$PORT").attribute("port_status_notif_cb").port_status_notify.enable is False
    with pytest.raises(BfrtValueError):
        client.table("$PORT").attribute("EntryScope")


# ---------------------------------------------------------------- bad requests


def _entry_write(table_id, key_fields=(), action_id=0, data_fields=(), type=pb.Update.INSERT):
    entry = pb.TableEntry(
        table_id=table_id,
        key=pb.TableKey(fields=list(key_fields)),
        data=pb.TableData(action_id=action_id, fields=list(data_fields)),
    )
    return pb.Update(type=type, entity=pb.Entity(table_entry=entry))


def _exact(field_id, value: bytes):
    return pb.KeyField(field_id=field_id, exact=pb.KeyField.Exact(value=value))


def test_bad_requests_get_errors_and_the_server_keeps_serving(server, client, stub):
    lay = server.store.layout.by_name
    fwd = lay["pipe.SwitchIngress.forward.forward"]
    set_egress = fwd.action_by_name["SwitchIngress.forward.set_egress"].id
    port9 = pb.DataField(field_id=1, stream=b"\x00\x05")
    mac = (1).to_bytes(6, "big")
    updates = [
        _entry_write(0xDEAD, [_exact(1, mac)]),  # 0 unknown table
        _entry_write(fwd.id, [_exact(99, mac)], set_egress, [port9]),  # 1 unknown key field
        _entry_write(fwd.id, [_exact(1, b"\x01")], set_egress, [port9]),  # 2 wrong width (1 byte of 6)
        _entry_write(fwd.id, [_exact(1, mac)], 0x7777, [port9]),  # 3 unknown action
        _entry_write(fwd.id, [_exact(1, mac)], set_egress, []),  # 4 missing parameter
        _entry_write(
            fwd.id, [_exact(1, mac)], set_egress, [pb.DataField(field_id=1, stream=b"\x02\x00")]
        ),  # 5 value wider than 9 bits
        _entry_write(
            fwd.id, [pb.KeyField(field_id=1, ternary=pb.KeyField.Ternary(value=mac, mask=mac))], set_egress, [port9]
        ),  # 6 wrong match type
        _entry_write(fwd.id, [pb.KeyField(field_id=1)], set_egress, [port9]),  # 7 no match value at all
        pb.Update(type=pb.Update.INSERT, entity=pb.Entity()),  # 8 empty entity
        pb.Update(entity=pb.Entity(table_entry=pb.TableEntry(table_id=fwd.id))),  # 9 no update type
        _entry_write(fwd.id, [_exact(1, mac)], set_egress, [pb.DataField(field_id=1, str_val="five")]),  # 10 type
        _entry_write(fwd.id, [_exact(1, mac)], set_egress, [port9]),  # 11 fine
        _entry_write(fwd.id, [], type=pb.Update.INSERT),  # 12 INSERT without key
    ]
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(pb.WriteRequest(target=pb.TargetDevice(pipe_id=0xFFFF), updates=updates, p4_name=P4))
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    errs = details(e.value)
    assert len(errs) == len(updates)
    codes = [code_pb2.Code.Name(x.canonical_code) for x in errs]
    assert codes == ["NOT_FOUND"] + ["INVALID_ARGUMENT"] * 10 + ["OK", "INVALID_ARGUMENT"]
    assert "1 bytes, expected 6" in errs[2].message and "Exact" in errs[6].message
    # Reads of nonsense fail the same way.
    with pytest.raises(grpc.RpcError) as e:
        list(
            stub.Read(
                pb.ReadRequest(p4_name=P4, entities=[pb.Entity(table_entry=pb.TableEntry(table_id=12345)), pb.Entity()])
            )
        )
    assert [code_pb2.Code.Name(x.canonical_code) for x in details(e.value)] == ["NOT_FOUND", "INVALID_ARGUMENT"]
    # Unknown operations, devices, programs.
    op = pb.Update(
        type=pb.Update.INSERT,
        entity=pb.Entity(
            table_operation=pb.TableOperation(
                table_id=lay["pipe.SwitchIngress.bidir_queue.balance"].id, table_operations_type="Defragment"
            )
        ),
    )
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(pb.WriteRequest(updates=[op], p4_name=P4))
    assert e.value.code() == grpc.StatusCode.UNKNOWN and len(details(e.value)) == 1
    # A wrong device or program refuses the whole call, as bf_switchd does (no per-update
    # details): the stub shares client id 0 with `client`, which is bound on device 0.
    for request, code in (
        (pb.WriteRequest(target=pb.TargetDevice(device_id=3), updates=updates[11:12]), "INVALID_ARGUMENT"),
        (pb.WriteRequest(p4_name="other", updates=updates[11:12]), "NOT_FOUND"),
    ):
        with pytest.raises(grpc.RpcError) as e:
            stub.Write(request)
        assert e.value.code().name == code and not details(e.value)
    # Bytes that are not a protobuf at all.
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    garbage = channel.unary_unary("/bfrt_proto.BfRuntime/Write")
    with pytest.raises(grpc.RpcError):
        garbage(b"\xff\xff\xff\xff\x0f garbage", timeout=5)
    with pytest.raises(grpc.RpcError) as e:
        channel.unary_unary("/bfrt_proto.BfRuntime/Nonsense")(b"", timeout=5)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    channel.close()
    # Still serving, and the one good update of the batch is in.
    assert client.table("forward").get(1).data == {"port": 5}
    with pytest.raises(BfrtValueError):
        client.table("forward").add(1 << 48, "drop")  # the client checks widths too


def test_read_echoes_entry_tgt_only_when_asked(server, stub):
    spec = server.store.layout.by_name["pipe.SwitchIngress.forward.forward"]
    server.store.table("forward").add(7, "set_egress", {"port": 300})
    tgt = pb.TargetDevice(device_id=0, pipe_id=0xFFFF, direction=0xFF, prsr_id=0xFF)
    plain = pb.TableEntry(table_id=spec.id)
    asked = pb.TableEntry(table_id=spec.id, entry_tgt=tgt)
    (a,) = [
        e.table_entry
        for r in stub.Read(pb.ReadRequest(target=tgt, p4_name=P4, entities=[pb.Entity(table_entry=plain)]))
        for e in r.entities
    ]
    (b,) = [
        e.table_entry
        for r in stub.Read(pb.ReadRequest(target=tgt, p4_name=P4, entities=[pb.Entity(table_entry=asked)]))
        for e in r.entities
    ]
    assert not a.HasField("entry_tgt") and b.entry_tgt == tgt
    assert a.key.fields[0].exact.value == (7).to_bytes(6, "big")  # keys come back with the schema's match type
    assert a.data.action_id == spec.action_by_name["SwitchIngress.forward.set_egress"].id
    assert a.data.fields[0].stream == (300).to_bytes(2, "big")  # ceil(9/8) bytes


# ---------------------------------------------------------------- the SDE client's way


def test_driven_like_the_sde_bfrt_grpc_client(server):
    """The connect sequence of bfrt_grpc (docs/bfruntime.md): subscribe and wait 1 s for status 0,
    GetForwardingPipelineConfig and json.loads of both blobs, bind without device_id,
    write and read, then half-close the stream and join the receive thread."""
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = pb_grpc.BfRuntimeStub(channel)
    requests: queue.Queue = queue.Queue()
    replies: queue.Queue = queue.Queue()

    def request_stream():
        while (r := requests.get()) is not None:
            yield r

    stream = stub.StreamChannel(request_stream())

    def receive():
        for response in stream:
            replies.put(response)

    receiver = threading.Thread(target=receive)
    receiver.start()
    try:
        sub = pb.Subscribe(device_id=0)
        sub.notifications.enable_learn_notifications = True
        sub.notifications.enable_idletimeout_notifications = True
        sub.notifications.enable_port_status_change_notifications = True
        for _ in range(5):
            requests.put(pb.StreamMessageRequest(client_id=0, subscribe=sub))
            try:
                reply = replies.get(timeout=1)
            except queue.Empty:
                continue
            if reply.HasField("subscribe") and reply.subscribe.status.code == 0:
                break
        else:
            raise RuntimeError("subscribe failed")

        got = stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(client_id=0, device_id=0))
        config = got.config[0]
        assert config.p4_name == "bfrt_test"
        p4, non_p4 = json.loads(config.bfruntime_info), json.loads(got.non_p4_config.bfruntime_info)
        assert "tables" in p4 and "tables" in non_p4
        tables = {t["name"]: t for t in p4["tables"] + non_p4["tables"]}

        bind = pb.SetForwardingPipelineConfigRequest(
            client_id=0, config=[pb.ForwardingPipelineConfig(p4_name="bfrt_test")]
        )
        assert bind.SerializeToString().count(b"bfrt_test") == 1 and not bind.device_id and not bind.action
        assert stub.SetForwardingPipelineConfig(bind).SerializeToString() == b""

        fwd = tables["pipe.SwitchIngress.forward.forward"]
        key_field = fwd["key"][0]
        action = next(a for a in fwd["action_specs"] if a["name"] == "SwitchIngress.forward.set_egress")
        param = action["data"][0]
        width = lambda f: (f["type"]["width"] + 7) // 8  # noqa: E731
        target = pb.TargetDevice(device_id=0, pipe_id=0xFFFF, direction=0xFF, prsr_id=0xFF)
        entry = pb.TableEntry(
            table_id=fwd["id"],
            key=pb.TableKey(
                fields=[
                    pb.KeyField(
                        field_id=key_field["id"],
                        exact=pb.KeyField.Exact(value=(0xAB).to_bytes(width(key_field), "big")),
                    )
                ]
            ),
            data=pb.TableData(
                action_id=action["id"],
                fields=[pb.DataField(field_id=param["id"], stream=(17).to_bytes(width(param), "big"))],
            ),
        )
        stub.Write(
            pb.WriteRequest(
                target=target,
                client_id=0,
                p4_name="bfrt_test",
                updates=[pb.Update(type=pb.Update.INSERT, entity=pb.Entity(table_entry=entry))],
            )
        )
        assert server.store.table("forward").lookup(0xAB) == ("set_egress", {"port": 17})

        reg = tables["pipe.SwitchIngress.bidir_queue.balance"]
        stub.Write(
            pb.WriteRequest(
                target=target,
                client_id=0,
                p4_name="bfrt_test",
                updates=[
                    pb.Update(
                        type=pb.Update.INSERT,
                        entity=pb.Entity(
                            table_operation=pb.TableOperation(table_id=reg["id"], table_operations_type="Sync")
                        ),
                    )
                ],
            )
        )
        read = pb.ReadRequest(
            target=target,
            client_id=0,
            p4_name="bfrt_test",
            entities=[
                pb.Entity(
                    table_entry=pb.TableEntry(
                        table_id=reg["id"],
                        key=pb.TableKey(
                            fields=[pb.KeyField(field_id=65557, exact=pb.KeyField.Exact(value=(0).to_bytes(4, "big")))]
                        ),
                    )
                )
            ],
        )
        (answer,) = [e.table_entry for r in stub.Read(read) for e in r.entities]
        assert [f.field_id for f in answer.data.fields] == [reg["data"][0]["singleton"]["id"]] * 2

        entries = [
            e.table_entry
            for r in stub.Read(
                pb.ReadRequest(
                    target=target, client_id=0, entities=[pb.Entity(table_entry=pb.TableEntry(table_id=fwd["id"]))]
                )
            )
            for e in r.entities
        ]
        assert len(entries) == 1 and entries[0].key.fields[0].WhichOneof("match_type") == "exact"
    finally:
        requests.put(None)  # tearDown: half-close, then join the receive thread
        start = time.monotonic()
        receiver.join(timeout=5)
        assert not receiver.is_alive(), "the server did not end StreamChannel after the half-close"
        assert time.monotonic() - start < 2
        channel.close()


def test_failed_write_trailer_without_details_is_not_sent(server, stub):
    """A refused update's UNKNOWN carries details (else bfrt_grpc raises a bare RuntimeError);
    only a client with no program (test_unbound_client_without_p4_name_is_refused) gets
    a bare UNKNOWN, as from bf_switchd."""
    spec = server.store.layout.by_name["pipe.SwitchIngress.forward.forward"]
    bad = _entry_write(spec.id, [_exact(1, b"")])
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(pb.WriteRequest(updates=[bad], p4_name=P4))
    trailer = dict(e.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(trailer)
    assert status.code == code_pb2.UNKNOWN and len(status.details) == 1
