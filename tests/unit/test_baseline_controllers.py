"""The baseline programs' controllers (switch/control/{r2p2,racksched,draconis,pallas}.py)
against the emulator's BFRuntime server over loopback, as tests/unit/test_controller.py
runs Rain's.

The controller writes through one client session; the checks read the switch back
through a second one (raw table reads), and then run frames through the same store's
in-process pipeline: what the packet tests (tests/switch/test_<prog>.py) set up by hand,
the controller must have set up, so the switch does what they test.
"""

from __future__ import annotations

import json

import pytest

from hosts.proto import HDR_LEN, Header, Kind
from switch.bfrt.client import Client
from switch.control import (
    CONTROLLERS,
    BaselineSettings,
    ControllerError,
    PoolSettings,
    WorkerRegistration,
    controller_class,
    for_switch,
    settings_from,
)
from switch.control.pallas import wrr_order
from switch.control.r2p2 import DEPTH_FULL
from switch.control.racksched import pick_entries
from switch.emulator import programs
from switch.emulator.bfrt_server import serve
from tests.unit.test_controller import inventory
from tests.unit.test_emulator_pipeline import udp_frame

pytestmark = pytest.mark.timeout(60)

P = "pipe.SwitchIngress."
CLIENT0, CLIENT1, WORKER0, WORKER1 = 0x0A500601, 0x0A500602, 0x0A500603, 0x0A500604
PORT = {"client0": 132, "client1": 140, "worker0": 148, "worker1": 156}
MAC = {"worker0": 0x02524D060003, "worker1": 0x02524D060004}
IP = {"worker0": WORKER0, "worker1": WORKER1}
RAIN = 14 + 20 + 8  # the rain header's offset in a frame


def reg(host: str, base: int, n: int, pool: int = 0) -> WorkerRegistration:
    idx = {"worker0": 3, "worker1": 4}.get(host, 9)
    ids = tuple(range(base, base + n))
    return WorkerRegistration(
        host=host, worker_ids=ids, mac=f"02:52:4d:06:00:{idx:02x}", ip=f"10.80.6.{idx}", slices=dict.fromkeys(ids, pool)
    )


class Rig:
    """One program's emulated switch: its store, a BFRuntime server over it, the
    controller's session and a reader's, and the store's pipeline for frames."""

    def __init__(self, program: str):
        mod = programs.load(program)
        self.program = program
        self.store = mod.make_store()
        if program != "rain":
            self.pipe = mod.pipeline(self.store)
        self.server = serve(self.store, "127.0.0.1", 0)
        self.client = Client(f"127.0.0.1:{self.server.port}", program, client_id=0)
        self.reader = Client(f"127.0.0.1:{self.server.port}", program, client_id=1, bind=False)

    def ctl(self, settings=None):
        return controller_class(self.program)(self.client, inventory(), settings)

    def close(self):
        self.reader.close()
        self.client.close()
        self.server.stop(None)

    # -- reading back through BFRuntime ----------------------------------------------
    def entries(self, table: str) -> dict:
        out = {}
        for e in self.reader.table(table).entries():
            k = tuple(e.key.values())
            out[k[0] if len(k) == 1 else k] = (e.action.rsplit(".", 1)[-1], e.data)
        return out

    def default(self, table: str) -> tuple[str, dict]:
        d = self.reader.table(table).default()
        return d.action.rsplit(".", 1)[-1], d.data

    def cells(self, register: str) -> list[int]:
        return [c[0] for c in self.reader.register(register).read_all()]

    # -- frames through the pipeline -------------------------------------------------
    def send(self, h: Header | None, port: int = 132, src_ip: int = CLIENT0) -> list[tuple[int, Header, bytes]]:
        """What leaves the switch for this frame (None: for one round of recirculated passes)."""
        out = []
        emit = lambda p, d: out.append((p, bytes(d)))  # noqa: E731
        if h is None:
            self.pipe.recirculate(emit, 64)
        else:
            buf = udp_frame(h.pack(), src_ip=src_ip)
            self.pipe.process(port, buf, len(buf), emit)
        return [(p, Header.unpack(d[RAIN : RAIN + HDR_LEN]), d) for p, d in out]


