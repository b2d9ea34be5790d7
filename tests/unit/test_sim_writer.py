"""The simulated testbed's writer: a SimResult built by hand here (the fields of
orchestrator/simulate/engine.py's SimResult, nothing else) becomes a point folder that
the analysis reads as a measured one, with exactly the counts and quantiles of the
requests it holds."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from orchestrator.experiment import layout
from orchestrator.experiment.analyze import analyze
from orchestrator.experiment.histograms import Hist
from orchestrator.experiment.layout import RunDir
from orchestrator.experiment.points import load_point
from orchestrator.experiment.validity import check_point
from orchestrator.simulate import writer

WARMUP, MEASURE, IV = 100_000_000, 200_000_000, 10_000_000  # ns: 0.1 s warm-up, 0.2 s window, 10 ms intervals


def sim_result(n: int = 60_000, seed: int = 3) -> NS:
    """Two classes, Poisson-ish sends over warm-up + window (and a little after), a
    few rejected, timed out and never sent; two worker hosts of two threads."""
    rng = np.random.default_rng(seed)
    svc = NS(kind="exp", a_ns=10_000, b_ns=0, p_a=1.0, keys=0.0)
    classes = (
        NS(
            name="get",
            weight=3.0,
            task_type=0,
            slice=0,
            service=svc,
            payload_bytes=8,
            large_fraction=0.2,
            large_bytes=64,
        ),
        NS(
            name="scan",
            weight=1.0,
            task_type=1,
            slice=0,
            service=svc,
            payload_bytes=8,
            large_fraction=0.2,
            large_bytes=64,
        ),
    )
    sp = NS(
        point_id="rain-f0.5-r1",
        policy="rain",
        worker_hosts=2,
        threads_per_host=2,
        classes=classes,
        arrival="poisson",
        phases=(NS(at_ns=0, rate_rps=n / 0.3, classes=(0, 1)),),
        warmup_ns=WARMUP,
        measure_ns=MEASURE,
        timeout_ns=200_000_000,
        max_outstanding=100,
        seed=1234,
        adaptive=None,
        interval_ns=IV,
        policy_params={},
    )
    intended = np.sort(rng.integers(0, WARMUP + MEASURE, n)).astype(np.int64)
    cls = (rng.random(n) < 0.25).astype(np.uint8)
    outcome = np.zeros(n, dtype=np.uint8)
    outcome[rng.choice(n, 30, replace=False)] = 1
    outcome[rng.choice(n, 20, replace=False)] = 2
    outcome[rng.choice(n, 10, replace=False)] = 3
    service = rng.integers(1_000, 50_000, n).astype(np.int64)
    latency = np.where(outcome == 0, service + rng.integers(500, 80_000, n), -1).astype(np.int64)
    series = [
        (
            t / 1000.0,
            [
                dict(fifo=(t + w) % 3, outstanding=2, done=t, busy_ns=t * 1000, quota=2, slice=0, enabled=True)
                for w in range(4)
            ],
        )
        for t in range(0, 300, 6)
    ]
    queue = [(t / 1000.0, {0: (-2 if t % 12 else 3)}) for t in range(0, 300, 6)]
    return NS(
        point=sp,
        intended_ns=intended,
        cls=cls,
        outcome=outcome,
        latency_ns=latency,
        service_ns=service,
        large=rng.random(n) < 0.2,
        worker=rng.integers(0, 4, n).astype(np.int16),
        counters={"EV_DISPATCH_DIRECT": 700, "EV_DISPATCH_QUEUED": 300, "EV_REJECT": 30, "prewrites": 5},
        switch_queue=queue,
        worker_series=series,
        decisions=[],
        end_ns=WARMUP + MEASURE + 1_000_000,
        events=123_456,
        wall_s=0.5,
    )


def point_dict(r: NS) -> dict:
    sp = r.point
    return {
        "id": sp.point_id,
        "index": 0,
        "system": "rain",
        "variant": None,
        "variant_label": None,
        "repetition": 1,
        "load_krps": 200.0,
        "capacity_fraction": 0.5,
        "offered_rps": sp.phases[0].rate_rps,
        "dilation": 1,
        "warmup_s": WARMUP / 1e9,
        "measure_s": MEASURE / 1e9,
        "handler": "spin",
        "worker_threads": 4,
        "params": {"initial_quota": 2},
    }


def run_folder(tmp_path, r: NS):
    run = tmp_path / "results" / "demo" / "20260101-000000"
    run.mkdir(parents=True)
    spec = {
        "name": "demo",
        "systems": ["rain"],
        "workload": {"classes": [{"name": "get", "service": {"dist": "exponential", "mean_us": 10}}]},
        "load": {"capacity_fraction": [0.5]},
        "validity": {"min_samples_p99": 1000, "max_p99_ci_width": 0.5},
    }
    (run / "manifest.json").write_text(
        json.dumps({"experiment": "demo", "spec": spec, "testbed": {"kind": "simulated"}})
    )
    pid = r.point.point_id
    (run / "sweep.json").write_text(json.dumps({"points": {pid: {"status": "done", "digest": "0" * 16}}}))
    pd = RunDir(run).point(pid)
    point = writer.write(pd, writer.render(r, point_dict(r)))  # as the runner does: write, then judge
    verdict = check_point(pd.path, point | {"status": "done"}, {"max_p99_ci_width": 0.5})
    return run, verdict


def test_the_point_folder_holds_exactly_the_requests_of_the_window(tmp_path):
    r = sim_result()
    run, verdict = run_folder(tmp_path, r)
    pd = RunDir(run).point(r.point.point_id)
    names = writer.point_files(pd.path)
    # the files a measured point has, under the names layout.py gives them
    assert set(names) == {
        layout.POINT,
        layout.TIMING,
        layout.VALIDITY,
        f"{layout.SWITCH}/{layout.SNAPSHOT}",
        f"{layout.SWITCH}/{layout.SWITCH_QUEUE}",
        *(
            f"{layout.CLIENTS}/client0/{f}"
            for f in (layout.LATENCY_HLOG, layout.SLOWDOWN_HLOG, layout.CLIENT_SUMMARY, layout.AGENT_OUTCOME)
        ),
        *(f"{layout.WORKERS}/worker{h}/{f}" for h in (0, 1) for f in (layout.WORKER_SAMPLES, layout.AGENT_OUTCOME)),
    }
    win = (r.intended_ns >= WARMUP) & (r.intended_ns < WARMUP + MEASURE)
    ok = win & (r.outcome == 0)
    data = load_point(pd)
    assert data.problems == []
    for c, name in enumerate(("get", "scan")):
        lat = r.latency_ns[ok & (r.cls == c)]
        assert data.latency[name].total == lat.size
        # the same quantile HdrHistogram gives for the raw values
        assert data.latency[name].percentile(99.0) == Hist.from_values(lat).percentile(99.0)
        sd = (lat * 1000.0 / r.service_ns[ok & (r.cls == c)]).astype(np.int64)
        assert data.slowdown[name].percentile(99.0) == Hist.from_values(sd).percentile(99.0)
        k = data.counters(name)
        assert k["offered"] == (win & (r.cls == c)).sum()
        assert k["received"] == lat.size
        assert k["rejected"] == (win & (r.cls == c) & (r.outcome == 1)).sum()
        assert k["timed_out"] == (win & (r.cls == c) & (r.outcome == 2)).sum()
        assert k["not_sent"] == (win & (r.cls == c) & (r.outcome == 3)).sum()
    # one histogram per class and 10 ms interval of the window; a request in the
    # interval of its intended send time
    cube = data.latency_cube
    assert cube.starts == [round(i * 0.01, 3) for i in range(20)]
    third = ok & (r.cls == 0) & (r.intended_ns >= WARMUP + 3 * IV) & (r.intended_ns < WARMUP + 4 * IV)
    assert cube.interval("get", 0.03).total == third.sum()
    s = json.loads((pd.client("client0") / layout.CLIENT_SUMMARY).read_text())
    assert s["tool"] == "rainmaker simulate" and s["dilation"] == 1 and s["seed"] == 1234 and s["partial"] is False
    names = [c.name for c in r.point.classes]
    assert s["schedule"] == [[0.0, round(r.point.phases[0].rate_rps, 6), names]]
    assert verdict.valid, verdict.to_dict()


def test_analysis_reads_a_simulated_point_as_a_measured_one(tmp_path):
    r = sim_result()
    run, _ = run_folder(tmp_path, r)
    df = analyze(run)
    row = df[df["class"] == "all"].iloc[0]
    assert bool(row["valid"])
    assert row["dilation"] == 1 and row["p99_us"] == row["p99_us_paper"]
    assert row["queuing_ratio"] == pytest.approx(0.3)
    # the queue samples of the window (0.1 .. 0.3 s): tasks waiting at 2 of 3 samples
    assert 0 < row["switch_queue_mean"] <= 2 and row["switch_queue_max"] == 2
    # fifo of workers 0..3: 0, 1, 2, 0 in every sample
    assert row["worker_queue_mean"] == pytest.approx(0.75) and row["mean_quota"] == 2
    ts = __import__("pandas").read_parquet(RunDir(run).timeseries)
    assert sorted(ts[ts["class"] == "all"]["t_s"].round(3)) == [round(i * 0.01, 3) for i in range(20)]


def test_the_testbed_checks_do_not_run_on_a_simulated_point_and_say_why(tmp_path):
    r = sim_result()
    run, verdict = run_folder(tmp_path, r)
    checks = {c.name: c for c in verdict.checks}
    testbed_only = ("interarrival", "independence", "stationarity", "tasks_intact", "links_up", "model_agreement")
    for name in testbed_only:
        assert checks[name].passed is None
        assert "simulated testbed" in checks[name].message
    assert "poisson process" in checks["interarrival"].message
    assert all(c.passed for n, c in checks.items() if n not in testbed_only)
    # a measured point's summary (rain-client) keeps the testbed's checks: no trace is
    # 'not run' for want of a trace, not for being simulated
    pd = RunDir(run).point(r.point.point_id)
    p = pd.client("client0") / layout.CLIENT_SUMMARY
    p.write_text(p.read_text().replace('"rainmaker simulate"', '"rain-client"'))
    v = check_point(pd.path, point_dict(r) | {"status": "done"}, None, write=False)
    assert "trace" in v.check("interarrival").message and "simulated" not in v.check("links_up").message


def test_the_same_result_renders_the_same_bytes():
    a = writer.render(sim_result(seed=5), point_dict(sim_result(seed=5)))
    b = writer.render(sim_result(seed=5), point_dict(sim_result(seed=5)))
    assert a.keys() == b.keys()
    assert all(a[k] == b[k] for k in a if k != layout.TIMING)
    t = json.loads(a[layout.TIMING])
    assert t["events"] == 123_456 and t["seed"] == 1234 and not math.isnan(t["p99_us"])
