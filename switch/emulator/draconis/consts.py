"""Constants of the Draconis-SW program only (switch/p4/draconis/consts.p4); the
shared ones are in switch/emulator/headers.py."""

from __future__ import annotations

# ig_md.queue_op beside headers.QOP_*: a PULL that found the queue empty (one that
# takes the head is QOP_TOKEN_MATCHED, so queue_entries reads the entry for it).
QOP_PULL_EMPTY = 6

# Event counter index beside headers.EV_*: a PULL answered EMPTY.
EV_PULL_EMPTY = 16
