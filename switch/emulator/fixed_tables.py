"""The fixed-function tables of a Tofino 1 that the emulator keeps but does not act on.

bf_switchd serves, besides a program's tables, the device's fixed-function tables (the
SDE's `bf_rt_*_tf1.json`). schema.py declares the ones rainmaker drives ($PORT,
$PORT_STAT, $pre.mgid, $pre.node, the port lookups); this module declares the others a
script written for bf_switchd may touch: the other PRE tables, $mirror.cfg, the device
configuration, a TM shaping and a TM counter table, and the packet generator's
applications. Their names, ids, fields, types and defaults are bf_switchd's; each keeps
the operations its driver implements (`Behaviour.ops`) and refuses the others as the
driver does (UNIMPLEMENTED).

The emulator stores what is written and reads it back, but forwards as before: it
mirrors nothing, generates no packets, shapes no queue, and replicates only through
$pre.mgid / $pre.node (docs/bfruntime.md, "Fixed tables the emulator only stores").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .schema import PORT_KEY_NOTE, ActionSpec, FieldSpec, Kind, Match, TableSpec
from .tables import AlreadyExists, InvalidArgument, NotFound, Unsupported

if TYPE_CHECKING:
    from .tables import TableStore

# Driver operations (bf_rt table APIs) a fixed table may implement.
ADD, MOD, DEL, MOD_INC, CLEAR, DEFAULT = "add", "mod", "del", "mod_inc", "clear", "default"

PGS, PG_QUEUES = 18, 128  # Tofino 1 TM: port groups per pipe, queues per port group (2304 entries)
PKTGEN_APPS = 8
PORTS_PER_PIPE = 72  # Tofino 1 dev_ports per pipe (pipe << 7 | 0..71)


@dataclass(frozen=True)
class Behaviour:
    """What a fixed table does: the driver operations it implements; `population`, for a
    table whose every key always exists (its entries are modified, never added); the
    action an entry starts with; fields only zero may be written to."""

    ops: frozenset[str]
    population: Callable[[TableStore], list[tuple]] | None = None
    contains: Callable[[TableStore, tuple], bool] | None = None
    default_action: str | None = None
    clear_only: frozenset[str] = frozenset()
    derived: Callable[[TableStore, tuple], Mapping[str, Any]] = field(default=lambda store, key: {})


@dataclass
class _Entry:
    action: str | None
    values: dict[str, Any]


class FixedTable:
    """One fixed table's entries: key tuple -> action and field values by name."""

    def __init__(self, spec: TableSpec, behaviour: Behaviour, store: TableStore):
        self.spec, self.b, self.store = spec, behaviour, store
        self.entries: dict[tuple, _Entry] = {}

    # -- reading

    def keys(self) -> list[tuple]:
        if self.b.population is not None:
            return self.b.population(self.store)
        return sorted(self.entries)

    def read(self, key: tuple) -> tuple[str | None, list[tuple[FieldSpec, Any]]]:
        """(action, [(field, value)]) of an entry; NOT_FOUND if there is none."""
        e = self._get(key)
        values = {**e.values, **self.b.derived(self.store, key)}
        fields = [*self._action_params(e.action), *self.spec.data]
        return e.action, [(f, values[f.name]) for f in fields if values.get(f.name) is not None]

    def _get(self, key: tuple) -> _Entry:
        e = self.entries.get(key)
        if e is not None:
            return e
        if self.b.population is not None and self._exists(key):
            return self._fresh(self.b.default_action)
        raise NotFound(f"no entry {self._show(key)}", table=self.spec.name)

    def _exists(self, key: tuple) -> bool:
        contains = self.b.contains
        return contains(self.store, key) if contains is not None else key in self.b.population(self.store)

    def _fresh(self, action: str | None) -> _Entry:
        fields = [*self._action_params(action), *self.spec.data]
        return _Entry(action, {f.name: _default(f) for f in fields})

    def _action_params(self, action: str | None) -> tuple[FieldSpec, ...]:
        return self.spec.action_by_name[action].params if action else ()

    # -- writing (each returns an undo)

    def write(self, op: str, key: tuple, action: str | None, values: Mapping[str, Any], mod_del: bool = False):
        if op not in self.b.ops:
            raise Unsupported(f"the driver implements no {_OP_NAMES[op]} for this table", table=self.spec.name)
        for name in self.b.clear_only & set(values):
            if values[name]:
                raise InvalidArgument(f"{name} can only be cleared (written 0)", table=self.spec.name)
        if op == DEFAULT:  # the table's one entry, set as its default entry
            op = MOD
        had = key in self.entries
        old = self.entries.get(key)
        if op == ADD:
            if had:
                raise AlreadyExists(f"entry {self._show(key)} exists", table=self.spec.name)
            action = action or self.b.default_action
            if self.spec.actions and action is None:
                raise InvalidArgument("the entry needs an action", table=self.spec.name)
            allowed = {f.name for f in (*self._action_params(action), *self.spec.data)}
            missing = [f.name for f in self.spec.data if f.mandatory and f.name not in values]
            if missing:
                raise InvalidArgument(f"data field(s) {', '.join(missing)} missing", table=self.spec.name)
            entry = self._fresh(action)
        else:
            current = self._get(key)
            entry = _Entry(current.action, dict(current.values))
            if op == DEL:
                del self.entries[key]
                return lambda: self.entries.__setitem__(key, old)
            if action and action != entry.action:  # a new action starts from its defaults
                entry = _Entry(
                    action, {**self._fresh(action).values, **{f.name: entry.values[f.name] for f in self.spec.data}}
                )
            allowed = {f.name for f in (*self._action_params(entry.action), *self.spec.data)}
        stray = sorted(set(values) - allowed)
        if stray:
            raise InvalidArgument(f"field(s) {', '.join(stray)} are not in action {entry.action}", table=self.spec.name)
        if op == MOD_INC:
            for name, v in values.items():
                if not isinstance(v, list):
                    raise InvalidArgument(f"MODIFY_INC needs a repeated field, not {name}", table=self.spec.name)
                have = entry.values.get(name) or []
                if mod_del:
                    missing = [x for x in v if x not in have]
                    if missing:
                        raise NotFound(f"{name}: {missing} are not members", table=self.spec.name)
                    entry.values[name] = [x for x in have if x not in v]
                else:
                    entry.values[name] = have + v
        else:
            entry.values.update(values)
        self.entries[key] = entry

        def undo() -> None:
            if had:
                self.entries[key] = old
            else:
                self.entries.pop(key, None)

        return undo

    def clear(self):
        """A keyless DELETE: every entry gone (a table of fixed population: back to its defaults)."""
        if CLEAR not in self.b.ops:
            raise Unsupported("the driver implements no table clear for this table", table=self.spec.name)
        old, self.entries = self.entries, {}
        return lambda: setattr(self, "entries", old)

    def reset_default(self):
        """DELETE (or RESET) of the default entry: its writable fields back to their defaults."""
        if DEFAULT not in self.b.ops:
            raise Unsupported("this table has no default entry", table=self.spec.name)
        old, self.entries = self.entries, {}
        return lambda: setattr(self, "entries", old)

    def reset(self) -> None:
        self.entries = {}

    def _show(self, key: tuple) -> str:
        return ", ".join(f"{f.name}={v}" for f, v in zip(self.spec.keys, key))


