"""A sweep on a Dask cluster of emulated testbeds (orchestrator/cluster): a LocalCluster of
two workers on this machine, each with its own testbed in its own slot (this process's
two spare slots, tests/conftest.py) and its own core. It tests correctness, not
fidelity: two testbeds on two cores are not quiet.

- the merged run folder is laid out as a local run of the same spec (measured on this
  process's shared testbed), plus which testbed measured each point;
- each testbed's calibration is in the manifest, and the model beside each point took
  its own testbed's;
- a worker killed mid-point: the point's attempt is recorded lost, it is measured on the
  other testbed, and the lost testbed's namespaces are taken down.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from orchestrator.cluster.connect import Pool
from orchestrator.cluster.coordinator import run_on_cluster
from orchestrator.experiment.layout import TESTBEDS, RunDir
from orchestrator.experiment.run import run
from orchestrator.testbed.emulated import slot_in_use
from tests.integration.test_sweep import spec_file

# `alone` (make test's second phase, one process): in the parallel phase, beside two
# other test processes, a Dask worker of this file wedged twice (every thread in a futex
# wait, its event loop deaf) while its testbed calibrated; run by itself, in a fresh
# process, 11 of 11 passed, 5 of them with both cores kept busy. The cause is not known.
pytestmark = [pytest.mark.integration, pytest.mark.alone]

BASE = int(os.environ.get("RAINMAKER_TEST_SLOT", "9"))
SLOTS = [(BASE + 1) % 16, (BASE + 2) % 16]


def _files(root: Path) -> set[str]:
    """Every file and folder of a run, by relative path, the timestamped run name aside."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def cluster(state_root):
    """One LocalCluster for the file (its start costs seconds). The test that kills a
    worker comes last: the nanny's restarted worker has an address the cores were not
    split for."""
    p = Pool.local(2)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def pool(cluster):
    """The cluster's two workers, as each run finds them; their testbeds down after."""
    try:
        yield cluster
    finally:
        from orchestrator.testbed.emulated import EmulatedTestbed

        for slot in SLOTS:
            EmulatedTestbed(slot).down(log=lambda m: None)


def _cluster_run(spec: Path, pool: Pool, results: Path, **kw) -> Path:
    # A testbed not prepared in 5 min is left out before the test's own timeout, so that
    # the assertions below say where it was stuck (manifest.json cluster.unprepared).
    return run_on_cluster(
        spec,
        pool,
        results_root=results,
        progress=False,
        provision=False,
        retries=0,
        slots=SLOTS,
        prepare_max_s=300,
        **kw,
    )


def test_merged_run_is_a_local_run_plus_its_testbeds(testbed, pool, tmp_path):
    spec = spec_file(tmp_path, "cluster", [0.3, 0.6], plots=["p99_vs_load"])
    merged = _cluster_run(spec, pool, tmp_path / "cluster")
    tb, inv = testbed
    local = run(spec, inv, tb.inventory_path, results_root=tmp_path / "local", progress=False, retries=0)

    rd = RunDir(merged)
    m = rd.read_manifest()
    testbeds = m["testbeds"]
    assert len(testbeds) == 2, m["cluster"]["unprepared"] or testbeds
    assert {t["slot"] for t in testbeds.values()} == set(SLOTS)
    for t in testbeds.values():  # each calibrated its own testbed, on its own core
        assert t["calibration"]["round_trip_us"]["mean"] > 0, t
        assert len(t["cpus"]) == 1, t
    assert len({tuple(t["cpus"]) for t in testbeds.values()}) == 2
    assert set(m["cluster"]["agreement"]["kept"]) | set(m["cluster"]["agreement"]["left_out"]) == set(testbeds)

    state = json.loads(rd.sweep.read_text())["points"]
    for pid, s in state.items():
        assert s["status"] == "done", (pid, s)
        assert s["testbed"] in testbeds, s
        point = json.loads(rd.point(pid).point_file.read_text())
        assert point["testbed"] == s["testbed"]
        # the model beside the point took the calibration of the testbed that measured it
        net = json.loads((rd.point(pid).model / "model.json").read_text())["network"]
        assert net["client_switch_ns"] == testbeds[s["testbed"]]["calibration"]["network"]["client_switch_ns"]

    # the same layout as the local run: every file it has, and beside them only the
    # testbeds' own folder (preflight.json is each testbed's, under it)
    ours, theirs = _files(merged), _files(local)
    extra = {f for f in ours - theirs if not f.startswith(TESTBEDS)}
    assert theirs - ours == {"preflight.json", "calibration"} | {f for f in theirs if f.startswith("calibration/")}
    assert extra == set(), extra
    for t in testbeds:
        assert (merged / TESTBEDS / t / "calibration" / "clients").is_dir()
        assert (merged / TESTBEDS / t / "run.log").read_text()
    assert (merged / "report.md").exists() and (merged / "summary.parquet").exists()
    assert not any(slot_in_use(s) for s in SLOTS)  # every testbed down at the end


