"""A P4 program declared as data, and the bf-rt.json that describes it.

The emulator runs programs written in Python, but it must look to a BFRuntime client
exactly like bf_switchd running the bf-p4c output of the same P4. So a program is
declared once, here, with the names bf-p4c gives (tables and registers under
`pipe.<control>...`, actions without `pipe.`), and everything else derives from it:

- `Program` (tables, registers, counters) is what a pipeline author writes;
- `layout(program)` assigns BF-RT ids and field types (`TableSpec`, `FieldSpec`) to it,
  adds the tables bf-p4c adds to every program (the ingress parser's $PORT_METADATA,
  pipe.snapshot.*) and the fixed non-P4 tables ($pre.mgid, $pre.node, $PORT, $PORT_STAT,
  $PORT_STR_INFO, $PORT_HDL_INFO, $PORT_FP_IDX_INFO; the others Tofino 1 has are declared
  in fixed_tables.py);
- `Layout.p4_json()` / `Layout.non_p4_json()` render the two bf-rt.json documents.

The server decodes requests with the same `TableSpec`s it renders, so the JSON a client
reads and the checks the server applies cannot drift. IDs are the emulator's own (a
client resolves names); names, field types and the fixed-table ids follow the SDE.

Example:

    FORWARD = Table(
        "pipe.SwitchIngress.forward.forward",
        keys=[Key("hdr.ethernet.dst_addr", 48)],
        actions=[Action("SwitchIngress.forward.set_egress", [Param("port", 9)]),
                 Action("SwitchIngress.forward.drop")],
        size=1024, default_action="drop")
    PROGRAM = Program("rain", tables=[FORWARD],
                      registers=[Register("pipe.SwitchIngress.bidir_queue.balance", 32, 64, signed=True)])
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from switch.bfrt.info import aliases  # noqa: F401 - the same dot-suffix rule as the client's
from switch.errors import SwitchError


class SchemaError(SwitchError):
    """A program declaration is inconsistent (names the program, table and field)."""


class Match(str, enum.Enum):
    """Match kinds, spelled as bf-rt.json spells them."""

    EXACT = "Exact"
    TERNARY = "Ternary"
    LPM = "LPM"
    RANGE = "Range"
    OPTIONAL = "Optional"


# Kinds that make a table a TCAM table, ordered by `$MATCH_PRIORITY`.
PRIORITY_MATCHES = frozenset({Match.TERNARY, Match.RANGE, Match.OPTIONAL})

# ---------------------------------------------------------------- the declaration


@dataclass(frozen=True)
class Key:
    """One key field of a table: bf-p4c's name (e.g. `hdr.ipv4.dst_addr`), width in bits."""

    name: str
    width: int
    match: Match = Match.EXACT

    def __post_init__(self):
        object.__setattr__(self, "match", Match(self.match))


@dataclass(frozen=True)
class Param:
    """One action parameter: its P4 name and width in bits."""

    name: str
    width: int


@dataclass(frozen=True)
class Action:
    """An action as bf-p4c names it (`SwitchIngress.forward.set_egress`).

    `scope` is bf-rt's action_scope: "TableAndDefault", "TableOnly" or "DefaultOnly".
    """

    name: str
    params: tuple[Param, ...] = ()
    scope: str = "TableAndDefault"

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


NO_ACTION = Action("NoAction", (), "DefaultOnly")


@dataclass(frozen=True)
class Table:
    """A match-action table. Without `default_action` the default is NoAction, as in P4."""

    name: str
    keys: tuple[Key, ...]
    actions: tuple[Action, ...]
    size: int
    default_action: str | None = None
    default_params: Mapping[str, int] = field(default_factory=dict)
    const_default: bool = False

    def __post_init__(self):
        object.__setattr__(self, "keys", tuple(self.keys))
        actions = tuple(self.actions)
        if self.default_action is None:
            if all(a.name != NO_ACTION.name for a in actions):
                actions += (NO_ACTION,)
            object.__setattr__(self, "default_action", NO_ACTION.name)
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "default_params", dict(self.default_params))

    @property
    def has_priority(self) -> bool:
        """TCAM tables carry `$MATCH_PRIORITY` in their key."""
        return any(k.match in PRIORITY_MATCHES for k in self.keys)

    def action(self, name: str) -> Action:
        """The action called `name` (full or short name)."""
        for a in self.actions:
            if name in (a.name, a.short):
                return a
        raise SchemaError(f"table {self.name}: no action {name!r}; it has {', '.join(a.name for a in self.actions)}")


@dataclass(frozen=True)
class Register:
    """A register array (`pipe.SwitchIngress.bidir_queue.balance`): cell width, cell count."""

    name: str
    width: int
    size: int
    signed: bool = False

    @property
    def data_field(self) -> str:
        """The data field's name in bf-rt.json: the name without `pipe.`, then `.f1`."""
        return _without_pipe(self.name) + ".f1"


