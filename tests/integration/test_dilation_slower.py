"""Issue 13: calibration and automatic dilation answer a slower testbed with a larger k.

The testbed is made slower the way a user would: a copy of its inventory with
emulation.link_delay_us set, and the switch started again from it, so that every
frame the switch sends leaves DELAY_US later. A request and its reply cross the
switch twice (the task sent to its token's worker, the reply sent to the client; the
token the worker sends back is held in the switch, not sent on), so the round trip
the calibration measures grows by twice the delay, and `dilation: {emulated: auto}`
must choose a larger k for the same spec.

Both testbeds are calibrated (`rainmaker calibrate`) at the k an auto spec plans with
before it has a calibration (AUTO_K), which is the calibration auto dilation chooses
from (run.py calls calibrate.choose_k on it, as here). A whole auto run would then
calibrate again at the k chosen: at k = 5,000-10,000 that window alone is 19-20 s per
testbed (a few requests a second), which a test cannot afford.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import switchd
from orchestrator.experiment.calibrate import choose_k
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.machines import shape_of
from orchestrator.experiment.run import run
from orchestrator.experiment.spec import AUTO_K
from orchestrator.experiment.spec import load as load_spec
from orchestrator.inventory import load

# It measures round trips: a test beside it on this machine's two cores stalls one
# (a CI run saw a 118 ms p99 and a mean 40x its median in the normal calibration).
pytestmark = [pytest.mark.integration, pytest.mark.alone]

# 2 ms on each of the two sends: the round trip grows by 4 ms. The normal testbed's
# overheads (a round trip of 1-1.5 ms here) ask for k = 2,000 or 5,000 (5% of a 10 us
# task); 4 ms more ask for k >= 10,000 (the most choose_k gives): the two differ while
# the normal testbed's overheads stay below 2.5 ms.
DELAY_US = 2000.0
EMISSIONS = 2  # frames the switch sends per request: the task to the worker, the reply to the client


def spec_file(tmp_path: Path, dilation) -> Path:
    """A small Rain spec (test_sweep.spec_file's shape). Its 120 s measurement window only
    bounds k (100 mean tasks, and 2,000 requests at 0.5, in it: up to k = 12,000, above
    the 10,000 choose_k stops at): calibrating runs no point."""
    spec = {
        "name": "slower",
        "systems": ["rain"],
        "workers": {"per_host_threads": 2},
        "workload": {"classes": [{"name": "task", "service": {"dist": "exponential", "mean_us": 10}}]},
        "load": {"capacity_fraction": [0.5]},
        "emulated": {"warmup_s": 0.5, "measure_s": 120},
        "dilation": {"emulated": dilation},
        "rain": {"initial_quota": 2},
    }
    p = tmp_path / f"slower-{dilation}.yaml"
    p.write_text(yaml.safe_dump(spec, sort_keys=False))
    return p


def _calibrate(spec: Path, inv, inv_path: Path, results: Path) -> dict:
    """`rainmaker calibrate SPEC -i INV`: the calibration in the run's manifest."""
    run_dir = run(
        spec, inv, inv_path, results_root=results, retries=0, progress=False, analyze_after=False, calibrate_only=True
    )
    return RunDir(run_dir).read_manifest()["calibration"]


def _emulator_cmdlines(inv) -> list[str]:
    pids = subprocess.run(["ip", "netns", "pids", inv.switch.netns], capture_output=True, text=True).stdout.split()
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "switch.emulator" in cmd:
            out.append(cmd)
    return out


def test_a_slower_testbed_gets_a_larger_k(testbed, tmp_path):
    tb, inv = testbed
    at_auto_k = spec_file(tmp_path, AUTO_K)
    auto = load_spec(spec_file(tmp_path, "auto"))
    data = yaml.safe_load(tb.inventory_path.read_text())
    data["emulation"]["link_delay_us"] = DELAY_US
    slow_path = tmp_path / "inventory-slower.yaml"
    slow_path.write_text(yaml.safe_dump(data, sort_keys=False))
    slow = load(slow_path)
    t0 = time.monotonic()
    was_running = switchd.status(inv).running

    normal = _calibrate(at_auto_k, inv, tb.inventory_path, tmp_path / "normal")
    t1 = time.monotonic()
    try:
        switchd.start(slow, "rain", restart=True)
        assert any(f"--link-delay-us {DELAY_US}" in c for c in _emulator_cmdlines(slow)), _emulator_cmdlines(slow)
        slower = _calibrate(at_auto_k, slow, slow_path, tmp_path / "slower")
    finally:  # later tests on this testbed find the switch as it was, without the delay
        if was_running:
            switchd.start(inv, "rain", restart=True)
        else:
            switchd.stop(inv)
    t2 = time.monotonic()
    k0, why0 = choose_k(normal, auto, shape_of(inv))
    k1, why1 = choose_k(slower, auto, shape_of(slow))

    rt0, rt1 = normal["round_trip_us"], slower["round_trip_us"]
    print(
        f"\nnormal: round trip {rt0['mean']:,.0f} us (p50 {rt0['p50']:,.0f}, p99 {rt0['p99']:,.0f}), handler "
        f"{normal['service_overshoot_us']:,.0f} us late, k = {k0:g} ({t1 - t0:.1f} s): {why0}\n"
        f"slower by {DELAY_US:g} us a send: round trip {rt1['mean']:,.0f} us (p50 {rt1['p50']:,.0f}, p99 "
        f"{rt1['p99']:,.0f}), handler {slower['service_overshoot_us']:,.0f} us late, k = {k1:g} ({t2 - t1:.1f} s): "
        f"{why1}"
    )
    assert normal["k"] == slower["k"] == AUTO_K
    # Each send adds the delay; the rest of the round trip is the normal testbed's, give or
    # take its noise (most of 2 x the delay, not all: a mean over 150 requests).
    assert rt1["mean"] - rt0["mean"] >= 0.75 * EMISSIONS * DELAY_US, (rt0, rt1)
    assert rt1["p50"] - rt0["p50"] >= 0.75 * EMISSIONS * DELAY_US, (rt0, rt1)
    assert k1 > k0, (why0, why1)
    # each `rainmaker calibrate` left its calibration in the testbed's history, where the
    # next `plan` reads it (estimate.py)
    from orchestrator.experiment import history

    recs = [r for r in history.read_history(history.history_path(inv)) if r["kind"] == "calibration"]
    assert [r["calibrated"][-1]["round_trip_us"]["mean"] for r in recs[-2:]] == [rt0["mean"], rt1["mean"]]
