"""Both agents remove their program's DPDK runtime folder once it has ended, also when
the program died without removing it itself (a stand-in program here: it makes the
folder where the EAL would, says it is ready, and exits with an error)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hosts.agent.common import runtime_dir

REPO = Path(__file__).resolve().parents[2]

FAKE = """#!/bin/sh
# a DPDK program that dies after init: its EAL folder stays
for a in "$@"; do case "$a" in --file-prefix=*) prefix="${a#--file-prefix=}";; esac; done
mkdir -p "%s/$prefix" && echo x > "%s/$prefix/config"
echo "rain-%s ready"
exit 3
"""


@pytest.mark.parametrize("role", ["client", "worker"])
def test_the_agent_removes_the_runtime_folder_its_program_left(role, tmp_path):
    prefix = f"rmut{os.getpid()}{role[0]}"
    rt = runtime_dir({"file_prefix": prefix})
    fake = tmp_path / f"rain-{role}"
    fake.write_text(FAKE % (rt.parent, rt.parent, role))
    fake.chmod(0o755)
    load = {"src_ip": "10.99.0.1", "dst_mac": "02:00:00:00:00:02", "dst_ip": "10.99.0.2"}
    load |= {"warmup_s": 0.1, "measure_s": 0.1, "rate": 10, "classes": ["task:1:0:exp:10000:8"]}
    work = {"switch_mac": "02:00:00:00:00:fe", "switch_ip": "10.99.0.254", "src_ip": "10.99.0.3", "threads": 1}
    cfg = {
        "binary": str(fake),
        "eal": {"lcores": "0", "file_prefix": prefix},
        "out_dir": str(tmp_path / "out"),
        role: load if role == "client" else work | {"worker_base": 0},
    }
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "hosts.agent", role, "--config", str(tmp_path / "cfg.json")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1 and "rain-agent error" in r.stderr, r.stdout + r.stderr
        assert (tmp_path / "out" / f"{role}.log").read_text().startswith(f"rain-{role} ready")  # it ran
        assert not rt.exists(), f"the {role} agent left {rt}"
    finally:
        shutil.rmtree(rt, ignore_errors=True)
