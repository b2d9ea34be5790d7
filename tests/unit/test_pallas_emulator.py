"""The emulator's Pallas-SW pipeline in-process (no sockets): its constants against
switch/p4/pallas, the cursor's edge cases, exact output bytes, and garbage that must
never raise."""

from __future__ import annotations

import random
import struct

from hosts.proto import Header, Kind
from switch.emulator import headers as H
from switch.emulator import pallas
from switch.emulator.pallas import defs
from switch.p4 import source
from tests.unit.test_emulator_pipeline import CLIENT_IP, CLIENT_MAC, SW_MAC, udp_frame

WORKER_MAC, WORKER_IP = 0x02524D000002, 0x0A540102


class Switch:
    def __init__(self):
        self.store = pallas.make_store()
        self.pipe = pallas.pipeline(self.store)
        self.store.table("select_worker").add(7, "to_worker", {"port": 2, "dmac": WORKER_MAC, "dip": WORKER_IP})
        self.store.table("select_worker").add(8, "to_worker", {"port": 3, "dmac": 0x02524D000003, "dip": 0x0A540103})

    def run(self, frame: bytes, port: int = 1) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        buf = bytearray(frame)
        self.pipe.process(port, buf, len(buf), lambda p, d: out.append((p, bytes(d))))
        return out

    def pool(self, pool: int, workers: list[int]) -> None:
        for pos, wid in enumerate(workers, start=1):
            self.store.table("schedule").add((pool, pos), "set_worker", {"worker": wid})
        self.store.table("config_pool").add(pool, "set_pool_config", {"length": len(workers)})

    def events(self) -> dict[int, int]:
        return {i: n for i, n in enumerate(self.store.counter("events").packets) if n}


def task(rid: int = 1, task_type: int = 0, **kw) -> bytearray:
    return udp_frame(Header(kind=Kind.TASK, client_id=0x0100, request_id=rid, task_type=task_type, **kw).pack())


def test_constants_match_the_p4():
    c = source.constants(program="pallas")
    assert (c["EV_NO_POOL"], c["EV_POOL_EMPTY"]) == (defs.EV_NO_POOL, defs.EV_POOL_EMPTY)
    assert c["SCHEDULE_ENTRIES"] == defs.SCHEDULE_ENTRIES
    # its own events are new indexes of the shared counter, below its size
    shared = {v for k, v in vars(H).items() if k.startswith("EV_")}
    assert {defs.EV_NO_POOL, defs.EV_POOL_EMPTY}.isdisjoint(shared)
    assert max(defs.EV_NO_POOL, defs.EV_POOL_EMPTY) < H.EVENT_COUNTERS


def test_a_pushed_task_changes_exactly_the_dispatch_fields():
    sw = Switch()
    sw.store.table("map_pool").add(4, "set_pool", {"pool": 2})
    sw.pool(2, [7])
    sent = task(5, task_type=4, data=b"ABCDEFGH")
    ((port, got),) = sw.run(sent)
    assert port == 2
    want = bytearray(sent)
    want[0:6] = WORKER_MAC.to_bytes(6, "big")
    struct.pack_into("!I", want, 30, WORKER_IP)
    want[43] = Kind.DISPATCH
    struct.pack_into("!H", want, 46, 2)  # slice: the pool
    struct.pack_into("!H", want, 54, 7)  # worker_id
    ip = want[14:34]
    ip[10:12] = b"\0\0"
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    struct.pack_into("!H", want, 24, ~s & 0xFFFF)
    assert got == bytes(want)
    assert sw.store.counter("dispatches").packets[2] == 1
    assert sw.store.counter("dispatches").bytes[2] == len(sent)


def test_the_cursor_wraps_after_the_length_and_restarts_past_a_shortened_schedule():
    sw = Switch()
    sw.store.table("map_pool").add(0, "set_pool", {"pool": 0})
    sw.pool(0, [7, 7, 8])
    cursor = sw.store.register("cursor")
    seen = []
    for rid in range(7):
        ((port, _),) = sw.run(task(rid))
        seen.append(port)
        assert 1 <= cursor[0] <= 3
    assert seen == [2, 2, 3, 2, 2, 3, 2] and cursor[0] == 1
    cursor[0] = 1000  # e.g. left by a longer schedule
    ((port, _),) = sw.run(task(9))
    assert port == 2 and cursor[0] == 1


def test_a_pool_beyond_the_registers_aliases_as_on_the_asic():
    """The cursor and the dispatch counter keep the index bits that address their
    MAX_SLICES cells, as the hardware does; the tables still match the whole pool id
    (the controller keeps pools below MAX_SLICES)."""
    sw = Switch()
    pool = H.MAX_SLICES + 1
    sw.store.table("map_pool").add(0, "set_pool", {"pool": pool})
    sw.pool(pool, [8])
    ((port, f),) = sw.run(task(1))
    assert port == 3 and Header.unpack(f[42:74]).slice == pool
    assert sw.store.register("cursor")[1] == 1 and sw.store.counter("dispatches").packets[1] == 1


def test_rejects_go_back_to_the_ingress_port_as_replies():
    sw = Switch()
    ((port, f),) = sw.run(task(3, task_type=9), port=5)  # type 9: no pool
    h = Header.unpack(f[42:74])
    assert port == 5 and h.kind == Kind.REJECT and h.request_id == 3
    assert f[0:6] == CLIENT_MAC and f[6:12] == SW_MAC
    assert struct.unpack_from("!I", f, 30)[0] == CLIENT_IP
    assert struct.unpack_from("!HH", f, 34) == (21057, 40000)
    assert sw.events() == {defs.EV_NO_POOL: 1}


def test_garbage_never_raises_and_every_frame_counts_once():
    sw = Switch()
    sw.store.table("map_pool").add(0, "set_pool", {"pool": 0})
    sw.pool(0, [7, 99])  # 99 has no address: rejected as EV_NO_WORKER
    rng = random.Random(11)
    frames = []
    for _ in range(400):
        h = Header(
            kind=rng.randrange(256),
            flags=rng.randrange(256),
            task_type=rng.choice((0, 0, 1, rng.randrange(256))),
            slice=rng.randrange(1 << 16),
            worker_id=rng.randrange(1 << 16),
            version=rng.choice((1, 1, 1, rng.randrange(256))),
        ).pack()
        f = udp_frame(h + bytes(rng.randrange(0, 64)))
        cut = rng.choice((len(f), len(f), rng.randrange(0, len(f) + 1)))
        frames.append(f[:cut])
        frames.append(bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 120))))
    for f in frames:
        sw.run(f)
    assert sum(sw.events().values()) == len(frames)