@pytest.fixture
def rig(request):
    r = Rig(request.param)
    yield r
    r.close()


def routes_ok(rig: Rig) -> None:
    fwd = rig.entries(P + "forward.forward")
    assert fwd == {0x0A500601 + i: ("set_egress", {"port": 132 + 8 * i, "dmac": 0x02524D060001 + i}) for i in range(4)}


def worker_entries(rig: Rig, table: str, ids_by_host: dict[str, list[int]]) -> None:
    want = {
        w: ("to_worker", {"port": PORT[h], "dmac": MAC[h], "dip": IP[h]}) for h, ids in ids_by_host.items() for w in ids
    }
    assert rig.entries(table) == want


def dst_ip(frame: bytes) -> int:
    return int.from_bytes(frame[30:34], "big")


def src_ip(frame: bytes) -> int:
    return int.from_bytes(frame[26:30], "big")


# -- every program -------------------------------------------------------------------------


@pytest.mark.parametrize("rig", ["rain"], indirect=True)
@pytest.mark.parametrize("program", ["r2p2", "racksched", "draconis", "pallas"])
def test_a_controller_refuses_a_switch_running_another_program(rig, program):
    cls = controller_class(program)
    with pytest.raises(ControllerError, match=f"runs 'rain', which is not the {cls.TITLE} program") as e:
        cls(rig.client, inventory())
    assert f"--program {program}" in e.value.fix


@pytest.mark.parametrize("rig", ["rain"], indirect=True)
def test_rains_controller_refuses_a_baselines_settings(rig):
    with pytest.raises(ControllerError, match="takes Settings, not BaselineSettings") as e:
        controller_class("rain")(rig.client, inventory(), BaselineSettings())
    assert "Settings" in e.value.fix
    with pytest.raises(ControllerError, match="takes Settings, not BaselineSettings"):
        for_switch(rig.client, inventory(), BaselineSettings())


def test_the_registry_knows_every_program_and_refuses_others():
    assert set(programs.NAMES) == set(CONTROLLERS)
    with pytest.raises(ControllerError, match="no controller for the P4 program 'nope'") as e:
        controller_class("nope")
    assert "rain, r2p2, racksched, draconis, pallas, ipv4_forward" in e.value.fix
    assert settings_from("r2p2", {"jbsq_n": 3}) == BaselineSettings(jbsq_n=3)
    assert settings_from("rain").slices and settings_from("pallas") == BaselineSettings()


@pytest.mark.parametrize("rig", ["r2p2", "racksched", "draconis", "pallas"], indirect=True)
def test_snapshot_is_json_with_named_events_and_reset_zeroes_state(rig):
    settings = BaselineSettings(pools={0: PoolSettings((0,))}) if rig.program == "pallas" else None
    ctl = for_switch(rig.client, inventory(), settings)
    assert type(ctl) is controller_class(rig.program)
    with pytest.raises(ControllerError, match="takes BaselineSettings, not Settings") as e:
        for_switch(rig.client, inventory(), settings_from("rain"))
    assert "settings_from" in e.value.fix
    ctl.program([reg("worker0", 0, 2)])
    before = {t: rig.entries(t) for t in ctl.TABLES}
    rig.reader.counter(ctl.EVENTS).write(2, 5, 500)
    for name in ctl.REGISTERS:
        rig.reader.register(name).write(0, 1)
    snap = json.loads(json.dumps(ctl.snapshot()))
    assert snap["program"] == rig.program and snap["pipe"] == 1
    assert snap["counters"][ctl.EVENTS]["EV_DISPATCH_DIRECT"] == {"packets": 5, "bytes": 500}
    assert "EV_BAD_RAIN" in snap["counters"][ctl.EVENTS]
    for name in ctl.REGISTERS:
        r = snap["registers"][name]
        assert r.get("skipped") or r["pipes"][0][0] == 1, name
    ctl.reset(tables=False)
    assert all(v.packets == 0 for v in rig.reader.counter(ctl.EVENTS).read_all())
    for name in ctl.REGISTERS:
        assert rig.reader.register(name).read(0)[0] == 0, name
    rig.reader.table(P + "forward.forward").delete(CLIENT0)  # drift
    ctl.reset()
    routes_ok(rig)
    assert {t: rig.entries(t) for t in ctl.TABLES} == before
    ctl.clear()
    assert rig.entries(P + "forward.forward") == {} and all(rig.entries(t) == {} for t in ctl.TABLES)
    with pytest.raises(ControllerError, match="before the switch is programmed"):
        ctl.register_worker(reg("worker1", 2, 1))


