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
