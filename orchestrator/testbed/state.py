"""Where the emulated testbed keeps its state, and which inventory is current.

Everything `testbed up` makes lives under one folder per slot, so `down` can find it
again after a crash: keys, sshd configs and logs, each host's deploy root, the
inventory it wrote. The state root is root-owned (sshd's StrictModes checks it).
"""

from __future__ import annotations

import os
from pathlib import Path


def root() -> Path:
    return Path(os.environ.get("RAINMAKER_STATE_DIR", "/var/lib/rainmaker"))


def slot_dir(slot: int) -> Path:
    return root() / "emulated" / f"slot{slot}"


def pointer() -> Path:
    return root() / "current-inventory"


def current_inventory() -> Path | None:
    """The inventory of the emulated testbed that is up, if any."""
    try:
        p = Path(pointer().read_text().strip())
    except OSError:
        return None
    return p if p.is_file() else None


def set_current(inventory: Path | None) -> None:
    ptr = pointer()
    if inventory is None:
        ptr.unlink(missing_ok=True)
        return
    ptr.parent.mkdir(parents=True, exist_ok=True)
    tmp = ptr.with_suffix(".tmp")
    tmp.write_text(str(inventory) + "\n")
    tmp.replace(ptr)
