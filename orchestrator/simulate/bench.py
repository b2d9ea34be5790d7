"""Benchmark: the simulated testbed's C core against a straightforward SimPy model.

    python -m orchestrator.simulate.bench [--tasks N] [--workers C] [--load F] [--quota Q]

One configuration, simulated twice: Rain with token quota Q, C worker threads,
Poisson arrivals at load F of C / (10 us), exponential service with mean 10 us, the
ideal network (no delays, no per-packet cost). Both models run one request the same
way: a task meets a waiting token and goes to that token's worker, or waits in the
switch's queue for the next token; a worker runs its FIFO to completion and sends a
token each time it finishes (and Q at the start). Latency runs from the intended send
time to the reply, the first 10% of the simulated time (the empty-start transient)
left out.

  simpy  `simpy_rain`: how a competent SimPy user writes it (simpy.Store for the
         switch's task and token queues and each worker's FIFO, one process for the
         client, the switch and each worker), run for N tasks;
  core   the simulated testbed (engine.run on a model.SimPoint), run until it has
         simulated at least --core-tasks tasks (default 10 N, at least 1 M) so its
         time is long enough to measure.

It prints for each the simulated tasks per second of CPU time (one core: both are
single-threaded; CPU time, not wall time, so the other processes of a shared machine
do not count), their ratio against the target (>= 20), the mean, p50 and p99 latency
of both, and checks that they agree within --tolerance, so the comparison is of the
same system. The default 3% is three standard deviations of the SimPy run's own
sampling error at the default size (about 1% for each of the three, over seeds).
With quota 1 the system is M/M/c and the Erlang C values are printed too.

Then it times one paper-scale point on the core: 32 worker threads (2 hosts x 16),
2.9 M tasks/s offered (exponential 10 us: load 2.9 / 3.2), 80% of tasks inline and 20%
carrying 64 bytes (pre-written by RDMA when they wait, as in fig6b), quota 2, the
paper's network (model.Network.paper()), --paper-s simulated seconds after a 0.1 s
warm-up: once with static quotas (the core alone) and once with Algorithm 1 (the
paper's parameters, as the figure specs run Rain: the core paused every 10 ms control
interval while the agent's Python Controller decides). The issue's bound for one such
point is 60 s on one core.

Exit status 0; 1 when the two models disagree (then the comparison is not of one
system: a bug in one of them).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..errors import RainmakerError, UsageError

MEAN_NS = 10_000  # the paper's service time mean (10 us)
QUEUE_CAPACITY = 1 << 17  # the switch's task entries (Rain, section 4: 128K): never reached here
TARGET = 20.0  # the target: the core at least 20x SimPy's tasks per second per core
PAPER_RPS = 2.9e6  # the paper-scale point: 2.9 M tasks/s offered to 32 worker threads
PAPER_HOSTS, PAPER_THREADS = 2, 16
PAPER_LIMIT_S = 60.0  # the bound for one paper-scale point on one core


@dataclass
class Side:
    """One model's run: what it simulated, its CPU time, its measured latencies (ns)."""

    name: str
    tasks: int  # tasks simulated (warm-up included)
    cpu_s: float
    latency_ns: np.ndarray  # answered requests after the warm-up

    @property
    def rate(self) -> float:
        return self.tasks / self.cpu_s if self.cpu_s > 0 else float("inf")

    def stats_us(self) -> tuple[float, float, float]:
        lat = self.latency_ns
        return float(lat.mean()) / 1e3, float(np.percentile(lat, 50)) / 1e3, float(np.percentile(lat, 99)) / 1e3


# -- the SimPy model -------------------------------------------------------------------


