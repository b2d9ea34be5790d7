"""Algorithm 1 end to end on the emulated testbed (issue 15): a time-varying workload
in one of two slices; the worker agents lower the quota when dispersion rises, raise it
when the load does, and the coordinator moves a worker of the idle slice into the busy
one, through the switch, with no task lost or run twice."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.run import run

# alone: the adaptation races the load, so the testbed needs the machine as it is when run by itself
pytestmark = [pytest.mark.integration, pytest.mark.alone]

# testbed seconds from the start of the warm-up; control interval = K x dt x k = 0.5 s
PHASES_AT = [0, 3, 7]


def spec(tmp_path):
    d = {
        "name": "adaptive",
        "systems": ["rain"],
        "workers": {"per_host_threads": 2},
        "workload": {
            "classes": [
                {"name": "const", "task_type": 1, "service": {"dist": "constant", "us": 10}},
                {
                    "name": "bimodal",
                    "task_type": 1,
                    # a few long tasks: a short one behind one waits 10x its time (HoL blocking)
                    "service": {"dist": "bimodal", "modes": [{"us": 10, "weight": 0.9}, {"us": 200, "weight": 0.1}]},
                },
            ],
            "phases": [
                {"at_s": 0, "capacity_fraction": 0.1, "classes": ["const"]},
                {"at_s": 3, "capacity_fraction": 0.1, "classes": ["bimodal"]},  # HoL blocking: quota down
                {"at_s": 7, "capacity_fraction": 0.6, "classes": ["const"]},  # 1.2x slice 0: quotas up, overload
            ],
        },
        "load": {"capacity_fraction": [1.0]},
        "emulated": {"warmup_s": 0, "measure_s": 13, "phases_at_s": PHASES_AT},
        "dilation": {"emulated": 100},
        "rain": {
            "initial_quota": 2,
            "adaptive": True,
            "r_th": 0.3,
            "n_max": 3,  # overload (and so a move) two raises after the load rises
            "k_samples": 500,
            "sample_interval_us": 10,
            "slices": [{"id": 0, "task_types": [1]}, {"id": 1, "task_types": [2]}],
        },
        "validity": {"min_samples_p99": 100, "remeasure_stalled": 0},
        "plots": ["p99_over_time"],
    }
    p = tmp_path / "adaptive.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def test_agents_adapt_quotas_and_the_coordinator_moves_a_worker(testbed, tmp_path):
    tb, inv = testbed
    run_dir = run(
        spec(tmp_path),
        inv,
        tb.inventory_path,
        results_root=tmp_path / "results",
        progress=False,
        retries=0,
        calibrate=False,
    )
    rd = RunDir(run_dir)
    (pid,) = json.loads(rd.sweep.read_text())["points"]
    pd = rd.point(pid)
    status = json.loads(rd.sweep.read_text())["points"][pid]
    assert status["status"] == "done", status

    # the clients followed the phases: each piece's classes, as the spec gave them
    summary = json.loads((pd.client("client0") / "summary.json").read_text())
    assert [(t, cls) for t, _, cls in summary["schedule"]] == [(0.0, ["const"]), (3.0, ["bimodal"]), (7.0, ["const"])]

    # the agents: HoL blocking lowered a quota in the bimodal phase, the switch queue
    # raised quotas once the load rose (times on the worker host's clock, from its tokens' start)
    changes = []
    for h in pd.worker_hosts():
        rows = pd.read_worker_samples(h)
        on = next(r["t"] for r in rows if any(w.get("enabled") for w in r["workers"]))
        for d in pd.read_decisions(h):
            changes += [(d["t"] - on, c["why"]) for c in d["changes"]]
    downs = [t for t, why in changes if why.startswith("HoL blocking")]
    ups = [t for t, why in changes if why.startswith("switch queue dominates")]
    assert any(PHASES_AT[1] <= t < PHASES_AT[2] + 1 for t in downs), changes
    assert any(t >= PHASES_AT[2] for t in ups), changes

    # the coordinator moved a worker of idle slice 1 into slice 0, after the load rose
    rows = pd.read_coordinator()
    moves = [m for r in rows for m in r["moves"]]
    assert moves, rows
    assert all(m["src"] == 1 and m["dst"] == 0 and "error" not in m for m in moves), moves
    assert {m["worker"] for m in moves} <= {2, 3}
    snap = pd.read_snapshot() or {}
    timing = json.loads(pd.timing.read_text())
    assert timing["coordinator"]["moves"] == len(moves) and timing["coordinator"]["error"] is None
    # ... and the switch has it in slice 0's multicast group... (the controller's view)
    moved = moves[0]["worker"]
    stats = {}
    for h in pd.worker_hosts():
        for w in (pd.read_worker_stats(h) or {}).get("workers", []):
            stats[w["worker_id"]] = w
    assert stats[moved]["slice"] == 0 and stats[moved]["enabled"]
    assert stats[moved]["tasks_done"] > 0  # slice 1 had no load: every task it ran came after its move

    # no task lost or run twice: every request answered once, and the workers ran as
    # many tasks as the client got answers
    t = summary["totals"]
    assert t["lost"] == 0 and t["rejected"] == 0 and t.get("failed", 0) == 0, t
    assert t["received"] == t["sent"], t
    done = sum(w["tasks_done"] for w in stats.values())
    assert done == t["received"], (done, t)
    assert snap  # the switch's counters were kept
    assert (run_dir / "plots" / "p99_over_time.png").exists()
