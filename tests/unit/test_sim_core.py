"""The simulated testbed's core (orchestrator/simulate/core, through engine.py):
determinism, accounting, Rain's token and queue rules, pre-writes, timing with the
ideal network, arrivals and phases, bad points. Small points (tens of thousands of
tasks): each test runs in well under a second."""

from __future__ import annotations

import copy
import dataclasses
import os

import numpy as np
import pytest

from hosts.agent.adaptive import Controller, Decision, Params
from orchestrator.errors import RainmakerError
from orchestrator.experiment.plan import TestbedShape, plan
from orchestrator.experiment.spec import Spec
from orchestrator.simulate import engine
from orchestrator.simulate.engine import SimError
from orchestrator.simulate.model import (
    RING_SLOTS,
    ClassModel,
    Network,
    PhaseModel,
    ServiceModel,
    SimPoint,
    build,
    seed_of,
)
from orchestrator.systems import BASELINE_QUEUE

EXP10 = ClassModel("exp", 1.0, 0, 0, ServiceModel("exp", 10_000), 8, 0.0, 64)


def point(
    *,
    policy="rain",
    hosts=2,
    threads=4,
    load=0.8,
    ms=20,
    classes=(EXP10,),
    quota=2,
    net=None,
    seed=1,
    **kw,
) -> SimPoint:
    n = hosts * threads
    mean = sum(c.weight * c.service.mean_ns for c in classes) / sum(c.weight for c in classes)
    args = dict(
        point_id="p",
        policy=policy,
        worker_hosts=hosts,
        threads_per_host=threads,
        worker_slices=(0,) * n,
        quota=quota,
        queue_capacity=131072,
        classes=tuple(classes),
        arrival="poisson",
        phases=(PhaseModel(0, load * n / mean * 1e9, tuple(range(len(classes)))),),
        warmup_ns=0,
        measure_ns=ms * 1_000_000,
        timeout_ns=200_000_000,
        max_outstanding=0,
        network=net or Network.paper(),
        seed=seed,
        adaptive=None,
    )
    args.update(kw)
    return SimPoint(**args)


COLUMNS = ("intended_ns", "cls", "outcome", "latency_ns", "service_ns", "large", "worker")


def test_mirror_matches_the_core():
    for name, (core, mine) in engine.struct_sizes().items():
        assert core == mine, name
    assert set(engine.core_policies()) >= {"rain", "random"}


def test_same_seed_same_result_other_seed_other():
    a, b = engine.run(point(seed=7)), engine.run(point(seed=7))
    for col in COLUMNS:
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert a.counters == b.counters and a.switch_queue == b.switch_queue
    c = engine.run(point(seed=8))
    assert not np.array_equal(a.latency_ns[:1000], c.latency_ns[:1000])
    assert len(a.intended_ns) > 10_000


@pytest.mark.parametrize(
    "kw, outcomes",
    [
        (dict(queue_capacity=16), (0, 1)),  # overload, a short switch queue: rejects
        # admission cap: held back past the end; the 40 in flight at the end are lost (2)
        (dict(max_outstanding=40, timeout_ns=2_000_000), (0, 2, 3)),
        (dict(timeout_ns=300_000), (0, 2)),  # a timeout shorter than the backlog
    ],
)
def test_every_request_is_accounted_for(kw, outcomes):
    r = engine.run(point(load=1.6, ms=20, quota=1, **kw))
    n = len(r.intended_ns)
    counts = np.bincount(r.outcome, minlength=4)
    assert counts.sum() == n
    assert [i for i in range(4) if counts[i]] == list(outcomes)
    assert np.all((r.latency_ns >= 0) == (r.outcome == 0))
    assert np.all(r.worker[r.outcome == 0] >= 0)
    assert np.all(np.diff(r.intended_ns) >= 0)
    assert r.counters["EV_REJECT"] == counts[1]
    if 3 in outcomes:
        assert counts[2] == 40
    assert (r.counters["waited_for_admission"] > 0) == ("max_outstanding" in kw)
    # the switch forwarded a reply for every task a worker finished
    assert r.counters["EV_FORWARDED"] == sum(r.counters["tasks_done"])


def test_timeouts_and_late_replies():
    # one slow worker, a timeout shorter than the queue: requests time out, their late
    # replies are not latency samples
    slow = ClassModel("slow", 1.0, 0, 0, ServiceModel("const", 100_000), 8, 0.0, 64)
    r = engine.run(point(hosts=1, threads=1, load=1.5, ms=20, classes=(slow,), timeout_ns=1_000_000))
    assert np.count_nonzero(r.outcome == 2) > 0
    assert r.counters["late_replies"] > 0
    assert r.latency_ns[r.outcome == 0].max() < 1_000_000 + 100_000


