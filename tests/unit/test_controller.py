"""The Rain controller against the emulator's BFRuntime server over loopback.

The server serves the Rain program's store (switch.emulator.rain.make_store()); the
controller drives it through switch.bfrt.Client, and every check reads the switch's
state back through BFRuntime with a second, independent client session (raw table
reads, not the controller's own readers). No packets, no namespaces. Where a test
needs a queue to hold something, it writes the registers through BFRuntime as the
data plane would have left them.
"""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from orchestrator.inventory.model import Inventory
from switch.bfrt.client import Client
from switch.control import (
    ClientRegistration,
    ControllerError,
    RainController,
    Ring,
    Settings,
    SliceSettings,
    Topology,
    WorkerRegistration,
)
from switch.control.constants import MAX_SLICES, MAX_WORKERS, QUEUE_ENTRIES, RDMA_SLOT_BYTES
from switch.control.events import NAMES as EVENT_NAMES
from switch.control.pre import mgid_of, node_of
from switch.emulator.bfrt_server import serve
from switch.emulator.rain import make_store
from switch.emulator.schema import PORT_FRAMES_DROPPED_DOWN, PORT_LINK_DOWN_EVENTS, PORT_STAT_FIELDS
from switch.p4 import source
from tests.bfrt_program import PROGRAM as OTHER_PROGRAM

pytestmark = pytest.mark.timeout(120)

SERVICE = {"service_mac": "02:00:00:00:00:fe", "service_ip": "10.80.6.254"}
P = "pipe.SwitchIngress."
E = "pipe.SwitchEgress."


def inventory(dev_ports=(132, 140, 148, 156)) -> Inventory:
    names = ["client0", "client1", "worker0", "worker1"]
    roles = ["client", "client", "worker", "worker"]
    return Inventory.model_validate(
        {
            "name": "unit",
            "switch": {
                "name": "sw0",
                "kind": "emulated",
                "mgmt": {"address": "10.79.6.250"},
                "bfrt": "10.79.6.250:50052",
                "ports": [
                    {"port": f"{i + 1}/0", "dev_port": d, "speed": "100G", "fec": "none", "iface": f"swp{i + 1}"}
                    for i, d in enumerate(dev_ports)
                ],
            },
            "hosts": [
                {
                    "name": n,
                    "role": r,
                    "mgmt": {"address": f"10.79.6.{i + 1}"},
                    "cores": [0],
                    "nic": {
                        "vdev": "net_af_packet0,iface=data0",
                        "mac": f"02:52:4d:06:00:{i + 1:02x}",
                        "ip": f"10.80.6.{i + 1}",
                        "switch_port": f"{i + 1}/0",
                    },
                }
                for i, (n, r) in enumerate(zip(names, roles))
            ],
        }
    )


def worker_reg(
    host="worker0",
    base=0,
    n=2,
    slice_=0,
    *,
    slots=64,
    slot_size=RDMA_SLOT_BYTES,
    va=0x7F12_0000_0000,
    psn=7,
    ring=True,
    qp_type="rc",
    **kw,
) -> WorkerRegistration:
    idx = {"worker0": 3, "worker1": 4}.get(host, 9)
    ids = tuple(range(base, base + n))
    r = (
        Ring(
            va={w: va + i * slots * slot_size for i, w in enumerate(ids)},
            qpn={w: 0x100 + i for i, w in enumerate(ids)},
            size=slots * slot_size,
            slot_size=slot_size,
            slots=slots,
            rkey=0x52414E,
            psn=psn,
            qp_type=qp_type,
        )
        if ring
        else None
    )
    args = dict(
        host=host,
        worker_ids=ids,
        mac=f"02:52:4d:06:00:{idx:02x}",
        ip=f"10.80.6.{idx}",
        slices={w: slice_ for w in ids},
        ring=r,
    )
    args.update(kw)
    return WorkerRegistration(**args)


def two_slices(**kw) -> Settings:
    return Settings(
        slices={0: SliceSettings(task_types=(0, 1)), 1: SliceSettings(task_types=(2,), share=0.25)}, **{**SERVICE, **kw}
    )


@pytest.fixture
def store():
    return make_store()


@pytest.fixture
def server(store):
    srv = serve(store, "127.0.0.1", 0)
    yield srv
    srv.stop(None)


@pytest.fixture
def client(server):
    with Client(f"127.0.0.1:{server.port}", "rain", client_id=0) as c:
        yield c


@pytest.fixture
def reader(server):
    """A second session that only reads (what an operator's `rainmaker switch tables` sees)."""
    with Client(f"127.0.0.1:{server.port}", "rain", client_id=1, bind=False) as c:
        yield c


@pytest.fixture
def ctl(client):
    return RainController(client, inventory(), two_slices())


# -- reading the switch back through BFRuntime -------------------------------------------


def entries(reader, table) -> dict:
    """key value (one-field keys) -> (short action, data)."""
    out = {}
    for e in reader.table(table).entries():
        (k,) = e.key.values()
        out[k] = (e.action.rsplit(".", 1)[-1], e.data)
    return out


def default(reader, table) -> tuple[str, dict]:
    d = reader.table(table).default()
    return d.action.rsplit(".", 1)[-1], d.data


