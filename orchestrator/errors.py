"""rainmaker's errors. Errors carry data, not just text. Their one root,
RainmakerError, is defined in switch/errors.py (switch/ runs without orchestrator, so
the root lives there) and re-exported here.

Exit codes of the CLI follow the error's kind: input a person wrote that is wrong
(an inventory, a spec, a command line) exits 2; everything else that fails exits 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from switch.errors import RainmakerError as RainmakerError  # the root, defined once


class UsageError(RainmakerError):
    """Bad input from a person: a command line, a missing file."""

    exit_code = 2


@dataclass
class Problem:
    """One thing wrong in an input file, located by field path (and line when known)."""

    path: str
    message: str
    fix: str | None = None
    line: int | None = None

    def render(self, file: str) -> str:
        where = f"{file}:{self.line}" if self.line else file
        text = f"{where}: {self.path or '(top level)'}: {self.message}"
        if self.fix:
            text += f"\n    fix: {self.fix}"
        return text


# The stop signal (SIGTERM, SIGHUP) the CLI turned into a KeyboardInterrupt, if any
# (orchestrator/cli/app.py): an interrupted command exits with the shell's status for it.
stopped_by: list[int] = []


def interrupted_status() -> int:
    """128 + the signal that stopped the command: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + stopped_by[0] if stopped_by else 130


class Interrupted(RainmakerError):
    """Ctrl-C (SIGINT) stopped a command: the message says what was interrupted and
    what is kept, the fix how to redo it. Exit status 130, as a shell's for SIGINT."""

    exit_code = 130


@contextmanager
def interruptible(what: str, kept: str, redo: str) -> Iterator[None]:
    """Ctrl-C inside becomes an Interrupted error saying what stopped, what is kept and
    the command that redoes it, rather than a bare exit."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"{what} stopped: {kept}", fix=f"redo it with `{redo}`") from None


class InputFileError(UsageError):
    """An input file (inventory, experiment spec) failed validation."""

    kind = "input"

    def __init__(self, file: str, problems: list[Problem]):
        self.file = file
        self.problems = problems
        n = len(problems)
        head = f"{file}: {n} problem{'s' if n != 1 else ''} in this {self.kind} file"
        super().__init__(head + "\n" + "\n".join("  " + p.render(file) for p in problems))

    def render(self) -> str:
        return self.message


class InventoryError(InputFileError):
    kind = "inventory"


class ManifestError(InputFileError):
    """A CloudLab (RSpec v3) manifest that cannot be read; each problem names its element."""

    kind = "manifest"


class MapFileError(InputFileError):
    """A `rainmaker cloudlab import` map file failed validation."""

    kind = "map"


class CloudlabError(UsageError):
    """A CloudLab profile or import cannot be made from what the user gave (options, map file)."""


class TestbedError(RainmakerError):
    """The emulated testbed could not be built, inspected or torn down."""

    __test__ = False  # not a pytest class


@dataclass
class HostResult:
    """What one command did on one host."""

    host: str
    command: str
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # connection-level failure (unreachable, timeout), if any
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


class RemoteError(RainmakerError):
    """A remote command failed. Carries the host, the command, the exit status and stderr."""

    def __init__(self, result: HostResult, message: str | None = None):
        self.result = result
        if message is None:
            why = result.error or f"exited with status {result.exit_code}"
            message = f"{result.host}: `{result.command}` {why}"
            tail = result.stderr.strip().splitlines()[-5:]
            if tail:
                message += "\n  stderr: " + "\n          ".join(tail)
        super().__init__(message)


class GroupError(RainmakerError):
    """A command failed on some hosts of a group. The results of every host are attached."""

    def __init__(self, results: dict[str, HostResult]):
        self.results = results
        failed = [r for r in results.values() if not r.ok]
        lines = [f"{len(failed)} of {len(results)} hosts failed:"]
        for r in failed:
            lines.append("  " + RemoteError(r).message.replace("\n", "\n  "))
        super().__init__("\n".join(lines))


@dataclass
class TaskFailure:
    host: str
    task: str
    message: str


class ProvisionError(RainmakerError):
    """An Ansible run failed; names every host and task that failed."""

    def __init__(self, message: str, failures: list[TaskFailure] | None = None):
        self.failures = list(failures or [])
        lines = [message]
        for f in self.failures:
            lines.append(f"  {f.host}: task '{f.task}': {f.message}")
        super().__init__("\n".join(lines))


class SwitchdError(RainmakerError):
    """The switch's software could not be started, stopped or reached (names the switch)."""

    def __init__(self, message: str, *, switch: str, fix: str | None = None):
        self.switch = switch
        super().__init__(message, fix=fix)


def one_line(e: BaseException) -> str:
    """An error as one line of a log or of sweep.json (its lines joined, at most 500 characters)."""
    msg = getattr(e, "message", None) or str(e) or type(e).__name__
    return " | ".join(line.strip() for line in msg.splitlines() if line.strip())[:500]
