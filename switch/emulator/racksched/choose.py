"""Choose (switch/p4/racksched/choose.p4): which workers a packet's loads concern. A
task's first pass draws 16 random bits and the pick table's range holding them names
two distinct workers; its second pass takes the winner from the resubmit header; a
REPORT concerns its sender."""

from __future__ import annotations

import bisect
import random

from ..headers import EV_NO_WORKER, KIND_TASK
from ..schema import Action, Key, Param, Table
from .constants import CHOICE_PAIRS, EV_CHOSEN, RS_CHOOSE, RS_DISPATCH, RS_NONE, RS_REPORT

PICK = Table(  # key ig_md.rs_rand : range @name("rand")
    "pipe.SwitchIngress.choose.pick",
    keys=[Key("rand", 16, "Range")],
    actions=[
        Action("SwitchIngress.choose.choose", [Param("first", 16), Param("second", 16)]),
        Action("SwitchIngress.choose.no_workers"),
    ],
    size=CHOICE_PAIRS,
    default_action="no_workers",
)

TABLES = (PICK,)
REGISTERS = ()
COUNTERS = ()


class Choose:
    """control Choose. The pick table is a TCAM table, which the emulator searches rule by
    rule; its ranges, as the controller installs them, do not overlap, so a binary search
    over them finds the same entry (built again whenever the table changes; overlapping
    ranges, which only priorities order, fall back to the table's own lookup)."""

    def __init__(self, store, rng: random.Random | None = None):
        self.table = store.table(PICK.name)
        self._find_rule = self.table.finder
        self._draw = (rng or random.Random()).getrandbits  # Random<bit<16>>
        self._indexed: list | None = None  # the rules list the index was built from
        self._lows: list[int] | None = None
        self._spans: list[tuple[int, int, object]] = []

    def _find(self, values: tuple):
        rules = self.table.rules
        if rules is not self._indexed:
            spans = sorted((r[2][0][1], r[2][0][2], r[3]) for r in rules)
            disjoint = all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
            self._spans, self._lows = spans, [s[0] for s in spans] if disjoint else None
            self._indexed = rules
        if self._lows is None:
            return self._find_rule(values)
        i = bisect.bisect_right(self._lows, values[0]) - 1
        if i < 0:
            return None
        _low, high, entry = self._spans[i]
        return entry if values[0] <= high else None

    def apply(self, hdr, ig_md) -> None:
        if ig_md.resubmit_flag:  # second_pass
            ig_md.rs_op = RS_DISPATCH
            hdr.worker_id = ig_md.rs_a = ig_md.rs_b = ig_md.resubmit_worker
        elif hdr.kind == KIND_TASK:
            ig_md.rs_rand = self._draw(16)  # draw
            entry = self._find((ig_md.rs_rand,))
            call = self.table.default if entry is None else entry.call
            if call.action == "choose":
                ig_md.rs_op = RS_CHOOSE
                ig_md.rs_a = call.params["first"]
                ig_md.rs_b = call.params["second"]
                ig_md.event = EV_CHOSEN
            else:  # no_workers
                ig_md.rs_op = RS_NONE
                ig_md.drop_ctl = 1
                ig_md.event = EV_NO_WORKER
        else:  # report
            ig_md.rs_op = RS_REPORT
            ig_md.rs_a = ig_md.rs_b = hdr.worker_id
