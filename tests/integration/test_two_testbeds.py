"""Two emulated testbeds on this machine, their sweeps started at once: their loads take
turns on the machine's cores (orchestrator/testbed/measure_lock.py), and while they run
every sshd of both testbeds, their worker agents and a third process each answer within
a second.

Before the turns and the bounded real-time threads, two loads at 0.9 of capacity put
four real-time threads (two clients, two switches' data planes) on the two cores: a
third process waited up to 0.5 s to wake from a 10 ms sleep, an sshd up to 3 s to greet,
and a client of the suite's other process once did not get through its start-up in 30 s.

It runs `alone` (tests/conftest.py): what it measures is how fast the machine answers,
and the suite's other processes, two Ansible runs or a P4 compilation at once, leave
an sshd little CPU whatever the testbeds do (a greeting took 1.4 to 2.0 s on several
hosts at once under a loaded `make test`, the third process then waiting 0.25 s).

The second testbed takes the first of this process's spare slots (tests/conftest.py);
tests/integration/test_testbed.py, which uses it too, never runs at the same time: under
`make test` this test has a phase of its own, and under a plain `pytest -n N` it runs in
its own process's turn, holding the machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.experiment.layout import RunDir
from orchestrator.inventory import load
from orchestrator.testbed.emulated import EmulatedTestbed
from tests.integration.test_sweep import RAINMAKER, spec_file

pytestmark = [pytest.mark.integration, pytest.mark.alone]  # it measures how fast the machine answers

BASE = int(os.environ.get("RAINMAKER_TEST_SLOT", "9"))
OTHER_SLOT = (BASE + 1) % 16
ANSWER_S = 1.0

# A process of the normal class: sleeps 10 ms at a time (on stdin, which the test closes
# to end it) and prints the longest it waited beyond that.
PROBE = """
import select, sys, time
worst = 0.0
while True:
    t = time.monotonic()
    if select.select([sys.stdin], [], [], 0.01)[0]:
        break
    worst = max(worst, time.monotonic() - t - 0.01)
print(worst)
"""


class SshProbe:
    """Connects to each sshd every 0.25 s and reads its greeting; keeps the longest wait,
    and for every wait of ANSWER_S or more, when it started and how it split between the
    TCP handshake (a lost SYN costs the 1 s retransmission timeout: the network) and the
    greeting after it (sshd waiting for a CPU), with the kernel's count of retransmitted
    SYNs and the CPU pressure (/proc/pressure/cpu) around it: what names the cause."""

    def __init__(self, addresses: list[str]):
        self.worst = dict.fromkeys(addresses, 0.0)
        self.slow: list[dict] = []
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(a,), daemon=True) for a in addresses]

    def _run(self, address: str) -> None:
        while not self.stop.is_set():
            syn0, psi0, t = _syn_retrans(), _cpu_pressure_us(), time.monotonic()
            t_connected = None
            try:
                with socket.create_connection((address, 22), timeout=10) as s:
                    t_connected = time.monotonic()
                    s.settimeout(10)
                    if not s.recv(64).startswith(b"SSH-"):
                        self.failed.append(f"{address}: no SSH greeting")
            except OSError as e:
                self.failed.append(f"{address}: {e}")
            took = time.monotonic() - t
            self.worst[address] = max(self.worst[address], took)
            if took >= ANSWER_S:
                self.slow.append(
                    {
                        "address": address,
                        "at_unix": round(time.time() - took, 3),
                        "took_s": round(took, 3),
                        "handshake_s": None if t_connected is None else round(t_connected - t, 3),
                        "syn_retransmits": _syn_retrans() - syn0,  # the whole machine's, in the root namespace
                        "cpu_stalled_share": round((_cpu_pressure_us() - psi0) / 1e6 / took, 2),
                    }
                )
            self.stop.wait(0.25)

    def __enter__(self) -> SshProbe:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)


def _syn_retrans() -> int:
    """TcpExtTCPSynRetrans of this (the root) network namespace: SYNs sent again."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:]))
            return int(row.get("TCPSynRetrans", 0))
    return 0


