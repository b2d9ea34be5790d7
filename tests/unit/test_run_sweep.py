"""The sweeper without a testbed (its point pipeline replaced): what sweep.json records for a point that
was measured but failed its validity checks, and how an error of the switch (outside
orchestrator/) is retried like any other; the one exception root that makes it so.
Retries wait (on a fake clock) until the testbed answers, leftovers are cleared before
every attempt, and every attempt's reason is kept."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from orchestrator.errors import HostResult, RainmakerError, RemoteError
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.plan import Point
from orchestrator.experiment.report import _stalled_lines
from orchestrator.experiment.retry import Backoff, Waiter
from orchestrator.experiment.spec import Validity
from orchestrator.experiment.sweep import Sweep
from orchestrator.experiment.sweeper import Sweeper
from orchestrator.experiment.validity import Check, Verdict
from switch.bfrt.errors import BfrtError
from switch.control.errors import ControllerError
from switch.errors import SwitchError


def _point(i: int) -> Point:
    return Point(f"rain-f0.{i}-r1", i, "rain", None, None, 1, 100.0 * i, 0.1 * i, 10.0 * i, 100.0, 0.5, 1.0, "sleep", 4)


class _Progress:
    def start(self, total, done): ...
    def point(self, p, *eta): ...
    def advance(self): ...


class FakeTime:
    """A clock that only sleeping moves."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class _Bench:
    """What the sweeper uses of the bench (bench.py), recording in `events`."""

    def __init__(self, tmp_path, remeasure: int, logs: list[str], events: list[str]):
        self.spec = SimpleNamespace(validity=Validity(remeasure_stalled=remeasure))
        self.run_dir, self.log, self.progress, self.events = tmp_path, logs.append, _Progress(), events
        self.inv = None

    def stop_all(self):
        pass

    def clear_leftovers(self, p, attempt):
        self.events.append(f"clear {p.id if p else None} {attempt}")

    def phase(self, name):
        pass


def _runner(
    tmp_path,
    outcomes: dict[str, list],
    retries: int = 1,
    answers: list[dict] | None = None,
    budget: float = 120,
    remeasure: int = 2,
) -> tuple[Sweeper, list[str]]:
    """A Sweeper whose point pipeline returns or raises the next outcome of each point
    (after clearing the leftovers, as point.prepare_hosts does); the testbed's answers to
    the probes between attempts are `answers` in turn (then all answer). r.events lists
    what happened in order: clear, point, probe, recover."""
    points = [_point(1), _point(2)]
    sweep = Sweep(tmp_path, points, resume=False)
    logs: list[str] = []
    events: list[str] = []
    bench = _Bench(tmp_path, remeasure, logs, events)
    answers = list(answers or [])

    def measure(b, p, attempt=1, **where):
        b.clear_leftovers(p, attempt)
        events.append(f"point {p.id}")
        out = outcomes[p.id].pop(0)
        if isinstance(out, BaseException):
            raise out
        RunDir(tmp_path).point(p.id).fresh().write_verdict(out.to_dict())  # what the real one leaves
        return out

    def probe():
        events.append("probe")
        return answers.pop(0) if answers else {}

    r = Sweeper(bench, points, sweep, retries=retries, backoff=Backoff(budget_s=budget), measure=measure)
    r.time = FakeTime()
    r.events = events
    r.segments_of = lambda p: [p.measure_s]  # measured whole (test_segments.py: in segments)
    r._recover = lambda: events.append("recover")
    r._answers = probe
    r._waiter = lambda: Waiter(r.backoff, clock=r.time.clock, sleep=r.time.sleep)
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


def _good(pid: str) -> Verdict:
    return Verdict(pid, [Check("complete", True, 0, 0, "complete")])


def _lost(host: str = "worker1") -> RemoteError:
    return RemoteError(HostResult(host, "stop worker-agent", None, error="connection lost: Socket is closed"))


