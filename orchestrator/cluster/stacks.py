"""Where a wedged station's worker is: every thread's Python stack, written by the
process itself on a signal.

Dask's Client.call_stack asks the worker's event loop, and a wedged worker never runs
it: seen in CI, a station's worker with all 25 of its threads in futex waits, its
testbed calibrating for ever, gave no stack and no clue. faulthandler answers a signal
in C, without the GIL or the event loop, so it writes even then.

    path = arm(directory)               # in the worker, once: its dump file
    text = dump(pid, path)              # on the coordinator, same machine: signal, read
    frames(text)                        # rainmaker's frames of each thread, innermost last

The coordinator signals only a process that holds the dump file open (its /proc fds):
SIGUSR2's default action ends a process, and a pid can be reused.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import time
from pathlib import Path

SIGNAL = signal.SIGUSR2
_armed: dict[str, object] = {}  # path -> its open file: faulthandler writes to its descriptor
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.M)
_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')
ROOTS = ("/orchestrator/", "/hosts/", "/switch/")  # rainmaker's packages


def arm(directory: str | Path) -> str:
    """This process dumps every thread's stack into its dump file (in `directory`) on
    SIGNAL, from now on; returns the file's path. Idempotent."""
    path = str(Path(directory) / f"rainmaker-stacks-{os.getpid()}.txt")
    if path not in _armed:
        Path(directory).mkdir(parents=True, exist_ok=True)
        f = open(path, "a")  # noqa: SIM115 - open for the process's life: faulthandler holds its fd
        faulthandler.register(SIGNAL, file=f, all_threads=True, chain=False)
        _armed[path] = f
    return path


def holds(pid: int, path: str) -> bool:
    """Whether process `pid` of this machine has `path` open."""
    try:
        target = os.path.realpath(path)
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def dump(pid: int, path: str, wait_s: float = 5.0) -> str | None:
    """Every thread's stack of process `pid` (of this machine), which armed `path`:
    what it wrote after the signal; None when it is not that process (any more) or wrote
    nothing within wait_s."""
    if not holds(pid, path):
        return None
    p = Path(path)
    before = p.stat().st_size
    try:
        os.kill(pid, SIGNAL)
    except OSError:
        return None
    deadline, size, still = time.monotonic() + wait_s, before, 0
    while time.monotonic() < deadline:
        time.sleep(0.05)  # polling a file another process writes: no event to wait on
        now = p.stat().st_size
        still = still + 1 if now == size and now > before else 0
        size = now
        if still >= 4:  # written, and nothing more for 0.2 s
            break
    if size <= before:
        return None
    with open(path, "rb") as f:
        f.seek(before)
        return f.read(size - before).decode(errors="replace")


def frame_name(line: str) -> str | None:
    """A frame line of rainmaker's code (faulthandler's 'File "F", line N in FUNC' or
    Dask's 'File "F", line N, in FUNC') as module.func:line; None for anyone else's."""
    m = _FRAME.search(line)
    if m is None:
        return None
    path, lineno, func = m.groups()
    root = next((r for r in ROOTS if r in path), None)
    if root is None:
        return None
    mod = (root.strip("/") + "/" + path.split(root, 1)[1]).removesuffix(".py").replace("/", ".")
    return f"{mod}.{func}:{lineno}"


def frames(text: str, most: int = 5) -> list[str]:
    """Per thread with any of rainmaker's frames: its innermost `most` of them,
    outermost first, joined by ' > ' (faulthandler lists the most recent call first)."""
    out = []
    starts = [m.start() for m in _THREAD.finditer(text)] + [len(text)]
    for a, b in zip(starts, starts[1:], strict=False):
        ours = [n for line in text[a:b].splitlines()[1:] if (n := frame_name(line))]
        if ours:
            out.append(" > ".join(reversed(ours[:most])))
    return out
