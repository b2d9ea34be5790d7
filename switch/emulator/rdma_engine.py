"""RdmaEngine (switch/p4/rdma_engine.p4): the ingress half of the RDMA engine. A large
task that must wait takes its slice's next ring slot and is multicast to the slice's
workers; the bridged header carries {slot, length}, which queue_entries stores in
place of the inline bytes."""

from __future__ import annotations

from .headers import (
    EV_PREWRITE,
    FLAG_DESC,
    FLAG_LARGE,
    ICRC_BYTES,
    MAX_SLICES,
    QOP_TASK_QUEUED,
    RAIN_HDR_BYTES,
    UDP_HDR_BYTES,
)
from .schema import Register

RING_OFFSET = Register("pipe.SwitchIngress.rdma_engine.ring_offset", width=32, size=MAX_SLICES)

TABLES = ()
REGISTERS = (RING_OFFSET,)
COUNTERS = ()

_SLICE_MASK = MAX_SLICES - 1
_DESC_OVERHEAD = UDP_HDR_BYTES + RAIN_HDR_BYTES + ICRC_BYTES


class RdmaEngine:
    """control RdmaEngine: a large task that must wait takes the slice's next ring
    slot, becomes a descriptor (FLAG_DESC) and goes to the slice's multicast group;
    the bridged header carries slot and length to queue_entries and to egress."""

    def __init__(self, store):
        self.ring_offset = store.register(RING_OFFSET.name).values

    def next_slot(self, i: int, ig_md) -> int:
        value = self.ring_offset[i]
        self.ring_offset[i] = 0 if value == ig_md.last_slot else (value + 1) & 0xFFFFFFFF
        return value

    def describe(self, hdr, ig_md) -> None:
        # payload bytes = UDP payload - rain header - the 4-byte iCRC pad (bit<16> arithmetic)
        hdr.bridged_desc_len = (hdr.udp_length - _DESC_OVERHEAD) & 0xFFFF
        ig_md.mcast_grp_a = ig_md.mgid
        hdr.flags = (hdr.flags & ~FLAG_LARGE & 0xFF) | FLAG_DESC  # flags[1:0] = 0b10

    def apply(self, hdr, ig_md) -> None:
        if ig_md.queue_op == QOP_TASK_QUEUED and hdr.flags & FLAG_LARGE:
            hdr.bridged_slot = self.next_slot(ig_md.slice & _SLICE_MASK, ig_md)
            self.describe(hdr, ig_md)
            hdr.bridged_prewrite = 1
            ig_md.event = EV_PREWRITE
