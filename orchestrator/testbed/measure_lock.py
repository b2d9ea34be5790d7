"""One load at a time on each of this machine's cores.

An emulated testbed's machines are namespaces of the machine that runs rainmaker, and
they share its cores. While a point's load runs, its client and the switch's data plane
run at a real-time priority (bounded: docs/emulation.md). Two testbeds measuring at
once on the same cores measure each other: measured on 2 cores, two loads at 0.9 of
capacity put four real-time threads on them, every point of both runs failed its
checks (late sends, timeouts, rejects), and a third process waited up to 0.5 s to run.
So on a shared-core testbed the runner takes the measurement locks of the testbed's
cores for its load only (from the workers' tokens to the clients' end): set-up,
collection and analysis of several testbeds still overlap, their loads take turns.

There is one lock per CPU. A testbed confined to some cores (emulation.cpus) takes
theirs, any other every online CPU's: testbeds on disjoint cores measure at once, and
testbeds that share a core take turns. The locks are always taken in ascending order of
the CPU, so two runners never each hold a lock the other waits for. A runner that has
to wait says for whom, and how long it has waited.

Each lock is flock(2) on a file in /run/lock (any process, any testbed slot, any state
folder of this machine): the kernel releases it when its holder exits, however it
exits. Beside each, a small JSON file names the holder for the waiter's message.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import RainmakerError
from .cpu import format_cpus, online_cpus

WAIT_MAX_S = 900.0  # longer than any point's load; past it, the holder is stuck
SAY_EVERY_S = 10.0


class MeasureLockError(RainmakerError):
    """Another testbed of this machine held its cores for longer than any load lasts."""


def lock_dir() -> Path:
    """/run/lock (tmpfs, every user's; gone at reboot), or the temporary folder."""
    d = Path(os.environ.get("RAINMAKER_LOCK_DIR", "/run/lock"))
    return d if d.is_dir() and os.access(d, os.W_OK) else Path(tempfile.gettempdir())


def _holder(info: Path) -> dict:
    try:
        data = json.loads(info.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(h: dict, now: float) -> str:
    who = f"slot {h['slot']}'s testbed" if h.get("slot") is not None else "another testbed"
    what = f" (point {h['point']}, pid {h.get('pid')})" if h.get("point") else f" (pid {h.get('pid')})"
    where = f" on cores {format_cpus(h['cpus'])}" if isinstance(h.get("cpus"), list) and h["cpus"] else ""
    since = f", measuring for {now - float(h['since']):.0f} s" if isinstance(h.get("since"), int | float) else ""
    return who + what + where + since


def lock_path(d: Path, cpu: int) -> Path:
    """The measurement lock of one CPU (the holder's name beside it, .json)."""
    return d / f"rainmaker-measure-cpu{cpu}.lock"


@contextmanager
def measuring(
    slot: int | None,
    point: str,
    log: Callable[[str], None],
    *,
    cpus: Iterable[int] | None = None,
    wait_max_s: float = WAIT_MAX_S,
    directory: Path | None = None,
) -> Iterator[float]:
    """Hold the measurement locks of `cpus` (every online CPU when None or empty) while
    the block runs; yields the seconds waited for them. Waits for other testbeds' loads
    on those cores to end, saying so every SAY_EVERY_S; raises MeasureLockError after
    wait_max_s."""
    d = directory or lock_dir()
    want = sorted(set(cpus or ())) or online_cpus()
    fds: list[int] = []
    try:
        t0 = time.monotonic()
        said = t0 - SAY_EVERY_S  # the first wait is said at once
        for cpu in want:  # ascending: no two runners each hold what the other waits for
            path = lock_path(d, cpu)
            fds.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666))
            while True:
                try:
                    fcntl.flock(fds[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                now = time.monotonic()
                if now - t0 > wait_max_s or now - said >= SAY_EVERY_S:
                    holder = _describe(_holder(path.with_suffix(".json")), time.time())
                if now - t0 > wait_max_s:
                    raise MeasureLockError(
                        f"core {cpu} of this machine has been measured on by {holder} for over {wait_max_s:.0f} s",
                        fix=f"a load never lasts that long: see whether that process is stuck (its lock is {path})",
                    )
                if now - said >= SAY_EVERY_S:
                    log(
                        f"{point}: waiting for this machine's cores: {holder} (waited {now - t0:.0f} s "
                        f"for core {cpu} of {format_cpus(want)}; loads on the same cores take turns, docs/emulation.md)"
                    )
                    said = now
                time.sleep(0.05)
        waited = time.monotonic() - t0
        me = json.dumps({"slot": slot, "point": point, "pid": os.getpid(), "since": time.time(), "cpus": want})
        for cpu in want:
            info = lock_path(d, cpu).with_suffix(".json")
            tmp = info.with_name(f".{info.name}.{os.getpid()}")
            try:
                tmp.write_text(me)
                os.replace(tmp, info)
            except OSError:
                pass  # the name only serves the waiter's message
        yield waited
    finally:
        for fd in fds:
            os.close(fd)  # releases the lock, if held
