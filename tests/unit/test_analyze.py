"""Analysis: histograms read in rain-client's format, merged across hosts and
intervals, exact percentiles and counts in summary.parquet, paper-time conversion,
repetition aggregates, throughput under SLO, optional switch/agent inputs."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hdrh.histogram import HdrHistogram

from orchestrator.experiment.analyze import (
    EVENTS_COUNTER,
    aggregate,
    analyze,
    mean_quota,
    queue_depths,
    queuing_ratio,
    switch_queue_series,
    throughput_under_slo,
)
from orchestrator.experiment.histograms import DEFAULT, Hist, _tables, read_hlog
from orchestrator.experiment.layout import PointDir
from orchestrator.experiment.points import load_point

from .results_fixture import (
    counters,
    good_counters,
    hdr_from,
    make_point,
    make_summary,
    switch_queue_rows,
    synthetic_run,
    worker_sample_rows,
    write_point,
    write_sweep,
)

REPO = Path(__file__).resolve().parents[2]


# -- the histogram layer against hdrh ------------------------------------------------------


def test_layout_and_value_tables_match_hdrh():
    ref = HdrHistogram(1, 100_000_000_000, 3)
    assert DEFAULT.counts_len == ref.counts_len
    rng = np.random.default_rng(1)
    values = np.concatenate([np.arange(1, 5000), rng.integers(1, 100_000_000_000, 3000)])
    idx = DEFAULT.index_of(values)
    low, high, _ = _tables(DEFAULT)
    for v, i in zip(values[::7].tolist(), idx[::7].tolist()):
        assert i == ref._counts_index_for(v)
        assert low[i] == ref.get_lowest_equivalent_value(v)
        assert high[i] == ref.get_highest_equivalent_value(v)


def test_percentiles_equal_hdrh_and_survive_encoding():
    rng = np.random.default_rng(2)
    values = rng.lognormal(11, 1.2, 20_000).astype(np.int64) + 1
    ref = hdr_from(values)
    h = Hist.decode(ref.encode().decode())
    assert h.total == ref.get_total_count() == len(values)
    for p in (0, 1, 50, 90, 99, 99.9, 99.99, 100):
        assert h.percentile(p) == ref.get_value_at_percentile(p), p
    assert h.max() == ref.get_max_value()
    assert h.min() == ref.get_min_value()
    assert h.mean() == pytest.approx(ref.get_mean_value(), rel=1e-12)
    # round trip through our encoder (hdrh's) and the dense view
    again = Hist.decode(h.encode())
    assert np.array_equal(again.counts, h.counts)
    assert np.array_equal(Hist.from_values(values).counts, h.counts)


def test_merge_equals_hdrh_add():
    rng = np.random.default_rng(3)
    parts = [rng.exponential(1e5 * (i + 1), 3000).astype(np.int64) + 1 for i in range(4)]
    ref = hdr_from(parts[0])
    for p in parts[1:]:
        ref.add(hdr_from(p))
    merged = Hist.merge([Hist.from_values(p) for p in parts])
    acc = Hist.from_values(parts[0])
    for p in parts[1:]:
        acc.add(Hist.from_values(p))
    for h in (merged, acc):
        assert h.total == ref.get_total_count()
        for p in (50, 99, 99.9):
            assert h.percentile(p) == ref.get_value_at_percentile(p)


def test_rain_client_selftest_log_reads_back(tmp_path):
    """The real encoder (rain-client --selftest-hdr) against this reader, when built."""
    binary = REPO / "hosts/dpdk/build/rain-client"
    if not binary.exists():
        pytest.skip("rain-client is not built (make -C hosts/dpdk)")
    (tmp_path / "in.txt").write_text("a 1000 3\nb 123456 2\na 77\n---\na 5000000\nb 999999 5\n")
    r = subprocess.run(
        [str(binary), "--selftest-hdr", str(tmp_path / "in.txt"), str(tmp_path / "out.hlog")],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if r.returncode != 0:
        pytest.skip(f"rain-client --selftest-hdr cannot run here: {r.stderr.strip()[:200]}")
    expect = json.loads(r.stdout)
    log = read_hlog(tmp_path / "out.hlog")
    assert log.base_time == 1_700_000_000.0
    assert [(iv.tag, iv.start_s) for iv in log.intervals] == [("a", 0.0), ("b", 0.0), ("a", 1.0), ("b", 1.0)]
    for tag, e in expect.items():
        h = Hist.merge(iv.hist for iv in log.intervals if iv.tag == tag)
        assert h.total == e["total"]
        assert (h.min(), h.max()) == (e["min"], e["max"])
        for p in ("p0", "p50", "p90", "p99", "p99.9", "p100"):
            assert h.percentile(float(p[1:])) == e[p], (tag, p)
        assert h.mean() == pytest.approx(e["mean"], rel=1e-9)


# -- a point with known contents --------------------------------------------------------------


def _known_run(tmp_path: Path, k: float = 100.0) -> Path:
    """get: latencies 1..1000 ns (exact buckets below 2048) split over 2 hosts x 2
    intervals; scan: 100 x 1 ms. Slowdowns x1000: get 1001..2000, scan 2000."""
    run = tmp_path / "results" / "known" / "t1"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"experiment": "known"}))
    get = np.arange(1, 1001)
    hosts = {}
    for hi, host in enumerate(("client0", "client1")):
        lat, sd = [], []
        for iv in range(2):
            part = get[(hi * 2 + iv) * 250 : (hi * 2 + iv + 1) * 250]
            lat.append({"get": part, "scan": [1_000_000] * 25})
            sd.append({"get": part + 1000, "scan": [2000] * 25})
        cl = {
            "get": counters(
                offered=520,
                sent=510,
                sent_in_window=505,
                received=500,
                timed_out=7,
                lost=3,
                rejected=2,
                failed=1,
                late_sends=11,
                max_lag_ns=30_000 + hi * 5_000,
                scheduled_rps=260.0,
                achieved_rps=252.5,
                received_rps=250.0,
            ),
            "scan": counters(
                offered=50,
                sent=50,
                sent_in_window=50,
                received=50,
                scheduled_rps=25.0,
                achieved_rps=25.0,
                received_rps=25.0,
                max_lag_ns=1000,
            ),
        }
        hosts[host] = {
            "latency": lat,
            "slowdown": sd,
            "summary": make_summary(cl, offered_rps=285.0, achieved_rps=277.5, dilation=k),
        }
    point = make_point("rain-k57-r1", load_krps=57.0, k=k)
    write_point(run, point, hosts)
    return run


def test_known_point_exact_percentiles_and_counts(tmp_path):
    run = _known_run(tmp_path)
    df = analyze(run)
    assert (run / "summary.parquet").exists() and (run / "timeseries.parquet").exists()
    back = pd.read_parquet(run / "summary.parquet")
    assert len(back) == 3 and set(back["class"]) == {"get", "scan", "all"}
    row = back.set_index("class")
    g, s, a = row.loc["get"], row.loc["scan"], row.loc["all"]
    # merged over 2 hosts x 2 intervals: exactly the values 1..1000
    assert g["samples"] == 1000
    assert (g["p50_us"], g["p99_us"], g["p999_us"]) == (0.5, 0.99, 0.999)
    assert g["max_us"] == 1.0
    assert g["mean_us"] == pytest.approx(0.5005)
    one_ms = HdrHistogram(1, 100_000_000_000, 3).get_highest_equivalent_value(1_000_000)
    assert s["samples"] == 100 and s["p50_us"] == one_ms / 1000.0
    assert a["samples"] == 1100
    assert a["p50_us"] == 0.55  # rank 550 of 1..1000 then 100 x 1 ms
    assert a["p99_us"] == one_ms / 1000.0  # rank 1089 > 1000
    # slowdown x1000 -> ratio
    assert (g["p50_slowdown"], g["p99_slowdown"]) == (1.5, 1.99)
    assert s["p99_slowdown"] == 2.0
    # counters summed over hosts; max lag is the largest
    assert (
        g["offered"],
        g["sent"],
        g["received"],
        g["timed_out"],
        g["lost"],
        g["rejected"],
        g["failed"],
        g["late_sends"],
    ) == (1040, 1020, 1000, 14, 6, 4, 2, 22)
    assert g["max_lag_us"] == 35.0
    assert a["received"] == 1100 and a["max_lag_us"] == 35.0
    assert g["late_fraction"] == pytest.approx(22 / 1020)
    assert a["hosts"] == 2
    # the CI of the p99 from order statistics brackets it
    assert g["p99_ci_lo_us"] <= g["p99_us"] <= g["p99_ci_hi_us"]
    assert df["point_id"].unique().tolist() == ["rain-k57-r1"]


def test_intervals_merge_across_hosts_by_start(tmp_path):
    run = _known_run(tmp_path)
    analyze(run)
    ts = pd.read_parquet(run / "timeseries.parquet")
    get = ts[ts["class"] == "get"].sort_values("t_s")
    assert get["t_s"].tolist() == [0.0, 1.0]
    # interval 0 = host0's 1..250 + host1's 501..750
    first = get.iloc[0]
    assert first["samples"] == 500
    assert first["p50_us"] == 0.25 and first["p99_us"] == 0.745
    assert first["t_s_paper"] == 0.0 and get.iloc[1]["t_s_paper"] == pytest.approx(0.01)
    allc = ts[ts["class"] == "all"].sort_values("t_s")
    assert allc["samples"].tolist() == [550, 550]
    # the merged whole window equals the sum of the intervals
    data = load_point(run / "points" / "rain-k57-r1")
    cube = data.latency_cube
    for tag in ("get", "scan"):
        total = Hist.merge(cube.interval_hists()[tag])
        assert np.array_equal(total.counts, data.latency[tag].counts)


def test_paper_time_and_load_conversion(tmp_path):
    for k in (100.0, 1.0):
        run = _known_run(tmp_path / f"k{k:g}", k=k)
        df = analyze(run).set_index("class")
        for cls in ("get", "all"):
            r = df.loc[cls]
            assert r["dilation"] == k
            for col in ("p50", "p99", "p999", "mean", "max", "p99_ci_lo", "p99_ci_hi"):
                assert r[f"{col}_us_paper"] == pytest.approx(r[f"{col}_us"] / k)
            for col in ("offered", "achieved", "received"):
                assert r[f"{col}_krps"] == pytest.approx(r[f"{col}_rps"] * k / 1000.0)
        # 'all' offered is the plan's rate (testbed), achieved the clients' sum
        assert df.loc["all", "offered_rps"] == pytest.approx(57.0 * 1000 / k)
        assert df.loc["all", "achieved_rps"] == pytest.approx(555.0)
        assert df.loc["get", "achieved_rps"] == pytest.approx(505.0)
        assert df.loc["all", "load_krps"] == 57.0


def test_repetition_aggregates(tmp_path):
    run = tmp_path / "results" / "reps" / "t"
    run.mkdir(parents=True)
    for rep, base in ((1, 1000), (2, 1500), (3, 1200)):
        lat = [{"task": np.full(200, base)}]
        write_point(
            run,
            make_point(f"rain-k10-r{rep}", load_krps=10.0, rep=rep, index=rep, k=1.0),
            {
                "c0": {
                    "latency": lat,
                    "slowdown": [{"task": np.full(200, 2000)}],
                    "summary": make_summary({"task": good_counters(200)}, offered_rps=10_000, achieved_rps=10_000),
                }
            },
        )
    df = analyze(run)
    a = df[df["class"] == "all"]
    assert len(a) == 3
    assert (a["reps"] == 3).all()
    assert a["p99_us_paper_min"].iloc[0] == pytest.approx(1.0)
    assert a["p99_us_paper_max"].iloc[0] == pytest.approx(1.5)
    assert a["p99_us_paper_mean"].iloc[0] == pytest.approx((1.0 + 1.5 + 1.2) / 3)
    assert a["p99_slowdown_mean"].iloc[0] == pytest.approx(2.0)
    agg = aggregate(df)
    assert len(agg) == 2  # task, all
    assert agg.set_index("class").loc["all", "reps"] == 3


# -- throughput under SLO ---------------------------------------------------------------------


def _frame(points: list[tuple[str, float, float, float, bool]]):
    """(curve, load_krps, p99_us_paper, p99_slowdown, valid) -> a summary-like frame."""
    rows = []
    for i, (curve, load, p99, sd, valid) in enumerate(points):
        rows.append(
            {
                "curve": curve,
                "system": curve,
                "class": "all",
                "load_krps": load,
                "point_id": f"p{i}",
                "offered_krps": load,
                "achieved_krps": load * 0.98,
                "p50_us_paper": p99 / 3,
                "p99_us_paper": p99,
                "p999_us_paper": p99 * 2,
                "p99_slowdown": sd,
                "valid": valid,
                "samples": 10_000,
            }
        )
    return pd.DataFrame(rows)


def test_throughput_under_slo_stops_at_first_violation():
    df = _frame(
        [
            ("rain", 1000, 20, 2.0, True),
            ("rain", 2000, 40, 5.0, True),
            ("rain", 3000, 90, 12.0, True),
            ("rain", 3500, 60, 8.0, True),  # a noisy recovery past the knee: not credited
            ("pallas", 1000, 30, 4.0, True),
            ("pallas", 2000, 50, 9.0, False),  # invalid: does not count
            ("pallas", 3000, 50, 9.5, True),
            ("r2p2", 1000, 200, 30.0, True),  # fails at the lowest load
        ]
    )
    t = throughput_under_slo(df, {"p99_slowdown": 10}).set_index("curve")
    assert t.loc["rain", "throughput_krps"] == pytest.approx(2000 * 0.98)
    assert t.loc["rain", "load_krps"] == 2000
    assert t.loc["rain", "first_violation_krps"] == pytest.approx(3000 * 0.98)
    assert t.loc["pallas", "throughput_krps"] == pytest.approx(980)
    assert math.isnan(t.loc["r2p2", "throughput_krps"])
    # why each walk ended: a breach, an invalid point (nothing known past it), or a breach at once
    assert list(t.loc[["rain", "pallas", "r2p2"], "stopped_by"]) == ["slo", "invalid", "slo"]
    assert throughput_under_slo(df, {"p99_slowdown": 100}).set_index("curve").loc["rain", "stopped_by"] == ""
    # a latency SLO (paper us), and both together
    t = throughput_under_slo(df, {"p99_us": 45}).set_index("curve")
    assert t.loc["rain", "load_krps"] == 2000 and t.loc["pallas", "load_krps"] == 1000
    t = throughput_under_slo(df, {"p99_us": 100, "p99_slowdown": 4.5}).set_index("curve")
    assert t.loc["rain", "load_krps"] == 1000
    # a bare number is a slowdown; loads can be the nominal ones
    t = throughput_under_slo(df, 10, load="load_krps").set_index("curve")
    assert t.loc["rain", "throughput_krps"] == 2000


def test_throughput_under_slo_averages_repetitions():
    df = _frame(
        [
            ("rain", 1000, 20, 9.0, True),
            ("rain", 1000, 20, 11.5, True),  # mean 10.25 > 10
            ("rain", 500, 10, 3.0, True),
            ("rain", 500, 10, 5.0, True),
        ]
    )
    t = throughput_under_slo(df, {"p99_slowdown": 10}).set_index("curve")
    assert t.loc["rain", "load_krps"] == 500
    with pytest.raises(ValueError):
        throughput_under_slo(df, {})


def test_throughput_under_slo_on_a_run(tmp_path):
    run = synthetic_run(tmp_path, with_optional=False)
    t = throughput_under_slo(analyze(run), {"p99_slowdown": 10}).set_index("curve")
    assert t.loc["rain", "load_krps"] == 2000
    assert t.loc["pallas", "load_krps"] == 1000


# -- broken and optional inputs ------------------------------------------------------------------


def test_missing_and_corrupt_files_mark_the_point(tmp_path):
    run = tmp_path / "results" / "broken" / "t"
    write_point(run, make_point("rain-k1-r1", load_krps=1.0, index=0), {})
    d = write_point(
        run,
        make_point("rain-k2-r1", load_krps=2.0, index=1),
        {"c0": {"latency": [{"task": [1000] * 10}], "slowdown": None, "summary": None}},
    )
    (d / "clients" / "c0" / "latency.hlog").write_text("Tag=task,0.000,1.000,0.001,NOTBASE64\n")
    df = analyze(run).set_index("point_id")
    for pid in ("rain-k1-r1", "rain-k2-r1"):
        r = df.loc[pid]
        assert not r["valid"]
        assert "complete" in r["failed_checks"].split(",")
        assert math.isnan(r["p99_us"])
    v = json.loads((d / "validity.json").read_text())
    msg = next(c["message"] for c in v["checks"] if c["name"] == "complete")
    assert "unreadable clients/c0/latency.hlog" in msg and "missing summary.json" in msg


def test_the_queuing_ratio_comes_from_the_controllers_snapshot(tmp_path):
    """The shape switch/control/controller.py's snapshot() writes: events by EV_ name."""
    from switch.control.events import Events

    assert EVENTS_COUNTER == Events.COUNTER
    snap = {
        "counters": {
            EVENTS_COUNTER: {
                "EV_TASK_IN": {"packets": 10, "bytes": 640},
                "EV_DISPATCH_DIRECT": {"packets": 3, "bytes": 0},
                "EV_DISPATCH_QUEUED": {"packets": 1, "bytes": 0},
            }
        }
    }
    assert queuing_ratio(snap) == 0.25
    assert math.isnan(queuing_ratio({"counters": {EVENTS_COUNTER: {}}})) and math.isnan(queuing_ratio(None))
    d = write_point(tmp_path, make_point("rain-k1-r1"), {})
    pd_ = PointDir(d)
    pd_.write_snapshot(snap)
    assert queuing_ratio(pd_.read_snapshot()) == 0.25


