"""Lancet's checks of the latency samples (series_checks.py): independence by lag-1
Spearman with thinning, stationarity of the window's halves, and the window a
correlated series needs for the first to pass."""

from __future__ import annotations

import numpy as np

from orchestrator.experiment import series_checks as sc

from .test_validity import DURATION, WARMUP, _point, _verdict

MIN_N = 1000


def ar1(n: int, phi: float, seed: int = 1) -> np.ndarray:
    """A positive latency series whose neighbours are correlated as an AR(1) at phi."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=n)
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return 1e6 + 1e5 * x - (1e5 * x).min() + 1000


def trace(latencies: np.ndarray, *, shuffle_rows: bool = True) -> str:
    """trace.csv rows in the window, in intended order (rows written out of order, as
    two lcores interleave them)."""
    n = len(latencies)
    intended = WARMUP * 1e9 + np.arange(n) * (DURATION * 1e9 / n)
    rows = [(0, i, f"{t:.0f}", f"{t + 5:.0f}", f"{lat:.0f}") for i, (t, lat) in enumerate(zip(intended, latencies))]
    if shuffle_rows:
        rows = rows[1::2] + rows[::2]
    out = ["lcore,client_id,request_id,class,intended_ns,sent_ns,latency_ns"]
    out += [f"{lc},{lc},{i},task,{a},{b},{lat}" for lc, i, a, b, lat in rows]
    return "\n".join(out) + "\n"


def test_independent_latencies_pass_without_thinning():
    x = np.random.default_rng(3).exponential(1e6, 5000)
    t = sc.thinned(x, 0.001, MIN_N)
    assert t["step"] == 1 and t["n"] == 5000


def test_correlated_latencies_are_thinned_until_independent():
    t = sc.thinned(ar1(40_000, 0.6), 0.001, MIN_N)
    # lag-s correlation 0.6^s: significant at 1, 2, 4 with thousands of samples, gone by 16
    assert t["step"] in (8, 16, 32) and t["n"] >= MIN_N
    assert [s for s, *_ in t["steps"]][:3] == [1, 2, 4] and all(p < 0.001 for *_, p in t["steps"][:-1])


def test_a_window_too_short_to_thin_fails():
    t = sc.thinned(ar1(5000, 0.95), 0.001, MIN_N)
    assert t["step"] is None
    # the steps tried: 1, 2, 4 and last the largest that leaves 1,000 samples (5)
    assert [s for s, *_ in t["steps"]] == [1, 2, 4, 5]


def test_the_steps_end_with_the_largest_that_leaves_enough():
    assert sc.steps_tried(5000, 1000) == [1, 2, 4, 5]
    assert sc.steps_tried(4000, 1000) == [1, 2, 4]
    assert sc.steps_tried(999, 1000) == []


def test_the_window_a_correlated_series_needs():
    iid = np.random.default_rng(4).exponential(1e6, 200_000)
    n, p = sc.requests_for_independence(iid, 0.001, MIN_N, 200_000)
    assert n == MIN_N and p >= sc.PASS_TARGET
    model = ar1(400_000, 0.8)
    n, p = sc.requests_for_independence(model, 0.001, MIN_N, 400_000)
    # at 0.8 the correlation falls below the test's reach after some 16-32 steps
    assert n is not None and 8 * MIN_N <= n <= 64 * MIN_N and p >= sc.PASS_TARGET
    # and the test passes on a series that long, as predicted
    assert sc.thinned(ar1(n, 0.8, seed=9), 0.001, MIN_N)["step"] is not None
    none, p = sc.requests_for_independence(model, 0.001, MIN_N, 3 * MIN_N)
    assert none is None and p < sc.PASS_TARGET


def test_the_checks_read_the_trace_in_intended_order(tmp_path):
    rng = np.random.default_rng(6)
    good = _verdict(_point(tmp_path / "a", trace=trace(rng.exponential(1e6, 20_000) + 1e5)))
    ind, st = good.check("independence"), good.check("stationarity")
    assert ind.passed is True and "at every 1 of 20,000" in ind.message
    assert st.passed is True and "apart, within" in st.message
    # written out of order, a correlated series is still read as one
    bad = _verdict(_point(tmp_path / "b", trace=trace(ar1(20_000, 0.99))))
    c = bad.check("independence")
    assert c.passed is False and "measure a longer window" in c.message and not bad.valid
    assert c.detail["client0"]["lag1"][0]["rho"] > 0.9


def test_a_drifting_window_is_not_stationary(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.exponential(1e6, 20_000) + 1e5
    x[10_000:] *= 1.6  # the host slowed down halfway
    v = _verdict(_point(tmp_path, trace=trace(x)))
    c = v.check("stationarity")
    assert c.passed is False and "drifted" in c.message
    assert c.detail["client0"]["second_p99_us"] > 1.4 * c.detail["client0"]["first_p99_us"]


def _two_modes(shift_ns: float, seed: int = 11) -> np.ndarray:
    """A bimodal 10/110 us service at k = 1000 (10 and 110 ms of testbed time, 90/10)
    plus a host overhead of about 0.2 ms, whose second half is `shift_ns` later."""
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(20_000) < 0.9, 10e6, 110e6) + rng.normal(2e5, 2e4, 20_000)
    x[10_000:] += shift_ns
    return x


def test_halves_closer_than_the_histograms_resolve_are_not_a_drift(tmp_path):
    """The p99 in a mode of one service time: the order statistics' spread is near
    nothing, so a shift of 40 us on 110 ms of testbed time (0.04%, 0.04 us of paper
    time) would fail; no quantile the run reports resolves it (1/1024), and the check
    says the floor is the histograms'. A shift of 0.5% is beyond it, and fails."""
    assert sc.RESOLUTION == 1 / 1024
    tiny = _verdict(_point(tmp_path / "a", trace=trace(_two_modes(40e3)))).check("stationarity")
    d = tiny.detail["client0"]
    assert tiny.passed is True and d["by"] == "resolution" and d["limit"] == round(1 / 1024, 6), tiny.message
    assert 0.0002 < d["rel_diff"] < 1 / 1024 and "the histograms' resolution" in tiny.message
    real = _verdict(_point(tmp_path / "b", trace=trace(_two_modes(550e3)))).check("stationarity")
    assert real.passed is False and "drifted" in real.message and real.detail["client0"]["rel_diff"] > 0.004