def simpy_rain(workers: int, quota: int, rate_per_ns: float, mean_ns: float, tasks: int, seed: int) -> np.ndarray:
    """Rain on the ideal network in SimPy: `tasks` Poisson arrivals at `rate_per_ns`
    with Exp(mean_ns) service; returns each task's latency (ns), in send order."""
    try:
        import simpy
    except ImportError:
        raise RainmakerError(
            "the benchmark's SimPy model needs the simpy package",
            fix="run `make setup` (it installs the test extras, simpy among them), or pip install simpy",
        ) from None

    env = simpy.Environment()
    task_queue = simpy.Store(env)  # the switch's bidirectional queue: its task side ...
    token_queue = simpy.Store(env)  # ... and its token side (worker ids)
    fifos = [simpy.Store(env) for _ in range(workers)]  # each worker thread's local FIFO
    rng = random.Random(seed)
    latency = np.empty(tasks)
    finished = env.event()
    done = 0

    def client():
        for i in range(tasks):
            yield env.timeout(rng.expovariate(rate_per_ns))
            task_queue.put((i, env.now, rng.expovariate(1.0 / mean_ns)))

    def switch():
        # A waiting token takes the next task; a task waits for the next token.
        while True:
            w = yield token_queue.get()
            task = yield task_queue.get()
            fifos[w].put(task)

    def worker(w: int):
        nonlocal done
        for _ in range(quota):
            token_queue.put(w)
        while True:
            i, sent, service = yield fifos[w].get()
            yield env.timeout(service)
            latency[i] = env.now - sent
            done += 1
            if done == tasks:
                finished.succeed()
            token_queue.put(w)

    env.process(client())
    env.process(switch())
    for w in range(workers):
        env.process(worker(w))
    env.run(until=finished)
    return latency