@pytest.mark.parametrize("quota", [1, 3])
def test_quota_bounds_tokens_and_tasks_held(quota):
    r = engine.run(point(quota=quota, load=0.95))
    n = 8
    assert r.counters["max_tokens_waiting"] <= n * quota
    assert r.counters["max_held"] <= quota
    assert r.counters["max_held"] == quota  # at 95% load some worker fills its quota
    for _, bal in r.switch_queue:
        assert bal[0] <= n * quota
    for _, ws in r.worker_series:
        assert all(w["outstanding"] <= quota and w["fifo"] <= quota for w in ws)


def test_queue_capacity_zero_rejects_every_task_without_a_token():
    r = engine.run(point(queue_capacity=0, load=0.9))
    c = r.counters
    assert c["EV_TASK_QUEUED"] == 0 and c["EV_DISPATCH_QUEUED"] == 0
    assert c["EV_REJECT"] > 0
    assert c["EV_REJECT"] + c["EV_DISPATCH_DIRECT"] == len(r.intended_ns)
    assert np.count_nonzero(r.outcome == 1) == c["EV_REJECT"]


def test_prewrites_only_for_large_tasks_that_waited():
    big = ClassModel("big", 1.0, 0, 0, ServiceModel("exp", 10_000), 8, 0.3, 200)
    r = engine.run(point(classes=(big,), load=0.95, quota=1))
    c = r.counters
    assert 0 < c["prewrites"] < c["EV_TASK_QUEUED"]
    # 30% of the tasks that waited are large, give or take
    assert c["prewrites"] == pytest.approx(0.3 * c["EV_TASK_QUEUED"], rel=0.1)
    # each: a RoCEv2 WRITE frame per worker of the slice (8 here): Ethernet, IPv4, UDP,
    # BTH, RETH, the 200-byte slot, iCRC, FCS
    frame = 14 + 20 + 8 + 12 + 16 + 200 + 4 + 4
    assert c["prewrite_bytes"] == c["prewrites"] * 8 * frame
    # no task waits at low load: no pre-writes
    low = engine.run(point(classes=(big,), load=0.05, quota=2))
    assert low.counters["EV_TASK_QUEUED"] == 0 and low.counters["prewrites"] == 0
    assert low.large.sum() > 0


def test_ideal_network_low_load_latency_is_the_service_time():
    sp = point(net=Network.ideal(), load=0.001, ms=200, arrival="constant")
    r = engine.run(sp)
    ok = r.outcome == 0
    assert ok.all() and ok.sum() > 50
    assert np.array_equal(r.latency_ns, r.service_ns)


def test_paper_network_adds_its_delays():
    const = ClassModel("c", 1.0, 0, 0, ServiceModel("const", 10_000), 8, 0.0, 64)
    net = Network.paper()
    r = engine.run(point(net=net, load=0.001, ms=200, arrival="constant", classes=(const,)))
    frame = 14 + 20 + 8 + 32 + 4 + 20  # a rain_hdr frame on the wire, preamble and gap included
    ser = round(frame * 8 / net.link_gbps)
    # task: client link, switch, worker link; reply: worker link, switch, client link
    path = 2 * (net.client_switch_ns + net.switch_pkt_ns + net.switch_worker_ns + 2 * ser)
    expect = 10_000 + path + 2 * net.worker_pkt_ns  # rx of the task, tx of the reply
    # (the first task, at 0, reaches the switch before the workers' first tokens)
    assert len(r.latency_ns) > 50 and np.all(r.latency_ns[1:] == expect)


def test_constant_arrivals_are_exactly_periodic():
    sp = point(arrival="constant", phases=(PhaseModel(0, 250_000.0, (0,)),), ms=10)
    r = engine.run(sp)
    assert len(r.intended_ns) == 2500
    assert np.all(np.diff(r.intended_ns) == 4000) and r.intended_ns[0] == 0


