"""The emulator's Draconis-SW pipeline in-process (no sockets): its constants against
switch/p4/draconis.p4, every kind's outcome, and garbage that must never raise.
tests/switch/test_draconis.py holds the behaviour to frames through BFRuntime."""

from __future__ import annotations

import random

import pytest

from hosts.proto import Flag, Header, Kind
from switch.emulator import headers as H
from switch.emulator.draconis import consts as D
from switch.emulator.draconis import make_store
from switch.emulator.draconis.pipe import Pipeline
from switch.p4 import source
from tests.unit.test_emulator_pipeline import udp_frame

WORKER_IP = 0x0A540102


class Switch:
    def __init__(self, capacity: int | None = 8):
        self.store = make_store()
        self.pipe = Pipeline(self.store, clock=lambda: 1000)
        if capacity is not None:
            self.store.table("config_queue").set_default(
                "set_capacity", {"last": capacity - 1, "neg_cap": -capacity & 0xFFFFFFFF}
            )

    def run(self, frame: bytes, port: int = 1) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        buf = bytearray(frame)
        self.pipe.process(port, buf, len(buf), lambda p, d: out.append((p, bytes(d))))
        return out

    def events(self) -> dict[int, int]:
        pk = self.store.counter("events").packets
        return {i: n for i, n in enumerate(pk) if n}


def task(rid: int, **kw) -> bytearray:
    return udp_frame(Header(kind=Kind.TASK, client_id=0x0100, request_id=rid, **kw).pack())


def pull(wid: int = 1) -> bytearray:
    return udp_frame(Header(kind=Kind.PULL, worker_id=wid, report=1).pack(), src_ip=WORKER_IP, sport=21057)


def test_constants_match_the_p4():
    c = source.constants(program="draconis")
    for k, want in c.items():
        got = getattr(D, k, getattr(H, k, None))
        assert got == want, k


def test_capacity_bounds_the_count_and_pulls_never_drive_it_negative():
    sw = Switch(capacity=1)
    assert sw.run(pull()) and sw.store.register("waiting")[0] == 0  # EMPTY, nothing moved
    assert sw.run(task(1)) == []
    ((port, f),) = sw.run(task(2), port=5)
    assert port == 5 and Header.unpack(f[42:]).kind == Kind.REJECT
    assert sw.store.register("waiting")[0] == 1
    ((port, f),) = sw.run(pull(), port=7)
    h = Header.unpack(f[42:])
    assert port == 7 and (h.kind, h.request_id) == (Kind.DISPATCH, 1)
    assert Header.unpack(sw.run(pull())[0][1][42:]).kind == Kind.EMPTY
    assert sw.store.register("waiting")[0] == 0
    assert (sw.store.register("head")[0], sw.store.register("tail")[0]) == (0, 0)  # wrapped at last = 0
    assert sw.events() == {H.EV_TASK_QUEUED: 1, H.EV_TASK_REJECTED: 1, H.EV_DISPATCH_QUEUED: 1, D.EV_PULL_EMPTY: 2}


def test_a_dispatch_carries_the_stored_task_whole():
    sw = Switch()
    sw.run(task(9, task_type=0xAB, flags=Flag.LARGE | Flag.INT, data=bytes(range(1, 9))))
    ((_, f),) = sw.run(pull(wid=513))
    h = Header.unpack(f[42:])
    assert (h.kind, h.client_id, h.request_id, h.task_type) == (Kind.DISPATCH, 0x0100, 9, 0xAB)
    assert (h.flags, h.data, h.worker_id, h.report) == (Flag.LARGE | Flag.INT, bytes(range(1, 9)), 513, 0)


@pytest.mark.parametrize("kind", range(256))
def test_every_kind_has_one_outcome(kind):
    """TASK and PULL are queued or answered; RESPONSE, FETCH and FETCH_REPLY go by IP
    (no forwarding entry here: dropped as no route); every other kind is dropped as
    bad. Each counts exactly once and nothing raises."""
    sw = Switch()
    f = udp_frame(Header(kind=kind if 1 <= kind <= 10 else Kind.TASK, request_id=1).pack())
    f[43] = kind
    out = sw.run(f)
    ev = sw.events()
    assert sum(ev.values()) == 1
    if kind == Kind.TASK:
        assert out == [] and ev == {H.EV_TASK_QUEUED: 1}
    elif kind == Kind.PULL:
        assert len(out) == 1 and ev == {D.EV_PULL_EMPTY: 1}
    elif kind in (Kind.RESPONSE, Kind.FETCH, Kind.FETCH_REPLY):
        assert out == [] and ev == {H.EV_NO_ROUTE: 1}
    else:
        assert out == [] and ev == {H.EV_BAD_RAIN: 1}
    assert sw.store.register("waiting")[0] == (1 if kind == Kind.TASK else 0)


def test_garbage_never_raises_and_always_counts():
    sw = Switch()
    rng = random.Random(14)
    n = 400
    for _ in range(n):
        g = bytearray(rng.getrandbits(8) for _ in range(rng.randint(0, 120)))
        if len(g) > 43 and rng.random() < 0.5:  # mostly a Rain frame, fields at random
            g = udp_frame(bytes(g[:40])) + g[40:]
        sw.run(g)
    assert sum(sw.events().values()) == n
    assert 0 <= sw.store.register("waiting")[0] <= 8
