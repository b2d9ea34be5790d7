"""Rakaia's queueing models on the simulated testbed (simulate/core/policy_{ms,cp,cs,
rakaia}.c, rpc.h) against queueing theory, then the paper's simulation claims.

One server of c cores (the engine's worker threads of one host), the ideal network (no
delay, no per-packet cost: the paper's zero system overheads), Poisson arrivals, mean
service 10 us (the model is scale-free: the paper's 100 us gives the same ratios). How
many tasks each check needs for its 2% is worked out in test_sim_theory.py (part 2);
the sizes here follow it: each estimate's own error stays at or under 0.5%.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator.simulate import engine, theory
from orchestrator.simulate.bench import at_load, core_point
from orchestrator.simulate.engine import SimError
from orchestrator.simulate.theory import MDc, MMc

REPO = Path(__file__).resolve().parents[2]
MEAN_NS = 10_000
WARMUP_NS = 50_000_000
TOLERANCE = 0.02
CORES = 20  # the paper's server: 20 cores (hyperthreads)


def _run(policy: str, load: float, tasks: int, seeds: int = 1, *, connections: int = CORES, service: str = "exp",
         spread: str = "uniform", zipf_s: float = 1.0, c: int = CORES):  # fmt: skip
    """(latencies, waits, cores) in ns of `seeds` runs of about `tasks` tasks each,
    pooled; every request answered (the queue theory assumes is unbounded)."""
    lats, waits, cores = [], [], []
    params = {"connections": connections, "spread": spread, "zipf_s": zipf_s}
    for seed in range(1, seeds + 1):
        r = engine.run(at_load(policy, c, load, tasks, seed, warmup_ns=WARMUP_NS, service=service, params=params))
        assert (r.outcome == 0).all(), f"outcomes {np.bincount(r.outcome)}"
        keep = r.intended_ns >= WARMUP_NS
        lats.append(r.latency_ns[keep].astype(np.float64))
        waits.append((r.latency_ns[keep] - r.service_ns[keep]).astype(np.float64))
        cores.append(r.worker[keep])
    return np.concatenate(lats), np.concatenate(waits), np.concatenate(cores)


def _close(got: float, want: float, what: str, tol: float = TOLERANCE) -> None:
    assert abs(got / want - 1) < tol, f"{what}: {got / 1e3:.3f} us, theory {want / 1e3:.3f} us"


# -- MS: M/G/c ------------------------------------------------------------------------------


@pytest.mark.parametrize(("load", "tasks", "seeds"), [(0.5, 1_000_000, 1), (0.8, 1_000_000, 1), (0.9, 2_000_000, 8)])
def test_ms_with_exponential_service_is_erlang_c(load, tasks, seeds):
    """MS, one FIFO of messages before 20 cores: M/M/c. The p99 and the mean response
    time within 2%, and at 0.9 the mean wait within 5%. The mean wait's estimate is far
    noisier than the response time's: its standard deviation is about 4% per million
    messages at 0.8 and 0.9 (measured over 8 seeds: 1.009 and 1.004 of Erlang C's on
    average), so 2% at four of them would take some 70 M messages; 16 M hold it to 1%.
    At 0.5 only 0.37% of messages wait at all (a mean wait of 3.7 ns)."""
    lat, wait, _ = _run("ms", load, tasks, seeds)
    q = MMc(CORES, load * CORES / MEAN_NS, 1 / MEAN_NS)
    _close(float(np.percentile(lat, 99)), q.sojourn_quantile(0.99), "p99")
    _close(float(lat.mean()), q.mean_sojourn, "mean response time")
    if load == 0.9:
        _close(float(wait.mean()), q.mean_wait, "mean wait", tol=0.05)


def test_ms_with_constant_service_is_mdc():
    """MS with constant service: M/D/c (Crommelin; Franx), the mean wait and the p99."""
    c, load = 16, 0.9
    lat, wait, _ = _run("ms", load, 4_000_000, 4, service="const", c=c, connections=c)
    q = MDc(c, load * c / MEAN_NS, MEAN_NS)
    _close(float(wait.mean()), q.mean_wait, "mean wait")
    _close(float(np.percentile(lat, 99)), q.sojourn_quantile(0.99), "p99")


# -- CP: c independent M/G/1 queues ------------------------------------------------------------


def test_cp_with_as_many_connections_as_cores_is_independent_mm1_queues():
    """CP with 20 uniformly loaded connections on 20 cores: each core one M/M/1 queue at
    rate lam / c (each connection a Poisson thinning of the arrivals): the mean from
    Pollaczek-Khinchine (M/M/1's), the p99 from M/M/1's closed form; every core its
    1/c share."""
    load = 0.5
    # an M/M/1's p99 from one million tasks strays 1.6% here; four seeds hold it to 0.5%
    lat, _, cores = _run("cp", load, 1_000_000, 4)
    lam, mu = load / MEAN_NS, 1 / MEAN_NS
    _close(float(lat.mean()), theory.mm1_mean_sojourn(lam, mu), "mean response time")
    _close(float(np.percentile(lat, 99)), theory.mm1_sojourn_quantile(lam, mu, 0.99), "p99")
    share = np.bincount(cores, minlength=CORES) / len(cores)
    assert np.all(np.abs(share * CORES - 1) < 0.02), share


def test_cp_with_constant_service_is_pollaczek_khinchine():
    """CP with constant service: each core M/D/1, whose mean wait is P-K's rho d / (2 (1 - rho))."""
    load = 0.8
    _, wait, _ = _run("cp", load, 2_000_000, service="const")
    _close(float(wait.mean()), theory.md1_mean_wait(load / MEAN_NS, MEAN_NS), "mean wait")


def test_kcm_like_is_cps_queue_in_this_model():
    """KCM-like keeps each message on its connection's core: with one worker per core and
    no overheads, CP's queue, to the request (policy_cp.c says why)."""
    a = _run("cp", 0.7, 200_000, connections=80)
    b = _run("kcm", 0.7, 200_000, connections=80)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2])


