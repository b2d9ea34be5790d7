"""An emulated testbed confined to one core: every sshd starts on it, so every process
started over SSH, and each of its threads, may run there only (the inventory's side,
the lcores and the locks: tests/unit/test_testbed_cpus.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.inventory import load
from orchestrator.remote import Group, Remote, targets
from orchestrator.testbed import cpu
from orchestrator.testbed.emulated import EmulatedTestbed

pytestmark = pytest.mark.integration

SLOT = (int(os.environ.get("RAINMAKER_TEST_SLOT", "9")) + 2) % 16
CORE = 1
# A program of several threads that outlives its SSH session, as an agent does.
THREADS = (
    "import threading, time\n"
    "for _ in range(3): threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def allowed_lists(netns: str) -> dict[tuple[int, int], str]:
    """(pid, tid) -> Cpus_allowed_list of every thread in a namespace, read from /proc."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    out = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                line = next(x for x in (task / "status").read_text().splitlines() if x.startswith("Cpus_allowed_list"))
            except (OSError, StopIteration):
                continue  # ended meanwhile
            out[(int(pid), int(task.name))] = line.split(":", 1)[1].strip()
    return out


@pytest.mark.skipif(CORE not in cpu.online_cpus(), reason=f"needs CPU {CORE} online")
def test_every_thread_of_a_confined_testbed_runs_on_its_core(state_root):
    tb = EmulatedTestbed(SLOT)
    tb.down(log=lambda m: None)  # leftovers of an interrupted earlier run
    try:
        inv = load(tb.up(clients=1, workers=1, cpus=[CORE], log=lambda m: None))
        assert inv.emulation.cpus == [CORE] and tb.status()["cpus"] == [CORE]
        tg = targets(inv)
        with Group(tg) as g:
            res = g.run(["nproc"], timeout=20)  # what a program started over SSH may use
        assert {t.name: res[t.name].stdout.strip() for t in tg} == {t.name: "1" for t in tg}
        client = next(t for t in tg if t.name == "client0")
        with Remote(client) as r:
            bg = r.start("threads", ["python3", "-c", THREADS], cwd=str(client.deploy_root))
            r.wait_ready(bg, log_regex="^ready", timeout=20)
            machines = {m.name: m.netns for m in [inv.switch, *inv.hosts]}
            seen = {name: allowed_lists(ns) for name, ns in machines.items()}
            assert all(seen.values()), seen  # every namespace has its sshd at least
            assert len(seen["client0"]) >= 5  # sshd, its session's, the program and its 3 threads
            wrong = {(name, key): v for name, threads in seen.items() for key, v in threads.items() if v != str(CORE)}
            assert not wrong, wrong
            assert cpu.outside(machines, [CORE]) == []
            assert cpu.outside(machines, [c for c in cpu.online_cpus() if c != CORE]) != []  # it sees them
            r.stop(bg, grace=2)
    finally:
        tb.down(log=lambda m: None)
