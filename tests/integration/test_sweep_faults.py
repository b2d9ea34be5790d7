"""Faults during a sweep on the shared emulated testbed (tests/faults.py), issue 11:

- a host's sshd that stops for a few seconds during a point: the attempt fails, the
  next one waits until the host answers again and starts clean (the first attempt's
  agent, still running on the host, is stopped first), and the next point is unaffected;
- `--resume` of a run with a failed point measures it again;
- a BFRuntime reader that subscribed and then hung, holding the client id the CLI's
  readers use, never makes `run` take the healthy switch for dead and restart it.

One test, one sweep and its resume: the faults share them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import switchd
from orchestrator.experiment.progress import Progress
from orchestrator.experiment.run import run
from orchestrator.experiment.sweep import Sweep
from tests.faults import Faults
from tests.integration.test_sweep import spec_file
from tests.poll import until

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
HUNG_READER = """# hung-bfrt-reader: subscribes, says so, then is frozen by the test
import sys, time
from switch.bfrt.client import Client
Client(sys.argv[1], client_id=int(sys.argv[2]), bind=False)
print("subscribed", flush=True)
time.sleep(600)
"""
READER_ID = 7  # the id `switch status`, `tables` and `registers` subscribed with when issue 11 was filed
OUTAGE_S = 3.0


def _sshd_outage_at_first_measure(monkeypatch, f: Faults, host: str) -> None:
    """worker1's sshd stops just after the load starts, for OUTAGE_S, once."""
    real_phase = Progress.phase
    fired = []

    def phase(self, name):
        real_phase(self, name)
        if name.startswith("measure") and not fired:
            fired.append(f.later(0.2, f.sshd_down, host, hold=OUTAGE_S))

    monkeypatch.setattr(Progress, "phase", phase)


def _emulator_pgid(inv) -> int | None:
    from orchestrator.remote import Remote, targets

    with Remote(targets(inv, role="switch")[0]) as r:
        bg = r.find(switchd.PROCESS)
    return bg.pgid if bg else None


def test_sshd_outage_retry_resume_and_a_hung_reader(testbed, tmp_path, monkeypatch):
    tb, inv = testbed
    f = Faults(tb)
    if switchd.liveness(inv)[0] == switchd.DOWN:
        switchd.start(inv, "rain")
    pgid = _emulator_pgid(inv)
    reader = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            f.netns(inv.switch.name),
            sys.executable,
            "-c",
            HUNG_READER,
            inv.switch.bfrt,
            str(READER_ID),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().strip() == "subscribed"
        with f.frozen(inv.switch.name, "hung-bfrt-reader"):
            # 1. A run whose first point meets the outage and has no retries: it fails;
            #    the next point waits for the host, starts clean and is measured.
            _sshd_outage_at_first_measure(monkeypatch, f, "worker1")
            spec = spec_file(tmp_path, "faults", [0.3, 0.4], measure=0.5)
            common = dict(progress=False, analyze_after=False, retry_wait=60, calibrate=False)
            run_dir = run(spec, inv, tb.inventory_path, results_root=tmp_path / "results", retries=0, **common)
            f.join()
            st = json.loads((run_dir / Sweep.FILE).read_text())["points"]
            a, b = st["rain-f0.3-r1"], st["rain-f0.4-r1"]
            assert a["status"] == "failed" and "worker1" in a["reason"], a
            assert [e["attempt"] for e in a["attempts_log"]] == [1] and "worker1" in a["attempts_log"][0]["reason"]
            assert b["status"] == "done" and b["attempts"] == 1, b
            log = (run_dir / "run.log").read_text()
            assert "rain-f0.4-r1: still waiting for worker1" in log or "rain-f0.4-r1: waiting" in log, log
            assert "rain-f0.4-r1: every host and the switch answer" in log, log
            # the failed attempt's agent, still running on worker1, was stopped before the next point
            assert "rain-f0.4-r1: before attempt 1, stopped what was left running: worker1: worker-agent" in log, log

            # 2. --resume measures the failed point again; the outage hits its first attempt
            #    again, and the retry (after waiting for worker1) measures it.
            b_files = {p: p.stat().st_mtime_ns for p in (run_dir / "points" / "rain-f0.4-r1").rglob("*") if p.is_file()}
            f = Faults(tb)
            _sshd_outage_at_first_measure(monkeypatch, f, "worker1")
            run(spec, inv, tb.inventory_path, resume=run_dir, retries=1, **common)
            f.join()
            st = json.loads((run_dir / Sweep.FILE).read_text())["points"]
            a = st["rain-f0.3-r1"]
            assert a["status"] == "done" and a["attempts"] == 3, (a, (run_dir / "run.log").read_text())
            assert [e["attempt"] for e in a["attempts_log"]] == [1, 2, 3]
            assert "worker1" in a["attempts_log"][1]["reason"]
            assert a["attempts_log"][2]["reason"] == a["reason"]  # None, or the validity checks it failed
            assert st["rain-f0.4-r1"] == b  # untouched
            files = {p: p.stat().st_mtime_ns for p in (run_dir / "points" / "rain-f0.4-r1").rglob("*") if p.is_file()}
            assert files == b_files
            log = (run_dir / "run.log").read_text()
            assert "resume measures failed points again: rain-f0.3-r1" in log

            # 3. All along, a reader held id 7, frozen: the switch was never restarted.
            assert _emulator_pgid(inv) == pgid
            assert "starting its software" not in log and "stopping the switch software" not in log, log
        # the DPDK runtime folders of the last point's programs are gone with them
        for h in inv.hosts:
            assert not Path(f"/var/run/dpdk/rm{tb.slot}-{h.name}-{h.role}").exists(), h.name
    finally:
        reader.kill()
        reader.wait()
    assert until(lambda: switchd.liveness(inv)[0] == switchd.UP, 10)