def test_a_retry_waits_until_the_testbed_answers_and_each_attempt_keeps_its_reason(tmp_path):
    """The sshd outage of issue 11: the retry does not start until worker1 answers again
    (growing pauses), leftovers are cleared before every attempt (the first attempt's
    agent is stopped before the second starts), and sweep.json keeps both attempts."""
    down = {"worker1": "unreachable: 10.0.0.3:22: Connection refused"}
    r, logs = _runner(
        tmp_path,
        {"rain-f0.1-r1": [_lost(), _good("rain-f0.1-r1")], "rain-f0.2-r1": [_good("rain-f0.2-r1")]},
        answers=[down, down],
    )
    r.sweep_all()
    assert r.time.sleeps == [1.0, 2.0, 4.0]  # pause, look; a longer pause, look; ...
    assert r.events == [
        "clear rain-f0.1-r1 1",
        "point rain-f0.1-r1",
        "probe",
        "probe",
        "probe",
        "recover",
        "clear rain-f0.1-r1 2",
        "point rain-f0.1-r1",
        "clear rain-f0.2-r1 1",  # no wait: the last attempt succeeded
        "point rain-f0.2-r1",
        "clear None 0",
    ]
    st = _state(tmp_path)
    a = st["rain-f0.1-r1"]
    assert a["status"] == "done" and a["attempts"] == 2 and a["reason"] is None
    assert [(e["attempt"], e["reason"]) for e in a["attempts_log"]] == [
        (1, "worker1: `stop worker-agent` connection lost: Socket is closed"),
        (2, None),
    ]
    assert [e["attempt"] for e in st["rain-f0.2-r1"]["attempts_log"]] == [1]
    assert any("still waiting for worker1 (unreachable: 10.0.0.3:22: Connection refused)" in m for m in logs)
    assert any("every host and the switch answer" in m for m in logs)


def test_waiting_is_bounded_by_the_budget_then_the_attempt_is_made_anyway(tmp_path):
    down = {"sw0": "unknown: BFRuntime at 10.0.0.1:50052 accepts connections but did not answer within 3 s"}
    r, logs = _runner(
        tmp_path,
        {"rain-f0.1-r1": [_lost(), _lost()], "rain-f0.2-r1": [_good("rain-f0.2-r1")]},
        answers=[down] * 100,
        budget=10,
    )
    r.sweep_all()
    # 10 s per point: the first point's retry, then the next point's first attempt
    assert r.time.sleeps == [1.0, 2.0, 4.0, 3.0] * 2
    st = _state(tmp_path)
    assert st["rain-f0.1-r1"]["status"] == "failed" and st["rain-f0.1-r1"]["attempts"] == 2
    assert len(st["rain-f0.1-r1"]["attempts_log"]) == 2
    assert any("gave up waiting: the retry budget of 10 s is spent and sw0 still not answering" in m for m in logs)
    # the next point has its own budget, and waits because the last attempt failed
    assert r.events.index("point rain-f0.2-r1") > r.events.index("clear rain-f0.2-r1 1")
    assert st["rain-f0.2-r1"]["status"] == "done"


def test_no_wait_when_nothing_failed(tmp_path):
    r, _ = _runner(tmp_path, {"rain-f0.1-r1": [_good("rain-f0.1-r1")], "rain-f0.2-r1": [_good("rain-f0.2-r1")]})
    r.sweep_all()
    assert r.time.sleeps == [] and "probe" not in r.events and "recover" not in r.events
    assert [e for e in r.events if e.startswith("clear")] == [
        "clear rain-f0.1-r1 1",
        "clear rain-f0.2-r1 1",
        "clear None 0",
    ]