def reg(reader, name, signed=False) -> list[int]:
    """Pipe 0's cells of a register."""
    return [cells[0] for cells in reader.register(name, signed=signed).read_all()]


def switch_state(reader) -> dict:
    """Everything the controller programs, read back (for idempotence checks)."""
    tables = {t: (entries(reader, t), default(reader, t)) for t in source.table_schema() if t != "actions"}
    small = {
        r: reg(reader, r, signed=r.endswith("balance"))
        for r, o in source.register_schema().items()
        if o["kind"] == "Register" and o["size"] < QUEUE_ENTRIES
    }
    return {"tables": tables, "registers": small, "groups": reader.pre.groups(), "nodes": reader.pre.nodes()}


# -- program ------------------------------------------------------------------------------


def test_program_installs_every_table_register_and_group(ctl, reader):
    ctl.program([worker_reg("worker0", 0, slice_=0), worker_reg("worker1", 2, slice_=1, psn=9)])

    fwd = entries(reader, P + "forward.forward")
    assert fwd == {0x0A500601 + i: ("set_egress", {"port": 132 + 8 * i, "dmac": 0x02524D060001 + i}) for i in range(4)}
    assert default(reader, P + "forward.forward")[0] == "drop"

    assert entries(reader, P + "slice_map.map_slice") == {
        0: ("set_slice", {"slice": 0}),
        1: ("set_slice", {"slice": 0}),
        2: ("set_slice", {"slice": 1}),
    }

    cfg = entries(reader, P + "bidir_queue.config_slice")
    s1 = int(0.25 * QUEUE_ENTRIES)
    s0 = QUEUE_ENTRIES - s1
    assert cfg == {
        0: (
            "set_slice_config",
            {
                "first": 0,
                "last": s0 - 1,
                "neg_cap": (-s0) & 0xFFFFFFFF,
                "neg_large_cap": (-64) & 0xFFFFFFFF,  # 64 ring slots, no quota registered
                "last_slot": 63,
                "mgid": 1,
            },
        ),
        1: (
            "set_slice_config",
            {
                "first": s0,
                "last": QUEUE_ENTRIES - 1,
                "neg_cap": (-s1) & 0xFFFFFFFF,
                "neg_large_cap": (-64) & 0xFFFFFFFF,
                "last_slot": 63,
                "mgid": 2,
            },
        ),
    }
    assert default(reader, P + "bidir_queue.config_slice")[0] == "unconfigured"

    sel = entries(reader, P + "dispatch.select_worker")
    assert sel == {
        0: ("to_worker", {"port": 148, "dmac": 0x02524D060003, "dip": 0x0A500603}),
        1: ("to_worker", {"port": 148, "dmac": 0x02524D060003, "dip": 0x0A500603}),
        2: ("to_worker", {"port": 156, "dmac": 0x02524D060004, "dip": 0x0A500604}),
        3: ("to_worker", {"port": 156, "dmac": 0x02524D060004, "dip": 0x0A500604}),
    }
    # client host ids default to the inventory's clients in order
    assert entries(reader, P + "dispatch.client_addr") == {
        0: ("set_client", {"ip": 0x0A500601}),
        1: ("set_client", {"ip": 0x0A500602}),
    }
    assert default(reader, P + "telemetry.config_int")[0] == "stamp"

    bw = entries(reader, E + "rdma_writer.build_write")
    assert set(bw) == {0, 1, 2, 3}
    action, d = bw[1]
    assert action == "make_write"
    assert d == {
        "smac": 0x0200000000FE,
        "dmac": 0x02524D060003,
        "sip": 0x0A5006FE,
        "dip": 0x0A500603,
        "tos": 26 << 2,  # the inventory's roce.dscp (default 26), ECN Not-ECT
        "opcode": 0x0A,
        "qpn": 0x101,
        "rkey": 0x52414E,
        "va_hi": 0x7F12,
        "va_lo": 64 * RDMA_SLOT_BYTES,
    }
    psn = reg(reader, E + "rdma_writer.psn")
    assert psn[:4] == [7, 7, 9, 9] and not any(psn[4:])

    nodes = reader.pre.nodes()
    assert {n: (v["rid"], v["dev_ports"]) for n, v in nodes.items()} == {
        node_of(0): (0, [148]),
        node_of(1): (1, [148]),
        node_of(2): (2, [156]),
        node_of(3): (3, [156]),
    }
    assert reader.pre.groups() == {mgid_of(0): [node_of(0), node_of(1)], mgid_of(1): [node_of(2), node_of(3)]}

    assert reg(reader, P + "bidir_queue.balance", signed=True) == [0] * MAX_SLICES
    assert reg(reader, P + "bidir_queue.head") == [0, s0] + [0] * (MAX_SLICES - 2)
    assert reg(reader, P + "bidir_queue.tail") == [0, s0] + [0] * (MAX_SLICES - 2)
    assert reg(reader, P + "rdma_engine.ring_offset") == [0] * MAX_SLICES


