"""The emulator driven the way scripts written for bf_switchd drive it with the SDE's
Python client (bfrt_grpc): raw stubs, and bf-rt.json decoded with that client's rules.

The SDE client is not on PyPI and is not vendored here; `SdeView` below re-states, from
the protocol, the rules of its that a server can break:
- bf-rt.json: every table has name, id, table_type, size, key, data, attributes and
  supported_operations; a data entry is a singleton (or oneof) whose `mandatory` and
  `read_only` sit beside it and `repeated` inside it; annotations compare as "name.value".
- writing: an integer is turned into ceil(width/8) big-endian bytes (a `stream`) only
  for a non-repeated field; for a repeated one the client passes the value through, and
  an int there is a TypeError (it wants a list, sent as `int_arr_val`).
- reading: a `stream` becomes a bytearray; a non-repeated integer field is shown as an
  int, and a register field (`$bfrt_field_class.register_data`) that comes once per pipe
  is gathered into a list of ints; a repeated field is shown as it arrived (bytearrays
  if the server sent streams).
- errors: a refused Write/Read is gRPC UNKNOWN with one bfrt_proto.Error per update in
  `grpc-status-details-bin`; an UNKNOWN without that trailer makes the client raise a
  bare RuntimeError (what bf_switchd answers a client that has bound no program).
- clear_all_tables(): GetForwardingPipelineConfig, then SetForwardingPipelineConfig
  VERIFY_AND_WARM_INIT_BEGIN_AND_END with the configs it got, then wait on the stream
  for WARM_INIT_FINISHED.
"""

from __future__ import annotations

import json
import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2
from grpc_status import rpc_status

from switch.bfrt import bfruntime_pb2 as pb
from switch.bfrt import bfruntime_pb2_grpc as pb_grpc
from switch.emulator.bfrt_server import serve
from switch.emulator.rain import PROGRAM as RAIN
from switch.emulator.tables import TableStore

pytestmark = pytest.mark.timeout(60)

ALL_PIPES = 0xFFFF
PIPES = 2
INT_TYPES = {"bytes", "uint8", "uint16", "uint32", "uint64", "int32"}
REGISTER_DATA = "$bfrt_field_class.register_data"


# ---------------------------------------------------------------- bf-rt.json, the SDE client's way


@dataclass
class SdeField:
    id: int
    name: str
    type: str
    nbytes: int | None
    repeated: bool
    mandatory: bool
    read_only: bool
    annotations: list[str] = field(default_factory=list)


def _field(j: dict, mandatory: bool, read_only: bool) -> SdeField:
    t = j["type"]
    kind = "string" if t["type"] == "enum" else t["type"]
    sizes = {"uint64": 8, "uint32": 4, "int32": 4, "uint16": 2, "uint8": 1}
    nbytes = math.ceil(int(t["width"]) / 8) if kind == "bytes" else sizes.get(kind)
    notes = [f"{a['name']}.{a.get('value', '')}" for a in j.get("annotations", [])]
    return SdeField(j["id"], j["name"], kind, nbytes, j["repeated"], mandatory, read_only, notes)


class SdeTable:
    def __init__(self, j: dict):
        self.id, self.name, self.type, self.size = j["id"], j["name"], j["table_type"], j["size"]
        self.attributes, self.operations = j["attributes"], j["supported_operations"]
        self.keys = {k["name"]: _field(k, k.get("mandatory", False), False) for k in j["key"]}
        self.data: dict[str, SdeField] = {}
        for d in j["data"]:
            for member in [d["singleton"]] if "singleton" in d else d["oneof"]:
                self.data[member["name"]] = _field(member, d["mandatory"], d["read_only"])
        self.actions = {a["name"]: a["id"] for a in j.get("action_specs", [])}
        self.depends_on = j.get("depends_on", [])

    def data_field(self, name: str) -> SdeField:
        return self.data[next(n for n in self.data if n == name or n.endswith("." + name))]

    def encode(self, name: str, value: Any) -> pb.DataField:
        """One data field as the SDE client puts it on the wire."""
        f = self.data_field(name)
        df = pb.DataField(field_id=f.id)
        if f.type in INT_TYPES and not f.repeated:
            df.stream = value.to_bytes(f.nbytes, "big") if isinstance(value, int) else bytes(value)
        elif f.type in INT_TYPES:
            if not isinstance(value, list):  # six.ensure_binary(int) in the SDE client
                raise TypeError(f"not expecting type {type(value)}")
            df.int_arr_val.val.extend(value)
        elif f.type == "bool":
            df.bool_val = value
        elif f.type == "string":
            df.str_val = value
        return df

    def decode(self, fields) -> dict[str, Any]:
        """An entry's data as the SDE client's to_dict() shows it."""
        raw: dict[str, Any] = {}
        for df in fields:
            f = next(x for x in self.data.values() if x.id == df.field_id)
            kind = df.WhichOneof("value")
            value = bytearray(df.stream) if kind == "stream" else getattr(df, kind)
            if kind in ("int_arr_val", "bool_arr_val", "str_arr_val"):
                value = list(value.val)
            if f.name in raw and REGISTER_DATA in f.annotations:
                raw[f.name].append(value)
            elif f.name in raw:
                raise KeyError(f"Duplicate field {f.name} found")
            else:
                raw[f.name] = [value] if REGISTER_DATA in f.annotations and not f.repeated else value
        out = {}
        for name, value in raw.items():
            f = self.data[name]
            if f.type in INT_TYPES and not f.repeated:
                conv = [int.from_bytes(v, "big") for v in value] if isinstance(value, list) else None
                out[name] = conv if conv is not None else int.from_bytes(value, "big")
            else:
                out[name] = value
        return out


