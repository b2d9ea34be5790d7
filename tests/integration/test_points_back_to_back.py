"""Nothing crosses from one point to the next: 50 short points back to back on one
testbed, the switch left running between them (as every sweep leaves it), each point
checked on its own counters at both ends of every link:

- the client's books balance: every request sent in the window was answered, timed out
  or rejected, none is left over, no answer belonged to another point (each point's
  requests carry its epoch: rain-client --epoch), none came twice and none for a request
  the client no longer held (its counters tell these apart from a warm-up request's
  answer after its timeout, which is this point's and allowed: seen once under a loaded
  suite as one "unknown" answer before they were told apart);
- every worker host got exactly what the switch sent its port, and its threads got
  exactly the tasks the switch dispatched to them: the frames its port sent less the
  RDMA WRITEs pre-written to its rings; the switch's dispatch events are the workers'
  tasks, neither more (a stale token or task of the last point) nor fewer.

Seen before the epoch and these counters: a lost task, and tasks of one point that
reached the next (closing notes of the adaptive and RocksDB work).
"""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.experiment.layout import PointDir, RunDir
from orchestrator.experiment.run import run
from tests.integration.test_sweep import spec_file

pytestmark = pytest.mark.integration

LOADS = [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75]
REPETITIONS = 5  # 50 points


def _books(pd: PointDir) -> list[str]:
    """What does not add up in one point (empty: everything does)."""
    bad = []
    for h in pd.client_hosts():
        s = json.loads((pd.client(h) / "summary.json").read_text())
        t, r = s["totals"], s["run"]
        if t["sent"] != t["received"] + t["timed_out"] + t["rejected"] or t["failed"] or t["lost"]:
            bad.append(f"{h}: sent {t['sent']} != received {t['received']} + timed out {t['timed_out']} + "
                       f"rejected {t['rejected']} (failed {t['failed']}, lost {t['lost']})")  # fmt: skip
        # An answer after its warm-up request timed out (warmup_late_reply) is this
        # point's, late: allowed. A second answer, or one whose entry a later request took,
        # is not.
        if r["other_point"] or r["unknown_reply"] or r["dup_reply"]:
            bad.append(
                f"{h}: {r['other_point']} answer(s) of another point, {r['dup_reply']} answered twice, "
                f"{r['unknown_reply']} of no request in the table (warm-up answers after their timeout: "
                f"{r['warmup_late_reply']})"
            )
        if s["epoch"] != pd.read_point()["epoch"]:
            bad.append(f"{h}: epoch {s['epoch']} is not the point's {pd.read_point()['epoch']}")
    snapshot = pd.read_snapshot() or {}
    counters = snapshot.get("counters", {})
    events = counters.get("pipe.SwitchIngress.events.events", {})
    dispatched = events["EV_DISPATCH_DIRECT"]["packets"] + events["EV_DISPATCH_QUEUED"]["packets"]
    writes = {int(k): v["packets"] for k, v in counters.get("pipe.SwitchEgress.rdma_writer.writes", {}).items()}
    to_host = {h: row["frames_to_host"] for row in pd.read_links()["ports"] for h in row["hosts"]}
    got = 0
    for h in pd.worker_hosts():
        st = pd.read_worker_stats(h)
        ids = json.loads((pd.path / "workers" / h / "registration.json").read_text())["worker_ids"]
        tasks = sum(w["dispatched"] for w in st["workers"])
        got += tasks
        if st["rx"]["packets"] != to_host[h]:
            bad.append(f"{h}: the switch sent its port {to_host[h]} frames, it received {st['rx']['packets']}")
        if tasks != to_host[h] - sum(writes.get(i, 0) for i in ids):
            bad.append(f"{h}: {tasks} tasks, the switch dispatched {to_host[h] - sum(writes.get(i, 0) for i in ids)}")
    if got != dispatched:
        bad.append(f"the switch dispatched {dispatched} tasks, the workers got {got}")
    return bad


def test_fifty_points_back_to_back_keep_their_books(testbed, tmp_path):
    tb, inv = testbed
    spec = spec_file(tmp_path, "back-to-back", LOADS, measure=0.3)
    doc = yaml.safe_load(spec.read_text())
    doc["emulated"]["warmup_s"] = 0.2
    doc["repetitions"] = REPETITIONS
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    run_dir = run(
        spec,
        inv,
        tb.inventory_path,
        results_root=tmp_path / "results",
        progress=False,
        retries=0,
        analyze_after=False,
        calibrate=False,
    )
    rd = RunDir(run_dir)
    st = rd.read_sweep()
    assert len(st) == len(LOADS) * REPETITIONS
    assert all(v["status"] == "done" for v in st.values()), {k: v for k, v in st.items() if v["status"] != "done"}
    problems = {pd.id: b for pd in rd.points() if (b := _books(pd))}
    assert not problems, problems
    epochs = [pd.read_point()["epoch"] for pd in sorted(rd.points(), key=lambda d: d.read_point()["index"])]
    assert all(a != b for a, b in zip(epochs, epochs[1:])), "consecutive points have their own epochs"