# -- the paper's simulation claims -------------------------------------------------------------

LOADS = (0.5, 0.8, 0.9)


def test_cs_with_5000_connections_nearly_matches_ms():
    """Rakaia, simulation: "CS with 5,000 connections nearly matches MS": within 5% of
    MS's p99 at every load here (the same arrivals and service times: common random
    numbers)."""
    for load in LOADS:
        cs = np.percentile(_run("cs", load, 1_000_000, connections=5000)[0], 99)
        ms = np.percentile(_run("ms", load, 1_000_000, connections=5000)[0], 99)
        assert abs(cs / ms - 1) < 0.05, f"load {load}: CS {cs / 1e3:.1f} us, MS {ms / 1e3:.1f} us"


def test_cs_hol_blocking_eases_as_connections_grow_and_cp_never_balances():
    """ "CS suffers intra-connection HOL blocking that eases as connections grow"; "CP does
    not balance load even with 5,000 connections": CS's p99 falls from 20 to 80 to 5,000
    connections, CP's stays an M/M/1's (each core one queue, whatever the connections)."""
    load = 0.8
    cs = [np.percentile(_run("cs", load, 500_000, connections=n)[0], 99) for n in (20, 80, 5000)]
    assert cs[0] > cs[1] > cs[2], cs
    mm1 = theory.mm1_sojourn_quantile(load / MEAN_NS, 1 / MEAN_NS, 0.99)
    cp = np.percentile(_run("cp", load, 1_000_000, connections=5000)[0], 99)
    assert cp > 3 * np.percentile(_run("ms", load, 500_000)[0], 99) and abs(cp / mm1 - 1) < 0.05