class SdeView:
    """The two bf-rt.json documents as the SDE client parses them (tables by full name
    or unique dot-suffix)."""

    def __init__(self, reply: Any):
        tables = []
        for blob in (reply.config[0].bfruntime_info, reply.non_p4_config.bfruntime_info):
            doc = json.loads(blob)
            tables += [SdeTable(t) for t in doc["tables"]]
        self.tables = {t.name: t for t in tables}
        self.by_id = {t.id: t for t in tables}
        self.p4_name = reply.config[0].p4_name

    def table(self, name: str) -> SdeTable:
        hits = [t for n, t in self.tables.items() if n == name or n.endswith("." + name)]
        assert len(hits) == 1, f"{name}: {[t.name for t in hits]}"
        return hits[0]


# ---------------------------------------------------------------- a session, as bfrt_grpc opens one


class Session:
    """ClientInterface's sequence: StreamChannel + subscribe (1 s wait), GetForwarding-
    PipelineConfig, optional bind; `close()` half-closes and joins the receive thread."""

    def __init__(self, address: str, client_id: int = 0, *, subscribe: bool = True):
        self.client_id = client_id
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.BfRuntimeStub(self.channel)
        self.incoming: queue.Queue = queue.Queue()
        self._out: queue.Queue = queue.Queue()
        self._receiver = None
        if subscribe:
            self._stream = self.stub.StreamChannel(iter(self._out.get, None))
            self._receiver = threading.Thread(target=self._receive, daemon=True)
            self._receiver.start()
            sub = pb.Subscribe(device_id=0)
            self._out.put(pb.StreamMessageRequest(client_id=client_id, subscribe=sub))
            reply = self.wait_for("subscribe")
            assert reply.subscribe.status.code == code_pb2.OK
        self.info = SdeView(self.stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(device_id=0)))

    def _receive(self) -> None:
        try:
            for message in self._stream:
                self.incoming.put(message)
        except grpc.RpcError:
            pass

    def wait_for(self, kind: str, timeout: float = 1.0) -> Any:
        while True:
            message = self.incoming.get(timeout=timeout)
            if message.HasField(kind):
                return message

    def bind(self) -> None:
        self.stub.SetForwardingPipelineConfig(
            pb.SetForwardingPipelineConfigRequest(
                client_id=self.client_id, config=[pb.ForwardingPipelineConfig(p4_name=self.info.p4_name)]
            )
        )

    def target(self) -> pb.TargetDevice:
        return pb.TargetDevice(device_id=0, pipe_id=ALL_PIPES, direction=0xFF, prsr_id=0xFF)

    def write(self, *updates: pb.Update, p4_name: str = "") -> None:
        req = pb.WriteRequest(target=self.target(), client_id=self.client_id, updates=updates, p4_name=p4_name)
        self.stub.Write(req)

    def read(self, *entities: pb.Entity, p4_name: str = "") -> list[pb.Entity]:
        req = pb.ReadRequest(target=self.target(), client_id=self.client_id, entities=entities, p4_name=p4_name)
        return [e for r in self.stub.Read(req) for e in r.entities]

    def close(self) -> None:
        if self._receiver is not None:
            self._out.put(None)
            self._receiver.join(timeout=5)
            assert not self._receiver.is_alive(), "the server did not end StreamChannel after the half-close"
        self.channel.close()


def key(table: SdeTable, **values: Any) -> pb.TableKey:
    out = pb.TableKey()
    for name, v in values.items():
        f = table.keys[name.replace("__", "$")] if name.startswith("__") else table.keys[name]
        raw = v.encode() if isinstance(v, str) else v.to_bytes(f.nbytes, "big")  # str keys: the text's bytes
        out.fields.add(field_id=f.id, exact=pb.KeyField.Exact(value=raw))
    return out


def entry(table: SdeTable, k: pb.TableKey | None = None, fields=(), action: str | None = None) -> pb.TableEntry:
    e = pb.TableEntry(table_id=table.id)
    if k is not None:
        e.key.CopyFrom(k)
    if action is not None:
        e.data.action_id = table.actions[action]
    e.data.fields.extend(fields)
    return e


def update(kind: str, e: pb.TableEntry) -> pb.Update:
    return pb.Update(type=pb.Update.Type.Value(kind), entity=pb.Entity(table_entry=e))


def errors(e: grpc.RpcError) -> list[str] | None:
    """Each update's canonical code from the trailer; None when there is no trailer."""
    status = rpc_status.from_call(e)
    if status is None:
        return None
    out = []
    for detail in status.details:
        err = pb.Error()
        detail.Unpack(err)
        out.append(code_pb2.Code.Name(err.canonical_code))
    return out


@pytest.fixture
def server():
    store = TableStore(RAIN, pipes=PIPES)
    store.ports.set_name(132, "1/0")
    store.ports.set_name(140, "2/0")
    srv = serve(store, "127.0.0.1", 0)
    yield srv
    srv.stop(None)


@pytest.fixture
def sde(server):
    s = Session(f"127.0.0.1:{server.port}")
    s.bind()
    yield s
    s.close()


# ---------------------------------------------------------------- registers


def test_register_schema_is_what_the_sde_client_converts(sde):
    reg = sde.info.table("bidir_queue.balance")
    cell = reg.data_field("bidir_queue.balance.f1")
    assert (cell.repeated, cell.mandatory, REGISTER_DATA in cell.annotations) == (False, True, True)
    for t in sde.info.tables.values():  # every register cell the same way
        if t.type == "Register":
            assert [(f.repeated, f.mandatory) for f in t.data.values()] == [(False, True)], t.name


