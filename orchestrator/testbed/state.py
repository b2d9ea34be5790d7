"""Where the emulated testbed keeps its state, and which testbeds are up.

Everything `testbed up` makes lives under one folder per slot, so `down` can find it
again after a crash: keys, sshd configs and logs, each host's deploy root, the
inventory it wrote. The state root is root-owned (sshd's StrictModes checks it).

Which testbeds are up is read from those folders, never remembered apart: a slot
whose `up` finished has an inventory.yaml until its `down` removes the folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

SLOTS = range(16)


def root() -> Path:
    return Path(os.environ.get("RAINMAKER_STATE_DIR", "/var/lib/rainmaker"))


def slot_dir(slot: int) -> Path:
    return root() / "emulated" / f"slot{slot}"


@dataclass(frozen=True)
class UpTestbed:
    slot: int
    name: str
    inventory: Path

    def __str__(self) -> str:
        return f"slot {self.slot}: {self.name}, inventory {self.inventory}"


def testbeds_up() -> list[UpTestbed]:
    """The emulated testbeds of this state root whose `up` finished, by slot."""
    out = []
    base = root() / "emulated"
    for d in sorted(base.glob("slot*")) if base.is_dir() else []:
        m = re.fullmatch(r"slot(\d+)", d.name)
        inv = d / "inventory.yaml"
        if m is None or int(m.group(1)) not in SLOTS or not inv.is_file():
            continue
        try:
            name = str((yaml.safe_load(inv.read_text()) or {}).get("name", "?"))
        except (OSError, yaml.YAMLError, AttributeError):
            name = "?"
        out.append(UpTestbed(int(m.group(1)), name, inv))
    return sorted(out, key=lambda t: t.slot)
