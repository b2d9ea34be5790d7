"""The `alone` phase's quiet machine (tests/quiet_machine.py): a niced CPU-bound process
outside the harness's own tree is paused while the command runs and continued after;
a busy process that is not niced, an idle niced one and the harness's own are not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.poll import until
from tests.quiet_machine import background_hogs, own_tree

BUSY = "import time\nwhile True: pass\n"
IDLE = "import time\ntime.sleep(60)\n"


def _start(code: str, nice: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import os; os.nice({nice})\n{code}"])


def _state(pid: int) -> str:
    text = open(f"/proc/{pid}/stat").read()
    return text[text.rindex(")") + 2]


def test_only_niced_cpu_bound_processes_outside_the_tree_are_chosen():
    hog, busy, idle = _start(BUSY, 19), _start(BUSY, 0), _start(IDLE, 19)
    try:
        for p in (hog, idle):  # (each nices itself once Python is up)
            assert until(lambda p=p: os.getpriority(os.PRIO_PROCESS, p.pid) == 19, timeout=10)
        # A niced process still starting up is runnable, and starved on a busy machine:
        # it is idle only once it sleeps (the only sleep after its nice is the long one).
        assert until(lambda: _state(idle.pid) == "S", timeout=30)
        found = {h.pid: h for h in background_hogs({os.getpid()}, sample_s=0.5)}
        assert hog.pid in found and found[hog.pid].nice == 19 and found[hog.pid].share >= 0.5
        assert busy.pid not in found and idle.pid not in found
        assert "while True" in found[hog.pid].cmdline
        # ... and never one of the harness's own tree (here, its children)
        assert hog.pid in own_tree(os.getpid())
        assert hog.pid not in {h.pid for h in background_hogs(own_tree(os.getpid()), sample_s=0.2)}
    finally:
        for p in (hog, busy, idle):
            p.kill()
            p.wait()


def test_the_hog_is_stopped_while_the_command_runs_and_continued_after(tmp_path):
    # The hog is started by another session leader, outside the harness's tree.
    pidfile = tmp_path / "hog.pid"
    starter = textwrap.dedent(f"""
        import os, subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", "import os; os.nice(19)\\nwhile True: pass"],
                             start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(p.pid))
    """)
    subprocess.run([sys.executable, "-c", starter], check=True)
    hog = int(pidfile.read_text())
    try:
        assert until(lambda: os.getpriority(os.PRIO_PROCESS, hog) == 19, timeout=10)
        probe = f"import sys; sys.exit(0 if open('/proc/{hog}/stat').read().split(') ')[1][0] == 'T' else 7)"
        r = subprocess.run(
            [sys.executable, "-m", "tests.quiet_machine", "--", sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr  # stopped (T) while the command ran
        # (any other niced CPU-bound process of this machine is paused and continued too)
        assert f"pausing pid {hog} (nice 19" in r.stderr and "quiet machine: continued " in r.stderr
        assert until(lambda: _state(hog) in "RS", timeout=5)
        # a failing command's status is passed on
        r = subprocess.run([sys.executable, "-m", "tests.quiet_machine", "--", "false"], timeout=60)
        assert r.returncode == 1
    finally:
        os.kill(hog, 9)
