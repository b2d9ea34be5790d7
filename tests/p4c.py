"""The Tofino compiler, for tests that compile the P4 programs.

A compiler is found, in this order, at:
- `RAINMAKER_P4C`: a `compile.sh PROG.p4 OUTDIR`-style wrapper (p4lang/p4c's open Tofino
  back end, p4c-barefoot then bfas), or
- `$SDE_INSTALL/bin/bf-p4c` (default `$SDE/install`): Intel's compiler from the SDE.
Without one, `compiled()` skips the calling test and says why. Each program compiles
once per test run (SHARED_ROOT: the run's processes share it); its output folder holds
`bfrt.json` and the compiler's logs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from switch.p4 import source
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
# Shared by the processes of one test run (pytest-xdist gives them one run id): each
# program is compiled once per run, by whichever process asks first; the others wait
# on its lock and read the same output. A new run compiles again.
RUN_ID = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
SHARED_ROOT = Path(tempfile.gettempdir()) / "rainmaker-p4c" / RUN_ID


def _key(program: str, cmd: list[str]) -> str:
    h = hashlib.sha256()
    for f in source.files(program):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update(cmd[0].encode())
    return h.hexdigest()[:16]


def compiled(program: str) -> Compiled:
    """`switch/p4/<program>.p4` compiled for Tofino 1 (once per test run), or a skip."""
    if program in _cache:
        return _cache[program]
    prog = P4_DIR / f"{program}.p4"
    cmd = compiler_command(prog, Path("OUT"))
    if cmd is None:
        pytest.skip("no Tofino compiler: set RAINMAKER_P4C to a compile.sh, or SDE to an SDE with bf-p4c")
    outdir = SHARED_ROOT / f"{program}-{_key(program, cmd)}"
    if not SHARED_ROOT.exists():
        _prune(SHARED_ROOT.parent)
        SHARED_ROOT.mkdir(parents=True, exist_ok=True)
    with open(SHARED_ROOT / f"{outdir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process compiling it: wait, then reuse
        done = outdir / "result.json"
        if done.exists():
            r = json.loads(done.read_text())
            result = Compiled(program, r["ok"], outdir, r["log"])
        else:
            if outdir.exists():
                shutil.rmtree(outdir)  # an interrupted compile's leftovers
            outdir.mkdir(parents=True)
            result = _compile(program, compiler_command(prog, outdir), outdir)
            done.write_text(json.dumps({"ok": result.ok, "log": result.log}))
    _cache[program] = result
    return result


def _prune(root: Path, older_than_s: float = 86400) -> None:
    """Earlier runs' compiler outputs (a day old and more)."""
    now = time.time()
    for d in root.glob("*") if root.exists() else []:
        if d.is_dir() and now - d.stat().st_mtime > older_than_s:
            shutil.rmtree(d, ignore_errors=True)


def _compile(program: str, cmd: list[str], outdir: Path) -> Compiled:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, cwd=P4_DIR)
        return Compiled(program, r.returncode == 0, outdir, r.stdout + r.stderr)
    except subprocess.TimeoutExpired as e:
        return Compiled(
            program, False, outdir, f"timed out after {COMPILE_TIMEOUT_S} s\n{e.stdout or ''}{e.stderr or ''}"
        )
