"""RackSched-SW's controller (RackSchedController, for switch/p4/racksched.p4) and its
choice table (switch/p4/racksched/choose.p4): which two workers a task's 16-bit
random draw names.

The P4 draws 16 random bits and looks them up in a range table; each range names an
ordered pair (first, second) of distinct workers. These are the ranges: the pairs in
"offset-major" order, (w[i], w[(i + d) % n]) for d = 1, 2, ... and every i, so each
worker is first and second equally often; every ordered pair of up to 64 workers fits
the table's CHOICE_PAIRS entries, and with more workers the first CHOICE_PAIRS of that
order do. The 65536 draws are split among the pairs as evenly as integers allow.

Only k = 2: one pass reads each of the two load copies once, so more choices would
need more copies (and stages) than the program has; other values are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from switch.p4.source import constants

from .baseline import BaselineController, Worker
from .errors import ControllerError
from .registration import ClientRegistration

_P4 = constants(program="racksched")
CHOICE_PAIRS: int = _P4["CHOICE_PAIRS"]
MAX_WORKERS: int = _P4["MAX_WORKERS"]
DRAWS = 1 << 16  # Random<bit<16>>
SUPPORTED_K = 2


def check_k(k: int) -> None:
    """Refuse any number of choices but the program's 2."""
    if k != SUPPORTED_K:
        raise ControllerError(
            f"RackSched-SW's switch program does power-of-2 choices only, not k = {k}: a pass "
            "reads each of its two load copies once",
            fix="set the spec's baseline.k to 2",
            subject="baseline.k",
        )


def choice_pairs(workers: Sequence[int], k: int = SUPPORTED_K) -> list[tuple[int, int]]:
    """The ordered pairs the pick table holds (see the module's docstring)."""
    check_k(k)
    ids = list(workers)
    if not ids:
        raise ControllerError("RackSched-SW needs at least one worker", subject="workers")
    if len(set(ids)) != len(ids):
        raise ControllerError(f"worker ids repeat: {sorted(ids)}", subject="workers")
    bad = [w for w in ids if not 0 <= w < MAX_WORKERS]
    if bad:
        raise ControllerError(f"worker ids {bad} are outside 0..{MAX_WORKERS - 1}, the loads' index", subject=bad[0])
    n = len(ids)
    if n == 1:
        return [(ids[0], ids[0])]  # no second worker to choose: both choices are the one
    pairs = [(ids[i], ids[(i + d) % n]) for d in range(1, n) for i in range(n)]
    return pairs[:CHOICE_PAIRS]


def pick_entries(workers: Sequence[int], k: int = SUPPORTED_K) -> list[tuple[int, int, int, int]]:
    """(low, high, first, second) for each entry of the pick table: ranges of the draw
    that cover 0..65535 exactly once, their sizes differing by at most one."""
    pairs = choice_pairs(workers, k)
    share, extra = divmod(DRAWS, len(pairs))
    out, low = [], 0
    for i, (first, second) in enumerate(pairs):
        size = share + (1 if i < extra else 0)
        out.append((low, low + size - 1, first, second))
        low += size
    return out


class RackSchedController(BaselineController):
    """Programs a switch running switch/p4/racksched.p4 (RackSched-SW) through BFRuntime:
    forward (every inventory host), select_worker (worker id -> its host's port, MAC,
    IP; a REPORT's sender is looked up there too) and the pick table's ranges over
    every registered worker (pick_entries). Loads start at zero: the workers' REPORTs
    set them."""

    PROGRAM = "racksched"
    TITLE = "RackSched-SW"
    PICK = "pipe.SwitchIngress.choose.pick"
    SELECT = "pipe.SwitchIngress.dispatch.select_worker"
    TABLES: ClassVar[tuple[str, ...]] = (PICK, SELECT)
    REGISTERS: ClassVar[tuple[str, ...]] = ("pipe.SwitchIngress.loads.load_a", "pipe.SwitchIngress.loads.load_b")
    COUNTERS: ClassVar[tuple[str, ...]] = ("pipe.SwitchIngress.dispatch.dispatches", "pipe.SwitchIngress.loads.reports")

    def check_settings(self) -> None:
        check_k(self.settings.k)

    def check_workers(self, workers: dict[int, Worker], *, programming: bool) -> None:
        if workers:
            pick_entries(sorted(workers), self.settings.k)  # its refusals, before any write

    def _pick(self, workers: Sequence[int]) -> None:
        """The pick table holds exactly the ranges for these workers (none: every task dropped)."""
        pick = self.tables[self.PICK]
        pick.clear()
        if not workers:
            return
        batch = self.client.batch()
        for low, high, first, second in pick_entries(sorted(workers), self.settings.k):
            batch.add(pick, {"rand": (low, high)}, "choose", {"first": first, "second": second}, priority=1)
        batch.send()

    def _entries(self, workers: Iterable[Worker]) -> None:
        batch = self.client.batch()
        for w in sorted(workers, key=lambda x: x.id):
            batch.upsert(self.tables[self.SELECT], w.id, "to_worker", {"port": w.dev_port, "dmac": w.mac, "dip": w.ip})
        batch.send()

    def _install(self, workers: dict[int, Worker], clients: dict[int, ClientRegistration]) -> None:
        self._entries(workers.values())
        self._pick(list(workers))  # a task can choose a worker only once it has an entry

    def _add_workers(self, new: dict[int, Worker], everyone: dict[int, Worker]) -> None:
        self._entries(new.values())
        self._pick(list(everyone))

    def _remove_worker(self, w: Worker, rest: dict[int, Worker]) -> None:
        self._pick(list(rest))  # no task chooses it from here on
        self.tables[self.SELECT].delete(w.id)
        for r in self.registers.values():
            r.write(w.id, 0)

    def _state(self, regs: dict[str, dict]) -> dict:
        a, b = self.pipe_cells(regs, "load_a"), self.pipe_cells(regs, "load_b")
        pairs = len(choice_pairs(sorted(self._workers), self.settings.k)) if self._workers else 0
        return {"k": self.settings.k, "pairs": pairs, "loads": {str(w): [a[w], b[w]] for w in sorted(self._workers)}}