_OP_NAMES = {
    ADD: "add (INSERT)",
    MOD: "modify (MODIFY)",
    DEL: "delete (DELETE)",
    MOD_INC: "incremental modify (MODIFY_INC)",
    CLEAR: "clear (DELETE without a key)",
    DEFAULT: "default entry",
}


def _default(f: FieldSpec) -> Any:
    """A field's initial value: its JSON default, else the type's zero."""
    d = f.type_json().get("default_value")
    if f.repeated:
        return []
    if d is not None:
        return int(d) if f.type == "int32" else d
    return {"bool": False, "string": None, "float": 0.0}.get(f.type, 0)


# ---------------------------------------------------------------- the declarations

_opt = dict(mandatory=False)
_rep = dict(mandatory=False, repeated=True)
_ro = dict(mandatory=False, read_only=True, default=None)
_DEV_PORT_NOTE = ((PORT_KEY_NOTE, "dev_port"),)
_fixed = dict(fixed=True, const_default=None)


def _key(id: int, name: str, type: str, **kw) -> FieldSpec:
    return FieldSpec(id, name, type, match=Match.EXACT, **kw)


def _u32(id: int, name: str, **kw) -> FieldSpec:
    return FieldSpec(id, name, "uint32", default=None, **{**_opt, **kw})