@pytest.mark.parametrize("rig", ["ipv4_forward"], indirect=True)
def test_the_forwarder_routes_every_host_refuses_workers_and_counts_what_it_forwards(rig):
    """ipv4_forward (the server-side systems' switch): routes to every inventory host and
    nothing else; a worker registering is refused by name; a TCP segment between two
    hosts leaves on its host's port, counted as forwarded, and reset zeroes the count."""
    ctl = for_switch(rig.client, inventory())
    assert type(ctl).__name__ == "Ipv4ForwardController" and ctl.TABLES == ()
    ctl.program()
    routes_ok(rig)
    with pytest.raises(ControllerError, match="no worker registers with it") as e:
        ctl.program([reg("worker0", 0, 2)])
    assert "rain, r2p2" in e.value.fix
    routes_ok(rig)  # refused before any write
    tcp = bytearray(udp_frame(b"RPC1" + bytes(28), src_ip=CLIENT0, dst_ip=WORKER0))
    tcp[23] = 6  # the IP protocol: TCP (the switch reads no further than IPv4)
    out = []
    rig.pipe.process(PORT["client0"], tcp, len(tcp), lambda p, d: out.append((p, bytes(d))))
    assert [(p, dst_ip(d)) for p, d in out] == [(PORT["worker0"], WORKER0)]
    snap = ctl.snapshot()
    assert snap["counters"][ctl.EVENTS]["EV_FORWARDED"]["packets"] == 1 and snap["registers"] == {}
    ctl.reset()
    assert all(v.packets == 0 for v in rig.reader.counter(ctl.EVENTS).read_all())
    routes_ok(rig)


@pytest.mark.parametrize("rig", ["r2p2", "racksched", "draconis", "pallas"], indirect=True)
def test_bad_workers_are_refused_before_any_write(rig):
    settings = BaselineSettings(pools={0: PoolSettings((0,))}) if rig.program == "pallas" else None
    ctl = rig.ctl(settings)
    stranger = WorkerRegistration(
        host="worker9", worker_ids=(0,), mac="02:00:00:00:00:09", ip="10.0.0.9", slices={0: 0}
    )
    with pytest.raises(ControllerError, match="host 'worker9' is not in the inventory") as e:
        ctl.program([stranger])
    assert "worker0" in e.value.fix
    wrong_mac = WorkerRegistration(
        host="worker0", worker_ids=(0,), mac="02:00:00:00:00:09", ip="10.80.6.3", slices={0: 0}
    )
    with pytest.raises(ControllerError, match="the inventory gives worker0") as e:
        ctl.program([wrong_mac])
    assert e.value.fix
    with pytest.raises(ControllerError, match="worker 1 is also registered by worker0") as e:
        ctl.program([reg("worker0", 0, 2), reg("worker1", 1, 2)])
    assert "--worker-base" in e.value.fix
    assert rig.entries(P + "forward.forward") == {}
    ctl.program([reg("worker0", 0, 1)])
    with pytest.raises(ControllerError, match="worker 7 is not registered") as e:
        ctl.deregister_worker(7)
    assert e.value.fix == "registered: 0"
    with pytest.raises(ControllerError, match="already registered"):
        ctl.register_worker(reg("worker1", 0, 1))


def test_baseline_settings_from_dict():
    s = BaselineSettings.from_dict(
        {"jbsq_n": 2, "k": 2, "pools": {"0": {"task_types": [0, 1]}, 1: {"task_types": [2], "weights": {"4": 3}}}}
    )
    assert s.jbsq_n == 2 and s.pools == {0: PoolSettings((0, 1)), 1: PoolSettings((2,), {4: 3})}
    for bad, match in (
        ({"jbsq": 1}, "unknown key"),
        ({"pools": {0: {"types": [1]}}}, "unknown key"),
        ({"pools": {"x": {}}}, "not a pool number"),
        ({"pools": {0: {"task_types": [1]}, 1: {"task_types": [1]}}}, "also in pool 0"),
        ({"pools": {16: {}}}, r"not in 0..15"),
        ({"pools": {0: {"task_types": [256]}}}, "not a task type"),
        ({"pools": {0: {"weights": {1: 0}}}}, "weight"),
        ({"jbsq_n": "2"}, "not an integer"),
        ({"port_up_timeout_s": 0}, "seconds"),
    ):
        with pytest.raises(ControllerError, match=match):
            BaselineSettings.from_dict(bad)