def test_register_int_write_and_per_pipe_read(sde, server):
    reg = sde.info.table("bidir_queue.balance")
    name = "SwitchIngress.bidir_queue.balance.f1"
    sde.write(update("INSERT", entry(reg, key(reg, __REGISTER_INDEX=3), [reg.encode(name, 7)])))
    server.store.register("balance").pipes[1][3] = 9  # the other pipe's cell differs
    sde.write(
        pb.Update(
            type=pb.Update.INSERT,
            entity=pb.Entity(table_operation=pb.TableOperation(table_id=reg.id, table_operations_type="Sync")),
        )
    )
    (got,) = sde.read(pb.Entity(table_entry=entry(reg, key(reg, __REGISTER_INDEX=3))))
    assert reg.decode(got.table_entry.data.fields) == {name: [7, 9]}  # ints, one per pipe
    # A single pipe answers one value, still a list.
    req = pb.ReadRequest(
        target=pb.TargetDevice(device_id=0, pipe_id=1, direction=0xFF, prsr_id=0xFF),
        client_id=sde.client_id,
        entities=[pb.Entity(table_entry=entry(reg, key(reg, __REGISTER_INDEX=3)))],
    )
    (one,) = [e for r in sde.stub.Read(req) for e in r.entities]
    assert reg.decode(one.table_entry.data.fields) == {name: [9]}
    # Read all: every cell, each a list of ints.
    everything = sde.read(pb.Entity(table_entry=entry(reg)))
    assert len(everything) == reg.size
    assert all(isinstance(v, int) for e in everything for v in reg.decode(e.table_entry.data.fields)[name])


def test_register_index_out_of_range_is_invalid_argument(sde):
    reg = sde.info.table("bidir_queue.balance")
    for op in (
        lambda: sde.read(pb.Entity(table_entry=entry(reg, key(reg, __REGISTER_INDEX=reg.size)))),
        lambda: sde.write(update("MODIFY", entry(reg, key(reg, __REGISTER_INDEX=reg.size), [reg.encode("f1", 1)]))),
    ):
        with pytest.raises(grpc.RpcError) as e:
            op()
        assert e.value.code() == grpc.StatusCode.UNKNOWN and errors(e.value) == ["INVALID_ARGUMENT"]


# ---------------------------------------------------------------- which program a call addresses


def test_a_client_with_no_program_is_refused_without_details(server):
    s = Session(f"127.0.0.1:{server.port}", client_id=4)  # subscribed, not bound
    try:
        reg = s.info.table("bidir_queue.balance")
        read = pb.Entity(table_entry=entry(reg, key(reg, __REGISTER_INDEX=1)))
        with pytest.raises(grpc.RpcError) as e:
            s.read(read)
        # bf_switchd: "Unable to get bound_program", UNKNOWN with no trailer (bfrt_grpc:
        # RuntimeError "No binary details field").
        assert e.value.code() == grpc.StatusCode.UNKNOWN and errors(e.value) is None
        with pytest.raises(grpc.RpcError) as e:
            s.write(update("MODIFY", entry(reg, key(reg, __REGISTER_INDEX=1), [reg.encode("f1", 1)])))
        assert e.value.code() == grpc.StatusCode.UNKNOWN and errors(e.value) is None
        assert len(s.read(read, p4_name="rain")) == 1  # naming the program is enough
    finally:
        s.close()
    loner = Session(f"127.0.0.1:{server.port}", client_id=5, subscribe=False)  # an "independent" client
    try:
        with pytest.raises(grpc.RpcError) as e:
            loner.read(read)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert len(loner.read(read, p4_name="rain")) == 1
        with pytest.raises(grpc.RpcError) as e:
            loner.read(read, p4_name="other")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        loner.close()


# ---------------------------------------------------------------- attributes, clear_all_tables


def test_attribute_get_and_set(sde, server):
    fwd = sde.info.table("forward.forward")
    assert "EntryScope" in fwd.attributes
    read = pb.Entity(table_attribute=pb.TableAttribute(table_id=fwd.id, entry_scope=pb.EntryScope()))
    (got,) = sde.read(read)
    scope = got.table_attribute.entry_scope
    assert got.table_attribute.table_id == fwd.id
    assert scope.pipe_scope.WhichOneof("scope") == "predef" and scope.pipe_scope.predef == pb.Mode.ALL
    assert scope.pipe_scope.args == (1 << PIPES) - 1  # the pipes the entries are in
    assert scope.gress_scope.predef == pb.Mode.ALL and scope.prsr_scope.predef == pb.Mode.ALL
    # attribute_entry_scope_set(): an INSERT of the attribute; read back as written.
    written = pb.TableAttribute(table_id=fwd.id)
    written.entry_scope.pipe_scope.predef = pb.Mode.ALL
    written.entry_scope.pipe_scope.args = 0xFF
    sde.write(pb.Update(type=pb.Update.INSERT, entity=pb.Entity(table_attribute=written)))
    (got,) = sde.read(read)
    assert got.table_attribute.entry_scope.pipe_scope.args == 0xFF
    # $PORT's port_status_notif_cb and $PORT_STAT's poll_intvl_ms.
    port, stat = sde.info.table("$PORT"), sde.info.table("$PORT_STAT")
    assert port.attributes == ["port_status_notif_cb"] and stat.attributes == ["poll_intvl_ms"]
    (notify,) = sde.read(pb.Entity(table_attribute=pb.TableAttribute(table_id=port.id, port_status_notify={})))
    assert notify.table_attribute.port_status_notify.enable is False
    sde.write(
        pb.Update(
            type=pb.Update.INSERT,
            entity=pb.Entity(
                table_attribute=pb.TableAttribute(table_id=stat.id, intvl_ms=pb.StatePullIntvl(intvl_val=500))
            ),
        )
    )
    (poll,) = sde.read(pb.Entity(table_attribute=pb.TableAttribute(table_id=stat.id, intvl_ms={})))
    assert poll.table_attribute.intvl_ms.intvl_val == 500
    # An attribute a table does not list.
    with pytest.raises(grpc.RpcError) as e:
        sde.read(pb.Entity(table_attribute=pb.TableAttribute(table_id=port.id, entry_scope={})))
    assert errors(e.value) == ["UNIMPLEMENTED"]


