"""A MOCK of the Intel P4 Studio SDE, for tests only.

The real SDE is under NDA and open-p4studio takes hours to build, so the tofino_sde
role is converged and verified against this stand-in instead. `install()` copies
tree/ (an SDE folder: $SDE/bf-sde-<version>.manifest and $SDE/install/bin/{bf-p4c,
bf_switchd, tofino-model}, each a small Python program whose first lines say it is a
mock and what it checks) to a folder the switch machine sees, points the programs'
interpreter at rainmaker's Python, and writes $SDE_INSTALL/share/rainmaker-mock.json:
where the mock bf_switchd serves BFRuntime (rainmaker's emulator does the serving) and
the checkout it runs from. There is no kernel module and no ASIC: use switch.target: model.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent / "tree"
CHECKOUT = Path(__file__).resolve().parents[2]
VERSION = "9.13.0"
PROGRAMS = ("bf-p4c", "bf_switchd", "tofino-model")


def install(dest: Path, *, grpc: str, python: str = sys.executable, version: str = VERSION) -> Path:
    """Install the mock SDE as `dest`/bf-sde-<version>; return that folder ($SDE)."""
    sde = Path(dest) / f"bf-sde-{version}"
    if sde.exists():
        shutil.rmtree(sde)
    shutil.copytree(TREE, sde, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = sde / f"bf-sde-{VERSION}.manifest"
    if version != VERSION:
        manifest.rename(sde / f"bf-sde-{version}.manifest")
    for name in PROGRAMS:
        path = sde / "install" / "bin" / name
        lines = path.read_text().splitlines(keepends=True)
        lines[0] = f"#!{python}\n"  # like pip's script installer: the interpreter that has rainmaker
        path.write_text("".join(lines))
        path.chmod(0o755)
    for sub in ("lib", "share/p4/targets", "share/tofinopd"):
        (sde / "install" / sub).mkdir(parents=True, exist_ok=True)
    (sde / "install" / "share" / "rainmaker-mock.json").write_text(
        json.dumps(
            {"mock": "rainmaker tests/mock_sde: not an Intel SDE", "grpc": grpc, "checkout": str(CHECKOUT)}, indent=2
        )
        + "\n"
    )
    return sde