def test_program_is_idempotent_and_replaces_what_was_there(ctl, reader):
    ctl.program([worker_reg("worker0", 0), worker_reg("worker1", 2, slice_=1)])
    first = switch_state(reader)
    ctl.program([worker_reg("worker0", 0), worker_reg("worker1", 2, slice_=1)])
    assert switch_state(reader) == first
    ctl.program([worker_reg("worker1", 10, n=1, slice_=1)], clients=[ClientRegistration("client1", 7, "10.80.6.2")])
    assert set(entries(reader, P + "dispatch.select_worker")) == {10}
    assert set(entries(reader, E + "rdma_writer.build_write")) == {10}
    assert entries(reader, P + "dispatch.client_addr") == {7: ("set_client", {"ip": 0x0A500602})}
    assert reader.pre.groups() == {mgid_of(1): [node_of(10)]}  # slice 0 lost its last ringed worker: no ring
    assert reg(reader, E + "rdma_writer.psn")[:11] == [0] * 10 + [7]


def test_slice_without_workers_or_with_ring_off_has_no_rdma(client, reader):
    st = Settings(slices={0: SliceSettings(ring_slots=0), 3: SliceSettings(task_types=(9,), entries=100)})
    ctl = RainController(client, inventory(), st)  # no service address needed: nothing is pre-written
    ctl.program([worker_reg("worker0", 0, slot_size=4096)])  # slot size irrelevant without pre-writing
    cfg = entries(reader, P + "bidir_queue.config_slice")
    assert cfg[0][1]["mgid"] == 0 and cfg[0][1]["last_slot"] == 0
    assert cfg[3][1] == {
        "first": QUEUE_ENTRIES - 100,
        "last": QUEUE_ENTRIES - 1,
        "neg_cap": (-100) & 0xFFFFFFFF,
        "neg_large_cap": 0,  # no ring: a large task never waits
        "last_slot": 0,
        "mgid": 0,
    }
    assert reader.pre.groups() == {} and entries(reader, E + "rdma_writer.build_write") == {}
    assert set(entries(reader, P + "dispatch.select_worker")) == {0, 1}


def test_int_off(client, reader):
    RainController(client, inventory(), Settings(int_enabled=False)).program()
    assert default(reader, P + "telemetry.config_int")[0] == "dont_stamp"


def test_explicit_ring_slots_bound_the_slices_ring(client, reader):
    ctl = RainController(client, inventory(), Settings(slices={0: SliceSettings(ring_slots=16)}, **SERVICE))
    ctl.program([worker_reg("worker0", 0, slots=64)])
    assert entries(reader, P + "bidir_queue.config_slice")[0][1]["last_slot"] == 15


# -- ports -------------------------------------------------------------------------------


def test_bring_up_ports_from_the_inventory(ctl, reader):
    waited = ctl.bring_up_ports()
    assert waited < 5
    ports = reader.ports.all()
    assert sorted(ports) == [132, 140, 148, 156]
    for p in ports.values():
        assert p["$SPEED"] == "BF_SPEED_100G" and p["$FEC"] == "BF_FEC_TYP_NONE"
        assert p["$PORT_ENABLE"] is True and p["$PORT_UP"] is True
        assert p["$AUTO_NEGOTIATION"] == "PM_AN_DEFAULT"
    ctl.bring_up_ports()  # again: modifies, never re-adds
    assert sorted(reader.ports.all()) == [132, 140, 148, 156]


def test_ports_that_stay_down_are_named(ctl, store):
    store.ports.up_hook = lambda dev_port: dev_port != 148  # the "cable" of port 3/0 is out
    with pytest.raises(ControllerError) as e:
        ctl.bring_up_ports(timeout=0.3)
    assert "3/0 (dev_port 148)" in e.value.message and "1/0" not in e.value.message
    assert e.value.subject == [148]


def test_links_between_two_reads_name_the_port_its_hosts_and_what_its_link_did(ctl, store):
    """What a runner reads before and after a measurement: each inventory port's
    $PORT_UP and the link counters of $PORT_STAT, over BFRuntime, and the differences."""
    inv = inventory((132, 140, 148, 156, 164))  # 5/0: a spare port, no host behind it
    ctl = RainController(ctl.client, inv, two_slices())
    up = {132: True, 140: True, 148: True, 156: True, 164: False}
    store.ports.up_hook = lambda d: up[d]
    ctl.ports.configure(ctl.topology.ports)
    before = ctl.links()
    assert before[148].up and not before[164].up and before[148].link_down_events == 0
    cells = store.ports.stat_cells(148)  # the data plane: worker0's link went down, 7 frames dropped
    cells[PORT_LINK_DOWN_EVENTS] += 1
    cells[PORT_FRAMES_DROPPED_DOWN] += 7
    cells[PORT_STAT_FIELDS.index("$FramesTransmittedAll")] += 506  # and it was sent 506 frames
    up[156] = False
    rows = {r["port"]: r for r in ctl.links_between(before, ctl.links())}
    assert rows["3/0"] == {
        "port": "3/0",
        "dev_port": 148,
        "hosts": ["worker0"],
        "up_before": True,
        "up_after": True,
        "link_down_events": 1,
        "frames_dropped_port_down": 7,
        "frames_to_host": 506,
        "frames_from_host": 0,
    }
    assert rows["4/0"]["up_after"] is False and rows["4/0"]["link_down_events"] == 0
    assert rows["5/0"]["hosts"] == [] and rows["5/0"]["up_before"] is False
    assert rows["1/0"]["hosts"] == ["client0"] and rows["1/0"]["frames_dropped_port_down"] == 0