# -- R2P2-SW ------------------------------------------------------------------------------


@pytest.mark.parametrize("rig", ["r2p2"], indirect=True)
def test_r2p2_program_and_dispatch_round_robin(rig):
    ctl = rig.ctl(BaselineSettings(jbsq_n=2, max_passes=40))
    ctl.program([reg("worker0", 0, 2), reg("worker1", 2, 2)])
    routes_ok(rig)
    worker_entries(rig, P + "workers.select_worker", {"worker0": [0, 1], "worker1": [2, 3]})
    assert rig.default(P + "config.jbsq") == ("set_config", {"last_worker": 3, "bound": 2, "max_passes": 40})
    # another point's variant: checked at once, written by the next reset
    with pytest.raises(ControllerError, match="jbsq_n = 0"):
        ctl.configure(BaselineSettings(jbsq_n=0))
    ctl.configure(BaselineSettings(jbsq_n=3, max_passes=40))
    ctl.reset()
    assert rig.default(P + "config.jbsq") == ("set_config", {"last_worker": 3, "bound": 3, "max_passes": 40})
    ctl.configure(BaselineSettings(jbsq_n=2, max_passes=40))
    ctl.reset()
    assert rig.cells(P + "jbsq.depth")[:4] == [0, 0, 0, 0]
    # the round robin: workers 0..3, then 0 again; each DISPATCH to its host
    got = [rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=i)) for i in range(5)]
    assert [(p, h.kind, h.worker_id) for ((p, h, _),) in got] == [
        (148, Kind.DISPATCH, 0),
        (148, Kind.DISPATCH, 1),
        (156, Kind.DISPATCH, 2),
        (156, Kind.DISPATCH, 3),
        (148, Kind.DISPATCH, 0),
    ]
    assert dst_ip(got[2][0][2]) == WORKER1
    assert rig.cells(P + "jbsq.depth")[:4] == [2, 1, 1, 1]
    # a REPORT from a registered worker sets its depth
    assert rig.send(Header(kind=Kind.REPORT, worker_id=2, report=2), port=156) == []
    assert rig.cells(P + "jbsq.depth")[2] == 2


@pytest.mark.parametrize("rig", ["r2p2"], indirect=True)
def test_r2p2_workers_leave_and_join_without_a_gap_in_the_round_robin(rig):
    ctl = rig.ctl(BaselineSettings(jbsq_n=1))
    ctl.program([reg("worker0", 0, 2), reg("worker1", 2, 2)])
    ctl.deregister_worker(1)  # the middle: kept, full, so passes move on
    assert 1 in rig.entries(P + "workers.select_worker")
    assert rig.cells(P + "jbsq.depth")[1] == DEPTH_FULL
    assert rig.default(P + "config.jbsq")[1]["last_worker"] == 3
    ctl.reset(tables=False)  # stays pinned across a reset
    assert rig.cells(P + "jbsq.depth")[1] == DEPTH_FULL
    assert rig.default(P + "config.jbsq")[1]["last_worker"] == 3
    rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=1))  # worker 0
    # worker 1 is full: the task recirculates, and its next pass goes to worker 2
    assert rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=2)) == [] and rig.pipe.pending == 1
    ((p, h, _),) = rig.send(None)
    assert (p, h.kind, h.worker_id, h.request_id, h.report) == (156, Kind.DISPATCH, 2, 2, 1)
    ctl.deregister_worker(3)  # the highest: the round robin ends at 2
    assert rig.default(P + "config.jbsq")[1]["last_worker"] == 2 and 3 not in rig.entries(P + "workers.select_worker")
    ctl.deregister_worker(2)  # ... and then at 0, the pinned 1 dropped with it
    assert rig.default(P + "config.jbsq")[1]["last_worker"] == 0
    assert set(rig.entries(P + "workers.select_worker")) == {0}
    with pytest.raises(ControllerError, match=r"worker ids 0, 2 leave a gap at 1") as e:
        ctl.register_worker(reg("worker1", 2, 1))
    assert "0..n-1" in e.value.fix
    ctl.register_worker(reg("worker1", 1, 2))
    assert rig.default(P + "config.jbsq")[1]["last_worker"] == 2
    worker_entries(rig, P + "workers.select_worker", {"worker0": [0], "worker1": [1, 2]})
    assert rig.cells(P + "jbsq.depth")[:3] == [1, 0, 0]  # worker 0 holds its task; the joiners none
    ctl.deregister_worker(0)
    assert ctl.snapshot()["state"]["pinned"] == [0]
    ctl.register_worker(reg("worker0", 0, 1))  # takes its pinned id back
    assert ctl.snapshot()["state"]["pinned"] == [] and rig.cells(P + "jbsq.depth")[0] == 0