@dataclass(frozen=True)
class Counter:
    """An indirect packets-and-bytes counter array."""

    name: str
    size: int


@dataclass(frozen=True)
class Program:
    """A P4 program as data: its name (the p4_name clients bind to) and its objects."""

    name: str
    tables: tuple[Table, ...] = ()
    registers: tuple[Register, ...] = ()
    counters: tuple[Counter, ...] = ()
    # The ingress parser's control name: bf-p4c serves its port metadata table as
    # `pipe.<parser>.$PORT_METADATA` (TNA programs conventionally call it SwitchIngressParser).
    ingress_parser: str = "SwitchIngressParser"

    def __post_init__(self):
        for attr in ("tables", "registers", "counters"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        self._validate()

    def _validate(self) -> None:
        where = f"program {self.name}"
        names = [o.name for o in (*self.tables, *self.registers, *self.counters)]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaError(f"{where}: declared twice: {', '.join(dupes)}")
        for t in self.tables:
            at = f"{where}, table {t.name}"
            if t.size <= 0:
                raise SchemaError(f"{at}: size must be positive, not {t.size}")
            keys = [k.name for k in t.keys]
            if len(set(keys)) != len(keys):
                raise SchemaError(f"{at}: a key field appears twice")
            for k in t.keys:
                if k.width <= 0:
                    raise SchemaError(f"{at}: key {k.name} has width {k.width}")
            if sum(k.match is Match.LPM for k in t.keys) > 1:
                raise SchemaError(f"{at}: more than one LPM key field", fix="P4 allows one lpm field per table")
            shorts = [a.short for a in t.actions]
            if len(set(shorts)) != len(shorts):
                raise SchemaError(f"{at}: two actions share a short name ({shorts})")
            for a in t.actions:
                pnames = [p.name for p in a.params]
                if len(set(pnames)) != len(pnames) or any(p.width <= 0 for p in a.params):
                    raise SchemaError(f"{at}, action {a.name}: duplicate or zero-width parameter")
                if a.scope not in ("TableAndDefault", "TableOnly", "DefaultOnly"):
                    raise SchemaError(f"{at}, action {a.name}: unknown scope {a.scope!r}")
            default = t.action(t.default_action)
            if default.scope == "TableOnly":
                raise SchemaError(f"{at}: default action {default.name} is TableOnly")
            if set(t.default_params) != {p.name for p in default.params}:
                raise SchemaError(
                    f"{at}: default_params {sorted(t.default_params)} do not match "
                    f"the parameters of {default.name}: {[p.name for p in default.params]}"
                )
        for r in self.registers:
            if r.width not in (8, 16, 32, 64) or r.size <= 0:
                raise SchemaError(f"{where}, register {r.name}: width must be 8, 16, 32 or 64 and size positive")
        for c in self.counters:
            if c.size <= 0:
                raise SchemaError(f"{where}, counter {c.name}: size must be positive")


def _without_pipe(name: str) -> str:
    return name[len("pipe.") :] if name.startswith("pipe.") else name


# ---------------------------------------------------------------- the BF-RT layout

# Reserved field ids of bf-rt.json (the SDE's values).
MATCH_PRIORITY_ID = 65537
ACTION_MEMBER_ID = 65539
SELECTOR_GROUP_ID = 65540
ENTRY_TTL_ID = 65543
COUNTER_SPEC_BYTES_ID = 65553
COUNTER_SPEC_PKTS_ID = 65554
COUNTER_INDEX_ID = 65556
REGISTER_INDEX_ID = 65557

# Fixed (non-P4) table ids of Tofino1.
PORT_TABLE_ID = 0xFF010001
PORT_STAT_TABLE_ID = 0xFF010002
PRE_MGID_TABLE_ID = 0xFF020001
PRE_NODE_TABLE_ID = 0xFF020002
PORT_HDL_INFO_TABLE_ID = 0xFF010003
PORT_FP_IDX_INFO_TABLE_ID = 0xFF010004
PORT_STR_INFO_TABLE_ID = 0xFF010005

# The emulator's own id spaces for P4 objects (P4Info-like prefixes).
_ACTION_BASE = 0x01000000
_TABLE_BASE = 0x02000000
_COUNTER_BASE = 0x12000000
_REGISTER_BASE = 0x13000000
_PARSER_BASE = 0x14000000
_SNAPSHOT_BASE = 0x15000000

SPEEDS = (
    "BF_SPEED_NONE",
    "BF_SPEED_1G",
    "BF_SPEED_10G",
    "BF_SPEED_25G",
    "BF_SPEED_40G",
    "BF_SPEED_40G_NB",
    "BF_SPEED_40G_NON_BREAKABLE",
    "BF_SPEED_50G",
    "BF_SPEED_100G",
    "BF_SPEED_200G",
    "BF_SPEED_400G",
)
FECS = ("BF_FEC_TYP_NONE", "BF_FEC_TYP_FIRECODE", "BF_FEC_TYP_REED_SOLOMON", "BF_FEC_TYP_FC", "BF_FEC_TYP_RS")
AUTONEG = ("PM_AN_DEFAULT", "PM_AN_FORCE_ENABLE", "PM_AN_FORCE_DISABLE")
LOOPBACK = (
    "BF_LPBK_NONE",
    "BF_LPBK_MAC_NEAR",
    "BF_LPBK_MAC_FAR",
    "BF_LPBK_PCS_NEAR",
    "BF_LPBK_SERDES_NEAR",
    "BF_LPBK_SERDES_FAR",
)
PORT_DIR = ("PM_PORT_DIR_DEFAULT", "PM_PORT_DIR_TX_ONLY", "PM_PORT_DIR_RX_ONLY")
MEDIA_TYPES = ("BF_MEDIA_TYPE_COPPER", "BF_MEDIA_TYPE_OPTICAL", "BF_MEDIA_TYPE_UNKNOWN")

# The counters the emulator measures, in the order of a port's live cells (ports.py adds
# to them in place), and then two of its own (bf_switchd's $PORT_STAT has neither;
# docs/emulation.md): carrier losses of the port's link, and frames dropped at the port
# because it was down (no carrier, or not enabled through $PORT), whichever way they went.
PORT_STAT_FIELDS = (
    "$FramesReceivedOK",
    "$FramesReceivedAll",
    "$OctetsReceivedinGoodFrames",
    "$OctetsReceived",
    "$FramesTransmittedOK",
    "$FramesTransmittedAll",
    "$OctetsTransmittedwithouterror",
    "$OctetsTransmittedTotal",
    "$LinkDownEvents",
    "$FramesDroppedPortDown",
)
# bf_switchd's $PORT_STAT: its RMON counters (field id = bf_rmon_counter_t + 1) and the
# rates it adds; those the emulator does not measure read zero.
_PRI = range(8)
_LENGTHS = ("lt_64", "eq_64", "65_127", "128_255", "256_511", "512_1023", "1024_1518", "1519_2047",
            "2048_4095", "4096_8191", "8192_9215", "9216")  # fmt: skip
SDE_PORT_STAT_FIELDS = (
    "$FramesReceivedOK", "$FramesReceivedAll", "$FramesReceivedwithFCSError", "$FrameswithanyError",
    "$OctetsReceivedinGoodFrames", "$OctetsReceived", "$FramesReceivedwithUnicastAddresses",
    "$FramesReceivedwithMulticastAddresses", "$FramesReceivedwithBroadcastAddresses",
    "$FramesReceivedoftypePAUSE", "$FramesReceivedwithLengthError", "$FramesReceivedUndersized",
    "$FramesReceivedOversized", "$FragmentsReceived", "$JabberReceived", "$PriorityPauseFrames",
    "$CRCErrorStomped", "$FrameTooLong", "$RxVLANFramesGood", "$FramesDroppedBufferFull",
    *(f"$FramesReceivedLength_{n}" for n in _LENGTHS),
    "$FramesTransmittedOK", "$FramesTransmittedAll", "$FramesTransmittedwithError",
    "$OctetsTransmittedwithouterror", "$OctetsTransmittedTotal", "$FramesTransmittedUnicast",
    "$FramesTransmittedMulticast", "$FramesTransmittedBroadcast", "$FramesTransmittedPause",
    "$FramesTransmittedPriPause", "$FramesTransmittedVLAN",
    *(f"$FramesTransmittedLength_{n}" for n in _LENGTHS),
    *(f"$Pri{p}FramesTransmitted" for p in _PRI),
    *(f"$Pri{p}FramesReceived" for p in _PRI),
    *(f"$TransmitPri{p}Pause1USCount" for p in _PRI),
    *(f"$ReceivePri{p}Pause1USCount" for p in _PRI),
    "$ReceiveStandardPause1USCount", "$FramesTruncated", "$TimeInSec", "$TimeinNSec",
    "$TX_PPS", "$RX_PPS", "$TX_RATE", "$RX_RATE",
)  # fmt: skip
PORT_LINK_DOWN_EVENTS = PORT_STAT_FIELDS.index("$LinkDownEvents")
PORT_FRAMES_DROPPED_DOWN = PORT_STAT_FIELDS.index("$FramesDroppedPortDown")

_UINT_WIDTH = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
_INT_WIDTH = {**_UINT_WIDTH, "int32": 32}  # int32 travels as 4 bytes, two's complement


_AUTO = object()  # FieldSpec.default: what bf-p4c writes for the type (0 for uints, nothing else)


@dataclass(frozen=True)
class FieldSpec:
    """A key or data field as bf-rt.json describes it.

    `type` is bf-rt's: "bytes" (with `width`), "uint8/16/32/64", "bool", "string", "float".
    On the wire a bytes or uint field is a big-endian `stream` of exactly `nbytes` bytes
    (or an `int_arr_val` when repeated), a bool a `bool_val`, a string a `str_val`; a
    string key field travels as the exact value's bytes (UTF-8).
    A register's data field is not repeated although a read answers it once per pipe:
    the field then appears once per pipe in the entry, as bf_switchd sends it.
    """

    id: int
    name: str
    type: str = "bytes"
    width: int = 0
    match: Match | None = None  # key fields only
    mandatory: bool = True
    read_only: bool = False
    repeated: bool = False
    annotations: tuple[tuple[str, str], ...] = ()
    choices: tuple[str, ...] = ()
    default: Any = _AUTO  # the type's default_value in bf-rt.json (None: none written)

    def __post_init__(self):
        if self.type in _INT_WIDTH:
            object.__setattr__(self, "width", _INT_WIDTH[self.type])
        elif self.type == "bool":
            object.__setattr__(self, "width", 1)

    @property
    def is_int(self) -> bool:
        return self.type == "bytes" or self.type in _INT_WIDTH

    @property
    def is_register_data(self) -> bool:
        return ("$bfrt_field_class", "register_data") in self.annotations

    @property
    def nbytes(self) -> int:
        return math.ceil(self.width / 8)

    def type_json(self) -> dict[str, Any]:
        if self.type == "bytes":
            return {"type": "bytes", "width": self.width}
        out: dict[str, Any] = {"type": self.type}
        if self.choices:
            out["choices"] = list(self.choices)
        default = (0 if self.type in _UINT_WIDTH else None) if self.default is _AUTO else self.default
        if default is not None:
            out["default_value"] = default
        return out

    def _annotations_json(self) -> list[dict[str, str]]:
        return [{"name": n, "value": v} for n, v in self.annotations]

    def key_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "repeated": False,
            "annotations": self._annotations_json(),
            "mandatory": self.mandatory,
            "match_type": self.match.value,
            "type": self.type_json(),
        }

    def data_json(self) -> dict[str, Any]:
        return {
            "mandatory": self.mandatory,
            "read_only": self.read_only,
            "singleton": {
                "id": self.id,
                "name": self.name,
                "repeated": self.repeated,
                "annotations": self._annotations_json(),
                "type": self.type_json(),
            },
        }

    def param_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "repeated": False,
            "mandatory": self.mandatory,
            "read_only": False,
            "annotations": self._annotations_json(),
            "type": self.type_json(),
        }


