"""A run's wall time, estimated from the testbed's history (estimate.py): a lower bound
without history, the last run's calibration and orchestration with it, the record a
finished run leaves, and each point's ETA line."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.experiment import estimate, history
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.plan import TestbedShape, plan
from orchestrator.experiment.spec import load
from orchestrator.experiment.sweep import DONE, Sweep

SHAPE = TestbedShape(worker_hosts=2, client_hosts=1, emulated=True)


def spec_file(tmp_path, **over):
    d = {
        "name": "est",
        "systems": ["rain"],
        "workers": {"per_host_threads": 2},
        "workload": {"classes": [{"name": "t", "service": {"dist": "exponential", "mean_us": 10}}]},
        "load": {"capacity_fraction": [0.3, 0.5]},
        "emulated": {"warmup_s": 1, "measure_s": 20},
        "dilation": {"emulated": 1000},
    } | over
    p = tmp_path / "est.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return load(p)


CAL = {
    "k": 1000,
    "round_trip_us": {"mean": 300.0, "p50": 290.0, "p99": 600.0},
    "service_overshoot_us": 5.0,
    "network": {"client_switch_ns": 75, "switch_worker_ns": 75, "switch_pkt_ns": 0, "worker_pkt_ns": 2},
}


def last_run(**over) -> dict:
    return {
        "kind": "run",
        "at": "2026-12-06T03:00:00",
        "spec": "demo",
        "calibration": CAL,
        "calibrations": 1,
        "points": 4,
        "segments": 8,
        "before_sweep_s": 60.0,
        "after_sweep_s": 20.0,
        "costs": {"attempt_s": 10.0, "stalls_per_s": 0.0, "measured_s": 100.0},
        "wall_s": 600.0,
        "estimated_s": 500.0,
        "estimate_at_least": False,
    } | over


def test_without_history_the_estimate_is_the_windows_alone_and_says_at_least(tmp_path):
    s = spec_file(tmp_path)
    e = estimate.estimate(s, SHAPE, [])
    assert e.at_least and e.text().startswith("at least ")
    assert e.seconds == pytest.approx(2 * (1 + 20))
    assert any("no finished run" in b for b in e.basis)


def test_the_last_run_gives_the_orchestration_per_segment_before_and_after(tmp_path):
    s = spec_file(tmp_path)
    e = estimate.estimate(s, SHAPE, [last_run(points=2)])
    assert not e.at_least and e.k == 1000
    # two points of one segment: windows, 10 s around each segment, the last run's
    # 60 s before the sweep and its analysis (20 s for 2 points, as many as here)
    assert e.seconds == pytest.approx(2 * (21 + 10) + 60 + 20)


def test_a_host_that_stalls_costs_measurements_again(tmp_path):
    s = spec_file(tmp_path, validity={"remeasure_stalled": 2})
    rate = 0.01  # a stall every 100 s of measurement: a 21 s window is stalled with q = 1 - e^-0.21
    costs = {"attempt_s": 10.0, "stalls_per_s": rate, "measured_s": 1000.0}
    e = estimate.estimate(s, SHAPE, [last_run(points=2, before_sweep_s=0.0, after_sweep_s=0.0, costs=costs)])
    q = 1 - math.exp(-rate * 21)
    assert e.seconds == pytest.approx(2 * 31 * (1 + q + q * q))


def test_segments_each_pay_their_warm_up_and_orchestration(tmp_path):
    s = spec_file(tmp_path, emulated={"warmup_s": 1, "measure_s": 40, "segment_s": 20})
    e = estimate.estimate(s, SHAPE, [last_run(points=2, before_sweep_s=0.0, after_sweep_s=0.0)])
    assert e.seconds == pytest.approx(2 * (2 * (1 + 10) + 40))


def test_auto_dilation_takes_the_k_the_last_calibration_asks_for(tmp_path):
    s = spec_file(tmp_path, dilation={"emulated": "auto"})
    k, ks, _ = estimate.auto_k(s, SHAPE, {1000.0: CAL}, plan(s, SHAPE)[0].dilation)
    e = estimate.estimate(s, SHAPE, [last_run()])
    assert e.k == k and "calibrations at k" in e.basis[0]
    # the last run's 60 s before its sweep was one calibration; this run calibrates at each of ks
    assert e.fixed_s == pytest.approx(60.0 * len(ks) + 20.0 * len(plan(s, SHAPE, k=k)) / 4)


def test_history_keeps_the_newest_and_skips_a_torn_line(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "KEEP", 3)
    path = tmp_path / "h" / history.HISTORY
    for i in range(5):
        history.append_history(path, last_run(spec=f"s{i}"))
    with path.open("a") as f:
        f.write('{"kind": "run", "spe')  # a run cut off while writing
    got = history.read_history(path)
    assert [r["spec"] for r in got] == ["s2", "s3", "s4"]
    assert estimate.accuracy(got)[-1].endswith("(-17%)")


def test_history_is_per_testbed_shape_not_per_slot(tmp_path, monkeypatch):
    monkeypatch.setenv("RAINMAKER_STATE_DIR", str(tmp_path))

    class Inv:
        emulation, clients, workers, name = object(), [1], [1, 2], "emulated3"

    assert history.history_path(Inv()) == tmp_path / "history" / "emulated-1c2w" / history.HISTORY
    assert history.history_path(None) == history.history_path(Inv())
    Inv.emulation, Inv.name = None, "lab/tofino 1"
    assert history.history_path(Inv()).parent.name == "lab_tofino_1"


def finished_run(tmp_path, s) -> RunDir:
    rd = RunDir.new(tmp_path / "results", s.name, "20261206-000000")
    points = plan(s, SHAPE)
    sweep = Sweep(rd.path, points, resume=False)
    rd.write_manifest({"points": [{"dilation": 1000}], "calibration": CAL | {"point": {}}})
    for i, p in enumerate(points):
        cuts = [10.0, 10.0] if i == 0 else [20.0]
        rd.point(p.id).fresh().write_point({"id": p.id, "warmup_s": 1, "measure_s": 20} | {"segments": cuts})
        sweep.start(p.id)
        sweep.finish(p.id, DONE, valid=True)
    # the first point's second segment was stalled once and measured again
    stalled = rd.path / "stalled" / points[0].id / "s2-1"
    stalled.mkdir(parents=True)
    (stalled / "point.json").write_text(json.dumps({"warmup_s": 1, "measure_s": 10.0}))
    doc = json.loads(rd.sweep.read_text())
    t = time.time()
    # the first point took 53 s around its two 11 s segments and an 11 s re-measure, the
    # second 31 s around one of 21
    for pid, wall in zip(doc["points"], (53.0, 31.0)):
        doc["points"][pid]["attempts_log"][0]["started"] = t - wall
        doc["points"][pid]["finished"] = t
    rd.sweep.write_text(json.dumps(doc))
    return rd


def test_a_finished_run_records_its_orchestration_per_segment(tmp_path):
    s = spec_file(tmp_path)
    rd = finished_run(tmp_path, s)
    clock = estimate.Clock(t0=time.monotonic() - 100)
    clock.sweep_t0, clock.sweep_t1, clock.calibrations = clock.t0 + 20, clock.t0 + 95, 1
    r = estimate.record(rd, s, clock, {"seconds": 90.0, "at_least": False})
    # per attempt: (53 - 22 - 11 + 31 - 21) / 4 = 7.5; one stall in 22 + 11 + 21 s measured
    assert r["costs"]["attempt_s"] == pytest.approx(7.5)
    # one of 4 attempts of 13.5 s on average stalled: the rate at which that happens
    assert r["costs"]["stalls_per_s"] == pytest.approx(-math.log(1 - 1 / 4) / (54 / 4), rel=1e-4)
    assert (r["points"], r["segments"], r["stalled"], r["k"], r["calibration"]["k"]) == (2, 3, 1, 1000, 1000)
    assert "point" not in r["calibration"]
    assert r["before_sweep_s"] == pytest.approx(20, abs=0.2) and r["sweep_s"] == pytest.approx(75, abs=0.2)
    assert r["wall_s"] >= 100 and r["estimated_s"] == 90.0


def test_a_point_a_stopped_run_resumed_costs_its_attempts_after_the_resume(tmp_path):
    s = spec_file(tmp_path)
    rd = finished_run(tmp_path, s)
    doc = json.loads(rd.sweep.read_text())
    first = next(iter(doc["points"].values()))
    t = first["finished"]
    # stopped 40 minutes ago in its first attempt, resumed, a retry after a failure, done
    first["attempts_log"] = [
        {"attempt": 1, "started": t - 2400.0, "reason": "interrupted"},
        {"attempt": 2, "started": t - 60.0, "reason": "the switch did not answer"},
        {"attempt": 3, "started": t - 20.0, "reason": None},
    ]
    rd.sweep.write_text(json.dumps(doc))
    walls = estimate.point_walls(rd)
    assert walls[0]["wall_s"] == pytest.approx(60.0)  # the retry counts, the stop does not
    assert walls[1]["wall_s"] == pytest.approx(31.0)


def test_a_window_measured_longer_for_its_correlation_is_expected_again(tmp_path):
    s = spec_file(tmp_path, emulated={"warmup_s": 1, "measure_s": 20, "measure_max_s": 200, "segment_s": 10})
    rd = finished_run(tmp_path, s)
    points = plan(s, SHAPE)
    rd.write_manifest({"points": [{"id": p.id, "dilation": 1000, "measure_s": 20} for p in points]})
    # the first point planned as 2 segments of 10 s, measured to 20 (segments.REPLICATIONS)
    rd.point(points[0].id).write_point({"id": points[0].id, "warmup_s": 1, "measure_s": 200, "segments": [10.0] * 20})
    rd.point(points[1].id).write_point({"id": points[1].id, "warmup_s": 1, "measure_s": 20, "segments": [10.0] * 2})
    walls = estimate.point_walls(rd)
    assert [w["extended"] for w in walls] == [True, False]
    costs = estimate.Costs.of(walls)
    assert (costs.segmented, costs.extended, costs.extended_share) == (2, 1, 0.5)
    again = estimate.costs_of({"costs": costs.as_dict()})  # through the history record
    assert (again.segmented, again.extended) == (2, 1)
    # a point of 2 segments (11 s and 10 s around each), and a quarter of the 18 segments
    # that would take it to 20 (within measure_max_s, 200 s)
    quarter = estimate.Costs(10.0, 0.0, 100.0, segmented=4, extended=1)
    assert quarter.point_s(points[0], [10.0, 10.0], 0, 200.0) == pytest.approx(2 * 21 + 0.25 * 18 * 21)
    assert quarter.point_s(points[0], [10.0] * 19, 0, 200.0) == pytest.approx(19 * 21 + 0.25 * 21)
    assert quarter.point_s(points[0], [20.0], 0, 200.0) == pytest.approx(31)  # one run: never extended
    # the estimate: more than from a record before the count, and it says why
    last = last_run(points=2, before_sweep_s=0.0, after_sweep_s=0.0)
    before = estimate.estimate(s, SHAPE, [last])
    last["costs"] |= {"segmented": 4, "extended": 1}
    e = estimate.estimate(s, SHAPE, [last])
    assert e.seconds > before.seconds
    assert any("1 of its 4 segmented points measured longer" in b for b in e.basis)


def test_each_points_line_has_the_elapsed_time_and_the_eta(tmp_path):
    s = spec_file(tmp_path)
    rd = finished_run(tmp_path, s)
    points = plan(s, SHAPE)
    clock = estimate.Clock(t0=time.monotonic() - 125)
    eta = estimate.Eta(rd, s, True, clock, [last_run(after_sweep_s=6.0)])  # remeasure_stalled 3
    # this run's own 7.5 s per attempt, its stall pooled with none in the last run's 100 s
    # (1 in 154 s): 21 + 7.5 for the last point, an expected re-measure, and the analysis
    q = 1 - math.exp(-21 / 154)
    line = eta.line(points[1], points[1:], 1, 2)
    left = 28.5 * sum(q**i for i in range(4)) + 6
    assert line == f"point 2 of 2, {points[1].id}: elapsed 2.1 min, ETA {left:.0f} s"
    bare = estimate.Eta(RunDir.new(tmp_path / "r2", "x", "1"), s, True, clock, [])
    assert "ETA at least 42 s" in bare.line(points[0], points, 0, 2)


def cal_at_k(k: float, rt: float, over: float = 5.0) -> dict:
    return {
        "k": k,
        "round_trip_us": {"mean": rt, "p50": rt, "p99": 2 * rt},
        "service_overshoot_us": over,
        "network": {"client_switch_ns": round(rt * 250 / k), "switch_worker_ns": round(rt * 250 / k)},
    }


def test_a_calibration_at_another_k_is_read_between_the_known_ones():
    known = {100.0: cal_at_k(100, 140.0), 1000.0: cal_at_k(1000, 400.0)}
    mid = estimate.calibration_at(known, 10**2.5)  # halfway in log k
    assert mid["round_trip_us"]["mean"] == pytest.approx(270.0)
    assert mid["network"]["client_switch_ns"] == round(270.0 * 1000 / 4 / 10**2.5)
    assert estimate.calibration_at(known, 5000)["round_trip_us"]["mean"] == 400.0  # the nearest beyond them
    assert estimate.calibration_at(known, 100)["round_trip_us"]["mean"] == 140.0
    assert estimate.calibration_at(known, 100, spread=0.3)["round_trip_us"]["mean"] == pytest.approx(182.0)
    assert estimate.calibration_at({}, 100) is None


def test_auto_dilation_walks_the_ks_the_run_would_calibrate_at(tmp_path):
    from orchestrator.experiment.calibrate import choose_k

    s = spec_file(tmp_path, dilation={"emulated": "auto"})
    k0 = plan(s, SHAPE)[0].dilation
    # the overheads grow with k, as this testbed's did: 140 us at k = 100, 228 at 500, 400 at 1000
    known = {100.0: cal_at_k(100, 140.0), 500.0: cal_at_k(500, 228.0), 1000.0: cal_at_k(1000, 400.0)}
    k1, _ = choose_k(known[float(k0)] if float(k0) in known else estimate.calibration_at(known, k0), s, SHAPE)
    k, ks, cal = estimate.auto_k(s, SHAPE, known, k0)
    assert ks[0] == k0 and ks[-1] == k and cal["k"] == k
    if k1 != k0:
        assert ks[1] == k1  # the first calibration's answer, then the walk goes on from there
    again, _ = choose_k(cal, s, SHAPE)
    assert again <= k  # settled: the calibration at k asks for no more
    history = [last_run(calibration=None, calibrated=list(known.values()))]
    assert estimate.estimate(s, SHAPE, history).k == k


def test_a_calibrated_k_is_raised_only_beyond_the_overheads_spread(tmp_path):
    from orchestrator.experiment.calibrate import RAISE_MARGIN, choose_k

    s = spec_file(tmp_path, dilation={"emulated": "auto"}, load={"capacity_fraction": [0.5, 0.8]})
    # 273 us of overheads ask for k = 546 at 5% of a 10 us task: 1000 from scratch, but a
    # run calibrated at 500 stays there (the same round trip was 228 us in the run before)
    cal = cal_at_k(500, 267.0, 6.0)
    assert choose_k(cal, s, SHAPE)[0] == 1000
    k, why = choose_k(cal, s, SHAPE, hold=500.0)
    assert k == 500 and "k stays 500" in why
    far = cal_at_k(500, 500 * 0.5 * (1 + RAISE_MARGIN) + 20, 0.0)
    assert choose_k(far, s, SHAPE, hold=500.0)[0] == 1000


def test_with_no_calibration_recorded_a_calibrating_run_gets_a_range(tmp_path):
    # the history has a run, but of a family that does not calibrate: the windows depend on
    # the calibration this run makes first, so the estimate is a range, its lower end
    # every window at measure_s (on this VM the demo: between 5.8 and 34.3 min, took 12.0)
    s = spec_file(
        tmp_path,
        load={"capacity_fraction": [0.5, 0.85]},
        emulated={"warmup_s": 1, "measure_s": 20, "measure_max_s": 400},
    )
    e = estimate.estimate(s, SHAPE, [last_run(calibration=None, points=2)])
    assert e.low_s is not None and e.low_s < e.seconds
    assert e.text().startswith("between ") and e.as_dict()["low_seconds"] == round(e.low_s, 1)
    assert e.low_s == pytest.approx(2 * (21 + 10) + 60 + 20)  # windows at measure_s, the last run's costs
    assert any("none is recorded here yet" in b for b in e.basis)
    # with the calibration recorded, one number again
    assert estimate.estimate(s, SHAPE, [last_run(points=2)]).low_s is None
    # without history: "at least" stays a lower bound, the windows at measure_s
    bare = estimate.estimate(s, SHAPE, [])
    assert bare.at_least and bare.seconds == pytest.approx(2 * 21)


def test_an_rpc_spec_takes_only_the_rpc_familys_calibrations(tmp_path):
    """A Rain calibration's round trip is rain-client's through the scheduler, an RPC
    one's rpc-client's over kernel TCP: an RPC spec's windows are sized on its own
    family's, and with none recorded the estimate is a range, as any run's."""
    from orchestrator.experiment.calibrate import calibrates

    # the Rakaia reduced spec narrowed to one point: the model sizes each point's window
    # (a minute of simulation for all 32), and the family's rule is the same for one
    d = yaml.safe_load(Path("experiments/rakaia-micro-20us-emulated.yaml").read_text())
    d.update(systems=["ms"], variants=d["variants"][:1], load={"capacity_fraction": [0.4]})
    d.pop("claims")
    (tmp_path / "rakaia.yaml").write_text(yaml.safe_dump(d))
    s = load(tmp_path / "rakaia.yaml")

    assert calibrates(s) and estimate.family(s) == "rpc"
    rain = last_run()  # calibrated at k = 1000, an older record without its family: Rain's
    e = estimate.estimate(s, SHAPE, [rain])
    assert e.low_s is not None and any("none is recorded here yet" in b for b in e.basis)
    rpc = last_run(spec="rakaia", family="rpc", calibration=cal_at_k(1000, 200.0, 60.0))
    e = estimate.estimate(s, SHAPE, [rain, rpc])
    assert e.low_s is None and e.text().startswith("about ")


def test_the_cpu_per_request_is_read_by_k():
    def with_cpu(k, per):
        return cal_at_k(k, 300.0) | {"cpu": {"cores": 2, "idle_cores": 0.03, "per_request_ms": per}}

    # on this VM: 2.99 ms at k = 100, 7.94 at 1000, 13.8 at 2000
    known = {100.0: with_cpu(100, 2.99), 1000.0: with_cpu(1000, 7.94), 2000.0: with_cpu(2000, 13.8)}
    assert estimate.cpu_per_request_at(known, 1000) == pytest.approx(7.94)
    assert estimate.cpu_per_request_at(known, 1500) == pytest.approx((7.94 + 13.8) / 2)
    assert estimate.cpu_per_request_at(known, 5000) == pytest.approx(13.8 + 3000 * (13.8 - 7.94) / 1000)
    assert estimate.cpu_per_request_at(known, 10) >= 2.99  # never below the smallest measured
    assert estimate.calibration_at(known, 1500)["cpu"]["per_request_ms"] == pytest.approx(10.87)
    one = {1000.0: with_cpu(1000, 7.94)}
    assert estimate.cpu_per_request_at(one, 100) == pytest.approx(7.94)
    assert estimate.cpu_per_request_at(one, 100, scales=True) == pytest.approx(0.794)
    assert estimate.cpu_per_request_at({1000.0: cal_at_k(1000, 300.0)}, 100) is None


def test_one_calibrations_cpu_leaves_k_open_and_the_estimate_says_so(tmp_path):
    # a heavy highest load whose CPU at k = 1000's cost per request asks for a larger k
    # than its overheads: with that calibration alone, k may be lower, and the basis says
    s = spec_file(tmp_path, dilation={"emulated": "auto"}, load={"capacity_fraction": [0.5, 0.8]})
    cal = cal_at_k(1000, 300.0) | {"cpu": {"cores": 2, "idle_cores": 0.03, "per_request_ms": 40.0}}
    e = estimate.estimate(s, SHAPE, [last_run(calibration=None, calibrated=[cal])])
    scaled, _, _ = estimate.auto_k(s, SHAPE, {1000.0: cal}, plan(s, SHAPE)[0].dilation, cpu_scales=True)
    assert scaled < e.k
    assert any(b.startswith(f"k may be {scaled:g} instead: the CPU a request costs") for b in e.basis)


def test_a_range_is_judged_against_the_time_taken():
    rows = estimate.accuracy(
        [
            {"at": "a", "spec": "demo", "estimated_s": 2058.0, "estimated_low_s": 348.0, "wall_s": 720.0},
            {"at": "b", "spec": "demo", "estimated_s": 600.0, "estimated_low_s": 300.0, "wall_s": 900.0},
            {"at": "c", "spec": "demo", "estimated_s": 600.0, "wall_s": 720.0},
        ]
    )
    assert rows[0].endswith("estimated 5.8 min to 34.3 min, took 12.0 min (inside it)")
    assert rows[1].endswith("(-33% from its nearer end)")
    assert rows[2].endswith("estimated 10.0 min, took 12.0 min (-17%)")


def test_the_costs_come_from_the_last_run_of_the_same_family(tmp_path):
    """rpc-client over kernel TCP stalls far more often than rain-client here: a Rain
    spec takes the last Rain run's stall rate, not a later RPC run's."""
    s = spec_file(tmp_path)
    assert estimate.family(s) == "rain"
    rain = last_run(spec="demo")  # no family recorded (an older record): it calibrated, so Rain
    rpc = last_run(spec="rakaia", family="rpc", calibration=None, costs={"attempt_s": 10.0, "stalls_per_s": 0.1})
    e = estimate.estimate(s, SHAPE, [rain, rpc])
    assert e.seconds == pytest.approx(estimate.estimate(s, SHAPE, [rain]).seconds)
    assert any(b.startswith("from the last Rain run here (demo") for b in e.basis)
    # with no Rain run, the RPC run's costs stand in, and the basis says so
    alone = estimate.estimate(s, SHAPE, [rpc])
    assert alone.seconds > e.seconds
    assert any("no Rain run here yet" in b and "(rakaia)" in b for b in alone.basis)
    assert any(b.startswith("from the last run here (rakaia") for b in alone.basis)


def test_rainmaker_calibrate_leaves_its_calibrations_for_the_next_estimate(tmp_path):
    """`rainmaker calibrate` records its calibrations (not a run: no costs, no wall
    time): with one at a second k, the CPU per request is known by k and k is no longer
    open; the costs still come from the last run, and plan's list skips the record."""
    s = spec_file(tmp_path, dilation={"emulated": "auto"}, load={"capacity_fraction": [0.5, 0.8]})
    cal = cal_at_k(1000, 300.0) | {"cpu": {"cores": 2, "idle_cores": 0.03, "per_request_ms": 40.0}}
    run = last_run(calibration=None, calibrated=[cal], family="rain")
    open_k = estimate.estimate(s, SHAPE, [run])
    assert open_k.low_s is not None  # a range: k rests on one calibration's CPU
    rd = RunDir.new(tmp_path / "results", "est", "cal")
    rd.write_manifest({"points": [{"dilation": 2000.0}]})
    at_2000 = cal_at_k(2000, 400.0) | {"cpu": {"cores": 2, "idle_cores": 0.03, "per_request_ms": 45.0}}
    rec = estimate.calibration_record(rd, s, [at_2000 | {"point": {"id": "calibrate"}}])
    assert rec["kind"] == "calibration" and rec["k"] == 2000.0 and "point" not in rec["calibrated"][0]
    path = tmp_path / "h" / history.HISTORY
    history.append_history(path, run)
    history.append_history(path, rec)
    recs = history.read_history(path)
    assert [r["kind"] for r in recs] == ["run", "calibration"]
    e = estimate.estimate(s, SHAPE, recs)
    assert e.low_s is None and not any("k may be" in b and "CPU" in b for b in e.basis)
    assert estimate.last_alike(recs, s) == (run, True)
    assert estimate.accuracy(recs) == estimate.accuracy([run])


