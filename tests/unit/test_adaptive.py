"""Algorithm 1 (paper 3.3) on crafted samples: each branch of the decision."""

from __future__ import annotations

from hosts.agent.adaptive import Params, WorkerState, decide

P = Params(s_th=10, r_th=0.5, n_max=8)
US = 1000


def samples(n, lw, tw, lsw, q):
    return [(lw, tw, lsw, q)] * n


def test_calm_workers_are_left_alone():
    ws = [WorkerState(0, 2, 0, samples(100, 1 * US, 10 * US, 1 * US, 0), idleness=0.3)]
    assert decide(ws, P)[0] == []


def test_hol_blocking_lowers_the_quota():
    # slowdown (150+10+0)/10 = 16 > 10, worker-side share 1.0 > R_th, switch queue empty
    ws = [WorkerState(0, 3, 0, samples(100, 150 * US, 10 * US, 0, 0))]
    (d,), _ = decide(ws, P)
    assert d.quota == 2 and "HoL" in d.why


def test_quota_never_below_one():
    ws = [WorkerState(0, 1, 0, samples(100, 150 * US, 10 * US, 0, 0))]
    changes, info = decide(ws, P)
    assert changes == [] and info["overload"][0] == 1


def test_switch_queue_dominated_raises_the_quota():
    ws = [WorkerState(0, 2, 0, samples(100, 5 * US, 10 * US, 200 * US, 7))]
    (d,), _ = decide(ws, P)
    assert d.quota == 3


def test_quota_capped_at_n_max_then_overload():
    ws = [WorkerState(0, 8, 0, samples(100, 5 * US, 10 * US, 200 * US, 7))]
    changes, info = decide(ws, P)
    assert changes == [] and info["labels"] == {0: "overloaded"}


def test_overload_and_idleness_in_one_slice_equalise_quotas():
    hot = WorkerState(0, 8, 0, samples(100, 5 * US, 10 * US, 200 * US, 7))  # overloaded at n_max
    idle1 = WorkerState(1, 2, 0, samples(10, 0, 10 * US, 0, 0), idleness=0.9)
    idle2 = WorkerState(2, 2, 0, samples(10, 0, 10 * US, 0, 0), idleness=0.9)
    changes, _ = decide([hot, idle1, idle2], P)
    assert {d.wid: d.quota for d in changes} == {0: 4, 1: 4, 2: 4}


def test_idle_slice_lends_its_least_provisioned_worker():
    hot = WorkerState(0, 8, 0, samples(100, 5 * US, 10 * US, 200 * US, 7))
    a = WorkerState(1, 3, 1, [], idleness=0.8)
    b = WorkerState(2, 2, 1, [], idleness=0.7)
    changes, info = decide([hot, a, b], P)
    assert info["labels"] == {0: "overloaded", 1: "underloaded"}
    (d,) = changes
    assert (d.wid, d.slice, d.quota) == (2, 0, 1)


def test_controller_gathers_samples_between_steps_and_measures_idleness():
    """The loop both the worker agent and the simulator drive: samples added in several
    reads count in one decision, idleness is the interval's unbusy share, and the next
    interval starts empty."""
    from hosts.agent.adaptive import Controller

    c = Controller(P, 2, busy_ns=[0, 0])
    hol = samples(60, 150 * US, 10 * US, 0, 0)  # worker-side queuing dominates: lower the quota
    c.add_samples(0, hol[:30])
    c.add_samples(0, hol[30:], lost=4)
    changes, rec = c.step(1.0, 1e9, quotas=[3, 2], slices=[0, 0], busy_ns=[900_000_000, 250_000_000])
    assert [(d.wid, d.quota) for d in changes] == [(0, 2)]
    assert rec["samples"] == [60, 0] and rec["lost_samples"] == 4 and rec["t"] == 1.0
    # worker 1 had no slow samples and was idle 75% of the interval: counted into its slice's idleness
    assert rec["idleness"][0] == 0.75
    changes, rec = c.step(2.0, 1e9, quotas=[2, 2], slices=[0, 0], busy_ns=[1_900_000_000, 1_250_000_000])
    assert changes == [] and rec["samples"] == [0, 0] and rec["idleness"][0] == 0.0