@dataclass(frozen=True)
class ActionSpec:
    """An action of a table. `style` is how its JSON is written: "p4" (bf-p4c's), or as
    the SDE's fixed tables write theirs, "wrapped" (data entries as a table's, e.g.
    $mirror.cfg) or "flat" (fields without read_only, e.g. tf1.pktgen.app_cfg)."""

    id: int
    name: str
    scope: str
    params: tuple[FieldSpec, ...]
    style: str = "p4"

    def __post_init__(self):
        object.__setattr__(self, "param_by_id", {p.id: p for p in self.params})

    def to_json(self) -> dict[str, Any]:
        if self.style == "wrapped":
            return {"id": self.id, "name": self.name, "data": [p.data_json() for p in self.params]}
        if self.style == "flat":
            data = [{k: v for k, v in p.param_json().items() if k != "read_only"} for p in self.params]
            return {"id": self.id, "name": self.name, "data": data}
        return {
            "id": self.id,
            "name": self.name,
            "action_scope": self.scope,
            "annotations": [],
            "data": [p.param_json() for p in self.params],
        }


class Kind(str, enum.Enum):
    """What runtime object a table is backed by in the emulator."""

    MATCH = "match"
    REGISTER = "register"
    COUNTER = "counter"
    PRE_MGID = "pre_mgid"
    PRE_NODE = "pre_node"
    PORT = "port"
    PORT_STAT = "port_stat"
    PORT_STR_INFO = "port_str_info"
    PORT_HDL_INFO = "port_hdl_info"
    PORT_FP_IDX_INFO = "port_fp_idx_info"
    FIXED = "fixed"  # the other fixed-function tables: state kept, no effect (fixed_tables.py)
    PORT_METADATA = "port_metadata"
    SNAPSHOT = "snapshot"  # served (readable, always empty): the emulator has no MAU stages to capture


