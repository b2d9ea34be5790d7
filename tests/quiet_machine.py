"""Run a command on a quiet machine: `python -m tests.quiet_machine -- CMD...`.

`make test` runs its tests marked `alone` (they measure timing: the CPU an idle testbed
costs, an adaptation racing a load) through this. Background work the machine's owner
started, a niced CPU-bound process, would be measured with them: it is paused
(SIGSTOP) while CMD runs and continued (SIGCONT) after, whatever way CMD ends; this
process forwards SIGINT, SIGTERM and SIGHUP to CMD (in a process group of its own) and
continues them first.

What is paused is chosen by what it does, never by its name: a process outside this
one's own tree (its ancestors and descendants), not a kernel thread, niced to 10 or
more (its owner said it is background work), and runnable in half or more of ten
looks over half a second (it wants a CPU: on a busy machine it may get little of one). Each is named on stderr. RAINMAKER_TEST_PAUSE=0 pauses nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MIN_NICE = 10
MIN_SHARE = 0.5  # of one core
SAMPLE_S = 0.5


@dataclass(frozen=True)
class Hog:
    pid: int
    nice: int
    share: float  # of the looks that found it runnable
    cmdline: str


def _stat(pid: int) -> tuple[int, int, str, int] | None:
    """(ppid, nice, state, flags) of a process; None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    # fields[0] is field 3 (state): ppid 4, flags 9, nice 19
    return int(fields[1]), int(fields[16]), fields[0], int(fields[6])


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def own_tree(pid: int) -> set[int]:
    """`pid`, its ancestors and its descendants."""
    parents = {p: st[0] for p in _pids() if (st := _stat(p)) is not None}
    tree, grew = {pid}, True
    while grew:  # descendants (of pid only: every process descends from an ancestor)
        kids = {c for c, par in parents.items() if par in tree and c not in tree}
        grew = bool(kids)
        tree |= kids
    p = pid
    while p in parents and parents[p] > 0:
        p = parents[p]
        tree.add(p)
    return tree


def background_hogs(own: set[int], sample_s: float = SAMPLE_S, samples: int = 10) -> list[Hog]:
    """Niced processes outside `own` that want the CPU: runnable (state R) in MIN_SHARE
    of `samples` looks over `sample_s`. Runnable, not CPU time: on a busy machine a
    nice-19 process gets little of the CPU it wants, and is a hog all the same."""
    PF_KTHREAD = 0x00200000
    candidates = []
    for p in _pids():
        st = _stat(p)
        if p in own or st is None or st[3] & PF_KTHREAD or st[1] < MIN_NICE:
            continue
        candidates.append(p)
    running = dict.fromkeys(candidates, 0)
    for _ in range(samples):
        time.sleep(sample_s / samples)
        for p in candidates:
            st = _stat(p)
            running[p] += st is not None and st[2] == "R"
    out = []
    for p, n in running.items():
        st = _stat(p)
        if st is None:
            continue
        share = n / samples
        if share >= MIN_SHARE:
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            out.append(Hog(p, st[1], share, cmd[:120]))
    return out


def _send(hogs: list[Hog], sig: int) -> None:
    for h in hogs:
        try:
            os.kill(h.pid, sig)
        except ProcessLookupError:
            pass


def stopped(hogs: list[Hog], timeout_s: float = 5.0) -> None:
    """Wait until every paused process is stopped (state T): SIGSTOP takes effect when
    the process is next scheduled, which on two busy cores is not at once."""
    deadline = time.monotonic() + timeout_s
    for h in hogs:
        while time.monotonic() < deadline:
            st = _stat(h.pid)
            if st is None or st[2] in ("T", "t", "Z"):
                break
            time.sleep(0.005)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--" or len(argv) < 2:
        print("usage: python -m tests.quiet_machine -- CMD [ARG...]", file=sys.stderr)
        return 2
    cmd = argv[1:]
    hogs = [] if os.environ.get("RAINMAKER_TEST_PAUSE") == "0" else background_hogs(own_tree(os.getpid()))
    for h in hogs:
        print(
            f"quiet machine: pausing pid {h.pid} (nice {h.nice}, runnable {h.share:.0%} of the time) while the timing "
            f"tests run: {h.cmdline}",
            file=sys.stderr,
            flush=True,
        )
    child: subprocess.Popen | None = None

    def forward(sig: int, _frame: object) -> None:
        _send(hogs, signal.SIGCONT)
        if child is not None and child.poll() is None:
            child.send_signal(sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    _send(hogs, signal.SIGSTOP)
    stopped(hogs)
    try:
        # its own process group: a Ctrl-C reaches it once, through `forward`, not twice
        child = subprocess.Popen(cmd, process_group=0)
        rc = child.wait()
        return 128 - rc if rc < 0 else rc
    finally:
        _send(hogs, signal.SIGCONT)
        if hogs:
            print(f"quiet machine: continued {len(hogs)} paused process(es)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
