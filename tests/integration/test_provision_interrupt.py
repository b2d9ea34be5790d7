"""Ctrl-C during `rainmaker provision` exits 130 saying what stopped (ansible-runner
reports such a run as "canceled": it was exit status 1 and "canceled").

The host is a listener on loopback that accepts SSH's connection and never answers:
Ansible is then busy connecting, which the listener sees, and the test sends SIGINT
at that moment. No testbed, no other slot, nothing beyond loopback."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RACK1 = REPO / "orchestrator/inventory/examples/rack1.yaml"


def test_ctrl_c_during_provision_exits_130(tmp_path):
    # A short state folder: ssh's ControlPath under it must stay below 108 bytes, which
    # pytest's tmp_path under xdist (.../popen-gw1/test_ctrl_c_.../) does not.
    state = Path(tempfile.mkdtemp(prefix="rm-int-", dir="/tmp"))
    inv = yaml.safe_load(RACK1.read_text())
    machines = [inv["switch"], *inv["hosts"]]
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in machines]  # one SSH address each
    inv["name"] = "hanging"
    for m, lst in zip(machines, listeners):
        m["mgmt"] = {"address": "127.0.0.1", "port": lst.getsockname()[1], "user": "root"}
    inv["ssh"] = {"key": str(tmp_path / "id"), "known_hosts": str(tmp_path / "known_hosts")}
    (tmp_path / "known_hosts").write_text("")
    path = tmp_path / "hanging.yaml"
    path.write_text(yaml.safe_dump(inv))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from orchestrator.cli import main; main()", "provision", "--check", "-i", str(path)],
        cwd=REPO,
        env={**os.environ, "RAINMAKER_STATE_DIR": str(state)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not a background job's SIG_IGN
    )
    held = []
    try:
        deadline = time.monotonic() + 120
        while not held:  # until Ansible's ssh connects: then provision is busy
            ready, _, _ = select.select(listeners, [], [], 0.2)
            held += [lst.accept()[0] for lst in ready]
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "ansible never connected"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for c in held + listeners:
            c.close()
        shutil.rmtree(state, ignore_errors=True)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err
    assert "interrupted: the dry run of hanging stopped" in err, err
    assert "redo it with the same `rainmaker provision` command" in err
