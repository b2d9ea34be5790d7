"""The preflight for real on an emulated testbed: `rainmaker preflight` probes every
machine over SSH in a few seconds, a spec whose needs the machine lacks is refused
before its run folder is made, and a short `rainmaker run` keeps preflight.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration import test_sweep as sweeps

pytestmark = pytest.mark.integration
RAINMAKER = str(Path(sys.executable).parent / "rainmaker")
REPO = Path(__file__).resolve().parents[2]


def rainmaker(tb, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAINMAKER_INVENTORY=str(tb.inventory_path))
    return subprocess.run([RAINMAKER, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_preflight_probes_every_machine_in_a_few_seconds(testbed, tmp_path):
    tb, inv = testbed
    t0 = time.monotonic()
    r = rainmaker(tb, "preflight", "-o", str(tmp_path / "pf.json"))
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "pf.json").read_text())
    assert report["ok"] and report["blocking"] == [] and report["seconds"] < 5 and wall < 15
    machines = {c["machine"] for c in report["checks"]}
    assert machines == {inv.switch.name, *(h.name for h in inv.hosts)}
    c = {(x["machine"], x["name"]): x for x in report["checks"]}
    w = inv.workers[0].name
    assert c[(w, "dpdk")]["needed"] and c[(w, "dpdk")]["status"] == "ok"  # the machine's DPDK 22.11
    assert c[(w, "nic")]["status"] == "ok" and "data0" in c[(w, "nic")]["detail"]
    assert c[(w, "roce")]["status"] == "n/a" and "no ConnectX on an emulated host" in c[(w, "roce")]["detail"]
    assert c[(w, "hugepages")]["status"] == "n/a" and "--no-huge" in c[(w, "hugepages")]["detail"]
    assert c[(inv.switch.name, "sde")]["status"] == "n/a"
    ts = report["probes"][w]["timestamping"]  # ethtool -T on the namespace's veth
    assert ts["netdev"] == "data0" and "software-receive" in ts["capabilities"]
    assert report["probes"][w]["clocksource"]["current"]
    assert "preflight of" in r.stdout and f"{w} (worker)" in r.stdout


def test_a_spec_whose_needs_the_kernel_lacks_is_refused_before_its_folder(testbed, tmp_path):
    tb, inv = testbed
    data = yaml.safe_load((REPO / "experiments/rakaia-micro-20us-emulated.yaml").read_text())
    data["systems"] = ["cp", "kcm"]
    data.pop("claims", None)  # they name curves of the spec's own systems
    spec = tmp_path / "kcm.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = json.loads(rainmaker(tb, "preflight", str(spec), "--json").stdout)
    kcm = [c for c in out["checks"] if c["name"] == "kernel.kcm" and c["role"] == "worker"]
    assert kcm and all(c["needed"] for c in kcm)
    has_kcm = kcm[0]["status"] == "ok"
    r = rainmaker(tb, "run", str(spec), "--results", str(tmp_path / "results"), "--no-analysis", timeout=60)
    if has_kcm:
        pytest.skip("this machine's kernel has AF_KCM: nothing to refuse")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "needed checks of the preflight failed" in r.stderr and "CONFIG_AF_KCM" in r.stderr
    assert "--no-preflight" in r.stderr
    assert not (tmp_path / "results").exists()


def test_a_short_run_keeps_its_preflight(testbed, tmp_path):
    tb, inv = testbed
    spec = sweeps.spec_file(tmp_path, "preflight-run", [0.3], measure=1.0, plots=[])
    r = rainmaker(tb, "run", str(spec), "--results", str(tmp_path / "results"), "--no-analysis", "--no-calibrate")
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = (tmp_path / "results" / "preflight-run").iterdir()
    report = json.loads((run_dir / "preflight.json").read_text())
    assert report["ok"] and report["needs"]["source"] == "spec preflight-run" and report["needs"]["dpdk"]
    assert {c["machine"] for c in report["checks"]} == {inv.switch.name, *(h.name for h in inv.hosts)}
    assert "preflight of" in (run_dir / "run.log").read_text()
    sweep = json.loads((run_dir / "sweep.json").read_text())["points"]
    assert [p["status"] for p in sweep.values()] == ["done"]
