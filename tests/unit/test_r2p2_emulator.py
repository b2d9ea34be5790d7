"""The R2P2-SW emulator (switch/emulator/r2p2) without a network: its constants against
the P4, and its recirculation port (the packet tests in tests/switch/test_r2p2.py run the
same pipeline behind real ports)."""

from __future__ import annotations

from hosts.proto import Flag, Header, Kind
from switch.emulator.r2p2 import headers as R
from switch.emulator.r2p2 import make_store, pipeline
from switch.p4 import source
from tests.unit.test_emulator_pipeline import udp_frame

PORT = 132  # pipe 1: its recirculation port is 196
WORKER_PORT = 140


def test_constants_match_the_p4():
    c = source.constants(program="r2p2")
    for name in (
        "R2P2_KIND_REPORT",
        "R2P2_KIND_MAX",
        "R2P2_FLAG_RECIRC",
        "R2P2_RECIRC_PORT",
        "R2P2_WORKER_BITS",
        "EV_R2P2_DISPATCHED",
        "EV_R2P2_RECIRCULATED",
        "EV_R2P2_REPORT",
        "EV_R2P2_REJECTED",
    ):
        assert getattr(R, name) == c[name], name
    assert (R.R2P2_KIND_REPORT, R.R2P2_KIND_MAX, R.R2P2_FLAG_RECIRC) == (Kind.REPORT, max(Kind), Flag.RECIRC)
    assert R.recirc_port(PORT) == 196 and R.recirc_port(5) == 68 and R.is_recirc_port(196)


class Switch:
    def __init__(self, workers: int = 1, n: int = 1, max_passes: int = 0xFFFF):
        self.store = make_store()
        self.pipe = pipeline(self.store)
        self.out: list[tuple[int, bytes]] = []
        self.store.table("jbsq").set_default(
            "set_config", {"last_worker": workers - 1, "bound": n, "max_passes": max_passes}
        )
        for w in range(workers):
            self.store.table("select_worker").add(
                w, "to_worker", {"port": WORKER_PORT + w, "dmac": 0x02524D000002, "dip": 0x0A540102}
            )

    def emit(self, port: int, data) -> None:
        self.out.append((port, bytes(data)))

    def send(self, h: Header, port: int = PORT) -> int:
        buf = udp_frame(h.pack())
        return self.pipe.process(port, buf, len(buf), self.emit)

    def event(self, ev: int) -> int:
        return self.store.counter("events").packets[ev]


def test_a_recirculated_pass_waits_behind_arrivals_and_is_dispatched_after_a_report():
    sw = Switch(n=1)
    sw.store.register("depth")[0] = 1  # the only worker at the bound
    assert sw.send(Header(kind=Kind.TASK, client_id=0x100, request_id=7)) == 0
    assert sw.out == [] and sw.pipe.pending == 1 and sw.event(R.EV_R2P2_RECIRCULATED) == 1
    for _ in range(3):  # each round runs the pass queued before it; it recirculates again
        assert sw.pipe.recirculate(sw.emit, 64) == 1
    assert sw.pipe.pending == 1 and sw.event(R.EV_R2P2_RECIRCULATED) == 4
    assert sw.send(Header(kind=Kind.REPORT, worker_id=0, report=0)) == 0  # arrives between passes
    assert sw.store.register("depth")[0] == 0
    assert sw.pipe.recirculate(sw.emit, 64) == 1
    ((port, data),) = sw.out
    h = Header.unpack(data[42:])
    assert port == WORKER_PORT and h.kind == Kind.DISPATCH and h.request_id == 7
    assert h.report == 4 and h.flags & Flag.RECIRC and sw.pipe.pending == 0
    assert sw.store.register("depth")[0] == 1 and sw.event(R.EV_R2P2_DISPATCHED) == 1


def test_a_pass_comes_back_after_the_recirculation_delay():
    sw = Switch(n=1)
    sw.pipe.recirc_delay = 0.5
    sw.store.register("depth")[0] = 1
    sw.send(Header(kind=Kind.TASK, request_id=1))
    due = sw.pipe.next_due()
    assert due is not None
    assert sw.pipe.recirculate(sw.emit, 64, now=due - 0.01) == 0 and sw.pipe.pending == 1
    assert sw.pipe.recirculate(sw.emit, 64, now=due) == 1
    assert sw.pipe.pending == 1 and sw.pipe.next_due() > due  # recirculated again, due later


def test_the_budget_bounds_a_round():
    sw = Switch(n=1)
    sw.store.register("depth")[0] = 1
    for rid in range(5):
        sw.send(Header(kind=Kind.TASK, request_id=rid))
    assert sw.pipe.recirculate(sw.emit, 2) == 2 and sw.pipe.pending == 5
    assert sw.pipe.recirculate(sw.emit, 64) == 5


def test_a_later_task_can_take_a_freed_slot_first():
    """The reordering the paper observes: a recirculating task is overtaken by a task
    that arrives between its passes and finds the slot a REPORT freed."""
    sw = Switch(workers=2, n=1)
    depth = sw.store.register("depth")
    depth[0] = depth[1] = 1  # both at the bound
    sw.send(Header(kind=Kind.TASK, request_id=1))  # looks at worker 0, recirculates
    sw.send(Header(kind=Kind.REPORT, worker_id=1, report=0))  # worker 1 free
    sw.send(Header(kind=Kind.TASK, request_id=2))  # looks at worker 1 (the cursor moved on): takes it
    ((port, data),) = sw.out
    assert port == WORKER_PORT + 1 and Header.unpack(data[42:]).request_id == 2
    for _ in range(4):  # task 1 goes on: workers 0 and 1 are both full again
        sw.pipe.recirculate(sw.emit, 64)
    assert len(sw.out) == 1 and sw.pipe.pending == 1 and sw.event(R.EV_R2P2_RECIRCULATED) == 5
