"""rainmaker's BFRuntime client: tables by name, integers in and out.

It speaks the wire protocol of bf_switchd (docs/bfruntime.md), so it
drives a real Tofino and the emulator alike:

    with Client("192.0.2.10:50052", p4_name="rain") as sw:      # subscribe, fetch bf-rt.json, bind
        fwd = sw.table("forward")                                  # any unique dot-suffix
        fwd.add({"dst_addr": 0x0c42a1dd5f3a}, "set_egress", {"port": 132})
        acl = sw.table("acl")
        acl.add({"src_addr": (0x0a000000, 0xff000000), "l4_port": (1000, 2000)}, "deny", priority=10)
        fwd.set_default("drop")
        print(fwd.get(0x0c42a1dd5f3a).data)                        # {"port": 132}
        balance = sw.register("balance", signed=True)
        balance.write(3, -2); balance.read(3)                      # [-2] (one value per pipe)
        sw.pre.add_node(1, rid=1, dev_ports=[132, 140]); sw.pre.add_group(7, [1])
        sw.ports.add(132, "100G", "rs"); sw.ports.is_up(132)
        with sw.batch() as b:                                      # one Write, errors per update
            b.add(fwd, 0x1, "set_egress", {"port": 1})
            b.add(fwd, 0x2, "set_egress", {"port": 2})

Keys are {field name: value} (or a bare value for a one-field key). A value is an int
for an exact match, and for the other kinds (value, mask) for Ternary, (value,
prefix_len) for LPM, (low, high) for Range, (value, is_valid) for Optional; a bare
int matches exactly and None matches anything. Refusals raise `BfrtError` naming the
update, the table and the switch's code.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import grpc

from . import bfruntime_pb2 as pb
from . import bfruntime_pb2_grpc as pb_grpc
from .errors import BfrtClientIdTaken, BfrtConnectError, BfrtError, BfrtValueError, from_rpc_error
from .info import MATCH_PRIORITY, BfrtInfo, FieldInfo, TableInfo

log = logging.getLogger(__name__)

DEFAULT_PORT = 50052
ALL_PIPES = 0xFFFF
# A refused batch's per-update errors come in one trailer: bf_switchd sends them all
# (the SDE client accepts 1 GiB of metadata), so accept far more than gRPC's 16 KiB.
# Both limits: a soft one above the hard one makes gRPC hang.
MAX_METADATA_BYTES = 256 << 20
MAX_CLIENT_ID = 0xFFFFFF  # bf_switchd keeps 24 bits of a client id (with the device in its cookies)
_SPEEDS = {"1G", "10G", "25G", "40G", "50G", "100G", "200G", "400G"}
_FECS = {
    "none": "BF_FEC_TYP_NONE",
    "fc": "BF_FEC_TYP_FIRECODE",
    "firecode": "BF_FEC_TYP_FIRECODE",
    "rs": "BF_FEC_TYP_REED_SOLOMON",
    "reed_solomon": "BF_FEC_TYP_REED_SOLOMON",
}
# The driver reads a port's FEC back under either of its names (BF_FEC_TYP_FC is FIRECODE,
# BF_FEC_TYP_RS is REED_SOLOMON): Ports shows the long one, as it writes it.
_FEC_LONG = {"BF_FEC_TYP_FC": "BF_FEC_TYP_FIRECODE", "BF_FEC_TYP_RS": "BF_FEC_TYP_REED_SOLOMON"}
_AUTONEG = {None: None, True: "PM_AN_FORCE_ENABLE", False: "PM_AN_FORCE_DISABLE", "default": "PM_AN_DEFAULT"}


@dataclass
class Entry:
    """An entry as read back. Register cells come as a list, one value per pipe."""

    key: dict[str, Any]
    action: str | None = None  # full action name (None for tables without actions)
    data: dict[str, Any] = field(default_factory=dict)
    priority: int | None = None
    is_default: bool = False


class CounterValue(NamedTuple):
    packets: int
    bytes: int


# ---------------------------------------------------------------- encoding


def _to_bytes(f: FieldInfo, value: Any, table: str, part: str = "") -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >> f.width:
        raise BfrtValueError(f"table {table}: field {f.name}{part}: {value!r} is not an unsigned {f.width}-bit integer")
    return value.to_bytes(f.nbytes, "big")


def _key_field(f: FieldInfo, value: Any, table: str) -> pb.KeyField:
    kf = pb.KeyField(field_id=f.id)
    if f.type == "string":  # e.g. $PORT_STR_INFO's $PORT_NAME: the text's bytes, exact
        if not isinstance(value, str):
            raise BfrtValueError(f"table {table}: key field {f.name} is a string, not {value!r}")
        kf.exact.value = value.encode()
        return kf
    full = (1 << f.width) - 1
    pair = isinstance(value, (tuple, list))
    if pair and len(value) != 2:
        raise BfrtValueError(f"table {table}: key field {f.name}: expected a pair, got {value!r}")
    if f.match == "Exact":
        if value is None or pair:
            raise BfrtValueError(
                f"table {table}: key field {f.name} is an exact match: give one integer, not {value!r}"
            )
        kf.exact.value = _to_bytes(f, value, table)
    elif f.match == "Ternary":
        v, m = value if pair else (0, 0) if value is None else (value, full)
        kf.ternary.mask = _to_bytes(f, m, table, " mask")
        kf.ternary.value = _to_bytes(f, v, table)
        kf.ternary.value = (v & m).to_bytes(f.nbytes, "big")  # bits outside the mask are don't-care
    elif f.match == "LPM":
        v, plen = value if pair else (0, 0) if value is None else (value, f.width)
        if isinstance(plen, bool) or not isinstance(plen, int) or not 0 <= plen <= f.width:
            raise BfrtValueError(f"table {table}: key field {f.name}: prefix length {plen!r} is not in 0..{f.width}")
        kf.lpm.value, kf.lpm.prefix_len = _to_bytes(f, v, table), plen
    elif f.match == "Range":
        lo, hi = value if pair else (0, full) if value is None else (value, value)
        kf.range.low, kf.range.high = _to_bytes(f, lo, table, " low"), _to_bytes(f, hi, table, " high")
    elif f.match == "Optional":
        v, valid = value if pair else (0, False) if value is None else (value, True)
        kf.optional.value, kf.optional.is_valid = _to_bytes(f, v, table), bool(valid)
    else:
        raise BfrtValueError(f"table {table}: key field {f.name}: match type {f.match} is not supported")
    return kf


def _data_field(f: FieldInfo, value: Any, table: str) -> pb.DataField:
    df = pb.DataField(field_id=f.id)
    bad = BfrtValueError(
        f"table {table}: data field {f.name} ({f.type}{', repeated' if f.repeated else ''}): cannot take {value!r}"
    )
    if f.type == "bytes" or (f.is_int and not f.repeated):
        df.stream = _to_bytes(f, value, table)
    elif f.is_int:
        if not isinstance(value, (list, tuple)):
            raise bad
        for v in value:
            _to_bytes(f, v, table)
        df.int_arr_val.val.extend(value)
    elif f.type == "bool":
        if f.repeated:
            if not isinstance(value, (list, tuple)):
                raise bad
            df.bool_arr_val.val.extend(bool(v) for v in value)
        else:
            df.bool_val = bool(value)
    elif f.type == "string":
        if f.repeated:
            df.str_arr_val.val.extend(value)
        else:
            if not isinstance(value, str):
                raise bad
            if f.choices and value not in f.choices:
                raise BfrtValueError(f"table {table}: {f.name} {value!r} is not one of {', '.join(f.choices)}")
            df.str_val = value
    elif f.type == "float":
        df.float_val = float(value)
    else:
        raise BfrtValueError(f"table {table}: data field {f.name} of type {f.type} is not supported")
    return df


def _key_value(kf: pb.KeyField) -> Any:
    kind = kf.WhichOneof("match_type")
    m = getattr(kf, kind)
    b = lambda x: int.from_bytes(x, "big")  # noqa: E731
    if kind == "exact":
        return b(m.value)
    if kind == "ternary":
        return (b(m.value), b(m.mask))
    if kind == "lpm":
        return (b(m.value), m.prefix_len)
    if kind == "range":
        return (b(m.low), b(m.high))
    return (b(m.value), m.is_valid)


def _data_value(df: pb.DataField) -> Any:
    kind = df.WhichOneof("value")
    if kind == "stream":
        return int.from_bytes(df.stream, "big")
    if kind in ("int_arr_val", "bool_arr_val", "str_arr_val"):
        return list(getattr(df, kind).val)
    if kind is None:
        return None
    return getattr(df, kind)


# ---------------------------------------------------------------- tables


class Table:
    """A table of the switch, by name. Get one with `client.table(name)`."""

    def __init__(self, client: Client, info: TableInfo):
        self.client = client
        self.info = info
        self.name = info.name

    def __repr__(self) -> str:
        return f"<Table {self.name}>"

    # -------------------------------------------------- writes
    def add(
        self, key: Any, action: str | None = None, data: Mapping[str, Any] | None = None, *, priority: int | None = None
    ) -> None:
        """INSERT an entry (ALREADY_EXISTS if its key is installed)."""
        self.client.write([self.update("INSERT", key, action, data, priority=priority)], [self.name])

    def modify(
        self, key: Any, action: str | None = None, data: Mapping[str, Any] | None = None, *, priority: int | None = None
    ) -> None:
        self.client.write([self.update("MODIFY", key, action, data, priority=priority)], [self.name])

    def upsert(
        self, key: Any, action: str | None = None, data: Mapping[str, Any] | None = None, *, priority: int | None = None
    ) -> None:
        """INSERT_OR_MODIFY."""
        self.client.write([self.update("INSERT_OR_MODIFY", key, action, data, priority=priority)], [self.name])

    def delete(self, key: Any, *, priority: int | None = None) -> None:
        self.client.write([self.update("DELETE", key, priority=priority)], [self.name])

    def clear(self) -> None:
        """Remove every entry (a DELETE without a key)."""
        self.client.write([self.update("DELETE", None)], [self.name])

    def set_default(self, action: str, data: Mapping[str, Any] | None = None) -> None:
        self.client.write([self.update("MODIFY", None, action, data, default=True)], [self.name])

    def reset_default(self) -> None:
        self.client.write([self.update("DELETE", None, default=True)], [self.name])

    def sync(self, operation: str = "Sync") -> None:
        """A table operation ("Sync" for registers and counters), sent as an INSERT."""
        op = pb.TableOperation(table_id=self.info.id, table_operations_type=operation)
        self.client.write([pb.Update(type=pb.Update.INSERT, entity=pb.Entity(table_operation=op))], [self.name])

    def update(
        self,
        type: str,
        key: Any,
        action: str | None = None,
        data: Mapping[str, Any] | None = None,
        *,
        priority: int | None = None,
        default: bool = False,
    ) -> pb.Update:
        """The protobuf Update for one write (for batches); `type` is an Update.Type name."""
        entry = pb.TableEntry(table_id=self.info.id, is_default_entry=default)
        if key is not None:
            entry.key.CopyFrom(self.encode_key(key, priority))
        if action is not None or data:
            entry.data.CopyFrom(self.encode_data(action, data or {}))
        return pb.Update(type=pb.Update.Type.Value(type), entity=pb.Entity(table_entry=entry))

    # -------------------------------------------------- reads
    def get(self, key: Any, *, priority: int | None = None, from_hw: bool = False) -> Entry:
        """The entry with exactly this key (BfrtError NOT_FOUND otherwise)."""
        entry = pb.TableEntry(table_id=self.info.id, key=self.encode_key(key, priority))
        if from_hw:
            entry.table_flags.from_hw = True
        (found,) = self.client.read_entries([entry], [self.name])
        return self.decode(found)

    def entries(self, *, from_hw: bool = False) -> list[Entry]:
        """Every entry of the table."""
        entry = pb.TableEntry(table_id=self.info.id)
        if from_hw:
            entry.table_flags.from_hw = True
        return [self.decode(e) for e in self.client.read_entries([entry], [self.name])]

    def default(self) -> Entry:
        """The default entry (action and parameters). A table without one (bf_switchd's
        $mirror.cfg, tf1.pktgen.app_cfg: actions, but no default entry) answers none:
        an entry with no action and no data."""
        found = self.client.read_entries([pb.TableEntry(table_id=self.info.id, is_default_entry=True)], [self.name])
        return self.decode(found[0]) if found else Entry(key={}, is_default=True)

    def attribute(self, name: str) -> pb.TableAttribute:
        """A table attribute as the switch holds it (`name` as bf-rt.json lists it, e.g.
        "EntryScope"): the TableAttribute message with that attribute's field set."""
        fields = {
            "EntryScope": "entry_scope",
            "port_status_notif_cb": "port_status_notify",
            "poll_intvl_ms": "intvl_ms",
        }
        if name not in self.info.attributes or name not in fields:
            raise BfrtValueError(f"table {self.name}: attribute {name!r} (it has {list(self.info.attributes)})")
        attr = pb.TableAttribute(table_id=self.info.id)
        getattr(attr, fields[name]).SetInParent()
        req = pb.ReadRequest(
            target=self.client.target(),
            client_id=self.client.client_id,
            entities=[pb.Entity(table_attribute=attr)],
            p4_name=self.client.p4_name or "",
        )
        (entity,) = self.client._read(req, [self.name])
        return entity.table_attribute

    def usage(self) -> int:
        """How many entries the table holds."""
        req = pb.ReadRequest(
            target=self.client.target(),
            client_id=self.client.client_id,
            entities=[pb.Entity(table_usage=pb.TableUsage(table_id=self.info.id))],
            p4_name=self.client.p4_name or "",
        )
        for e in self.client._read(req, [self.name]):
            return e.table_usage.usage
        return 0

    # -------------------------------------------------- encoding
    def encode_key(self, key: Any, priority: int | None = None) -> pb.TableKey:
        info = self.info
        fields = [f for f in info.keys if f.name != MATCH_PRIORITY]
        if isinstance(key, Mapping):
            given = {}
            for name, value in key.items():
                f = info.key_field(name)
                if f.name == MATCH_PRIORITY:
                    priority = value
                else:
                    given[f.name] = value
        elif len(fields) == 1:
            given = {fields[0].name: key}
        else:
            raise BfrtValueError(
                f"table {self.name} has {len(fields)} key fields: give a mapping "
                f"{{name: value}} for {[f.name for f in fields]}"
            )
        out = pb.TableKey()
        for f in fields:
            value = given.get(f.name)
            if value is None and f.match == "Exact":
                raise BfrtValueError(f"table {self.name}: exact key field {f.name} is missing")
            out.fields.append(_key_field(f, value, self.name))
        if info.has_priority:
            if priority is None:
                raise BfrtValueError(f"table {self.name} is a TCAM table: give priority= (lowest wins)")
            out.fields.append(_key_field(info.key_field(MATCH_PRIORITY), priority, self.name))
        elif priority is not None:
            raise BfrtValueError(f"table {self.name} has no {MATCH_PRIORITY}")
        return out

    def encode_data(self, action: str | None, data: Mapping[str, Any]) -> pb.TableData:
        out = pb.TableData()
        if action is not None:
            a = self.info.action(action)
            out.action_id = a.id
            given = {a.param(n).name: v for n, v in data.items()}
            missing = [p.name for p in a.params if p.name not in given]
            if missing:
                raise BfrtValueError(f"table {self.name}: action {a.name} needs {missing}")
            out.fields.extend(_data_field(p, given[p.name], self.name) for p in a.params)
        else:
            for name, value in data.items():
                out.fields.append(_data_field(self.info.data_field(name), value, self.name))
        return out

    def decode(self, e: pb.TableEntry) -> Entry:
        """An Entry from a TableEntry this table's switch answered."""
        out = Entry(key={}, is_default=e.is_default_entry)
        for kf in e.key.fields:
            f = self.info.key_by_id.get(kf.field_id)
            name = f.name if f else str(kf.field_id)
            if f is not None and f.type == "string":
                out.key[name] = kf.exact.value.decode()
            elif name == MATCH_PRIORITY:
                out.priority = _key_value(kf)
            else:
                out.key[name] = _key_value(kf)
        params: dict[int, FieldInfo] = self.info.data_by_id
        if e.data.action_id:
            a = self.info.action_by_id.get(e.data.action_id)
            out.action = a.name if a else str(e.data.action_id)
            params = a.by_id if a else {}
        for df in e.data.fields:
            f = params.get(df.field_id)
            name = f.name if f else str(df.field_id)
            value = _data_value(df)
            if f is not None and f.is_register_data:
                out.data.setdefault(name, []).append(value)
            else:
                out.data[name] = value
        return out