def test_a_trace_without_latencies_is_not_run_and_says_why(tmp_path):
    old = "lcore,client_id,request_id,class,intended_ns,sent_ns\n0,0,0,task,600000000,600000100\n"
    v = _verdict(_point(tmp_path, trace=old))
    for name in ("independence", "stationarity"):
        c = v.check(name)
        assert c.passed is None and "no latency_ns column" in c.message


def test_a_segment_leaves_them_to_the_whole_window(tmp_path):
    rng = np.random.default_rng(8)
    d = _point(tmp_path, trace=trace(rng.exponential(1e6, 20_000) + 1e5))
    v = _verdict(d, segment=True)
    assert v.check("independence").passed is None and v.check("stationarity").passed is None


def test_a_long_message_does_not_hide_the_failed_checks_after_it():
    from orchestrator.experiment.validity import Check, Verdict, invalid_reason

    checks = [Check("independence", False, 0, 1000, "x" * 5000), Check("links_up", False, 1, 0, "a link went down")]
    reason = invalid_reason(Verdict("p", checks, {}))
    assert reason.startswith("validity: independence: ") and "links_up: a link went down" in reason
    assert len(reason) <= 1100


def drifting_overhead(n: int, seed: int) -> np.ndarray:
    """A dilated bimodal service (90% at 2 ms, 10% at 22 ms, testbed time) plus the
    hosts' overhead: 150 us, its level drifting every 100 requests, as the Rakaia
    reduced specs measure it. Inside each mode the ranks are the overhead's."""
    rng = np.random.default_rng(seed)
    service = np.where(rng.random(n) < 0.9, 2e6, 22e6)
    drift = np.repeat(rng.normal(0, 30e3, n // 100 + 1), 100)[:n]
    return service + 150e3 + drift + rng.exponential(50e3, n)


def test_a_correlation_that_leaves_the_p99_narrow_passes_by_sectioning(tmp_path):
    x = drifting_overhead(20_000, 12)
    assert sc.thinned(x, 0.001, MIN_N)["step"] is None  # Lancet's thinning alone fails it
    v = _verdict(_point(tmp_path, trace=trace(x)))
    c = v.check("independence")
    assert c.passed is True and "sectioning" in c.message and "within it" in c.message
    d = c.detail["client0"]
    assert d["step"] is None and d["reach"] <= 2_000 and d["sectioned"]["sections"] >= sc.SECTIONS_LEAST
    # the drift is under 1% of the p99: the interval that holds under correlation shows it
    assert c.value == d["sectioned"]["rel_width"] < 0.01


def test_a_correlation_that_widens_the_p99_fails_by_sectioning(tmp_path):
    rng = np.random.default_rng(13)
    # the load's level jumps every 200 requests: each section's p99 is its own
    x = rng.exponential(1e6, 20_000) * np.repeat(np.exp(rng.normal(0, 1.2, 100)), 200) + 1e5
    c = _verdict(_point(tmp_path, trace=trace(x))).check("independence")
    assert c.passed is False and "widens the p99's interval" in c.message
    assert c.value > c.threshold == 0.25


def test_sectioned_p99_cuts_sections_at_least_as_long_as_the_reach():
    x = drifting_overhead(20_000, 3)
    assert sc.sectioned_p99(x, 100, 0.95)["sections"] == sc.SECTIONS_MOST
    s = sc.sectioned_p99(x, 1_500, 0.95)
    assert s["sections"] == 13 and s["section_samples"] >= 1_500
    iid = np.random.default_rng(2).exponential(1e6, 20_000)
    assert sc.reach(iid, 0.001) == 1 and sc.reach(ar1(20_000, 0.999), 0.001) is None


TH = {"independence_alpha": 0.001, "min_samples_p99": MIN_N, "max_p99_ci_width": 0.25, "ci_confidence": 0.95}


def wandering_overhead(n: int, seed: int) -> np.ndarray:
    """The bimodal service of drifting_overhead, its overhead's level wandering over the
    whole window (a noisy VM's, over minutes): no section of a tenth outlasts it."""
    rng = np.random.default_rng(seed)
    service = np.where(rng.random(n) < 0.9, 2e6, 22e6)
    return service + 150e3 + 40e3 * np.sin(2 * np.pi * np.arange(n) / n) + rng.exponential(5e3, n)


def test_segments_whose_p99s_are_independent_replications_hold_the_p99():
    x = wandering_overhead(20_000, 5)
    rng = np.random.default_rng(6)
    runs = list(22.19e6 + rng.normal(0, 10e3, 20))  # each segment's p99: 0.05% apart, in no order
    c = sc.check_independence({"client0": x}, None, TH, lambda: {"client0": runs})
    d = c.detail["client0"]
    assert d["step"] is None and "sectioned" not in d  # neither thinning nor sections can hold it
    assert c.passed is True and "independent replications" in c.message and "holds over runs" in c.message
    assert d["replicated"]["replications"] == 20 and c.value == d["replicated"]["rel_width"] < 0.001


def test_replications_are_refused_when_the_drift_carries_from_run_to_run_or_are_too_few():
    x = wandering_overhead(20_000, 5)
    rising = [22.1e6 + 5e3 * i for i in range(20)]  # each run slower than the last
    c = sc.check_independence({"client0": x}, None, TH, lambda: {"client0": rising})
    assert c.passed is False and "correlated too" in c.message
    few = list(22.19e6 + np.random.default_rng(7).normal(0, 10e3, sc.SECTIONS_LEAST - 1))
    c = sc.check_independence({"client0": x}, None, TH, lambda: {"client0": few})
    assert c.passed is False and "replicated" not in c.detail["client0"]
    assert c.value is None and f"in at least {sc.SECTIONS_LEAST} segments" in c.message
    # asked for only when the series itself cannot pass
    asked = []
    iid = np.random.default_rng(8).exponential(1e6, 5000)
    assert sc.check_independence({"client0": iid}, None, TH, lambda: asked.append(1) or {}).passed is True
    assert asked == []


def test_segment_p99s_reads_each_segments_own_window(tmp_path):
    import json

    from orchestrator.experiment import segments
    from orchestrator.experiment.layout import PointDir

    pd = PointDir(tmp_path / "p")
    assert sc.segment_p99s(pd.path) == {}  # not in segments
    for i, scale in enumerate((1.0, 2.0, 3.0), 1):
        seg = segments.segment_dir(pd, i).fresh()
        seg.client("client0").mkdir(parents=True)
        lat = np.full(2000, 1e6 * scale)
        (seg.client("client0") / "trace.csv").write_text(trace(lat))
        summary = {"warmup_s": WARMUP, "duration_s": DURATION}
        (seg.client("client0") / "summary.json").write_text(json.dumps(summary))
    assert sc.segment_p99s(pd.path) == {"client0": [1e6, 2e6, 3e6]}
    (segments.segment_dir(pd, 2).client("client0") / "trace.csv").unlink()
    assert sc.segment_p99s(pd.path) == {}  # a segment without its series: no replications