@dataclass(frozen=True)
class TableSpec:
    """One table of bf-rt.json, with id indexes for decoding requests."""

    id: int
    name: str
    table_type: str
    kind: Kind
    size: int
    keys: tuple[FieldSpec, ...] = ()
    data: tuple[FieldSpec, ...] = ()
    actions: tuple[ActionSpec, ...] = ()
    operations: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    const_default: bool | None = False  # None: bf-p4c writes no has_const_default_action
    annotated: bool = True  # False: bf-p4c writes no table "annotations" (registers)
    depends_on: tuple[str, ...] = ()  # names of the tables this one depends on
    fixed: bool = False  # a non-P4 table: its JSON (the SDE's *_tf1.json) has no annotations or depends_on

    def __post_init__(self):
        object.__setattr__(self, "key_by_id", {f.id: f for f in self.keys})
        object.__setattr__(self, "data_by_id", {f.id: f for f in self.data})
        object.__setattr__(self, "data_by_name", {f.name: f for f in self.data})
        object.__setattr__(self, "action_by_id", {a.id: a for a in self.actions})
        object.__setattr__(self, "action_by_name", {a.name: a for a in self.actions})

    def to_json(self, ids: Mapping[str, int] | None = None) -> dict[str, Any]:
        """bf-rt.json's table object, with the keys bf-p4c writes for this kind of table
        (`ids`: table name -> id, to resolve `depends_on`)."""
        out: dict[str, Any] = {"name": self.name, "id": self.id, "table_type": self.table_type, "size": self.size}
        if self.annotated and not self.fixed:
            out["annotations"] = []
        if not self.fixed:
            out["depends_on"] = [(ids or {})[n] for n in self.depends_on]
        if self.const_default is not None and not self.fixed:
            out["has_const_default_action"] = self.const_default
        out["key"] = [k.key_json() for k in self.keys]
        if self.kind is Kind.MATCH or self.actions:
            out["action_specs"] = [a.to_json() for a in self.actions]
        out["data"] = [d.data_json() for d in self.data]
        out["supported_operations"] = list(self.operations)
        out["attributes"] = list(self.attributes)
        return out