@pytest.mark.parametrize("rig", ["r2p2"], indirect=True)
def test_r2p2_refuses_what_it_cannot_run(rig):
    for n in (0, 0xFFFF):
        with pytest.raises(ControllerError, match=f"jbsq_n = {n} is not a JBSQ bound") as e:
            rig.ctl(BaselineSettings(jbsq_n=n))
        assert "baseline.jbsq_n" in e.value.fix
    with pytest.raises(ControllerError, match="max_passes = 0"):
        rig.ctl(BaselineSettings(max_passes=0))
    ctl = rig.ctl()
    with pytest.raises(ControllerError, match=r"worker ids 0, 2..3 leave a gap at 1"):
        ctl.program([reg("worker0", 0, 1), reg("worker1", 2, 2)])
    ctl.program([])  # no workers: unconfigured, every task rejected
    assert rig.default(P + "config.jbsq")[0] == "unconfigured"


# -- RackSched-SW -------------------------------------------------------------------------


@pytest.mark.parametrize("rig", ["racksched"], indirect=True)
def test_racksched_program_and_the_less_loaded_choice(rig):
    ctl = rig.ctl()
    ctl.program([reg("worker0", 0, 2), reg("worker1", 2, 2)])
    routes_ok(rig)
    worker_entries(rig, P + "dispatch.select_worker", {"worker0": [0, 1], "worker1": [2, 3]})
    pick = rig.entries(P + "choose.pick")
    assert sorted((k[0], k[1], d["first"], d["second"]) for k, (_a, d) in pick.items()) == sorted(
        pick_entries([0, 1, 2, 3])
    )
    assert rig.cells(P + "loads.load_a")[:4] == [0, 0, 0, 0]
    ctl.deregister_worker(1)
    ctl.deregister_worker(3)
    assert len(rig.entries(P + "choose.pick")) == 2 and set(rig.entries(P + "dispatch.select_worker")) == {0, 2}
    # worker 0 reports a long queue: every task goes to worker 2, on worker1's port
    assert rig.send(Header(kind=Kind.REPORT, worker_id=0, report=9), port=148) == []
    outs = [rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=i)) for i in range(6)]
    assert {(p, h.kind, h.worker_id) for ((p, h, _),) in outs} == {(156, Kind.DISPATCH, 2)}
    assert rig.cells(P + "loads.load_a")[2] == 6
    ctl.register_worker(reg("worker0", 1, 1))
    assert len(rig.entries(P + "choose.pick")) == 6
    ctl.deregister_worker(0)
    ctl.deregister_worker(1)
    ctl.deregister_worker(2)
    assert rig.entries(P + "choose.pick") == {}  # no worker: tasks dropped as EV_NO_WORKER


@pytest.mark.parametrize("rig", ["racksched"], indirect=True)
def test_racksched_refuses_k_other_than_2(rig):
    with pytest.raises(ControllerError, match="power-of-2 choices only, not k = 3") as e:
        rig.ctl(BaselineSettings(k=3))
    assert e.value.fix == "set the spec's baseline.k to 2"


# -- Draconis-SW --------------------------------------------------------------------------


