"""A point measured on a broken testbed is never recorded as good: one sweep on the
shared emulated testbed, one fault per point, injected during the measurement with
tests/faults.py (issue 11)."""

from __future__ import annotations

import json

import pytest

from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.progress import Progress
from orchestrator.experiment.run import run
from tests.faults import Faults
from tests.integration.test_sweep import spec_file

pytestmark = pytest.mark.integration

# The worker agent itself, not the start wrapper whose command line carries the same words.
WORKER_AGENT = r"^[^ ]*python3[^ ]* -m hosts\.agent worker "


def test_a_dead_worker_or_agent_fails_its_point_and_a_link_down_invalidates_it(testbed, tmp_path, monkeypatch):
    """Point 1: rain-worker SIGKILLed on worker1; point 2: worker0's agent SIGKILLed
    (its rain-worker lives on); point 3: worker0's data link down for about 1 s. Each
    fault lands inside the load (0.5 s warm-up, then 1 s of measurement)."""
    tb, inv = testbed
    f = Faults(tb)
    faults = {
        "rain-f0.3-r1": lambda: f.later(0.9, f.kill, "worker1", r"/bin/rain-worker "),
        "rain-f0.35-r1": lambda: f.later(0.9, f.kill, "worker0", WORKER_AGENT),
        "rain-f0.4-r1": lambda: f.later(0.4, f.link_down, "worker0", hold=0.8),
    }
    current = {}
    real_point, real_phase = Progress.point, Progress.phase

    def point(self, p, *eta):
        current["id"] = p.id
        real_point(self, p)

    def phase(self, name):
        real_phase(self, name)
        if name.startswith("measure"):  # the start signals were delivered: the load runs
            fault = faults.pop(current["id"], None)
            if fault:
                fault()

    monkeypatch.setattr(Progress, "point", point)
    monkeypatch.setattr(Progress, "phase", phase)
    run_dir = run(
        spec_file(tmp_path, "faults", [0.3, 0.35, 0.4], measure=1.0),
        inv,
        tb.inventory_path,
        results_root=tmp_path / "results",
        progress=False,
        retries=0,
        analyze_after=False,
        calibrate=False,
    )
    f.join()
    assert not faults, f"faults never injected: {list(faults)}"
    rd = RunDir(run_dir)
    st = rd.read_sweep()
    killed_worker, killed_agent, link = (st[p] for p in ("rain-f0.3-r1", "rain-f0.35-r1", "rain-f0.4-r1"))
    assert killed_worker["status"] == "failed", killed_worker
    assert "worker1: rain-worker exited with status -9 (SIGKILL) during the measurement" in killed_worker["reason"]
    assert killed_agent["status"] == "failed", killed_agent
    assert "worker0: the worker agent died during the measurement (no agent.json" in killed_agent["reason"]
    # The link came back: the point was measured, and its verdict names the link.
    assert link["status"] == "done" and link["valid"] is False, link
    port = inv.host("worker0").nic.switch_port
    verdict = rd.point("rain-f0.4-r1").read_verdict()
    check = next(c for c in verdict["checks"] if c["name"] == "links_up")
    assert check["passed"] is False and check["message"].startswith(f"worker0's link (port {port}, "), check
    assert "went down 1 time(s)" in check["message"]
    # sweep.json's reason is a shortened list of the failed checks: it names this one, but
    # a check before it (a host stall under the suite's load) may take the message's room
    assert "links_up" in verdict["failed"] and "links_up" in link["reason"]
    rows = {r["port"]: r for r in json.loads(rd.point("rain-f0.4-r1").links.read_text())["ports"]}
    assert rows[port]["link_down_events"] == 1 and rows[port]["hosts"] == ["worker0"]
    assert all(r["link_down_events"] == 0 for p, r in rows.items() if p != port)
