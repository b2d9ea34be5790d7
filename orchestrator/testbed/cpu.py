"""Where an emulated testbed's CPU goes: the processes (and their threads) of each of its
machines' namespaces, and the CPU time each used over a window, as a share of one core.

An emulated testbed shares two cores between a software switch, a client and workers;
a thread that spins or naps too often takes the CPU the others need, and the curves
then measure Linux's scheduler. `rainmaker testbed cpu` shows it; the tests use it to
hold an idle testbed under a few percent of one core.

Read from /proc: each thread's time on a CPU in nanoseconds (schedstat, the scheduler's
own account), not utime + stime, which the kernel samples at its clock tick (10 ms):
a dozen napping threads each off by a tick would blur a 1 s window by several percent
of a core. No dependency.

A testbed confined to some of this machine's cores (`emulation.cpus`, `rainmaker testbed
up --cpus`) has those cores to itself: its cores are theirs (`testbed_cores`), and
`outside` lists every thread of its namespaces allowed to run elsewhere (read from
/proc/PID/task/TID/status, Cpus_allowed_list), which should be none.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..inventory import Inventory

ONLINE = Path("/sys/devices/system/cpu/online")


@dataclass(frozen=True)
class Usage:
    machine: str
    pid: int
    tid: int  # == pid for the process's main thread
    name: str  # the thread's name (comm)
    program: str  # the process's command line, shortened
    cpu_s: float  # CPU time used over the window
    share: float  # of one core over the window


def namespace_pids(netns: str) -> list[int]:
    """The processes in a network namespace (`ip netns pids`)."""
    r = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def _cpu_ns(task: Path) -> tuple[str, int] | None:
    """(comm, ns on a CPU) of a /proc task folder; None when the task is gone."""
    try:
        comm = (task / "comm").read_text().rstrip("\n")
        return comm, int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _program(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    if not words:
        return "?"
    # python3 -m hosts.agent worker ... -> "python3 -m hosts.agent worker"; rain-worker ... -> "rain-worker"
    if "-m" in words[:3]:
        i = words.index("-m")
        return " ".join([os.path.basename(words[0]), *words[i : i + 3]])
    return os.path.basename(words[0])


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ns of the children it has reaped: cutime + cstime, clock ticks)
    of a process; None when it is gone. Through its parent a program that ended
    (rain-client at its end) keeps counting."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[13]) + int(fields[14])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _snapshot(
    machines: dict[str, str], children: bool = False, parents: dict[int, int] | None = None
) -> dict[tuple[str, int, int], tuple[str, int]]:
    """(machine, pid, tid) -> (comm, ns on a CPU) of every thread; with `children`, also
    (machine, pid, 0) -> the process's reaped children, and each process's parent into
    `parents` (pid -> parent pid)."""
    out = {}
    for machine, netns in machines.items():
        for pid in namespace_pids(netns):
            for task in Path(f"/proc/{pid}/task").glob("*"):
                t = _cpu_ns(task)
                if t is not None and task.name.isdigit():
                    out[(machine, pid, int(task.name))] = t
            st = _stat(pid) if children else None
            if st is not None:
                if parents is not None:
                    parents[pid] = st[0]
                if st[1]:
                    out[(machine, pid, 0)] = ("(children)", st[1])
    return out


def measure(machines: dict[str, str], seconds: float) -> list[Usage]:
    """CPU used by every thread of the given machines ({name: netns}) over `seconds`,
    largest first. A thread that started during the window counts from zero; one that
    ended is left out (its time cannot be read any more)."""
    before = _snapshot(machines)
    t0 = time.monotonic()
    time.sleep(seconds)  # the window itself: what is measured happens meanwhile
    after = _snapshot(machines)
    wall = time.monotonic() - t0
    programs: dict[int, str] = {}
    out = []
    for key, (name, ns) in after.items():
        machine, pid, tid = key
        used = (ns - before.get(key, (name, 0))[1]) / 1e9
        if pid not in programs:
            programs[pid] = _program(pid)
        out.append(Usage(machine, pid, tid, name, programs[pid], used, used / wall))
    return sorted(out, key=lambda u: -u.cpu_s)


def by_process(usage: list[Usage]) -> list[Usage]:
    """Threads summed per process (tid = pid, name = the program)."""
    acc: dict[tuple[str, int], Usage] = {}
    for u in usage:
        k = (u.machine, u.pid)
        prev = acc.get(k)
        acc[k] = Usage(
            u.machine,
            u.pid,
            u.pid,
            u.program,
            u.program,
            u.cpu_s + (prev.cpu_s if prev else 0.0),
            u.share + (prev.share if prev else 0.0),
        )
    return sorted(acc.values(), key=lambda u: -u.cpu_s)


@dataclass(frozen=True)
class Mark:
    """What the testbed's processes had used at one moment (mark()), to subtract."""

    threads: dict
    own_s: float
    parents: dict = field(default_factory=dict)  # pid -> parent pid


def mark(machines: dict[str, str], *, runner: bool = True) -> Mark:
    """The CPU the processes of the given machines ({name: netns}) have used so far,
    per thread and with the children they reaped, and this process's when `runner` (the
    runner, on the same cores): the testbed's work, not the rest of the machine's."""
    parents: dict[int, int] = {}
    threads = _snapshot(machines, children=True, parents=parents)
    return Mark(threads, time.process_time() if runner else 0.0, parents)