def test_link_counters_a_switch_does_not_keep_are_none():
    from switch.control.ports import LinkState, link_changes

    bf_switchd = LinkState(up=True)  # its $PORT_STAT has neither link counter
    assert link_changes(bf_switchd, LinkState(up=False)) == {
        "up_before": True,
        "up_after": False,
        "link_down_events": None,
        "frames_dropped_port_down": None,
        "frames_to_host": None,
        "frames_from_host": None,
    }
    assert link_changes(None, LinkState(True, 3, 0))["link_down_events"] is None  # not read before
    # the frames each way between two reads
    moved = link_changes(LinkState(True, 0, 0, 10, 4), LinkState(True, 0, 0, 516, 9))
    assert (moved["frames_to_host"], moved["frames_from_host"]) == (506, 5)


# -- reset ---------------------------------------------------------------------------------


def dirty(client):
    """What a sweep point leaves behind: queued tasks, moved pointers, counts, a stray entry."""
    client.register(P + "bidir_queue.balance", signed=True).write(0, -3)
    client.register(P + "bidir_queue.head").write(0, 17)
    client.register(P + "bidir_queue.tail").write(1, 99999)
    client.register(P + "rdma_engine.ring_offset").write(1, 5)
    client.register(E + "rdma_writer.psn").write(0, 1234)
    client.register(P + "queue_entries.data3").write(17, 0xAB)
    client.register(P + "queue_entries.request").write(131071, 42)
    client.counter(P + "events.events").write(0, 10, 640)
    client.counter(E + "rdma_writer.writes").write(2, 3, 300)
    client.table(P + "forward.forward").add(0x0A0A0A0A, "set_egress", {"port": 1, "dmac": 1})
    client.table(P + "telemetry.config_int").set_default("dont_stamp")


def test_reset_restores_the_programmed_state_and_is_idempotent(ctl, client, reader):
    ctl.program([worker_reg("worker0", 0), worker_reg("worker1", 2, slice_=1)])
    programmed = switch_state(reader)
    dirty(client)
    assert switch_state(reader) != programmed
    ctl.reset()
    assert switch_state(reader) == programmed
    assert reader.register(P + "queue_entries.data3").read(17) == [0]
    assert reader.register(P + "queue_entries.request").read(131071) == [0]
    assert all(v == (0, 0) for v in reader.counter(P + "events.events").read_all())
    assert all(v == (0, 0) for v in reader.counter(E + "rdma_writer.writes").read_all())
    ctl.reset()
    assert switch_state(reader) == programmed


def test_reset_without_tables_only_touches_state(ctl, client, reader):
    ctl.program([worker_reg("worker0", 0)])
    dirty(client)
    ctl.reset(tables=False)
    assert 0x0A0A0A0A in entries(reader, P + "forward.forward")  # tables untouched
    assert reg(reader, P + "bidir_queue.balance", signed=True) == [0] * MAX_SLICES
    assert reg(reader, P + "bidir_queue.tail")[1] == int(0.75 * QUEUE_ENTRIES)  # re-based to slice 1's first
    assert reg(reader, E + "rdma_writer.psn")[:2] == [7, 7]
    assert reader.register(P + "queue_entries.data3").read(17) == [0]
    assert reader.counter(P + "events.events").read(0) == (0, 0)


def test_reset_before_program_empties_everything(ctl, client, reader):
    dirty(client)
    client.pre.add_node(5, rid=4, dev_ports=[132])
    client.pre.add_group(3, [5])
    ctl.reset()
    state = switch_state(reader)
    assert all(not e for e, _ in state["tables"].values())
    assert state["tables"][P + "telemetry.config_int"][1][0] == "dont_stamp"
    assert all(not any(v) for v in state["registers"].values())
    assert state["groups"] == {} and state["nodes"] == {}


# -- snapshot -------------------------------------------------------------------------------


def test_snapshot_has_every_register_and_counter_and_is_json(ctl):
    ctl.program([worker_reg("worker0", 0)])
    snap = ctl.snapshot()
    json.dumps(snap)
    schema = source.register_schema()
    assert set(snap["registers"]) == {n for n, o in schema.items() if o["kind"] == "Register"}
    assert set(snap["counters"]) == {n for n, o in schema.items() if o["kind"] == "Counter"}
    bal = snap["registers"][P + "bidir_queue.balance"]
    assert bal["signed"] and bal["size"] == MAX_SLICES and len(bal["pipes"]) == 1
    assert snap["registers"][E + "rdma_writer.psn"]["pipes"][0][:2] == [7, 7]
    big = snap["registers"][P + "queue_entries.data0"]
    assert big["skipped"] and big["size"] == QUEUE_ENTRIES and big["occupied"] == [] and "pipes" not in big
    assert set(snap["counters"][P + "events.events"]) >= set(EVENT_NAMES.values())
    assert snap["queues"]["1"]["first"] == int(0.75 * QUEUE_ENTRIES)