class Register:
    """A register by name: `read(i)` -> one value per pipe; `write(i, v)` sets every pipe."""

    def __init__(self, table: Table, signed: bool = False):
        self.table = table
        self.name = table.name
        self.signed = signed
        cells = [f for f in table.info.data if f.is_register_data] or list(table.info.data)
        if len(cells) != 1 or table.info.table_type != "Register":
            raise BfrtValueError(f"{self.name} is not a register with one data field ({table.info.table_type})")
        self.field = cells[0]
        self.size = table.info.size

    def __repr__(self) -> str:
        return f"<Register {self.name} {self.size}x{self.field.width}>"

    def _value(self, raw: int) -> int:
        w = self.field.width
        return raw - (1 << w) if self.signed and raw >> (w - 1) else raw

    def read(self, index: int, *, from_hw: bool = True) -> list[int]:
        entry = self.table.get({"$REGISTER_INDEX": index}, from_hw=from_hw)
        return [self._value(v) for v in entry.data.get(self.field.name, [])]

    def read_all(self, *, from_hw: bool = True) -> list[list[int]]:
        """Every cell: [index] -> [value per pipe]."""
        out = [[] for _ in range(self.size)]
        for e in self.table.entries(from_hw=from_hw):
            out[e.key["$REGISTER_INDEX"]] = [self._value(v) for v in e.data.get(self.field.name, [])]
        return out

    def write(self, index: int, value: int) -> None:
        """Set cell `index` in every pipe; a negative value is written in two's complement."""
        w = self.field.width
        if isinstance(value, bool) or not isinstance(value, int) or not -(1 << (w - 1)) <= value < (1 << w):
            raise BfrtValueError(f"register {self.name}: {value!r} does not fit in {w} bits")
        self.table.modify({"$REGISTER_INDEX": index}, data={self.field.name: value & ((1 << w) - 1)})

    def clear(self) -> None:
        self.table.clear()

    def sync(self) -> None:
        self.table.sync("Sync")


