"""Runtime state of a program: the table store the data plane looks up.

One `TableStore` per running program holds its match-action tables, registers,
counters, the multicast engine (PRE) and the port table. Two kinds of users:

- the data plane (one thread, per packet): `store.table("forward").lookup(dst)`,
  `store.register("balance")[i]`, `store.counter("events").count(i, nbytes)`,
  `store.mcast_group(mgid)`, `store.ports.is_up(p)`. These never take a lock;
- the control plane (the BFRuntime server's threads): `add`, `modify`, `delete`,
  `set_default`, `write`, ... These take `store.lock` (one RLock, writers only; the
  server also holds it across a whole Write batch).

Readers stay correct without locking because writers never change a structure a
reader may be walking: an exact table is a dict whose single-key get/set are atomic;
a TCAM table's ordered rule list and an LPM table's prefix-length list are rebuilt
and swapped in with one attribute store (copy-on-write); entries are immutable.
Register and counter cells are plain list slots: a control-plane write racing a
data-plane read-modify-write of the same cell can be lost, as it could on a switch.

Usage from a data plane:

    store = TableStore(PROGRAM)                   # pipes=1 unless told otherwise
    fwd = store.table("forward")                  # unique dot-suffix of the full name
    action, params = fwd.lookup(dst_mac)          # ("set_egress", {"port": 5}) or the default
    if action == "set_egress":
        out_port = params["port"]
    balance = store.register("balance")           # signed if declared so
    balance[slice_id] += 1                        # wraps to the register width
    for rid, ports in store.mcast_group(mgid):    # () for an unknown group
        ...

Errors are `TableError`s carrying the google.rpc canonical `code` the BFRuntime
server answers with (ALREADY_EXISTS, NOT_FOUND, RESOURCE_EXHAUSTED for a full table...).
"""

from __future__ import annotations

import bisect
import difflib
import enum
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from switch.errors import SwitchError

from . import schema
from .schema import Match

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- errors


