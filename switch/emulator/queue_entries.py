"""QueueEntries (switch/p4/queue_entries.p4): the 128K entries of the bidirectional
queues, one register array per field (8 one-byte data arrays, owner, request, meta,
tstamp)."""

from __future__ import annotations

from .headers import QOP_TASK_MATCHED, QOP_TASK_QUEUED, QOP_TOKEN_MATCHED, QOP_TOKEN_QUEUED, QUEUE_ENTRIES
from .schema import Register

DATA = tuple(Register(f"pipe.SwitchIngress.queue_entries.data{n}", width=8, size=QUEUE_ENTRIES) for n in range(8))
OWNER = Register("pipe.SwitchIngress.queue_entries.owner", width=16, size=QUEUE_ENTRIES)
REQUEST = Register("pipe.SwitchIngress.queue_entries.request", width=32, size=QUEUE_ENTRIES)
META = Register("pipe.SwitchIngress.queue_entries.meta", width=16, size=QUEUE_ENTRIES)  # task_type << 8 | flags
TSTAMP = Register("pipe.SwitchIngress.queue_entries.tstamp", width=32, size=QUEUE_ENTRIES)

TABLES = ()
REGISTERS = (*DATA, OWNER, REQUEST, META, TSTAMP)
COUNTERS = ()

_QIDX_MASK = QUEUE_ENTRIES - 1  # qidx_t is bit<17>


class QueueEntries:
    """control QueueEntries: one access per array per packet, write on enqueue, read on dequeue."""

    def __init__(self, store):
        self.data = tuple(store.register(r.name).values for r in DATA)
        self.owner = store.register(OWNER.name).values
        self.request = store.register(REQUEST.name).values
        self.meta = store.register(META.name).values
        self.tstamp = store.register(TSTAMP.name).values

    def apply(self, hdr, ig_md, now: int) -> None:
        i = ig_md.qidx & _QIDX_MASK
        op = ig_md.queue_op
        if op == QOP_TASK_QUEUED:
            # write_desc*: a pre-written task's bytes are its descriptor {slot, length}
            # (big-endian, from the bridged header); write_data*: its inline bytes
            if hdr.bridged_prewrite == 1:
                d = hdr.bridged_slot.to_bytes(4, "big") + hdr.bridged_desc_len.to_bytes(4, "big")
            else:
                d = hdr.data
            d0, d1, d2, d3, d4, d5, d6, d7 = self.data
            d0[i], d1[i], d2[i], d3[i], d4[i], d5[i], d6[i], d7[i] = d
            self.owner[i] = ig_md.owner
            self.request[i] = hdr.request_id
            self.meta[i] = (hdr.task_type << 8) | hdr.flags
            self.tstamp[i] = now
        elif op == QOP_TOKEN_QUEUED:
            self.owner[i] = ig_md.owner
        elif op == QOP_TASK_MATCHED:
            ig_md.peer_worker = self.owner[i]
        elif op == QOP_TOKEN_MATCHED:
            # The token packet becomes the dispatch of the oldest task.
            d0, d1, d2, d3, d4, d5, d6, d7 = self.data
            hdr.data = bytes((d0[i], d1[i], d2[i], d3[i], d4[i], d5[i], d6[i], d7[i]))
            hdr.client_id = self.owner[i]
            hdr.request_id = self.request[i]
            ig_md.entry_meta = self.meta[i]  # split in dispatch
            ig_md.entry_tstamp = self.tstamp[i]