def test_snapshot_summarises_and_reads_occupied_entries(ctl, client):
    ctl.program([worker_reg("worker0", 0), worker_reg("worker1", 2, slice_=1)])
    first1 = int(0.75 * QUEUE_ENTRIES)
    # slice 0: 3 tasks waiting from entry 5; slice 1: 4 tokens, wrapping at the region's end
    balance = client.register(P + "bidir_queue.balance", signed=True)
    head = client.register(P + "bidir_queue.head")
    balance.write(0, -3)
    head.write(0, 5)
    balance.write(1, 4)
    head.write(1, QUEUE_ENTRIES - 2)
    for i, (req, owner) in enumerate([(100, 0x0101), (101, 0x0102), (102, 0x0103)]):
        client.register(P + "queue_entries.request").write(5 + i, req)
        client.register(P + "queue_entries.owner").write(5 + i, owner)
        client.register(P + "queue_entries.meta").write(5 + i, 2 << 8 | 0x02)
    client.register(P + "queue_entries.data7").write(6, 0x99)
    client.counter(P + "events.events").write(EVENT_NAMES_INV["EV_TASK_QUEUED"], 3, 300)

    snap = ctl.snapshot()
    q0, q1 = snap["queues"]["0"], snap["queues"]["1"]
    assert (q0["tasks"], q0["tokens"], q0["occupied"]) == (3, 0, [[5, 7]])
    assert q0["large_cap"] == (min(q0["capacity"], q0["ring_slots"]) if q0["mgid"] else 0)  # no quota registered
    assert (q1["tasks"], q1["tokens"], q1["occupied"]) == (
        0,
        4,
        [[QUEUE_ENTRIES - 2, QUEUE_ENTRIES - 1], [first1, first1 + 1]],
    )
    assert snap["registers"][P + "queue_entries.owner"]["occupied_count"] == 7
    assert snap["counters"][P + "events.events"]["EV_TASK_QUEUED"] == {"packets": 3, "bytes": 300}

    occ = ctl.snapshot("occupied")
    json.dumps(occ)
    assert occ["registers"][P + "queue_entries.request"]["cells"]["6"] == 101
    e6 = occ["queues"]["0"]["entries"]["6"]
    assert e6 == {
        "data": "00000000000000" + "99",
        "owner": 0x0102,
        "request": 101,
        "task_type": 2,
        "flags": 2,
        "tstamp": 0,
    }
    assert set(occ["queues"]["1"]["entries"]) == {
        str(QUEUE_ENTRIES - 2),
        str(QUEUE_ENTRIES - 1),
        str(first1),
        str(first1 + 1),
    }
    small = ctl.snapshot("occupied", max_entries=2)
    assert small["registers"][P + "queue_entries.owner"]["truncated"] is True


EVENT_NAMES_INV = {v: k for k, v in EVENT_NAMES.items()}


def test_event_names_come_from_the_p4():
    consts = source.constants()
    assert EVENT_NAMES == {v: k for k, v in consts.items() if k.startswith("EV_")}
    assert EVENT_NAMES[2] == "EV_DISPATCH_DIRECT" and EVENT_NAMES[11] == "EV_LARGE_REJECTED"
    assert len(EVENT_NAMES) == 13  # every packet counts once, under its outcome


# -- workers joining and leaving (paper 6.1) --------------------------------------------


def test_deregister_and_register_a_worker(ctl, reader):
    ctl.program([worker_reg("worker0", 0), worker_reg("worker1", 2)])
    ctl.deregister_worker(1)
    assert set(entries(reader, P + "dispatch.select_worker")) == {0, 2, 3}
    assert set(entries(reader, E + "rdma_writer.build_write")) == {0, 2, 3}
    assert reader.pre.groups()[mgid_of(0)] == [node_of(0), node_of(2), node_of(3)]
    assert node_of(1) not in reader.pre.nodes()
    assert reg(reader, E + "rdma_writer.psn")[:4] == [7, 0, 7, 7]
    with pytest.raises(ControllerError, match="worker 1 is not registered"):
        ctl.deregister_worker(1)

    # it rejoins with a fresh QP (new QPN, PSN)
    back = worker_reg("worker0", 1, n=1, psn=100)
    ctl.register_worker(back)
    assert set(entries(reader, P + "dispatch.select_worker")) == {0, 1, 2, 3}
    assert entries(reader, E + "rdma_writer.build_write")[1][1]["qpn"] == 0x100
    assert reg(reader, E + "rdma_writer.psn")[1] == 100
    assert reader.pre.groups()[mgid_of(0)] == [node_of(0), node_of(1), node_of(2), node_of(3)]
    with pytest.raises(ControllerError, match="worker 1 is already registered"):
        ctl.register_worker(back)
    # reset keeps what registration changed
    before = switch_state(reader)
    ctl.reset()
    assert switch_state(reader) == before


def test_move_worker_between_slices(ctl, reader):
    ctl.program([worker_reg("worker0", 0), worker_reg("worker1", 2, slice_=1)])
    ctl.move_worker(1, 1)
    assert reader.pre.groups() == {mgid_of(0): [node_of(0)], mgid_of(1): [node_of(1), node_of(2), node_of(3)]}
    assert ctl.workers[1]["slice"] == 1
    assert set(entries(reader, P + "dispatch.select_worker")) == {0, 1, 2, 3}
    with pytest.raises(ControllerError, match="slice 5 is not configured"):
        ctl.move_worker(1, 5)


