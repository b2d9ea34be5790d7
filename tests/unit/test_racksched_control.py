"""RackSched-SW's choice table as the controller computes it (switch/control/racksched.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from switch.control.errors import ControllerError
from switch.control.racksched import CHOICE_PAIRS, DRAWS, check_k, choice_pairs, pick_entries


def _covers_every_draw_once(entries) -> None:
    lows = [lo for lo, _hi, _a, _b in entries]
    assert lows == sorted(lows) and entries[0][0] == 0 and entries[-1][1] == DRAWS - 1
    for (_lo, hi, _a, _b), (lo2, _hi2, _a2, _b2) in zip(entries, entries[1:]):
        assert lo2 == hi + 1
    sizes = {hi - lo + 1 for lo, hi, _a, _b in entries}
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n", [2, 3, 7, 64])
def test_every_ordered_pair_of_distinct_workers_once(n):
    ids = [10 + 3 * i for i in range(n)]
    entries = pick_entries(ids)
    _covers_every_draw_once(entries)
    pairs = [(a, b) for _lo, _hi, a, b in entries]
    assert len(pairs) == len(set(pairs)) == n * (n - 1)
    assert all(a != b for a, b in pairs)


def test_more_workers_than_pairs_keep_each_worker_as_often_first_and_second():
    ids = list(range(100))
    entries = pick_entries(ids)
    assert len(entries) == CHOICE_PAIRS
    _covers_every_draw_once(entries)
    firsts = Counter(a for _lo, _hi, a, _b in entries)
    seconds = Counter(b for _lo, _hi, _a, b in entries)
    assert max(firsts.values()) - min(firsts.values()) <= 1
    assert max(seconds.values()) - min(seconds.values()) <= 1
    assert all(a != b for _lo, _hi, a, b in entries)


def test_one_worker_is_both_choices():
    assert pick_entries([5]) == [(0, DRAWS - 1, 5, 5)]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_k_other_than_two_is_refused_saying_so(k):
    with pytest.raises(ControllerError, match=f"power-of-2 choices only, not k = {k}") as e:
        pick_entries([1, 2, 3], k=k)
    assert e.value.subject == "baseline.k"
    check_k(2)


@pytest.mark.parametrize("ids", [[], [1, 1], [1024], [-1, 2]])
def test_bad_worker_sets_are_refused(ids):
    with pytest.raises(ControllerError):
        choice_pairs(ids)