class Counter:
    """An indirect counter by name: (packets, bytes) per index."""

    def __init__(self, table: Table):
        self.table = table
        self.name = table.name
        self.size = table.info.size

    def _value(self, e: Entry) -> CounterValue:
        return CounterValue(e.data.get("$COUNTER_SPEC_PKTS", 0), e.data.get("$COUNTER_SPEC_BYTES", 0))

    def read(self, index: int, *, from_hw: bool = True) -> CounterValue:
        return self._value(self.table.get({"$COUNTER_INDEX": index}, from_hw=from_hw))

    def read_all(self, *, from_hw: bool = True) -> list[CounterValue]:
        out = [CounterValue(0, 0)] * self.size
        for e in self.table.entries(from_hw=from_hw):
            out[e.key["$COUNTER_INDEX"]] = self._value(e)
        return out

    def write(self, index: int, packets: int = 0, bytes: int = 0) -> None:
        self.table.modify({"$COUNTER_INDEX": index}, data={"$COUNTER_SPEC_PKTS": packets, "$COUNTER_SPEC_BYTES": bytes})

    def clear(self) -> None:
        self.table.clear()

    def sync(self) -> None:
        self.table.sync("Sync")


class Pre:
    """Multicast: `$pre.node` (rid + ports) and `$pre.mgid` (groups of nodes)."""

    def __init__(self, client: Client):
        self.client = client

    @property
    def nodes_table(self) -> Table:
        return self.client.table("$pre.node")

    @property
    def groups_table(self) -> Table:
        return self.client.table("$pre.mgid")

    def add_node(self, node_id: int, rid: int, dev_ports: Iterable[int] = (), lag_ids: Iterable[int] = ()) -> None:
        self.nodes_table.add(
            {"$MULTICAST_NODE_ID": node_id},
            data={"$MULTICAST_RID": rid, "$MULTICAST_LAG_ID": list(lag_ids), "$DEV_PORT": list(dev_ports)},
        )

    def modify_node(self, node_id: int, rid: int, dev_ports: Iterable[int] = (), lag_ids: Iterable[int] = ()) -> None:
        self.nodes_table.modify(
            {"$MULTICAST_NODE_ID": node_id},
            data={"$MULTICAST_RID": rid, "$MULTICAST_LAG_ID": list(lag_ids), "$DEV_PORT": list(dev_ports)},
        )

    def delete_node(self, node_id: int) -> None:
        self.nodes_table.delete({"$MULTICAST_NODE_ID": node_id})

    def nodes(self) -> dict[int, dict[str, Any]]:
        """node id -> {"rid", "dev_ports", "lag_ids"}."""
        return {
            e.key["$MULTICAST_NODE_ID"]: {
                "rid": e.data.get("$MULTICAST_RID"),
                "dev_ports": e.data.get("$DEV_PORT", []),
                "lag_ids": e.data.get("$MULTICAST_LAG_ID", []),
            }
            for e in self.nodes_table.entries()
        }

    def _members(self, node_ids: Sequence[int], l1_xids: Sequence[int | None] | None) -> dict[str, Any]:
        node_ids = list(node_ids)
        xids = list(l1_xids) if l1_xids is not None else [None] * len(node_ids)
        if len(xids) != len(node_ids):
            raise BfrtValueError(f"$pre.mgid: {len(node_ids)} nodes but {len(xids)} L1 XIDs")
        return {
            "$MULTICAST_NODE_ID": node_ids,
            "$MULTICAST_NODE_L1_XID_VALID": [x is not None for x in xids],
            "$MULTICAST_NODE_L1_XID": [x or 0 for x in xids],
        }

    def add_group(self, mgid: int, node_ids: Sequence[int], l1_xids: Sequence[int | None] | None = None) -> None:
        """A multicast group of nodes; `l1_xids[i]` (None: none) is node i's exclusion id."""
        self.groups_table.add({"$MGID": mgid}, data=self._members(node_ids, l1_xids))

    def modify_group(self, mgid: int, node_ids: Sequence[int], l1_xids: Sequence[int | None] | None = None) -> None:
        self.groups_table.modify({"$MGID": mgid}, data=self._members(node_ids, l1_xids))

    def delete_group(self, mgid: int) -> None:
        self.groups_table.delete({"$MGID": mgid})

    def groups(self) -> dict[int, list[int]]:
        """mgid -> node ids."""
        return {e.key["$MGID"]: e.data.get("$MULTICAST_NODE_ID", []) for e in self.groups_table.entries()}

    def clear(self) -> None:
        """Every group, then every node, one DELETE each: bf_switchd's PRE tables have no
        table clear (a DELETE without a key is refused UNIMPLEMENTED there)."""
        for table, key in ((self.groups_table, "$MGID"), (self.nodes_table, "$MULTICAST_NODE_ID")):
            with self.client.batch() as b:
                for e in table.entries():
                    b.delete(table, {key: e.key[key]})