def _cpu_pressure_us() -> int:
    """The machine's total time some runnable task waited for a CPU (PSI), in us."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(first.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return 0


def _during(slow: list[dict], windows: list[tuple[float, float, str]]) -> list[dict]:
    """Each slow greeting with the point whose load it overlapped, if any."""
    out = []
    for s in slow:
        start, end = s["at_unix"], s["at_unix"] + s["took_s"]
        hit = [p for (a, b, p) in windows if a < end and start < b]
        out.append(s | {"during_load": hit or None})
    return out


def _addresses(inv) -> list[str]:
    return [m.mgmt.address for m in [inv.switch, *inv.hosts]]


def _load_windows(run_dir: Path) -> list[tuple[float, float, str]]:
    """Each point's load on its clients: (start, end) in Unix seconds, and the point."""
    out = []
    for pd in RunDir(run_dir).points():
        for h in pd.client_hosts():
            s = json.loads((pd.client(h) / "summary.json").read_text())
            start = s["start_unix_ns"] / 1e9
            out.append((start, start + s["elapsed_s"], pd.id))
    return out


def _agent_gaps(run_dir: Path) -> list[float]:
    """The worker agents' longest waits between two samples, per point and host."""
    gaps = []
    for pd in RunDir(run_dir).points():
        for f in (pd.path / "workers").glob("*/timeseries.jsonl"):
            t = [json.loads(line)["t"] for line in f.read_text().splitlines() if line.strip()]
            gaps.append(max(b - a for a, b in zip(t, t[1:])))
    return gaps


def test_two_testbeds_take_turns_and_the_machine_still_answers(testbed, tmp_path):
    tb, inv = testbed
    other = EmulatedTestbed(slot=OTHER_SLOT)
    other.down(log=lambda m: None)  # leftovers of an interrupted earlier run
    other_path = other.up(clients=1, workers=2, log=lambda m: None)
    try:
        other_inv = load(other_path)
        runs = []
        with SshProbe(_addresses(inv) + _addresses(other_inv)) as ssh:
            probe = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                for name, path in (("one", tb.inventory_path), ("two", other_path)):
                    spec = spec_file(tmp_path, f"turns-{name}", [0.5, 0.9], measure=1.0)
                    argv = [RAINMAKER, "run", str(spec), "-i", str(path), "--results", str(tmp_path / name)]
                    runs.append(subprocess.Popen([*argv, "--no-calibrate"], stdout=subprocess.PIPE, text=True))
                outs = [r.communicate(timeout=300)[0] for r in runs]
            finally:
                for r in runs:
                    if r.poll() is None:
                        r.kill()
                        r.wait(10)
                worst = float(probe.communicate(input=b"\n", timeout=30)[0])
    finally:
        other.down(log=lambda m: None)
    assert [r.returncode for r in runs] == [0, 0], outs
    run_dirs = [Path(o.strip().splitlines()[-1].removeprefix("results: ")) for o in outs]
    print(f"a third process waited at most {worst * 1e3:.1f} ms; sshd greeted within {max(ssh.worst.values()):.3f} s")

    # The loads took turns: no load of one testbed overlaps one of the other's.
    a, b = (_load_windows(d) for d in run_dirs)
    assert len(a) == len(b) == 2
    overlaps = [(p, q) for (s1, e1, p) in a for (s2, e2, q) in b if s1 < e2 and s2 < e1]
    assert not overlaps, f"loads measured at once: {overlaps}"
    waits = sum(o.count("waiting for this machine's cores") for o in outs)
    print(f"{waits} load(s) waited for the other testbed's")  # started together, they usually do

    # ... and the machine answered all along.
    assert not ssh.failed, ssh.failed[:5]
    assert max(ssh.worst.values()) < ANSWER_S, (ssh.worst, _during(ssh.slow, a + b))
    assert worst < ANSWER_S, f"a third process waited {worst:.3f} s"
    gaps = [g for d in run_dirs for g in _agent_gaps(d)]
    assert gaps and max(gaps) < 0.25 + ANSWER_S, gaps  # their period is at most 0.25 s