def _dev_config(store: TableStore, key: tuple) -> dict[str, Any]:
    """tf1.dev.device_configuration's read-only fields, from the emulator's shape: its
    pipes, the ports named on its front panel, Tofino 1's CPU and recirculation ports."""
    pipes = store.pipes
    named = sorted(store.ports.names)
    return {
        "sku": "UNKNOWN",
        "num_pipes": pipes,
        "num_stages": 12,
        "num_max_ports": pipes * PORTS_PER_PIPE,
        "num_front_ports": len(named),
        "pcie_cpu_port": 320 if pipes > 2 else 192,
        "eth_cpu_port_list": [64, 65, 66, 67],
        "internal_port_list": [],
        "external_port_list": named,
        "recirc_port_list": [p << 7 | i for p in range(pipes) for i in range(68, 72)],
        "intr_based_link_monitoring": False,
    }


def _eg_port_counters(store: TableStore, key: tuple) -> dict[str, Any]:
    return {"usage_cells": 0}  # the emulator's TM holds no cells


def fixed_function_tables() -> tuple[TableSpec, ...]:
    """The fixed tables of this module, as bf_switchd's JSON declares them (Tofino 1)."""
    ecmp = TableSpec(
        0xFF020003, "$pre.ecmp", "PreEcmp", Kind.FIXED, 1 << 24,
        (_key(1, "$MULTICAST_ECMP_ID", "uint32"),),
        (FieldSpec(1, "$MULTICAST_NODE_ID", "uint32", repeated=True),),
        **_fixed,
    )  # fmt: skip
    lag = TableSpec(
        0xFF020004, "$pre.lag", "PreLag", Kind.FIXED, 255,
        (_key(1, "$MULTICAST_LAG_ID", "uint8"),),
        (
            FieldSpec(1, "$DEV_PORT", "uint32", annotations=_DEV_PORT_NOTE, default=None, **_rep),
            FieldSpec(2, "$MULTICAST_LAG_REMOTE_MSB_COUNT", "uint32", **_opt),
            FieldSpec(3, "$MULTICAST_LAG_REMOTE_LSB_COUNT", "uint32", **_opt),
        ),
        **_fixed,
    )  # fmt: skip
    prune = TableSpec(
        0xFF020005, "$pre.prune", "PrePrune", Kind.FIXED, 288,
        (_key(1, "$MULTICAST_L2_XID", "uint16"),),
        (FieldSpec(1, "$DEV_PORT", "uint32", repeated=True, annotations=_DEV_PORT_NOTE),),
        **_fixed,
    )  # fmt: skip
    port = TableSpec(
        0xFF020006, "$pre.port", "PrePort", Kind.FIXED, 288,
        (_key(1, "$DEV_PORT", "uint32", annotations=_DEV_PORT_NOTE),),
        (
            _u32(1, "$MULTICAST_BACKUP_PORT", annotations=_DEV_PORT_NOTE),
            FieldSpec(2, "$MULTICAST_FORWARD_STATE", "bool", **_opt),
            FieldSpec(3, "$MULTICAST_CLEAR_FAST_FAILOVER", "bool", **_opt),
            FieldSpec(4, "$COPY_TO_CPU_PORT_ENABLE", "bool", **_opt),
        ),
        **_fixed,
    )  # fmt: skip
    mirror = TableSpec(
        0xFF040001, "$mirror.cfg", "MirrorCfg", Kind.FIXED, 1024,
        (_key(1, "$sid", "uint16"),),
        (
            FieldSpec(5, "$session_enable", "bool", default=None, **_opt),
            FieldSpec(6, "$direction", "string", choices=("INGRESS", "EGRESS", "BOTH"), **_opt),
            _u32(7, "$ucast_egress_port"),
            FieldSpec(8, "$ucast_egress_port_valid", "bool", default=None, **_opt),
            _u32(9, "$egress_port_queue"),
            _u32(10, "$ingress_cos"),
            FieldSpec(11, "$packet_color", "string", choices=("GREEN", "YELLOW", "RED"), **_opt),
            _u32(12, "$level1_mcast_hash"),
            _u32(13, "$level2_mcast_hash"),
            FieldSpec(14, "$mcast_grp_a", "uint16", default=None, **_opt),
            FieldSpec(15, "$mcast_grp_a_valid", "bool", default=None, **_opt),
            FieldSpec(16, "$mcast_grp_b", "uint16", default=None, **_opt),
            FieldSpec(17, "$mcast_grp_b_valid", "bool", default=None, **_opt),
            FieldSpec(18, "$mcast_l1_xid", "uint16", default=None, **_opt),
            FieldSpec(19, "$mcast_l2_xid", "uint16", default=None, **_opt),
            FieldSpec(20, "$mcast_rid", "uint16", default=None, **_opt),
            _u32(21, "$icos_for_copy_to_cpu"),
            FieldSpec(22, "$copy_to_cpu", "bool", default=None, **_opt),
            FieldSpec(23, "$max_pkt_len", "uint16", default=None, **_opt),
        ),
        actions=(
            ActionSpec(1, "$coalescing", "", (
                FieldSpec(1, "$internal_header", "bytes", width=128, **_opt),
                _u32(2, "$internal_header_length"),
                _u32(3, "$timeout_usec"),
                _u32(4, "$extract_len"),
            ), style="wrapped"),
            ActionSpec(2, "$normal", "", (), style="wrapped"),
        ),
        **_fixed,
    )  # fmt: skip
    sku = ("UNKNOWN", "BFN-T10-064Q", "BFN-T10-032Q", "BFN-T10-032D", "BFN-T10-032D-020", "BFN-T10-032D-018",
           "BFN-T10-032D-012")  # fmt: skip
    dev = TableSpec(
        0xFF060001, "tf1.dev.device_configuration", "DevConfigure", Kind.FIXED, 1, (),
        (
            FieldSpec(1, "sku", "string", choices=sku, **{**_ro, "default": "UNKNOWN"}),
            *(FieldSpec(i, n, "uint32", **_ro) for i, n in
              ((2, "num_pipes"), (3, "num_stages"), (4, "num_max_ports"), (5, "num_front_ports"), (6, "pcie_cpu_port"))),
            *(FieldSpec(i, n, "uint32", repeated=True, **_ro) for i, n in
              ((7, "eth_cpu_port_list"), (8, "internal_port_list"), (9, "external_port_list"), (10, "recirc_port_list"))),
            FieldSpec(11, "intr_based_link_monitoring", "bool", **_ro),
            FieldSpec(12, "flow_learn_intr_mode", "bool", default=False, **_opt),
            FieldSpec(13, "lrt_dr_timeout_usec", "uint32", **_opt),
            FieldSpec(14, "flow_learn_timeout_usec", "uint32", default=500, **_opt),
            FieldSpec(15, "inactive_node_delete", "bool", default=False, **_opt),
            FieldSpec(16, "selector_member_order", "bool", default=False, **_opt),
        ),
        **_fixed,
    )  # fmt: skip
    shaping = TableSpec(
        0xFF050026, "tf1.tm.queue.sched_shaping", "TmQueueSchedShaping", Kind.FIXED, PGS * PG_QUEUES,
        (_key(1, "pg_id", "uint8", default=None), _key(2, "pg_queue", "uint8", default=None)),
        (
            FieldSpec(1, "unit", "string", choices=("PPS", "BPS"), **_opt),
            FieldSpec(2, "provisioning", "string", choices=("UPPER", "LOWER", "MIN_ERROR"), **_opt),
            *(_u32(i, n) for i, n in enumerate(("min_rate", "min_burst_size", "max_rate", "max_burst_size"), 3)),
        ),
        **_fixed,
    )  # fmt: skip
    eg_port = TableSpec(
        0xFF050042, "tf1.tm.counter.eg_port", "TmCounterEgPort", Kind.FIXED, 288,
        (_key(1, "dev_port", "uint32", annotations=_DEV_PORT_NOTE, default=None),),
        (
            FieldSpec(1, "drop_count_packets", "uint64", default=None, **_opt),
            FieldSpec(2, "usage_cells", "uint64", **_ro),
            FieldSpec(3, "watermark_cells", "uint64", default=None, annotations=(("clear_only", "true"),), **_opt),
        ),
        **_fixed,
    )  # fmt: skip
    timer = _u32(1, "timer_nanosec")
    pktgen = TableSpec(
        0xFF030002, "tf1.pktgen.app_cfg", "PktgenAppCfg", Kind.FIXED, PKTGEN_APPS,
        (_key(1, "app_id", "uint32", mandatory=False, default=None),),
        (
            FieldSpec(12, "app_enable", "bool", default=None, **_opt),
            FieldSpec(13, "pkt_len", "uint16", default=None, **_opt),
            FieldSpec(14, "pkt_buffer_offset", "uint16", default=None, **_opt),
            _u32(15, "pipe_local_source_port", annotations=_DEV_PORT_NOTE),
            FieldSpec(16, "increment_source_port", "bool", default=None, **_opt),
            FieldSpec(17, "batch_count_cfg", "uint16", default=None, **_opt),
            FieldSpec(18, "packets_per_batch_cfg", "uint16", default=None, **_opt),
            *(_u32(i, n) for i, n in ((19, "ibg"), (20, "ibg_jitter"), (21, "ipg"), (22, "ipg_jitter"))),
            *(FieldSpec(i, n, "uint64", default=None, **_opt) for i, n in
              ((23, "batch_counter"), (24, "pkt_counter"), (25, "trigger_counter"))),
        ),
        actions=(
            ActionSpec(1, "trigger_timer_one_shot", "", (timer,), style="flat"),
            ActionSpec(2, "trigger_timer_periodic", "", (timer,), style="flat"),
            ActionSpec(3, "trigger_port_down", "", (), style="flat"),
            ActionSpec(4, "trigger_recirc_pattern", "", (_u32(4, "pattern_value"), _u32(5, "pattern_mask")),
                       style="flat"),
        ),
        **_fixed,
    )  # fmt: skip
    return (ecmp, lag, prune, port, mirror, dev, shaping, eg_port, pktgen)