def test_phases_change_rate_and_class_mix():
    a = ClassModel("a", 1.0, 0, 0, ServiceModel("const", 10_000), 8, 0.0, 64)
    b = ClassModel("b", 1.0, 1, 0, ServiceModel("const", 20_000), 8, 0.0, 64)
    phases = (
        PhaseModel(0, 100_000.0, (0,)),
        PhaseModel(10_000_000, 300_000.0, (0, 1)),
        PhaseModel(20_000_000, 50_000.0, (1,)),
    )
    r = engine.run(point(classes=(a, b), phases=phases, ms=30, arrival="constant"))
    t = r.intended_ns
    p1, p2, p3 = t < 10_000_000, (t >= 10_000_000) & (t < 20_000_000), t >= 20_000_000
    assert p1.sum() == 1000 and p2.sum() == 3000 and p3.sum() == 500
    assert np.all(r.cls[p1] == 0) and np.all(r.cls[p3] == 1)
    assert 0.4 < r.cls[p2].mean() < 0.6
    assert t[p2][0] == 10_000_000 and t[p3][0] == 20_000_000  # each piece restarts at its boundary
    assert np.all(r.service_ns[r.cls == 1] == 20_000)
    # Poisson too: the rate follows the phases
    rp = engine.run(point(classes=(a, b), phases=phases, ms=30))
    tp = rp.intended_ns
    assert np.count_nonzero(tp < 10_000_000) == pytest.approx(1000, rel=0.15)
    assert np.count_nonzero((tp >= 10_000_000) & (tp < 20_000_000)) == pytest.approx(3000, rel=0.1)


def test_a_replay_runs_the_given_requests_and_draws_none():
    a = ClassModel("a", 1.0, 0, 0, ServiceModel("exp", 10_000), 8, 0.0, 64)
    b = ClassModel("b", 1.0, 1, 0, ServiceModel("exp", 10_000), 8, 0.0, 64)
    rng = np.random.default_rng(3)
    at = np.cumsum(rng.integers(1_000, 5_000, 3000)).astype(np.int64)
    svc = rng.integers(1_000, 30_000, 3000).astype(np.int64)
    cls = (np.arange(3000) % 3 == 0).astype(np.uint8)
    sp = point(classes=(a, b), ms=20, replay=(at, svc, cls))
    r = engine.run(sp)
    inside = at < sp.end_ns  # the client stops scheduling at the window's end
    assert np.array_equal(r.intended_ns, at[inside]) and np.array_equal(r.service_ns, svc[inside])
    assert np.array_equal(r.cls, cls[inside]) and (r.outcome == 0).all()
    # which requests were large is replayed too when given, else drawn from the class
    half = ClassModel("half", 1.0, 0, 0, ServiceModel("exp", 10_000), 8, 0.5, 64)
    drawn = engine.run(point(classes=(half,), ms=20, replay=(at, svc, np.zeros(3000, np.uint8))))
    assert 0.4 < drawn.large.mean() < 0.6
    large = (np.arange(3000) % 7 == 0).astype(np.uint8)
    given = engine.run(point(classes=(half,), ms=20, replay=(at, svc, np.zeros(3000, np.uint8), large)))
    assert np.array_equal(given.large, large[inside].astype(bool))
    with pytest.raises(SimError, match="and large flag"):
        engine.run(point(classes=(half,), ms=20, replay=(at, svc, np.zeros(3000, np.uint8), large[:10])))
    assert np.array_equal(engine.run(dataclasses.replace(sp, seed=9)).intended_ns, r.intended_ns)  # no seed in it
    with pytest.raises(SimError, match="must not decrease"):
        engine.run(dataclasses.replace(sp, replay=(at[::-1].copy(), svc, cls)))
    with pytest.raises(SimError, match="one time, service time and class per request"):
        engine.run(dataclasses.replace(sp, replay=(at, svc[:10], cls)))


def test_random_push_spreads_tasks_uniformly_without_tokens():
    r = engine.run(point(policy="random", load=0.5))
    c = r.counters
    assert c["EV_TOKEN_QUEUED"] == 0 and c["EV_TASK_QUEUED"] == 0 and sum(c["tokens_sent"]) == 0
    done = np.array(c["tasks_done"])
    assert done.sum() == len(r.intended_ns)
    assert done.min() > 0.85 * done.mean() and done.max() < 1.15 * done.mean()


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(worker_hosts=0), "worker host"),
        (dict(network=dataclasses.replace(Network.paper(), switch_pkt_ns=-1)), "negative delay"),
        (dict(policy="nope"), "unknown policy"),
        (dict(worker_slices=(0,)), "worker_slices"),
        (dict(phases=()), "first phase"),
        (dict(adaptive={"s_th": 10}), "adaptive lacks"),
    ],
)
def test_bad_points_are_clear_errors(change, words):
    with pytest.raises(SimError) as e:
        engine.run(dataclasses.replace(point(), **change))
    assert words in str(e.value) and e.value.fix
    assert isinstance(e.value, RainmakerError)