def test_first_ringed_worker_turns_a_slices_ring_on(client, reader):
    ctl = RainController(client, inventory(), two_slices())
    ctl.program([worker_reg("worker0", 0)])  # slice 1 has no workers yet: no ring
    assert entries(reader, P + "bidir_queue.config_slice")[1][1]["mgid"] == 0
    ctl.register_worker(worker_reg("worker1", 2, slice_=1, slots=32))
    c1 = entries(reader, P + "bidir_queue.config_slice")[1][1]
    assert (c1["mgid"], c1["last_slot"]) == (2, 31)
    assert reader.pre.groups()[2] == [node_of(2), node_of(3)]
    with pytest.raises(ControllerError, match="ring has 16 slots but its slice's ring cycles through 32"):
        ctl.register_worker(worker_reg("worker1", 4, slice_=1, slots=16))


def test_register_before_program(ctl):
    with pytest.raises(ControllerError, match="before the switch is programmed"):
        ctl.register_worker(worker_reg())


def test_from_registration_json():
    data = {
        "program": "rain-worker",
        "worker_base": 4,
        "threads": 2,
        "worker_ids": [4, 5],
        "mac": "02:52:4d:06:00:03",
        "ip": "10.80.6.3",
        "udp_port": 21057,
        "switch": {"mac": "02:00:00:00:00:fe", "ip": "10.80.6.254"},
        "slice": 1,
        "ring": {
            "transport": "emulated",
            "va": [140000000000000, 140000000131072],
            "qpn": [256, 257],
            "size": 262144,
            "region_size": 131072,
            "slot_size": 2048,
            "slots": 64,
            "rkey": 5390670,
            "psn": 0,
        },
    }
    r = WorkerRegistration.from_json("worker0", data)
    assert r.worker_ids == (4, 5) and r.slices == {4: 1, 5: 1}
    assert r.ring.va[5] == 140000000131072 and r.ring.qpn == {4: 256, 5: 257} and r.ring.size == 131072
    # no qp_type: what the switch always sent before the field existed
    assert (r.ring.transport, r.ring.qp_type) == ("emulated", "rc")
    assert WorkerRegistration.from_json("worker0", data, slices={4: 0, 5: 1}).slices == {4: 0, 5: 1}
    with pytest.raises(ControllerError, match="malformed"):
        WorkerRegistration.from_json("worker0", {"mac": "x"})
    # rain-worker --rdma ibverbs --qp-type uc: the NIC's QPNs and rkey, and where they live
    hw = {
        **data,
        "ring": {
            **data["ring"],
            "transport": "ibverbs",
            "qp_type": "uc",
            "device": "mlx5_0",
            "port": 1,
            "gid_index": 3,
            "gid": "::ffff:10.80.6.3",
            "mtu": 4096,
            "qpn": [0x1A3, 0x1A4],
        },
    }
    r = WorkerRegistration.from_json("worker0", hw)
    assert (r.ring.transport, r.ring.qp_type, r.ring.qpn) == ("ibverbs", "uc", {4: 0x1A3, 5: 0x1A4})


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("transport", "rxe", "ring.transport 'rxe' is not one of emulated, ibverbs"),
        ("qp_type", "ud", "ring.qp_type 'ud' is not one of uc, rc"),
        ("qp_type", "UC", "ring.qp_type 'UC' is not one of uc, rc"),
    ],
)
def test_ring_transport_and_qp_type_are_checked(field, value, match):
    data = {
        "worker_ids": [0],
        "mac": "02:52:4d:06:00:03",
        "ip": "10.80.6.3",
        "ring": {
            "va": [1 << 40],
            "qpn": [0x100],
            "region_size": 131072,
            "slot_size": 2048,
            "slots": 64,
            "rkey": 1,
            field: value,
        },
    }
    with pytest.raises(ControllerError, match=match) as e:
        WorkerRegistration.from_json("worker0", data)
    assert e.value.fix


def test_write_opcodes_are_the_wire_protocols():
    from hosts import proto
    from switch.control.constants import ROCE_OP_RC_WRITE_ONLY, ROCE_OP_UC_WRITE_ONLY, WRITE_OPCODE

    assert ROCE_OP_RC_WRITE_ONLY == source.constants()["ROCE_OP_RC_WRITE_ONLY"] == proto.ROCE_OP_RC_WRITE_ONLY
    assert ROCE_OP_UC_WRITE_ONLY == proto.ROCE_OP_UC_WRITE_ONLY  # proto is checked against rain_proto.h
    assert WRITE_OPCODE == {"uc": 0x2A, "rc": 0x0A}


def test_write_target_opcode_follows_the_qp_type():
    from switch.control.rdma_writer import WriteTarget

    t = WriteTarget(3, 1, 2, 3, 4, qpn=0x1A3, rkey=9, va=0x7F12_0000_1000, qp_type="uc")
    assert t.params()["opcode"] == 0x2A and t.params()["va_hi"] == 0x7F12 and t.params()["va_lo"] == 0x1000
    assert WriteTarget(3, 1, 2, 3, 4, qpn=1, rkey=9, va=0, qp_type="rc").params()["opcode"] == 0x0A
    with pytest.raises(ControllerError, match="qp_type 'xrc' is not one of uc, rc"):
        WriteTarget(3, 1, 2, 3, 4, qpn=1, rkey=9, va=0, qp_type="xrc")