def test_a_failed_clean_up_is_a_failed_attempt(tmp_path):
    """Leftovers that cannot be cleared (the host is away) fail the attempt, which is retried."""
    r, _ = _runner(tmp_path, {"rain-f0.1-r1": [_good("rain-f0.1-r1")], "rain-f0.2-r1": [_good("rain-f0.2-r1")]})
    calls = []

    def clear(p, attempt):
        calls.append((p.id if p else None, attempt))
        if len(calls) == 1:
            raise _lost()

    r.bench.clear_leftovers = clear
    r.sweep_all()
    st = _state(tmp_path)
    assert st["rain-f0.1-r1"]["status"] == "done" and st["rain-f0.1-r1"]["attempts"] == 2
    assert st["rain-f0.1-r1"]["attempts_log"][0]["reason"].startswith("worker1:")


def test_ctrl_c_while_waiting_leaves_the_point_todo_with_its_reason(tmp_path):
    r, _ = _runner(tmp_path, {"rain-f0.1-r1": [_lost()], "rain-f0.2-r1": []})

    def interrupted(s):
        raise KeyboardInterrupt

    r.time.sleep = interrupted
    with pytest.raises(KeyboardInterrupt):
        r.sweep_all()
    st = _state(tmp_path)["rain-f0.1-r1"]
    assert st["status"] == "todo" and st["reason"].startswith("worker1:")
    assert [e["reason"] for e in st["attempts_log"]] == [st["reason"]]


def _stalled(pid: str) -> Verdict:
    return Verdict(
        pid,
        [
            Check("complete", True, 0, 0, "complete"),
            Check("schedule_lag", False, 31.5, 10, "largest send lag 31.5 us of paper time; limit 10 us"),
        ],
    )


def test_a_point_the_host_stalled_is_measured_again_and_the_discarded_attempt_kept(tmp_path):
    good = Verdict("rain-f0.1-r1", [Check("complete", True, 0, 0, "complete"), Check("schedule_lag", True, 2, 10, "")])
    other = Verdict("rain-f0.2-r1", [Check("complete", True, 0, 0, "complete")])
    r, logs = _runner(tmp_path, {"rain-f0.1-r1": [_stalled("rain-f0.1-r1"), good], "rain-f0.2-r1": [other]})
    r.sweep_all()
    a = _state(tmp_path)["rain-f0.1-r1"]
    assert a["status"] == "done" and a["valid"] is True and a["attempts"] == 2
    assert a["attempts_log"][0]["reason"].startswith(
        "the host stalled the client, measured again: validity: schedule_lag"
    )
    rd = RunDir(tmp_path)
    assert [d.id for d in rd.stalled("rain-f0.1-r1")] == ["1"]
    assert rd.stalled("rain-f0.1-r1")[0].read_verdict()["valid"] is False  # the discarded attempt, as measured
    assert rd.point("rain-f0.1-r1").read_verdict()["valid"] is True  # the analysis reads the kept one
    assert [d.id for d in rd.points()] == ["rain-f0.1-r1", "rain-f0.2-r1"]
    assert any("host stalled the client (schedule_lag); measuring it again (1 of at most 2)" in line for line in logs)
    lines = _stalled_lines(rd, ["rain-f0.1-r1", "rain-f0.2-r1"])
    assert lines[0].startswith("1 measurement(s) discarded")
    assert any("`rain-f0.1-r1` attempt 1" in line and "schedule_lag 31.5" in line for line in lines)


def test_remeasuring_a_stalled_point_is_bounded_and_the_last_verdict_stands(tmp_path):
    pid = "rain-f0.1-r1"
    other = Verdict("rain-f0.2-r1", [Check("complete", True, 0, 0, "complete")])
    outcomes = {
        pid: [_stalled(pid), BfrtError("Read failed: UNAVAILABLE"), _stalled(pid), _stalled(pid)],
        "rain-f0.2-r1": [other],
    }
    r, _ = _runner(tmp_path, outcomes, retries=1, remeasure=2)
    r.sweep_all()
    a = _state(tmp_path)[pid]
    # two stalls re-measured, one outage retried (counted apart), the third stall is the verdict
    assert a["status"] == "done" and a["valid"] is False and a["attempts"] == 4
    assert a["reason"].startswith("validity: schedule_lag")
    assert [d.id for d in RunDir(tmp_path).stalled(pid)] == ["1", "3"]
    assert outcomes[pid] == []


