"""Constants of RackSched-SW (switch/p4/racksched/constants.p4) beside the shared ones
(switch/emulator/headers.py); tests/switch/test_racksched.py holds them to the P4."""

from __future__ import annotations

CHOICE_PAIRS = 4096  # ranges of the 16-bit draw the pick table holds: every pair of up to 64 workers
WORKER_INDEX_MASK = 0x3FF  # worker_index_t: log2(MAX_WORKERS) bits of a worker id

RS_NONE = 0
RS_CHOOSE = 1  # a task's first pass: read both choices' loads
RS_DISPATCH = 2  # its second pass: add one to the winner's load
RS_REPORT = 3  # a worker's report sets its load

EV_CHOSEN = 16  # a task's first pass: resubmitted to the less loaded choice
EV_REPORT = 17  # a worker's load set by its REPORT
EV_UNKNOWN_WORKER = 18  # dropped: a REPORT from a worker id with no entry
