"""The testbed as one run holds it: a connection to every machine, the switch's session
(switch_side.py), the agents this run started, the clock of a point's phases and the
spec the points are measured under. point.py measures a point on it; sweeper.py drives
the points."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path, PurePosixPath

from ..errors import RainmakerError
from ..inventory import Host, Inventory
from ..remote import Background
from ..systems import get as get_system
from . import agent_config
from .machines import Testbed, deploy
from .plan import Point
from .spec import Spec
from .switch_side import SwitchSide

REMOTE_PYTHON = "python3"  # the host's own Python runs the agents (standard library only)
AGENT_READY = "rain-agent ready"
AGENT_DONE = "rain-agent done"


class Bench:
    def __init__(self, spec: Spec, inv: Inventory, run_dir: Path, *, log, progress):
        self.spec, self.inv, self.run_dir = spec, inv, run_dir
        self.log, self.progress = log, progress
        self.stamp = run_dir.name
        self.tb = Testbed(inv)
        self.switch = SwitchSide(inv, log)
        self.running: list[tuple[str, Background]] = []
        self.overheads: list[float] = []  # per point: set-up and tear-down around the load
        self.phases: list[tuple[str, float]] = []
        # Each measurement's identity in its requests (rain-client --epoch): consecutive
        # ones always differ, and a run starts where another is unlikely to have been.
        self._epoch = int.from_bytes(os.urandom(1), "little")

    # -- set-up ----------------------------------------------------------------------
    def prepare(self, first: Point | None) -> None:
        """Before the first point: stop what earlier runs left on the hosts, bring the
        deployed bundle up to date and start the first point's switch program."""
        self.phase("clean")
        hosts = [h.name for h in self.inv.hosts]  # not the switch: its software may be kept running
        killed = self.tb.parallel(lambda n: self.tb.remotes[n].kill_leftovers(), hosts)
        n_killed = sum(len(v) for v in killed.values())
        if n_killed:
            self.log(f"stopped {n_killed} leftover process group(s) of an earlier run")
        self.phase("deploy")
        deploy(self.tb, self.log)
        self.phase("switch")
        self._use_first(first.system if first is not None else "rain", [first] if first is not None else [])
        # Heavy imports (pandas, scipy.stats) now, not inside the first point's timing.
        import pandas  # noqa: F401
        import scipy.stats  # noqa: F401

        from . import analyze, validity  # noqa: F401

    def settings(self, p: Point):
        """The controller's settings for p (its system's, for its variant's parameters;
        None for a server-side system's forwarder, which has only its defaults)."""
        system = get_system(p.system)
        return system.settings(self.spec, p.params, self.inv) if system.settings is not None else None

    def use_program(self, p: Point) -> None:
        self.switch.use(p.system, p.dilation, self.settings(p))

    def _use_first(self, system: str, points: list[Point]) -> None:
        """`system`'s program, as the first of `points` of it needs it (without one: at
        k = 1, with the spec's settings)."""
        first = next((p for p in points if p.system == system), None)
        if first is not None:
            self.use_program(first)
        else:
            settings = get_system(system).settings
            self.switch.use(system, 1.0, settings(self.spec, {}, self.inv) if settings is not None else None)

    def close(self) -> None:
        self.stop_all()
        self.switch.close()
        self.tb.close()

    # -- a point's clock and identity ------------------------------------------------
    def phase(self, name: str) -> None:
        now = time.monotonic()
        if self.phases:
            last, t = self.phases[-1]
            self.phases[-1] = (last, round(now - t, 3))
        self.phases.append((name, now))
        self.progress.phase(name)

    def next_epoch(self) -> int:
        self._epoch = self._epoch % 255 + 1  # 1..255
        return self._epoch

    def remote_dir(self, host: Host, p: Point, role: str) -> PurePosixPath:
        return PurePosixPath(host.deploy_root) / "run" / "points" / self.stamp / p.id / role

    # -- agents ----------------------------------------------------------------------
    def start_agent(self, name: str, role: str, cfg: dict, out: PurePosixPath) -> Background:
        """Start `role`'s agent on host `name` with `cfg`, and wait until it is ready."""
        r = self.tb.remotes[name]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(cfg, fh, indent=1)
        try:
            # An earlier attempt's files must not pass for this one's: its worker.log already
            # says "rain-worker ready", its agent.json a clean exit.
            r.run(["rm", "-rf", "--", str(out)], timeout=20)
            r.put(fh.name, str(out / "agent-config.json"))  # creates the folders
        finally:
            Path(fh.name).unlink()
        bg = r.start(
            f"{role}-agent",
            [REMOTE_PYTHON, "-m", "hosts.agent", role, "--config", str(out / "agent-config.json")],
            cwd=str(PurePosixPath(r.target.deploy_root) / "agent"),
        )
        self.running.append((name, bg))
        # the agent is ready once its program is (a database build may hold it)
        r.wait_ready(bg, log_regex=AGENT_READY, timeout=max(60.0, float(cfg.get("ready_timeout_s", 0)) + 30))
        return bg

    def signal(self, name: str, bg: Background) -> float:
        """SIGUSR1 to host `name`'s agent (only: the programs it runs have their own
        meaning for it): a worker's turns its tokens on, a client's starts the load.
        When it was delivered (the host has started)."""
        # Anchored: the group's shell wrapper has the same words later in its command line.
        self.tb.remotes[name].run(
            ["pkill", "-USR1", "-g", str(bg.pgid), "-f", r"^[^ ]*python3[^ ]* -m hosts\.agent "], timeout=20
        )
        return time.monotonic()

    def stop_all(self) -> None:
        """Stop whatever agents this run started (Ctrl-C, a failed attempt)."""
        for name, bg in self.running:
            try:
                self.tb.remotes[name].stop(bg, grace=10)
            except RainmakerError:
                pass
        self.running = []

    def clear_leftovers(self, p: Point | None, attempt: int) -> None:
        """Stop whatever an earlier attempt or run left on the hosts (agents, and
        rain-worker and rain-client with them: one process group each), and remove DPDK
        runtime folders no process holds any more (a killed program leaves its own).
        Before every attempt, not only after a failure: an attempt that failed while a
        host was away could not stop that host's agent, and the next start would meet it."""
        inv = self.inv

        def one(n: str) -> list:
            h = inv.host(n)
            return self.tb.remotes[n].kill_leftovers(stale_dirs=[agent_config.dpdk_runtime_dir(inv, h, h.role)])

        hosts = [h.name for h in inv.hosts]
        stopped = self.tb.parallel(one, hosts)
        found = [f"{n}: {s.name} ({s.how})" for n in hosts for s in stopped[n]]
        if found and p is not None:
            self.log(f"{p.id}: before attempt {attempt}, stopped what was left running: {', '.join(found)}")

    def reconnect(self, points: list[Point]) -> None:
        """Between attempts: drop connections (a host may have come back) and reconnect
        the switch (restarted only if it is down: switch_side.switch_session)."""
        for r in self.tb.remotes.values():
            r.close()
        self._use_first(self.switch.forget() or "rain", points)
