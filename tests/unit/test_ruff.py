"""The Python sources pass ruff's linter and are formatted as `ruff format` writes them
(the rules are in pyproject.toml; `make lint` runs the same two commands)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).parent / "ruff"

pytestmark = pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed (pip install -e '.[test]')")


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean(args):
    r = subprocess.run([str(RUFF), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    fix = ".venv/bin/ruff check --fix ." if args[0] == "check" else ".venv/bin/ruff format ."
    assert r.returncode == 0, f"ruff {' '.join(args)} failed (fix: {fix}):\n{r.stdout}\n{r.stderr}"
