"""QueueEntries (switch/p4/queue_entries.p4): the 128K entries shared by the slices'
queues, one register array per field (8 data bytes, owner, request, meta, tstamp).

Reading 12 arrays of 128K cells through BFRuntime is slow, so `read` takes the cells
you ask for (the occupied ones, from the queues' head and balance) in batched Reads;
`clear` zeroes every array (a table clear each)."""

from __future__ import annotations

from collections.abc import Iterable

from switch.bfrt.client import Client

from . import _cells

PREFIX = "pipe.SwitchIngress.queue_entries."
FIELDS = ("data0", "data1", "data2", "data3", "data4", "data5", "data6", "data7", "owner", "request", "meta", "tstamp")


class QueueEntries:
    REGISTERS = tuple(PREFIX + f for f in FIELDS)

    def __init__(self, client: Client):
        self.client = client
        self.registers = {f: client.register(PREFIX + f) for f in FIELDS}

    def clear(self) -> None:
        for reg in self.registers.values():
            reg.clear()

    def read(self, indexes: Iterable[int], pipe: int = 0) -> dict[int, dict[str, int]]:
        """index -> {field: value} (of one pipe's copy) for the given entries."""
        idx = sorted(set(indexes))
        per_field = {f: _cells.read_cells(self.client, reg, idx) for f, reg in self.registers.items()}
        out: dict[int, dict[str, int]] = {}
        for i in idx:
            row = {}
            for f, cells in per_field.items():
                v = cells.get(i, [])
                row[f] = v[pipe] if pipe < len(v) else (v[0] if v else 0)
            out[i] = row
        return out

    @staticmethod
    def describe(row: dict[str, int]) -> dict[str, int | str]:
        """An entry as a person reads it: data as hex, meta split in task type and flags."""
        return {
            "data": bytes(row[f"data{k}"] for k in range(8)).hex(),
            "owner": row["owner"],
            "request": row["request"],
            "task_type": row["meta"] >> 8,
            "flags": row["meta"] & 0xFF,
            "tstamp": row["tstamp"],
        }
