"""What both agents share: configuration, EAL arguments, running a child program."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

READY = "rain-agent ready"
DONE = "rain-agent done"


class AgentError(Exception):
    """Bad configuration or a child that failed; printed, exit status 2 or 1."""


def say(msg: str) -> None:
    print(msg, flush=True)


def load_config(path: str, keys: tuple[str, ...] = ("binary", "eal", "out_dir")) -> dict:
    """The agent's JSON config, with `keys` (the DPDK agents' need `eal`; the RPC agents' do not)."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise AgentError(f"cannot read agent config {path}: {e}") from None
    if not isinstance(cfg, dict):
        raise AgentError(f"agent config {path}: expected a JSON object")
    for key in keys:
        if key not in cfg:
            raise AgentError(f"agent config {path} lacks '{key}'")
    return cfg


def eal_args(eal: dict) -> list[str]:
    """EAL arguments from the orchestrator's description of this host's NIC and cores."""
    lcores = str(eal.get("lcores", "0"))
    # "0@(0-1)" maps lcores onto CPU sets (shared cores); plain lists use -l.
    args = [
        f"--lcores={lcores}" if "@" in lcores else "-l",
        *([] if "@" in lcores else [lcores]),
        f"--file-prefix={eal['file_prefix']}",
        "--no-telemetry",
        "--log-level=lib.eal:error",
    ]
    if eal.get("no_huge", False):
        args.append("--no-huge")
    args += list(eal.get("devices", []))
    return args


def runtime_dir(eal: dict) -> Path:
    """The runtime folder DPDK's EAL makes for a primary process with this config's
    --file-prefix (eal_get_runtime_dir: /var/run/dpdk/<prefix> as root, else under
    $XDG_RUNTIME_DIR or /tmp). The programs remove it when they end; one that was
    killed or died in rte_exit() leaves it (about 1 MB), so the agent removes it too."""
    base = "/var/run" if os.geteuid() == 0 else os.environ.get("XDG_RUNTIME_DIR", "/tmp")
    return Path(base) / "dpdk" / str(eal["file_prefix"])


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class Child:
    """A program run by an agent: output to a log file, readiness from a log line."""

    def __init__(self, argv: list[str], log: Path, runtime: Path | None = None):
        self.argv = argv
        self.log_path = log
        self.runtime = runtime  # the program's own folder, removed once it has ended
        # A fresh log: a line an earlier run left ("rain-worker ready") must not pass for this one's.
        self._log = open(log, "wb", buffering=0)
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:  # readable once the child has ended: Stop.wait sleeps on it
            self.exit_fd: int | None = os.pidfd_open(self.proc.pid)
        except (OSError, AttributeError):
            self.exit_fd = None

    def wait_line(self, text: str, timeout: float) -> None:
        """Block until `text` appears in the log; fail if the child dies or time runs out."""
        deadline = time.monotonic() + timeout
        pos = 0
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            if text.encode() in chunk:
                return
            pos = max(0, pos + len(chunk) - len(text))
            if self.proc.poll() is not None:
                raise AgentError(
                    f"{Path(self.argv[0]).name} exited with status {self.proc.returncode} before "
                    f"'{text}':\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise AgentError(
                    f"{Path(self.argv[0]).name} did not print '{text}' within {timeout:.0f} s:\n{self.tail()}"
                )
            time.sleep(0.02)

    def ready(self, text: str, cfg: dict) -> None:
        """wait_line with the config's timeout; a child that never got ready is stopped."""
        try:
            self.wait_line(text, timeout=float(cfg.get("ready_timeout_s", 30)))
        except BaseException:
            self.stop()
            raise

    def tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> int:
        """TERM, then KILL after `grace` seconds; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)
            self.exit_fd = None
        if self.runtime is not None:
            shutil.rmtree(self.runtime, ignore_errors=True)
        return self.proc.returncode


class Stop:
    """Turns SIGTERM/SIGINT into a flag the agent's loop checks, and lets the loop sleep
    until a signal or its child's exit wakes it (`wait`) rather than poll for them: on a
    shared-core VM each wake-up of a Python thread costs about 0.1-0.3 ms of CPU, and an
    idle testbed's agents polling at 20-50 Hz took a fifth of its idle CPU."""

    def __init__(self) -> None:
        self.requested = False
        # Python runs a handler only between bytecodes; the wake-up fd is what makes a
        # signal end a select() at once (PEP 475 would otherwise restart it).
        self._r, w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_: object) -> None:
        self.requested = True

    def wait(self, seconds: float, child: Child | None = None) -> None:
        """Sleep up to `seconds`; return early when a signal arrives or `child` ends."""
        fds = [self._r]
        if child is not None and child.exit_fd is not None:
            fds.append(child.exit_fd)
        elif child is not None:  # no pidfd (kernel < 5.3): look at the child often
            seconds = min(seconds, 0.05)
        if self.requested:
            return
        select.select(fds, [], [], max(0.0, seconds))
        try:
            while os.read(self._r, 512):
                pass
        except BlockingIOError:
            pass


def main_guard(fn) -> None:
    try:
        sys.exit(fn())
    except AgentError as e:
        print(f"rain-agent error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


CPU_LATENCY = "/dev/cpu_dma_latency"  # the kernel's PM QoS CPU latency request (Documentation/power/pm_qos_interface)


class WakeLatency:
    """While the load runs, ask the kernel for idle CPUs that wake at once (a CPU
    latency of 0 us): cpuidle then polls instead of halting. In a VM a halted vCPU
    waits for the hypervisor to run it again when its timer fires: measured on a
    2-core VM, a real-time thread sleeping 1 ms woke up to 20 ms late about once every
    20 s, while a thread that never slept was never held up 5 ms. The client sleeps
    between sends, and a send that late fails the point's schedule checks. The request
    is the whole machine's (every CPU, every namespace of an emulated testbed) and lasts
    while its file is open: from the load's start until the client ends. Both load
    generators' agents hold it (rain-client's and rpc-client's)."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def hold(self, latency_us: int = 0) -> str:
        if self.fd is not None:
            return "held"
        try:
            fd = os.open(CPU_LATENCY, os.O_WRONLY)
        except OSError as e:
            return f"not held: {CPU_LATENCY}: {e.strerror}"
        try:
            os.write(fd, struct.pack("i", int(latency_us)))
        except OSError as e:
            os.close(fd)
            return f"not held: {CPU_LATENCY}: {e.strerror}"
        self.fd = fd
        return f"held at {latency_us} us"

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
