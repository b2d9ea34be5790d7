"""The runner's sweep loop without a testbed: what sweep.json records for a point that
was measured but failed its validity checks, and how an error of the switch (outside
orchestrator/) is retried like any other; the one exception root that makes it so."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import HostResult, RainmakerError, RemoteError
from orchestrator.experiment.plan import Point
from orchestrator.experiment.run import Runner
from orchestrator.experiment.sweep import Sweep
from orchestrator.experiment.validity import Check, Verdict
from switch.bfrt.errors import BfrtError
from switch.control.errors import ControllerError
from switch.errors import SwitchError


def _point(i: int) -> Point:
    return Point(f"rain-f0.{i}-r1", i, "rain", None, None, 1, 100.0 * i, 0.1 * i, 10.0 * i, 100.0, 0.5, 1.0, "sleep", 4)


class _Progress:
    def start(self, total, done): ...
    def point(self, p): ...
    def advance(self): ...


def _runner(tmp_path, outcomes: dict[str, list], retries: int = 1) -> tuple[Runner, list[str]]:
    """A Runner whose run_point returns or raises the next outcome of each point."""
    points = [_point(1), _point(2)]
    sweep = Sweep(tmp_path, points, resume=False)
    r = Runner.__new__(Runner)  # no testbed: only the sweep loop runs
    logs: list[str] = []
    r.points, r.sweep, r.retries, r.log, r.progress = points, sweep, retries, logs.append, _Progress()
    recovered = []

    def run_point(p):
        out = outcomes[p.id].pop(0)
        if isinstance(out, BaseException):
            raise out
        return out

    r.run_point = run_point
    r.stop_all = lambda: None
    r._recover = lambda: recovered.append(1)
    return r, logs


def _state(tmp_path) -> dict:
    return json.loads((tmp_path / Sweep.FILE).read_text())["points"]


def test_one_exception_root():
    from orchestrator import errors

    assert errors.RainmakerError is RainmakerError
    for cls in (SwitchError, BfrtError, ControllerError):
        assert issubclass(cls, RainmakerError)
    e = BfrtError("Write failed: UNAVAILABLE", fix="is bf_switchd running?")
    assert e.render() == "Write failed: UNAVAILABLE\n  fix: is bf_switchd running?" and e.exit_code == 1


def test_a_measured_point_that_fails_validity_is_recorded_with_its_reasons(tmp_path):
    bad = Verdict(
        "rain-f0.1-r1",
        [
            Check("complete", True, 0, 0, "results of 1 client host(s) complete"),
            Check("timed_out", False, 0.1, 0.001, "600 of 6,000 requests timed out (10%; limit 0.1%)"),
            Check("samples_p99", False, 50, 100, "samples per class task: 50: 'task' has fewer than 100"),
            Check("interarrival", None, None, 0.01, "not run: no trace"),
        ],
    )
    good = Verdict("rain-f0.2-r1", [Check("complete", True, 0, 0, "complete"), Check("lost", True, 0, 0.001, "none")])
    r, logs = _runner(tmp_path, {"rain-f0.1-r1": [bad], "rain-f0.2-r1": [good]})
    r.sweep_all()
    st = _state(tmp_path)
    a, b = st["rain-f0.1-r1"], st["rain-f0.2-r1"]
    assert a["status"] == "done" and a["valid"] is False
    assert a["reason"] == (
        "validity: timed_out: 600 of 6,000 requests timed out (10%; limit 0.1%); "
        "samples_p99: samples per class task: 50: 'task' has fewer than 100"
    )
    assert b["status"] == "done" and b["valid"] is True and b["reason"] is None
    assert r.sweep.invalid() == ["rain-f0.1-r1"]
    assert any("not valid: timed_out, samples_p99" in line for line in logs)


@pytest.mark.parametrize(
    "error",
    [
        BfrtError("Read failed: UNAVAILABLE: the switch went away"),
        ControllerError("worker 3 has no port", subject=3),
        RemoteError(HostResult("worker1", "true", None, error="connection lost")),
    ],
    ids=["bfrt", "controller", "remote"],
)
def test_errors_of_the_switch_and_the_hosts_are_retried_then_fail_the_point(tmp_path, error):
    good = Verdict("rain-f0.2-r1", [Check("complete", True, 0, 0, "complete")])
    r, logs = _runner(tmp_path, {"rain-f0.1-r1": [error, error], "rain-f0.2-r1": [good]}, retries=1)
    r.sweep_all()
    st = _state(tmp_path)
    assert st["rain-f0.1-r1"]["status"] == "failed" and st["rain-f0.1-r1"]["attempts"] == 2
    assert st["rain-f0.1-r1"]["reason"] == error.message.splitlines()[0].strip()
    assert st["rain-f0.2-r1"]["status"] == "done"
    assert sum("attempt" in line for line in logs) == 2


def test_a_bug_is_not_retried(tmp_path):
    r, _ = _runner(tmp_path, {"rain-f0.1-r1": [KeyError("oops")], "rain-f0.2-r1": []})
    with pytest.raises(KeyError):
        r.sweep_all()
    assert _state(tmp_path)["rain-f0.1-r1"]["status"] == "running"  # a resume reruns it