def test_queue_depths_of_the_measurement_window(tmp_path):
    """Switch queue samples (time 0 = the load's start) and the worker agent's samples
    (its own clock; the load starts when its tokens are enabled) are cut to the window
    after the warm-up; tokens waiting in the switch are not tasks."""
    d = PointDir(write_point(tmp_path, make_point("rain-k1-r1", warmup_s=0.5, measure_s=1.0), {}))
    d.switch_queue.parent.mkdir()
    # 0.0..2.0 s every 0.1 s: tokens (positive) in the warm-up, then 2, 4, 6 tasks, then 50 after the window
    bal = [3] * 5 + [-2, -4, -6] * 3 + [-6] * 3 + [-50] * 5
    d.switch_queue.write_text(switch_queue_rows(bal, period_s=0.1))
    assert switch_queue_series(d)[:6] == [(0.0, 0, 3), (0.1, 0, 3), (0.2, 0, 3), (0.3, 0, 3), (0.4, 0, 3), (0.5, 2, 0)]
    wd = d.worker("worker0")
    wd.mkdir(parents=True)
    # tokens on at sample 4 (t = 0.5 s on the agent's clock): the window is 1.0..2.0 s
    fifos = [[9, 9]] * 9 + [[1, 3]] * 11 + [[9, 9]] * 5
    (wd / "timeseries.jsonl").write_text(worker_sample_rows(fifos, period_s=0.1, on_at=4))
    q = queue_depths(d, json.loads(d.point_file.read_text()))
    window = [-b for b in bal[5:16]]  # t = 0.5 .. 1.5
    assert q["switch_queue_mean"] == pytest.approx(sum(window) / len(window))
    assert q["switch_queue_max"] == 6.0
    assert q["worker_queue_mean"] == pytest.approx(2.0) and q["worker_queue_max"] == 3.0
    empty = PointDir(write_point(tmp_path, make_point("rain-k2-r1"), {}))
    assert all(math.isnan(v) for v in queue_depths(empty, {}).values())


