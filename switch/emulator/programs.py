"""The P4 programs the software switch runs, by name (`python -m switch.emulator
--program NAME`, `rainmaker switch start --program NAME`). Each is a module of this
package with the same three things:

    PROGRAM                         its bf-rt.json as data (schema.Program)
    make_store() -> TableStore      all tables empty, registers zero
    pipeline(store, on_drop=None)   the data plane over that store (.process(port, frame, n, emit))

A module is imported only when its program is asked for.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# name -> module; the name is the P4 top file's (switch/p4/<name>.p4)
MODULES = {
    "rain": "switch.emulator.rain",
    "pallas": "switch.emulator.pallas",
    "draconis": "switch.emulator.draconis",
    "r2p2": "switch.emulator.r2p2",
    "racksched": "switch.emulator.racksched",
    "ipv4_forward": "switch.emulator.ipv4_forward",
}
NAMES = tuple(MODULES)


def load(name: str) -> ModuleType:
    """The program's module; KeyError for a name not in MODULES (argparse's choices
    and the CLI refuse those first)."""
    return importlib.import_module(MODULES[name])
