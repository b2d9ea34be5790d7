"""The model beside every measurement (orchestrator/experiment/model_beside.py), on run
folders built here as `rainmaker run` leaves them on the emulated testbed: the model's
files are written beside the measured ones, `model_agreement` fails a point whose p99
is twice the model's and passes one within 10%, the analysis' model columns, the
dashed model curves of the figures, the report's table, and a run without a model
(an older one) still analyses, plots and reports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.experiment import layout, model_beside, points
from orchestrator.experiment.analyze import MODEL_COLUMNS, analyze
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.points import load_point
from orchestrator.experiment.report import render_markdown
from orchestrator.experiment.spec import Spec, SpecError, load
from orchestrator.experiment.validity import check_point
from tests.unit.results_fixture import good_counters, make_summary, synthetic_run, write_point, write_sweep

K = 100.0
SPEC = {
    "name": "tiny",
    "systems": ["rain"],
    "workers": {"per_host_threads": 16, "emulated_per_host_threads": 1},
    "workload": {"classes": [{"name": "task", "service": {"dist": "exponential", "mean_us": 10}}]},
    "load": {"capacity_fraction": [0.3, 0.6]},
    "rain": {"initial_quota": 2},
    "validity": {"min_samples_p99": 100, "max_p99_ci_width": 1.0},
    "plots": ["p99_vs_load", "p99_slowdown_vs_load", "p99_per_class"],
}


def _point(frac: float, index: int, system: str = "rain") -> dict:
    """point.json of an emulated point: 2 worker hosts x 1 thread of 10 us: 200 kRPS of
    capacity, k = 100, 1 s + 4 s (10 ms + 40 ms of paper time)."""
    return {
        "id": f"{system}-f{frac:g}-r1",
        "index": index,
        "system": system,
        "variant": None,
        "variant_label": None,
        "repetition": 1,
        "load_krps": 200 * frac,
        "capacity_fraction": frac,
        "offered_rps": 200 * frac * 1000 / K,
        "dilation": K,
        "warmup_s": 1.0,
        "measure_s": 4.0,
        "handler": "sleep",
        "worker_threads": 2,
        "params": {"initial_quota": 2, "adaptive": False},
    }


def measured_run(root: Path, fracs=(0.3, 0.6), *, spec: dict | None = SPEC, system: str = "rain") -> Path:
    """A run folder with the manifest and point.json of each point (no client results
    yet: measure() writes them)."""
    run = root / "results" / "tiny" / "20260101-000000"
    run.mkdir(parents=True)
    manifest = {"experiment": "tiny", "testbed": {"kind": "emulated", "workers": 2, "clients": 1}}
    if spec is not None:
        manifest["spec"] = spec
    (run / layout.MANIFEST).write_text(json.dumps(manifest))
    for i, f in enumerate(fracs):
        p = _point(f, i, system)
        d = run / layout.POINTS / p["id"]
        d.mkdir(parents=True)
        (d / layout.POINT).write_text(json.dumps(p))
    write_sweep(run, {_point(f, i, system)["id"]: {"status": "done"} for i, f in enumerate(fracs)})
    return run


def measure(run: Path, pid: str, p99_paper_us: float, n: int = 20_000) -> None:
    """The client's results of a point whose p99 (paper time) is `p99_paper_us`: a
    latency spread below it and 2% at it, in testbed ns (x k)."""
    point = json.loads((run / layout.POINTS / pid / layout.POINT).read_text())
    top = round(p99_paper_us * 1000 * K)
    rng = np.random.default_rng(1)
    lat = np.concatenate([rng.integers(top // 4, top // 2, n - n // 50), np.full(n // 50, top)])
    sd = (lat / (10_000 * K) * 1000).astype(np.int64) + 1000
    per_iv = [{"task": lat[: n // 2]}, {"task": lat[n // 2 :]}]
    per_sd = [{"task": sd[: n // 2]}, {"task": sd[n // 2 :]}]
    # the clients' schedule drew the point's own rate (the model is offered it)
    rate = float(point["offered_rps"])
    summary = make_summary({"task": good_counters(n, n / rate)}, offered_rps=rate, achieved_rps=rate)
    write_point(run, point, {"client0": {"latency": per_iv, "slowdown": per_sd, "summary": summary}})


def model_p99(run: Path, pid: str) -> float:
    return points.load_model(RunDir(run).point(pid)).latency["all"].percentile(99.0) / 1000.0


@pytest.fixture(scope="module")
def modelled(tmp_path_factory) -> Path:
    """One measured run with the model beside each point, as run.py writes it; each
    point measured 2x the model (0.3) and 8% above it (0.6)."""
    run = measured_run(tmp_path_factory.mktemp("m"))
    manifest = RunDir(run).read_manifest()
    for pd_ in RunDir(run).points():
        model_beside.write(pd_, pd_.read_point(), manifest)
    measure(run, "rain-f0.3-r1", 2.0 * model_p99(run, "rain-f0.3-r1"))
    measure(run, "rain-f0.6-r1", 1.08 * model_p99(run, "rain-f0.6-r1"))
    return run


def test_the_model_is_written_beside_the_measurement_in_a_simulated_points_layout(modelled):
    pd_ = RunDir(modelled).point("rain-f0.6-r1")
    assert (pd_.path / layout.CLIENTS / "client0" / layout.LATENCY_HLOG).exists()  # the measurement
    m = pd_.model
    for rel in (
        layout.POINT,
        layout.TIMING,
        layout.MODEL_INFO,
        f"{layout.CLIENTS}/client0/{layout.LATENCY_HLOG}",
        f"{layout.CLIENTS}/client0/{layout.CLIENT_SUMMARY}",
        f"{layout.WORKERS}/worker1/{layout.WORKER_SAMPLES}",
        f"{layout.SWITCH}/{layout.SNAPSHOT}",
    ):
        assert (m / rel).is_file(), rel
    info = points.read_model_info(pd_)
    assert "error" not in info
    # the emulated testbed's network at k = 100 (like.py): a hop of 2 us + half a 50 us nap, / k
    assert info["network"]["client_switch_ns"] == 270 and "k = 100" in info["network_from"]
    assert info["worker_hosts"] == 2 and info["threads_per_host"] == 1 and info["dilation"] == K
    assert info["seed"] == json.loads((m / layout.TIMING).read_text())["seed"]
    assert info["warmup_s"] == pytest.approx(0.01) and info["measured_measure_s"] == pytest.approx(0.04)
    # the 40 ms window of 4,800 requests is lengthened to 200,000 requests: 1.67 s at 120 kRPS
    assert info["measure_s"] == pytest.approx(model_beside.MIN_REQUESTS / 120_000)
    point = json.loads((m / layout.POINT).read_text())
    assert point["dilation"] == 1 and point["load_krps"] == 120 and point["id"] == "rain-f0.6-r1"
    # the model's own p99 (paper time) is the analysis' column; the model reads as a point
    data = load_point(m)
    assert data.latency["all"].total > 150_000
    # the same seed gives the same model, to the bit
    again = modelled.parent / "again"
    again.mkdir()
    (again / "point.json").write_text((pd_.path / layout.POINT).read_text())
    model_beside.write(layout.PointDir(again), pd_.read_point(), RunDir(modelled).read_manifest())
    hlog = f"{layout.CLIENTS}/client0/{layout.LATENCY_HLOG}"
    assert (again / layout.MODEL / hlog).read_bytes() == (m / hlog).read_bytes()


def test_model_agreement_fails_twice_the_model_and_passes_within_10_percent(modelled):
    v = check_point(RunDir(modelled).point("rain-f0.3-r1").path, None, SPEC["validity"], write=False)
    c = v.check("model_agreement")
    assert c.passed is False and not v.valid and "model_agreement" in v.failed
    assert c.value == pytest.approx(2.0, rel=0.01) and c.threshold == 0.15
    m = model_p99(modelled, "rain-f0.3-r1")
    assert f"{2 * m:,.2f}"[:-1] in c.message and f"{m:,.2f}" in c.message  # both numbers
    assert "ratio 2.0" in c.message and "client-switch 270 ns" in c.message and "k = 100" in c.message
    assert "more than the model" in c.message
    assert c.detail["network"]["client_switch_ns"] == 270
    ok = check_point(RunDir(modelled).point("rain-f0.6-r1").path, None, SPEC["validity"], write=False)
    c = ok.check("model_agreement")
    assert c.passed is True and c.value == pytest.approx(1.08, rel=0.01)
    # the spec's tolerance decides: 5% fails the same point
    strict = check_point(
        RunDir(modelled).point("rain-f0.6-r1").path, None, SPEC["validity"] | {"model_tolerance": 0.05}, write=False
    )
    assert strict.check("model_agreement").passed is False
    # the model itself is a simulated point: the check does not run there
    sim = check_point(RunDir(modelled).point("rain-f0.6-r1").model, None, None, write=False)
    assert sim.check("model_agreement").passed is None and "simulated" in sim.check("model_agreement").message


def test_the_model_columns_curves_and_report(modelled, monkeypatch):
    from orchestrator.experiment import plots
    from orchestrator.experiment.report import render_markdown

    df = analyze(modelled)
    assert set(MODEL_COLUMNS) <= set(df.columns)
    rows = df[df["class"] == "all"].set_index("point_id")
    assert rows.loc["rain-f0.3-r1", "model_ratio"] == pytest.approx(2.0, rel=0.01)
    assert rows.loc["rain-f0.6-r1", "model_ratio"] == pytest.approx(1.08, rel=0.01)
    for pid in rows.index:
        r = rows.loc[pid]
        assert r["model_p99_us_paper"] == pytest.approx(model_p99(modelled, pid))
        assert 0 < r["model_p50_us_paper"] < r["model_p99_us_paper"] and r["model_p99_slowdown"] > 1
        assert r["model_ratio"] == pytest.approx(r["p99_us_paper"] / r["model_p99_us_paper"])
    cls = df[df["class"] == "task"].set_index("point_id")
    assert cls["model_p99_us_paper"].notna().all()
    # the figures: the model dashed, in the measured curve's colour, labelled "<curve> (model)"
    figs = {}
    monkeypatch.setattr(plots._Ctx, "save", lambda self, fig, name: figs.setdefault(name, fig) and [])
    plots.plot(modelled, ["p99_vs_load", "p99_slowdown_vs_load", "p99_per_class"])
    assert set(figs) == {"p99_vs_load", "p99_slowdown_vs_load", "p99_per_class"}
    for name, fig in figs.items():
        lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
        model, measured = lines["rain (model)"], lines["rain"]
        assert model.get_linestyle() == "--" and measured.get_linestyle() == "-", name
        assert model.get_color() == measured.get_color(), name
        assert len(model.get_xdata()) == 2, name
    model_line = {ln.get_label(): ln for ln in figs["p99_vs_load"].axes[0].get_lines()}["rain (model)"]
    assert list(model_line.get_ydata()) == pytest.approx(
        [model_p99(modelled, "rain-f0.3-r1"), model_p99(modelled, "rain-f0.6-r1")]
    )
    md = render_markdown(modelled)
    section = md.split("## Measured against the model", 1)[1].split("\n## ", 1)[0]
    assert "| rain-f0.3-r1 | 60 |" in section and "| no |" in section and "| yes |" in section
    assert "client-switch 270 ns" in section and "every point" in section
    assert "model_agreement" in md.split("## Validity", 1)[1]  # flagged in the validity table


def test_a_run_without_a_model_still_analyses_plots_and_reports(tmp_path, monkeypatch):
    from orchestrator.experiment import plots
    from orchestrator.experiment.report import render_markdown

    run = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0, 2000.0), reps=1, n=400)
    df = analyze(run)
    assert set(MODEL_COLUMNS) <= set(df.columns) and df[list(MODEL_COLUMNS)].isna().all().all()
    v = json.loads((RunDir(run).point("rain-k1000-r1").validity).read_text())
    c = next(c for c in v["checks"] if c["name"] == "model_agreement")
    assert c["status"] == "not run" and "rainmaker analyze --model" in c["message"]
    figs = {}
    monkeypatch.setattr(plots._Ctx, "save", lambda self, fig, name: figs.setdefault(name, fig) and [])
    plots.plot(run, ["p99_vs_load"])
    assert not [ln for ln in figs["p99_vs_load"].axes[0].get_lines() if "(model)" in str(ln.get_label())]
    # a summary.parquet written before the model columns existed is still read
    pd.read_parquet(RunDir(run).summary).drop(columns=list(MODEL_COLUMNS)).to_parquet(RunDir(run).summary)
    figs.clear()
    plots.plot(run, ["p99_vs_load"])
    assert "p99_vs_load" in figs
    md = render_markdown(run)
    assert "`rainmaker analyze --model RUN_DIR` simulates them" in md  # no path: the report moves with its run


def test_analyze_model_adds_the_model_to_an_older_run(tmp_path, monkeypatch, capsys):
    from tests.cli import rainmaker

    run = measured_run(tmp_path, fracs=(0.3,))
    measure(run, "rain-f0.3-r1", 40.0)
    df = analyze(run, recheck=True)  # --recheck alone checks again, and simulates nothing
    assert df["model_p99_us_paper"].isna().all()
    assert not RunDir(run).point("rain-f0.3-r1").model.exists()
    code, out, err = rainmaker(monkeypatch, capsys, "analyze", str(run), "--model")
    assert code == 0, err
    assert RunDir(run).point("rain-f0.3-r1").model.is_dir()
    df = pd.read_parquet(RunDir(run).summary)
    row = df[df["class"] == "all"].iloc[0]
    assert row["p99_us_paper"] == pytest.approx(40.0, rel=0.002)  # the histograms' 3 significant digits
    assert row["model_p99_us_paper"] > 0 and row["model_ratio"] == pytest.approx(
        40.0 / row["model_p99_us_paper"], rel=0.002
    )
    v = json.loads(RunDir(run).point("rain-f0.3-r1").validity.read_text())
    assert next(c for c in v["checks"] if c["name"] == "model_agreement")["status"] != "not run"


def test_a_model_that_cannot_be_computed_says_why_and_the_check_does_not_run(tmp_path, monkeypatch):
    from orchestrator.simulate import policies

    monkeypatch.delitem(policies.POLICIES, "pallas")  # a system the simulator has no policy for
    run = measured_run(tmp_path / "a", fracs=(0.3,), system="pallas")
    pd_ = RunDir(run).point("pallas-f0.3-r1")
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert "pallas" in info["error"] and points.load_model(pd_) is None
    measure(run, "pallas-f0.3-r1", 40.0)
    c = check_point(pd_.path, None, SPEC["validity"], write=False).check("model_agreement")
    assert c.passed is None and "could not be computed" in c.message and "pallas" in c.message
    run = measured_run(tmp_path / "b", fracs=(0.3,), spec=None)  # no spec recorded
    pd_ = RunDir(run).point("rain-f0.3-r1")
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert "no spec" in info["error"]
    assert analyze(run)["model_p99_us_paper"].isna().all()


def test_the_tolerance_has_a_range(tmp_path):
    base = "name: t\nsystems: [rain]\nworkload: {classes: [{name: a, service: {dist: constant, us: 10}}]}\n"
    base += "load: {krps: [100]}\n"
    (tmp_path / "ok.yaml").write_text(base + "validity: {model_tolerance: 0.3}\n")
    assert load(tmp_path / "ok.yaml").validity.model_tolerance == 0.3
    (tmp_path / "default.yaml").write_text(base)
    assert load(tmp_path / "default.yaml").validity.model_tolerance == 0.15
    for bad, words in (("0", "outside (0, 1]"), (".inf", "not a finite"), ("2", "outside (0, 1]")):
        (tmp_path / "bad.yaml").write_text(base + f"validity: {{model_tolerance: {bad}}}\n")
        with pytest.raises(SpecError) as ei:
            load(tmp_path / "bad.yaml")
        p = next(p for p in ei.value.problems if p.path == "validity.model_tolerance")
        assert words in p.message and p.fix


def test_the_runs_calibration_is_the_models_network_and_named_where_a_point_disagrees(tmp_path):
    from orchestrator.experiment.report import render_markdown

    run = measured_run(tmp_path, fracs=(0.3,))
    m = RunDir(run).read_manifest()
    m["calibration"] = {
        "network": {"client_switch_ns": 900, "switch_worker_ns": 800, "switch_pkt_ns": 120, "worker_pkt_ns": 40},
        "k": 100,
        "handler": {"sleep_overshoot_us": 3.5},
    }
    RunDir(run).write_manifest(m)
    pd_ = RunDir(run).point("rain-f0.3-r1")
    info = model_beside.write(pd_, pd_.read_point(), m)
    assert info["network"]["client_switch_ns"] == 900 and info["network"]["switch_pkt_ns"] == 120
    assert "calibration" in info["network_from"]
    assert info["calibration"] == {"k": 100, "handler.sleep_overshoot_us": 3.5}
    measure(run, "rain-f0.3-r1", 1.5 * model_p99(run, "rain-f0.3-r1"))
    c = check_point(pd_.path, None, SPEC["validity"], write=False).check("model_agreement")
    assert c.passed is False
    assert "client-switch 900 ns" in c.message and "handler.sleep_overshoot_us 3.5" in c.message
    analyze(run)
    md = render_markdown(run)
    assert "client-switch 900 ns" in md and "calibration (manifest.json): k 100, handler.sleep_overshoot_us 3.5" in md


def test_the_models_durations_bound_its_error_and_its_cost():
    d = model_beside._durations
    # an emulated point: 40 ms of paper time at 120 kRPS is 4,800 requests; the model takes 200,000
    assert d(120.0, 0.01, 0.04, False) == pytest.approx((0.01, 200_000 / 120_000))
    # a paper-scale point: 1 s + 10 s at 3,000 kRPS would be 33 M requests; the model takes 1 M + 1 M
    assert d(3000.0, 1.0, 10.0, False) == pytest.approx((1 / 3, 1 / 3))
    # a window already between the bounds is kept; phases keep their durations
    assert d(100.0, 0.5, 5.0, False) == (0.5, 5.0)
    assert d(3000.0, 1.0, 10.0, True) == (1.0, 10.0)


def test_a_trickle_is_not_stretched_into_hours_of_model():
    """A point of 1 request/s (paper) would need 200,000 s for MIN_REQUESTS: the model's
    window stops at MAX_STRETCH_S, and its histogram intervals stay few."""
    from orchestrator.simulate.model import MAX_INTERVALS, interval_of

    warmup, measure = model_beside._durations(0.001, 1.0, 0.04, phases=False)
    assert measure == model_beside.MAX_STRETCH_S and warmup == 1.0
    assert 2 * int(measure * 1e9) // interval_of(int(measure * 1e9)) <= 2 * MAX_INTERVALS
    assert interval_of(1_000_000_000) == 10_000_000  # a 1 s window keeps the paper's 10 ms


def test_the_model_is_offered_the_load_the_clients_drew(tmp_path):
    # 0.6 of capacity planned (1,200 rps at k = 100, 120 kRPS); the window drew 5% less
    run = measured_run(tmp_path, fracs=(0.6,))
    pid = "rain-f0.6-r1"
    point = json.loads((run / layout.POINTS / pid / layout.POINT).read_text())
    n = 4560  # 4 s at 1,140 rps
    summary = make_summary({"task": good_counters(n, 4.0)}, offered_rps=1200.0, achieved_rps=n / 4.0)
    lat = [{"task": np.full(n, 1_000_000)}]
    write_point(run, point, {"client0": {"latency": lat, "slowdown": lat, "summary": summary}})
    pd_ = RunDir(run).point(pid)
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert info["planned_load_krps"] == 120 and info["load_krps"] == pytest.approx(114.0)
    assert info["load_from"] == "the clients' schedule"
    assert json.loads((pd_.model / layout.POINT).read_text())["load_krps"] == pytest.approx(114.0)
    # a point without client results (or a model written before them) takes the plan's
    (pd_.path / layout.CLIENTS).rename(pd_.path / "elsewhere")
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert info["load_krps"] == info["planned_load_krps"] == 120 and info["load_from"] == "the plan"


def _trace(pd_, n: int, *, service=True, large=None) -> np.ndarray:
    """clients/client0/trace.csv of n requests 1 ms apart (testbed time; 10 us of paper
    time at k = 100), 5 us tasks with every 50th one 300 us (paper); returns the
    service times in paper ns."""
    svc = np.where(np.arange(n) % 50 == 7, 300_000, 5_000)
    t = pd.DataFrame(
        {
            "lcore": 0,
            "client_id": 0,
            "request_id": np.arange(n),
            "class": "task",
            "intended_ns": np.arange(n) * 1_000_000,
            "sent_ns": np.arange(n) * 1_000_000 + 100,
            "service_ns": svc * int(K),
            "latency_ns": -1,
        }
    )
    if not service:
        t = t.drop(columns=["service_ns", "latency_ns"])
    if large is not None:
        t["large"] = large
    t.to_csv(pd_.client("client0") / layout.TRACE, index=False)
    return svc


def test_the_model_replays_the_requests_the_clients_drew(tmp_path):
    run = measured_run(tmp_path, fracs=(0.3,))
    pid = "rain-f0.3-r1"
    measure(run, pid, 50.0, n=4000)
    pd_ = RunDir(run).point(pid)
    _trace(pd_, 5000)
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert info.get("error") is None and info["replayed"] is True
    assert info["requests"] == 5000 and info["requests_from"].startswith("the 5,000 requests the clients drew")
    # the measured window itself (1 s + 4 s of testbed time at k = 100), not a stretched one
    assert info["warmup_s"] == pytest.approx(0.01) and info["measure_s"] == pytest.approx(0.04)
    data = points.load_model(pd_)
    # 4,000 requests in the window, 2% of them 300 us long: the p99 is theirs (an exponential
    # 10 us draw would put it near 50 us); no request shorter than its 5 us service
    assert data.latency["all"].total == 4000
    assert data.latency["all"].percentile(99.0) >= 300_000
    assert data.latency["all"].percentile(0.0) >= 5_000
    analyze(run)
    assert "- the model's requests (every point): the ones the clients drew" in render_markdown(run)


def test_the_model_replays_which_requests_were_large(tmp_path):
    run = measured_run(tmp_path, fracs=(0.3,))
    pid = "rain-f0.3-r1"
    measure(run, pid, 50.0, n=4000)
    pd_ = RunDir(run).point(pid)
    _trace(pd_, 5000, large=(np.arange(5000) % 4 == 1).astype(int))
    replay, why = model_beside._replay(
        pd_, K, model_beside._build(pd_.read_point(), RunDir(run).read_manifest(), load_spec_dict(SPEC))[0].classes
    )
    assert len(replay) == 4 and "with which were large" in why
    assert np.array_equal(replay[3], (np.arange(5000) % 4 == 1).astype(np.uint8))


def test_without_service_times_in_the_trace_the_model_draws_its_own(tmp_path):
    run = measured_run(tmp_path, fracs=(0.3,))
    pid = "rain-f0.3-r1"
    measure(run, pid, 50.0, n=4000)
    pd_ = RunDir(run).point(pid)
    _trace(pd_, 5000, service=False)
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert info.get("error") is None and info["replayed"] is False
    assert "older than the replay" in info["requests_from"] and info["requests"] > 5000


def test_the_p99s_spread_between_draws_grows_near_saturation_and_sizes_the_window(tmp_path):
    run = measured_run(tmp_path, fracs=(0.3, 0.9))
    rd = RunDir(run)
    manifest, spec = rd.read_manifest(), load_spec_dict(SPEC)
    low, high = (rd.point(p).read_point() for p in ("rain-f0.3-r1", "rain-f0.9-r1"))
    sds = {}
    for p in (low, high):
        sp, _, _ = model_beside._build(p, manifest, spec)
        sp = replace(sp, warmup_ns=10_000_000, measure_ns=40_000_000)  # the measured window
        s = model_beside.p99_spread(sp, p["id"])
        assert s["draws"] == model_beside.SPREAD_DRAWS and set(s["rel_sd"]) == {"all", "task"}
        sds[p["id"]] = s["rel_sd"]["all"]
    assert 0 < sds["rain-f0.3-r1"] < sds["rain-f0.9-r1"]
    # the window: kept at 0.3, longer at 0.9 (and never past the longest allowed)
    assert model_beside.window_for(low, manifest, spec, 0.25, 60)[0] == 4.0
    seconds, why = model_beside.window_for(high, manifest, spec, 0.25, 60)
    assert 4.0 < seconds <= 60 and "measure_s 4 s" in why


def load_spec_dict(d: dict) -> Spec:
    return Spec.model_validate(d)


def test_p99_ci_takes_the_models_spread_when_it_is_wider(tmp_path):
    run = measured_run(tmp_path, fracs=(0.6,))
    pid = "rain-f0.6-r1"
    pd_ = RunDir(run).point(pid)
    model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    measure(run, pid, 60.0, n=20_000)
    info = json.loads((pd_.model / layout.MODEL_INFO).read_text())
    assert info["p99_spread"]["draws"] > 0
    info["p99_spread"]["rel_sd"] = {"all": 0.2, "task": 0.2}  # as at 0.85 of capacity in 20 s
    (pd_.model / layout.MODEL_INFO).write_text(json.dumps(info))
    strict = {**SPEC["validity"], "max_p99_ci_width": 0.25}
    c = next(c for c in check_point(pd_.path, None, strict).checks if c.name == "p99_ci")
    assert c.passed is False and c.value == pytest.approx(4 * 1.959964 * 0.2 / 2, rel=1e-4)
    assert "the model's draws of a window this size 0.784" in c.message and "order statistics give" in c.message
    # the analysis reports the same interval (summary.parquet, the plots' error bars)
    row = analyze(run).query("`class` == 'all'").iloc[0]
    assert row["p99_ci_rel_width"] == pytest.approx(0.784, rel=1e-3)
    info["p99_spread"]["rel_sd"] = {"all": 0.0001, "task": 0.0001}  # narrower: the order statistics stand
    (pd_.model / layout.MODEL_INFO).write_text(json.dumps(info))
    c = next(c for c in check_point(pd_.path, None, strict).checks if c.name == "p99_ci")
    assert c.passed is True and c.value == c.detail["task"]["rel_width_order_stats"]


def test_a_window_the_predictions_did_not_reach_is_extended_not_blamed_on_the_bound(tmp_path, monkeypatch):
    """Near saturation the width shrinks more slowly than one over the root of the
    window: after its last prediction the sizing takes the window the square-root rule
    asks for, and says measure_max_s is too short only when it is."""
    run = measured_run(tmp_path, fracs=(0.9,))
    rd = RunDir(run)
    manifest, spec = rd.read_manifest(), load_spec_dict(SPEC)
    point = rd.point("rain-f0.9-r1").read_point()
    k = float(point["dilation"])
    seen = []

    def spread(sp, pid):  # a width of 0.392 x (window / 4 s)^-1/4
        seconds = sp.measure_ns / 1e9 * k
        seen.append(seconds)
        return {"draws": 50, "rel_sd": {"all": 0.1 * (seconds / 4.0) ** -0.25}}

    monkeypatch.setattr(model_beside, "p99_spread", spread)
    seconds, why = model_beside.window_for(point, manifest, spec, 0.25, 100_000)
    assert len(seen) == model_beside.WINDOW_STEPS and seconds > seen[-1]
    assert "square-root rule" in why and "too short" not in why
    seconds, why = model_beside.window_for(point, manifest, spec, 0.25, 20)
    assert seconds == 20 and "measure_max_s (20 s) is too short" in why


def test_a_time_varying_point_is_modelled_at_its_own_phase_times_with_its_requests(tmp_path):
    """An emulated run stretches the phases (`emulated.phases_at_s`): the model starts
    each phase at the point's time / k, not at the spec's paper times, and replays the
    requests the clients drew across them."""
    phased = {
        **SPEC,
        "workload": {
            "classes": SPEC["workload"]["classes"],
            "phases": [{"at_s": 0, "capacity_fraction": 0.1}, {"at_s": 1, "capacity_fraction": 0.5}],
        },
        "load": {"capacity_fraction": [1.0]},
    }
    run = measured_run(tmp_path, fracs=(0.3,), spec=phased)
    pid = "rain-f0.3-r1"
    pfile = run / layout.POINTS / pid / layout.POINT
    pfile.write_text(json.dumps({**json.loads(pfile.read_text()), "phase_at_s": [0.0, 3.0]}))
    measure(run, pid, 50.0, n=4000)
    pd_ = RunDir(run).point(pid)
    _trace(pd_, 5000)
    info = model_beside.write(pd_, pd_.read_point(), RunDir(run).read_manifest())
    assert info.get("error") is None and info["replayed"] is True and info["requests"] == 5000
    model = json.loads((pd_.path / "model" / layout.POINT).read_text())
    assert model["phase_at_s"] == pytest.approx([0.0, 0.03])  # 3 s of testbed time at k = 100
    summary = json.loads((pd_.path / "model" / layout.CLIENTS / "client0" / layout.CLIENT_SUMMARY).read_text())
    assert [row[0] for row in summary["schedule"]] == pytest.approx([0.0, 0.03])


def test_the_servers_own_cost_per_request_is_the_models_worker_cost(tmp_path):
    """rpc-server's done line (server.json) gives its threads' busy time beyond the service
    asked; the model's worker thread spends it too, half on receipt and half on the answer,
    summed over a segmented point's segments."""
    run = measured_run(tmp_path, fracs=(0.3,))
    m = RunDir(run).read_manifest()
    pd_ = RunDir(run).point("rain-f0.3-r1")
    assert model_beside.server_cost(pd_) is None  # a Rain point: no rpc-server
    for seg, busy in ((1, 3_000_000_000), (2, 3_400_000_000)):
        w = pd_.path / layout.SEGMENTS / str(seg) / layout.WORKERS / "worker0"
        w.mkdir(parents=True)
        counts = {"served": 10_000, "busy_ns": busy, "asked_ns": 2_000_000_000, "connections": 20}
        (w / "server.json").write_text(json.dumps(counts))
    cost = model_beside.server_cost(pd_)
    assert cost == {"per_request_ns": 120_000.0, "served": 20_000, "busy_ns": 6_400_000_000}
    info = model_beside.write(pd_, pd_.read_point(), m)
    assert info["server_cost"] == cost
    assert info["network"]["worker_pkt_ns"] == round(120_000 / 2 / K)
    assert "the server's own cost, 120.0 us of testbed time per request" in info["network_from"]