@dataclass(frozen=True)
class Layout:
    """The BF-RT view of a program plus the fixed tables: what GetForwardingPipelineConfig returns."""

    program: Program
    p4: tuple[TableSpec, ...]
    fixed: tuple[TableSpec, ...]

    def __post_init__(self):
        object.__setattr__(self, "by_id", {t.id: t for t in (*self.p4, *self.fixed)})
        object.__setattr__(self, "by_name", {t.name: t for t in (*self.p4, *self.fixed)})

    def p4_json(self) -> dict[str, Any]:
        ids = {t.name: t.id for t in self.p4}
        return {"schema_version": "1.0.0", "tables": [t.to_json(ids) for t in self.p4], "learn_filters": []}

    def non_p4_json(self) -> dict[str, Any]:
        ids = {t.name: t.id for t in self.fixed}
        return {"schema_version": "1.0.0", "tables": [t.to_json(ids) for t in self.fixed], "learn_filters": []}


def _bytes_field(id: int, name: str, width: int, **kw) -> FieldSpec:
    return FieldSpec(id=id, name=name, type="bytes", width=width, **kw)


def _match_table(t: Table, table_id: int, action_ids: dict[str, int]) -> TableSpec:
    # bf-p4c marks no P4 key field mandatory (a missing exact field is an all-zero value
    # there; the emulator refuses it instead, see bfrt_server), nor $MATCH_PRIORITY, which
    # it writes without a default value (the emulator still requires a priority: tables.py).
    keys = [_bytes_field(i, k.name, k.width, match=k.match, mandatory=False) for i, k in enumerate(t.keys, start=1)]
    if t.has_priority:
        keys.append(
            FieldSpec(MATCH_PRIORITY_ID, "$MATCH_PRIORITY", "uint32", match=Match.EXACT, mandatory=False, default=None)
        )
    actions = [
        ActionSpec(
            action_ids[a.name],
            a.name,
            a.scope,
            tuple(_bytes_field(i, p.name, p.width) for i, p in enumerate(a.params, start=1)),
        )
        for a in t.actions
    ]
    return TableSpec(
        table_id,
        t.name,
        "MatchAction_Direct",
        Kind.MATCH,
        t.size,
        tuple(keys),
        actions=tuple(actions),
        attributes=("EntryScope",),
        const_default=t.const_default,
    )


def _index_key(id: int, name: str) -> FieldSpec:
    return FieldSpec(id, name, "uint32", match=Match.EXACT, default=None)


def _register_table(r: Register, table_id: int) -> TableSpec:
    # As bf-p4c writes it: one mandatory, non-repeated cell field (the SDE client converts
    # integers only for non-repeated fields); a read still answers it once per pipe.
    cell = _bytes_field(1, r.data_field, r.width, annotations=(("$bfrt_field_class", "register_data"),))
    return TableSpec(
        table_id,
        r.name,
        "Register",
        Kind.REGISTER,
        r.size,
        (_index_key(REGISTER_INDEX_ID, "$REGISTER_INDEX"),),
        (cell,),
        operations=("Sync",),
        const_default=None,
        annotated=False,
    )


def _counter_table(c: Counter, table_id: int) -> TableSpec:
    data = (
        FieldSpec(COUNTER_SPEC_BYTES_ID, "$COUNTER_SPEC_BYTES", "uint64", mandatory=False),
        FieldSpec(COUNTER_SPEC_PKTS_ID, "$COUNTER_SPEC_PKTS", "uint64", mandatory=False),
    )
    return TableSpec(
        table_id,
        c.name,
        "Counter",
        Kind.COUNTER,
        c.size,
        (_index_key(COUNTER_INDEX_ID, "$COUNTER_INDEX"),),
        data,
        operations=("Sync",),
        const_default=None,
    )


