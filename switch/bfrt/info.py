"""bf-rt.json, parsed: tables, key and data fields, actions, resolved by name.

A switch describes its tables in two JSON documents (the program's and the fixed
non-P4 tables'); ids differ between bf-p4c and the emulator, so everything here is
looked up by name. A name may be given in full (`pipe.SwitchIngress.forward.forward`)
or as any dot-suffix no other name shares (`forward.forward`, `forward`), as the SDE's
client allows; the same holds for fields and actions within a table.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import BfrtNameError

MATCH_PRIORITY = "$MATCH_PRIORITY"
_UINT_WIDTH = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "int32": 32}  # int32: $PORT's serdes taps


def aliases(names: Iterable[str]) -> dict[str, str]:
    """Every full name and each of its dot-suffixes that no other name shares -> full name."""
    names = list(names)
    owners: dict[str, set[str]] = {}
    for full in names:
        parts = full.split(".")
        for i in range(1, len(parts)):
            owners.setdefault(".".join(parts[i:]), set()).add(full)
    out = {suffix: next(iter(fulls)) for suffix, fulls in owners.items() if len(fulls) == 1}
    out.update({n: n for n in names})
    return out


def _resolve(names: dict[str, str], name: str, what: str, where: str) -> str:
    full = names.get(name)
    if full is None:
        several = sorted(n for n in set(names.values()) if n.endswith("." + name))
        if several:
            raise BfrtNameError(
                f"{where}: {what} name {name!r} is ambiguous: {', '.join(several)}", fix="give more of the name"
            )
        close = difflib.get_close_matches(name, list(names), n=3)
        fix = (
            f"did you mean {' or '.join(close)}?"
            if close
            else f"known: {', '.join(sorted(n for n, f in names.items() if n == f)) or 'none'}"
        )
        raise BfrtNameError(f"{where} has no {what} {name!r}", fix=fix)
    return full


@dataclass(frozen=True)
class FieldInfo:
    """A key field, data field or action parameter."""

    id: int
    name: str
    type: str  # bytes, uint8..uint64, bool, string, float (or container: not supported)
    width: int  # bits; 0 for strings and floats
    match: str | None = None  # key fields: Exact, Ternary, LPM, Range, Optional
    mandatory: bool = False
    read_only: bool = False
    repeated: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    choices: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return math.ceil(self.width / 8)

    @property
    def is_int(self) -> bool:
        return self.type == "bytes" or self.type in _UINT_WIDTH

    @property
    def is_register_data(self) -> bool:
        return self.annotations.get("$bfrt_field_class") == "register_data"

    @classmethod
    def parse(
        cls,
        j: dict[str, Any],
        *,
        match: str | None = None,
        mandatory: bool | None = None,
        read_only: bool | None = None,
    ) -> FieldInfo:
        t = j.get("type", {})
        kind = t.get("type", "bytes")
        width = t.get("width") or _UINT_WIDTH.get(kind) or (1 if kind == "bool" else 0)
        notes = {a.get("name"): a.get("value") for a in j.get("annotations", [])}
        return cls(
            j["id"],
            j["name"],
            kind,
            width,
            match,
            j.get("mandatory", False) if mandatory is None else mandatory,
            j.get("read_only", False) if read_only is None else read_only,
            j.get("repeated", False),
            notes,
            tuple(t.get("choices", ())),
        )


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    scope: str
    params: tuple[FieldInfo, ...]

    def __post_init__(self):
        object.__setattr__(self, "_names", aliases(p.name for p in self.params))
        object.__setattr__(self, "by_name", {p.name: p for p in self.params})
        object.__setattr__(self, "by_id", {p.id: p for p in self.params})

    def param(self, name: str) -> FieldInfo:
        return self.by_name[_resolve(self._names, name, "parameter", f"action {self.name}")]


def _data_fields(entries: Any) -> tuple[FieldInfo, ...]:
    """Data fields from bf-rt.json: entries wrapped as {mandatory, read_only, singleton |
    oneof}, or flat fields (P4 action data)."""
    out: list[FieldInfo] = []
    for d in entries:
        if "singleton" not in d and "oneof" not in d:
            out.append(FieldInfo.parse(d))
            continue
        members = [d["singleton"]] if "singleton" in d else d["oneof"]
        ro = d.get("read_only", False)
        out += [FieldInfo.parse(m, mandatory=d.get("mandatory", False), read_only=ro) for m in members]
    return tuple(out)


class TableInfo:
    """One table of bf-rt.json."""

    def __init__(self, j: dict[str, Any]):
        self.json = j
        self.id: int = j["id"]
        self.name: str = j["name"]
        self.table_type: str = j.get("table_type", "")
        self.size: int = j.get("size", 0)
        self.const_default: bool = j.get("has_const_default_action", False)
        self.operations: tuple[str, ...] = tuple(j.get("supported_operations", ()))
        self.attributes: tuple[str, ...] = tuple(j.get("attributes", ()))
        self.keys = tuple(FieldInfo.parse(k, match=k.get("match_type", "Exact")) for k in j.get("key", ()))
        self.data = _data_fields(j.get("data", ()))
        self.actions = tuple(
            # bf-p4c writes action data flat; bf_switchd's fixed tables ($mirror.cfg) also
            # wrap it as table data: the SDE client reads both.
            ActionInfo(a["id"], a["name"], a.get("action_scope", "TableAndDefault"), _data_fields(a.get("data", ())))
            for a in j.get("action_specs", ())
        )
        self.key_by_id = {f.id: f for f in self.keys}
        self.data_by_id = {f.id: f for f in self.data}
        self.action_by_id = {a.id: a for a in self.actions}
        self._key_names = aliases(f.name for f in self.keys)
        self._data_names = aliases(f.name for f in self.data)
        self._action_names = aliases(a.name for a in self.actions)

    def __repr__(self) -> str:
        return f"<TableInfo {self.name} {self.table_type} id={self.id:#x}>"

    @property
    def has_priority(self) -> bool:
        return any(k.name == MATCH_PRIORITY for k in self.keys)

    def key_field(self, name: str) -> FieldInfo:
        full = _resolve(self._key_names, name, "key field", f"table {self.name}")
        return next(f for f in self.keys if f.name == full)

    def data_field(self, name: str) -> FieldInfo:
        full = _resolve(self._data_names, name, "data field", f"table {self.name}")
        return next(f for f in self.data if f.name == full)

    def action(self, name: str) -> ActionInfo:
        full = _resolve(self._action_names, name, "action", f"table {self.name}")
        return next(a for a in self.actions if a.name == full)


class BfrtInfo:
    """A device's tables: the program's bf-rt.json plus the non-P4 one."""

    def __init__(self, p4_name: str, p4_json: dict[str, Any], non_p4_json: dict[str, Any] | None = None):
        self.p4_name = p4_name
        self.p4_json = p4_json
        self.non_p4_json = non_p4_json or {"tables": []}
        tables = [TableInfo(t) for t in (*p4_json.get("tables", ()), *self.non_p4_json.get("tables", ()))]
        self.tables = {t.name: t for t in tables}
        self.by_id = {t.id: t for t in tables}
        self._names = aliases(self.tables)

    def __repr__(self) -> str:
        return f"<BfrtInfo {self.p4_name}: {len(self.tables)} tables>"

    def table(self, name: str) -> TableInfo:
        return self.tables[_resolve(self._names, name, "table", f"program {self.p4_name}")]

    def resolve(self, name: str) -> str:
        """The full name of a table given by full name or unique suffix."""
        return _resolve(self._names, name, "table", f"program {self.p4_name}")