def test_no_remeasure_when_the_spec_says_none_or_another_check_failed(tmp_path):
    pid = "rain-f0.1-r1"
    lost = Verdict(pid, [Check("lost", False, 0.1, 0.001, "10% lost")])
    r, _ = _runner(tmp_path, {pid: [lost], "rain-f0.2-r1": [_stalled("rain-f0.2-r1")]}, remeasure=0)
    r.sweep_all()
    st = _state(tmp_path)
    assert st[pid]["attempts"] == 1 and st["rain-f0.2-r1"]["attempts"] == 1
    assert not (tmp_path / "stalled").exists()


def test_a_long_point_is_measured_in_segments_and_a_stalled_segment_again(tmp_path, monkeypatch):
    """run_segments: each segment its own run; a stalled one set aside under stalled/
    and measured again (validity.remeasure_stalled per segment); another failure is
    kept; then the merged window is checked whole."""
    from orchestrator.experiment import model_beside, segments, validity

    pid = "rain-f0.1-r1"
    ok = Verdict(pid, [Check("complete", True, 0, 0, "complete"), Check("schedule_lag", True, 2, 10, "")])
    lost = Verdict(pid, [Check("lost", False, 0.1, 0.001, "10% lost")])
    plan = {1: [ok], 2: [_stalled(pid), _stalled(pid), ok], 3: [lost]}
    r, logs = _runner(tmp_path, {pid: [], "rain-f0.2-r1": []}, remeasure=2)
    seen = []

    def measure(b, p, attempt=1, segment=None):
        b.clear_leftovers(p, attempt)
        seen.append((segment, p.measure_s))
        # the point's record is there before its first segment: an interrupted point keeps it
        assert RunDir(tmp_path).point(p.id).read_point()["segments"] == [10.0, 10.0, 5.0]
        out = plan[segment].pop(0)
        d = segments.segment_dir(RunDir(tmp_path).point(p.id), segment).fresh()
        d.write_point({"id": p.id, "measure_s": p.measure_s, "segment": segment})
        d.write_verdict(out.to_dict())
        return out

    merged = Verdict(pid, [Check("complete", True, 0, 0, "complete")])
    monkeypatch.setattr(segments, "merge", lambda pd: [])
    monkeypatch.setattr(model_beside, "write", lambda *a, **k: {})
    monkeypatch.setattr(validity, "check_point", lambda *a, **k: merged)
    r.measure = measure
    got = r.run_segments(_point(1), [10.0, 10.0, 5.0])
    assert got is merged
    assert seen == [(1, 10.0), (2, 10.0), (2, 10.0), (2, 10.0), (3, 5.0)]
    rd = RunDir(tmp_path)
    assert [d.id for d in rd.stalled(pid)] == ["s2-1", "s2-2"]
    assert [d.id for d in segments.parts(rd.point(pid))] == ["1", "2", "3"]
    assert rd.point(pid).read_point()["segments"] == [10.0, 10.0, 5.0]
    assert any("segment 3 kept, not valid: lost" in line for line in logs)
    # before each segment, its re-measures named by their attempt
    assert r.events == [f"clear {pid} {n}" for n in (1, 1, 2, 3, 1)]
    lines = _stalled_lines(rd, [pid])
    assert any("segment 2, attempt 1, discarded" in line for line in lines)