# The ingress parser's port metadata (TNA's port_metadata_unpack); without a declared
# header, bf-p4c serves a 64-bit $DEFAULT_FIELD, one entry per Tofino 1 ingress port.
PORT_METADATA_KEY_ID = 65575
PORT_METADATA_DATA_ID = 65576
PORT_METADATA_WIDTH = 64
PORT_METADATA_SIZE = 288


def _port_metadata_table(program: Program, table_id: int) -> TableSpec:
    return TableSpec(
        table_id,
        f"pipe.{program.ingress_parser}.$PORT_METADATA",
        "PortMetadata",
        Kind.PORT_METADATA,
        PORT_METADATA_SIZE,
        (_bytes_field(PORT_METADATA_KEY_ID, "ig_intr_md.ingress_port", 9, match=Match.EXACT),),
        (_bytes_field(PORT_METADATA_DATA_ID, "$DEFAULT_FIELD", PORT_METADATA_WIDTH, mandatory=False),),
        const_default=None,
    )


STAGES = 12  # Tofino 1 MAU stages: the size of the snapshot tables


def _snapshot_tables(next_id) -> list[TableSpec]:
    """bf-p4c's `pipe.snapshot.*` tables with their program-independent fields. The
    PHV fields a trigger matches and a capture holds (`trig.hdr...`, `hdr...`) and the
    capture's table_info container are left out: they describe the compiler's PHV and
    stage allocation, which the emulator does not have."""
    opt = dict(mandatory=False)
    ro = dict(mandatory=False, read_only=True)
    stage_key = (FieldSpec(65587, "stage", "uint32", match=Match.EXACT),)
    liveness_key = (FieldSpec(65618, "field_name", "string", match=Match.EXACT),)
    snap = dict(const_default=None, annotated=False)
    trigger_data = (
        FieldSpec(65589, "enable", "bool", default=False, **opt),
        FieldSpec(65590, "trigger_state", "string", repeated=True, choices=("PASSIVE", "ARMED", "FULL"), **ro),
    )
    capture_data = (
        FieldSpec(65599, "prev_stage_trigger", "bool", default=False, **ro),
        FieldSpec(65592, "timer_trigger", "bool", default=False, **ro),
        FieldSpec(65601, "local_stage_trigger", "bool", default=False, **ro),
        FieldSpec(65603, "next_table_name", "string", **ro),
    )
    liveness_data = (FieldSpec(65619, "valid_stages", "uint32", repeated=True, default=None, **ro),)
    out = [
        TableSpec(
            next_id(),
            "pipe.snapshot.cfg",
            "SnapshotCfg",
            Kind.SNAPSHOT,
            STAGES,
            (
                FieldSpec(65587, "start_stage", "uint32", match=Match.EXACT, mandatory=False),
                FieldSpec(65588, "end_stage", "uint32", match=Match.EXACT, mandatory=False, default=STAGES - 1),
            ),
            (
                FieldSpec(65591, "timer_enable", "bool", default=False, **opt),
                FieldSpec(65593, "timer_value_usecs", "uint32", default=None, **opt),
                FieldSpec(
                    65600,
                    "ingress_trigger_mode",
                    "string",
                    choices=("INGRESS", "GHOST", "INGRESS_GHOST", "ANY"),
                    default="INGRESS",
                    **opt,
                ),
                FieldSpec(65620, "thread", "string", choices=("INGRESS", "EGRESS", "ALL")),
                *(
                    FieldSpec(i, f"{g}_capture", "uint32", repeated=True, default=None, **ro)
                    for i, g in ((65621, "ingress"), (65622, "egress"), (65623, "ghost"))
                ),
            ),
            depends_on=("pipe.snapshot.egress_trigger", "pipe.snapshot.ingress_trigger"),
            **snap,
        )
    ]
    for gress in ("egress", "ingress"):
        out += [
            TableSpec(
                next_id(),
                f"pipe.snapshot.{gress}_trigger",
                "SnapshotTrigger",
                Kind.SNAPSHOT,
                STAGES,
                stage_key,
                trigger_data,
                **snap,
            ),
            TableSpec(
                next_id(),
                f"pipe.snapshot.{gress}_data",
                "SnapshotData",
                Kind.SNAPSHOT,
                STAGES,
                stage_key,
                capture_data,
                **snap,
            ),
            TableSpec(
                next_id(),
                f"pipe.snapshot.{gress}_liveness",
                "SnapshotLiveness",
                Kind.SNAPSHOT,
                0,
                liveness_key,
                liveness_data,
                **snap,
            ),
        ]
    return out