def test_uc_and_rc_workers_get_their_own_write_opcode(ctl, reader):
    ctl.program([worker_reg("worker0", 0, slice_=0, qp_type="uc"), worker_reg("worker1", 2, slice_=1)])
    bw = entries(reader, E + "rdma_writer.build_write")
    assert {w: d["opcode"] for w, (_, d) in bw.items()} == {0: 0x2A, 1: 0x2A, 2: 0x0A, 3: 0x0A}
    # a worker that re-registers with another QP type gets that opcode
    ctl.deregister_worker(2)
    ctl.register_worker(worker_reg("worker1", 2, n=1, slice_=1, qp_type="uc"))
    assert entries(reader, E + "rdma_writer.build_write")[2][1]["opcode"] == 0x2A


def test_settings_from_dict():
    st = Settings.from_dict(
        {
            "slices": {"0": {"task_types": [0]}, "1": {"task_types": [1], "entries": 1000, "ring_slots": 0}},
            "int_enabled": False,
            **SERVICE,
        }
    )
    assert st.regions()[1].size == 1000 and st.regions()[0].size == QUEUE_ENTRIES - 1000
    with pytest.raises(ControllerError, match="unknown key"):
        Settings.from_dict({"slice": {}})


# -- validation: nothing is written when an input is refused --------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Settings(slices={MAX_SLICES: SliceSettings()}), rf"slice {MAX_SLICES} is not in 0..{MAX_SLICES - 1}"),
        (
            lambda: Settings(slices={0: SliceSettings(entries=QUEUE_ENTRIES), 1: SliceSettings(entries=1)}),
            "ask for 131073 queue entries; the switch has 131072",
        ),
        (lambda: Settings(slices={0: SliceSettings(share=0.9), 1: SliceSettings(share=0.2)}), "the switch has 131072"),
        (
            lambda: Settings(slices={0: SliceSettings(entries=QUEUE_ENTRIES), 1: SliceSettings()}),
            "no queue entries left",
        ),
        (
            lambda: Settings(slices={0: SliceSettings(task_types=(1,)), 1: SliceSettings(task_types=(1,))}),
            "task type 1 is also in slice 0",
        ),
        (lambda: Settings(slices={0: SliceSettings(task_types=(256,))}), "not a task type"),
        (lambda: Settings(service_mac="02:00:00:00:00:01"), "give both service_mac and service_ip"),
        (lambda: Settings(service_mac="01:00:00:00:00:01", service_ip="10.0.0.1"), "multicast MAC"),
        (lambda: Settings(slices={}), "slices is empty"),
    ],
)
def test_bad_settings(make, match):
    with pytest.raises(ControllerError, match=match):
        make()


def test_ports_in_two_pipes_are_refused_by_name(client):
    with pytest.raises(ControllerError) as e:
        RainController(client, inventory(dev_ports=(132, 140, 4, 156)), two_slices())
    msg = e.value.render()
    assert "pipe 0: worker0 on 3/0 (dev_port 4)" in msg and "pipe 1: client0 on 1/0 (dev_port 132)" in msg
    assert "dev_port >> 7" in msg


@pytest.mark.parametrize(
    "workers, match",
    [
        (lambda: [worker_reg(base=MAX_WORKERS - 1)], f"worker id {MAX_WORKERS} is not in 0..{MAX_WORKERS - 1}"),
        (lambda: [worker_reg(slice_=7)], "worker 0 is in slice 7, which the settings do not configure"),
        (lambda: [worker_reg(slot_size=4096)], f"start rain-worker with --slot-size {RDMA_SLOT_BYTES}"),
        (lambda: [worker_reg(va=0x7F12_FFFF_F000)], "crosses a 4 GiB boundary"),
        (lambda: [worker_reg(), worker_reg("worker1", 2, ring=False)], "worker 2 on worker1 registered no RDMA ring"),
        (lambda: [worker_reg(mac="02:52:4d:06:00:09")], "the inventory gives worker0 MAC 02:52:4d:06:00:03"),
        (lambda: [worker_reg(host="nohost")], "host 'nohost' is not in the inventory"),
        (lambda: [worker_reg(), worker_reg("worker1", 1)], "worker 1 is also registered by worker0"),
        (lambda: [worker_reg(switch_ip="10.80.6.253")], "the worker was told the switch's IP is 10.80.6.253"),
        (lambda: [worker_reg(udp_port=5000)], "dispatches to 21057"),
    ],
)
def test_bad_workers_write_nothing(ctl, reader, workers, match):
    with pytest.raises(ControllerError) as e:
        ctl.program(workers())
    assert re.search(match, e.value.render()), e.value.render()
    assert entries(reader, P + "forward.forward") == {}
    assert entries(reader, P + "dispatch.select_worker") == {}


