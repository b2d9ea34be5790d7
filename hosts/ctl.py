"""Python view (ctypes over mmap) of the worker control block in
hosts/dpdk/include/rain_ctl.h. The agent reads statistics and samples and writes the
knobs (quota n_w, enabled, slice) through it. Checked against the C header by
tests/unit/test_proto_layout.py. Standard library only (deployed with the agents).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

MAGIC = 0x314C54434E494152
VERSION = 1
MAX_WORKERS = 64
SAMPLES = 4096
CACHE_LINE = 64


class Header(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("n_workers", ctypes.c_uint32),
        ("samples_per_worker", ctypes.c_uint32),
        ("worker_base_id", ctypes.c_uint32),
        ("tsc_hz", ctypes.c_uint64),
        ("start_unix_ns", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("ready", ctypes.c_uint32),
        ("pad_", ctypes.c_uint8 * 16),
    ]


class Knobs(ctypes.Structure):
    _fields_ = [
        ("quota", ctypes.c_uint32),
        ("enabled", ctypes.c_uint32),
        ("slice", ctypes.c_uint32),
        ("generation", ctypes.c_uint32),
        ("pad_", ctypes.c_uint8 * 48),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("tasks_done", ctypes.c_uint64),
        ("tokens_sent", ctypes.c_uint64),
        ("polls", ctypes.c_uint64),
        ("empty_polls", ctypes.c_uint64),
        ("desc_mismatch", ctypes.c_uint64),
        ("failed", ctypes.c_uint64),
        ("fifo_len", ctypes.c_uint32),
        ("outstanding", ctypes.c_uint32),
        ("busy_ns", ctypes.c_uint64),
    ]


class Sample(ctypes.Structure):
    _fields_ = [
        ("local_qdelay_ns", ctypes.c_uint32),
        ("service_ns", ctypes.c_uint32),
        ("switch_qdelay_ns", ctypes.c_uint32),
        ("switch_qlen", ctypes.c_uint32),
    ]


class Ring(ctypes.Structure):
    _fields_ = [("head", ctypes.c_uint64), ("pad_", ctypes.c_uint8 * 56)]


class Worker(ctypes.Structure):
    _fields_ = [
        ("knobs", Knobs),
        ("stats", Stats),
        ("ring", Ring),
        ("samples", Sample * SAMPLES),
    ]


def size(n_workers: int) -> int:
    return ctypes.sizeof(Header) + n_workers * ctypes.sizeof(Worker)


class ControlBlock:
    """The control block file a rain-worker created, mapped read-write."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR)
        try:
            total = os.fstat(fd).st_size
            if total < ctypes.sizeof(Header):
                raise ValueError(f"{self.path}: {total} bytes is too small for a control block")
            self._mm = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        self.header = Header.from_buffer(self._mm, 0)
        if self.header.magic != MAGIC or self.header.version != VERSION:
            raise ValueError(
                f"{self.path}: not a rain control block (magic {self.header.magic:#x}, version {self.header.version})"
            )
        n = self.header.n_workers
        if size(n) > total:
            raise ValueError(f"{self.path}: {total} bytes cannot hold {n} workers")
        self.workers = [
            Worker.from_buffer(self._mm, ctypes.sizeof(Header) + i * ctypes.sizeof(Worker)) for i in range(n)
        ]
        self._cursor = [w.ring.head for w in self.workers]

    def set_quota(self, i: int, quota: int) -> None:
        k = self.workers[i].knobs
        k.quota = quota
        k.generation += 1

    def set_enabled(self, i: int, enabled: bool) -> None:
        k = self.workers[i].knobs
        k.enabled = int(enabled)
        k.generation += 1

    def set_slice(self, i: int, slice_: int) -> None:
        k = self.workers[i].knobs
        k.slice = slice_
        k.generation += 1

    def new_samples(self, i: int) -> tuple[list[tuple[int, int, int, int]], int]:
        """Samples of worker i written since the last call, and how many were overwritten unread."""
        w = self.workers[i]
        head = w.ring.head
        start = self._cursor[i]
        lost = max(0, head - start - SAMPLES)
        start = max(start, head - SAMPLES)
        out = []
        for seq in range(start, head):
            s = w.samples[seq % SAMPLES]
            out.append((s.local_qdelay_ns, s.service_ns, s.switch_qdelay_ns, s.switch_qlen))
        self._cursor[i] = head
        return out, lost

    def close(self) -> None:
        self.header = None  # type: ignore[assignment]
        self.workers = []
        try:
            self._mm.close()
        except BufferError:
            pass  # views still alive; the map goes with the process
