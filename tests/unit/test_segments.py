"""A long point measured in segments (orchestrator/experiment/segments.py): how the
window is cut, how the segments' client files merge into one window, and how the
point is checked: the window's checks on the merged window, the workers' and the
switch's checks in every segment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.experiment import segments
from orchestrator.experiment.analyze import queue_depths, queuing_ratio
from orchestrator.experiment.layout import PointDir, RunDir
from orchestrator.experiment.points import load_point
from orchestrator.experiment.validity import WINDOW_CHECKS, check_point
from tests.unit.results_fixture import (
    counters,
    make_point,
    make_summary,
    switch_queue_rows,
    write_client_hlog,
)


@pytest.mark.parametrize(
    ("measure", "segment", "expected"),
    [
        (20.0, None, [20.0]),
        (20.0, 30.0, [20.0]),
        (30.0, 30.0, [30.0]),
        (60.0, 30.0, [30.0, 30.0]),
        (61.0, 30.0, [20.333, 20.333, 20.334]),
    ],
)
def test_a_window_is_cut_into_the_fewest_equal_segments(measure, segment, expected):
    got = segments.lengths(measure, segment)
    assert got == expected
    assert sum(got) == pytest.approx(measure)
    assert all(s <= (segment or measure) for s in got)


def _segment(pd_: PointDir, i: int, *, values: list[list[int]], lag_ns: int, warmup_s: float = 0.5) -> PointDir:
    """Segment i of a point: one client host, len(values) one-second intervals of the
    window, each request's latency in values; trace rows for the warm-up and window."""
    seg = segments.segment_dir(pd_, i)
    hd = seg.client("client0")
    hd.mkdir(parents=True)
    n = sum(len(v) for v in values)
    measure = float(len(values))
    seg.write_point(make_point("rain-f0.8-r1", warmup_s=warmup_s, measure_s=measure, k=1000.0) | {"segment": i})
    start = 1_700_000_000.0 + 100 * i
    write_client_hlog(hd / "latency.hlog", [{"task": v} for v in values], start_unix_s=start, max_ratio=1e6)
    write_client_hlog(
        hd / "slowdown.hlog", [{"task": [x // 10 for x in v]} for v in values], start_unix_s=start, max_ratio=1e3
    )
    c = counters(
        offered=n,
        sent=n + 5,
        sent_in_window=n,
        received=n,
        late_sends=i,
        max_lag_ns=lag_ns,
        mean_service_ns=10_000.0 * i,
        scheduled_rps=n / measure,
        achieved_rps=n / measure,
        received_rps=n / measure,
    )
    s = make_summary({"task": c}, duration_s=measure, warmup_s=warmup_s, offered_rps=n / measure)
    s["run"] = {"tx_frames": 10 * i, "max_outstanding_seen": 3 * i, "trace_dropped": 0}
    (hd / "summary.json").write_text(json.dumps(s))
    # the trace: 5 warm-up sends, then the window's, 1 ms apart
    t = np.concatenate([np.arange(5) * 0.1e9, warmup_s * 1e9 + np.arange(n) * (measure * 1e9 / n)])
    rows = ["lcore,client_id,request_id,class,intended_ns,sent_ns,service_ns,latency_ns"]
    rows += [f"0,0,{j},task,{x:.0f},{x + 1000:.0f},10000,20000" for j, x in enumerate(t)]
    (hd / "trace.csv").write_text("\n".join(rows) + "\n")
    (seg.path / "switch").mkdir()
    seg.switch_queue.write_text(switch_queue_rows([-1, -2, -3, -4] * int(measure + 1), period_s=0.25))
    seg.write_snapshot(
        {
            "counters": {
                "pipe.SwitchIngress.events.events": {
                    "EV_DISPATCH_QUEUED": {"packets": i},
                    "EV_DISPATCH_DIRECT": {"packets": 10 - i},
                }
            }
        }
    )
    return seg


@pytest.fixture
def two_segments(tmp_path) -> PointDir:
    pd_ = RunDir(tmp_path).point("rain-f0.8-r1")
    pd_.path.mkdir(parents=True)
    pd_.write_point(make_point("rain-f0.8-r1", warmup_s=0.5, measure_s=5.0, k=1000.0) | {"segments": [2.0, 3.0]})
    _segment(pd_, 1, values=[[1000] * 300, [2000] * 300], lag_ns=3_000_000)
    _segment(pd_, 2, values=[[3000] * 300, [4000] * 300, [5000] * 300], lag_ns=7_000_000)
    return pd_


def test_the_segments_merge_into_one_window_on_one_time_line(two_segments):
    pd_ = two_segments
    assert segments.parts(pd_) == [segments.segment_dir(pd_, 1), segments.segment_dir(pd_, 2)]
    assert segments.merge(pd_) == []
    data = load_point(pd_)
    assert data.problems == []
    whole = data.latency["all"]
    assert whole.total == 1500 and whole.percentile(50) == pytest.approx(3000, rel=1e-3)
    # the second segment's intervals follow the first's
    assert data.latency_cube.starts == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert data.latency_cube.interval("task", 2.0).percentile(50) == pytest.approx(3000, rel=1e-3)
    s = json.loads((pd_.client("client0") / "summary.json").read_text())
    assert s["duration_s"] == 5.0
    tot = s["totals"]
    assert tot["offered"] == 1500 and tot["sent"] == 1510 and tot["late_sends"] == 3
    assert tot["max_lag_ns"] == 7_000_000  # the largest, not the sum
    assert tot["achieved_rps"] == pytest.approx(300.0) and s["achieved_rps"] == pytest.approx(300.0)
    # a mean weighted by the requests offered: 600 at 10 us, 900 at 20 us
    assert s["classes"]["task"]["mean_service_ns"] == pytest.approx((600 * 10_000 + 900 * 20_000) / 1500)
    assert s["run"]["tx_frames"] == 30 and s["run"]["max_outstanding_seen"] == 6
    assert [x["measure_s"] for x in s["segments"]] == [2.0, 3.0]
    assert "latency_ns" not in s["classes"]["task"]  # no quantile of a part passes for the whole's


def test_the_merged_trace_keeps_the_first_warm_up_and_moves_each_later_window(two_segments):
    segments.merge(two_segments)
    t = pd.read_csv(two_segments.client("client0") / "trace.csv")
    assert len(t) == 5 + 600 + 900  # the second segment's warm-up sends are left out
    assert t["request_id"].is_unique
    window = t[t["intended_ns"] >= 0.5e9]
    assert window["intended_ns"].min() == pytest.approx(0.5e9)
    assert window["intended_ns"].max() < 5.5e9  # warm-up + the whole window
    second = t.iloc[5 + 600 :]
    assert second["intended_ns"].min() == pytest.approx(2.5e9)  # right after the first window
    assert (second["sent_ns"] - second["intended_ns"] == 1000).all()


def test_the_switch_queue_and_its_ratio_come_from_every_segment(two_segments):
    segments.merge(two_segments)
    rows = [json.loads(x) for x in two_segments.switch_queue.read_text().splitlines()]
    times = [r["t_s"] for r in rows]
    assert times == sorted(times) and max(times) > 5.0  # the second segment's window after the first's
    snaps = [p.read_snapshot() for p in segments.parts(two_segments)]
    assert queuing_ratio(*snaps) == pytest.approx(3 / 20)
    depths = queue_depths(two_segments, two_segments.read_point())
    assert depths["switch_queue_max"] == 4


def test_a_segment_is_checked_without_the_windows_checks(two_segments):
    seg = segments.segment_dir(two_segments, 2)
    v = check_point(seg.path, None, {"max_lag_us": 10}, segment=True)
    for name in WINDOW_CHECKS:
        assert v.check(name).passed is None and "segment" in v.check(name).message
    assert v.check("schedule_lag").passed is True


def test_the_point_is_checked_on_its_merged_window(two_segments):
    segments.merge(two_segments)
    v = check_point(two_segments.path, None, {"max_lag_us": 10, "min_samples_p99": 1000})
    assert v.check("samples_p99").passed is True  # 1,500 together; neither segment alone has 1,000
    assert v.check("schedule_lag").value == pytest.approx(7.0)  # us of paper time, k = 1000


def _stats(bad: int) -> dict:
    return {"drops": {"roce_icrc": 0}, "workers": [{"desc_mismatch": bad}]}


def test_a_workers_check_passes_only_when_it_passes_in_every_segment(two_segments):
    for i, bad in ((1, 0), (2, 4)):
        d = segments.segment_dir(two_segments, i).worker("worker0")
        d.mkdir(parents=True)
        (d / "stats.json").write_text(json.dumps(_stats(bad)))
    segments.merge(two_segments)
    v = check_point(two_segments.path, None)
    c = v.check("tasks_intact")
    assert c.passed is False and c.message.startswith("segment 2:")
    (segments.segment_dir(two_segments, 2).worker("worker0") / "stats.json").write_text(json.dumps(_stats(0)))
    c = check_point(two_segments.path, None).check("tasks_intact")
    assert c.passed is True and c.message.startswith("in each of 2 segments")


def test_a_client_missing_from_a_segment_is_reported_not_merged(two_segments):
    import shutil

    shutil.rmtree(segments.segment_dir(two_segments, 2).client("client0"))
    problems = segments.merge(two_segments)
    assert problems == ["client client0 has no results in segment(s) 1"] or "client0" in problems[0]
    assert not (two_segments.client("client0") / "latency.hlog").exists()


def test_a_point_measured_whole_is_its_own_only_part(tmp_path):
    pd_ = PointDir(Path(tmp_path) / "points" / "p")
    pd_.path.mkdir(parents=True)
    assert segments.parts(pd_) == [pd_] and not segments.segmented(pd_)