def test_service_address_comes_from_the_inventory_unless_set(client, reader):
    inv = inventory()
    ctl = RainController(client, inv, Settings())
    assert (ctl.settings.service_mac, ctl.settings.service_ip) == (inv.switch.service_mac, inv.switch.service_ip)
    ctl.program([worker_reg(switch_mac=None, switch_ip=None)])
    d = entries(reader, E + "rdma_writer.build_write")[0][1]
    assert d["sip"] == int(ipaddress.IPv4Address(inv.switch.service_ip))
    assert RainController(client, inv, two_slices()).settings.service_ip == SERVICE["service_ip"]


def test_rdma_needs_a_service_address(client):
    bare = Topology.from_inventory(inventory())
    bare = Topology(bare.ports, bare.hosts)  # an inventory without switch.service_*
    ctl = RainController(client, bare, Settings())
    with pytest.raises(ControllerError, match="no service_mac/service_ip") as e:
        ctl.program([worker_reg()])
    assert "ring_slots: 0" in e.value.fix


@pytest.mark.parametrize(
    "clients, match",
    [
        (
            lambda: [ClientRegistration("client0", 1, "10.80.6.1"), ClientRegistration("client1", 1, "10.80.6.2")],
            "client host id 1 is given to client0 and client1",
        ),
        (lambda: [ClientRegistration("client0", 256, "10.80.6.1")], "not in 0..255"),
        (lambda: [ClientRegistration("client0", 0, "10.80.6.9")], "is not the inventory's 10.80.6.1"),
    ],
)
def test_bad_clients(ctl, reader, clients, match):
    with pytest.raises(ControllerError, match=match):
        ctl.program([], clients())
    assert entries(reader, P + "forward.forward") == {}


def test_not_the_rain_program():
    srv = serve(OTHER_PROGRAM, "127.0.0.1", 0)
    try:
        with Client(f"127.0.0.1:{srv.port}") as c:
            with pytest.raises(ControllerError, match="runs 'bfrt_test', which is not the Rain program"):
                RainController(c, inventory(), Settings())
    finally:
        srv.stop(None)


def test_snapshot_rejects_an_unknown_mode(ctl):
    with pytest.raises(ControllerError, match="use summary, occupied or all"):
        ctl.snapshot("everything")


def test_ring_bound_keeps_the_workers_quota_free(client, reader):
    """neg_large_cap = -min(capacity, ring slots - the largest token quota of the
    slice's workers): a worker runs its dispatched tasks from a FIFO of at most its
    quota, each pinning its descriptor's slot until it runs."""
    st = Settings(slices={0: SliceSettings(entries=1000)}, **SERVICE)
    ctl = RainController(client, inventory(), st)
    ctl.program([worker_reg("worker0", 0, slots=64, quota=16)])
    cfg = entries(reader, P + "bidir_queue.config_slice")[0][1]
    assert cfg["neg_large_cap"] == (-(64 - 16)) & 0xFFFFFFFF and cfg["neg_cap"] == (-1000) & 0xFFFFFFFF
    # a second server whose threads may hold more tightens the bound
    ctl.register_worker(worker_reg("worker1", 8, slots=64, quota=40))
    cfg = entries(reader, P + "bidir_queue.config_slice")[0][1]
    assert cfg["neg_large_cap"] == (-(64 - 40)) & 0xFFFFFFFF
    assert ctl.bidir_queue.configs()[0].large_cap == 24


def test_ring_hold_setting_overrides_the_quota(client, reader):
    st = Settings(slices={0: SliceSettings(entries=1000, ring_hold=60)}, **SERVICE)
    RainController(client, inventory(), st).program([worker_reg("worker0", 0, slots=64, quota=2)])
    assert entries(reader, P + "bidir_queue.config_slice")[0][1]["neg_large_cap"] == (-4) & 0xFFFFFFFF
    with pytest.raises(ControllerError, match="ring_hold"):
        Settings(slices={0: SliceSettings(ring_hold=-1)})
    assert Settings.from_dict({"slices": {0: {"ring_hold": 3}}}).slices[0].ring_hold == 3


def test_registration_reads_the_quota():
    data = {"worker_ids": [0], "mac": "02:52:4d:06:00:03", "ip": "10.80.6.3", "quota": 4, "quota_cap": 63}
    assert WorkerRegistration.from_json("worker0", data).quota == 4
    del data["quota"]
    assert WorkerRegistration.from_json("worker0", data).quota is None


def test_writes_take_the_inventorys_roce_dscp(client, reader):
    inv = inventory().model_copy(update={"roce": inventory().roce.model_copy(update={"dscp": 34})})
    ctl = RainController(client, inv, two_slices())
    ctl.program([worker_reg("worker0", 0)])
    bw = entries(reader, E + "rdma_writer.build_write")
    assert {d["tos"] for _, d in bw.values()} == {34 << 2}


def test_workers_sharing_a_qp_are_refused():
    """The switch keeps one PSN per worker: two workers on one QP would send the same
    PSNs and the NIC would drop WRITEs."""
    reg = worker_reg("worker0", 0, n=2)
    ring = reg.ring
    shared = type(ring)(**{**ring.__dict__, "qpn": {0: 0x100, 1: 0x100}})
    with pytest.raises(ControllerError, match="share QP"):
        type(reg)(**{**reg.__dict__, "ring": shared})