def test_rakaia_is_never_worse_than_cp_and_stays_close_to_ms():
    """ "Rakaia stays close to the MS curve at every connection count": within 10% of MS's
    p99 up to 0.9 of capacity, at 20, 80 and 5,000 connections, and never above CP's.
    (Closer to saturation the model puts it further off: 20% above MS at 0.95, where its
    per-core FIFOs lose MS's global arrival order; the report's figure shows it.)"""
    for n in (20, 80, 5000):
        for load in LOADS:
            rk = np.percentile(_run("rakaia", load, 500_000, connections=n)[0], 99)
            ms = np.percentile(_run("ms", load, 500_000, connections=n)[0], 99)
            cp = np.percentile(_run("cp", load, 500_000, connections=n)[0], 99)
            assert rk / ms < 1.10 and rk <= cp, f"{n} connections, load {load}: {rk:.0f} vs MS {ms:.0f}, CP {cp:.0f}"


# -- connections and bad parameters ------------------------------------------------------------


def test_zipf_spread_loads_the_first_connections_core_most():
    """Zipf (s = 1) over 80 connections bound round-robin: core 0 holds connections 0, 20,
    40, 60, the heaviest; its share of the messages is their weight's."""
    _, _, cores = _run("cp", 0.3, 200_000, connections=80, spread="zipf", zipf_s=1.0)
    w = 1 / np.arange(1, 81)
    want = np.array([w[k::CORES].sum() for k in range(CORES)]) / w.sum()
    share = np.bincount(cores, minlength=CORES) / len(cores)
    assert share.argmax() == 0 and np.all(np.abs(share - want) < 0.01), (share, want)


@pytest.mark.parametrize(
    ("params", "words"),
    [({"connections": 0}, "connections must be a whole number"), ({"connections": 2.5}, "whole number")],
)
def test_bad_connection_counts_are_refused_by_the_core(params, words):
    sp = core_point(
        workers=4, quota=1, rate_rps=1000.0, warmup_ns=0, measure_ns=1_000_000, seed=1, policy="cs", params=params
    )
    with pytest.raises(SimError) as e:
        engine.run(sp)
    assert words in str(e.value)


# -- a spec of them, end to end ---------------------------------------------------------------


def test_the_rakaia_spec_simulates_to_a_figure_per_connection_count_and_run_needs_a_fixed_k(tmp_path):
    """experiments/rakaia-sim.yaml, narrowed: one server of 20 cores whatever --workers
    says, a panel per connection count, the throughput under its SLO in the report; and
    `rainmaker run` on an emulated testbed asks for a fixed dilation (the RPC family has
    no calibration point to choose one from)."""
    import yaml

    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.run import auto_k_calibrates, supported_or_explain
    from orchestrator.experiment.spec import load
    from orchestrator.simulate.runner import simulate

    spec = yaml.safe_load((REPO / "experiments/rakaia-sim.yaml").read_text())
    spec |= {"load": {"capacity_fraction": [0.5, 0.9]}, "warmup_s": 0.05, "measure_s": 0.2}
    spec["variants"] = spec["variants"][:2]
    spec.pop("claims")  # they name the 5,000-connection curves, gone from the narrowed spec
    f = tmp_path / "rakaia.yaml"
    f.write_text(yaml.safe_dump(spec))
    rd = RunDir(simulate(f, results_root=tmp_path / "r", worker_hosts=4, jobs=2, progress=False))
    m = rd.read_manifest()
    assert m["testbed"]["workers"] == 1 and m["testbed"]["threads_per_host"] == 20
    assert m["testbed"]["network"]["switch_worker_ns"] == 0
    assert len(list(rd.points())) == 5 * 2 * 2
    assert "one server of 20 cores, zero overheads" in rd.log.read_text()
    assert (rd.path / "plots" / "p99_vs_load_by_variant.png").is_file()
    report = (rd.path / "report.md").read_text()
    assert "## Throughput under SLO" in report and "| cp (20 connections) |" in report
    supported_or_explain(load(f))  # the measured layer runs it
    auto_k_calibrates(load(f), auto=True)  # its calibration point is its own: rpc-client to rpc-server
