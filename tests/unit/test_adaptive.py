"""Algorithm 1 (paper 3.3) on crafted samples: each branch of the decision."""

from __future__ import annotations

from hosts.agent.adaptive import Params, WorkerState, decide, label, rebalance

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
    assert changes == []  # an agent only labels; the coordinator moves
    assert info["labels"] == {0: "overloaded", 1: "underloaded"}
    assert info["members"] == {0: {0: 8}, 1: {1: 3, 2: 2}}
    (m,), view = rebalance([info])
    assert (m.worker, m.src, m.dst) == (2, 1, 0)
    assert view["labels"] == {0: "overloaded", 1: "underloaded"}


def test_labels_follow_the_sums_over_every_agent():
    """Two hosts each see half an idle slice (I_s 0.6 each: no label alone); summed,
    I_s = 1.2 > 1 makes it underloaded, and it lends a worker of either host."""
    r1 = {"overload": {0: 1, 1: 0}, "idleness": {0: 0.0, 1: 0.6}, "members": {0: {0: 8}, 1: {1: 2}}}
    r2 = {"overload": {0: 0, 1: 0}, "idleness": {0: 0.1, 1: 0.6}, "members": {0: {2: 8}, 1: {3: 1}}}
    (m,), view = rebalance([r1, r2])
    assert view["labels"] == {0: "overloaded", 1: "underloaded"}
    assert (m.worker, m.src, m.dst) == (3, 1, 0)  # the least provisioned (quota 1)
    assert rebalance([r1])[0] == []  # one host alone: slice 1 not idle enough


def test_greedy_pairs_most_overloaded_with_idlest_across_slices():
    """Lines 32-37 over four slices: the most overloaded slice takes from the idlest,
    the next from the next; a slice with one worker never gives it."""
    r = {
        "overload": {0: 3, 1: 1, 2: 0, 3: 0, 4: 0},
        "idleness": {0: 0.0, 1: 0.2, 2: 1.9, 3: 1.5, 4: 1.0 + 0.99},
        "members": {0: {0: 4, 1: 4}, 1: {2: 2}, 2: {3: 2, 4: 1}, 3: {5: 1, 6: 3}, 4: {7: 1}},
    }
    moves, view = rebalance([r])
    assert view["labels"] == {0: "overloaded", 1: "overloaded", 2: "underloaded", 3: "underloaded", 4: "underloaded"}
    # round 1 pairs slice 0 (O=3) with slice 4 (I=1.99), whose one worker stays: no move,
    # both leave the candidates; round 2 pairs slice 1 with slice 2 (I=1.9): its quota-1 worker
    assert [(m.worker, m.src, m.dst) for m in moves] == [(4, 2, 1)]


def test_both_signals_in_a_slice_is_no_label():
    assert label(1, 1.5) is None and label(1, 1.0) == "overloaded" and label(0, 1.01) == "underloaded"
    assert label(0, 1.0) is None


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