def run_simpy(workers: int, quota: int, load: float, tasks: int, seed: int) -> Side:
    rate = load * workers / MEAN_NS
    t = time.process_time()
    lat = simpy_rain(workers, quota, rate, MEAN_NS, tasks, seed)
    cpu = time.process_time() - t
    return Side("simpy", tasks, cpu, lat[tasks // 10 :])


# -- the core --------------------------------------------------------------------------


def core_point(
    *,
    workers: int,
    quota: int,
    rate_rps: float,
    warmup_ns: int,
    measure_ns: int,
    seed: int,
    service: str = "exp",
    hosts: int = 1,
    network=None,
    large_fraction: float = 0.0,
    policy: str = "rain",
    point_id: str = "bench",
    params: dict | None = None,
):
    """A SimPoint of one class with mean-10-us service ("exp" or "const"), Poisson
    arrivals at rate_rps, `workers` threads over `hosts` hosts, one slice, no
    admission cap, a queue that never fills and a timeout no request reaches. `params`:
    the policy's parameters, as a point's (its Policy.params reads them)."""
    from .model import ClassModel, Network, PhaseModel, ServiceModel, SimPoint

    if workers % hosts:
        raise UsageError(f"{workers} worker threads do not split over {hosts} hosts", fix="use a multiple")
    return SimPoint(
        point_id=point_id,
        policy=policy,
        worker_hosts=hosts,
        threads_per_host=workers // hosts,
        worker_slices=(0,) * workers,
        quota=quota,
        queue_capacity=QUEUE_CAPACITY,
        classes=(
            ClassModel(
                name="task",
                weight=1.0,
                task_type=0,
                slice=0,
                service=ServiceModel(kind=service, a_ns=MEAN_NS),
                payload_bytes=8,
                large_fraction=large_fraction,
                large_bytes=64,
            ),
        ),
        arrival="poisson",
        phases=(PhaseModel(at_ns=0, rate_rps=rate_rps, classes=(0,)),),
        warmup_ns=warmup_ns,
        measure_ns=measure_ns,
        timeout_ns=10_000_000_000,
        max_outstanding=0,
        network=network if network is not None else Network.ideal(),
        seed=seed,
        adaptive=None,
        policy_params=params or {},
    )


def at_load(
    policy: str, workers: int, load: float, tasks: int, seed: int, *, warmup_ns: int, service: str = "exp",
    params: dict | None = None,
):  # fmt: skip
    """core_point at `load` of the workers' capacity (mean 10 us, one host, quota 1),
    measuring about `tasks` tasks after `warmup_ns`: the theory checks' point."""
    rate = load * workers / MEAN_NS * 1e9
    return core_point(
        workers=workers,
        quota=1,
        rate_rps=rate,
        warmup_ns=warmup_ns,
        measure_ns=int(tasks / rate * 1e9),
        seed=seed,
        service=service,
        policy=policy,
        params=params,
    )


def measured(result, warmup_ns: int) -> np.ndarray:
    """Latencies (ns) of the requests answered whose intended send time is past the warm-up."""
    keep = (result.outcome == 0) & (result.intended_ns >= warmup_ns)
    return result.latency_ns[keep]


def run_core(workers: int, quota: int, load: float, tasks: int, seed: int) -> Side:
    """The core on the same configuration, repeated with further seeds until it has
    simulated at least `tasks` tasks and spent at least 0.5 s of CPU time."""
    from . import engine

    rate = load * workers / MEAN_NS * 1e9
    per_run = min(tasks, 5_000_000)
    total_ns = int(per_run / rate * 1e9)
    warmup = total_ns // 10
    done, cpu, lats, run = 0, 0.0, [], 0
    while done < tasks or cpu < 0.5:
        sp = core_point(
            workers=workers, quota=quota, rate_rps=rate, warmup_ns=warmup, measure_ns=total_ns - warmup, seed=seed + run
        )
        t = time.process_time()
        res = engine.run(sp)
        cpu += time.process_time() - t
        done += len(res.intended_ns)
        lats.append(measured(res, warmup).astype(np.float64))
        run += 1
    return Side("core", done, cpu, np.concatenate(lats))


# Algorithm 1 with the paper's parameters (Rain, section 3.3 and the fig6 specs):
# S_th 10, R_th 0.5, n_max 8, a sample every 10 us, K = 1000 samples per decision.
PAPER_ADAPTIVE = {"s_th": 10, "r_th": 0.5, "n_max": 8, "sample_interval_us": 10, "k_samples": 1000}


def paper_point(simulated_s: float, seed: int = 1, adaptive: bool = False):
    """One paper-scale point on the core: (SimResult, CPU s, wall s)."""
    from dataclasses import replace

    from . import engine
    from .model import Network

    sp = core_point(
        workers=PAPER_HOSTS * PAPER_THREADS,
        hosts=PAPER_HOSTS,
        quota=2,
        rate_rps=PAPER_RPS,
        warmup_ns=100_000_000,
        measure_ns=int(simulated_s * 1e9),
        seed=seed,
        network=Network.paper(),
        large_fraction=0.2,
        point_id="paper-scale",
    )
    if adaptive:
        sp = replace(sp, adaptive=dict(PAPER_ADAPTIVE))
    t, w = time.process_time(), time.perf_counter()
    res = engine.run(sp)
    return res, time.process_time() - t, time.perf_counter() - w


# -- the report ------------------------------------------------------------------------


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m orchestrator.simulate.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--tasks", type=int, default=200_000, help="tasks the SimPy model simulates (default 200000)")
    ap.add_argument("--core-tasks", type=int, help="tasks the core simulates (default 10 x --tasks, at least 1 M)")
    ap.add_argument("--workers", type=int, default=32, help="worker threads (default 32)")
    ap.add_argument("--load", type=float, default=0.9, help="offered load, a fraction of capacity (default 0.9)")
    ap.add_argument("--quota", type=int, default=2, help="each worker's token quota (default 2, the paper's specs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=0.03, help="agreement required of mean, p50, p99 (0.03: 3%%)")
    ap.add_argument(
        "--paper-s", type=float, default=1.0, help="simulated seconds of the paper-scale point (0: skip it; default 1)"
    )
    args = ap.parse_args(argv)
    try:
        return _bench(args)
    except RainmakerError as e:
        print(f"error: {e.render()}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1


def _bench(args) -> int:
    if args.tasks < 1000 or args.workers < 1 or args.quota < 1 or not 0 < args.load < 1:
        raise UsageError(
            "bench needs --tasks >= 1000, --workers >= 1, --quota >= 1 and 0 < --load < 1",
            fix="e.g. python -m orchestrator.simulate.bench --tasks 200000 --workers 32 --load 0.9",
        )
    core_tasks = args.core_tasks or max(10 * args.tasks, 1_000_000)
    rate = args.load * args.workers / MEAN_NS  # tasks per ns
    print(
        f"Rain, quota {args.quota}, {args.workers} worker threads, exponential service mean {MEAN_NS / 1e3:g} us, "
        f"load {args.load:g} ({rate * 1e3:.4g} M tasks/s), Poisson arrivals, ideal network"
    )
    sides = [
        run_simpy(args.workers, args.quota, args.load, args.tasks, args.seed),
        run_core(args.workers, args.quota, args.load, core_tasks, args.seed),
    ]
    print(f"{'model':<8}{'tasks':>12}{'CPU s':>9}{'tasks/s/core':>15}{'mean us':>10}{'p50 us':>9}{'p99 us':>9}")
    for s in sides:
        mean, p50, p99 = s.stats_us()
        print(f"{s.name:<8}{s.tasks:>12,}{s.cpu_s:>9.2f}{s.rate:>15,.0f}{mean:>10.3f}{p50:>9.3f}{p99:>9.3f}")
    if args.quota == 1:
        from .theory import MMc

        q = MMc(args.workers, rate, 1.0 / MEAN_NS)
        mean, p99 = q.mean_sojourn / 1e3, q.sojourn_quantile(0.99) / 1e3
        print(f"{'M/M/c':<8}{'':>12}{'':>9}{'':>15}{mean:>10.3f}{q.sojourn_quantile(0.5) / 1e3:>9.3f}{p99:>9.3f}")
    simpy_side, core_side = sides
    ratio = core_side.rate / simpy_side.rate
    print(f"ratio core / simpy: {ratio:,.0f}x (target >= {TARGET:g}x: {'met' if ratio >= TARGET else 'NOT met'})")
    diffs = [_rel(c, s) for c, s in zip(core_side.stats_us(), simpy_side.stats_us())]
    agree = max(diffs) <= args.tolerance
    print(
        f"agreement: mean {diffs[0]:.2%}, p50 {diffs[1]:.2%}, p99 {diffs[2]:.2%} "
        f"({'within' if agree else 'NOT within'} {args.tolerance:.0%})"
    )
    if args.paper_s > 0:
        print(
            f"paper-scale point: {PAPER_HOSTS * PAPER_THREADS} worker threads ({PAPER_HOSTS} hosts x {PAPER_THREADS}), "
            f"{PAPER_RPS / 1e6:g} M tasks/s offered, exponential 10 us, 20% of tasks 64 bytes, quota 2, paper network, "
            f"{args.paper_s:g} s simulated after a 0.1 s warm-up (bound {PAPER_LIMIT_S:g} s of CPU)"
        )
        for adaptive in (False, True):
            res, cpu, wall = paper_point(args.paper_s, args.seed, adaptive=adaptive)
            lat = measured(res, 100_000_000)
            print(
                f"  {'Algorithm 1' if adaptive else 'static quota':<13}{len(res.intended_ns):>12,} tasks"
                f"{res.events:>14,} events{cpu:>9.2f} s CPU{wall:>9.2f} s wall"
                f"  p99 {np.percentile(lat, 99) / 1e3:.2f} us  ({'met' if cpu <= PAPER_LIMIT_S else 'NOT met'})"
            )
    if not agree:
        print("the two models disagree: they do not simulate the same system (a bug in one of them)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
