"""Validity checks: each one passing and failing on crafted inputs, the p99's
order-statistic confidence interval, the inter-arrival goodness-of-fit test on
synthetic traces, and the verdict file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from orchestrator.experiment.histograms import Hist
from orchestrator.experiment.spec import Validity
from orchestrator.experiment.validity import check_point, thresholds_of

from .results_fixture import good_counters, make_point, make_summary, trace_csv, write_point, write_sweep

N = 20000  # requests per point (k = 100, so a 2-s window at 10,000 rps)
DURATION = 2.0
WARMUP = 0.5


def _point(
    tmp_path: Path,
    *,
    latencies=None,
    summary_kw=None,
    counter_kw=None,
    trace=None,
    status="done",
    hosts=1,
    partial=False,
    arrival="poisson",
    schedule=None,
    lcores=1,
    k: float = 100.0,
) -> Path:
    """A one-class point whose numbers are all good unless overridden."""
    run = tmp_path / "run"
    rng = np.random.default_rng(5)
    lat = latencies if latencies is not None else (rng.exponential(1e6, N) // 10_000 * 10_000 + 1e5).astype(np.int64)
    per_host = np.array_split(lat, hosts)
    host_map = {}
    for i, part in enumerate(per_host):
        c = good_counters(len(part), DURATION)
        c.update(counter_kw or {})
        rps = len(lat) / DURATION / hosts  # consistent with the counters
        kw = dict(
            offered_rps=rps,
            achieved_rps=rps,
            duration_s=DURATION,
            warmup_s=WARMUP,
            arrival=arrival,
            schedule=schedule or [[0.0, rps]],
            lcores=lcores,
            partial=partial,
        )
        kw.update(summary_kw or {})
        host_map[f"client{i}"] = {
            "latency": [{"task": part}],
            "slowdown": [{"task": part // 1000}],
            "summary": make_summary({"task": c}, **kw),
            "trace": trace if i == 0 else None,
        }
    point = make_point("rain-k200-r1", load_krps=N / DURATION * k / 1000, k=k)
    d = write_point(run, point, host_map)
    write_sweep(run, {point["id"]: {"status": status}})
    return d


def _verdict(d: Path, validity=None, **kw):
    return check_point(d, None, validity if validity is not None else {"min_samples_p99": 1000}, **kw)


def test_a_good_point_passes_everything_that_runs(tmp_path):
    v = _verdict(_point(tmp_path, hosts=2))
    assert v.valid, v.to_dict()
    assert v.failed == []
    not_run = ["interarrival", "independence", "stationarity", "tasks_intact", "links_up", "frames_delivered"]
    assert v.not_run == [*not_run, "model_agreement"]
    assert "no trace" in v.check("interarrival").message
    assert "no model beside this point" in v.check("model_agreement").message
    assert "no worker stats" in v.check("tasks_intact").message
    assert "no switch/links.json" in v.check("links_up").message
    measured = ["complete", "load", "schedule_lag", "late_sends", "lost", "timed_out", "rejected", "samples_p99"]
    assert {c.name for c in v.checks} == {*measured, "p99_ci", *not_run, "model_agreement"}
    assert v.check("load").value == pytest.approx(0.0)


def test_verdict_file(tmp_path):
    d = _point(tmp_path, counter_kw={"timed_out": 100})
    v = _verdict(d)
    data = json.loads((d / "validity.json").read_text())
    assert data["valid"] is False and data["failed"] == ["timed_out"] == v.failed
    assert data["point_id"] == "rain-k200-r1"
    for c in data["checks"]:
        assert set(c) >= {"name", "passed", "status", "value", "threshold", "message"}
    assert data["thresholds"]["min_samples_p99"] == 1000
    # strict JSON: no NaN or Infinity anywhere
    json.loads((d / "validity.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-finite {c}"))


@pytest.mark.parametrize(
    "kw, failed",
    [
        ({"partial": True}, "complete"),
        ({"status": "failed"}, "complete"),
        ({"summary_kw": {"achieved_rps": 0.9 * N / DURATION}}, "load"),
        ({"counter_kw": {"max_lag_ns": 2_000_000}}, "schedule_lag"),
        ({"counter_kw": {"late_sends": N // 20}}, "late_sends"),
        ({"counter_kw": {"lost": N // 100}}, "lost"),
        ({"counter_kw": {"not_sent": N // 100}}, "lost"),
        ({"counter_kw": {"timed_out": N // 100}}, "timed_out"),
        ({"counter_kw": {"rejected": N // 100}}, "rejected"),
    ],
)
def test_each_check_fails_on_its_own(tmp_path, kw, failed):
    v = _verdict(_point(tmp_path, **kw))
    assert v.failed == [failed], v.to_dict()
    assert not v.valid
    c = v.check(failed)
    assert c.passed is False and c.message


@pytest.mark.parametrize(
    "k, lag_ns, passed",
    [
        (1000.0, 5_000_000, True),  # 5 ms of testbed time is 5 us of paper time: half a 10 us task
        (1000.0, 12_000_000, False),  # 12 us of paper time
        (100.0, 1_100_000, False),  # 11 us
        (1.0, 9_000, True),  # hardware: the lag is paper time
        (1.0, 11_000, False),
    ],
)
def test_the_schedule_lag_is_judged_in_paper_time(tmp_path, k, lag_ns, passed):
    v = _verdict(_point(tmp_path, k=k, counter_kw={"max_lag_ns": lag_ns, "late_sends": 1}))
    c = v.check("schedule_lag")
    assert c.passed is passed, c.message
    assert c.value == pytest.approx(lag_ns / 1000 / k)
    assert c.threshold == 10  # the spec's default, us of paper time
    assert "paper time" in c.message
    assert ("testbed time at k = " in c.message) is (k != 1)


def test_thresholds_come_from_the_spec(tmp_path):
    d = _point(tmp_path, summary_kw={"achieved_rps": 0.93 * N / DURATION}, counter_kw={"lost": 15})
    assert _verdict(d).failed == ["load"]  # 7% off; lost 15 of 20,000 < 0.1%
    assert _verdict(d, Validity(load_tolerance=0.1, min_samples_p99=1000)).valid
    assert _verdict(d, {"load_tolerance": 0.1, "max_lost_fraction": 0.0005, "min_samples_p99": 1000}).failed == ["lost"]
    th = thresholds_of(None)
    assert th["load_tolerance"] == Validity().load_tolerance and th["max_p99_ci_width"] == Validity().max_p99_ci_width


def test_missing_client_results(tmp_path):
    run = tmp_path / "run"
    d = write_point(run, make_point("rain-k1-r1"), {})
    v = _verdict(d)
    assert "complete" in v.failed and "samples_p99" in v.failed
    assert "no client results" in v.check("complete").message


# -- samples and the p99's confidence interval ------------------------------------------------


def test_samples_for_p99(tmp_path):
    d = _point(tmp_path, latencies=np.arange(1000, 1500))
    v = _verdict(d, {"min_samples_p99": 1000, "max_p99_ci_width": 1.0})
    assert v.failed == ["samples_p99"]
    assert v.check("samples_p99").value == 500
    assert "fewer than 1,000" in v.check("samples_p99").message


def test_p99_ci_bounds_are_order_statistics():
    n = 2000
    h = Hist.from_values(np.arange(1, n + 1))  # value = rank, exact buckets below 2048
    lo, hi = h.quantile_ci(0.99, 0.95)
    l_rank = binom.ppf(0.025, n, 0.99)
    u_rank = binom.ppf(0.975, n, 0.99) + 1
    assert (lo, hi) == (l_rank, u_rank)
    assert binom.cdf(u_rank - 1, n, 0.99) - binom.cdf(l_rank - 1, n, 0.99) >= 0.95
    assert lo < h.percentile(99) < hi
    # too few samples for an upper bound: unbounded
    small = Hist.from_values(np.arange(1, 101))
    assert small.quantile_ci(0.99)[1] == math.inf


def test_p99_ci_covers_the_true_quantile():
    rng = np.random.default_rng(11)
    true = -math.log(0.01) * 1e6  # exponential, mean 1 ms
    hits = 0
    for _ in range(200):
        lo, hi = Hist.from_values(rng.exponential(1e6, 2000)).quantile_ci(0.99, 0.95)
        hits += lo <= true <= hi
    assert hits / 200 >= 0.92


def test_p99_ci_check(tmp_path):
    n = 2000
    d = _point(tmp_path, latencies=np.arange(1, n + 1))
    width = (binom.ppf(0.975, n, 0.99) + 1 - binom.ppf(0.025, n, 0.99)) / 1980
    v = _verdict(d, {"min_samples_p99": 1000, "max_p99_ci_width": width + 1e-9})
    c = v.check("p99_ci")
    assert c.passed and c.value == pytest.approx(width)
    assert c.detail["task"]["ci_lo_us"] == binom.ppf(0.025, n, 0.99) / 1000
    assert "95% CI" in c.message
    v = _verdict(d, {"min_samples_p99": 1000, "max_p99_ci_width": width * 0.9})
    assert v.failed == ["p99_ci"] and "more samples" in v.check("p99_ci").message
    # a heavy, sparse tail: the upper rank does not exist
    d2 = _point(tmp_path / "b", latencies=np.arange(1, 120), summary_kw={})
    assert "p99_ci" in _verdict(d2, {"min_samples_p99": 100}).failed


# -- inter-arrival goodness of fit ---------------------------------------------------------------


def _sends(gaps_s: np.ndarray, jitter_ns: float = 0.0, seed: int = 0) -> np.ndarray:
    t = np.cumsum(gaps_s) * 1e9
    if jitter_ns:
        t = t + np.random.default_rng(seed).uniform(0, jitter_ns, len(t))
    return t


def _trace_point(
    tmp_path: Path, sends_by_lcore: dict[int, np.ndarray], *, arrival="poisson", rate=None, intended=None
) -> Path:
    rate = rate if rate is not None else N / DURATION
    return _point(
        tmp_path,
        trace=trace_csv(sends_by_lcore, intended),
        arrival=arrival,
        schedule=[[0.0, rate]],
        lcores=len(sends_by_lcore),
        summary_kw={"offered_rps": rate, "achieved_rps": rate},
    )


def test_interarrival_poisson_passes(tmp_path):
    rng = np.random.default_rng(21)
    rate = N / DURATION
    n = int(rate * (WARMUP + DURATION) * 1.1)
    sends = {lc: _sends(rng.exponential(2 / rate, n // 2), jitter_ns=2000, seed=lc) for lc in (0, 1)}
    v = _verdict(_trace_point(tmp_path, sends))
    c = v.check("interarrival")
    assert c.passed is True, c.message
    assert c.value > 0.001 and "KS" in c.message
    assert c.detail["sent_ns"]["n"] > 1000


def test_interarrival_fails_for_constant_sends_or_wrong_rate(tmp_path):
    rate = N / DURATION
    n = int(rate * (WARMUP + DURATION) * 1.1)
    constant = {0: _sends(np.full(n, 1 / rate))}
    c = _verdict(_trace_point(tmp_path / "a", constant)).check("interarrival")
    assert c.passed is False and c.value < 1e-6
    assert "not Poisson" in c.message
    rng = np.random.default_rng(22)
    too_fast = {0: _sends(rng.exponential(1 / (1.5 * rate), 2 * n))}
    c = _verdict(_trace_point(tmp_path / "b", too_fast)).check("interarrival")
    assert c.passed is False
    # bursty sends (the client sent in clumps) with a Poisson schedule
    intended = rng.exponential(1 / rate, n)
    sent = np.repeat(np.cumsum(intended)[::8], 8)[:n] * 1e9
    c = _verdict(_trace_point(tmp_path / "c", {0: sent}, intended={0: np.cumsum(intended) * 1e9})).check("interarrival")
    assert c.passed is False and c.detail["intended_ns"]["p"] > 0.001


def test_interarrival_constant_process(tmp_path):
    rate = N / DURATION
    n = int(rate * (WARMUP + DURATION) * 1.1)
    even = {0: _sends(np.full(n, 1 / rate), jitter_ns=1000)}
    c = _verdict(_trace_point(tmp_path / "a", even, arrival="constant")).check("interarrival")
    assert c.passed is True and c.value < 0.1, c.message
    rng = np.random.default_rng(23)
    poisson = {0: _sends(rng.exponential(1 / rate, n))}
    c = _verdict(_trace_point(tmp_path / "b", poisson, arrival="constant")).check("interarrival")
    assert c.passed is False and c.value > 0.5


def test_interarrival_not_run(tmp_path):
    v = _verdict(_point(tmp_path))
    assert v.check("interarrival").passed is None and v.valid
    d = _trace_point(tmp_path / "x", {0: _sends(np.full(10, 1e-3))})
    c = _verdict(d).check("interarrival")
    assert c.passed is None and "only" in c.message


def test_check_point_takes_a_plan_point(tmp_path):
    from orchestrator.experiment.plan import Point

    d = _point(tmp_path)
    p = Point(
        id="rain-k200-r1",
        index=0,
        system="rain",
        variant=None,
        variant_label=None,
        repetition=1,
        load_krps=1000.0,
        capacity_fraction=None,
        offered_rps=N / DURATION,
        dilation=100.0,
        warmup_s=WARMUP,
        measure_s=DURATION,
        handler="sleep",
        worker_threads=4,
    )
    v = check_point(d, p, Validity(min_samples_p99=1000))
    assert v.valid and v.point_id == "rain-k200-r1"


def _worker_stats(point_dir: Path, host: str, *, icrc=0, nic_icrc=0, mismatch=(0, 0)) -> None:
    """workers/<host>/stats.json as rain-worker writes it (the fields the check reads)."""
    d = point_dir / "workers" / host
    d.mkdir(parents=True, exist_ok=True)
    stats = {
        "program": "rain-worker",
        "drops": {"roce_qpn": 0, "roce_icrc": icrc, "no_room": 0},
        "roce": {"applied": 10, "icrc_check": True, "icrc_bad": icrc, "nic_icrc_drops": nic_icrc},
        "workers": [{"worker_id": i, "tasks_done": 5, "desc_mismatch": m} for i, m in enumerate(mismatch)],
    }
    (d / "stats.json").write_text(json.dumps(stats))


def test_tasks_lost_at_the_workers_fail_the_point(tmp_path):
    """A WRITE dropped for its iCRC, or a descriptor whose ring slot was reused, loses a
    task the switch accepted: the point is not valid, and the message says why."""
    d = _point(tmp_path)
    _worker_stats(d, "worker0")
    _worker_stats(d, "worker1")
    v = _verdict(d)
    assert v.valid and v.check("tasks_intact").passed, v.to_dict()

    _worker_stats(d, "worker1", icrc=7)
    c = _verdict(d).check("tasks_intact")
    assert c.passed is False and c.value == 7 and "7 RoCEv2 WRITEs dropped for a bad iCRC" in c.message
    assert "roce.icrc_disable_command" in c.message

    _worker_stats(d, "worker1", nic_icrc=2, mismatch=(1, 3))
    v = _verdict(d)
    c = v.check("tasks_intact")
    assert v.failed == ["tasks_intact"] and c.value == 6
    assert "2 RoCEv2 WRITEs" in c.message and "4 dispatched descriptors refused" in c.message
    assert c.detail["hosts"]["worker1"] == {"icrc_drops": 2, "desc_mismatch": 4}

    (d / "workers" / "worker1" / "stats.json").write_text("{torn")  # one host unreadable: said, not fatal
    c = _verdict(d).check("tasks_intact")
    assert c.passed is True and "no stats from worker1" in c.message


def _links(point_dir: Path, *rows: dict) -> None:
    """switch/links.json as the runner writes it (PointDir.write_links)."""
    from orchestrator.experiment.layout import PointDir

    base = {"up_before": True, "up_after": True, "link_down_events": 0, "frames_dropped_port_down": 0}
    PointDir(point_dir).write_links({"window_s": 2.5, "ports": [{**base, **r} for r in rows]})


def test_a_link_down_during_the_load_fails_the_point_and_names_it(tmp_path):
    d = _point(tmp_path)
    client0 = {"port": "1/0", "dev_port": 0, "hosts": ["client0"]}
    worker0 = {"port": "2/0", "dev_port": 1, "hosts": ["worker0"]}
    spare = {"port": "9/0", "dev_port": 8, "hosts": [], "up_before": False, "up_after": False}
    _links(d, client0, worker0, spare)
    v = _verdict(d)
    assert v.valid and v.check("links_up").passed, v.to_dict()
    assert "2 host port(s) stayed up" in v.check("links_up").message  # the spare port down all along: no matter

    _links(d, client0, {**worker0, "link_down_events": 1, "frames_dropped_port_down": 57}, spare)
    v = _verdict(d)
    c = v.check("links_up")
    assert v.failed == ["links_up"] and c.value == 1
    assert c.message == (
        "worker0's link (port 2/0, dev_port 1) went down 1 time(s) and dropped 57 frame(s) "
        "because it was down during the load"
    )
    assert c.detail["ports"]["2/0"]["link_down_events"] == 1

    # down at the end (and never seen going down: a switch that counts no losses)
    _links(d, {**client0, "up_after": False, "link_down_events": None, "frames_dropped_port_down": None}, worker0)
    c = _verdict(d).check("links_up")
    assert c.passed is False and c.message.startswith(
        "client0's link (port 1/0, dev_port 0) was down when the load ended"
    )

    # bf_switchd keeps no link counters: $PORT_UP at both ends is what there is, and it says so
    _links(d, {**client0, "link_down_events": None, "frames_dropped_port_down": None})
    c = _verdict(d).check("links_up")
    assert c.passed is True and "the switch counts no link losses" in c.message

    # frames dropped at a port with no host behind it: something of the point went there
    _links(d, client0, {**spare, "frames_dropped_port_down": 3})
    c = _verdict(d).check("links_up")
    assert c.passed is False and "a port with no host (port 9/0, dev_port 8) dropped 3 frame(s)" in c.message


def test_a_client_that_read_nothing_the_switch_sent_it_fails_the_point_hop_by_hop(tmp_path):
    d = _point(tmp_path)
    summary = json.loads((d / "clients" / "client0" / "summary.json").read_text())
    summary["run"] = {**summary.get("run", {}), "rx_frames": 1200}
    summary["port"] = {"ipackets": 1200}
    (d / "clients" / "client0" / "summary.json").write_text(json.dumps(summary))
    (d / "clients" / "client0" / "agent.json").write_text(json.dumps({"nic": {"rx_packets": 1200}}))
    client0 = {"port": "1/0", "dev_port": 0, "hosts": ["client0"], "frames_to_host": 1200}
    _links(d, client0)
    c = _verdict(d).check("frames_delivered")
    assert c.passed is True and "1 client(s) read the frames" in c.message
    assert c.detail["hosts"]["client0"] == {
        "switch_port_tx": 1200,
        "interface_rx": 1200,
        "dpdk_port_rx": 1200,
        "client_rx": 1200,
    }

    summary["run"]["rx_frames"], summary["port"]["ipackets"] = 0, 0
    (d / "clients" / "client0" / "summary.json").write_text(json.dumps(summary))
    (d / "clients" / "client0" / "agent.json").write_text(json.dumps({"nic": {"rx_packets": 506}}))
    _links(d, {**client0, "frames_to_host": 506})
    v = _verdict(d)
    c = v.check("frames_delivered")
    assert "frames_delivered" in v.failed and c.value == 1
    assert c.message == (
        "client0 read no frame while the switch sent 506 to its port 1/0 (its interface took 506, its DPDK port 0)"
    )

    # bf_switchd's $PORT_STAT without the frame counters read: nothing to compare
    _links(d, {k: v for k, v in client0.items() if k != "frames_to_host"})
    assert _verdict(d).check("frames_delivered").passed is None


def test_a_broken_schedule_names_the_hypervisors_steal_when_the_run_recorded_it(tmp_path):
    d = _point(tmp_path, k=1000.0, counter_kw={"max_lag_ns": 20_000_000, "late_sends": N // 20})
    v = _verdict(d)
    assert set(v.failed) == {"schedule_lag", "late_sends"}
    assert "steal" not in v.check("schedule_lag").message  # nothing recorded: nothing said
    (d / "cpu.json").write_text(json.dumps({"cores": 2, "steal_share": 0.021}))
    v = _verdict(d)
    for name in ("schedule_lag", "late_sends"):
        assert "the hypervisor gave 2.1% of this machine's cores to others" in v.check(name).message
    (d / "cpu.json").write_text(json.dumps({"cores": 2, "steal_share": 0.0}))
    assert "took none" in _verdict(d).check("schedule_lag").message


def test_interarrival_follows_a_schedule_of_phases_with_their_classes(tmp_path):
    """rain-client's schedule of a time-varying workload: [t, rps, [classes]] pieces.
    Poisson sends at each phase's rate pass; the same sends against a flat schedule
    of their mean rate do not."""
    rng = np.random.default_rng(24)
    lo, hi = N / DURATION / 2, 3 * N / DURATION / 2
    half = (WARMUP + DURATION) / 2
    first = np.cumsum(rng.exponential(1 / lo, int(lo * half * 1.2)))
    first = first[first < half]
    second = half + np.cumsum(rng.exponential(1 / hi, int(hi * half * 1.2)))
    sends = {0: np.concatenate([first, second]) * 1e9}
    phased = [[0.0, lo, ["a"]], [half, hi, ["b"]]]
    d = _point(tmp_path / "a", trace=trace_csv(sends), schedule=phased, lcores=1)
    c = _verdict(d).check("interarrival")
    assert c.passed is True, c.message
    flat = _point(tmp_path / "b", trace=trace_csv(sends), schedule=[[0.0, (lo + hi) / 2]], lcores=1)
    assert _verdict(flat).check("interarrival").passed is False