def test_quota_from_the_agents_decisions_else_its_samples(tmp_path):
    d = PointDir(write_point(tmp_path, make_point("rain-k1-r1"), {}))
    wd = d.worker("w0")
    wd.mkdir(parents=True)
    assert math.isnan(mean_quota(d))
    (wd / "timeseries.jsonl").write_text(worker_sample_rows([[0, 0]] * 4, period_s=0.1, on_at=0, quota=2))
    assert mean_quota(d) == 2.0  # no decisions (not adaptive): the quota each sample saw
    (wd / "decisions.jsonl").write_text(
        json.dumps({"t": 1.0, "changes": [], "quotas": [4, 6]}) + "\n" + '{"t": 2.0, "quotas": [1, 1]}\nnot json\n'
    )
    assert mean_quota(d) == 3.0


def test_the_runs_queue_depths_reach_the_summary(tmp_path):
    run = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0, 3000.0), reps=1, n=4000)
    df = analyze(run)
    a = df[df["class"] == "all"].set_index("load_krps")
    # the fixture's switch queue: 1 task per 1000 kRPS in half the samples of the window
    assert a.loc[1000.0, "switch_queue_max"] == 1 and a.loc[3000.0, "switch_queue_max"] == 3
    assert a.loc[3000.0, "switch_queue_mean"] > a.loc[1000.0, "switch_queue_mean"] > 0
    assert a.loc[1000.0, "mean_quota"] == 2 and a.loc[3000.0, "mean_quota"] == 4
    assert (a["status"] == "done").all()


