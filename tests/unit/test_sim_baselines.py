"""The four baselines in the simulated testbed (core/policy_{r2p2,racksched,draconis,
pallas}.c): each one's dispatch rule on small points, and all five systems on a
fig6-like point. Small points: the file runs in a few seconds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from orchestrator.experiment.plan import TestbedShape, plan
from orchestrator.experiment.spec import load
from orchestrator.simulate import engine
from orchestrator.simulate.engine import SimError
from orchestrator.simulate.model import ClassModel, Network, PhaseModel, ServiceModel, build
from orchestrator.simulate.runner import Options, simulated_spec

from .test_sim_core import point

REPO = Path(__file__).resolve().parents[2]
CONST10 = ClassModel("c", 1.0, 0, 0, ServiceModel("const", 10_000), 8, 0.0, 64)


def r2p2(n=1, **kw):
    params = {"jbsq_n": n, **kw.pop("params", {})}
    return point(policy="r2p2", quota=1, policy_params=params, **kw)


def test_r2p2_never_holds_more_than_n_and_counts_its_recirculations():
    r = engine.run(r2p2(1, load=0.8))
    c, n_req = r.counters, len(r.intended_ns)
    assert np.all(r.outcome == 0)
    assert c["max_held"] == 1  # JBSQ(1): a worker holds one task at most
    assert c["EV_DISPATCH_DIRECT"] == n_req and c["EV_REJECT"] == 0
    # at 80% load (of JBSQ(1)'s ~88% here) most workers are at the bound: tasks go round
    assert c["recirculations"] > n_req
    # a REPORT per worker at start and after each task
    assert n_req <= c["reports"] - 8 <= n_req
    assert sum(c["tokens_sent"]) == 0
    # n = 2: the bound is reached (and can be passed: a REPORT sent while a DISPATCH is on
    # its way overwrites the switch's count, as on the switch)
    assert engine.run(r2p2(2, load=0.9)).counters["max_held"] >= 2


def test_r2p2_pass_bound_rejects_and_passes_take_time():
    # one pass allowed: a task whose worker is at the bound is rejected at once
    r = engine.run(r2p2(1, load=0.8, params={"max_passes": 1}))
    c = r.counters
    assert c["recirculations"] == 0 and c["EV_REJECT"] > 0
    assert c["EV_REJECT"] + c["EV_DISPATCH_DIRECT"] == len(r.intended_ns)
    assert np.count_nonzero(r.outcome == 1) == c["EV_REJECT"]
    # a slower pass (10 us instead of 1 us) makes recirculated tasks wait longer
    fast = engine.run(r2p2(1, load=0.7))
    slow = engine.run(r2p2(1, load=0.7, params={"recirc_ns": 10_000}))
    assert np.percentile(slow.latency_ns, 99) > np.percentile(fast.latency_ns, 99) + 5_000


def test_racksched_sends_to_the_less_loaded_of_two():
    # two workers, an ideal network (reports are exact): a burst of tasks 1 us apart, each
    # ~100 us: each goes to the shorter queue, so they differ by one at a dispatch and
    # by two at most (a task finishes on one side); random push lets them drift apart
    slow = ClassModel("s", 1.0, 0, 0, ServiceModel("const", 100_003), 8, 0.0, 64)
    kw = dict(
        hosts=1,
        threads=2,
        classes=(slow,),
        net=Network.ideal(),
        arrival="constant",
        phases=(PhaseModel(0, 1e6, (0,)),),
        measure_ns=300_000,
        sample_period_ns=10_007,
    )
    r = engine.run(point(policy="racksched", policy_params={"k": 2}, **kw))
    diffs = [abs(ws[0]["fifo"] - ws[1]["fifo"]) for _, ws in r.worker_series]
    assert max(diffs) <= 2 and max(ws[0]["fifo"] for _, ws in r.worker_series) > 100
    done = r.counters["tasks_done"]
    assert abs(done[0] - done[1]) <= 1 and r.counters["reports"] == 300 + 2
    rnd = engine.run(point(policy="random", **kw))
    assert max(abs(ws[0]["fifo"] - ws[1]["fifo"]) for _, ws in rnd.worker_series) >= 4
    # power-of-2 keeps the worst queue far shorter than random push at the same load
    p2 = engine.run(point(policy="racksched", policy_params={"k": 2}, load=0.9, quota=1))
    rn = engine.run(point(policy="random", load=0.9, quota=1))
    assert p2.counters["max_held"] * 2 < rn.counters["max_held"]
    assert np.percentile(p2.latency_ns, 99) < np.percentile(rn.latency_ns, 99)


def test_draconis_empty_pulls_and_the_fetch_round_trip():
    half = ClassModel("h", 1.0, 0, 0, ServiceModel("const", 10_000), 8, 0.5, 64)
    net = Network.paper()
    r = engine.run(point(policy="draconis", quota=1, classes=(half,), load=0.1, arrival="constant"))
    c, n_req = r.counters, len(r.intended_ns)
    assert np.all(r.outcome == 0) and c["max_held"] == 1
    # idle workers pull again and again: most pulls find no task and are answered EMPTY
    assert c["empties"] > n_req and c["EV_DISPATCH_QUEUED"] == n_req
    in_flight = sum(c["tokens_sent"]) - c["EV_DISPATCH_QUEUED"] - c["empties"]
    assert 0 <= in_flight <= 8  # at most one pull per worker thread at a time
    assert c["fetches"] == r.large.sum() > 0
    # a large task's worker fetches the payload from the client first: one round trip
    # through the switch more (and the thread's tx of the FETCH)
    rtt = 2 * (net.switch_worker_ns + net.switch_pkt_ns + net.client_switch_ns) + net.worker_pkt_ns
    extra = np.median(r.latency_ns[r.large]) - np.median(r.latency_ns[~r.large])
    assert rtt < extra < rtt + 150  # + the frames' serialisation and the pull's phase
    # a full queue rejects
    full = engine.run(point(policy="draconis", quota=1, queue_capacity=0, load=0.5))
    assert full.counters["EV_REJECT"] == len(full.intended_ns) and full.counters["EV_TASK_QUEUED"] == 0


def test_pallas_a_type_reaches_only_its_pool_in_round_robin_order():
    a = dataclasses.replace(CONST10, name="a", slice=0)
    b = dataclasses.replace(CONST10, name="b", slice=1, large_fraction=0.3)
    orphan = dataclasses.replace(CONST10, name="o", slice=2, weight=0.1)
    sp = point(policy="pallas", quota=1, classes=(a, b, orphan), worker_slices=(0, 0, 0, 0, 1, 1, 1, 1), load=0.5)
    r = engine.run(sp)
    ok = r.outcome == 0
    assert np.all(ok[r.cls != 2]) and np.all(r.outcome[r.cls == 2] == 1)  # no pool: rejected
    assert set(r.worker[r.cls == 0]) == {0, 1, 2, 3} and set(r.worker[r.cls == 1]) == {4, 5, 6, 7}
    # in arrival order, each pool's tasks take its threads in turn (every weight 1)
    for cls, first in ((0, 0), (1, 4)):
        w = r.worker[r.cls == cls]
        assert np.array_equal(w, first + np.arange(len(w)) % 4)
    assert r.counters["EV_REJECT"] == np.count_nonzero(r.cls == 2) and sum(r.counters["tokens_sent"]) == 0


@pytest.mark.parametrize(
    "policy, params, words",
    [("r2p2", {"jbsq_n": 0}, "JBSQ bound"), ("racksched", {"k": 3}, "k = 2")],
)
def test_unsupported_baseline_parameters_are_clear_errors(policy, params, words):
    with pytest.raises(SimError) as e:
        engine.run(point(policy=policy, policy_params=params))
    assert words in str(e.value) and e.value.fix


def test_all_five_systems_run_a_fig6_point():
    """fig6a's spec (constant 10 us, 20% large tasks) at 0.75 of capacity on 2 x 4 threads."""
    spec = load(REPO / "experiments" / "fig6a.yaml")
    s = simulated_spec(spec, Options(threads=4, warmup_s=0, measure_s=0.1, repetitions=1))
    pts = [
        p for p in plan(s, TestbedShape(worker_hosts=2, client_hosts=1, emulated=False)) if p.capacity_fraction == 0.75
    ]
    assert sorted(p.system for p in pts) == sorted(spec.systems) and set(spec.systems) <= set(engine.core_policies())
    p99 = {}
    for p in pts:
        sp = dataclasses.replace(build(s, p, worker_hosts=2, network=Network.paper(), seed=1), measure_ns=30_000_000)
        r = engine.run(sp)
        assert np.all(r.outcome == 0), p.system
        assert abs(r.large.mean() - 0.2) < 0.02
        p99[p.system] = np.percentile(r.latency_ns, 99)
    # constant service: Rain and Pallas-SW's round robin lead; the pulled or recirculated
    # JBSQ(1) and power-of-2 pay their round trips (the paper's observation 1, Fig. 6a)
    assert p99["rain"] < min(p99["r2p2"], p99["draconis"], p99["racksched"])
    assert p99["pallas"] < 1.2 * p99["rain"]