class Code(enum.IntEnum):
    """google.rpc.Code values (what a BFRuntime Error's canonical_code holds)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13


class TableError(SwitchError):
    """A control-plane operation on the store was refused. `code` is a `Code`."""

    code = Code.INVALID_ARGUMENT

    def __init__(self, message: str, *, table: str | None = None, fix: str | None = None):
        self.table = table
        super().__init__(f"{table}: {message}" if table else message, fix=fix)


class InvalidArgument(TableError):
    code = Code.INVALID_ARGUMENT


class NotFound(TableError):
    code = Code.NOT_FOUND


class AlreadyExists(TableError):
    code = Code.ALREADY_EXISTS


class TableFull(TableError):
    code = Code.RESOURCE_EXHAUSTED


class OutOfRange(TableError):
    """An index or pipe outside a register or counter. bf_switchd answers these
    INVALID_ARGUMENT (the driver's BF_INVALID_ARG), so the emulator does too."""

    code = Code.INVALID_ARGUMENT


class FailedPrecondition(TableError):
    code = Code.FAILED_PRECONDITION


class Unsupported(TableError):
    code = Code.UNIMPLEMENTED


def _check_uint(value: Any, width: int, what: str, table: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value >> width:
        raise InvalidArgument(f"{what}: {value!r} is not an unsigned {width}-bit integer", table=table)
    return value


# ---------------------------------------------------------------- match-action tables


class ActionCall(NamedTuple):
    """What a lookup returns: the action's short name and its parameters (do not mutate)."""

    action: str
    params: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Entry:
    """One installed entry. `key` is canonical (see `MatchTable`); `action` the full name."""

    key: tuple
    priority: int | None
    action: str
    params: Mapping[str, int]
    call: ActionCall
    seq: int


class MatchTable:
    """A match-action table.

    Keys are tuples in the declared key order, one item per field:

    | match    | canonical item                 | also accepted on input          |
    |----------|--------------------------------|---------------------------------|
    | Exact    | value                          |                                 |
    | Ternary  | (value & mask, mask)           | value (all ones), None (any)    |
    | LPM      | (value & prefix, prefix_len)   | value (full length), None (any) |
    | Range    | (low, high)                    | value (low == high), None (any) |
    | Optional | (value, True) or (0, False)    | value, None (any)               |

    A single-field key may be given bare, and any key as {field name: item}. TCAM tables
    (any Ternary, Range or Optional field) also need a `priority`: as in BF-RT, the
    lowest `$MATCH_PRIORITY` wins; equal priorities go to the older entry.

    Lookups take the packet's field values: `lookup(v1, v2, ...)` -> `ActionCall`, the
    default action on a miss; `find(...)` -> the matching `Entry` or None.
    """

    def __init__(self, decl: schema.Table, lock: threading.RLock):
        self.decl = decl
        self.name = decl.name
        self.size = decl.size
        self.keys = decl.keys
        self.has_priority = decl.has_priority
        self._lock = lock
        self._key_names = schema.aliases(k.name for k in decl.keys)
        self._actions = {n: a for a in decl.actions for n in (a.name, a.short)}
        self._seq = itertools.count()
        self._entries: dict[tuple, Entry] = {}  # identity key -> entry (the lookup dict of exact tables)
        matches = {k.match for k in decl.keys}
        self._mode = "exact" if matches <= {Match.EXACT} else "tcam" if self.has_priority else "lpm"
        if self._mode == "exact":
            self._find = self._entries.get
        elif self._mode == "lpm":  # one LPM field, the others exact: a dict per prefix length
            self._lpm_pos = next(i for i, k in enumerate(decl.keys) if k.match is Match.LPM)
            self._lpm: tuple[tuple[int, int, dict], ...] = ()  # (prefix_len, mask, {probe: Entry}), longest first
            self._find = self._find_lpm if len(decl.keys) > 1 else self._find_lpm_only
        else:  # TCAM: rules in priority order; range-free fields are packed into one integer
            self._packed = tuple(
                (i, k.width, (1 << k.width) - 1) for i, k in enumerate(decl.keys) if k.match is not Match.RANGE
            )
            self._rules: list[tuple[int, int, tuple, Entry]] = []  # (mask, value, ranges, entry)
            self._find = self._find_tcam
        self._initial_default = (decl.action(decl.default_action).name, dict(decl.default_params))
        self._set_default(*self._initial_default)

    def __repr__(self) -> str:
        return f"<MatchTable {self.name} {len(self._entries)}/{self.size}>"

    def __len__(self) -> int:
        return len(self._entries)

    # -------------------------------------------------------- data plane

    def lookup(self, *values: int) -> ActionCall:
        """The action for these key values: the matching entry's, or the default action."""
        entry = self._find(values)
        return self._default if entry is None else entry.call

    def find(self, *values: int) -> Entry | None:
        """The matching entry, or None on a miss."""
        return self._find(values)

    @property
    def default(self) -> ActionCall:
        return self._default

    @property
    def finder(self) -> Callable[[tuple], Entry | None]:
        """The fastest lookup for a data plane to bind once: `finder((v1, v2, ...))` ->
        the matching Entry or None (the key values as one tuple). It stays valid for
        the table's life (control-plane changes are published behind it)."""
        return self._find

    def _find_lpm_only(self, values: tuple) -> Entry | None:  # the key is one LPM field: probes are ints
        (value,) = values
        for _plen, mask, index in self._lpm:
            entry = index.get(value & mask)
            if entry is not None:
                return entry
        return None

    def _find_lpm(self, values: tuple) -> Entry | None:
        pos = self._lpm_pos
        head, value, tail = values[:pos], values[pos], values[pos + 1 :]
        for _plen, mask, index in self._lpm:
            entry = index.get(head + (value & mask,) + tail)
            if entry is not None:
                return entry
        return None

    def _find_tcam(self, values: tuple) -> Entry | None:
        packed = 0
        for pos, width, full in self._packed:
            packed = (packed << width) | (values[pos] & full)
        for mask, value, ranges, entry in self._rules:
            if packed & mask == value and (not ranges or all(lo <= values[p] <= hi for p, lo, hi in ranges)):
                return entry
        return None

    @property
    def rules(self) -> list[tuple[int, int, tuple, Entry]]:
        """A TCAM table's rules in lookup order, (mask, value, ((pos, low, high), ...), entry):
        a new list after every change, so a data plane may index it once per list."""
        return self._rules

    # -------------------------------------------------------- control plane

    def add(
        self, key: Any, action: str, params: Mapping[str, int] | None = None, *, priority: int | None = None
    ) -> Entry:
        """Install an entry; AlreadyExists if its key is installed, TableFull at `size`."""
        with self._lock:
            canon, ident = self._identity(key, priority)
            if ident in self._entries:
                raise AlreadyExists(f"an entry with key {self._show(canon, priority)} already exists", table=self.name)
            if len(self._entries) >= self.size:
                raise TableFull(
                    f"table is full ({self.size} entries)",
                    table=self.name,
                    fix="delete entries or declare a larger size",
                )
            entry = self._entry(canon, priority, action, params, next(self._seq))
            self._publish(ident, entry, None)
            return entry

    def modify(
        self, key: Any, action: str, params: Mapping[str, int] | None = None, *, priority: int | None = None
    ) -> Entry:
        """Change an installed entry's action; returns the entry it replaced."""
        with self._lock:
            canon, ident = self._identity(key, priority)
            old = self._get(canon, ident, priority)
            self._publish(ident, self._entry(canon, priority, action, params, old.seq), old)
            return old

    def delete(self, key: Any, *, priority: int | None = None) -> Entry:
        """Remove an entry; returns it."""
        with self._lock:
            canon, ident = self._identity(key, priority)
            old = self._get(canon, ident, priority)
            self._unpublish(ident, old)
            return old

    def get(self, key: Any, *, priority: int | None = None) -> Entry:
        """The entry installed with exactly this key (NotFound otherwise)."""
        canon, ident = self._identity(key, priority)
        return self._get(canon, ident, priority)

    def entries(self) -> list[Entry]:
        """All entries, in installation order."""
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> list[Entry]:
        """Remove every entry (the default action stays); returns them."""
        with self._lock:
            old = list(self._entries.values())
            self._entries.clear()
            if self._mode == "lpm":
                self._lpm = ()
            elif self._mode == "tcam":
                self._rules = []
            return old

    def default_entry(self) -> tuple[str, dict[str, int]]:
        """The default action's full name and parameters."""
        return self._default_entry

    def set_default(self, action: str, params: Mapping[str, int] | None = None) -> tuple[str, dict[str, int]]:
        """Change the default action; returns the previous (action, params)."""
        with self._lock:
            if self.decl.const_default:
                raise InvalidArgument("the default action is const", table=self.name)
            old = self._default_entry
            self._set_default(action, params)
            return old

    def restore_default(self, action: str, params: Mapping[str, int]) -> None:
        """Put back a previous default even if const (rolls back a failed batch)."""
        with self._lock:
            self._set_default(action, params)

    def reset_default(self) -> tuple[str, dict[str, int]]:
        """Back to the program's default action; returns the previous (action, params)."""
        with self._lock:
            old = self._default_entry
            self._set_default(*self._initial_default)
            return old

    # -------------------------------------------------------- internals

    def _set_default(self, action: str, params: Mapping[str, int] | None) -> None:
        decl, checked = self._action(action, params, default=True)
        self._default_entry = (decl.name, checked)
        self._default = ActionCall(decl.short, checked)

    def _get(self, canon: tuple, ident: tuple, priority: int | None) -> Entry:
        entry = self._entries.get(ident)
        if entry is None:
            raise NotFound(f"no entry with key {self._show(canon, priority)}", table=self.name)
        return entry

    def _show(self, canon: tuple, priority: int | None) -> str:
        text = ", ".join(f"{k.name}={v!r}" for k, v in zip(self.keys, canon))
        return "{" + text + (f", priority={priority}" if self.has_priority else "") + "}"

    def _action(self, name: str, params: Mapping[str, int] | None, *, default: bool) -> tuple[schema.Action, dict]:
        decl = self._actions.get(name)
        if decl is None:
            raise InvalidArgument(
                f"no action {name!r}; actions: {', '.join(a.name for a in self.decl.actions)}", table=self.name
            )
        if default and decl.scope == "TableOnly":
            raise InvalidArgument(f"action {decl.name} cannot be the default action", table=self.name)
        if not default and decl.scope == "DefaultOnly":
            raise InvalidArgument(f"action {decl.name} can only be the default action", table=self.name)
        params = dict(params or {})
        wanted = {p.name for p in decl.params}
        if set(params) != wanted:
            missing, extra = sorted(wanted - set(params)), sorted(set(params) - wanted)
            raise InvalidArgument(
                f"action {decl.name}: "
                + "; ".join(
                    s
                    for s in (missing and f"missing parameters {missing}", extra and f"unknown parameters {extra}")
                    if s
                ),
                table=self.name,
            )
        for p in decl.params:
            _check_uint(params[p.name], p.width, f"action {decl.name} parameter {p.name}", self.name)
        return decl, params

    def _entry(self, canon: tuple, priority: int | None, action: str, params, seq: int) -> Entry:
        decl, checked = self._action(action, params, default=False)
        return Entry(canon, priority, decl.name, checked, ActionCall(decl.short, checked), seq)

    def _identity(self, key: Any, priority: int | None) -> tuple[tuple, tuple]:
        canon = self._canon(key)
        if self.has_priority:
            if priority is None:
                raise InvalidArgument("a TCAM table needs $MATCH_PRIORITY", table=self.name)
            _check_uint(priority, 32, "$MATCH_PRIORITY", self.name)
            return canon, canon + (priority,)
        if priority is not None:
            raise InvalidArgument("only TCAM tables have $MATCH_PRIORITY", table=self.name)
        return canon, canon

    def _canon(self, key: Any) -> tuple:
        if isinstance(key, Mapping):
            by_name: dict[str, Any] = {}
            for name, item in key.items():
                full = self._key_names.get(name)
                if full is None:
                    raise InvalidArgument(
                        f"no key field {name!r}; fields: {[k.name for k in self.keys]}", table=self.name
                    )
                by_name[full] = item
            key = tuple(by_name.get(k.name) for k in self.keys)
        elif len(self.keys) == 1:  # one field: the key is its item, bare or in a 1-tuple
            key = tuple(key) if isinstance(key, (tuple, list)) and len(key) == 1 else (key,)
        elif not isinstance(key, (tuple, list)):
            key = (key,)
        if len(key) != len(self.keys):
            raise InvalidArgument(
                f"key has {len(key)} fields, the table has {len(self.keys)}: {[k.name for k in self.keys]}",
                table=self.name,
            )
        return tuple(_canon_item(k, item, self.name) for k, item in zip(self.keys, key))

    def _publish(self, ident: tuple, entry: Entry, old: Entry | None) -> None:
        """Make `entry` visible to lookups, replacing `old` (same identity) if given."""
        self._entries[ident] = entry
        if self._mode == "lpm":
            plen, probe = self._lpm_probe(entry.key)
            for p, _mask, index in self._lpm:
                if p == plen:
                    index[probe] = entry
                    break
            else:
                width = self.keys[self._lpm_pos].width
                mask = ((1 << width) - 1) ^ ((1 << (width - plen)) - 1)
                self._lpm = tuple(sorted(self._lpm + ((plen, mask, {probe: entry}),), key=lambda t: -t[0]))
        elif self._mode == "tcam":
            rules = [r for r in self._rules if r[3] is not old] if old is not None else list(self._rules)
            bisect.insort(rules, self._rule(entry), key=lambda r: (r[3].priority, r[3].seq))
            self._rules = rules

    def _unpublish(self, ident: tuple, entry: Entry) -> None:
        del self._entries[ident]
        if self._mode == "lpm":
            plen, probe = self._lpm_probe(entry.key)
            for p, _mask, index in self._lpm:
                if p == plen:
                    index.pop(probe, None)
                    if not index:
                        self._lpm = tuple(t for t in self._lpm if t[0] != plen)
                    break
        elif self._mode == "tcam":
            self._rules = [r for r in self._rules if r[3] is not entry]

    def _lpm_probe(self, canon: tuple) -> tuple[int, Any]:
        pos = self._lpm_pos
        value, plen = canon[pos]
        if len(canon) == 1:
            return plen, value
        return plen, canon[:pos] + (value,) + canon[pos + 1 :]

    def _rule(self, entry: Entry) -> tuple[int, int, tuple, Entry]:
        mask = value = 0
        ranges = []
        for pos, (k, item) in enumerate(zip(self.keys, entry.key)):
            full = (1 << k.width) - 1
            if k.match is Match.RANGE:
                ranges.append((pos, item[0], item[1]))
                continue
            if k.match is Match.EXACT:
                m, v = full, item
            elif k.match is Match.TERNARY:
                v, m = item
            elif k.match is Match.LPM:
                v, plen = item
                m = full ^ ((1 << (k.width - plen)) - 1)
            else:  # OPTIONAL
                v, valid = item
                m = full if valid else 0
            mask = (mask << k.width) | m
            value = (value << k.width) | v
        return mask, value, tuple(ranges), entry


def _canon_item(k: schema.Key, item: Any, table: str) -> Any:
    """One key field's item in canonical form (see MatchTable)."""
    full = (1 << k.width) - 1
    what = f"key field {k.name} ({k.match.value}, {k.width} bits)"
    if k.match is Match.EXACT:
        if item is None:
            raise InvalidArgument(f"{what} is missing", table=table)
        return _check_uint(item, k.width, what, table)
    if isinstance(item, (list, tuple)):
        if len(item) != 2:
            raise InvalidArgument(f"{what}: expected a pair, got {item!r}", table=table)
        a, b = item
    elif item is None:
        a, b = None, None
    else:
        a, b = item, "exact"
    if k.match is Match.TERNARY:
        if a is None:
            return (0, 0)
        mask = full if b == "exact" else _check_uint(b, k.width, what + " mask", table)
        return (_check_uint(a, k.width, what, table) & mask, mask)
    if k.match is Match.LPM:
        if a is None:
            return (0, 0)
        plen = k.width if b == "exact" else b
        if isinstance(plen, bool) or not isinstance(plen, int) or not 0 <= plen <= k.width:
            raise InvalidArgument(f"{what}: prefix length {plen!r} is not in 0..{k.width}", table=table)
        return (_check_uint(a, k.width, what, table) & (full ^ ((1 << (k.width - plen)) - 1)), plen)
    if k.match is Match.RANGE:
        if a is None:
            return (0, full)
        low = _check_uint(a, k.width, what + " low", table)
        high = low if b == "exact" else _check_uint(b, k.width, what + " high", table)
        if low > high:
            raise InvalidArgument(f"{what}: low {low} > high {high}", table=table)
        return (low, high)
    # OPTIONAL
    if a is None or b is False:
        return (0, False)
    return (_check_uint(a, k.width, what, table), True)


# ---------------------------------------------------------------- registers and counters


def _check_index(index: Any, size: int, what: str) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise OutOfRange(f"index {index!r} is outside 0..{size - 1}", table=what)
    return index


class RegisterArray:
    """A register: one array of cells per pipe. `reg[i]` is the data plane's pipe (0).

    Cells hold Python ints already in the declared signedness; writing wraps to the width.
    """

    def __init__(self, decl: schema.Register, pipes: int, lock: threading.RLock):
        self.decl = decl
        self.name, self.width, self.size, self.signed = decl.name, decl.width, decl.size, decl.signed
        self._lock = lock
        self._mask = (1 << decl.width) - 1
        self._sign = 1 << (decl.width - 1)
        self.pipes: list[list[int]] = [[0] * decl.size for _ in range(pipes)]
        self.values = self.pipes[0]  # the data plane's pipe; cleared in place, so keep a reference freely

    def __repr__(self) -> str:
        return f"<RegisterArray {self.name} {self.size}x{self.width}{' signed' if self.signed else ''}>"

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return self.values[index]

    def __setitem__(self, index: int, value: int) -> None:
        self.values[index] = self.wrap(value)

    def wrap(self, value: int) -> int:
        """`value` truncated to the width, in the register's signedness."""
        value &= self._mask
        return value - (self._mask + 1) if self.signed and value & self._sign else value

    def unsigned(self, value: int) -> int:
        """The raw bits of a cell value (what travels on the wire)."""
        return value & self._mask

    # control plane
    def cells_of(self, pipe: int | None) -> list[list[int]]:
        """The cell arrays of every pipe (None) or of one pipe (OutOfRange if there is no such pipe)."""
        if pipe is None:
            return self.pipes
        if isinstance(pipe, bool) or not isinstance(pipe, int) or not 0 <= pipe < len(self.pipes):
            raise OutOfRange(f"pipe {pipe!r}: the switch has {len(self.pipes)} pipe(s)", table=self.name)
        return [self.pipes[pipe]]

    def read(self, index: int, pipe: int | None = None) -> list[int]:
        """The cell in each pipe (or in `pipe`)."""
        _check_index(index, self.size, self.name)
        return [cells[index] for cells in self.cells_of(pipe)]

    def write(self, index: int, value: int, pipe: int | None = None) -> list[int]:
        """Set the cell in every pipe (or in `pipe`); returns the previous values."""
        _check_index(index, self.size, self.name)
        with self._lock:
            cells = self.cells_of(pipe)
            old = [c[index] for c in cells]
            for c in cells:
                c[index] = self.wrap(value)
            return old

    def clear(self, pipe: int | None = None) -> None:
        with self._lock:
            for cells in self.cells_of(pipe):
                cells[:] = [0] * self.size


class CounterArray:
    """An indirect counter: packets and bytes per index."""

    def __init__(self, decl: schema.Counter, lock: threading.RLock):
        self.decl = decl
        self.name, self.size = decl.name, decl.size
        self._lock = lock
        self.packets = [0] * decl.size
        self.bytes = [0] * decl.size

    def __repr__(self) -> str:
        return f"<CounterArray {self.name} {self.size}>"

    def __len__(self) -> int:
        return self.size

    def count(self, index: int, nbytes: int) -> None:
        """The data plane counts one packet of `nbytes` bytes."""
        self.packets[index] += 1
        self.bytes[index] += nbytes

    def read(self, index: int) -> tuple[int, int]:
        """(packets, bytes) at `index`."""
        _check_index(index, self.size, self.name)
        return self.packets[index], self.bytes[index]

    def write(self, index: int, packets: int = 0, nbytes: int = 0) -> tuple[int, int]:
        """Set one index (usually to zero); returns the previous (packets, bytes)."""
        _check_index(index, self.size, self.name)
        with self._lock:
            old = self.packets[index], self.bytes[index]
            self.packets[index], self.bytes[index] = packets, nbytes
            return old

    def clear(self) -> None:
        with self._lock:
            self.packets[:] = [0] * self.size
            self.bytes[:] = [0] * self.size


# ---------------------------------------------------------------- multicast (PRE)


@dataclass(frozen=True)
class McastNode:
    """A `$pre.node` entry: the replication id and the ports (and LAGs) it copies to."""

    rid: int
    dev_ports: tuple[int, ...] = ()
    lag_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class McastGroup:
    """A `$pre.mgid` entry: its nodes, each with an optional L1 exclusion id."""

    node_ids: tuple[int, ...]
    l1_xid_valid: tuple[bool, ...]
    l1_xids: tuple[int, ...]
    ecmp_ids: tuple[int, ...] = ()
    ecmp_xid_valid: tuple[bool, ...] = ()
    ecmp_xids: tuple[int, ...] = ()


class Pre:
    """The packet replication engine: multicast groups of nodes, nodes of ports.

    `group(mgid)` (the data plane's call) returns one (rid, dev_ports) per node, from a
    table rebuilt and swapped on each control-plane change.
    """

    MGID = "$pre.mgid"
    NODE = "$pre.node"

    def __init__(self, lock: threading.RLock, max_port: int = 511):
        self._lock = lock
        self._max_port = max_port
        self.nodes: dict[int, McastNode] = {}
        self.groups: dict[int, McastGroup] = {}
        self._copies: dict[int, tuple[tuple[int, tuple[int, ...]], ...]] = {}

    def group(self, mgid: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
        return self._copies.get(mgid, ())

    # nodes
    def add_node(self, node_id: int, rid: int, dev_ports: Iterable[int] = (), lag_ids: Iterable[int] = ()) -> McastNode:
        with self._lock:
            _check_uint(node_id, 32, "$MULTICAST_NODE_ID", self.NODE)
            if node_id in self.nodes:
                raise AlreadyExists(f"node {node_id} already exists", table=self.NODE)
            self.nodes[node_id] = node = self._node(rid, dev_ports, lag_ids)
            return node

    def modify_node(
        self,
        node_id: int,
        rid: int | None = None,
        dev_ports: Iterable[int] | None = None,
        lag_ids: Iterable[int] | None = None,
    ) -> McastNode:
        """Change a node (fields left None keep their value); returns the previous node."""
        with self._lock:
            old = self.node(node_id)
            self.nodes[node_id] = self._node(
                old.rid if rid is None else rid,
                old.dev_ports if dev_ports is None else dev_ports,
                old.lag_ids if lag_ids is None else lag_ids,
            )
            self._rebuild()
            return old

    def delete_node(self, node_id: int) -> McastNode:
        """Delete a node; groups it is a member of lose it first (the driver's
        bf_mc_node_destroy dissociates a node from its group). Returns the node."""
        with self._lock:
            old = self.node(node_id)
            for mgid, g in list(self.groups.items()):
                if node_id in g.node_ids:
                    self.remove_members(mgid, [node_id])
            del self.nodes[node_id]
            return old

    def node(self, node_id: int) -> McastNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise NotFound(f"no node {node_id}", table=self.NODE) from None

    def _node(self, rid: int, dev_ports: Iterable[int], lag_ids: Iterable[int]) -> McastNode:
        _check_uint(rid, 16, "$MULTICAST_RID", self.NODE)
        ports = tuple(dev_ports)
        for p in ports:
            if _check_uint(p, 32, "$DEV_PORT", self.NODE) > self._max_port:
                raise InvalidArgument(f"$DEV_PORT {p} is not a device port (0..{self._max_port})", table=self.NODE)
        lags = tuple(_check_uint(x, 8, "$MULTICAST_LAG_ID", self.NODE) for x in lag_ids)
        return McastNode(rid, ports, lags)

    # groups
    def add_group(
        self,
        mgid: int,
        node_ids: Iterable[int] = (),
        l1_xid_valid: Iterable[bool] | None = None,
        l1_xids: Iterable[int] | None = None,
    ) -> McastGroup:
        with self._lock:
            _check_uint(mgid, 16, "$MGID", self.MGID)
            if mgid in self.groups:
                raise AlreadyExists(f"multicast group {mgid} already exists", table=self.MGID)
            self.groups[mgid] = group = self._group(node_ids, l1_xid_valid, l1_xids)
            self._rebuild()
            return group

    def modify_group(
        self,
        mgid: int,
        node_ids: Iterable[int] = (),
        l1_xid_valid: Iterable[bool] | None = None,
        l1_xids: Iterable[int] | None = None,
    ) -> McastGroup:
        """Replace a group's members; returns the previous group."""
        with self._lock:
            old = self.group_entry(mgid)
            self.groups[mgid] = self._group(node_ids, l1_xid_valid, l1_xids)
            self._rebuild()
            return old

    def add_members(
        self,
        mgid: int,
        node_ids: Iterable[int],
        l1_xid_valid: Iterable[bool] | None = None,
        l1_xids: Iterable[int] | None = None,
    ) -> McastGroup:
        """MODIFY_INC: append nodes to a group; returns the previous group."""
        with self._lock:
            old = self.group_entry(mgid)
            node_ids = tuple(node_ids)
            valid = tuple(l1_xid_valid) if l1_xid_valid is not None else (False,) * len(node_ids)
            xids = tuple(l1_xids) if l1_xids is not None else (0,) * len(node_ids)
            self.groups[mgid] = self._group(old.node_ids + node_ids, old.l1_xid_valid + valid, old.l1_xids + xids)
            self._rebuild()
            return old

    def remove_members(self, mgid: int, node_ids: Iterable[int]) -> McastGroup:
        """MODIFY_INC with mod_del: remove nodes from a group; returns the previous group."""
        with self._lock:
            old = self.group_entry(mgid)
            gone = set(node_ids)
            missing = sorted(gone - set(old.node_ids))
            if missing:
                raise NotFound(f"nodes {missing} are not members of group {mgid}", table=self.MGID)
            keep = [i for i, n in enumerate(old.node_ids) if n not in gone]
            self.groups[mgid] = McastGroup(
                tuple(old.node_ids[i] for i in keep),
                tuple(old.l1_xid_valid[i] for i in keep),
                tuple(old.l1_xids[i] for i in keep),
            )
            self._rebuild()
            return old

    def delete_group(self, mgid: int) -> McastGroup:
        with self._lock:
            old = self.group_entry(mgid)
            del self.groups[mgid]
            self._rebuild()
            return old

    def group_entry(self, mgid: int) -> McastGroup:
        try:
            return self.groups[mgid]
        except KeyError:
            raise NotFound(f"no multicast group {mgid}", table=self.MGID) from None

    def restore_group(self, mgid: int, group: McastGroup | None) -> None:
        """Put back a group exactly as it was (None: absent); used to roll back a batch."""
        with self._lock:
            if group is None:
                self.groups.pop(mgid, None)
            else:
                self.groups[mgid] = group
            self._rebuild()

    def restore_node(self, node_id: int, node: McastNode | None) -> None:
        with self._lock:
            if node is None:
                self.nodes.pop(node_id, None)
            else:
                self.nodes[node_id] = node
            self._rebuild()

    def clear_groups(self) -> dict[int, McastGroup]:
        with self._lock:
            old, self.groups = self.groups, {}
            self._rebuild()
            return old

    def clear_nodes(self) -> dict[int, McastNode]:
        with self._lock:
            if self.groups:
                raise FailedPrecondition(
                    f"nodes are members of groups {sorted(self.groups)}", table=self.NODE, fix="clear $pre.mgid first"
                )
            old, self.nodes = self.nodes, {}
            return old

    def _group(self, node_ids: Iterable[int], l1_xid_valid, l1_xids) -> McastGroup:
        node_ids = tuple(node_ids)
        valid = tuple(l1_xid_valid) if l1_xid_valid is not None else (False,) * len(node_ids)
        xids = tuple(l1_xids) if l1_xids is not None else (0,) * len(node_ids)
        if not len(valid) == len(xids) == len(node_ids):
            raise InvalidArgument(
                f"{len(node_ids)} node ids but {len(valid)} L1 XID valid flags and {len(xids)} L1 XIDs",
                table=self.MGID,
                fix="give one flag and one XID per node (or none)",
            )
        if len(set(node_ids)) != len(node_ids):
            raise InvalidArgument(f"a node appears twice in {list(node_ids)}", table=self.MGID)
        missing = [n for n in node_ids if n not in self.nodes]
        if missing:
            raise NotFound(f"no such node(s) {missing}", table=self.MGID, fix="add them to $pre.node first")
        for x in xids:
            _check_uint(x, 16, "$MULTICAST_NODE_L1_XID", self.MGID)
        return McastGroup(node_ids, tuple(bool(v) for v in valid), xids)

    def _rebuild(self) -> None:
        self._copies = {
            mgid: tuple((self.nodes[n].rid, self.nodes[n].dev_ports) for n in g.node_ids)
            for mgid, g in self.groups.items()
        }


# ---------------------------------------------------------------- ports


@dataclass(frozen=True)
class PortConfig:
    """A `$PORT` entry. `settings` holds the writable fields the emulator stores without
    acting on them ($LOOPBACK_MODE, $TX_MTU, ...: docs/bfruntime.md), by field name."""

    dev_port: int
    speed: str
    fec: str
    n_lanes: int
    enable: bool = False
    autoneg: str = "PM_AN_DEFAULT"
    settings: Mapping[str, Any] = field(default_factory=dict)


# $PORT fields the driver applies only together (bf_rt_port_table_impl.cpp): with one of a
# group missing it logs an error, applies none of them, and the write still succeeds.
PORT_FIELD_GROUPS = (
    ("$TX_MTU", "$RX_MTU"),
    ("$TX_PFC_EN_MAP", "$RX_PFC_EN_MAP"),
    ("$TX_PAUSE_FRAME_EN", "$RX_PAUSE_FRAME_EN"),
    ("$SDS_TX_ATTN", "$SDS_TX_PRE", "$SDS_TX_POST"),
)
# What the stored fields read before a client sets them (bf_switchd's defaults).
PORT_SETTING_DEFAULTS: dict[str, Any] = {
    "$LOOPBACK_MODE": "BF_LPBK_NONE",
    "$TX_MTU": 10240,
    "$RX_MTU": 10240,
    "$TX_PFC_EN_MAP": 0,
    "$RX_PFC_EN_MAP": 0,
    "$TX_PAUSE_FRAME_EN": False,
    "$RX_PAUSE_FRAME_EN": False,
    "$CUT_THROUGH_EN": False,
    "$PORT_DIR": "PM_PORT_DIR_DEFAULT",
    "$SDS_TX_ATTN": 0,
    "$SDS_TX_PRE": 0,
    "$SDS_TX_PRE2": 0,
    "$SDS_TX_POST": 0,
    "$SDS_TX_POST2": 0,
    "$RX_PRSR_PRI_THRESH": 0,
    "$TIMESTAMP_1588_DELTA_TX": 0,
    "$TIMESTAMP_1588_DELTA_RX": 0,
    "$PLL_OVRCLK": 0.0,
}


_LANES = {
    "BF_SPEED_NONE": 1,
    "BF_SPEED_1G": 1,
    "BF_SPEED_10G": 1,
    "BF_SPEED_25G": 1,
    "BF_SPEED_40G": 4,
    "BF_SPEED_40G_NB": 4,
    "BF_SPEED_40G_NON_BREAKABLE": 4,
    "BF_SPEED_50G": 2,
    "BF_SPEED_100G": 4,
    "BF_SPEED_200G": 4,
    "BF_SPEED_400G": 8,
}


class Ports:
    """The port table ($PORT) and its statistics ($PORT_STAT).

    `$PORT_UP` is computed: a port is up when it is added, enabled, and `up_hook(dev_port)`
    (when the data plane sets one, e.g. to look at its veth's carrier) says so.
    """

    TABLE = "$PORT"

    def __init__(self, lock: threading.RLock, max_ports: int = 512):
        self._lock = lock
        self.max_ports = max_ports
        self.names: dict[int, str] = {}  # dev_port -> front-panel name ("1/0"); see `name()`
        self.metadata: dict[int, int] = {}  # the ingress parser's $PORT_METADATA: dev_port -> value
        self._ports: dict[int, PortConfig] = {}
        self._stats: dict[int, list[int]] = {}
        self.up_hook: Callable[[int], bool] | None = None

    # data plane
    def get(self, dev_port: int) -> PortConfig | None:
        return self._ports.get(dev_port)

    @property
    def config_getter(self) -> Callable[[int], PortConfig | None]:
        """`get` without the method call, for a data plane to bind once (dev_port ->
        PortConfig or None); it stays valid for the store's life."""
        return self._ports.get

    def is_up(self, dev_port: int) -> bool:
        cfg = self._ports.get(dev_port)
        if cfg is None or not cfg.enable:
            return False
        hook = self.up_hook
        return True if hook is None else bool(hook(dev_port))

    def count_rx(self, dev_port: int, nbytes: int, ok: bool = True) -> None:
        s = self._stats.get(dev_port) or self._new_stats(dev_port)
        s[1] += 1
        s[3] += nbytes
        if ok:
            s[0] += 1
            s[2] += nbytes

    def count_tx(self, dev_port: int, nbytes: int, ok: bool = True) -> None:
        s = self._stats.get(dev_port) or self._new_stats(dev_port)
        s[5] += 1
        s[7] += nbytes
        if ok:
            s[4] += 1
            s[6] += nbytes

    def stat_cells(self, dev_port: int) -> list[int]:
        """The live counters of a port, in `schema.PORT_STAT_FIELDS` order, for a data plane
        that adds whole batches to them in place. The list stays the port's for the life
        of the store (deleting and re-adding the port, or zeroing it, keeps it)."""
        return self._stats.get(dev_port) or self._new_stats(dev_port)

    def _new_stats(self, dev_port: int) -> list[int]:
        return self._stats.setdefault(dev_port, [0] * len(schema.PORT_STAT_FIELDS))

    # front-panel names
    def set_name(self, dev_port: int, name: str) -> None:
        """Call dev_port `name` ("conn/chnl", as `pm show` lists it) on the front panel:
        what $PORT_STR_INFO and $PORT_HDL_INFO resolve. On a Tofino the board decides
        this mapping, so the emulator is told it (`--port 132=swp1:1/0`)."""
        self._check_port(dev_port)
        try:
            conn, chnl = self.handle(name)
        except ValueError:
            raise InvalidArgument(f"{name!r} is not a front-panel port name like 1/0", table=self.TABLE) from None
        if any(n == f"{conn}/{chnl}" for d, n in self.names.items() if d != dev_port):
            raise AlreadyExists(f"front-panel port {name} is named twice", table=self.TABLE)
        self.names[dev_port] = f"{conn}/{chnl}"

    def by_name(self, name: str) -> int:
        """The dev_port of a front-panel name ("1/0")."""
        for dev_port, n in self.names.items():
            if n == name:
                return dev_port
        raise NotFound(f"no front-panel port {name!r}", table="$PORT_STR_INFO")

    def by_handle(self, conn: int, chnl: int) -> int:
        """The dev_port of connector `conn`, channel `chnl`."""
        try:
            return self.by_name(f"{conn}/{chnl}")
        except NotFound:
            raise NotFound(f"no front-panel port {conn}/{chnl}", table="$PORT_HDL_INFO") from None

    def front_panel_order(self) -> list[int]:
        """The named dev_ports in front-panel order (connector, then channel): the
        port manager's front-panel index ($PORT_FP_IDX_INFO) is the position here."""
        return [d for d, n in sorted(self.names.items(), key=lambda dn: self.handle(dn[1]))]

    @staticmethod
    def handle(name: str) -> tuple[int, int]:
        """(conn, chnl) of a front-panel name."""
        conn, chnl = name.split("/")
        return int(conn), int(chnl)

    # control plane
    def all(self) -> list[PortConfig]:
        with self._lock:
            return sorted(self._ports.values(), key=lambda c: c.dev_port)

    def config(self, dev_port: int) -> PortConfig:
        cfg = self._ports.get(dev_port)
        if cfg is None:
            raise NotFound(f"port {dev_port} is not added", table=self.TABLE)
        return cfg

    def add(
        self,
        dev_port: int,
        speed: str,
        fec: str,
        *,
        n_lanes: int | None = None,
        enable: bool = False,
        autoneg: str = "PM_AN_DEFAULT",
        settings: Mapping[str, Any] | None = None,
    ) -> PortConfig:
        with self._lock:
            self._check_port(dev_port)
            if dev_port in self._ports:
                raise AlreadyExists(f"port {dev_port} is already added", table=self.TABLE)
            cfg = PortConfig(dev_port, speed, fec, n_lanes or _LANES.get(speed, 1), enable, autoneg)
            cfg = self._validated(replace(cfg, settings=self._settings({}, settings or {})))
            self._ports[dev_port] = cfg
            self._stats.setdefault(dev_port, [0] * len(schema.PORT_STAT_FIELDS))
            return cfg

    def modify(self, dev_port: int, **changes: Any) -> PortConfig:
        """Change fields of an added port (speed, fec, n_lanes, enable, autoneg, and
        `settings`, merged into the stored ones); returns the old config."""
        with self._lock:
            old = self.config(dev_port)
            unknown = set(changes) - {"speed", "fec", "n_lanes", "enable", "autoneg", "settings"}
            if unknown:
                raise InvalidArgument(f"unknown port fields {sorted(unknown)}", table=self.TABLE)
            if "settings" in changes:
                changes["settings"] = self._settings(old.settings, changes["settings"])
            self._ports[dev_port] = self._validated(replace(old, **changes))
            return old

    def _settings(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(new) - set(PORT_SETTING_DEFAULTS)
        if unknown:
            raise InvalidArgument(f"unknown port fields {sorted(unknown)}", table=self.TABLE)
        given = dict(new)
        for group in PORT_FIELD_GROUPS:
            sent = [n for n in group if n in given]
            if sent and len(sent) < len(group):  # as the driver: none applied, no error
                log.warning("$PORT: %s ignored: the driver sets %s only together", sent, ", ".join(group))
                for n in sent:
                    del given[n]
        for name, value, choices in (
            ("$LOOPBACK_MODE", given.get("$LOOPBACK_MODE"), schema.LOOPBACK),
            ("$PORT_DIR", given.get("$PORT_DIR"), schema.PORT_DIR),
        ):
            if value is not None and value not in choices:
                raise InvalidArgument(f"{name} {value!r} is not one of {', '.join(choices)}", table=self.TABLE)
        return {**old, **given}

    def setting(self, cfg: PortConfig, name: str) -> Any:
        """A stored $PORT field's value, or its default."""
        return cfg.settings.get(name, PORT_SETTING_DEFAULTS[name])

    def delete(self, dev_port: int) -> PortConfig:
        with self._lock:
            old = self.config(dev_port)
            del self._ports[dev_port]
            return old

    def clear(self) -> list[PortConfig]:
        with self._lock:
            old = list(self._ports.values())
            self._ports.clear()  # in place: `config_getter` stays valid
            return old

    def restore(self, dev_port: int, cfg: PortConfig | None) -> None:
        """Put back a port exactly as it was (None: absent); used to roll back a batch."""
        with self._lock:
            if cfg is None:
                self._ports.pop(dev_port, None)
            else:
                self._ports[dev_port] = cfg

    def stats(self, dev_port: int) -> dict[str, int]:
        """The port's counters as $PORT_STAT serves them: the live ones, and zero for
        those the emulator does not measure."""
        self.config(dev_port)
        values = self._stats.get(dev_port) or self._new_stats(dev_port)
        return {**dict.fromkeys(schema.PORT_STAT_SERVED, 0), **dict(zip(schema.PORT_STAT_FIELDS, values))}

    def set_stats(self, dev_port: int, values: Mapping[str, int]) -> dict[str, int]:
        """Overwrite counters the emulator measures (usually with zeros; the others stay
        zero); returns the previous values."""
        with self._lock:
            old = self.stats(dev_port)
            s = self._stats[dev_port]
            for name, v in values.items():
                if name in schema.PORT_STAT_FIELDS:
                    s[schema.PORT_STAT_FIELDS.index(name)] = v
            return old

    def _check_port(self, dev_port: int) -> None:
        if isinstance(dev_port, bool) or not isinstance(dev_port, int) or not 0 <= dev_port < self.max_ports:
            raise InvalidArgument(
                f"$DEV_PORT {dev_port!r} is not a device port (0..{self.max_ports - 1})", table=self.TABLE
            )

    def check_speed_fec(self, speed: str, fec: str) -> None:
        """What the driver checks of an add before it looks whether the port is added."""
        for value, choices, name in ((speed, schema.SPEEDS, "$SPEED"), (fec, schema.FECS, "$FEC")):
            if value not in choices:
                raise InvalidArgument(f"{name} {value!r} is not one of {', '.join(choices)}", table=self.TABLE)

    def _validated(self, cfg: PortConfig) -> PortConfig:
        cfg = replace(cfg, fec=schema.FEC_READ_BACK.get(cfg.fec, cfg.fec))
        for value, choices, name in (
            (cfg.speed, schema.SPEEDS, "$SPEED"),
            (cfg.fec, schema.FECS, "$FEC"),
            (cfg.autoneg, schema.AUTONEG, "$AUTO_NEGOTIATION"),
        ):
            if value not in choices:
                raise InvalidArgument(f"{name} {value!r} is not one of {', '.join(choices)}", table=self.TABLE)
        if cfg.n_lanes not in (1, 2, 4, 8):
            raise InvalidArgument(f"$N_LANES {cfg.n_lanes!r} is not 1, 2, 4 or 8", table=self.TABLE)
        return replace(cfg, enable=bool(cfg.enable))


# ---------------------------------------------------------------- the store


class TableStore:
    """All runtime state of one program on one device (see the module docstring)."""

    def __init__(self, program: schema.Program, pipes: int = 1):
        if not 1 <= pipes <= 4:
            raise schema.SchemaError(f"pipes must be 1..4 (a Tofino1 has up to 4), not {pipes}")
        self.program = program
        self.pipes = pipes
        self.layout = schema.layout(program)
        self.lock = threading.RLock()  # writers only
        self.tables = {t.name: MatchTable(t, self.lock) for t in program.tables}
        self.registers = {r.name: RegisterArray(r, pipes, self.lock) for r in program.registers}
        self.counters = {c.name: CounterArray(c, self.lock) for c in program.counters}
        self.pre = Pre(self.lock)
        self.ports = Ports(self.lock)
        from .fixed_tables import fixed_tables_of  # (it builds on this module's errors)

        self.fixed = fixed_tables_of(self, self.layout.fixed)  # the fixed tables kept but not acted on
        self._names = {
            kind: schema.aliases(objs)
            for kind, objs in (("table", self.tables), ("register", self.registers), ("counter", self.counters))
        }

    def __repr__(self) -> str:
        return f"<TableStore {self.program.name} pipes={self.pipes}>"

    def reset(self) -> None:
        """The program's initial state, as after bf_switchd reloads it (a warm init,
        which the SDE client's clear_all_tables asks for): every table empty with its
        initial default action, registers and counters zero, no multicast groups or
        nodes, no port metadata, port counters zero. Ports stay added (the driver
        replays port configuration across a fast reconfig). In place: a data plane's
        references stay valid."""
        with self.lock:
            for t in self.tables.values():
                t.clear()
                t.reset_default()
            for r in self.registers.values():
                r.clear()
            for c in self.counters.values():
                c.clear()
            self.pre.clear_groups()
            self.pre.clear_nodes()
            self.ports.metadata.clear()
            for t in self.fixed.values():
                t.reset()
            for cfg in self.ports.all():
                self.ports.set_stats(cfg.dev_port, dict.fromkeys(schema.PORT_STAT_FIELDS, 0))

    def table(self, name: str) -> MatchTable:
        """A match-action table by full name or unique dot-suffix (`forward`)."""
        return self.tables[self._resolve("table", name)]

    def register(self, name: str) -> RegisterArray:
        return self.registers[self._resolve("register", name)]

    def counter(self, name: str) -> CounterArray:
        return self.counters[self._resolve("counter", name)]

    def mcast_group(self, mgid: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """(rid, dev_ports) per node of a multicast group; () if there is no such group."""
        return self.pre.group(mgid)

    def _resolve(self, kind: str, name: str) -> str:
        names = self._names[kind]
        full = names.get(name)
        if full is None:
            several = sorted(n for n in set(names.values()) if n.endswith("." + name))
            if several:
                raise NotFound(f"{kind} name {name!r} is ambiguous: {', '.join(several)}", fix="give more of the name")
            close = difflib.get_close_matches(name, list(names), n=3)
            raise NotFound(
                f"program {self.program.name} has no {kind} {name!r}",
                fix=f"did you mean {' or '.join(close)}?"
                if close
                else f"{kind}s: {', '.join(sorted(n for n, f in names.items() if n == f)) or 'none'}",
            )
        return full