@pytest.mark.parametrize("rig", ["draconis"], indirect=True)
def test_draconis_program_queue_and_pull(rig):
    ctl = rig.ctl(BaselineSettings(queue_capacity=2))
    ctl.program([reg("worker0", 0, 2)])
    routes_ok(rig)
    assert rig.default(P + "task_queue.config_queue") == ("set_capacity", {"last": 1, "neg_cap": (-2) & 0xFFFFFFFF})
    assert rig.entries(P + "dispatch.client_addr") == {
        0: ("set_client", {"ip": CLIENT0}),
        1: ("set_client", {"ip": CLIENT1}),
    }
    # client host 1's tasks queue (two fit), a third is rejected; a pull takes the first
    for i in range(2):
        assert rig.send(Header(kind=Kind.TASK, client_id=0x0105, request_id=i), port=140, src_ip=CLIENT1) == []
    ((p, h, _),) = rig.send(Header(kind=Kind.TASK, client_id=0x0105, request_id=2), port=140, src_ip=CLIENT1)
    assert (p, h.kind) == (140, Kind.REJECT)
    ((p, h, f),) = rig.send(Header(kind=Kind.PULL, worker_id=1, report=1), port=148, src_ip=WORKER0)
    assert (p, h.kind, h.request_id, h.client_id) == (148, Kind.DISPATCH, 0, 0x0105)
    assert src_ip(f) == CLIENT1  # the worker answers the client directly
    assert ctl.snapshot()["state"] == {
        "capacity": 2,
        "waiting": 1,
        "head": 1,
        "tail": 0,
        "clients": {"0": "10.80.6.1", "1": "10.80.6.2"},
    }
    ctl.register_worker(reg("worker1", 2, 1))
    ctl.deregister_worker(0)
    assert sorted(ctl.workers) == [1, 2]


@pytest.mark.parametrize("rig", ["draconis"], indirect=True)
def test_draconis_refuses_what_it_cannot_run(rig):
    with pytest.raises(ControllerError, match="Draconis-SW is JBSQ\\(1\\)") as e:
        rig.ctl(BaselineSettings(jbsq_n=2))
    assert "baseline.jbsq_n to 1" in e.value.fix
    for cap in (0, 131073):
        with pytest.raises(ControllerError, match=f"queue_capacity = {cap} is not in 1..131072"):
            rig.ctl(BaselineSettings(queue_capacity=cap))
    ctl = rig.ctl()
    with pytest.raises(ControllerError, match="client host id 0 is given to client0 and client1"):
        from switch.control import ClientRegistration

        ctl.program([], [ClientRegistration("client0", 0, "10.80.6.1"), ClientRegistration("client1", 0, "10.80.6.2")])


# -- Pallas-SW ----------------------------------------------------------------------------


@pytest.mark.parametrize("rig", ["pallas"], indirect=True)
def test_pallas_program_pools_and_weighted_round_robin(rig):
    pools = {0: PoolSettings((0, 1)), 1: PoolSettings((2,), weights={2: 2})}
    ctl = rig.ctl(BaselineSettings(pools=pools))
    ctl.program([reg("worker0", 0, 2, pool=0), reg("worker1", 2, 2, pool=1)])
    routes_ok(rig)
    worker_entries(rig, P + "push.select_worker", {"worker0": [0, 1], "worker1": [2, 3]})
    assert rig.entries(P + "pool_map.map_pool") == {t: ("set_pool", {"pool": p}) for t, p in ((0, 0), (1, 0), (2, 1))}
    assert rig.entries(P + "wrr.config_pool") == {
        0: ("set_pool_config", {"length": 2}),
        1: ("set_pool_config", {"length": 3}),
    }
    sched = rig.entries(P + "wrr.schedule")
    assert {k: d["worker"] for k, (_a, d) in sched.items()} == {(0, 1): 0, (0, 2): 1, (1, 1): 2, (1, 2): 3, (1, 3): 2}
    # type 2 tasks: pool 1, worker 2 twice for worker 3's once; type 0: pool 0; type 9: no pool
    outs = [rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=i, task_type=2)) for i in range(6)]
    assert [(p, h.worker_id, h.slice) for ((p, h, _),) in outs] == [(156, w, 1) for w in (2, 3, 2, 2, 3, 2)]
    ((p, h, _),) = rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=9, task_type=0))
    assert (p, h.kind, h.worker_id) == (148, Kind.DISPATCH, 0)
    ((p, h, _),) = rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=9, task_type=9))
    assert (p, h.kind) == (132, Kind.REJECT)
    # leaving and joining rewrite the pool's schedule; a pool without workers rejects
    ctl.deregister_worker(2)
    assert rig.entries(P + "wrr.config_pool")[1] == ("set_pool_config", {"length": 1})
    assert {k for k in rig.entries(P + "wrr.schedule") if k[0] == 1} == {(1, 1)}
    ctl.deregister_worker(3)
    assert 1 not in rig.entries(P + "wrr.config_pool") and 3 not in rig.entries(P + "push.select_worker")
    ((p, h, _),) = rig.send(Header(kind=Kind.TASK, client_id=0x0100, request_id=10, task_type=2))
    assert h.kind == Kind.REJECT
    ctl.register_worker(reg("worker1", 2, 2, pool=1))
    assert rig.entries(P + "wrr.config_pool")[1] == ("set_pool_config", {"length": 3})


