"""The switch's zero iCRCs end to end on the emulated testbed: with the workers' NICs
said to check the iCRC (roce.icrc_check: on), every large task the switch pre-writes
is dropped at the worker (roce_icrc) and refused at dispatch (desc_mismatch), as on a
ConnectX whose check was left on; with the testbed's own inventory, none is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.experiment.run import run
from orchestrator.inventory import load

from .test_sweep import spec_file as sweep_spec

pytestmark = pytest.mark.integration


def spec_file(tmp_path: Path, name: str) -> Path:
    # Loaded enough that tasks queue in the switch, so large ones are pre-written.
    return sweep_spec(tmp_path, name, [0.9], plots=[], large_fraction=0.5, quota=1)


def worker_stats(run_dir: Path) -> list[dict]:
    (pdir,) = (run_dir / "points").iterdir()
    return [json.loads((pdir / "workers" / w / "stats.json").read_text()) for w in ("worker0", "worker1")]


def test_a_checking_nic_drops_every_prewritten_task(testbed, tmp_path):
    tb, inv = testbed
    data = yaml.safe_load(tb.inventory_path.read_text())
    data["roce"] = {"icrc_check": "on"}
    (tmp_path / "checking.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    checking = load(tmp_path / "checking.yaml")

    go = dict(results_root=tmp_path / "results", progress=False, retries=0, calibrate=False)  # not about timing
    stats = worker_stats(run(spec_file(tmp_path, "icrc-on"), checking, tmp_path / "checking.yaml", **go))
    assert all(s["roce"]["icrc_check"] for s in stats)
    dropped = sum(s["drops"]["roce_icrc"] for s in stats)
    refused = sum(w["desc_mismatch"] for s in stats for w in s["workers"])
    assert dropped > 0 and sum(s["roce"]["applied"] for s in stats) == 0, [s["roce"] for s in stats]
    assert refused > 0  # their descriptors found nothing in the ring

    stats = worker_stats(run(spec_file(tmp_path, "icrc-unset"), inv, tb.inventory_path, **go))
    assert not any(s["roce"]["icrc_check"] for s in stats)
    assert sum(s["drops"]["roce_icrc"] for s in stats) == 0 and sum(s["roce"]["applied"] for s in stats) > 0
