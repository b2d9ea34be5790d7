"""Choose (switch/p4/racksched/choose.p4): which workers a packet's loads concern. A
task's first pass draws 16 random bits and the pick table's range holding them names
two distinct workers; its second pass takes the winner from the resubmit header; a
REPORT concerns its sender."""

from __future__ import annotations

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
    """control Choose."""

    def __init__(self, store, rng: random.Random | None = None):
        self.table = store.table(PICK.name)
        self._find = self.table.finder
        self._draw = (rng or random.Random()).getrandbits  # Random<bit<16>>

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