def test_an_automatic_k_starts_where_the_last_run_of_the_spec_settled(tmp_path):
    """The estimate walks the ks as the run will: from the k the last run of this spec
    settled at, held there within the overheads' spread, not from the planned k."""
    s = spec_file(tmp_path, dilation={"emulated": "auto"}, emulated={"warmup_s": 1, "measure_s": 200})
    # fig6a-emulated's: 491 us of overheads at k = 100 ask for 1,000, where 622 us ask for
    # 1,244, within the spread: from k = 100 the walk ends at 1000; at 2000, 695 us ask
    # for 1,390: from k = 2000 it ends there
    cals = [cal_at_k(100, 491.0, 0.0), cal_at_k(1000, 622.0, 0.0), cal_at_k(2000, 695.0, 0.0)]
    fresh = estimate.estimate(s, SHAPE, [last_run(calibration=None, calibrated=cals)])
    assert fresh.k == 1000 and "calibrations at k = 100 then 1000 ask" in fresh.basis[0]
    settled = last_run(spec="est", auto=True, k=2000.0, calibration=None, calibrated=cals)
    assert history.settled_k([settled], s).k == 2000.0
    e = estimate.estimate(s, SHAPE, [settled])
    assert e.k == 2000 and "starting at k = 2000, where this testbed's last run of est settled" in e.basis[0]
    assert "calibrations at k = 2000 ask" in e.basis[0]
    assert history.settled_k([settled | {"spec": "other"}], s) is None  # another spec's k is not this one's