# $FEC as SDE 9.13's port table takes it: BF_FEC_TYP_FC and BF_FEC_TYP_RS are other names
# of FIRECODE and REED_SOLOMON (the same bf_fec_type_t values). Reading a port back, the
# driver names its FEC with the first matching name of its sorted name->value map: FC
# for firecode, REED_SOLOMON for Reed-Solomon. FEC_READ_BACK says that for each choice.
FEC_READ_BACK = {
    "BF_FEC_TYP_NONE": "BF_FEC_TYP_NONE",
    "BF_FEC_TYP_FIRECODE": "BF_FEC_TYP_FC",
    "BF_FEC_TYP_FC": "BF_FEC_TYP_FC",
    "BF_FEC_TYP_REED_SOLOMON": "BF_FEC_TYP_REED_SOLOMON",
    "BF_FEC_TYP_RS": "BF_FEC_TYP_REED_SOLOMON",
}
PORT_KEY_NOTE = "$bfrt_port_type_class"
SERDES_TAPS = ("$SDS_TX_PRE", "$SDS_TX_PRE2", "$SDS_TX_POST", "$SDS_TX_POST2")
# $PORT_STAT as served: bf_switchd's counters (ids 1 to 95), then the emulator's two.
PORT_STAT_SERVED = SDE_PORT_STAT_FIELDS + PORT_STAT_FIELDS[PORT_LINK_DOWN_EVENTS:]


