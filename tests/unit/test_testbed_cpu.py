"""The testbed's CPU accounting (orchestrator/testbed/cpu.py) on this process's own
threads: a spinning thread shows about one core, a sleeping one nothing."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from orchestrator.testbed import cpu


def test_a_spinning_thread_counts_as_a_core_and_a_sleeping_one_as_nothing(monkeypatch):
    monkeypatch.setattr(cpu, "namespace_pids", lambda netns: [os.getpid()])
    stop = threading.Event()
    tids = {}

    def spin():
        tids["spinner"] = threading.get_native_id()
        while not stop.is_set():
            pass

    def nap():
        tids["napper"] = threading.get_native_id()
        while not stop.is_set():
            time.sleep(0.05)

    threads = [threading.Thread(target=spin, name="spinner"), threading.Thread(target=nap, name="napper")]
    for t in threads:
        t.start()
    try:
        usage = cpu.measure({"me": "ns-of-me"}, 0.6)
    finally:
        stop.set()
        for t in threads:
            t.join()
    by_name = {name: next(u for u in usage if u.tid == tid) for name, tid in tids.items()}
    # on a busy machine the spinner gets what the others leave it: it used CPU, the napper
    # next to none
    spin, nap = by_name["spinner"], by_name["napper"]
    assert spin.cpu_s > 0.05 and spin.cpu_s > 10 * nap.cpu_s, (spin, nap)
    assert 0 < spin.share <= 1.05  # one thread holds at most one core
    assert all(u.machine == "me" and u.pid == os.getpid() for u in usage)
    (proc,) = cpu.by_process(usage)
    assert proc.cpu_s == sum(u.cpu_s for u in usage) and "python" in proc.program


def test_a_thread_that_ends_between_two_marks_never_makes_the_use_negative(monkeypatch):
    monkeypatch.setattr(cpu, "namespace_pids", lambda netns: [os.getpid()])

    def burn(seconds: float) -> None:
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    worker = threading.Thread(target=burn, args=(0.3,))
    worker.start()
    worker.join(0.1)  # running, with CPU on its clock, when the first mark is taken
    before = cpu.mark({"me": "ns"}, runner=False)
    worker.join()  # it ends: its total can no longer be read
    after = cpu.mark({"me": "ns"}, runner=False)
    assert 0.0 <= cpu.used_s(before, after) < 0.5
    # a child the process reaped counts through it (cutime): here a shell that burns CPU
    before = cpu.mark({"me": "ns"}, runner=False)
    subprocess.run(["sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"], check=True)
    after = cpu.mark({"me": "ns"}, runner=False)
    assert cpu.used_s(before, after) > 0.05


def test_a_program_that_ends_between_two_marks_adds_only_what_it_used_since_the_first(monkeypatch):
    # A process reaped by one still measured adds its whole life to its parent's reaped
    # children (cutime): what it had used by the first mark was counted before, and is
    # not counted again. (An SSH session that closed during a calibration's idle window
    # once added the builds it had run: the idle testbed read 5,121% of a core.)
    child = subprocess.Popen(
        ["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo burnt; read x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "burnt"  # its CPU is used: now it only waits
        pids = [os.getpid(), child.pid]
        monkeypatch.setattr(cpu, "namespace_pids", lambda netns: list(pids))
        before = cpu.mark({"me": "ns"}, runner=False)
        burnt = sum(ns for (_, pid, _), (_, ns) in before.threads.items() if pid == child.pid) / 1e9
        assert burnt > 0.05 and before.parents[child.pid] == os.getpid()
        child.stdin.close()  # it ends, and this process reaps it
        child.wait(10)
        pids.remove(child.pid)
        after = cpu.mark({"me": "ns"}, runner=False)
        assert cpu.used_s(before, after) < burnt / 2, "its life before the first mark is not counted again"
    finally:
        child.kill()
        child.wait()