def test_one_controller_per_host():
    ad = {"s_th": 10, "r_th": 0.5, "n_max": 8, "sample_interval_us": 10, "k_samples": 100}
    with pytest.raises(SimError, match="1 controllers for 2 worker hosts"):
        engine.run(point(adaptive=ad), controllers=[Controller(Params(), 4, [0] * 4)])


def test_core_errors_come_back_as_sim_errors():
    # the core's own checks, behind the Python ones: a keys-exp class with fewer than 1 key
    k = ClassModel("k", 1.0, 0, 0, ServiceModel("keys-exp", 800, keys=0.5), 8, 0.0, 64)
    with pytest.raises(SimError, match="keys-exp"):
        engine.run(point(classes=(k,)))


def test_missing_or_stale_core_says_make_build(monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "_lib", None)
    monkeypatch.setattr(engine, "LIB", tmp_path / "librainsim.so")
    with pytest.raises(SimError) as e:
        engine.load()
    assert "make build" in e.value.fix
    lib = tmp_path / "librainsim.so"
    lib.write_bytes(b"")
    # older than every source, however long ago they were checked out or edited
    old = min(f.stat().st_mtime for f in engine.CORE.iterdir() if f.is_file()) - 3600
    os.utime(lib, (old, old))
    with pytest.raises(SimError, match="older than its sources"):
        engine.load()


class Recorder(Controller):
    """A Controller that records what it was given and raises every worker's quota to 3."""

    def __init__(self, n):
        super().__init__(Params(), n, [0] * n)
        self.seen: list = []

    def step(self, t_s, elapsed_ns, quotas, slices, busy_ns):
        self.seen.append((t_s, [len(p) for p in self._pending], list(quotas)))
        super().step(t_s, elapsed_ns, quotas, slices, busy_ns)
        return [Decision(i, 3, slices[i], "test") for i in range(self.n)], {"t": t_s}


def test_adaptive_pauses_feed_the_controllers_and_apply_their_decisions():
    ad = {"s_th": 10, "r_th": 0.5, "n_max": 8, "sample_interval_us": 10, "k_samples": 100}  # 1 ms
    sp = point(adaptive=ad, quota=1, load=0.95, ms=10)
    ctls = [Recorder(4), Recorder(4)]
    r = engine.run(sp, controllers=ctls)
    # every 1 ms while the point runs: 10 ms of load, and its last tasks after
    assert len(ctls[0].seen) == 10 and ctls[0].seen[0][0] == pytest.approx(0.001)
    assert ctls[0].seen[0][2] == [1, 1, 1, 1] and ctls[0].seen[1][2] == [3, 3, 3, 3]
    # samples per worker per interval: what it finished (~0.95 * 100 tasks)
    assert 60 < np.mean(ctls[1].seen[3][1]) < 130
    assert [d["host"] for d in r.decisions[:2]] == [0, 1] and r.decisions[0]["quotas"] == [3, 3, 3, 3]
    assert r.counters["max_held"] == 3
    assert r.worker_series[-1][1][0]["quota"] == 3


def test_adaptive_point_runs_algorithm_1():
    ad = {"s_th": 10, "r_th": 0.5, "n_max": 8, "sample_interval_us": 10, "k_samples": 1000}
    r = engine.run(point(adaptive=ad, load=0.9, ms=50))
    agents = [d for d in r.decisions if not d.get("coordinator")]
    assert len(agents) == 2 * 5 and {"labels", "quotas", "host", "samples", "members"} <= set(agents[0])
    # the coordinator saw every interval's summed view; one slice, so nothing to move
    coord = [d for d in r.decisions if d.get("coordinator")]
    assert coord and all(d["moves"] == [] for d in coord)


