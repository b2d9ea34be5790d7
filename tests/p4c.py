"""The Tofino compiler, for tests that compile the P4 programs.

A compiler is found, in this order, at:
- `RAINMAKER_P4C`: a `compile.sh PROG.p4 OUTDIR`-style wrapper (p4lang/p4c's open Tofino
  back end, p4c-barefoot then bfas), or
- `$SDE_INSTALL/bin/bf-p4c` (default `$SDE/install`): Intel's compiler from the SDE.
Without one, `compiled()` skips the calling test and says why. Each program compiles
once per test session; its output folder holds `bfrt.json` and the compiler's logs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from switch.p4.source import P4_DIR

COMPILE_TIMEOUT_S = 900


@dataclass(frozen=True)
class Compiled:
    program: str
    ok: bool
    outdir: Path
    log: str  # the compiler's stdout and stderr

    @property
    def bfrt_json(self) -> Path:
        return self.outdir / "bfrt.json"


def compiler_command(prog: Path, outdir: Path) -> list[str] | None:
    """The command that compiles `prog` into `outdir`, or None when no compiler is at hand."""
    wrapper = os.environ.get("RAINMAKER_P4C")
    if wrapper:
        return [wrapper, str(prog), str(outdir)]
    sde = os.environ.get("SDE")
    install = os.environ.get("SDE_INSTALL") or (f"{sde}/install" if sde else None)
    if install and Path(install, "bin", "bf-p4c").exists():
        return [
            str(Path(install, "bin", "bf-p4c")),
            "--target",
            "tofino",
            "--arch",
            "tna",
            "--bf-rt-schema",
            str(outdir / "bfrt.json"),
            "-o",
            str(outdir),
            str(prog),
        ]
    return None


_cache: dict[str, Compiled] = {}
_root: Path | None = None


def compiled(program: str) -> Compiled:
    """`switch/p4/<program>.p4` compiled for Tofino 1 (once per session), or a skip."""
    global _root
    prog = P4_DIR / f"{program}.p4"
    if program in _cache:
        return _cache[program]
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="rainmaker-p4c-"))
    outdir = _root / program
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    cmd = compiler_command(prog, outdir)
    if cmd is None:
        pytest.skip("no Tofino compiler: set RAINMAKER_P4C to a compile.sh, or SDE to an SDE with bf-p4c")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=P4_DIR)
        result = Compiled(program, r.returncode == 0, outdir, r.stdout + r.stderr)
    except subprocess.TimeoutExpired as e:
        result = Compiled(
            program, False, outdir, f"timed out after {COMPILE_TIMEOUT_S} s\n{e.stdout or ''}{e.stderr or ''}"
        )
    _cache[program] = result
    return result
