"""An experiment's life on CloudLab, around the portal's calls: wait until it is
ready, take its manifest, keep it alive while a run uses it.

Each loop is bounded (a deadline, a number of checks) and takes its clock and its
sleep as arguments, so that tests run it in milliseconds against a local portal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import RainmakerError
from .portal import Portal, PortalError, Status


class ExperimentFailed(RainmakerError):
    """The experiment did not become ready: it failed, or the wait's deadline passed."""


@dataclass(frozen=True)
class Backoff:
    """Polling intervals: first, then times factor, at most cap (seconds)."""

    first: float = 10.0
    factor: float = 1.5
    cap: float = 60.0

    def delays(self):
        d = self.first
        while True:
            yield d
            d = min(self.cap, d * self.factor)


def duration(seconds: float) -> str:
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def wait_ready(
    portal: Portal,
    experiment: str,
    *,
    deadline_s: float,
    backoff: Backoff = Backoff(),
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Status:
    """Poll experimentStatus until ready; say each new status (and, while it stays,
    how long it has); raise ExperimentFailed when it fails or the deadline passes."""
    t0 = clock()
    last = None
    delays = backoff.delays()
    while True:
        st = portal.status(experiment)
        waited = clock() - t0
        if st.status != last:
            exp = f", expires {st.expires:%Y-%m-%d %H:%M} UTC" if st.expires else ""
            say(f"{experiment}: {st.status} ({duration(waited)}{exp})")
            last = st.status
        if st.ready:
            return st
        if st.failed:
            more = st.details()
            raise ExperimentFailed(
                f"{experiment}: the portal reports it {st.status}" + (f": {more}" if more else ""),
                fix=f"the experiment's page in the portal says why; free its nodes with "
                f"`rainmaker cloudlab terminate {experiment}`",
            )
        d = next(delays)
        if waited + d > deadline_s:
            raise ExperimentFailed(
                f"{experiment}: still {st.status} after {duration(waited)} (the wait's limit, --wait-minutes)",
                fix=f"it keeps starting on CloudLab: wait and import it with `rainmaker cloudlab start ... --attach`, "
                f"or free it with `rainmaker cloudlab terminate {experiment}`",
            )
        sleep(d)


def pick_manifest(manifests: dict[str, str], experiment: str) -> tuple[str, str]:
    """The one (aggregate URN, manifest XML) the import reads."""
    if len(manifests) == 1:
        return next(iter(manifests.items()))
    if not manifests:
        raise ExperimentFailed(
            f"{experiment}: the portal returned no manifest",
            fix=f"check that it is ready: `rainmaker cloudlab status {experiment}`",
        )
    raise ExperimentFailed(
        f"{experiment}: it spans {len(manifests)} clusters ({', '.join(manifests)}); an inventory comes from one "
        "manifest",
        fix="put the nodes on one cluster in the profile (rainmaker's profiles do), or download each manifest and "
        "import the one with the nodes",
    )


def write_private(path: Path, text: str) -> None:
    """Write a file the user alone reads (a manifest names the user's nodes and logins)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# -- which run holds an inventory -------------------------------------------------------

# The commands that use a testbed for as long as a run lasts.
RUN_VERBS = ("run", "calibrate")


def runs_on(inventory: Path, proc: Path = Path("/proc")) -> list[int]:
    """The processes of this machine running `rainmaker run` (or calibrate) on this
    inventory (its -i/--inventory, else $RAINMAKER_INVENTORY): rainmaker keeps no lock
    on an inventory, so the process table is what says whether a run holds it."""
    want = inventory.resolve()
    found = []
    for d in proc.iterdir() if proc.is_dir() else ():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(d / "cwd"))
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        starts = [i for i, a in enumerate(args) if Path(a).name == "rainmaker" or a == "orchestrator.cli"]
        if not starts:
            continue
        rest = args[starts[0] + 1 :]
        verb = next((a for a in rest if not a.startswith("-")), None)
        if verb not in RUN_VERBS:
            continue
        inv = None
        for i, a in enumerate(rest):
            if a in ("-i", "--inventory") and i + 1 < len(rest):
                inv = rest[i + 1]
            elif a.startswith("--inventory="):
                inv = a.split("=", 1)[1]
        if inv is None:
            try:
                env = dict(e.split(b"=", 1) for e in (d / "environ").read_bytes().split(b"\0") if b"=" in e).get(
                    b"RAINMAKER_INVENTORY"
                )
            except OSError:
                env = None
            inv = env.decode(errors="replace") if env else None
        if inv is not None and (cwd / inv).resolve() == want:
            found.append(int(d.name))
    return sorted(found)


# -- keep alive -------------------------------------------------------------------------


@dataclass
class KeepAlive:
    """Extend `experiment` by `hours` whenever less than `margin_s` remains, checking
    every `interval_s`, while `running()` says a run still needs it."""

    portal: Portal
    experiment: str
    hours: int
    reason: str
    margin_s: float
    interval_s: float
    running: Callable[[], bool]
    say: Callable[[str], None]
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    sleep: Callable[[float], None] = time.sleep

    def loop(self, max_checks: int | None = None) -> int:
        """Check until no run needs the experiment (or max_checks checks); the number
        of extensions granted. A refusal is said in the portal's words and tried again
        at the next check; an experiment that is gone ends the loop with its error."""
        extended = 0
        checks = 0
        while True:
            st = self.portal.status(self.experiment)
            left = st.remaining_s(self.now())
            checks += 1
            if left is not None and left < self.margin_s:
                try:
                    self.portal.extend(self.experiment, self.hours, self.reason)
                except PortalError as e:
                    if e.kind in ("unknown", "expired"):
                        raise
                    self.say(f"{self.experiment}: extension not granted ({e.kind}): {e.output.strip()}")
                else:
                    extended += 1
                    after = self.portal.status(self.experiment)
                    until = f"{after.expires:%Y-%m-%d %H:%M} UTC" if after.expires else "(unknown)"
                    self.say(f"{self.experiment}: {duration(left)} left, extended by {self.hours} h: expires {until}")
            else:
                self.say(f"{self.experiment}: {st.status}, {duration(left) if left is not None else '?'} left")
            if max_checks is not None and checks >= max_checks:
                return extended
            self.sleep(self.interval_s)
            if not self.running():
                self.say(f"{self.experiment}: the run has ended; keep-alive stops (the experiment stays)")
                return extended
