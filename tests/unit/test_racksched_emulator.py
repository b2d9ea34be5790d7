"""RackSched-SW's emulated data plane (switch/emulator/racksched) without a network: the
pipeline driven directly, its tables written through the store."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from hosts.proto import Header, Kind
from switch.control.racksched import pick_entries
from switch.emulator import racksched
from switch.emulator.racksched.choose import PICK, Choose
from switch.emulator.racksched.pipe import Pipeline, RackschedIngressMd
from tests.netpeer import Side, frame

CLIENT = Side("-", "-", "02:00:00:00:00:09", "10.0.0.9")
SERVICE = Side("-", "-", "02:00:00:00:00:fe", "10.0.0.254")


def _switch(workers, seed: int = 1):
    store = racksched.make_store()
    pipe = Pipeline(store, rng=random.Random(seed))  # a seeded Random extern
    sel = store.table("pipe.SwitchIngress.dispatch.select_worker")
    for w in workers:
        sel.add((w,), "to_worker", {"port": 128 + w, "dmac": 0x020000000000 + w, "dip": 0x0A000000 + w})
    pick = store.table(PICK.name)
    for lo, hi, a, b in pick_entries(workers):
        pick.add(((lo, hi),), "choose", {"first": a, "second": b}, priority=1)
    return store, pipe


def _send(pipe, h: Header) -> list[int]:
    f = bytearray(frame(CLIENT, SERVICE, h.pack(), 40000, 21057))
    out = []
    pipe.process(1, f, len(f), lambda port, data: out.append(port - 128))
    return out


def test_the_heaviest_of_four_never_wins_a_pair():
    """Two distinct choices: the most loaded worker always meets a less loaded one."""
    store, pipe = _switch([0, 1, 2, 3])
    for w, load in enumerate((0, 10, 20, 30)):
        assert _send(pipe, Header(kind=Kind.REPORT, worker_id=w, report=load)) == []
    got = Counter(w for n in range(40) for w in _send(pipe, Header(kind=Kind.TASK, request_id=n)))
    assert sum(got.values()) == 40 and got[3] == 0
    assert got[0] > got[1] > got[2]  # the lighter, the more often it wins
    a = store.register("pipe.SwitchIngress.loads.load_a").values
    b = store.register("pipe.SwitchIngress.loads.load_b").values
    assert a[:4] == b[:4] == [got[0], 10 + got[1], 20 + got[2], 30]


def test_each_ordered_pair_is_drawn_about_equally():
    """A first pass's two choices: every ordered pair of distinct workers, evenly."""
    store, pipe = _switch([4, 5, 6])
    choose, hdr, md = pipe.ingress.choose, pipe.hdr, RackschedIngressMd()
    hdr.kind = Kind.TASK
    draws = Counter()
    for _ in range(6000):
        choose.apply(hdr, md)
        draws[(md.rs_a, md.rs_b)] += 1
    assert set(draws) == {(a, b) for a in (4, 5, 6) for b in (4, 5, 6) if a != b}
    assert all(800 < v < 1200 for v in draws.values()), draws


@pytest.mark.parametrize(
    "ranges",
    [
        [(0, 99), (100, 65535)],
        [(10, 20), (30, 40)],  # gaps: a miss
        [(0, 1000), (500, 65535)],  # overlapping: priority decides
    ],
)
def test_the_pick_index_finds_what_the_table_finds(ranges):
    store = racksched.make_store()
    choose = Choose(store)
    table = store.table(PICK.name)
    for i, (lo, hi) in enumerate(ranges):
        table.add(((lo, hi),), "choose", {"first": i, "second": i + 1}, priority=len(ranges) - i)
    for v in range(0, 65536, 7):
        assert choose._find((v,)) is table.find(v)
    table.delete(((ranges[0][0], ranges[0][1]),), priority=len(ranges))
    for v in range(0, 65536, 7):
        assert choose._find((v,)) is table.find(v)
