"""Children forked after gRPC has started (ansible-runner's pexpect child, when `run`
starts a Tofino's bf_switchd through the tofino_sde role after reading the switch's
status) must not run gRPC's fork handlers: with them, the child could die before it
exec'd ("epoll_wait error: Bad file descriptor", ansible-playbook rc -1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import orchestrator  # what every rainmaker command imports first
import pexpect
from switch.bfrt.client import Client
from switch.emulator.bfrt_server import serve
from switch.emulator.tables import TableStore
from tests.unit.test_bfrt import PROGRAM

srv = serve(TableStore(PROGRAM, pipes=1), "127.0.0.1", 0)
with Client(f"127.0.0.1:{srv.port}", PROGRAM.name, client_id=1, bind=True):
    for _ in range(10):  # forks while gRPC's threads are alive, as provision's would be
        child = pexpect.spawn("/bin/echo", ["forked"], encoding="utf-8")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0 and "forked" in child.before, (child.exitstatus, child.before)
srv.stop(None)
print("ok")
"""


def test_forks_after_grpc_run_no_grpc_fork_handlers():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "fork" not in r.stderr, r.stderr  # fork_posix.cc logs each fork it handles