def test_the_coordinator_moves_a_worker_across_hosts_into_the_busy_slice():
    """Two slices of 4 workers, each slice across both hosts; all load on slice 0 at
    twice its capacity: the coordinator moves workers of idle slice 1 into it, and the
    simulated core runs them there (their quota starts at 1)."""
    ad = {"s_th": 10, "r_th": 0.5, "n_max": 2, "sample_interval_us": 10, "k_samples": 1000}
    sp = point(adaptive=ad, load=0.9, ms=60)
    sp = dataclasses.replace(sp, worker_slices=(0, 0, 1, 1, 0, 0, 1, 1), quota=2)
    r = engine.run(sp)
    coord = [d for d in r.decisions if d.get("coordinator")]
    moves = [m for d in coord for m in d["moves"]]
    assert moves and all(m["src"] == 1 and m["dst"] == 0 for m in moves)
    moved = {m["worker"] for m in moves}
    assert moved <= {2, 3, 6, 7} and len(moved) <= 3  # slice 1 keeps a worker
    last = [d for d in r.decisions if not d.get("coordinator")][-2:]
    members0 = {w for d in last for w in d["members"].get(0, {})}
    assert moved <= members0


SPEC = {
    "name": "t",
    "systems": ["rain"],
    "workers": {"per_host_threads": 4},
    "workload": {
        "classes": [
            {"name": "a", "task_type": 1, "service": {"dist": "exponential", "mean_us": 10}},
            {"name": "b", "task_type": 2, "service": {"dist": "constant", "us": 30}, "payload": {"bytes": 100}},
        ],
        "phases": [{"at_s": 0, "capacity_fraction": 0.5, "classes": ["a"]}, {"at_s": 0.01, "capacity_fraction": 0.4}],
    },
    "load": {"capacity_fraction": [1.0]},
    "warmup_s": 0,
    "measure_s": 0.1,
    "rain": {"initial_quota": 2, "slices": [{"id": 0, "task_types": [1]}, {"id": 1, "task_types": [2]}]},
}


def test_build_from_a_spec_point():
    spec = Spec.model_validate(SPEC)
    (p,) = plan(spec, TestbedShape(worker_hosts=2, client_hosts=1, emulated=False))
    sp = build(spec, p, worker_hosts=2, network=Network.ideal(), seed=seed_of(1, p.id))
    assert sp.n_workers == 8 and sp.worker_slices == (0, 0, 0, 0, 1, 1, 1, 1)
    assert [c.slice for c in sp.classes] == [0, 1] and sp.classes[1].payload_bytes == 100
    assert sp.queue_capacity == 65536 and sp.max_outstanding == 131072 + 2 * 8
    assert sp.phases[0].rate_rps == pytest.approx(0.5 * 8 / 10e-6)
    assert sp.phases[1].rate_rps == pytest.approx(0.4 * 8 / 20e-6) and sp.phases[1].at_ns == 10_000_000
    assert sp.timeout_ns == 200_000_000 and sp.measure_ns == 100_000_000
    assert sp.policy_params["large_cap"] == RING_SLOTS - 2
    assert seed_of(1, p.id) == seed_of(1, p.id) != seed_of(2, p.id)
    r = engine.run(dataclasses.replace(sp, measure_ns=20_000_000))
    assert np.all(r.outcome == 0)
    # class b (payload 100 bytes) is always large and runs only on slice 1's workers
    assert np.all(r.large == (r.cls == 1)) and np.all(r.worker[r.cls == 1] >= 4)


def test_a_measured_point_is_modelled_with_its_testbeds_timeout_and_admission_cap():
    # rain-client times a request out after 200 ms of the testbed's time or 200 mean
    # tasks (run.py): at k = 1000 that is 2 ms of paper time, not the 200 ms an undilated
    # run has; and a baseline's clients hold at most BASELINE_QUEUE + n per worker thread
    spec = Spec.model_validate({**SPEC, "systems": ["rain", "r2p2", "draconis"], "baseline": {"jbsq_n": 2}})
    shape = TestbedShape(worker_hosts=2, client_hosts=1, emulated=False)
    by = {p.system: p for p in plan(spec, shape)}
    net = Network.ideal()
    at_k = build(spec, by["rain"], worker_hosts=2, network=net, seed=1, dilation=1000.0)
    mean_us = spec.workload.mean_service_us
    assert at_k.timeout_ns == round(200 * mean_us * 1000) < 200_000_000
    assert build(spec, by["rain"], worker_hosts=2, network=net, seed=1).timeout_ns == 200_000_000
    r2p2 = build(spec, by["r2p2"], worker_hosts=2, network=net, seed=1)
    assert r2p2.max_outstanding == BASELINE_QUEUE + 2 * 8
    draconis = build(spec, by["draconis"], worker_hosts=2, network=net, seed=1)
    assert draconis.max_outstanding == BASELINE_QUEUE + 8 and draconis.queue_capacity == BASELINE_QUEUE