def used_s(before: Mark, after: Mark) -> float:
    """CPU seconds between two marks. Each thread counts from the first mark, or from
    zero when it started since; a thread or program that ended meanwhile counts through
    the parent that reaped it, else not at all (its time cannot be read any more). A sum
    of whole threads' totals would fall when one ends, and went negative (a calibration
    read -63% of a core while its SSH sessions came and went).

    A process that ended and was reaped by one still here adds its whole life to its
    parent's reaped children, so what it (and its own reaped children) had used by the
    first mark is taken off again: an SSH session that ended during an idle window
    (Ansible's persistent connection, closing 15 s after provisioning) once added
    the 100 s of CPU of the builds it had run, and the idle testbed read 5,121% of a
    core."""
    used = sum(ns - before.threads.get(key, (name, 0))[1] for key, (name, ns) in after.threads.items())
    alive = {pid for _, pid, _ in after.threads}
    folded = sum(
        ns for (_, pid, _), (_, ns) in before.threads.items() if pid not in alive and before.parents.get(pid) in alive
    )
    return max(0.0, (used - folded) / 1e9) + (after.own_s - before.own_s)


def cores() -> int:
    """The cores this process may run on, as the testbed's processes share them."""
    return len(os.sched_getaffinity(0))


def steal_s(cpus: Iterable[int] | None = None) -> float:
    """CPU seconds the hypervisor has given this virtual machine's cores (or only `cpus`
    of them) to someone else since boot (/proc/stat's steal; 0 on bare metal): while it
    grows, every thread of the machine, real-time ones included, waits however urgent
    it is."""
    want = None if cpus is None else {f"cpu{c}" for c in cpus}
    ticks = 0
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if not fields or not fields[0].startswith("cpu"):
                break  # the cpu lines come first
            if (want is None and fields[0] == "cpu") or (want is not None and fields[0] in want):
                ticks += int(fields[8]) if len(fields) > 8 else 0
    return ticks / os.sysconf("SC_CLK_TCK")


# -- the cores of a testbed ---------------------------------------------------------------
def parse_cpus(text: str) -> list[int]:
    """A CPU list as the kernel writes it (and taskset -c takes it): '0-3', '0,2,4-5'
    -> the distinct CPU numbers, in order. ValueError names what is wrong."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{part.strip()!r} in {text.strip()!r} is not a CPU number or range (like 2 or 0-3)")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"the range {part.strip()!r} runs backwards: write it low-high, like {last}-{first}")
        out.update(range(first, last + 1))
    return sorted(out)


def format_cpus(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3] -> '0-3'; [0, 2, 4, 5] -> '0,2,4-5' (parse_cpus's inverse)."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def online_cpus() -> list[int]:
    """Every CPU this machine has online (/sys/devices/system/cpu/online): not this
    process's affinity, which a caller run under taskset narrows."""
    try:
        return parse_cpus(ONLINE.read_text())
    except (OSError, ValueError):
        return list(range(os.cpu_count() or 1))


def confined_to(inv: Inventory) -> list[int]:
    """The cores an emulated testbed is confined to (emulation.cpus); [] when it is not."""
    return sorted(inv.emulation.cpus) if inv.emulation is not None else []


def testbed_cpus(inv: Inventory) -> list[int]:
    """The cores the testbed's processes may run on: its own, or every online CPU."""
    return confined_to(inv) or online_cpus()


def testbed_cores(inv: Inventory) -> int:
    """How many cores the testbed's processes share: its own when it is confined, else
    (as before) the cores the runner may run on, which are the machine's."""
    return len(confined_to(inv)) or cores()


@dataclass(frozen=True)
class Stray:
    """A thread of a testbed's namespaces allowed to run outside the testbed's cores."""

    machine: str
    pid: int
    tid: int
    name: str  # the thread's name (comm)
    program: str
    allowed: str  # its Cpus_allowed_list, like "0-1"


def allowed_cpus(pid: int, tid: int | None = None) -> list[int] | None:
    """The CPUs a thread (the process's main thread without `tid`) may run on, from its
    /proc status; None when it is gone."""
    status = Path(f"/proc/{pid}/task/{tid if tid is not None else pid}/status")
    try:
        for line in status.read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return parse_cpus(line.split(":", 1)[1])
    except (OSError, ValueError):
        return None
    return None


def outside(machines: dict[str, str], cpus: Iterable[int]) -> list[Stray]:
    """Every thread of the given machines' namespaces ({name: netns}) whose affinity is
    not within `cpus`: on a confined testbed, what may disturb another testbed's cores
    (or be disturbed on them). A thread that ends meanwhile is left out."""
    mine = set(cpus)
    out = []
    for machine, netns in machines.items():
        for pid in namespace_pids(netns):
            for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
                if not task.name.isdigit():
                    continue
                tid = int(task.name)
                allowed = allowed_cpus(pid, tid)
                if allowed is None or set(allowed) <= mine:
                    continue
                t = _cpu_ns(task)
                out.append(Stray(machine, pid, tid, t[0] if t else "?", _program(pid), format_cpus(allowed)))
    return out
