"""Exact queueing formulas the simulated testbed is checked against.

With the ideal network (no delays, no per-packet cost) the model reduces to textbook
queues, so its measurements must match these formulas:

  Rain, quota 1      a central FCFS queue in front of c workers: M/M/c (`MMc`) with
                     exponential service, M/D/c (`MDc`) with constant service;
  uniform random     each worker an M/M/1 queue with arrival rate lambda / c (`mm1_*`).

Every function takes rates and times in one unit of the caller's choice (the tests use
microseconds); `lam` is the arrival rate, `mu` the service rate of one server, `d` a
constant service time. Sojourn (response) time = waiting time + service time.

References, by the short names used below:
  Kleinrock   L. Kleinrock, Queueing Systems, Volume 1: Theory. Wiley, 1975.
  Harchol     M. Harchol-Balter, Performance Modeling and Design of Computer Systems.
              Cambridge University Press, 2013.
  Tijms       H. C. Tijms, A First Course in Stochastic Models. Wiley, 2003.
  Crommelin   C. D. Crommelin, Delay probability formulae when the holding times are
              constant. Post Office Electrical Engineers' Journal 25 (1932), 41-50.
  Franx       G. J. Franx, A simple solution for the M/D/c waiting time distribution.
              Operations Research Letters 29 (2001), 221-229.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import optimize, sparse, special, stats
from scipy.sparse import linalg as splinalg

from ..errors import UsageError

__all__ = ["MDc", "MMc", "erlang_b", "erlang_c", "md1_mean_wait", "mm1_mean_sojourn", "mm1_sojourn_quantile"]


def _stable(c: int, lam: float, service_rate: float, what: str) -> float:
    """rho = lam / (c * service_rate), refusing what has no steady state."""
    if c < 1 or lam <= 0 or service_rate <= 0:
        raise UsageError(
            f"{what}: needs c >= 1 servers and positive rates (got c={c}, lam={lam}, rate={service_rate})",
            fix="pass the number of servers, the arrival rate and the service rate (or time) of one server",
        )
    rho = lam / (c * service_rate)
    if rho >= 1:
        raise UsageError(
            f"{what}: load rho = {rho:.4g} >= 1 has no steady state",
            fix="use an arrival rate below c times the service rate of one server",
        )
    return rho


def erlang_b(c: int, a: float) -> float:
    """Erlang's loss formula B(c, a) for offered load a = lam / mu Erlangs, by the
    recursion B(k) = a B(k-1) / (k + a B(k-1)), B(0) = 1, which stays accurate for
    hundreds of servers where the factorial form overflows (Tijms, the Erlang loss model)."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


def erlang_c(c: int, a: float) -> float:
    """Erlang's delay formula C(c, a): the probability that an arrival to M/M/c waits,
    for offered load a = lam / mu < c (Kleinrock, section 3.5; Harchol, chapter 14,
    P_Q). Computed as C = B / (1 - rho (1 - B)) from Erlang B (Tijms, the Erlang delay model)."""
    if not 0 < a < c:
        raise UsageError(
            f"Erlang C: offered load a = {a:.4g} must lie in (0, c = {c})",
            fix="use an arrival rate below c times the service rate",
        )
    b = erlang_b(c, a)
    rho = a / c
    return b / (1.0 - rho * (1.0 - b))


def _hypoexp_sf(t: float, theta: float, mu: float) -> float:
    """P(X + Y > t) for independent X ~ Exp(theta), Y ~ Exp(mu) (hypoexponential).

    The textbook form (theta e^{-mu t} - mu e^{-theta t}) / (theta - mu) cancels
    catastrophically as theta -> mu; written as e^{-mu t} (1 + mu (1 - e^{-dt}) / d)
    with d = theta - mu it is exact for every d and becomes the Erlang-2 tail
    (1 + mu t) e^{-mu t} at d = 0."""
    if t <= 0:
        return 1.0
    d = theta - mu
    ratio = t if d == 0 else -math.expm1(-d * t) / d
    return math.exp(-mu * t) * (1.0 + mu * ratio)


