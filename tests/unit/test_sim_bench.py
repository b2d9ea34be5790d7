"""The benchmark (orchestrator/simulate/bench.py): its SimPy model and the simulated
testbed's core simulate the same system, and `python -m orchestrator.simulate.bench`
prints its table. Nothing here is timed: the table's speeds are the benchmark's
business, not the suite's."""

from __future__ import annotations

import re
import sys

import numpy as np

from orchestrator.simulate import bench


def test_simpy_model_and_core_agree():
    """Rain with quota 2 (tasks also wait in the workers' FIFOs), 16 workers, load 0.5,
    exponential 10 us: the p50, p99 and mean of 80 000 SimPy tasks lie within 3% of
    the core's (over a few million tasks). SimPy's estimate is the noisy one: over
    independent seeds its p50 and p99 scatter by about 0.8% at this size."""
    simpy_side = bench.run_simpy(workers=16, quota=2, load=0.5, tasks=80_000, seed=1)
    core = bench.run_core(workers=16, quota=2, load=0.5, tasks=2_000_000, seed=1)
    assert simpy_side.tasks == 80_000 and len(simpy_side.latency_ns) == 72_000  # the first 10% left out
    assert core.tasks >= 2_000_000
    for what, s, c in zip(("mean", "p50", "p99"), simpy_side.stats_us(), core.stats_us()):
        assert abs(s / c - 1) < 0.03, f"{what}: SimPy {s:.3f} us, core {c:.3f} us"


def test_simpy_model_is_mmc_with_quota_1():
    """The SimPy model on its own, with quota 1: M/M/c's mean response time (within
    3% at 20 000 tasks, about 4 standard deviations of the estimate), so it is a model
    of the system and not merely like the core."""
    from orchestrator.simulate.theory import MMc

    c, load = 8, 0.5
    lat = bench.simpy_rain(c, 1, load * c / bench.MEAN_NS, bench.MEAN_NS, 20_000, seed=1)[2_000:]
    want = MMc(c, load * c / bench.MEAN_NS, 1 / bench.MEAN_NS).mean_sojourn
    assert abs(lat.mean() / want - 1) < 0.03, (lat.mean(), want)


def test_bench_prints_its_table(capsys):
    rc = bench.main(
        ["--tasks", "3000", "--workers", "8", "--load", "0.5", "--quota", "1", "--core-tasks", "100000"]
        + ["--paper-s", "0.002", "--tolerance", "0.5"]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(simpy|core|M/M/c)\s+([\d,]*)\s+([\d.]*)\s+([\d,]*)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line)
        if m:
            rows[m[1]] = m.groups()[1:]
    assert set(rows) == {"simpy", "core", "M/M/c"}, out
    assert rows["simpy"][0] == "3,000"
    assert int(rows["core"][0].replace(",", "")) >= 100_000
    rate = {k: int(rows[k][2].replace(",", "")) for k in ("simpy", "core")}
    m = re.search(r"ratio core / simpy: ([\d,]+)x \(target >= 20x: (met|NOT met)\)", out)
    assert m and int(m[1].replace(",", "")) == round(rate["core"] / rate["simpy"]), out
    assert re.search(r"agreement: mean [\d.]+%, p50 [\d.]+%, p99 [\d.]+% \(within 50%\)", out), out
    assert re.search(r"paper-scale point: 32 worker threads \(2 hosts x 16\), 2.9 M tasks/s offered", out), out
    for how in ("static quota", "Algorithm 1"):
        m = re.search(how + r" +([\d,]+) tasks +([\d,]+) events +[\d.]+ s CPU +[\d.]+ s wall  p99 ([\d.]+) us", out)
        assert m, out
        tasks, events, p99 = int(m[1].replace(",", "")), int(m[2].replace(",", "")), float(m[3])
        # 0.102 s at 2.9 M tasks/s; each task is several events (arrival, dispatch, run, reply, token)
        assert abs(tasks / (2.9e6 * 0.102) - 1) < 0.01 and events > 5 * tasks and p99 > 10, out


def test_bench_fails_when_the_models_disagree(capsys, monkeypatch):
    """A SimPy model 10% slower is not the same system: the benchmark says so and exits 1."""
    real = bench.simpy_rain
    monkeypatch.setattr(bench, "simpy_rain", lambda *a, **k: real(*a, **k) * 1.1)
    rc = bench.main(["--tasks", "3000", "--workers", "8", "--load", "0.5", "--core-tasks", "100000", "--paper-s", "0"])
    cap = capsys.readouterr()
    assert rc == 1
    assert "NOT within 3%" in cap.out and "do not simulate the same system" in cap.err
    assert "paper-scale" not in cap.out


def test_bench_refuses_bad_arguments(capsys):
    assert bench.main(["--load", "1.2"]) == 2
    assert "fix:" in capsys.readouterr().err
    assert np.isfinite(bench.Side("x", 10, 0.5, np.ones(3)).rate)


def test_bench_without_simpy_says_how_to_get_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "simpy", None)  # import simpy raises ImportError
    assert bench.main(["--tasks", "1000", "--paper-s", "0"]) == 1
    err = capsys.readouterr().err
    assert "needs the simpy package" in err and "make setup" in err
