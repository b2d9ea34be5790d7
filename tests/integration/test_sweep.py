"""The main job end to end on the emulated testbed: switch, agents, workers, clients,
collection, validity, analysis; then a sweep killed mid-point and resumed, and a host
lost during a point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.experiment.run import Progress, run
from orchestrator.experiment.sweep import Sweep

pytestmark = pytest.mark.integration
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")


def spec_file(tmp_path: Path, name: str, loads: list[float], measure: float = 1.5) -> Path:
    spec = {
        "name": name,
        "systems": ["rain"],
        "workers": {"per_host_threads": 2},
        "workload": {
            "classes": [
                {
                    "name": "task",
                    "service": {"dist": "exponential", "mean_us": 10},
                    "payload": {"bytes": 8, "large_fraction": 0.2, "large_bytes": 64},
                }
            ]
        },
        "load": {"capacity_fraction": loads},
        "emulated": {"warmup_s": 0.5, "measure_s": measure},
        "rain": {"initial_quota": 2},
        "validity": {"min_samples_p99": 100},
    }
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(spec, sort_keys=False))
    return p


def test_tasks_come_back_through_the_switch(testbed, tmp_path):
    """Issue 4's end to end: the emulator started over SSH, programmed by the controller
    from the inventory; rain-workers issue tokens; rain-client's tasks are answered."""
    tb, inv = testbed
    run_dir = run(
        spec_file(tmp_path, "e2e", [0.25]),
        inv,
        tb.inventory_path,
        results_root=tmp_path / "results",
        progress=False,
        retries=0,
    )
    state = json.loads((run_dir / "sweep.json").read_text())["points"]
    ((pid, st),) = state.items()
    assert st["status"] == "done", st
    pdir = run_dir / "points" / pid
    totals = json.loads((pdir / "clients" / "client0" / "summary.json").read_text())["totals"]
    # Every task went through the switch to a worker and came back (a few may time out
    # on two busy cores; none may be lost or rejected).
    assert totals["sent"] > 300 and totals["received"] >= 0.95 * totals["sent"]
    assert totals["lost"] == 0 and totals["rejected"] == 0
    events = json.loads((pdir / "switch" / "snapshot.json").read_text())["counters"]["pipe.SwitchIngress.events.events"]
    dispatched = events["EV_DISPATCH_DIRECT"]["packets"] + events["EV_DISPATCH_QUEUED"]["packets"]
    assert dispatched >= totals["received"] and events["EV_FORWARDED"]["packets"] >= totals["received"]
    for w in ("worker0", "worker1"):
        reg = json.loads((pdir / "workers" / w / "registration.json").read_text())
        assert len(reg["worker_ids"]) == 2
        assert (pdir / "workers" / w / "stats.json").exists()
    assert (run_dir / "manifest.json").exists() and (run_dir / "summary.parquet").exists()
    m = json.loads((run_dir / "manifest.json").read_text())
    for key in ("git", "spec", "inventory", "host_facts", "versions", "hashes", "points"):
        assert key in m
    assert set(m["host_facts"]) == {"sw0", "client0", "worker0", "worker1"}
    assert m["hashes"]["p4_program"] and m["hashes"]["rain-worker"] and m["hashes"]["bfrt_json"]


def test_resume_after_kill_mid_point(testbed, tmp_path):
    tb, inv = testbed
    spec = spec_file(tmp_path, "resume", [0.3, 0.4, 0.5], measure=2.0)
    env = dict(os.environ, RAINMAKER_INVENTORY=str(tb.inventory_path))
    proc = subprocess.Popen(
        [RAINMAKER, "run", str(spec), "--results", str(tmp_path / "results"), "--no-analysis"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run_dir = None
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            dirs = list((tmp_path / "results" / "resume").glob("*/sweep.json"))
            if dirs:
                run_dir = dirs[0].parent
                st = json.loads(dirs[0].read_text())["points"]
                if st["rain-f0.4-r1"]["status"] == "running" and st["rain-f0.3-r1"]["status"] == "done":
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the sweep never reached its second point")
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)  # a crash: no clean-up at all
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = run_dir / "points" / "rain-f0.3-r1"
    before = {p: p.stat().st_mtime_ns for p in first.rglob("*") if p.is_file()}
    r = subprocess.run(
        [RAINMAKER, "run", str(spec), "--resume", str(run_dir), "--no-analysis"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    st = json.loads((run_dir / Sweep.FILE).read_text())["points"]
    assert {k: v["status"] for k, v in st.items()} == {k: "done" for k in st}
    assert st["rain-f0.3-r1"]["attempts"] == 1  # untouched
    assert st["rain-f0.4-r1"]["attempts"] == 2  # interrupted, then rerun
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*") if p.is_file()} == before
    assert "leftover" in r.stdout  # the killed run's agents were stopped first


def test_a_lost_host_fails_its_point_and_the_run_goes_on(testbed, tmp_path, monkeypatch):
    tb, inv = testbed
    ns = inv.host("worker1").netns
    calls = {"n": 0}
    real_phase, real_point = Progress.phase, Progress.point

    def phase(self, name):
        # During the first point, worker1 drops off the management network; it comes back
        # before the second point.
        if name.startswith("measure") and calls["n"] == 0:
            subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "mgmt0", "down"], check=True)
            calls["n"] += 1
        real_phase(self, name)

    def point(self, p):
        if p.id.startswith("rain-f0.4"):
            subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "mgmt0", "up"], check=True)
        real_point(self, p)

    monkeypatch.setattr(Progress, "phase", phase)
    monkeypatch.setattr(Progress, "point", point)
    try:
        run_dir = run(
            spec_file(tmp_path, "lost", [0.3, 0.4], measure=1.0),
            inv,
            tb.inventory_path,
            results_root=tmp_path / "results",
            progress=False,
            retries=1,
            analyze_after=False,
        )
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "mgmt0", "up"])
    st = json.loads((run_dir / Sweep.FILE).read_text())["points"]
    assert st["rain-f0.3-r1"]["status"] == "failed" and st["rain-f0.3-r1"]["attempts"] == 2
    assert "worker1" in st["rain-f0.3-r1"]["reason"]
    assert st["rain-f0.4-r1"]["status"] == "done"
