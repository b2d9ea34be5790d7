"""RdmaEngine (switch/p4/rdma_engine.p4): the write offset of each slice's RDMA ring,
the next slot a pre-written large task takes (it wraps at the slice's last_slot)."""

from __future__ import annotations

from switch.bfrt.client import Client

from . import _cells
from .constants import MAX_SLICES


class RdmaEngine:
    RING_OFFSET = "pipe.SwitchIngress.rdma_engine.ring_offset"

    def __init__(self, client: Client):
        self.client = client
        self.ring_offset = client.register(self.RING_OFFSET)

    def reset(self) -> None:
        """Every slice's ring starts again at slot 0."""
        _cells.write_cells(self.client, self.ring_offset, {s: 0 for s in range(MAX_SLICES)})

    def offsets(self) -> list[list[int]]:
        """[pipe][slice] -> next slot."""
        return _cells.values_per_pipe(self.ring_offset.read_all())