def fixed_tables(max_ports: int = 512) -> tuple[TableSpec, ...]:
    """The non-P4 tables the emulator serves (Tofino1 ids and field names)."""
    exact = Match.EXACT
    opt = dict(mandatory=False)
    rep = dict(mandatory=False, repeated=True)
    ro = dict(mandatory=False, read_only=True, default=None)
    dev_port = FieldSpec(
        1, "$DEV_PORT", "uint32", match=exact, annotations=((PORT_KEY_NOTE, "dev_port"),), default=None
    )
    fixed = dict(fixed=True, const_default=None)
    return (
        TableSpec(
            PORT_TABLE_ID,
            "$PORT",
            "PortConfigure",
            Kind.PORT,
            max_ports,
            (dev_port,),
            (
                # Not mandatory in the SDE's table either; INSERT still needs both (bfrt_server).
                FieldSpec(1, "$SPEED", "string", choices=SPEEDS, annotations=(("$bfrt_field_imp_level", "2"),), **opt),
                FieldSpec(2, "$FEC", "string", choices=FECS, **opt),
                FieldSpec(3, "$N_LANES", "uint32", default=1, **opt),
                FieldSpec(4, "$PORT_ENABLE", "bool", default=False, **opt),
                FieldSpec(5, "$AUTO_NEGOTIATION", "string", choices=AUTONEG, **opt),
                FieldSpec(6, "$LOOPBACK_MODE", "string", choices=LOOPBACK, **opt),
                FieldSpec(7, "$TX_MTU", "uint32", default=10240, **opt),
                FieldSpec(8, "$RX_MTU", "uint32", default=10240, **opt),
                FieldSpec(9, "$TX_PFC_EN_MAP", "uint32", **opt),
                FieldSpec(10, "$RX_PFC_EN_MAP", "uint32", **opt),
                FieldSpec(11, "$TX_PAUSE_FRAME_EN", "bool", default=False, **opt),
                FieldSpec(12, "$RX_PAUSE_FRAME_EN", "bool", default=False, **opt),
                FieldSpec(13, "$CUT_THROUGH_EN", "bool", default=False, **opt),
                FieldSpec(14, "$PORT_DIR", "string", choices=PORT_DIR, **opt),
                FieldSpec(15, "$MEDIA_TYPE", "string", choices=MEDIA_TYPES, **ro),
                FieldSpec(16, "$SDS_TX_ATTN", "uint32", **opt),
                *(FieldSpec(i, n, "int32", default="0", **opt) for i, n in enumerate(SERDES_TAPS, start=17)),
                FieldSpec(21, "$IS_VALID", "bool", **ro),
                FieldSpec(22, "$IS_INTERNAL", "bool", **ro),
                FieldSpec(23, "$CONN_ID", "uint32", **ro),
                FieldSpec(24, "$CHNL_ID", "uint32", **ro),
                FieldSpec(25, "$PORT_UP", "bool", **ro),
                FieldSpec(26, "$PORT_NAME", "string", **ro),
                FieldSpec(27, "$RX_PRSR_PRI_THRESH", "uint32", default=None, **opt),
                FieldSpec(28, "$TIMESTAMP_1588_DELTA_TX", "uint16", default=None, **opt),
                FieldSpec(29, "$TIMESTAMP_1588_DELTA_RX", "uint16", default=None, **opt),
                FieldSpec(30, "$TIMESTAMP_1588_VALID", "bool", **ro),
                FieldSpec(31, "$TIMESTAMP_1588_VALUE", "uint64", **ro),
                FieldSpec(32, "$TIMESTAMP_1588_ID", "uint32", **ro),
                FieldSpec(33, "$PLL_OVRCLK", "float", default=0, **opt),
            ),
            attributes=("port_status_notif_cb",),
            **fixed,
        ),
        TableSpec(
            PORT_STAT_TABLE_ID,
            "$PORT_STAT",
            "PortStat",
            Kind.PORT_STAT,
            max_ports,
            (dev_port,),
            tuple(FieldSpec(i, n, "uint64", **opt) for i, n in enumerate(PORT_STAT_SERVED, start=1)),
            attributes=("poll_intvl_ms",),
            **fixed,
        ),
        TableSpec(
            PORT_HDL_INFO_TABLE_ID,
            "$PORT_HDL_INFO",
            "PortHdlInfo",
            Kind.PORT_HDL_INFO,
            max_ports,
            (
                FieldSpec(1, "$CONN_ID", "uint32", match=exact, annotations=((PORT_KEY_NOTE, "port_hdl_conn_id"),)),
                FieldSpec(2, "$CHNL_ID", "uint32", match=exact, annotations=((PORT_KEY_NOTE, "port_hdl_chnl_id"),)),
            ),
            (FieldSpec(1, "$DEV_PORT", "uint32", **ro),),
            **fixed,
        ),
        TableSpec(
            PORT_FP_IDX_INFO_TABLE_ID,
            "$PORT_FP_IDX_INFO",
            "PortFpIdxInfo",
            Kind.PORT_FP_IDX_INFO,
            max_ports,
            (FieldSpec(1, "$FP_IDX", "uint32", match=exact),),
            (FieldSpec(1, "$DEV_PORT", "uint32", **ro),),
            **fixed,
        ),
        TableSpec(
            PORT_STR_INFO_TABLE_ID,
            "$PORT_STR_INFO",
            "PortStrInfo",
            Kind.PORT_STR_INFO,
            max_ports,
            (FieldSpec(1, "$PORT_NAME", "string", match=exact, annotations=((PORT_KEY_NOTE, "port_name"),)),),
            (FieldSpec(1, "$DEV_PORT", "uint32", **ro),),
            **fixed,
        ),
        TableSpec(
            PRE_MGID_TABLE_ID,
            "$pre.mgid",
            "PreMgid",
            Kind.PRE_MGID,
            65536,
            (FieldSpec(1, "$MGID", "uint16", match=exact),),
            (
                FieldSpec(1, "$MULTICAST_NODE_ID", "uint32", **rep),
                FieldSpec(2, "$MULTICAST_NODE_L1_XID_VALID", "bool", **rep),
                FieldSpec(3, "$MULTICAST_NODE_L1_XID", "uint16", **rep),
                FieldSpec(4, "$MULTICAST_ECMP_ID", "uint32", **rep),
                FieldSpec(5, "$MULTICAST_ECMP_L1_XID_VALID", "bool", **rep),
                FieldSpec(6, "$MULTICAST_ECMP_L1_XID", "uint16", **rep),
            ),
            attributes=("pre_device_config",),
            **fixed,
        ),
        TableSpec(
            PRE_NODE_TABLE_ID,
            "$pre.node",
            "PreNode",
            Kind.PRE_NODE,
            65536,
            (FieldSpec(1, "$MULTICAST_NODE_ID", "uint32", match=exact),),
            (
                FieldSpec(1, "$MULTICAST_RID", "uint16"),
                FieldSpec(2, "$MULTICAST_LAG_ID", "uint8", **rep),
                FieldSpec(3, "$DEV_PORT", "uint32", **rep),
            ),
            **fixed,
        ),
    )


def layout(program: Program) -> Layout:
    """Assign BF-RT ids to a program (declaration order) and add the fixed tables.

    Besides the program's own tables, registers and counters, bf-p4c's output has the
    ingress parser's `$PORT_METADATA` and the `pipe.snapshot.*` tables: served too."""
    action_ids: dict[str, int] = {}
    for t in program.tables:
        for a in t.actions:
            action_ids.setdefault(a.name, _ACTION_BASE + len(action_ids) + 1)
    p4 = [_match_table(t, _TABLE_BASE + i, action_ids) for i, t in enumerate(program.tables, start=1)]
    p4 += [_register_table(r, _REGISTER_BASE + i) for i, r in enumerate(program.registers, start=1)]
    p4 += [_counter_table(c, _COUNTER_BASE + i) for i, c in enumerate(program.counters, start=1)]
    p4.append(_port_metadata_table(program, _PARSER_BASE + 1))
    snapshot_ids = iter(range(_SNAPSHOT_BASE + 1, _SNAPSHOT_BASE + 100))
    p4 += _snapshot_tables(lambda: next(snapshot_ids))
    from .fixed_tables import fixed_function_tables  # (it builds on this module's types)

    return Layout(program, tuple(p4), fixed_tables() + fixed_function_tables())