def test_large_cap_bounds_the_large_tasks_that_wait():
    # the switch lets a large task wait only while fewer than large_cap tasks wait in its
    # slice (its ring slot must not wrap onto one still waiting); small tasks use the queue
    mix = ClassModel("mix", 1.0, 0, 0, ServiceModel("exp", 10_000), 8, 0.5, 200)
    sp = point(classes=(mix,), load=1.3, quota=1, ms=10, timeout_ns=100_000_000)
    free = engine.run(sp)
    assert free.counters["EV_REJECT"] == 0
    capped = engine.run(dataclasses.replace(sp, policy_params={"large_cap": 4}))
    rejected = capped.outcome == 1
    assert rejected.sum() == capped.counters["EV_REJECT"] > 0
    assert np.all(capped.large[rejected])
    assert capped.counters["prewrites"] < free.counters["prewrites"]


def test_samples_keep_the_newest_like_the_worker_ring():
    # 8 ms intervals of a fast class: ~7,600 tasks per worker per interval, more than the
    # 4,096 samples a worker's ring holds: the newest are kept, the rest counted lost
    fast = ClassModel("fast", 1.0, 0, 0, ServiceModel("const", 1_000), 8, 0.0, 64)
    ad = {"s_th": 10, "r_th": 0.5, "n_max": 8, "sample_interval_us": 8, "k_samples": 1000}
    sp = point(hosts=1, threads=1, classes=(fast,), load=0.95, ms=16, adaptive=ad, net=Network.ideal())

    class Keep(Controller):
        def __init__(self):
            super().__init__(Params(), 1, [0])
            self.got: list = []

        def add_samples(self, i, samples, lost=0):
            self.got.append((len(samples), lost))
            super().add_samples(i, samples, lost)

    k = Keep()
    r = engine.run(sp, controllers=[k])
    n, lost = k.got[0]
    assert n == 4096 and lost > 3000
    done = r.counters["tasks_done"][0]
    # every finished task is a sample taken or lost, but those after the last pause
    assert done - 100 < sum(a + b for a, b in k.got) <= done
    assert r.counters["samples_lost"] == k.lost


class Tape(Controller):
    """The agent's Controller, recording every call the simulator makes to it."""

    def __init__(self, params, n, busy, base=0):
        super().__init__(params, n, busy, base)
        self.calls: list = []

    def add_samples(self, i, samples, lost=0):
        self.calls.append(("add", i, list(samples), lost))
        super().add_samples(i, samples, lost)

    def step(self, t_s, elapsed_ns, quotas, slices, busy_ns):
        out = super().step(t_s, elapsed_ns, quotas, slices, busy_ns)
        # a copy: the engine adds the applied quotas and the host to the record it gets
        self.calls.append(("step", t_s, elapsed_ns, list(quotas), list(slices), list(busy_ns), copy.deepcopy(out)))
        return out


def test_algorithm_1_decides_in_the_simulator_as_in_the_agent():
    # one code path: the engine drives hosts.agent.adaptive.Controller itself; replaying
    # what it was given into a fresh Controller, as the worker agent's loop calls it,
    # gives the same decisions and records
    assert engine.Controller is Controller
    ad = {"s_th": 10, "r_th": 0.5, "n_max": 8, "sample_interval_us": 10, "k_samples": 200}
    params = Params(s_th=10, r_th=0.5, n_max=8)
    tapes = [Tape(params, 4, [0] * 4, base=4 * h) for h in range(2)]
    r = engine.run(point(adaptive=ad, quota=1, load=0.97, ms=30), controllers=tapes)
    changes = [d for t in tapes for c in t.calls if c[0] == "step" for d in c[6][0]]
    assert len(changes) > 10 and all(d.quota > 1 for d in changes)  # queueing in the switch: quotas rise
    for h, tape in enumerate(tapes):
        agent = Controller(params, 4, [0] * 4, base=4 * h)
        for c in tape.calls:
            if c[0] == "add":
                agent.add_samples(c[1], c[2], c[3])
            else:
                assert agent.step(*c[1:6]) == c[6]
        mine = [d for d in r.decisions if d.get("host") == h]
        steps = [c[6][1] for c in tape.calls if c[0] == "step"]
        assert [{k: v for k, v in d.items() if k not in ("host", "quotas")} for d in mine] == steps
    # the decisions took effect: the last record's quotas are the ones the workers have
    last = r.worker_series[-1][1]
    agents = [d for d in r.decisions if not d.get("coordinator")]
    assert [w["quota"] for w in last] == agents[-2]["quotas"] + agents[-1]["quotas"]
