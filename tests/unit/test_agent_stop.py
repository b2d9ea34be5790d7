"""Stop.wait: an agent sleeps until its child ends or a signal comes, not in polls.
Each case runs in its own interpreter: Stop takes SIGTERM/SIGINT and the wake-up fd."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, os, signal, sys, threading, time
from pathlib import Path
from hosts.agent.common import Child, Stop

case, tmp = sys.argv[1], Path(sys.argv[2])
stop = Stop()
child = Child([sys.executable, "-c", "import time; time.sleep(%s)" % ("0.3" if case == "exit" else "30")], tmp / "c.log")
if case == "signal":
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
if case == "usr1":
    signal.signal(signal.SIGUSR1, lambda *_: None)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
t0 = time.monotonic()
stop.wait(20.0, child)
woke = time.monotonic() - t0
status = child.stop(grace=2)
print(json.dumps({"woke_s": woke, "requested": stop.requested, "exited": status}))
"""


def _wait(case: str, tmp_path: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, case, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_childs_exit_ends_the_wait_at_once(tmp_path):
    out = _wait("exit", tmp_path)
    assert 0.25 < out["woke_s"] < 5, out
    assert out["exited"] == 0 and not out["requested"]


def test_a_stop_signal_ends_the_wait_at_once(tmp_path):
    out = _wait("signal", tmp_path)
    assert 0.25 < out["woke_s"] < 5, out
    assert out["requested"]


def test_any_signal_wakes_the_loop_without_asking_it_to_stop(tmp_path):
    # SIGUSR1 (tokens on, the load's start) wakes the loop; it goes on sampling
    out = _wait("usr1", tmp_path)
    assert 0.25 < out["woke_s"] < 5, out
    assert not out["requested"]
