"""The coordinator (orchestrator/experiment/coordinator.py) against fake hosts and a
fake switch: when it acts, the order of a move's steps, and what a failure leaves."""

from __future__ import annotations

import json
import threading
from pathlib import PurePosixPath
from types import SimpleNamespace

import pytest

from orchestrator.experiment.coordinator import AgentSite, Coordinator
from orchestrator.experiment.layout import PointDir

CALLS: list = []


class FakeRemote:
    """Answers `tail -n 1 decisions.jsonl` with the newest report it was given and
    records `python3 -m hosts.agent enable ...` calls."""

    def __init__(self, host: str, fail_enable: bool = False):
        self.host = host
        self.report: dict | None = None
        self.fail_enable = fail_enable

    def run(self, argv, *, timeout, check=True, cwd=None):
        if argv[0] == "tail":
            return SimpleNamespace(stdout=json.dumps(self.report) + "\n" if self.report else "")
        CALLS.append((self.host, tuple(argv[argv.index("--worker") :])))
        if self.fail_enable:
            raise RuntimeError(f"{self.host}: ssh: connection refused")
        return SimpleNamespace(stdout="")


class FakeSwitch:
    def move_worker(self, worker, slice_id):
        CALLS.append(("switch", ("move_worker", worker, slice_id)))


def report(t, overload, idleness, members):
    return {"t": t, "overload": overload, "idleness": idleness, "members": members}


def coordinator(remotes):
    sites = [
        AgentSite(h, r, PurePosixPath(f"/run/{h}"), PurePosixPath("/opt/rain/agent"), base=2 * i, threads=2)
        for i, (h, r) in enumerate(remotes.items())
    ]
    return Coordinator(sites, FakeSwitch(), threading.Lock(), 1.0, "python3", log=lambda m: None)


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()


def test_a_move_is_leave_switch_join_and_is_not_repeated_on_a_stale_report():
    w0, w1 = FakeRemote("worker0"), FakeRemote("worker1")
    c = coordinator({"worker0": w0, "worker1": w1})
    # slice 0 (host 0) overloaded, slice 1 (host 1) idle: worker 2 or 3 moves
    w0.report = report(1.0, {"0": 2}, {"0": 0.0}, {"0": {"0": 8, "1": 8}})
    w1.report = report(1.0, {"1": 0}, {"1": 2.0}, {"1": {"2": 2, "3": 1}})
    reports = c._fresh_reports()
    assert reports is not None
    c._act(reports)
    assert CALLS == [
        ("worker1", ("--worker", "1", "--disable")),  # global 3 is host 1's worker 1; the least quota
        ("switch", ("move_worker", 3, 0)),
        ("worker1", ("--worker", "1", "--slice", "0", "--quota", "1")),
    ]
    # nothing new: no action; a newer report that still has worker 3 in slice 1 (its
    # interval ended during the move): no action either
    assert c._fresh_reports() is None
    w0.report = report(2.0, {"0": 2}, {"0": 0.0}, {"0": {"0": 8, "1": 8}})
    w1.report = report(2.0, {"1": 0}, {"1": 2.0}, {"1": {"2": 2, "3": 1}})
    assert c._fresh_reports() is None
    # once it sees the move, the coordinator acts again (slice 1 has one worker left: no move)
    w1.report = report(2.1, {"0": 0, "1": 0}, {"0": 0.0, "1": 1.0}, {"0": {"3": 1}, "1": {"2": 2}})
    c._act(c._fresh_reports())
    assert len(CALLS) == 3 and len(c.rows) == 2 and c.rows[1]["moves"] == []
    assert c.rows[0]["moves"][0]["worker"] == 3 and c.rows[0]["moves"][0]["host"] == "worker1"


def test_a_failed_step_stops_the_coordinator_and_is_written(tmp_path):
    w0, w1 = FakeRemote("worker0"), FakeRemote("worker1", fail_enable=True)
    c = coordinator({"worker0": w0, "worker1": w1})
    c.period_s = 0.01
    w0.report = report(1.0, {"0": 1}, {"0": 0.0}, {"0": {"0": 8, "1": 8}})
    w1.report = report(1.0, {"1": 0}, {"1": 2.0}, {"1": {"2": 2, "3": 2}})
    c.start(0.0)
    c._thread.join(timeout=10)
    assert not c._thread.is_alive()
    assert "connection refused" in c.error
    pd = PointDir(tmp_path)
    summary = c.stop(pd)
    assert summary == {"intervals": 1, "moves": 1, "error": c.error}
    (row,) = pd.read_coordinator()
    assert "connection refused" in row["moves"][0]["error"]
    assert not any(call[0] == "switch" for call in CALLS)  # it never reached the switch


def test_a_torn_or_missing_report_waits():
    w0, w1 = FakeRemote("worker0"), FakeRemote("worker1")
    c = coordinator({"worker0": w0, "worker1": w1})
    w0.report = report(1.0, {"0": 0}, {"0": 2.0}, {"0": {"0": 2, "1": 2}})
    assert c._fresh_reports() is None  # worker1 has not reported yet
    w1.run = lambda argv, **kw: SimpleNamespace(stdout='{"t": 1.0, "overl')  # being written
    assert c._fresh_reports() is None
