"""Fault injection on an emulated testbed, for tests.

Every machine of an emulated testbed is a network namespace with its own sshd; the
programs a run starts (agents, rain-worker, rain-client, the switch emulator) live in
those namespaces. These helpers break them the way a real testbed breaks:

    f = Faults(tb)                               # tb: an EmulatedTestbed that is up
    f.kill("worker0", r"rain-worker")            # SIGKILL, like the OOM killer
    with f.frozen("sw0", r"switch\\.emulator"):   # SIGSTOP ... SIGCONT
        ...
    with f.sshd_down("worker1"):                 # connections refused, sessions cut
        ...
    with f.link_down("worker0"):                 # the data link, switch side
        ...
    f.later(2.0, f.kill, "worker0", r"rain-worker")   # in a thread, while a run goes on

Each context manager puts the machine back as it found it, also when the test fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from orchestrator.testbed.emulated import SSHD, EmulatedTestbed, Machine, Plan


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check)


class Faults:
    def __init__(self, tb: EmulatedTestbed):
        self.tb = tb
        plan = tb._saved_plan()
        if plan is None:
            raise RuntimeError(f"the testbed in slot {tb.slot} is not up")
        self.plan: Plan = plan
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    # -- where things are ------------------------------------------------------------
    def machine(self, name: str) -> Machine:
        for m in self.plan.machines:
            if m.name == name:
                return m
        raise KeyError(f"no machine {name!r} in slot {self.plan.slot}: {[m.name for m in self.plan.machines]}")

    def netns(self, name: str) -> str:
        return self.machine(name).netns(self.plan.slot)

    def pids(self, name: str, pattern: str) -> list[int]:
        """Processes in the machine's namespace whose command line matches `pattern`
        (a regular expression searched in the arguments joined by spaces)."""
        r = _run(["ip", "netns", "pids", self.netns(name)], check=False)
        rx = re.compile(pattern)
        out = []
        for tok in r.stdout.split():
            try:
                cmd = Path(f"/proc/{tok}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            if rx.search(cmd):
                out.append(int(tok))
        return sorted(out)

    def send(self, name: str, pattern: str, sig: int) -> list[int]:
        pids = self.pids(name, pattern)
        if not pids:
            raise LookupError(f"no process matching {pattern!r} runs on {name}")
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    # -- faults ----------------------------------------------------------------------
    def kill(self, name: str, pattern: str, sig: int = signal.SIGKILL) -> list[int]:
        """Kill every process on `name` matching `pattern` (SIGKILL by default); their pids."""
        return self.send(name, pattern, sig)

    @contextmanager
    def frozen(self, name: str, pattern: str):
        """SIGSTOP the matching processes for the block's duration (a hung program)."""
        pids = self.send(name, pattern, signal.SIGSTOP)
        try:
            yield pids
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    @contextmanager
    def sshd_down(self, name: str):
        """Stop the machine's sshd, its sessions included (new connections are refused,
        open ones end), and start it again, as it was, when the block ends. The programs
        started over SSH keep running: they are detached from their sessions."""
        m = self.machine(name)
        pidfile = self.tb.machine_dir(m) / "sshd.pid"
        listener = int(pidfile.read_text().split()[0])
        d = self.tb.machine_dir(m)  # sshd retitles itself: its command line is rebuilt as up() wrote it
        argv = [SSHD, "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")]
        sshd = [p for p in self.pids(name, r"^sshd|/sshd ") if p != listener]
        for pid in [listener, *sshd]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _wait_gone([listener])
        try:
            yield
        finally:
            # The UTS namespace of the first start is gone with its sshd: a new one, same name.
            _run(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.netns(name),
                    "unshare",
                    "--uts",
                    "sh",
                    "-c",
                    'hostname "$1" && shift && exec "$@"',
                    "sh",
                    name,
                    *argv,
                ]
            )
            _wait_for(lambda: _listening(self.plan.mgmt_ip(m)), 10.0, f"sshd on {name} did not come back")

    @contextmanager
    def link_down(self, name: str):
        """Take the host's data link down at the switch's end (its swp port) for the block."""
        m = self.machine(name)
        iface = self.plan.switch_iface(m)
        ns = self.plan.switch.netns(self.plan.slot)
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", iface, "down"])
        try:
            yield iface
        finally:
            _run(["ip", "netns", "exec", ns, "ip", "link", "set", iface, "up"])

    # -- timing ----------------------------------------------------------------------
    def later(self, delay: float, fn, *args, **kw) -> threading.Thread:
        """Call fn(*args) after `delay` seconds in a thread (while the test runs a sweep).
        A context manager is entered for `kw['hold']` seconds, then left. Errors are kept
        in self.errors; join() waits for every fault and raises the first error."""
        hold = kw.pop("hold", None)

        def go() -> None:
            try:
                time.sleep(delay)  # the fault's timing is the test's input, not a readiness wait
                if hold is None:
                    fn(*args, **kw)
                else:
                    with fn(*args, **kw):
                        time.sleep(hold)
            except BaseException as e:  # noqa: BLE001 - reported by join()
                self.errors.append(e)

        t = threading.Thread(target=go, name=f"fault-{getattr(fn, '__name__', 'fn')}", daemon=True)
        t.start()
        self.threads.append(t)
        return t

    def join(self, timeout: float = 60.0) -> None:
        for t in self.threads:
            t.join(timeout)
        if self.errors:
            raise self.errors[0]


def _listening(addr: str) -> bool:
    import socket

    try:
        with socket.create_connection((addr, 22), timeout=0.5) as s:
            s.settimeout(0.5)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    def gone() -> bool:
        return not any(Path(f"/proc/{p}").exists() for p in pids)

    _wait_for(gone, timeout, f"processes {pids} did not end")
