"""The handler measured alone (Figure 2) on a worker host of the emulated testbed:
`rainmaker run` on a handler_alone spec writes the table, the plots, a report, and a
costs file a spec's keys classes take their service times from."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from orchestrator.errors import UsageError
from orchestrator.experiment import handler_alone
from orchestrator.experiment.spec import load as load_spec

pytestmark = pytest.mark.integration


def write(tmp_path, **over):
    d = {
        "name": "kvalone",
        "handler_alone": {
            "ops": [{"op": "scan", "keys": [20, 200]}, {"op": "get", "keys": [10]}],
            "item_bytes": [64, 512],
            "requests": 100,
        },
        "database": {"keys": 5000, "key_bytes": 64, "seed": 2},
    } | over
    p = tmp_path / "alone.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def test_the_handler_alone_gives_a_table_plots_and_costs_a_spec_can_use(testbed, tmp_path):
    tb, inv = testbed
    run_dir = handler_alone.run(write(tmp_path), inv, tb.inventory_path, results_root=tmp_path / "results")
    df = pd.read_parquet(run_dir / "handler.parquet")
    assert sorted(set(zip(df["op"], df["count"], df["item_bytes"]))) == sorted(
        (op, c, b) for b in (64, 512) for op, c in (("scan", 20), ("scan", 200), ("get", 10))
    )
    assert (df["requests"] == 102).all() and (df["rounds"] == 3).all() and (df["mean_us"] > 0).all()
    # Keys cost. Compared by the fastest request of each: this test shares the machine
    # with the suite, and a preempted request's wall time (41.9 ms once, beside three other
    # test processes) can bend a mean, even a median of the rounds', the wrong way. Ten
    # times the keys is several times the time. What the item size adds (448 bytes of 200
    # keys, a few us) is too small for a loaded machine to order: 72.5 us at 512 bytes
    # against 81.0 at 64 in one run of the suite. The figure is the run's to report, not
    # this test's to time.
    fastest = df[df["op"] == "scan"].set_index(["count", "item_bytes"])["min_us"]
    for size in (64, 512):
        assert fastest[(200, size)] > 2 * fastest[(20, size)], fastest
    scan = df[df["op"] == "scan"].set_index(["count", "item_bytes"])["mean_us"]
    assert (run_dir / "plots" / "scan_service_vs_item_size.png").exists()
    report = (run_dir / "report.md").read_text()
    assert "SCAN, by key count" in report and "| 200 |" in report
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["kind"] == "handler_alone" and manifest["host"] == inv.workers[0].name
    # the machines were checked first, for what this run needs: that each answers
    pre = json.loads((run_dir / "preflight.json").read_text())
    assert pre["needs"]["systems"] == [] and not pre["needs"]["dpdk"], pre["needs"]
    assert {c["machine"] for c in pre["checks"]} >= {h.name for h in inv.hosts} and pre["ok"], pre["checks"]
    # `rainmaker analyze|plot|report` draw such a run again from its table, not as a sweep
    assert handler_alone.is_run(run_dir) and not handler_alone.is_run(tmp_path)
    (run_dir / "report.md").unlink()
    assert run_dir / "report.md" in handler_alone.redraw(run_dir)
    assert (run_dir / "report.md").read_text() == report

    # a spec whose keys classes leave us_per_key out takes them from this measurement
    spec = tmp_path / "uses.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "uses",
                "systems": ["rain"],
                "workload": {"classes": [{"name": "scan", "service": {"dist": "keys", "op": "scan", "keys": 110}}]},
                "load": {"capacity_fraction": [0.5]},
                "database": {"keys": 5000, "item_bytes": 512, "costs": str(run_dir / "costs.json")},
            }
        )
    )
    mean = load_spec(spec).workload.classes[0].service.mean_us
    assert mean == pytest.approx((scan[(20, 512)] + scan[(200, 512)]) / 2, rel=1e-6)  # 110 keys: halfway


def test_a_host_that_is_not_a_worker_is_refused(testbed, tmp_path):
    tb, inv = testbed
    p = write(tmp_path, handler_alone={"ops": [{"op": "get", "keys": [10]}], "item_bytes": [64], "host": "client0"})
    with pytest.raises(UsageError, match="handler_alone.host 'client0' is not a worker"):
        handler_alone.run(p, inv, tb.inventory_path, results_root=tmp_path / "results")
