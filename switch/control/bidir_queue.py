"""BidirQueue (switch/p4/bidir_queue.p4): per slice its region of the queue entries,
its capacity and its RDMA ring (config_slice), and the registers of its queue: the
signed token balance and the head/tail pointers (absolute entry indexes that wrap
inside the region)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from switch.bfrt.client import Client

from . import _cells
from .constants import MAX_SLICES


@dataclass(frozen=True)
class SliceConfig:
    """One config_slice entry, in the controller's terms."""

    slice: int
    first: int  # region of the queue entries: [first, last]
    last: int
    ring_slots: int = 0  # RDMA ring slots of the slice; 0: no pre-writing
    mgid: int = 0  # multicast group of its workers; 0: none
    # Descriptors a worker of the slice may hold dispatched but not yet read (its token
    # quota: its FIFO of dispatched tasks reads a slot only when it runs the task).
    ring_hold: int = 0

    @property
    def cap(self) -> int:
        return self.last - self.first + 1

    @property
    def large_cap(self) -> int:
        """How many tasks a large task may find waiting and still queue: the slot it
        takes then held no task still waiting (slots are taken and the queue is served
        in FIFO order), nor, with `ring_hold` kept free, one a worker holds unread."""
        if not self.ring_slots or not self.mgid:
            return 0
        return max(0, min(self.cap, self.ring_slots - self.ring_hold))

    @property
    def last_slot(self) -> int:
        return max(self.ring_slots - 1, 0)

    def params(self) -> dict[str, int]:
        return {
            "first": self.first,
            "last": self.last,
            "neg_cap": (-self.cap) & 0xFFFFFFFF,
            "neg_large_cap": (-self.large_cap) & 0xFFFFFFFF,
            "last_slot": self.last_slot,
            "mgid": self.mgid,
        }


class BidirQueue:
    TABLE = "pipe.SwitchIngress.bidir_queue.config_slice"
    SET_CONFIG = "SwitchIngress.bidir_queue.set_slice_config"
    BALANCE = "pipe.SwitchIngress.bidir_queue.balance"
    HEAD = "pipe.SwitchIngress.bidir_queue.head"
    TAIL = "pipe.SwitchIngress.bidir_queue.tail"

    def __init__(self, client: Client):
        self.client = client
        self.table = client.table(self.TABLE)
        self.balance = client.register(self.BALANCE, signed=True)
        self.head = client.register(self.HEAD)
        self.tail = client.register(self.TAIL)

    def program(self, configs: Iterable[SliceConfig]) -> None:
        """Exactly these slices configured, their queues empty and re-based."""
        configs = list(configs)
        _cells.empty(self.table)
        batch = self.client.batch()
        for c in configs:
            batch.add(self.table, c.slice, self.SET_CONFIG, c.params())
        batch.send()
        self.reset(configs)

    def config_slice(self, c: SliceConfig) -> None:
        """Add or change one slice's configuration (its queue registers are not touched)."""
        self.table.upsert(c.slice, self.SET_CONFIG, c.params())

    def reset(self, configs: Iterable[SliceConfig]) -> None:
        """Balance 0 in every slice; head and tail at the first entry of each configured
        slice's region (0 for the others)."""
        first = {c.slice: c.first for c in configs}
        _cells.write_cells(self.client, self.balance, {s: 0 for s in range(MAX_SLICES)})
        base = {s: first.get(s, 0) for s in range(MAX_SLICES)}
        _cells.write_cells(self.client, self.head, base)
        _cells.write_cells(self.client, self.tail, base)

    def configs(self) -> dict[int, SliceConfig]:
        """The slices configured on the switch, read back."""
        out = {}
        for e in self.table.entries():
            d = e.data
            s = e.key["ig_md.slice"]
            ring = d["last_slot"] + 1 if d["mgid"] else 0
            large = -(((d["neg_large_cap"] + 0x80000000) & 0xFFFFFFFF) - 0x80000000)
            cap = d["last"] - d["first"] + 1
            # ring_hold is not stored: recover it where the bound is not the capacity
            hold = ring - large if ring and large < cap else 0
            out[s] = SliceConfig(s, d["first"], d["last"], ring, d["mgid"], max(hold, 0))
        return out

    def state(self) -> dict[str, list[list[int]]]:
        """balance, head, tail: [pipe][slice]."""
        return {
            name: _cells.values_per_pipe(reg.read_all())
            for name, reg in (("balance", self.balance), ("head", self.head), ("tail", self.tail))
        }

    def clear(self) -> None:
        _cells.empty(self.table)
        self.reset(())


def occupied(region_first: int, region_last: int, head: int, balance: int) -> list[tuple[int, int]]:
    """The entries a queue holds: |balance| entries from head, wrapping inside the
    region; as [first, last] ranges (two when it wraps)."""
    n = abs(balance)
    size = region_last - region_first + 1
    if n == 0 or size <= 0 or not region_first <= head <= region_last:
        return []
    n = min(n, size)
    end = head + n - 1
    if end <= region_last:
        return [(head, end)]
    return [(head, region_last), (region_first, region_first + end - region_last - 1)]


def queue_summary(c: SliceConfig, balance: int, head: int, tail: int) -> Mapping[str, int | str]:
    return {
        "first": c.first,
        "last": c.last,
        "capacity": c.cap,
        "balance": balance,
        "head": head,
        "tail": tail,
        "tasks": max(-balance, 0),
        "tokens": max(balance, 0),
    }