def _quantile(sf, p: float, scale: float) -> float:
    """The p-quantile of a continuous distribution above its atom at 0, from its
    survival function, by bracketing then Brent's method to 1e-12 relative."""
    if not 0 < p < 1:
        raise UsageError(f"quantile p = {p} must lie in (0, 1)", fix="pass e.g. 0.99 for the p99")
    target = 1.0 - p
    if sf(0.0) <= target:
        return 0.0
    hi = scale
    while sf(hi) > target:
        hi *= 2.0
    return optimize.brentq(lambda t: sf(t) - target, 0.0, hi, xtol=1e-14 * hi, rtol=1e-12, maxiter=200)


@dataclass(frozen=True)
class MMc:
    """M/M/c FCFS: Poisson arrivals at rate lam, c servers, Exp(mu) service.

    The waiting time W is 0 with probability 1 - C and Exp(c mu - lam) otherwise
    (Kleinrock, section 3.5 and its exercises; Harchol, chapter 14), so the sojourn
    time T = W + S with S ~ Exp(mu) independent of W has
        P(T > t) = (1 - C) e^{-mu t} + C P(Exp(c mu - lam) + Exp(mu) > t)
    whose second term is the hypoexponential tail (its c mu - lam = mu case is the
    Erlang-2 limit, `_hypoexp_sf`)."""

    c: int
    lam: float
    mu: float

    def __post_init__(self):
        _stable(self.c, self.lam, self.mu, "M/M/c")

    @property
    def rho(self) -> float:
        return self.lam / (self.c * self.mu)

    @cached_property
    def wait_probability(self) -> float:
        """Erlang C: P(W > 0)."""
        return erlang_c(self.c, self.lam / self.mu)

    @property
    def theta(self) -> float:
        """The rate of the waiting time given that it is positive: c mu - lam."""
        return self.c * self.mu - self.lam

    @property
    def mean_wait(self) -> float:
        """E[W] = C / (c mu - lam)."""
        return self.wait_probability / self.theta

    @property
    def mean_sojourn(self) -> float:
        return self.mean_wait + 1.0 / self.mu

    def wait_sf(self, t: float) -> float:
        """P(W > t) = C e^{-(c mu - lam) t} for t >= 0."""
        return self.wait_probability * math.exp(-self.theta * t) if t >= 0 else 1.0

    def wait_quantile(self, p: float) -> float:
        """The p-quantile of W: 0 when p <= 1 - C, else ln(C / (1 - p)) / (c mu - lam)."""
        if not 0 < p < 1:
            raise UsageError(f"quantile p = {p} must lie in (0, 1)", fix="pass e.g. 0.99 for the p99")
        cw = self.wait_probability
        return 0.0 if 1.0 - p >= cw else math.log(cw / (1.0 - p)) / self.theta

    def sojourn_sf(self, t: float) -> float:
        """P(T > t)."""
        if t <= 0:
            return 1.0
        cw = self.wait_probability
        return (1.0 - cw) * math.exp(-self.mu * t) + cw * _hypoexp_sf(t, self.theta, self.mu)

    def sojourn_cdf(self, t: float) -> float:
        return 1.0 - self.sojourn_sf(t)

    def sojourn_quantile(self, p: float) -> float:
        """The p-quantile of T (e.g. p = 0.99: the p99 response time), by root finding."""
        return _quantile(self.sojourn_sf, p, scale=1.0 / min(self.mu, self.theta))


def mm1_mean_sojourn(lam: float, mu: float) -> float:
    """M/M/1: E[T] = 1 / (mu - lam) (Kleinrock, section 3.2)."""
    _stable(1, lam, mu, "M/M/1")
    return 1.0 / (mu - lam)


def mm1_sojourn_quantile(lam: float, mu: float, p: float) -> float:
    """M/M/1: T ~ Exp(mu - lam) (Kleinrock, section 3.2), so its p-quantile is
    -ln(1 - p) / (mu - lam)."""
    _stable(1, lam, mu, "M/M/1")
    if not 0 < p < 1:
        raise UsageError(f"quantile p = {p} must lie in (0, 1)", fix="pass e.g. 0.99 for the p99")
    return -math.log1p(-p) / (mu - lam)


