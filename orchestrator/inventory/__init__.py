"""The testbed inventory: load, validate, export."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from .. import yamlfile
from ..errors import InventoryError, Problem, UsageError
from .model import Emulation, Host, Hugepages, Inventory, Jump, Mgmt, Nic, Ssh, Switch, SwitchPort
from .validate import check, warnings

__all__ = [
    "AmbiguousInventory",
    "Emulation",
    "Host",
    "Hugepages",
    "Inventory",
    "Jump",
    "Mgmt",
    "Nic",
    "Ssh",
    "Switch",
    "SwitchPort",
    "load",
    "resolve_path",
    "warnings",
]


def load(path: str | os.PathLike) -> Inventory:
    """Load and validate an inventory file; raise InventoryError listing every problem."""
    path = Path(path)
    problems: list[Problem] = []
    located = yamlfile.load(path, problems)
    if located is None:
        raise InventoryError(str(path), problems)
    if not isinstance(located.data, dict):
        problems.append(
            Problem(
                "",
                "an inventory is a mapping with name, switch and hosts",
                "start from examples/inventory-hardware.yaml",
                1,
            )
        )
        raise InventoryError(str(path), problems)
    try:
        inv = Inventory.model_validate(located.data)
    except ValidationError as e:
        problems += yamlfile.pydantic_problems(e, located, Inventory)
        raise InventoryError(str(path), problems) from None
    for prob in check(inv):
        prob.line = prob.line or located.line_of(prob.path)
        problems.append(prob)
    if problems:
        raise InventoryError(str(path), problems)
    return _absolute(inv, path.parent)


def _absolute(inv: Inventory, base: Path) -> Inventory:
    """Resolve relative key paths against the inventory's folder."""

    def fix(p: Path | None) -> Path | None:
        if p is None:
            return None
        p = p.expanduser()
        return p if p.is_absolute() else (base / p).resolve()

    jump = inv.ssh.jump
    if jump is not None:
        jump = jump.model_copy(update={"key": fix(jump.key), "known_hosts": fix(jump.known_hosts)})
    ssh = inv.ssh.model_copy(update={"key": fix(inv.ssh.key), "known_hosts": fix(inv.ssh.known_hosts), "jump": jump})
    sw = inv.switch
    if sw.mgmt is not None:
        sw = sw.model_copy(update={"mgmt": sw.mgmt.model_copy(update={"key": fix(sw.mgmt.key)})})
    hosts = [h.model_copy(update={"mgmt": h.mgmt.model_copy(update={"key": fix(h.mgmt.key)})}) for h in inv.hosts]
    return inv.model_copy(update={"ssh": ssh, "switch": sw, "hosts": hosts})


class AmbiguousInventory(UsageError):
    """No inventory was named and several emulated testbeds are up: which one is meant
    is the user's to say (picking one ran a demo on another slot's machines)."""

    def __init__(self, testbeds: list):
        self.testbeds = testbeds
        listing = "\n".join(f"    {t}" for t in testbeds)
        super().__init__(
            f"no inventory given and {len(testbeds)} emulated testbeds are up:\n{listing}\n"
            "  rainmaker does not guess which one you mean",
            fix=f"pass -i FILE (e.g. -i {testbeds[0].inventory}) or set RAINMAKER_INVENTORY=FILE, "
            "or take the testbeds you do not use down with `rainmaker testbed down --slot N`",
        )


def resolve_path(explicit: str | None) -> Path:
    """Which inventory a command uses: -i, then $RAINMAKER_INVENTORY, then the emulated
    testbed that is up when exactly one is; with several up, an AmbiguousInventory error."""
    from ..testbed import state

    if explicit:
        return Path(explicit)
    env = os.environ.get("RAINMAKER_INVENTORY")
    if env:
        return Path(env)
    up = state.testbeds_up()
    if len(up) == 1:
        return up[0].inventory
    if up:
        raise AmbiguousInventory(up)
    raise UsageError(
        "no inventory given and no emulated testbed is up",
        fix="bring one up with `rainmaker testbed up`, or pass -i FILE (or set RAINMAKER_INVENTORY)",
    )
