"""Pallas-SW's own constants (switch/p4/pallas/defs.p4); the rest are Rain's
(switch/emulator/headers.py). tests/unit/test_pallas_emulator.py holds them to the P4."""

from __future__ import annotations

SCHEDULE_ENTRIES = 4096

EV_NO_POOL = 16  # rejected: the task's type maps to no pool
EV_POOL_EMPTY = 17  # rejected: its pool has no workers (no config, or no worker at the position)