def md1_mean_wait(lam: float, d: float) -> float:
    """M/D/1: the Pollaczek-Khinchine mean waiting time with constant service,
    E[W] = rho d / (2 (1 - rho)), rho = lam d: lam E[S^2] / (2 (1 - rho)) with
    E[S^2] = d^2 (Kleinrock, chapter 5; Harchol, chapter 23)."""
    rho = _stable(1, lam, 1.0 / d if d > 0 else 0.0, "M/D/1")
    return rho * d / (2.0 * (1.0 - rho))


@dataclass(frozen=True)
class MDc:
    """M/D/c FCFS: Poisson arrivals at rate lam, c servers, constant service time d.

    Two exact methods, each a check on the other:

    `mean_wait` (Crommelin; Franx): the number in system N has the generating function
        P(z) = (c - a)(z - 1) e^{a(z-1)} / (z^c - e^{a(z-1)}) * prod_r (z - z_r) / (1 - z_r)
    with a = lam d and z_1..z_{c-1} the roots of z^c = e^{a(z-1)} inside the unit
    disc other than 1; z_r = -W0(-rho w_r e^{-rho}) / rho with w_r = e^{2 pi i r / c}
    (Lambert's W, principal branch). Differentiating at z = 1:
        E[N] = a + (a^2 - c(c-1)) / (2 (c - a)) + sum_r 1 / (1 - z_r),
    and E[W] = (E[N] - a) / lam by Little's law. With c = 1 this is the
    Pollaczek-Khinchine mean (`md1_mean_wait`).

    `number_distribution`, `mean_wait_chain` and `wait_cdf` (Crommelin's embedded
    chain): every customer in service at time t has left by t + d and nobody who starts
    after t has, so N(t + d) = max(N(t) - c, 0) + A with A ~ Poisson(a), a Markov chain
    whose stationary law is that of N at any time.
    It is solved numerically on 0..n_max, the mass beyond n_max folded into n_max.
    The waiting time follows from it (derived in `wait_cdf`, Crommelin's formula):
        P(W <= k d + u) = P(max(N - c, 0) + Poisson(lam (d - u)) <= (k + 1) c - 1),
    for k = 0, 1, ... and 0 <= u < d.

    Truncation: past c, P(N = j) decays geometrically, as P(N = c) z0^-(j - c) for
    large j, where z0 > 1 is the root of z^c = e^{a(z-1)} outside the disc,
    z0 = -W_{-1}(-rho e^{-rho}) / rho. n_max is set so that z0^-(n_max - c) < `tail`
    (1e-15 by default): the mass cut off, and its share of E[N], are then of the order
    of `tail` / (1 - 1/z0)^2 (`truncation_bound`), far under any test's tolerance; a
    run with a smaller `tail` gives the same mean to 1e-8, the sparse solve's own
    precision (the tests check it).
    """

    c: int
    lam: float
    d: float
    tail: float = 1e-15

    def __post_init__(self):
        _stable(self.c, self.lam, 1.0 / self.d if self.d > 0 else 0.0, "M/D/c")

    @property
    def a(self) -> float:
        """Offered load lam d (Erlangs)."""
        return self.lam * self.d

    @property
    def rho(self) -> float:
        return self.a / self.c

    # -- Crommelin / Franx: the roots ------------------------------------------------

    @cached_property
    def roots(self) -> np.ndarray:
        """z_1..z_{c-1}: the roots of z^c = e^{a(z-1)} with |z| < 1 (z = 1 excluded)."""
        rho = self.rho
        r = np.arange(1, self.c)
        w = np.exp(2j * np.pi * r / self.c)
        return -special.lambertw(-rho * w * math.exp(-rho), 0) / rho

    @property
    def mean_number(self) -> float:
        """E[N], the mean number in system (Franx; Crommelin)."""
        a, c = self.a, self.c
        s = float(np.sum(1.0 / (1.0 - self.roots)).real)
        return a + (a * a - c * (c - 1)) / (2.0 * (c - a)) + s

    @property
    def mean_wait(self) -> float:
        """E[W] from the roots: (E[N] - a) / lam."""
        return (self.mean_number - self.a) / self.lam

    @property
    def mean_sojourn(self) -> float:
        return self.mean_wait + self.d

    # -- the embedded chain -------------------------------------------------------

    @property
    def decay(self) -> float:
        """z0 > 1: P(N = j) ~ K z0^-j for large j."""
        rho = self.rho
        return float((-special.lambertw(-rho * math.exp(-rho), -1) / rho).real)

    @cached_property
    def n_max(self) -> int:
        """The chain's last state: z0^-(n_max - c) < tail."""
        return self.c + math.ceil(math.log(self.tail) / -math.log(self.decay)) + self.c

    @property
    def truncation_bound(self) -> float:
        """An estimate (from the geometric tail, P(N = c) <= 1) of the probability mass,
        and of the relative share of E[N], that the truncation at n_max leaves out."""
        z = self.decay
        return z ** -(self.n_max - self.c) / (1.0 - 1.0 / z) ** 2

    @cached_property
    def number_distribution(self) -> np.ndarray:
        """P(N = j), j = 0..n_max: the stationary law of the chain N' = max(N - c, 0) + A."""
        n, c, a = self.n_max, self.c, self.a
        kmax = n + 1
        pmf = stats.poisson.pmf(np.arange(kmax), a)
        sf = stats.poisson.sf(np.arange(kmax) - 1, a)  # P(A >= k)
        rows, cols, vals = [], [], []
        for i in range(n + 1):
            base = max(i - c, 0)
            m = n - base  # arrivals that reach n_max: everything >= m is folded into n_max
            ks = np.arange(m + 1)
            v = pmf[: m + 1].copy()
            v[m] = sf[m]
            keep = v > 0
            rows.append(np.full(int(keep.sum()), i))
            cols.append(base + ks[keep])
            vals.append(v[keep])
        p = sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n + 1, n + 1)
        )
        # pi (P - I) = 0 with sum(pi) = 1: transpose, replace one equation by the sum.
        m = (p.T - sparse.identity(n + 1)).tolil()
        m[n, :] = np.ones(n + 1)
        rhs = np.zeros(n + 1)
        rhs[n] = 1.0
        pi = splinalg.spsolve(m.tocsc(), rhs)
        pi = np.clip(pi, 0.0, None)
        return pi / pi.sum()

    @property
    def mean_wait_chain(self) -> float:
        """E[W] from the chain: E[max(N - c, 0)] / lam (Little's law)."""
        pi = self.number_distribution
        excess = np.arange(len(pi)) - self.c
        return float(np.sum(pi[excess > 0] * excess[excess > 0])) / self.lam

    @cached_property
    def _excess(self) -> np.ndarray:
        """q_i = P(max(N - c, 0) = i)."""
        pi = self.number_distribution
        q = pi[self.c :].copy()
        q[0] = pi[: self.c + 1].sum()
        return q

    def wait_cdf(self, x: float) -> float:
        """P(W <= x) (Crommelin).

        Take an arrival at time t and write x = k d + u, 0 <= u < d. FCFS with equal
        service times keeps departures in arrival order, so the arrival has started by
        t + x iff fewer than c earlier customers remain then. Of the earlier customers
        present at time s >= t, c (or all, if fewer) leave by s + d; so the count at
        t + x is max(M - k c, 0) with M the count at t + u, and M = max(N - c, 0) + A
        with N the number present at t + u - d (stationary, by PASTA) and A ~
        Poisson(lam (d - u)) the arrivals in (t + u - d, t). Hence
            P(W <= x) = P(max(N - c, 0) + A <= (k + 1) c - 1)."""
        if x < 0:
            return 0.0
        k, u = divmod(x, self.d)
        limit = (int(k) + 1) * self.c - 1
        q = self._excess
        i = np.arange(min(limit + 1, len(q)))
        return float(np.sum(q[i] * stats.poisson.cdf(limit - i, self.lam * (self.d - u))))

    def wait_quantile(self, p: float) -> float:
        """The p-quantile of W."""
        return _quantile(lambda t: 1.0 - self.wait_cdf(t), p, scale=self.d)

    def sojourn_quantile(self, p: float) -> float:
        """The p-quantile of T = W + d."""
        return self.wait_quantile(p) + self.d