def test_clear_all_tables(sde, server):
    store = server.store
    fwd = sde.info.table("forward.forward")
    drop = "SwitchIngress.forward.drop"
    sde.write(update("INSERT", entry(fwd, key(fwd, **{"hdr.ipv4.dst_addr": 0x0A000001}), action=drop)))
    store.register("balance").write(2, 5)
    store.counter("events").count(1, 64)
    store.pre.add_node(1, 1, [132])
    store.pre.add_group(7, [1])
    store.ports.add(132, "BF_SPEED_100G", "BF_FEC_TYP_NONE", enable=True)
    store.ports.count_rx(132, 100)
    other = Session(f"127.0.0.1:{server.port}", client_id=2)  # every subscriber hears it
    try:
        got = sde.stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(device_id=0))
        sde.stub.SetForwardingPipelineConfig(
            pb.SetForwardingPipelineConfigRequest(
                device_id=0,
                client_id=sde.client_id,
                action=pb.SetForwardingPipelineConfigRequest.VERIFY_AND_WARM_INIT_BEGIN_AND_END,
                config=got.config,
            )
        )
        Type = pb.SetForwardingPipelineConfigResponseType
        for s in (sde, other):
            kinds = [
                s.wait_for(
                    "set_forwarding_pipeline_config_response"
                ).set_forwarding_pipeline_config_response.set_forwarding_pipeline_config_response_type
                for _ in range(2)
            ]
            assert kinds == [Type.WARM_INIT_STARTED, Type.WARM_INIT_FINISHED]
    finally:
        other.close()
    assert sde.read(pb.Entity(table_entry=entry(fwd))) == []
    assert store.register("balance").read(2) == [0, 0] and store.counter("events").read(1) == (0, 0)
    assert not store.pre.groups and not store.pre.nodes
    assert store.ports.get(132) is not None and store.ports.stats(132)["$FramesReceivedAll"] == 0
    # (The reads above name no program: the binding survived the warm init.)