def test_wrr_order_interleaves_by_weight():
    assert wrr_order({5: 1, 7: 3, 9: 2}) == [5, 7, 9, 7, 9, 7]
    assert wrr_order({}) == []


@pytest.mark.parametrize("rig", ["pallas"], indirect=True)
def test_pallas_refuses_empty_pools_and_unknown_pools(rig):
    ctl = rig.ctl(BaselineSettings(pools={0: PoolSettings((0,)), 1: PoolSettings((1,))}))
    with pytest.raises(ControllerError, match=r"pool\(s\) 1 serve task types but have no worker") as e:
        ctl.program([reg("worker0", 0, 2, pool=0)])
    assert "at least one worker" in e.value.fix
    with pytest.raises(ControllerError, match="is in pool 4, which the settings do not configure") as e:
        ctl.program([reg("worker0", 0, 1, pool=0), reg("worker1", 1, 1, pool=1), reg("worker1", 2, 1, pool=4)])
    assert "one of: 0, 1" in e.value.fix
    assert rig.entries(P + "forward.forward") == {}
    heavy = rig.ctl(BaselineSettings(pools={0: PoolSettings((0,), weights={0: 5000})}))
    with pytest.raises(ControllerError, match="the schedule table holds 4096"):
        heavy.program([reg("worker0", 0, 1)])
    misweighed = rig.ctl(BaselineSettings(pools={0: PoolSettings((0,)), 1: PoolSettings((1,), weights={0: 2})}))
    with pytest.raises(ControllerError, match="pool 1 weighs worker 0, which registered in pool 0"):
        misweighed.program([reg("worker0", 0, 1, pool=0), reg("worker1", 1, 1, pool=1)])


def test_a_baseline_controller_reconnects_after_a_switch_restart_with_nothing_installed():
    from switch.emulator.r2p2 import make_store
    from tests.poll import until
    from tests.unit.test_switch_restart import free_port

    port = free_port()
    srv = serve(make_store(), "127.0.0.1", port)
    client = Client(f"127.0.0.1:{port}", "r2p2", client_id=0)
    try:
        ctl = controller_class("r2p2")(client, inventory())
        ctl.bring_up_ports()
        ctl.program([reg("worker0", 0, 3)])
        ctl.deregister_worker(1)
        assert ctl.ensure_session() is None and ctl.snapshot()["state"]["pinned"] == [1]
        srv.stop(0).wait()
        assert until(lambda: ctl.switch_restarted, 10)
        srv = serve(make_store(), "127.0.0.1", port)  # back, blank
        assert ctl.ensure_session(timeout=20) is not None
        assert ctl.workers == {} and ctl.snapshot()["state"]["pinned"] == []
        assert all(p["$PORT_UP"] for p in client.ports.all().values())
        ctl.program([reg("worker0", 0, 2)])  # the new session is bound: writes go through
        with Client(f"127.0.0.1:{port}", "r2p2", client_id=5, bind=False) as reader:
            assert reader.table(P + "config.jbsq").default().data["last_worker"] == 1
    finally:
        client.close()
        srv.stop(0)
