"""The playbooks and roles pass ansible-lint's strictest (production) profile."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _ansible_lint() -> str | None:
    exe = Path(sys.executable).parent / "ansible-lint"
    return str(exe) if exe.exists() else shutil.which("ansible-lint")


def test_lint_config_asks_for_the_production_profile():
    cfg = yaml.safe_load((REPO / ".ansible-lint").read_text())
    assert cfg["profile"] == "production"
    assert cfg["offline"] is True


@pytest.mark.timeout(300)
def test_ansible_lint_production_profile_passes(tmp_path):
    exe = _ansible_lint()
    if exe is None:
        pytest.skip("ansible-lint is not installed (pip install -e '.[test]')")
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
        "NO_COLOR": "1",
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),  # not the user's ~/.ansible
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
    }
    r = subprocess.run(
        [exe, "--profile", "production", "--offline"], cwd=REPO, env=env, capture_output=True, text=True, timeout=280
    )
    assert r.returncode == 0, f"ansible-lint failed:\n{r.stdout}\n{r.stderr}"
    assert "Profile 'production' was required, and it passed" in r.stderr + r.stdout