def test_warm_init_in_two_steps(sde, server):
    """VERIFY_AND_WARM_INIT_BEGIN resets and says STARTED; WARM_INIT_END (no config) says
    FINISHED. Attributes are back to their initial values too."""
    fwd = sde.info.table("forward.forward")
    scope = pb.TableAttribute(table_id=fwd.id)
    scope.entry_scope.pipe_scope.predef = pb.Mode.ALL
    scope.entry_scope.pipe_scope.args = 0x1
    sde.write(pb.Update(type=pb.Update.INSERT, entity=pb.Entity(table_attribute=scope)))
    server.store.register("balance").write(1, 3)
    Request, Type = pb.SetForwardingPipelineConfigRequest, pb.SetForwardingPipelineConfigResponseType
    config = pb.ForwardingPipelineConfig(p4_name="rain")
    sde.stub.SetForwardingPipelineConfig(
        Request(client_id=sde.client_id, action=Request.VERIFY_AND_WARM_INIT_BEGIN, config=[config])
    )
    message = sde.wait_for("set_forwarding_pipeline_config_response").set_forwarding_pipeline_config_response
    assert message.set_forwarding_pipeline_config_response_type == Type.WARM_INIT_STARTED
    assert server.store.register("balance").read(1) == [0, 0]
    with pytest.raises(grpc.RpcError) as e:
        sde.stub.SetForwardingPipelineConfig(
            Request(client_id=sde.client_id, action=Request.WARM_INIT_END, config=[config])
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    sde.stub.SetForwardingPipelineConfig(Request(client_id=sde.client_id, action=Request.WARM_INIT_END))
    message = sde.wait_for("set_forwarding_pipeline_config_response").set_forwarding_pipeline_config_response
    assert message.set_forwarding_pipeline_config_response_type == Type.WARM_INIT_FINISHED
    (got,) = sde.read(pb.Entity(table_attribute=pb.TableAttribute(table_id=fwd.id, entry_scope={})))
    assert got.table_attribute.entry_scope.pipe_scope.args == (1 << PIPES) - 1
    # Only a subscribed client may ask for it.
    loner = Session(f"127.0.0.1:{server.port}", client_id=9, subscribe=False)
    try:
        with pytest.raises(grpc.RpcError) as e:
            loner.stub.SetForwardingPipelineConfig(
                Request(client_id=9, action=Request.VERIFY_AND_WARM_INIT_BEGIN_AND_END, config=[config])
            )
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        loner.close()


# ---------------------------------------------------------------- ports


def test_port_fec_aliases_of_sde_9_13(sde):
    port = sde.info.table("$PORT")
    reply = sde.stub.GetForwardingPipelineConfig(pb.GetForwardingPipelineConfigRequest(device_id=0))
    (doc,) = [t for t in json.loads(reply.non_p4_config.bfruntime_info)["tables"] if t["name"] == "$PORT"]
    (fec,) = [d["singleton"] for d in doc["data"] if d["singleton"]["name"] == "$FEC"]
    assert {"BF_FEC_TYP_FC", "BF_FEC_TYP_RS"} <= set(fec["type"]["choices"])
    for dev, alias, canonical in (
        (132, "BF_FEC_TYP_RS", "BF_FEC_TYP_REED_SOLOMON"),
        (140, "BF_FEC_TYP_FIRECODE", "BF_FEC_TYP_FC"),  # the driver's read-back name for firecode
    ):
        sde.write(
            update(
                "INSERT",
                entry(
                    port,
                    key(port, __DEV_PORT=dev),
                    [
                        port.encode("$SPEED", "BF_SPEED_100G"),
                        port.encode("$FEC", alias),
                        port.encode("$PORT_ENABLE", True),
                    ],
                ),
            )
        )
        (got,) = sde.read(pb.Entity(table_entry=entry(port, key(port, __DEV_PORT=dev))))
        data = port.decode(got.table_entry.data.fields)
        assert data["$FEC"] == canonical and data["$PORT_NAME"] == {132: "1/0", 140: "2/0"}[dev]
        assert (data["$CONN_ID"], data["$CHNL_ID"]) == ({132: 1, 140: 2}[dev], 0)
    # Neither is marked mandatory, yet an add needs both (the driver refuses it otherwise).
    assert not port.data_field("$SPEED").mandatory and not port.data_field("$FEC").mandatory
    with pytest.raises(grpc.RpcError) as e:
        sde.write(update("INSERT", entry(port, key(port, __DEV_PORT=148), [port.encode("$SPEED", "BF_SPEED_25G")])))
    assert errors(e.value) == ["INVALID_ARGUMENT"]


def test_front_panel_names_resolve_to_dev_ports(sde):
    names = sde.info.table("$PORT_STR_INFO")
    assert names.keys["$PORT_NAME"].type == "string"
    (got,) = sde.read(pb.Entity(table_entry=entry(names, key(names, __PORT_NAME="1/0"))))
    assert names.decode(got.table_entry.data.fields) == {"$DEV_PORT": 132}
    assert got.table_entry.key.fields[0].exact.value == b"1/0"
    every = sde.read(pb.Entity(table_entry=entry(names)))
    assert [e.table_entry.key.fields[0].exact.value for e in every] == [b"1/0", b"2/0"]
    handles = sde.info.table("$PORT_HDL_INFO")
    (got,) = sde.read(pb.Entity(table_entry=entry(handles, key(handles, __CONN_ID=2, __CHNL_ID=0))))
    assert handles.decode(got.table_entry.data.fields) == {"$DEV_PORT": 140}
    with pytest.raises(grpc.RpcError) as e:
        sde.read(pb.Entity(table_entry=entry(names, key(names, __PORT_NAME="9/0"))))
    assert errors(e.value) == ["NOT_FOUND"]
    with pytest.raises(grpc.RpcError) as e:  # read-only tables
        sde.write(update("INSERT", entry(names, key(names, __PORT_NAME="3/0"), [names.encode("$DEV_PORT", 1)])))
    assert errors(e.value) == ["UNIMPLEMENTED"]


def test_port_metadata_and_snapshot_tables(sde):
    meta = sde.info.table("$PORT_METADATA")
    assert meta.name == "pipe.SwitchIngressParser.$PORT_METADATA" and meta.type == "PortMetadata"
    k = key(meta, **{"ig_intr_md.ingress_port": 132})
    sde.write(update("INSERT", entry(meta, k, [meta.encode("$DEFAULT_FIELD", 0x1234)])))
    (got,) = sde.read(pb.Entity(table_entry=entry(meta, k)))
    assert meta.decode(got.table_entry.data.fields) == {"$DEFAULT_FIELD": 0x1234}
    sde.write(update("DELETE", entry(meta)))  # entry_del(target): clear
    assert sde.read(pb.Entity(table_entry=entry(meta))) == []
    for name in ("snapshot.cfg", "snapshot.ingress_trigger", "snapshot.egress_data", "snapshot.ingress_liveness"):
        t = sde.info.table(name)
        assert sde.read(pb.Entity(table_entry=entry(t))) == []
        assert all(i in sde.info.by_id for i in t.depends_on)  # the client topo-sorts by these ids


def test_every_served_table_parses_and_reads(sde):
    """What bfrt_grpc does at bfrt_info_get, and a read-all of each table a script may
    walk (bfrt's `dump`), without an error."""
    skip = {"Register"}  # 128 K-cell registers: read-all is exercised above on a small one
    for t in sde.info.tables.values():
        assert t.attributes is not None and t.operations is not None and t.keys is not None
        if t.type in skip:
            continue
        sde.read(pb.Entity(table_entry=entry(t)))


# ---------------------------------------------------------------- bf_switchd's answers, item by item


def _write_attr(sde: Session, attr: pb.TableAttribute) -> None:
    sde.write(pb.Update(type=pb.Update.INSERT, entity=pb.Entity(table_attribute=attr)))


def _add_port(sde: Session, dev: int, speed: str = "BF_SPEED_100G", **more: Any) -> None:
    port = sde.info.table("$PORT")
    fields = [port.encode("$SPEED", speed), port.encode("$FEC", "BF_FEC_TYP_NONE")]
    fields += [port.encode(n, v) for n, v in more.items()]
    sde.write(update("INSERT", entry(port, key(port, __DEV_PORT=dev), fields)))


def _read_one(sde: Session, table: SdeTable, k: pb.TableKey, *names: str, from_hw: bool = False) -> dict:
    e = entry(table, k)
    e.data.fields.extend(pb.DataField(field_id=table.data_field(n).id) for n in names)
    e.table_flags.from_hw = from_hw
    (got,) = sde.read(pb.Entity(table_entry=e))
    return table.decode(got.table_entry.data.fields)


def test_a_second_bind_by_the_holder_is_already_exists(sde):
    # forwardingConfigBind looks at every client's binding, the caller's own included.
    with pytest.raises(grpc.RpcError) as e:
        sde.bind()
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS and "already owns this P4" in e.value.details()


def test_a_bind_without_subscribing_is_unavailable(server):
    loner = Session(f"127.0.0.1:{server.port}", client_id=6, subscribe=False)
    try:
        with pytest.raises(grpc.RpcError) as e:
            loner.bind()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "Unknown client" in e.value.details()
    finally:
        loner.close()


def test_fixed_function_tables_are_served_and_keep_their_state(sde, server):
    ids = {
        "$PORT_FP_IDX_INFO": 0xFF010004, "$pre.ecmp": 0xFF020003, "$pre.lag": 0xFF020004,
        "$pre.prune": 0xFF020005, "$pre.port": 0xFF020006, "$mirror.cfg": 0xFF040001,
        "tf1.dev.device_configuration": 0xFF060001, "tf1.tm.queue.sched_shaping": 0xFF050026,
        "tf1.tm.counter.eg_port": 0xFF050042, "tf1.pktgen.app_cfg": 0xFF030002,
    }  # fmt: skip
    assert {n: sde.info.tables[n].id for n in ids} == ids
    # $PORT_FP_IDX_INFO: front-panel index -> dev_port, in front-panel order
    fp = sde.info.table("$PORT_FP_IDX_INFO")
    assert fp.keys["$FP_IDX"].type == "uint32" and fp.data["$DEV_PORT"].read_only
    assert [fp.decode(e.table_entry.data.fields)["$DEV_PORT"] for e in sde.read(pb.Entity(table_entry=entry(fp)))] == [
        132,
        140,
    ]
    # $pre.ecmp: add, grow with MODIFY_INC, delete; $pre.lag has no delete
    ecmp, lag = sde.info.table("$pre.ecmp"), sde.info.table("$pre.lag")
    sde.write(update("INSERT", entry(ecmp, key(ecmp, __MULTICAST_ECMP_ID=5), [ecmp.encode("$MULTICAST_NODE_ID", [1])])))
    sde.write(
        update("MODIFY_INC", entry(ecmp, key(ecmp, __MULTICAST_ECMP_ID=5), [ecmp.encode("$MULTICAST_NODE_ID", [2])]))
    )
    assert _read_one(sde, ecmp, key(ecmp, __MULTICAST_ECMP_ID=5)) == {"$MULTICAST_NODE_ID": [1, 2]}
    sde.write(update("DELETE", entry(ecmp, key(ecmp, __MULTICAST_ECMP_ID=5))))
    assert sde.read(pb.Entity(table_entry=entry(ecmp))) == []
    sde.write(update("INSERT", entry(lag, key(lag, __MULTICAST_LAG_ID=3), [lag.encode("$DEV_PORT", [132, 140])])))
    with pytest.raises(grpc.RpcError) as e:
        sde.write(update("DELETE", entry(lag, key(lag, __MULTICAST_LAG_ID=3))))
    assert errors(e.value) == ["UNIMPLEMENTED"]
    # $mirror.cfg: a session with its action, read back, cleared
    mirror = sde.info.table("$mirror.cfg")
    fields = [mirror.encode("$session_enable", True), mirror.encode("$direction", "BOTH"),
              mirror.encode("$ucast_egress_port", 140), mirror.encode("$ucast_egress_port_valid", True)]  # fmt: skip
    sde.write(update("INSERT", entry(mirror, key(mirror, __sid=7), fields, action="$normal")))
    (got,) = sde.read(pb.Entity(table_entry=entry(mirror, key(mirror, __sid=7))))
    assert got.table_entry.data.action_id == mirror.actions["$normal"]
    data = mirror.decode(got.table_entry.data.fields)
    assert (data["$direction"], data["$ucast_egress_port"], data["$session_enable"]) == ("BOTH", 140, True)
    sde.write(update("DELETE", entry(mirror)))
    assert sde.read(pb.Entity(table_entry=entry(mirror))) == []
    # the device configuration: its default entry
    dev = sde.info.table("tf1.dev.device_configuration")
    read_default = pb.Entity(table_entry=pb.TableEntry(table_id=dev.id, is_default_entry=True))
    (got,) = sde.read(read_default)
    cfg = dev.decode(got.table_entry.data.fields)
    assert cfg["num_pipes"] == PIPES and cfg["flow_learn_timeout_usec"] == 500 and got.table_entry.is_default_entry
    modify = pb.TableEntry(table_id=dev.id, is_default_entry=True)
    modify.data.fields.append(dev.encode("flow_learn_timeout_usec", 900))
    sde.write(pb.Update(type=pb.Update.MODIFY, entity=pb.Entity(table_entry=modify)))
    (got,) = sde.read(read_default)
    assert dev.decode(got.table_entry.data.fields)["flow_learn_timeout_usec"] == 900
    # TM: every queue's shaping exists and is modified, never added; eg_port watermarks only clear
    shaping, eg = sde.info.table("tf1.tm.queue.sched_shaping"), sde.info.table("tf1.tm.counter.eg_port")
    k = key(shaping, pg_id=1, pg_queue=2)
    sde.write(update("MODIFY", entry(shaping, k, [shaping.encode("unit", "PPS"), shaping.encode("max_rate", 1000)])))
    assert _read_one(sde, shaping, k, "unit", "max_rate") == {"unit": "PPS", "max_rate": 1000}
    with pytest.raises(grpc.RpcError) as e:
        sde.write(update("INSERT", entry(shaping, k, [shaping.encode("max_rate", 1)])))
    assert errors(e.value) == ["UNIMPLEMENTED"]
    _add_port(sde, 132)
    with pytest.raises(grpc.RpcError) as e:
        sde.write(update("MODIFY", entry(eg, key(eg, dev_port=132), [eg.encode("watermark_cells", 5)])))
    assert errors(e.value) == ["INVALID_ARGUMENT"]
    # pktgen: 8 applications, stored (the emulator generates nothing)
    app = sde.info.table("tf1.pktgen.app_cfg")
    assert len(sde.read(pb.Entity(table_entry=entry(app)))) == 8
    k = key(app, app_id=3)
    timer = [app.encode("app_enable", True), pb.DataField(field_id=1, stream=(5000).to_bytes(4, "big"))]
    sde.write(update("MODIFY", entry(app, k, timer, action="trigger_timer_periodic")))
    (got,) = sde.read(pb.Entity(table_entry=entry(app, k)))
    assert got.table_entry.data.action_id == app.actions["trigger_timer_periodic"]
    assert app.decode([f for f in got.table_entry.data.fields if f.field_id != 1])["app_enable"] is True


def test_port_serves_all_33_fields(sde):
    port = sde.info.table("$PORT")
    assert len(port.data) == 33 and port.data["$MEDIA_TYPE"].read_only and port.data["$SDS_TX_PRE"].type == "int32"
    _add_port(sde, 132, **{"$TX_MTU": 9000, "$RX_MTU": 9000, "$LOOPBACK_MODE": "BF_LPBK_MAC_NEAR"})
    got = _read_one(sde, port, key(port, __DEV_PORT=132))
    assert (got["$TX_MTU"], got["$RX_MTU"], got["$LOOPBACK_MODE"]) == (9000, 9000, "BF_LPBK_MAC_NEAR")
    assert (got["$CUT_THROUGH_EN"], got["$IS_VALID"], got["$IS_INTERNAL"]) == (False, True, False)
    # the driver sets MTUs only in pairs: one alone is ignored, the write succeeds
    sde.write(update("MODIFY", entry(port, key(port, __DEV_PORT=132), [port.encode("$TX_MTU", 1500)])))
    assert _read_one(sde, port, key(port, __DEV_PORT=132), "$TX_MTU") == {"$TX_MTU": 9000}
    with pytest.raises(grpc.RpcError) as e:  # an enum value the driver does not know
        sde.write(update("MODIFY", entry(port, key(port, __DEV_PORT=132), [port.encode("$PORT_DIR", "SIDEWAYS")])))
    assert errors(e.value) == ["INVALID_ARGUMENT"]


def test_port_stat_serves_every_counter(sde, server):
    stat = sde.info.table("$PORT_STAT")
    assert stat.data["$FramesReceivedwithFCSError"].id == 3 and stat.data["$RX_RATE"].id == 95
    assert len(stat.data) == 97  # bf_switchd's 95, and the emulator's two link counters
    _add_port(sde, 132)
    server.store.ports.count_rx(132, 100)
    got = _read_one(sde, stat, key(stat, __DEV_PORT=132))
    assert got["$FramesReceivedOK"] == 1 and got["$OctetsReceived"] == 100 and got["$FramesTruncated"] == 0
    # tna_ports: zero some counters by name
    zero = [stat.encode(n, 0) for n in ("$FramesReceivedOK", "$FramesReceivedwithFCSError", "$FrameswithanyError")]
    sde.write(update("MODIFY", entry(stat, key(stat, __DEV_PORT=132), zero)))
    assert _read_one(sde, stat, key(stat, __DEV_PORT=132), "$FramesReceivedOK", "$OctetsReceived") == {
        "$FramesReceivedOK": 0,
        "$OctetsReceived": 100,
    }


def test_a_read_naming_fields_returns_only_those(sde):
    port = sde.info.table("$PORT")
    _add_port(sde, 140)
    assert set(_read_one(sde, port, key(port, __DEV_PORT=140), "$PORT_UP", "$SPEED")) == {"$PORT_UP", "$SPEED"}
    assert len(_read_one(sde, port, key(port, __DEV_PORT=140))) == 33
    # a match-action entry: only the named action data field
    fwd = sde.info.table("forward.forward")
    k = key(fwd, **{"hdr.ipv4.dst_addr": 0x0A000001})
    params = [pb.DataField(field_id=1, stream=(7).to_bytes(2, "big")), pb.DataField(field_id=2, stream=bytes(6))]
    sde.write(update("INSERT", entry(fwd, k, params, "SwitchIngress.forward.set_egress")))
    (full,) = sde.read(pb.Entity(table_entry=entry(fwd, k)))
    assert [f.field_id for f in full.table_entry.data.fields] == [1, 2]
    e = entry(fwd, k)
    e.data.fields.add(field_id=2)
    (got,) = sde.read(pb.Entity(table_entry=e))
    assert [f.field_id for f in got.table_entry.data.fields] == [2]


def test_rollback_reports_only_the_failure_and_applies_nothing(sde):
    fwd = sde.info.table("forward.forward")
    drop = "SwitchIngress.forward.drop"
    k1, k2 = key(fwd, **{"hdr.ipv4.dst_addr": 1}), key(fwd, **{"hdr.ipv4.dst_addr": 2})
    sde.write(update("INSERT", entry(fwd, k1, action=drop)))
    req = pb.WriteRequest(
        target=sde.target(),
        client_id=sde.client_id,
        atomicity=pb.WriteRequest.ROLLBACK_ON_ERROR,
        updates=[update("INSERT", entry(fwd, k2, action=drop)), update("INSERT", entry(fwd, k1, action=drop)),
                 update("DELETE", entry(fwd, k1))],
    )  # fmt: skip
    with pytest.raises(grpc.RpcError) as e:
        sde.stub.Write(req)
    assert errors(e.value) == ["OK", "ALREADY_EXISTS"]  # the updates before padded OK, none after
    assert len(sde.read(pb.Entity(table_entry=entry(fwd)))) == 1  # k2 rolled back, k1 kept


def test_dataplane_atomic_is_unimplemented_and_applies_nothing(sde):
    fwd = sde.info.table("forward.forward")
    req = pb.WriteRequest(
        target=sde.target(),
        client_id=sde.client_id,
        atomicity=pb.WriteRequest.DATAPLANE_ATOMIC,
        updates=[
            update("INSERT", entry(fwd, key(fwd, **{"hdr.ipv4.dst_addr": 1}), action="SwitchIngress.forward.drop"))
        ],
    )
    with pytest.raises(grpc.RpcError) as e:
        sde.stub.Write(req)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED and errors(e.value) is None
    assert sde.read(pb.Entity(table_entry=entry(fwd))) == []


def test_register_and_counter_cells_are_not_deleted_by_key(sde, server):
    reg, ctr = sde.info.table("bidir_queue.balance"), sde.info.table("events")
    server.store.register("balance").write(3, 7)
    server.store.counter("events").count(1, 64)
    for t, k in ((reg, key(reg, __REGISTER_INDEX=3)), (ctr, key(ctr, __COUNTER_INDEX=1))):
        with pytest.raises(grpc.RpcError) as e:
            sde.write(update("DELETE", entry(t, k)))
        assert errors(e.value) == ["UNIMPLEMENTED"]
    assert server.store.register("balance").read(3) == [7, 7] and server.store.counter("events").read(1) == (1, 64)
    sde.write(update("DELETE", entry(reg)), update("DELETE", entry(ctr)))  # keyless: the table clear
    assert server.store.register("balance").read(3) == [0, 0] and server.store.counter("events").read(1) == (0, 0)


def test_single_pipe_scope_is_accepted_on_an_empty_table(sde):
    fwd = sde.info.table("forward.forward")
    scope = pb.TableAttribute(table_id=fwd.id)
    scope.entry_scope.gress_scope.predef = pb.Mode.ALL
    scope.entry_scope.pipe_scope.predef = pb.Mode.SINGLE
    scope.entry_scope.prsr_scope.predef = pb.Mode.ALL
    _write_attr(sde, scope)
    (got,) = sde.read(pb.Entity(table_attribute=pb.TableAttribute(table_id=fwd.id, entry_scope={})))
    assert got.table_attribute.entry_scope.pipe_scope.predef == pb.Mode.SINGLE


def test_deleting_a_member_node_takes_it_out_of_its_group(sde, server):
    node, mgid = sde.info.table("$pre.node"), sde.info.table("$pre.mgid")
    for n in (1, 2):
        fields = [node.encode("$MULTICAST_RID", n), node.encode("$MULTICAST_LAG_ID", []), node.encode("$DEV_PORT", [n])]
        sde.write(update("INSERT", entry(node, key(node, __MULTICAST_NODE_ID=n), fields)))
    members = [mgid.encode("$MULTICAST_NODE_ID", [1, 2])]  # no L1 exclusion ids: the defaults
    sde.write(update("INSERT", entry(mgid, key(mgid, __MGID=9), members)))
    sde.write(update("DELETE", entry(node, key(node, __MULTICAST_NODE_ID=1))))
    assert _read_one(sde, mgid, key(mgid, __MGID=9), "$MULTICAST_NODE_ID") == {"$MULTICAST_NODE_ID": [2]}
    assert server.store.mcast_group(9) == ((2, (2,)),)
    with pytest.raises(grpc.RpcError) as e:  # the driver's PRE tables have no table clear
        sde.write(update("DELETE", entry(node)))
    assert errors(e.value) == ["UNIMPLEMENTED"]


def test_adding_an_added_port_modifies_it(sde):
    port = sde.info.table("$PORT")
    _add_port(sde, 132, speed="BF_SPEED_25G")
    _add_port(sde, 132, speed="BF_SPEED_100G", **{"$PORT_ENABLE": True})  # succeeds
    got = _read_one(sde, port, key(port, __DEV_PORT=132), "$SPEED", "$PORT_ENABLE")
    assert got == {"$SPEED": "BF_SPEED_25G", "$PORT_ENABLE": True}  # port add kept it; the rest applied


def test_port_lookups_refuse_from_hw(sde):
    names, handles, fp = (
        sde.info.table("$PORT_STR_INFO"),
        sde.info.table("$PORT_HDL_INFO"),
        sde.info.table("$PORT_FP_IDX_INFO"),
    )
    for t, k in ((names, key(names, __PORT_NAME="1/0")), (handles, key(handles, __CONN_ID=1, __CHNL_ID=0)), (fp, None)):
        e = entry(t, k)
        e.table_flags.from_hw = True
        with pytest.raises(grpc.RpcError) as err:
            sde.read(pb.Entity(table_entry=e))
        assert errors(err.value) == ["UNIMPLEMENTED"], t.name
        e.table_flags.from_hw = False
        assert sde.read(pb.Entity(table_entry=e))  # without it: answered, read-all included


def test_port_stat_modify_only_zeroes(sde, server):
    stat = sde.info.table("$PORT_STAT")
    _add_port(sde, 132)
    server.store.ports.count_rx(132, 64)
    with pytest.raises(grpc.RpcError) as e:
        sde.write(update("MODIFY", entry(stat, key(stat, __DEV_PORT=132), [stat.encode("$FramesReceivedOK", 5)])))
    assert errors(e.value) == ["INVALID_ARGUMENT"]
    assert server.store.ports.stats(132)["$FramesReceivedOK"] == 1
    with pytest.raises(grpc.RpcError) as e:  # no entry delete on $PORT_STAT
        sde.write(update("DELETE", entry(stat, key(stat, __DEV_PORT=132))))
    assert errors(e.value) == ["UNIMPLEMENTED"]


def test_port_stat_keyless_delete_clears_every_port(sde, server):
    stat = sde.info.table("$PORT_STAT")
    for dev in (132, 140):
        _add_port(sde, dev)
        server.store.ports.count_tx(dev, 64)
    sde.write(update("DELETE", entry(stat)))  # tna_ports' clear
    assert all(server.store.ports.stats(d)["$FramesTransmittedAll"] == 0 for d in (132, 140))
