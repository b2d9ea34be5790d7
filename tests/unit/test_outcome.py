"""A point's acceptance (orchestrator/experiment/outcome.py) on crafted point folders:
the files the agents leave after a clean point, after a rain-worker was killed, after a
worker agent was killed outright, and after a client failed."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.experiment import layout
from orchestrator.experiment.layout import PointDir
from orchestrator.experiment.outcome import problems

WORKERS, CLIENTS = ["worker0", "worker1"], ["client0"]


def _host(pd: PointDir, role: str, host: str, outcome: dict | None, log: str = "rain-agent ready\n") -> None:
    d = pd.host_dir(role, host)
    d.mkdir(parents=True, exist_ok=True)
    if outcome is not None:
        (d / layout.AGENT_OUTCOME).write_text(json.dumps(outcome))
    (d / layout.AGENT_LOG).write_text(log)


def _clean(tmp_path: Path) -> PointDir:
    """What a point whose testbed held together leaves: workers stopped by the runner's
    signal with status 0; the client ran to its end and its agent exited 0 by itself."""
    pd = PointDir(tmp_path / "rain-f0.5-r1")
    for w in WORKERS:
        _host(pd, "worker", w, {"worker_exit": 0, "lost_samples": 0, "stopped_by": "signal"})
    _host(
        pd,
        "client",
        "client0",
        {"client_exit": 0, "stopped_by": "client exit"},
        "rain-agent ready\nrain-agent done\n[rainmaker] exited with status 0\n",
    )
    return pd


def test_a_point_whose_agents_ended_cleanly_has_no_problem(tmp_path):
    assert problems(_clean(tmp_path), WORKERS, CLIENTS) == []


def test_a_rain_worker_killed_during_the_measurement_is_named(tmp_path):
    pd = _clean(tmp_path)
    # what hosts/agent/worker.py leaves when its rain-worker died under it: it exits 1
    _host(
        pd,
        "worker",
        "worker1",
        {"worker_exit": -9, "lost_samples": 0, "stopped_by": "worker exit"},
        "rain-agent ready\nrain-agent error: rain-worker exited with status -9:\n[rainmaker] exited with status 1\n",
    )
    assert problems(pd, WORKERS, CLIENTS, gone_before_stop=["worker1"]) == [
        "worker1: rain-worker exited with status -9 (SIGKILL) during the measurement"
    ]


def test_a_worker_agent_killed_outright_is_named(tmp_path):
    pd = _clean(tmp_path)
    (pd.worker("worker0") / layout.AGENT_OUTCOME).unlink()
    (pd.worker("worker0") / layout.AGENT_LOG).write_text("rain-agent ready\n[rainmaker] exited with status 137\n")
    assert problems(pd, WORKERS, CLIENTS) == [
        "worker0: the worker agent died during the measurement (no agent.json; it exited with status 137, "
        "killed by SIGKILL)"
    ]
    # its log not even collected: the missing agent.json is enough
    (pd.worker("worker0") / layout.AGENT_LOG).unlink()
    assert problems(pd, WORKERS, CLIENTS) == ["worker0: the worker agent died during the measurement (no agent.json)"]


def test_a_worker_agent_gone_before_the_stop_is_named_even_with_a_clean_status(tmp_path):
    pd = _clean(tmp_path)
    (pd.worker("worker1") / layout.AGENT_LOG).write_text("rain-agent ready\n[rainmaker] exited with status 0\n")
    assert problems(pd, WORKERS, CLIENTS, gone_before_stop=["worker1"]) == [
        "worker1: the worker agent had exited before the measurement ended (it exited with status 0)"
    ]


def test_a_worker_that_failed_its_stop_and_a_failed_client_are_named(tmp_path):
    pd = _clean(tmp_path)
    _host(pd, "worker", "worker0", {"worker_exit": -9, "lost_samples": 0, "stopped_by": "signal"})
    _host(pd, "client", "client0", {"client_exit": 2, "stopped_by": "client exit"})
    assert problems(pd, WORKERS, CLIENTS) == [
        "worker0: rain-worker exited with status -9 (SIGKILL) when the runner stopped it",
        "client0: rain-client exited with status 2",
    ]
    (pd.client("client0") / layout.AGENT_OUTCOME).write_text("{torn")
    assert problems(pd, [], CLIENTS) == ["client0: the client agent left no agent.json"]


def test_a_host_whose_folder_never_came_back_is_named(tmp_path):
    pd = _clean(tmp_path)
    assert problems(pd, [*WORKERS, "worker2"], CLIENTS) == [
        "worker2: the worker agent died during the measurement (no agent.json)"
    ]
