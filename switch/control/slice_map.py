"""SliceMap (switch/p4/slice_map.p4): task type -> slice (paper 3.2.3). Unmapped types
take the P4's default, slice 0."""

from __future__ import annotations

from collections.abc import Mapping

from switch.bfrt.client import Client

from . import _cells


class SliceMap:
    TABLE = "pipe.SwitchIngress.slice_map.map_slice"
    SET_SLICE = "SwitchIngress.slice_map.set_slice"

    def __init__(self, client: Client):
        self.client = client
        self.table = client.table(self.TABLE)

    def program(self, mapping: Mapping[int, int]) -> None:
        """Exactly this mapping: task type -> slice."""
        _cells.empty(self.table)
        batch = self.client.batch()
        for task_type, slice_id in sorted(mapping.items()):
            batch.add(self.table, task_type, self.SET_SLICE, {"slice": slice_id})
        batch.send()

    def set(self, task_type: int, slice_id: int) -> None:
        self.table.upsert(task_type, self.SET_SLICE, {"slice": slice_id})

    def entries(self) -> dict[int, int]:
        return {e.key["hdr.rain.task_type"]: e.data["slice"] for e in self.table.entries()}

    def clear(self) -> None:
        _cells.empty(self.table)