def test_a_window_whose_latencies_stay_correlated_is_measured_longer_once(tmp_path, monkeypatch):
    """A drift of the testbed that lasts longer than a tenth of the window leaves the
    p99 with no interval (independence fails, value None): the point gets segments up
    to REPLICATIONS in all, within measure_max_s, and is judged whole again, once."""
    from orchestrator.experiment import model_beside, segments, validity

    pid = "rain-f0.1-r1"
    ok = Verdict(pid, [Check("complete", True, 0, 0, "complete")])
    seen = []

    def measure(b, p, attempt=1, segment=None):
        seen.append((segment, p.measure_s))
        d = segments.segment_dir(RunDir(tmp_path).point(p.id), segment).fresh()
        d.write_point({"id": p.id, "measure_s": p.measure_s, "segment": segment})
        return ok

    correlated = Verdict(pid, [Check("independence", False, None, 0.25, "correlated past a tenth")])
    judged = [correlated, correlated]
    windows = []

    def check_point(path, point, validity_):
        windows.append(point["measure_s"])
        return judged.pop(0)

    monkeypatch.setattr(segments, "merge", lambda pd: [])
    monkeypatch.setattr(model_beside, "write", lambda *a, **k: {})
    monkeypatch.setattr(validity, "check_point", check_point)
    r, logs = _runner(tmp_path, {pid: [], "rain-f0.2-r1": []})
    r.measure, r._longest = measure, lambda: 75.0
    got = r.run_segments(_point(1), [10.0, 10.0, 10.0])
    # 30 s in three segments, then four more of 10 s: 70 s, within measure_max_s (75 s)
    assert [s for s, _ in seen] == [1, 2, 3, 4, 5, 6, 7] and {m for _, m in seen} == {10.0}
    assert windows == [30.0, 70.0] and got is correlated  # judged again once; still failing, it stands
    pd = RunDir(tmp_path).point(pid)
    assert pd.read_point()["measure_s"] == 70.0 and pd.read_point()["segments"] == [10.0] * 7
    assert any("not independent over its 30 s window" in line and "4 more segments" in line for line in logs)


def test_replications_are_added_only_for_a_failed_independence_within_the_longest_window():
    from orchestrator.experiment.segments import replications_for

    bad = Verdict("x", [Check("independence", False, None, 0.25, "")])
    good = Verdict("x", [Check("independence", True, 1000, 1000, "")])
    assert replications_for(bad, [10.0] * 3, 240.0) == [10.0] * 17  # twenty segments in all
    assert replications_for(bad, [10.0] * 3, 55.0) == [10.0] * 2  # no longer than measure_max_s
    assert replications_for(bad, [10.0] * 20, 240.0) == []  # twenty already: sections can be made
    assert replications_for(bad, [10.0] * 3, None) == []  # no longer window allowed
    assert replications_for(good, [10.0] * 3, 240.0) == []
    assert replications_for(Verdict("x", []), [10.0] * 3, 240.0) == []


def test_the_r2p2_emulator_restarts_when_the_chosen_dilation_changes_its_pass_time(monkeypatch):
    """An automatic dilation chooses k after the set-up started the first point's
    program: R2P2's emulated pass (1 us x k) must follow it, not keep the set-up's."""
    from orchestrator import switchd
    from switch.control import registry

    started = []
    monkeypatch.setattr(switchd, "start", lambda inv, program, **kw: started.append(kw["emulator_args"]))
    monkeypatch.setattr(switchd, "connect", lambda *a, **k: SimpleNamespace(close=lambda: None))

    class Ctl:
        def __init__(self, *a):
            pass

        def bring_up_ports(self):
            return 0.0

    monkeypatch.setattr(registry, "controller_class", lambda system: Ctl)
    from orchestrator.experiment.switch_side import SwitchSide

    side = SwitchSide(
        SimpleNamespace(switch=SimpleNamespace(kind="emulated", name="sw0", programmable=True)), lambda m: None
    )
    side.use("r2p2", 100.0, None)  # R2P2-SW's settings need none of it
    side.use("r2p2", 100.0, None)  # nothing changed: kept
    side.use("r2p2", 2000.0, None)  # the calibration chose k = 2000
    assert started == [["--recirc-delay-us", "100"], ["--recirc-delay-us", "2000"]]
