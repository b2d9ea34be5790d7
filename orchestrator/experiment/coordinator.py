"""The coordinator: Algorithm 1's cross-slice rebalancing (lines 32-37) on a live
testbed, for a point that adapts.

Each worker agent decides its own workers' token quotas once per control interval and
appends its report (per slice: overload count, idleness, members with their quotas) to
its decisions.jsonl (hosts/agent/adaptive.py). The coordinator, a thread of the run,
reads every agent's newest report over SSH; once each host has reported an interval
it has not acted on, it sums them (`adaptive.rebalance`, the code the simulated
testbed runs) and carries each move out without losing or repeating a task:

1. leave: the agent turns the worker's tokens off (`enable --worker I --disable`): it
   sends no more tokens for its old slice; the tasks it holds it still runs and answers.
2. switch: the controller moves the worker (`move_worker`): out of the old slice's
   multicast group ($pre.mgid, its $pre.node), its RDMA write state rebuilt (PSN from
   0), its dispatch entry re-installed, into the new slice's group.
3. join: the agent sets the worker's slice and quota 1 and turns its tokens on; the
   worker re-registers (rain-worker: the tokens it left in the old slice's queue are
   forgotten, its QP reset). A task that later meets one of those old tokens is still
   dispatched to it and runs there: no task is dropped, none runs twice.

Every interval it acted on is a row of the point's coordinator.jsonl: when (testbed
seconds since the load started), the summed view (labels, overload, idleness), each
host's report time, and each move with its reason, its steps' durations or its error.
A move that fails stops the coordinator and fails the point (point.py).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from hosts.agent.adaptive import rebalance

from ..errors import RainmakerError
from .layout import PointDir


@dataclass(frozen=True)
class AgentSite:
    """Where one worker host's agent keeps its files, and which global worker ids it runs."""

    host: str
    remote: Any  # orchestrator.remote.Remote
    out_dir: PurePosixPath  # the agent's output folder (decisions.jsonl, worker.ctl)
    agent_dir: PurePosixPath  # where `python3 -m hosts.agent` runs
    base: int  # global id of its worker 0
    threads: int


class Coordinator:
    POLLS_PER_INTERVAL = 4

    def __init__(self, sites: list[AgentSite], ctl, ctl_lock: threading.Lock, control_s: float, python: str, log):
        self.sites = sites
        self.ctl = ctl
        self.lock = ctl_lock
        self.period_s = max(0.2, control_s / self.POLLS_PER_INTERVAL)
        self.python = python
        self.log = log
        self.rows: list[dict] = []
        self.error: str | None = None
        self.load_start: float | None = None
        self._seen: dict[str, float] = {}
        self._moved: dict[int, int] = {}  # worker -> the slice the coordinator last moved it to
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coordinator", daemon=True)

    def start(self, load_start: float) -> None:
        self.load_start = load_start
        self._thread.start()

    def stop(self, pd: PointDir) -> dict:
        """Stop, write coordinator.jsonl; a summary for timing.json."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        pd.write_coordinator(self.rows)
        moves = [m for r in self.rows for m in r["moves"]]
        return {"intervals": len(self.rows), "moves": len(moves), "error": self.error}

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period_s):
                reports = self._fresh_reports()
                if reports is not None:
                    self._act(reports)
        except Exception as e:  # noqa: BLE001 - the point fails with this (point.py), the run goes on
            self.error = (str(e).splitlines() or [type(e).__name__])[0]
            self.log(f"coordinator stopped: {self.error}")

    def _newest(self, site: AgentSite) -> dict | None:
        r = site.remote.run(["tail", "-n", "1", str(site.out_dir / "decisions.jsonl")], timeout=20, check=False)
        try:
            rec = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else None
        except ValueError:  # a line being written: read it next time
            return None
        return rec if isinstance(rec, dict) and isinstance(rec.get("t"), (int, float)) else None

    def _fresh_reports(self) -> dict[str, dict] | None:
        """Every host's newest report, once each has one the coordinator has not acted on
        and that already sees the moves it made (an agent may report an interval that
        ended while a move was under way: acting on it would move the worker again)."""
        newest = {s.host: self._newest(s) for s in self.sites}
        for h, rec in newest.items():
            if rec is None or rec["t"] <= self._seen.get(h, -1.0):
                return None
            members = rec.get("members") if isinstance(rec.get("members"), dict) else {}
            where = {int(w): int(s) for s, ws in members.items() if isinstance(ws, dict) for w in ws}
            if any(where.get(w, dst) != dst for w, dst in self._moved.items()):
                return None
        return newest  # type: ignore[return-value]

    def _act(self, reports: dict[str, dict]) -> None:
        moves, view = rebalance(list(reports.values()))
        now = time.monotonic()
        row: dict = {
            "t": round(now - (self.load_start or now), 3),
            "reports_t": {h: r["t"] for h, r in reports.items()},
            **view,
            "moves": [],
        }
        self.rows.append(row)
        self._seen.update({h: r["t"] for h, r in reports.items()})
        for m in moves:
            entry = {**m.__dict__}
            row["moves"].append(entry)
            try:
                entry.update(self.move(m.worker, m.dst))
                self._moved[m.worker] = m.dst
            except Exception as e:
                entry["error"] = (str(e).splitlines() or [type(e).__name__])[0]
                raise
            self.log(f"coordinator: {m.why} ({entry['took_s']:.2f} s)")

    # -- one move ------------------------------------------------------------------------
    def site_of(self, worker: int) -> AgentSite:
        for s in self.sites:
            if s.base <= worker < s.base + s.threads:
                return s
        raise RainmakerError(f"coordinator: no worker host runs worker {worker}")

    def _agent(self, site: AgentSite, *args: str) -> None:
        ctl = str(site.out_dir / "worker.ctl")
        site.remote.run(
            [self.python, "-m", "hosts.agent", "enable", "--ctl", ctl, *args], timeout=30, cwd=str(site.agent_dir)
        )

    def move(self, worker: int, dst: int) -> dict:
        """Leave, switch, join (the module's docstring); the seconds each step took."""
        site = self.site_of(worker)
        i = str(worker - site.base)
        t0 = time.monotonic()
        self._agent(site, "--worker", i, "--disable")
        t1 = time.monotonic()
        with self.lock:
            self.ctl.move_worker(worker, dst)
        t2 = time.monotonic()
        self._agent(site, "--worker", i, "--slice", str(dst), "--quota", "1")
        t3 = time.monotonic()
        return {
            "host": site.host,
            "leave_s": round(t1 - t0, 3),
            "switch_s": round(t2 - t1, 3),
            "join_s": round(t3 - t2, 3),
            "took_s": round(t3 - t0, 3),
        }
