"""The service probe (dilation.probe_service): each class's mean service time from one
light point of the spec's classes; a probe a stall left short of answers is measured
again, and the loads are planned from the answers or, failing them, the spec's costs."""

from __future__ import annotations

import json

import pytest

from orchestrator.experiment.dilation import PROBE_ATTEMPTS, PROBE_MIN_ANSWERS, probe_service
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.plan import TestbedShape, plan
from orchestrator.experiment.spec import Spec
from orchestrator.experiment.sweep import Sweep

K = 20.0
SHAPE = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)


def _spec() -> Spec:
    keys = {"dist": "keys", "keys": 10}
    return Spec.model_validate(
        {
            "name": "kv",
            "systems": ["rain"],
            "workers": {"per_host_threads": 1},
            "workload": {
                "classes": [
                    {"name": "get", "weight": 0.8, "task_type": 1, "service": keys | {"op": "get", "us_per_key": 12}},
                    {"name": "scan", "weight": 0.2, "task_type": 2, "service": keys | {"op": "scan", "us_per_key": 24}},
                ]
            },
            "database": {"keys": 5000},
            "load": {"capacity_fraction": [0.3, 0.6]},
            "dilation": {"emulated": K},
        }
    )


class _Runner:
    """A sweeper whose probe attempts answer as scripted: per attempt, each class's
    (answers, mean service in paper us), written as rain-client writes its summary."""

    def __init__(self, rd: RunDir, spec: Spec, script: list[dict[str, tuple[int, float]]]):
        self.rd, self.spec, self.script, self.attempts = rd, spec, script, []
        self.points = plan(spec, SHAPE)
        self.sweep = Sweep(rd.path, self.points, resume=False)

    def attempt(self, p, attempt=1, *, probe=False):
        assert probe and p.id == "service-probe"
        self.attempts.append(attempt)
        pd = self.rd.service_probe.fresh()
        pd.client("client0").mkdir(parents=True)
        classes = {
            n: {"received": got, "mean_service_ns": us * 1000 * K} for n, (got, us) in self.script[attempt - 1].items()
        }
        (pd.client("client0") / "summary.json").write_text(json.dumps({"classes": classes}))

    def stop_all(self):
        pass


def _probe(tmp_path, script):
    spec = _spec()
    rd = RunDir(tmp_path)
    runner = _Runner(rd, spec, script)
    rd.write_manifest({"points": []})
    rd.sweep.write_text("{}")
    log: list[str] = []
    probe_service(runner, rd, spec, SHAPE, log.append)
    return runner, rd.read_manifest(), log


def test_the_loads_are_planned_from_the_measured_service_times(tmp_path):
    runner, m, log = _probe(tmp_path, [{"get": (300, 90.0), "scan": (70, 300.0)}])
    assert runner.attempts == [1]
    assert m["service"]["measured_us"] == {"get": 90.0, "scan": 300.0}
    assert m["service"]["answers"] == {"get": 300, "scan": 70} and m["service"]["attempts"] == 1
    want = 0.8 * 90 + 0.2 * 300  # the mean service the capacity fractions are planned from
    first = runner.points[0]
    assert first.load_krps == pytest.approx(0.3 * 2 / want * 1000, rel=1e-3)
    assert not any("again" in line for line in log)


def test_a_probe_a_stall_left_short_is_measured_again(tmp_path):
    # the first attempt lost the GETs' answers to a stalled worker (as a loaded make test
    # once did); the second answered both classes, and only its times are used
    stalled = {"get": (PROBE_MIN_ANSWERS - 1, 400.0), "scan": (60, 300.0)}
    runner, m, log = _probe(tmp_path, [stalled, {"get": (250, 95.0), "scan": (65, 310.0)}])
    assert runner.attempts == [1, 2]
    assert m["service"]["measured_us"] == {"get": 95.0, "scan": 310.0} and m["service"]["attempts"] == 2
    (again,) = [line for line in log if "measuring it again" in line]
    assert f"get {PROBE_MIN_ANSWERS - 1}" in again and f"2 of at most {PROBE_ATTEMPTS}" in again
    # the short attempt is kept, out of the way, as a stalled point's is
    (kept,) = RunDir(tmp_path).stalled("service-probe")
    assert kept.id == "1" and "get" in json.loads((kept.client("client0") / "summary.json").read_text())["classes"]


def test_a_class_never_answered_leaves_the_spec_costs(tmp_path):
    script = [{"scan": (60, 300.0)}] * PROBE_ATTEMPTS
    runner, m, log = _probe(tmp_path, script)
    assert runner.attempts == list(range(1, PROBE_ATTEMPTS + 1))
    assert "service" not in m
    assert any(f"no answers for get in {PROBE_ATTEMPTS} attempts" in line for line in log), log
    assert runner.points[0].load_krps == pytest.approx(0.3 * 2 / (0.8 * 120 + 0.2 * 240) * 1000, rel=1e-3)


def test_short_in_every_attempt_uses_the_last_answers_and_says_so(tmp_path):
    script = [{"get": (5, 100.0 + i), "scan": (3, 300.0)} for i in range(PROBE_ATTEMPTS)]
    runner, m, log = _probe(tmp_path, script)
    assert runner.attempts == list(range(1, PROBE_ATTEMPTS + 1))
    assert m["service"]["measured_us"]["get"] == pytest.approx(100.0 + PROBE_ATTEMPTS - 1)
    assert any(f"in all {PROBE_ATTEMPTS} attempts" in line for line in log), log