class Ports:
    """Front-panel ports (`$PORT`): speed "100G" or "BF_SPEED_100G", fec "rs"/"fc"/"none" or BF names."""

    def __init__(self, client: Client):
        self.client = client

    @property
    def table(self) -> Table:
        return self.client.table("$PORT")

    @staticmethod
    def _fields(speed: str | None, fec: str | None, enable: bool | None, autoneg: Any, n_lanes: int | None) -> dict:
        out: dict[str, Any] = {}
        if speed is not None:
            out["$SPEED"] = f"BF_SPEED_{speed.upper()}" if speed.upper() in _SPEEDS else speed
        if fec is not None:
            out["$FEC"] = _FECS.get(fec.lower(), fec)
        if enable is not None:
            out["$PORT_ENABLE"] = enable
        if autoneg is not None:
            out["$AUTO_NEGOTIATION"] = _AUTONEG.get(autoneg, autoneg)
        if n_lanes is not None:
            out["$N_LANES"] = n_lanes
        return out

    def add(
        self,
        dev_port: int,
        speed: str,
        fec: str = "none",
        *,
        enable: bool = True,
        autoneg: Any = None,
        n_lanes: int | None = None,
    ) -> None:
        """Add (and by default enable) a port. autoneg: None (driver default), True, False or a PM_AN_* name."""
        self.table.add({"$DEV_PORT": dev_port}, data=self._fields(speed, fec, enable, autoneg, n_lanes))

    def modify(
        self,
        dev_port: int,
        *,
        speed: str | None = None,
        fec: str | None = None,
        enable: bool | None = None,
        autoneg: Any = None,
        n_lanes: int | None = None,
    ) -> None:
        self.table.modify({"$DEV_PORT": dev_port}, data=self._fields(speed, fec, enable, autoneg, n_lanes))

    def delete(self, dev_port: int) -> None:
        self.table.delete({"$DEV_PORT": dev_port})

    @staticmethod
    def _row(data: dict[str, Any]) -> dict[str, Any]:
        if "$FEC" in data:
            data["$FEC"] = _FEC_LONG.get(data["$FEC"], data["$FEC"])
        return data

    def get(self, dev_port: int) -> dict[str, Any]:
        """The port's fields by bf-rt name ($SPEED, $FEC, $PORT_ENABLE, $PORT_UP, ...)."""
        return self._row(self.table.get({"$DEV_PORT": dev_port}).data)

    def all(self) -> dict[int, dict[str, Any]]:
        return {e.key["$DEV_PORT"]: self._row(e.data) for e in self.table.entries()}

    def is_up(self, dev_port: int) -> bool:
        return bool(self.get(dev_port).get("$PORT_UP"))

    def dev_port(self, name: str) -> int:
        """The dev_port of a front-panel port ("1/0"), from $PORT_STR_INFO."""
        return self.client.table("$PORT_STR_INFO").get({"$PORT_NAME": name}).data["$DEV_PORT"]


