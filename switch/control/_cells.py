"""Small helpers over switch.bfrt shared by the controls: many register cells in one
Write or one Read, and emptying a table back to its P4 default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from switch.bfrt import bfruntime_pb2 as pb
from switch.bfrt.client import Client, Register, Table

INDEX = "$REGISTER_INDEX"
READ_CHUNK = 4096  # cells per Read request


def write_cells(client: Client, reg: Register, values: Mapping[int, int]) -> None:
    """Set cells (every pipe) in one Write; negative values in two's complement."""
    if not values:
        return
    mask = (1 << reg.field.width) - 1
    batch = client.batch()
    for i, v in values.items():
        batch.modify(reg.table, {INDEX: i}, data={reg.field.name: v & mask})
    batch.send()


def read_cells(client: Client, reg: Register, indexes: Iterable[int]) -> dict[int, list[int]]:
    """index -> [value per pipe], in as few Reads as READ_CHUNK allows."""
    idx = list(indexes)
    out: dict[int, list[int]] = {}
    t = reg.table
    for lo in range(0, len(idx), READ_CHUNK):
        part = idx[lo : lo + READ_CHUNK]
        entries = []
        for i in part:
            e = pb.TableEntry(table_id=t.info.id, key=t.encode_key({INDEX: i}))
            e.table_flags.from_hw = True
            entries.append(e)
        for raw in client.read_entries(entries, [t.name] * len(entries)):
            e = t.decode(raw)
            out[e.key[INDEX]] = [signed(reg, v) for v in e.data.get(reg.field.name, [])]
    return out


def signed(reg: Register, raw: int) -> int:
    """A cell as the register's type reads it (two's complement if signed)."""
    w = reg.field.width
    return raw - (1 << w) if reg.signed and raw >> (w - 1) else raw


def values_per_pipe(cells: list[list[int]]) -> list[list[int]]:
    """[index][pipe] -> [pipe][index]."""
    pipes = max((len(c) for c in cells), default=0)
    return [[c[p] if p < len(c) else 0 for c in cells] for p in range(pipes)]


def empty(table: Table) -> None:
    """Every entry removed and the default action back to the P4's."""
    table.clear()
    table.reset_default()