def test_the_points_status_comes_from_sweep_json(tmp_path):
    """point.json is the plan's Point; whether the sweep finished the point is in
    sweep.json. A folder left by an interrupted attempt (todo again) is not complete."""
    run = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0, 2000.0), reps=1, n=4000, with_optional=False)
    write_sweep(
        run, {"rain-k1000-r1": {"status": "done"}, "rain-k2000-r1": {"status": "todo", "reason": "interrupted"}}
    )
    df = analyze(run, recheck=True)
    a = df[df["class"] == "all"].set_index("point_id")
    assert a.loc["rain-k1000-r1", "valid"] and a.loc["rain-k1000-r1", "status"] == "done"
    assert not a.loc["rain-k2000-r1", "valid"] and a.loc["rain-k2000-r1", "failed_checks"] == "complete"
    v = PointDir(run / "points" / "rain-k2000-r1").read_verdict()
    assert "the point's status is 'todo'" in next(c["message"] for c in v["checks"] if c["name"] == "complete")


def test_a_recheck_writes_its_verdicts_into_sweep_json(tmp_path):
    """`analyze --recheck` judges the points again: a done point's `valid` and `reason`
    in sweep.json follow, so the sweep and the report agree; a point not done keeps its
    own reason."""
    run = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0, 2000.0), reps=1, n=4000, with_optional=False)
    stale = {"status": "done", "valid": False, "reason": "validity: independence: an older check"}
    write_sweep(run, {"rain-k1000-r1": stale, "rain-k2000-r1": {"status": "todo", "reason": "interrupted"}})
    analyze(run)  # without --recheck the runner's verdicts stand, and so does sweep.json
    assert json.loads((run / "sweep.json").read_text())["points"]["rain-k1000-r1"]["valid"] is False
    analyze(run, recheck=True)
    pts = json.loads((run / "sweep.json").read_text())["points"]
    assert pts["rain-k1000-r1"]["valid"] is True and pts["rain-k1000-r1"]["reason"] is None
    assert pts["rain-k2000-r1"]["status"] == "todo" and pts["rain-k2000-r1"]["reason"] == "interrupted"