class Batch:
    """Several updates in one Write. Used as a context manager it sends on exit."""

    def __init__(self, client: Client, atomicity: str = "CONTINUE_ON_ERROR"):
        self.client = client
        self.atomicity = atomicity
        self.updates: list[pb.Update] = []
        self.tables: list[str] = []

    def __len__(self) -> int:
        return len(self.updates)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.send()

    def _table(self, table: Table | str) -> Table:
        return table if isinstance(table, Table) else self.client.table(table)

    def _push(self, table: Table, update: pb.Update) -> Batch:
        self.updates.append(update)
        self.tables.append(table.name)
        return self

    def add(
        self,
        table: Table | str,
        key: Any,
        action: str | None = None,
        data: Mapping | None = None,
        *,
        priority: int | None = None,
    ) -> Batch:
        t = self._table(table)
        return self._push(t, t.update("INSERT", key, action, data, priority=priority))

    def modify(
        self,
        table: Table | str,
        key: Any,
        action: str | None = None,
        data: Mapping | None = None,
        *,
        priority: int | None = None,
    ) -> Batch:
        t = self._table(table)
        return self._push(t, t.update("MODIFY", key, action, data, priority=priority))

    def upsert(
        self,
        table: Table | str,
        key: Any,
        action: str | None = None,
        data: Mapping | None = None,
        *,
        priority: int | None = None,
    ) -> Batch:
        t = self._table(table)
        return self._push(t, t.update("INSERT_OR_MODIFY", key, action, data, priority=priority))

    def delete(self, table: Table | str, key: Any, *, priority: int | None = None) -> Batch:
        t = self._table(table)
        return self._push(t, t.update("DELETE", key, priority=priority))

    def set_default(self, table: Table | str, action: str, data: Mapping | None = None) -> Batch:
        t = self._table(table)
        return self._push(t, t.update("MODIFY", None, action, data, default=True))

    def send(self) -> None:
        if self.updates:
            self.client.write(self.updates, self.tables, atomicity=self.atomicity)
            self.updates, self.tables = [], []