def test_ctrl_c_stops_every_testbed_and_resume_finishes_the_run(pool, tmp_path):
    """Ctrl-C on the coordinator mid-point: every testbed goes down, the point goes back
    to todo; `--resume` on the cluster measures what is left and keeps what was done."""
    # 6 s points, four of them on two testbeds: a point's start reaches sweep.json by the
    # cluster's events, and a 2.5 s point could end before the watcher saw it running
    spec = spec_file(tmp_path, "stopped", [0.2, 0.4, 0.6, 0.7], measure=6)
    results = tmp_path / "results"
    ended = threading.Event()

    def interrupt_mid_point() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not ended.is_set():
            for d in (results / "stopped").glob("*"):
                try:
                    state = json.loads(RunDir(d).sweep.read_text())["points"]
                except (OSError, ValueError):
                    continue
                statuses = [s["status"] for s in state.values()]
                # a point under way on a testbed while another waits: the run has at least
                # one more 6 s point to go, so Ctrl-C lands mid-run however late the
                # cluster's "started" event reached sweep.json
                if any(s["status"] == "running" and s["testbed"] for s in state.values()) and "todo" in statuses:
                    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends the coordinator
                    return
            time.sleep(0.2)

    watcher = threading.Thread(target=interrupt_mid_point, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _cluster_run(spec, pool, results, analyze_after=False, calibrate=False)  # about stopping: no need
    finally:
        ended.set()
        watcher.join(timeout=10)
    (run_dir,) = (results / "stopped").glob("*")
    rd = RunDir(run_dir)
    assert not any(slot_in_use(s) for s in SLOTS)  # every testbed down
    state = json.loads(rd.sweep.read_text())["points"]
    assert "running" not in {s["status"] for s in state.values()}, state
    interrupted = [pid for pid, s in state.items() if s["status"] == "todo" and s["reason"] == "interrupted"]
    assert interrupted, state
    done_before = {
        pid: rd.point(pid).point_file.stat().st_mtime_ns for pid, s in state.items() if s["status"] == "done"
    }

    again = _cluster_run(spec, pool, results, analyze_after=False, calibrate=False, resume=run_dir)
    assert again == run_dir
    state = json.loads(rd.sweep.read_text())["points"]
    assert all(s["status"] == "done" for s in state.values()), state
    for pid, mtime in done_before.items():  # a done point is kept, not measured again
        assert rd.point(pid).point_file.stat().st_mtime_ns == mtime, pid
    for pid in interrupted:
        assert json.loads(rd.point(pid).point_file.read_text())["testbed"] == state[pid]["testbed"]
    assert not any(slot_in_use(s) for s in SLOTS)


def test_a_killed_worker_point_is_measured_on_the_other(pool, tmp_path):
    """SIGKILL to the worker process measuring a point: the point's attempt is recorded
    lost, Dask gives it to the other testbed, and the run ends with every point done."""
    spec = spec_file(tmp_path, "killed", [0.2, 0.4, 0.6], measure=2.5)
    out: dict = {}
    t = threading.Thread(
        # Not calibrated, so both testbeds measure whatever the other test processes do
        # to calibrations on this machine's two cores: this test is about the retry (the
        # agreement that leaves a testbed out is tests/unit/test_cluster.py's).
        target=lambda: out.update(
            run=_cluster_run(spec, pool, tmp_path / "results", analyze_after=False, calibrate=False)
        ),
        daemon=True,
    )
    t.start()
    pids = pool.client.run(os.getpid)
    victim = None
    deadline = time.monotonic() + 240
    while victim is None and time.monotonic() < deadline and t.is_alive():
        for d in (tmp_path / "results" / "killed").glob("*"):
            rd = RunDir(d)
            try:
                m, state = rd.read_manifest(), json.loads(rd.sweep.read_text())["points"]
            except (OSError, ValueError):
                continue
            running = [(pid, s["testbed"]) for pid, s in state.items() if s["status"] == "running" and s["testbed"]]
            if running and "testbeds" in m:
                victim = (running[0][0], m["testbeds"][running[0][1]])
        time.sleep(0.2)
    assert victim is not None, "no point was seen running on a testbed"
    point, tb = victim
    time.sleep(1.0)  # mid-point: its load is under way
    os.kill(pids[tb["worker"]], signal.SIGKILL)
    t.join(timeout=300)
    assert not t.is_alive(), "the run did not end after its worker was killed"
    rd = RunDir(out["run"])
    state = json.loads(rd.sweep.read_text())["points"]
    assert all(s["status"] == "done" for s in state.values()), state
    s = state[point]
    assert s["testbed"] != tb["testbed"], s  # measured on the other testbed
    lost = [a for a in s["attempts_log"] if a["reason"] and "was lost" in a["reason"]]
    assert lost, s["attempts_log"]
    assert not slot_in_use(tb["slot"])  # the lost testbed taken down by the coordinator
