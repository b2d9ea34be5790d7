"""sweep.json: what each transition records, what a resume picks up, and that a damaged
file is a UsageError naming the file, the point and the fix (exit status 2 from the
CLI), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import UsageError
from orchestrator.experiment.plan import Point
from orchestrator.experiment.retry import Backoff
from orchestrator.experiment.sweep import DONE, FAILED, TODO, Sweep
from tests.cli import rainmaker

REPO = Path(__file__).resolve().parents[2]


def _point(i: int) -> Point:
    return Point(f"rain-f0.{i}-r1", i, "rain", None, None, 1, 100.0 * i, 0.1 * i, 10.0 * i, 100.0, 0.5, 1.0, "sleep", 4)


POINTS = [_point(1), _point(2), _point(3)]


def _file(tmp_path) -> dict:
    return json.loads((tmp_path / Sweep.FILE).read_text())


def test_back_off_schedule_grows_is_capped_and_stays_within_the_budget():
    assert list(Backoff(budget_s=60).pauses()) == [1, 2, 4, 8, 16, 16, 13]
    assert list(Backoff(first_s=0.5, factor=3, max_s=10, budget_s=30).pauses()) == [0.5, 1.5, 4.5, 10, 10, 3.5]
    assert sum(Backoff().pauses()) == pytest.approx(120)
    assert list(Backoff(budget_s=0).pauses()) == []
    for bad in ({"first_s": 0}, {"factor": 0.5}, {"max_s": 0.1}, {"budget_s": -1}):
        with pytest.raises(ValueError):
            Backoff(**bad)


def test_each_attempt_is_logged_with_its_reason(tmp_path):
    sw = Sweep(tmp_path, POINTS, resume=False)
    pid = POINTS[0].id
    sw.start(pid)
    sw.attempt_failed(pid, "worker1: connection lost")
    assert _file(tmp_path)["points"][pid]["status"] == "running"  # a crash now reruns it
    sw.start(pid)
    sw.attempt_failed(pid, "worker-agent is already running")
    sw.finish(pid, FAILED, "worker-agent is already running")
    st = _file(tmp_path)["points"][pid]
    assert st["status"] == "failed" and st["attempts"] == 2 and st["reason"] == "worker-agent is already running"
    assert [(e["attempt"], e["reason"]) for e in st["attempts_log"]] == [
        (1, "worker1: connection lost"),
        (2, "worker-agent is already running"),
    ]
    assert all(isinstance(e["started"], float) for e in st["attempts_log"])
    pid2 = POINTS[1].id
    sw.start(pid2)
    sw.requeue(pid2, "interrupted")
    assert _file(tmp_path)["points"][pid2]["attempts_log"] == [
        {"attempt": 1, "started": sw.state[pid2].started, "reason": "interrupted"}
    ]


def test_resume_measures_failed_and_interrupted_points_again_and_keeps_done_ones(tmp_path):
    sw = Sweep(tmp_path, POINTS, resume=False)
    a, b, c = (p.id for p in POINTS)
    sw.start(a)
    sw.finish(a, DONE, valid=True)
    sw.start(b)
    sw.attempt_failed(b, "worker1: connection lost")
    sw.finish(b, FAILED, "worker1: connection lost")
    sw.start(c)  # then the orchestrator crashed
    again = Sweep(tmp_path, POINTS, resume=True)
    assert [p.id for p in again.pending()] == [b, c]
    assert again.retried == [b]
    st = _file(tmp_path)["points"]
    assert st[a]["status"] == DONE
    assert st[b]["status"] == TODO and st[b]["reason"] == "worker1: connection lost" and st[b]["attempts"] == 1
    assert st[c]["status"] == TODO and st[c]["reason"] == "interrupted"
    assert [e["reason"] for e in st[c]["attempts_log"]] == ["interrupted"]  # its attempt says so too
    again.start(b)
    again.finish(b, DONE, valid=True)
    st = _file(tmp_path)["points"][b]
    assert st["attempts"] == 2 and [e["reason"] for e in st["attempts_log"]] == ["worker1: connection lost", None]


def test_a_sweep_json_written_before_attempts_log_existed_resumes(tmp_path):
    old = {
        "points": {
            p.id: {
                "status": "done" if p.index == 1 else "failed",
                "digest": p.digest,
                "attempts": 1,
                "reason": None if p.index == 1 else "x",
                "valid": True if p.index == 1 else None,
                "started": 1.0,
                "finished": 2.0,
                "wall_s": 1.0,
            }
            for p in POINTS
        }
    }
    (tmp_path / Sweep.FILE).write_text(json.dumps(old))
    sw = Sweep(tmp_path, POINTS, resume=True)
    assert [p.id for p in sw.pending()] == [POINTS[1].id, POINTS[2].id]
    sw.start(POINTS[1].id)
    assert [e["attempt"] for e in _file(tmp_path)["points"][POINTS[1].id]["attempts_log"]] == [2]


def _good_state() -> dict:
    return {p.id: {"status": "done", "digest": p.digest, "attempts": 1} for p in POINTS}


def _with(pid_field_value) -> dict:
    pid, field, value = pid_field_value
    pts = _good_state()
    pts[pid][field] = value
    return {"points": pts}


P1 = POINTS[0].id
BAD = {
    # case: (file content (bytes, or JSON-able), what the message must name)
    "a list": (b"[1, 2]", "holds a list"),
    "points null": ({"points": None}, "`points` is null"),
    "points a list": ({"points": []}, "`points` is a list"),
    "no points": ({}, "`points` is null"),
    "unknown top field": ({"points": _good_state(), "extra": 1}, "unknown field(s) extra"),
    "a string for a point": ({"points": {**_good_state(), P1: "done"}}, f"point {P1} is a string"),
    "null for a point": ({"points": {**_good_state(), P1: None}}, f"point {P1} is null"),
    "unknown field": (_with((P1, "colour", "red")), f"point {P1} has unknown field(s) colour"),
    "unknown status": (_with((P1, "status", "finished")), f"point {P1}: unknown status 'finished'"),
    "status a number": (_with((P1, "status", 3)), f"point {P1}: status is a number, not a string"),
    "attempts a string": (_with((P1, "attempts", "2")), f"point {P1}: attempts is a string, not a whole number"),
    "attempts true": (_with((P1, "attempts", True)), f"point {P1}: attempts is true or false"),
    "valid a string": (_with((P1, "valid", "yes")), f"point {P1}: valid is a string, not true or false or null"),
    "attempts_log an object": (_with((P1, "attempts_log", {})), f"point {P1}: attempts_log is an object"),
    "attempts_log entry a string": (_with((P1, "attempts_log", ["x"])), f"point {P1}: attempts_log[0] is a string"),
    "attempts_log entry short": (
        _with((P1, "attempts_log", [{"attempt": 1}])),
        f"point {P1}: attempts_log[0] must have exactly the fields attempt, started, reason",
    ),
    "no digest": ({"points": {**_good_state(), P1: {"status": "done"}}}, f"point {P1} lacks digest"),
    "binary": (bytes(range(256)) * 4, "missing or damaged"),
    "truncated": (b'{"points": {"rain-f0.1', "missing or damaged"),
}


def _write(tmp_path, content) -> Path:
    f = tmp_path / Sweep.FILE
    f.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return f


@pytest.mark.parametrize("case", list(BAD))
def test_a_damaged_sweep_json_is_a_usage_error_naming_file_point_and_fix(tmp_path, case):
    content, says = BAD[case]
    f = _write(tmp_path, content)
    with pytest.raises(UsageError) as ei:
        Sweep(tmp_path, POINTS, resume=True)
    text = ei.value.render()
    assert str(f) in text and says in text and "fix:" in text, text
    assert ei.value.exit_code == 2


def test_the_cli_answers_a_damaged_sweep_json_with_status_2_and_no_traceback(tmp_path, monkeypatch, capsys):
    from orchestrator.experiment.machines import shape_of
    from orchestrator.experiment.plan import plan
    from orchestrator.experiment.spec import load as load_spec
    from orchestrator.inventory import load as load_inv

    data = yaml.safe_load((REPO / "orchestrator/inventory/examples/rack1.yaml").read_text())
    data["ssh"] = {}
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(data))
    spec = REPO / "experiments/demo.yaml"
    points = plan(load_spec(spec), shape_of(load_inv(tmp_path / "inv.yaml")))
    good = {p.id: {"status": "done", "digest": p.digest, "attempts": 1} for p in points}
    first = points[0].id
    cases = {
        "a list": ([good], None),
        "a string for a point": ({"points": {**good, first: "done"}}, first),
        "unknown field": ({"points": {**good, first: {**good[first], "colour": "red"}}}, first),
        "unknown status": ({"points": {**good, first: {**good[first], "status": "finished"}}}, first),
        "points null": ({"points": None}, None),
        "binary": (bytes(range(256)) * 4, None),
    }
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for case, (content, pid) in cases.items():
        f = _write(run_dir, content)
        code, out, err = rainmaker(
            monkeypatch, capsys, "run", str(spec), "-i", str(tmp_path / "inv.yaml"), "--resume", str(run_dir)
        )
        err = " ".join(err.split())  # the terminal wraps long lines
        assert code == 2, (case, out, err)
        assert "Traceback" not in out + err and str(f) in err and "fix:" in err, (case, err)
        assert pid is None or f"point {pid}" in err, (case, err)
