"""The queueing formulas (orchestrator/simulate/theory.py) against known values, then
the simulated testbed with the ideal network against those formulas.

Part 1 checks each formula where an independent answer exists: a closed form, a
value worked by hand, a second exact method, a numerical integral.
"""

from __future__ import annotations

import math

import pytest
from scipy import integrate, stats

from orchestrator.errors import UsageError
from orchestrator.simulate import theory
from orchestrator.simulate.theory import MDc, MMc

# -- part 1: the formulas ------------------------------------------------------------


def _erlang_c_direct(c: int, a: float) -> float:
    """Erlang C from its definition (the factorial sums), for small c."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def test_erlang_c_known_values():
    # c = 1: an arrival waits iff the server is busy, probability rho.
    assert theory.erlang_c(1, 0.7) == pytest.approx(0.7, rel=1e-14)
    # c = 2: P_Q = 2 rho^2 / (1 + rho) (Harchol-Balter, chapter 14, M/M/2).
    for rho in (0.3, 0.5, 0.9):
        assert theory.erlang_c(2, 2 * rho) == pytest.approx(2 * rho**2 / (1 + rho), rel=1e-13)
    # c = 3, a = 2 by hand: (8/6 * 3) / (1 + 2 + 2 + 4) = 4/9.
    assert theory.erlang_c(3, 2.0) == pytest.approx(4 / 9, rel=1e-14)
    # The Erlang C table's entry for 10 Erlangs on 11 servers: 0.6821.
    assert theory.erlang_c(11, 10.0) == pytest.approx(0.6821, abs=5e-5)
    # The recursion against the factorial sums wherever those are still accurate.
    for c in (4, 16, 32, 64):
        for rho in (0.5, 0.8, 0.9, 0.99):
            assert theory.erlang_c(c, rho * c) == pytest.approx(_erlang_c_direct(c, rho * c), rel=1e-10)


def test_erlang_c_refuses_overload():
    with pytest.raises(UsageError) as e:
        theory.erlang_c(4, 4.0)
    assert e.value.fix
    with pytest.raises(UsageError):
        MMc(16, lam=1.6, mu=0.1)
    with pytest.raises(UsageError):
        MDc(2, lam=0.3, d=10.0)


def test_mmc_with_one_server_is_mm1():
    lam, mu = 0.09, 0.1
    q = MMc(1, lam, mu)
    assert q.mean_sojourn == pytest.approx(theory.mm1_mean_sojourn(lam, mu), rel=1e-12)
    for p in (0.5, 0.9, 0.99, 0.999):
        assert q.sojourn_quantile(p) == pytest.approx(theory.mm1_sojourn_quantile(lam, mu, p), rel=1e-9)
    assert theory.mm1_mean_sojourn(0.5, 1.0) == pytest.approx(2.0)
    assert theory.mm1_sojourn_quantile(0.5, 1.0, 0.99) == pytest.approx(math.log(100) / 0.5)


@pytest.mark.parametrize(("c", "rho"), [(2, 0.5), (16, 0.5), (16, 0.9), (32, 0.8), (32, 0.9)])
def test_mmc_sojourn_distribution_against_its_convolution(c, rho):
    """The closed-form sojourn tail against a numerical convolution of the waiting time
    (atom 1 - C at 0, else Exp(c mu - lam)) with Exp(mu) service, its mean against
    C / (c mu - lam) + 1 / mu, and the quantile against the tail it inverts.
    (c = 2, rho = 0.5 is the case c mu - lam = mu, the Erlang-2 limit.)"""
    mu = 0.1
    q = MMc(c, rho * c * mu, mu)
    cw, th = q.wait_probability, q.theta

    def sf_numeric(t):
        inner = integrate.quad(lambda w: th * math.exp(-th * w) * math.exp(-mu * (t - w)), 0, t)[0]
        return (1 - cw) * math.exp(-mu * t) + cw * (math.exp(-th * t) + inner)

    for t in (1.0, 10.0, 30.0, 80.0, 200.0):
        assert q.sojourn_sf(t) == pytest.approx(sf_numeric(t), rel=1e-8)
    mean = integrate.quad(q.sojourn_sf, 0, math.inf)[0]
    assert mean == pytest.approx(cw / th + 1 / mu, rel=1e-8)
    assert q.mean_sojourn == pytest.approx(cw / th + 1 / mu, rel=1e-12)
    p99 = q.sojourn_quantile(0.99)
    assert q.sojourn_sf(p99) == pytest.approx(0.01, rel=1e-9)


def test_hypoexponential_tail_is_continuous_at_equal_rates():
    mu = 0.1
    at = theory._hypoexp_sf(25.0, mu, mu)
    assert at == pytest.approx((1 + mu * 25.0) * math.exp(-mu * 25.0), rel=1e-14)
    for eps in (1e-3, 1e-7, 1e-12):
        assert theory._hypoexp_sf(25.0, mu * (1 + eps), mu) == pytest.approx(at, rel=10 * eps + 1e-14)


def test_md1_is_pollaczek_khinchine():
    # P-K with constant service d: rho d / (2 (1 - rho)); half of M/M/1's wait.
    d = 10.0
    for rho in (0.1, 0.5, 0.8, 0.9, 0.95):
        lam = rho / d
        pk = rho * d / (2 * (1 - rho))
        assert theory.md1_mean_wait(lam, d) == pytest.approx(pk, rel=1e-14)
        q = MDc(1, lam, d)
        assert q.mean_wait == pytest.approx(pk, rel=1e-10)
        assert q.mean_wait_chain == pytest.approx(pk, rel=1e-9)
        assert q.mean_wait == pytest.approx(MMc(1, lam, 1 / d).mean_wait / 2, rel=1e-10)


def test_md1_waiting_time_distribution_is_erlangs():
    """M/D/1's waiting-time CDF has Erlang's closed form (1909; Kleinrock, chapter 5):
    P(W <= x) = (1 - rho) sum_{k=0}^{floor(x/d)} (lam (k d - x))^k / k! e^{-lam (k d - x)}."""
    d, rho = 10.0, 0.8
    lam = rho / d
    q = MDc(1, lam, d)

    def erlang(x):
        return (1 - rho) * sum(
            (lam * (k * d - x)) ** k / math.factorial(k) * math.exp(-lam * (k * d - x)) for k in range(int(x // d) + 1)
        )

    for x in (0.0, 3.0, 10.0, 17.5, 42.0, 99.0):
        assert q.wait_cdf(x) == pytest.approx(erlang(x), rel=1e-9)


@pytest.mark.parametrize(("c", "rho"), [(2, 0.8), (5, 0.9), (16, 0.5), (16, 0.9), (32, 0.8), (32, 0.9), (8, 0.98)])
def test_mdc_two_exact_methods_agree(c, rho):
    """Franx's roots and the embedded chain are independent computations of one number;
    the waiting-time CDF integrates to the same mean; the truncation is negligible."""
    d = 10.0
    q = MDc(c, rho * c / d, d)
    assert q.truncation_bound < 1e-12
    assert q.mean_wait == pytest.approx(q.mean_wait_chain, rel=1e-8)
    longer = MDc(c, rho * c / d, d, tail=1e-30)
    assert longer.n_max > q.n_max and longer.mean_wait_chain == pytest.approx(q.mean_wait_chain, rel=1e-8)
    # E[W] = integral of P(W > x); the CDF is smooth within each [k d, (k + 1) d).
    k_max = 1 + int(q.wait_quantile(1 - 1e-13) // d)
    mean = sum(integrate.quad(lambda x: 1 - q.wait_cdf(x), k * d, (k + 1) * d)[0] for k in range(k_max))
    assert mean == pytest.approx(q.mean_wait, rel=1e-7, abs=1e-12)
    # P(W = 0) = P(N < c) by PASTA.
    assert q.wait_cdf(0.0) == pytest.approx(q.number_distribution[:c].sum(), rel=1e-12)
    # Constant service waits less than exponential service of the same mean.
    assert q.mean_wait < MMc(c, rho * c / d, 1 / d).mean_wait
    p99 = q.wait_quantile(0.99)
    if p99 > 0:
        assert q.wait_cdf(p99) == pytest.approx(0.99, abs=1e-9)
    assert q.sojourn_quantile(0.99) == pytest.approx(p99 + d)


def test_mdc_against_an_independent_solver():
    """Reference values of an independent M/D/c algorithm: the Q-MAM toolbox's MAP/D/c
    solver (Q_CT_MAP_D_C; Perez, Van Velthoven and Van Houdt, "Q-MAM: a tool for
    solving infinite queues using matrix-analytic methods", VALUETOOLS 2008) with
    Poisson arrivals, as the LINE queueing toolbox (Imperial College London) records
    them for its own tests; Q-MAM's truncation is accurate to about 1e-9."""
    q = MDc(2, lam=2.0, d=0.6)  # rho 0.6
    assert q.mean_number == pytest.approx(1.55164329134673, rel=1e-8)
    assert q.mean_wait == pytest.approx(0.175821645673367, rel=1e-7)
    pi = q.number_distribution
    for j, want in enumerate((0.238685365188794, 0.322629269626472, 0.231148685357196)):
        assert pi[j] == pytest.approx(want, rel=1e-8)
    q = MDc(3, lam=2.0, d=1.2)  # rho 0.8
    assert q.mean_number == pytest.approx(3.72936053685491, rel=1e-8)
    assert q.mean_wait == pytest.approx(0.664680268427454, rel=1e-8)
    assert q.mean_wait_chain == pytest.approx(0.664680268427454, rel=1e-8)
    assert q.number_distribution[0] == pytest.approx(0.0498414304563823, rel=1e-8)
    assert q.number_distribution[3] == pytest.approx(0.181953124332401, rel=1e-8)


def test_mdc_chain_is_the_poisson_chain():
    """The chain's stationary law is invariant under one step N' = max(N - c, 0) + A."""
    q = MDc(4, 0.3, 10.0)
    pi = q.number_distribution
    n = len(pi)
    a = stats.poisson.pmf(range(n), q.a)
    step = [0.0] * n
    for i, pi_i in enumerate(pi):
        base = max(i - q.c, 0)
        for k in range(n - base):
            step[base + k] += pi_i * a[k]
    assert max(abs(x - y) for x, y in zip(step, pi)) < 1e-12


# -- part 2: the simulated testbed against the formulas --------------------------------
#
# The ideal network (no delays, no per-packet cost) leaves the pure queueing model.
# Rain with quota 1: a worker holds at most one token or task, so a task waits in the
# switch until some worker is idle and then goes to it: one central FCFS queue in front
# of c servers. Uniform random push splits the Poisson stream into c independent
# Poisson streams of rate lam / c, each into its own FIFO: c independent M/M/1 queues.
#
# How many tasks. Each check compares an estimate from one finite run with an exact
# value, so the run must be long enough that the estimate's own error stays well under
# the 2% tolerance; a model that is off by 2% then fails. The standard deviations of
# the relative error per million tasks, measured over independent seeds of this model
# (and of a separate FCFS simulation written for the purpose), are about:
#   M/M/c p99       0.3% at loads 0.5 and 0.8; 0.75% at 0.9 with c = 16 (with rare
#                   busy periods that move a million-task estimate by several %),
#                   0.4% at 0.9 with c = 32;
#   M/M/1 mean      0.4% at load 0.5, 1.4% at 0.8 (the sojourn's autocorrelation grows
#                   as 1 / (1 - rho)^2);
#   M/D/c mean W    2% at load 0.9 (c = 16): the waiting time is a small part (16%) of
#                   the response time, and its estimate is the noisiest.
# They shrink as 1 / sqrt(tasks); the sizes below keep each one at or under 0.5%, so
# 2% is at least 4 standard deviations. Several seeds at load 0.9 average over distinct
# sample paths, since one path's rare long busy periods dominate its p99. The seeds
# are fixed, so every run of the suite draws the same numbers.
#
# Warm-up: the run starts empty; 50 ms of simulated time are left out, at least 50
# relaxation times of the slowest queue here (M/M/1 at load 0.8: 1 / (mu (1 - sqrt
# rho)^2) ~ 0.9 ms).

MEAN_NS = 10_000  # exponential or constant service, mean 10 us (the paper's)
WARMUP_NS = 50_000_000
TOLERANCE = 0.02


def _simulate(policy: str, c: int, load: float, tasks: int, seeds: int, service: str = "exp"):
    """Measured latencies (ns) of `seeds` runs of about `tasks` tasks each, pooled, and
    the workers that ran them. Every request must be answered: nothing rejected, lost
    or timed out, or the queue was not the unbounded one theory assumes."""
    import numpy as np

    from orchestrator.simulate import engine
    from orchestrator.simulate.bench import at_load, measured

    lats, workers = [], []
    for seed in range(1, seeds + 1):
        res = engine.run(at_load(policy, c, load, tasks, seed, warmup_ns=WARMUP_NS, service=service))
        assert (res.outcome == 0).all(), f"outcomes {np.bincount(res.outcome)}"
        assert res.counters["EV_REJECT"] == 0
        lats.append(measured(res, WARMUP_NS))
        workers.append(res.worker[res.intended_ns >= WARMUP_NS])
    return np.concatenate(lats).astype(np.float64), np.concatenate(workers)


# (c, load, tasks per seed, seeds)
ERLANG_CASES = [
    (16, 0.5, 1_000_000, 1),
    (16, 0.8, 1_000_000, 1),
    (16, 0.9, 3_000_000, 4),
    (32, 0.5, 1_000_000, 1),
    (32, 0.8, 1_000_000, 1),
    (32, 0.9, 1_500_000, 4),
]


@pytest.mark.parametrize(("c", "load", "tasks", "seeds"), ERLANG_CASES)
def test_rain_quota_1_is_erlang_c(c, load, tasks, seeds):
    """Rain with quota 1 on the ideal network: the p99 (and the mean) response time
    of c workers with exponential 10 us service is M/M/c's."""
    import numpy as np

    lat, _ = _simulate("rain", c, load, tasks, seeds)
    q = MMc(c, load * c / MEAN_NS, 1 / MEAN_NS)
    p99, want = float(np.percentile(lat, 99)), q.sojourn_quantile(0.99)
    assert abs(p99 / want - 1) < TOLERANCE, f"p99 {p99 / 1e3:.3f} us, Erlang C {want / 1e3:.3f} us"
    mean = float(lat.mean())
    assert abs(mean / q.mean_sojourn - 1) < TOLERANCE, f"mean {mean / 1e3:.3f} us, M/M/c {q.mean_sojourn / 1e3:.3f} us"


@pytest.mark.parametrize(("load", "tasks", "seeds"), [(0.5, 1_000_000, 1), (0.8, 2_500_000, 4)])
def test_random_push_is_mm1_per_worker(load, tasks, seeds):
    """Uniform random push of Poisson arrivals: each of the c workers an M/M/1 queue at
    rate lam / c, so the mean response time is 1 / (mu - lam / c); each worker gets
    its 1/c share of the tasks."""
    import numpy as np

    c = 16
    lat, workers = _simulate("random", c, load, tasks, seeds)
    want = theory.mm1_mean_sojourn(load / MEAN_NS, 1 / MEAN_NS)
    mean = float(lat.mean())
    assert abs(mean / want - 1) < TOLERANCE, f"mean {mean / 1e3:.3f} us, M/M/1 {want / 1e3:.3f} us"
    share = np.bincount(workers, minlength=c) / len(workers)
    assert np.all(np.abs(share * c - 1) < 0.01), share


def test_rain_quota_1_constant_service_is_mdc():
    """Rain with quota 1 and constant 10 us service: M/D/c. At load 0.9 with c = 16,
    the mean waiting time (response time - 10 us) and the p99 response time match the
    exact M/D/c values (Crommelin; Franx)."""
    import numpy as np

    c, load = 16, 0.9
    lat, _ = _simulate("rain", c, load, 4_000_000, 4, service="const")
    q = MDc(c, load * c / MEAN_NS, MEAN_NS)
    wait = float(lat.mean()) - MEAN_NS
    assert abs(wait / q.mean_wait - 1) < TOLERANCE, f"mean wait {wait:.1f} ns, M/D/c {q.mean_wait:.1f} ns"
    p99, want = float(np.percentile(lat, 99)), q.sojourn_quantile(0.99)
    assert abs(p99 / want - 1) < TOLERANCE, f"p99 {p99 / 1e3:.3f} us, M/D/c {want / 1e3:.3f} us"