# ---------------------------------------------------------------- the client


class _Armed:
    """One call's deadline: `overdue` turns true when it passed before `cancel()` (a
    plain flag: the caller reads it after its call ended, which the action causes)."""

    __slots__ = ("at", "overdue", "cancelled")

    def __init__(self, at: float):
        self.at = at
        self.overdue = False
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Watchdog:
    """Every call's deadline of one client, watched by one thread (started with the
    first call): a thread per call cost a thread start on every Read and Write, the
    queue sampler's periodic reads included. `action` runs, outside the lock, once for
    each deadline that passes uncancelled."""

    def __init__(self, action: Any):
        self._action = action
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Armed]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def arm(self, seconds: float) -> _Armed:
        armed = _Armed(time.monotonic() + seconds)
        with self._cv:
            heapq.heappush(self._heap, (armed.at, next(self._seq), armed))
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="bfrt-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()
        return armed

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cv.wait()
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait > 0:
                        self._cv.wait(wait)
                        continue
                    _, _, armed = heapq.heappop(self._heap)
                    armed.overdue = True
                    break
            self._action()


class Client:
    """A BFRuntime session: subscribe, fetch bf-rt.json, bind, then tables by name.

    The connect sequence is the SDE client's: open StreamChannel, send a subscribe and
    wait `subscribe_timeout` (1 s) for a reply with status 0, up to `subscribe_retries`
    (5) times; GetForwardingPipelineConfig; SetForwardingPipelineConfig BIND (unless
    `bind=False`). `close()` half-closes the stream and joins its receive thread.

    With `spare_ids`, a client id another session holds is no error: the next one is
    tried, up to client_id + spare_ids; `client_id` is then the one subscribed.
    """

    def __init__(
        self,
        address: str = f"127.0.0.1:{DEFAULT_PORT}",
        p4_name: str | None = None,
        *,
        client_id: int = 0,
        spare_ids: int = 0,
        device_id: int = 0,
        bind: bool = True,
        connect_timeout: float = 10.0,
        subscribe_timeout: float = 1.0,
        subscribe_retries: int = 5,
        timeout: float = 30.0,
        notifications: Mapping[str, bool] | None = None,
    ):
        if not 0 <= client_id <= client_id + spare_ids <= MAX_CLIENT_ID:
            raise BfrtValueError(f"client ids {client_id} to {client_id + spare_ids} are not all in 0..{MAX_CLIENT_ID}")
        self.address = address
        self.client_id = client_id
        self._ids = range(client_id, client_id + spare_ids + 1)  # the ids this client may take
        self.device_id = device_id
        self.timeout = timeout
        self.p4_name: str | None = p4_name
        self.info: BfrtInfo | None = None
        self.bound = False
        self._bind_wanted = bind
        self.notifications: queue.Queue = queue.Queue(maxsize=10000)  # what the stream brings besides subscribe
        self.reconnects = 0  # sessions opened again after the switch restarted (reconnect())
        self._tables: dict[str, Table] = {}
        self._session = (subscribe_timeout, subscribe_retries, dict(notifications or {}))
        self._lost = threading.Event()  # the switch ended our stream (it stopped or restarted)
        self._closing = False
        self._open(connect_timeout, bind, p4_name)
        self.pre = Pre(self)
        self.ports = Ports(self)

    def _open(self, connect_timeout: float, bind: bool, p4_name: str | None) -> None:
        """A fresh channel and session: subscribe, fetch bf-rt.json, bind if asked."""
        if getattr(self, "_watchdog", None) is None or self._watchdog.stopped:  # first open, or after close()
            self._watchdog = _Watchdog(self._abandon_channel)
        self._requests: queue.Queue = queue.Queue()
        self._subscribed: queue.Queue = queue.Queue()
        self._receiver: threading.Thread | None = None
        self._responses: Any = None
        self._closing = False
        self._lost.clear()
        self.bound = False
        self._channel = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_metadata_size", MAX_METADATA_BYTES),
                ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
            ],
        )
        self.stub = pb_grpc.BfRuntimeStub(self._channel)
        try:
            self._wait_ready(connect_timeout)
            self._subscribe_any(*self._session)
            self.info = self.fetch_info(p4_name)
            self.p4_name = self.info.p4_name
            if bind:
                self.bind()
        except BaseException:
            self.close()
            raise

    @property
    def lost(self) -> bool:
        """True once the switch ended this session without our asking: bf_switchd (or the
        emulator) stopped or restarted, and every table it held is gone."""
        return self._lost.is_set()

    def reconnect(self, timeout: float = 60.0) -> float:
        """Open the session again after a switch restart: the same address, client id,
        program and binding, a new stream. Waits up to `timeout` for the switch to answer;
        returns the seconds it took. The switch's state is the program's initial one:
        the caller programs it again (RainController.reconnect does)."""
        import time

        t0 = time.monotonic()
        bind = self.bound or self._bind_wanted
        self.close()
        self._tables.clear()
        self._open(timeout, bind, self.p4_name)
        self.reconnects += 1
        return time.monotonic() - t0

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<bfrt.Client {self.address} client_id={self.client_id} p4={self.p4_name}>"

    # -------------------------------------------------- session
    def _stream_requests(self) -> Iterator[pb.StreamMessageRequest]:
        while True:
            request = self._requests.get()
            if request is None:
                return  # half-close
            yield request

    def _receive(self) -> None:
        try:
            for response in self._responses:
                if response.WhichOneof("update") == "subscribe":
                    self._subscribed.put(response.subscribe)
                else:
                    try:
                        self.notifications.put_nowait(response)
                    except queue.Full:
                        pass
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                log.debug("BFRuntime stream from %s ended: %s", self.address, e.code())
            self._subscribed.put(e)
            if not self._closing:
                self._lost.set()
            return
        if not self._closing:  # the switch ended the stream: it is going away
            log.debug("BFRuntime stream from %s ended by the switch", self.address)
            self._lost.set()

    def _wait_ready(self, connect_timeout: float) -> None:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            raise BfrtConnectError(
                f"BFRuntime at {self.address} did not answer within {connect_timeout:g} s",
                fix="is bf_switchd (or the emulator) running, and is the address right?",
            ) from None

    def _subscribe_any(self, subscribe_timeout: float, retries: int, notifications: Mapping[str, bool]) -> None:
        """Subscribe as the first id of `self._ids` no other session holds."""
        for cid in self._ids:
            self.client_id = cid
            try:
                self._subscribe_as(cid, subscribe_timeout, retries, notifications)
                return
            except BfrtClientIdTaken as e:
                if cid == self._ids[-1]:
                    if len(self._ids) == 1:
                        raise
                    raise BfrtClientIdTaken(
                        f"BFRuntime at {self.address}: client ids {self._ids[0]} to {cid} are all taken "
                        f"by other sessions ({e.message.splitlines()[0]})",
                        grpc_code=e.grpc_code,
                        fix="close some of the other BFRuntime sessions (a session of a process that died or "
                        "froze ends by itself once the switch notices), then try again",
                    ) from None
                log.debug("client id %d is taken at %s; trying %d", cid, self.address, cid + 1)
                self._end_stream()

    def _subscribe_as(
        self, client_id: int, subscribe_timeout: float, retries: int, notifications: Mapping[str, bool]
    ) -> None:
        self._requests = queue.Queue()
        self._subscribed = queue.Queue()
        self._closing = False
        self._lost.clear()
        self._responses = self.stub.StreamChannel(self._stream_requests())
        self._receiver = threading.Thread(target=self._receive, name=f"bfrt-stream-{client_id}", daemon=True)
        self._receiver.start()
        sub = pb.Subscribe(device_id=self.device_id)
        for name, on in notifications.items():
            setattr(sub.notifications, name, on)
        for attempt in range(1, retries + 1):
            self._requests.put(pb.StreamMessageRequest(client_id=client_id, subscribe=sub))
            try:
                reply = self._subscribed.get(timeout=subscribe_timeout)
            except queue.Empty:
                log.debug("no subscribe reply from %s (attempt %d of %d)", self.address, attempt, retries)
                continue
            if isinstance(reply, grpc.RpcError):
                self._refused(client_id, reply.code(), reply.details() or "")
            if reply.status.code == 0:
                return
            self._refused(client_id, None, reply.status.message, reply.status.code)
        raise BfrtConnectError(
            f"BFRuntime at {self.address} did not confirm the subscription "
            f"({retries} attempts of {subscribe_timeout:g} s)"
        )

    def _refused(self, client_id: int, grpc_code: Any, message: str, status_code: int = 0) -> None:
        """Raise what a refused subscription means."""
        # The emulator answers a taken id in the subscribe reply (ALREADY_EXISTS);
        # bf_switchd ends the stream with INVALID_ARGUMENT "Can't have two clients
        # with the same client id".
        taken = status_code == grpc.StatusCode.ALREADY_EXISTS.value[0] or (
            grpc_code == grpc.StatusCode.INVALID_ARGUMENT and "same client id" in message
        )
        if taken:
            raise BfrtClientIdTaken(
                f"BFRuntime at {self.address} refused client {client_id}: {message}",
                grpc_code=grpc_code,
                fix="use another client_id, or close the other session",
            )
        if grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise BfrtConnectError(
                f"BFRuntime at {self.address} refused a new session: {message}",
                grpc_code=grpc_code,
                fix="too many BFRuntime sessions are open on the switch: close idle ones (a session of a "
                "process that died or froze ends by itself once the switch notices), then try again",
            )
        if grpc_code is not None:
            raise BfrtConnectError(
                f"BFRuntime at {self.address} closed the stream: {grpc_code.name}: {message}", grpc_code=grpc_code
            )
        raise BfrtConnectError(
            f"BFRuntime at {self.address} refused client {client_id}: {message} (code {status_code})",
            fix="use another client_id, or close the other session",
        )

    def fetch_info(self, p4_name: str | None = None) -> BfrtInfo:
        """GetForwardingPipelineConfig: the program's and the non-P4 bf-rt.json, parsed."""
        try:
            reply = self.stub.GetForwardingPipelineConfig(
                pb.GetForwardingPipelineConfigRequest(device_id=self.device_id, client_id=self.client_id),
                timeout=self.timeout,
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e, "GetForwardingPipelineConfig") from None
        configs = list(reply.config)
        if not configs:
            raise BfrtConnectError(f"the switch at {self.address} runs no program", fix="load a P4 program first")
        if p4_name is None:
            config = configs[0]
        else:
            config = next((c for c in configs if c.p4_name == p4_name), None)
            if config is None:
                raise BfrtConnectError(
                    f"the switch at {self.address} does not run {p4_name!r}; it runs {[c.p4_name for c in configs]}"
                )
        non_p4 = reply.non_p4_config.bfruntime_info
        info = BfrtInfo(config.p4_name, json.loads(config.bfruntime_info), json.loads(non_p4) if non_p4 else None)
        self._tables.clear()
        return info

    def bind(self, p4_name: str | None = None) -> None:
        """SetForwardingPipelineConfig BIND to the program (one binder per program on the switch)."""
        name = p4_name or self.p4_name
        request = pb.SetForwardingPipelineConfigRequest(
            client_id=self.client_id, device_id=self.device_id, config=[pb.ForwardingPipelineConfig(p4_name=name)]
        )
        try:
            self.stub.SetForwardingPipelineConfig(request, timeout=self.timeout)
        except grpc.RpcError as e:
            err = from_rpc_error(e, f"binding to {name}")
            raise BfrtConnectError(
                err.message, grpc_code=err.grpc_code, fix="another client may be bound to this program"
            ) from None
        self.bound = True

    def close(self) -> None:
        """Half-close the stream, wait for the switch to end it, close the channel."""
        self._end_stream()
        self._watchdog.stop()
        self._channel.close()

    def _end_stream(self) -> None:
        self._closing = True
        if self._receiver is not None:
            self._requests.put(None)
            self._receiver.join(timeout=5)
            if self._receiver.is_alive() and self._responses is not None:
                self._responses.cancel()
                self._receiver.join(timeout=5)
            self._receiver = None

    # -------------------------------------------------- tables
    def target(self, pipe: int = ALL_PIPES) -> pb.TargetDevice:
        return pb.TargetDevice(device_id=self.device_id, pipe_id=pipe, direction=0xFF, prsr_id=0xFF)

    def table(self, name: str) -> Table:
        """A table by full name or unique dot-suffix (P4 and fixed tables alike)."""
        full = self.info.resolve(name)
        if full not in self._tables:
            self._tables[full] = Table(self, self.info.tables[full])
        return self._tables[full]

    def register(self, name: str, *, signed: bool = False) -> Register:
        return Register(self.table(name), signed=signed)

    def counter(self, name: str) -> Counter:
        return Counter(self.table(name))

    def batch(self, atomicity: str = "CONTINUE_ON_ERROR") -> Batch:
        """Collect updates and send them in one Write (`atomicity`: a WriteRequest.Atomicity name)."""
        return Batch(self, atomicity)

    # -------------------------------------------------- raw calls
    def write(
        self, updates: Sequence[pb.Update], tables: Sequence[str | None] = (), *, atomicity: str = "CONTINUE_ON_ERROR"
    ) -> None:
        """One Write; `tables[i]` names the table of update i in errors."""
        request = pb.WriteRequest(
            target=self.target(),
            client_id=self.client_id,
            updates=updates,
            atomicity=pb.WriteRequest.Atomicity.Value(atomicity),
            p4_name=self.p4_name or "",
        )
        watchdog = self._watchdog.arm(self.timeout + 1.0)
        try:
            self.stub.Write(request, timeout=self.timeout)
        except grpc.RpcError as e:
            if watchdog.overdue:
                raise self._overdue_error(f"write of {len(updates)} update(s)") from None
            self._note_unavailable(e)
            raise from_rpc_error(e, f"write of {len(updates)} update(s)", tables) from None
        finally:
            watchdog.cancel()

    def read_entries(self, entries: Sequence[pb.TableEntry], tables: Sequence[str | None] = ()) -> list[pb.TableEntry]:
        request = pb.ReadRequest(
            target=self.target(),
            client_id=self.client_id,
            entities=[pb.Entity(table_entry=e) for e in entries],
            p4_name=self.p4_name or "",
        )
        return [e.table_entry for e in self._read(request, tables)]

    def _read(self, request: pb.ReadRequest, tables: Sequence[str | None]) -> list[pb.Entity]:
        what = f"read of {', '.join(t or '?' for t in tables) or 'entities'}"
        call = self.stub.Read(request, timeout=self.timeout)
        watchdog = self._watchdog.arm(self.timeout + 1.0)
        try:
            return [e for response in call for e in response.entities]
        except grpc.RpcError as e:
            if watchdog.overdue:
                raise self._overdue_error(what) from None
            self._note_unavailable(e)
            raise from_rpc_error(e, what, tables) from None
        finally:
            watchdog.cancel()

    def _abandon_channel(self) -> None:
        """A call outlived its deadline by a second (self._watchdog). gRPC core can miss
        a call's deadline, and ignore its cancel, when the server's GOAWAY races the
        call's start (about one stop in thirty here). A channel in that state is dead:
        close it; the call ends with CANCELLED and the session is lost (reconnect opens
        a fresh channel)."""
        if not self._closing:
            self._lost.set()
        self._channel.close()

    def _overdue_error(self, what: str) -> BfrtError:
        return BfrtError(
            f"{what}: BFRuntime at {self.address} did not answer within {self.timeout:g} s; the session is dropped",
            grpc_code=grpc.StatusCode.DEADLINE_EXCEEDED,
            fix="check that bf_switchd (or the emulator) is running, then reconnect",
        )

    def _note_unavailable(self, e: grpc.RpcError) -> None:
        # The server went away under a call: the session is lost even if the stream
        # thread has not noticed yet.
        if e.code() == grpc.StatusCode.UNAVAILABLE and not self._closing:
            self._lost.set()