# The driver operations of each (bf_rt_pre/mirror/dev/tm/pktgen *_table_impl and the
# tables' supported_apis in the SDE's JSON).
BEHAVIOURS: dict[str, Behaviour] = {
    "$pre.ecmp": Behaviour(frozenset({ADD, MOD, DEL, MOD_INC})),
    "$pre.lag": Behaviour(frozenset({ADD, MOD})),
    "$pre.prune": Behaviour(frozenset({ADD, MOD, DEL})),
    "$pre.port": Behaviour(frozenset({ADD, MOD, DEL})),
    "$mirror.cfg": Behaviour(frozenset({ADD, MOD, DEL, CLEAR}), default_action="$normal"),
    "tf1.dev.device_configuration": Behaviour(frozenset({DEFAULT}), population=lambda store: [()], derived=_dev_config),
    "tf1.tm.queue.sched_shaping": Behaviour(
        frozenset({MOD, CLEAR}),
        population=lambda store: [(g, q) for g in range(PGS) for q in range(PG_QUEUES)],
        contains=lambda store, key: key[0] < PGS and key[1] < PG_QUEUES,
    ),
    "tf1.tm.counter.eg_port": Behaviour(
        frozenset({MOD, CLEAR}),
        population=lambda store: [(c.dev_port,) for c in store.ports.all()],
        contains=lambda store, key: store.ports.get(key[0]) is not None,
        clear_only=frozenset({"watermark_cells"}),
        derived=_eg_port_counters,
    ),
    "tf1.pktgen.app_cfg": Behaviour(
        frozenset({MOD, CLEAR}),
        population=lambda store: [(a,) for a in range(PKTGEN_APPS)],
        contains=lambda store, key: key[0] < PKTGEN_APPS,
        default_action="trigger_timer_one_shot",
    ),
}


def fixed_tables_of(store: TableStore, specs: Iterable[TableSpec]) -> dict[str, FixedTable]:
    return {s.name: FixedTable(s, BEHAVIOURS[s.name], store) for s in specs if s.kind is Kind.FIXED}
