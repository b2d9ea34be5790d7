"""Requests a switch must answer well: big error lists, unknown update types, requests
too big to serve, and the memory a suite of them leaves behind.

bf_switchd reports every refused update of a batch in the `grpc-status-details-bin`
trailer (one Error per update up to the last that failed); a client must accept a
trailer far above gRPC's 16 KiB default to see them (the SDE client accepts 1 GiB), so a
2,000-update batch with 1,000 failures comes back whole. The emulator caps the trailer
at `Limits.details_bytes` and says how many failures it left out. Requests beyond the
server's limits are refused before they are served: RESOURCE_EXHAUSTED for too many
updates, entities or bytes, INVALID_ARGUMENT for a value or an update type the switch
cannot take.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from switch.bfrt import bfruntime_pb2 as pb
from switch.bfrt.client import Client
from switch.bfrt.errors import BfrtError
from switch.emulator.bfrt_server import Limits, serve
from switch.emulator.schema import Action, Key, Param, Program, Register, Table

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
BIG = Table(
    "pipe.SwitchIngress.big.big",
    keys=[Key("hdr.ethernet.dst_addr", 48)],
    actions=[Action("SwitchIngress.big.set_egress", [Param("port", 9)])],
    size=2000,
)
PROGRAM = Program(
    "bad_requests", tables=[BIG], registers=[Register("pipe.SwitchIngress.cells.cells", width=32, size=64)]
)


@pytest.fixture
def server():
    srv = serve(PROGRAM, "127.0.0.1", 0)
    yield srv
    srv.stop(None).wait(5)


@pytest.fixture
def client(server):
    with Client(f"127.0.0.1:{server.port}", "bad_requests") as c:
        yield c


def half_failing_batch(client: Client) -> BfrtError:
    """Install the even keys, then send 2,000 INSERTs: the 1,000 even ones fail."""
    big = client.table("big")
    with client.batch() as b:
        for k in range(0, 2000, 2):
            b.add(big, k, "set_egress", {"port": 1})
    with pytest.raises(BfrtError) as e:
        with client.batch() as b:
            for k in range(2000):
                b.add(big, k, "set_egress", {"port": 2})
    assert big.usage() == 2000  # the odd ones went in
    return e.value


def test_a_2000_update_batch_with_1000_failures_reports_every_error(client):
    err = half_failing_batch(client)
    assert err.grpc_code == grpc.StatusCode.UNKNOWN
    assert [x.index for x in err.errors] == list(range(0, 2000, 2))
    assert all(x.code_name == "ALREADY_EXISTS" and x.table == BIG.name for x in err.errors)
    assert all(f"dst_addr={x.index}}}" in x.message for x in err.errors)  # each names its own key
    text = str(err)
    assert "1000 of 2000 refused" in text and "and 980 more" in text and "left out" not in text


def test_past_the_details_budget_the_answer_says_how_many_it_left_out():
    srv = serve(PROGRAM, "127.0.0.1", 0, limits=Limits(details_bytes=8000))
    try:
        with Client(f"127.0.0.1:{srv.port}", "bad_requests") as c:
            err = half_failing_batch(c)
    finally:
        srv.stop(None).wait(5)
    shown = len(err.errors)
    assert 10 < shown < 1000 and [x.index for x in err.errors] == list(range(0, 2 * shown, 2))
    assert f"{1000 - shown} failed update(s) after those are left out" in str(err)
    assert f"1000 of 2000 refused, {shown} detailed" in str(err)


def test_an_unknown_update_type_is_invalid_argument(client):
    big = client.table("big")
    unknown = big.update("INSERT", 5, "set_egress", {"port": 1})
    unknown.type = 99  # an enum is open on the wire
    with pytest.raises(BfrtError) as e:
        client.write([big.update("INSERT", 4, "set_egress", {"port": 1}), unknown], [big.name] * 2)
    (only,) = e.value.errors
    assert (only.index, only.code_name) == (1, "INVALID_ARGUMENT") and "unknown update type 99" in only.message
    assert big.get(4).data == {"port": 1}  # the good update before it was applied


def test_requests_beyond_the_limits_are_refused_before_they_are_served():
    limits = Limits(updates=100, entities=100, repeated=16, message_bytes=1 << 20, message_chars=200)
    srv = serve(PROGRAM, "127.0.0.1", 0, limits=limits)
    try:
        with Client(f"127.0.0.1:{srv.port}", "bad_requests") as c:
            big = c.table("big")

            def refused(updates: list, code: grpc.StatusCode) -> BfrtError:
                with pytest.raises(BfrtError) as e:
                    c.write(updates, [big.name] * len(updates))
                assert e.value.grpc_code == code, e.value
                return e.value

            many = [big.update("INSERT", k, "set_egress", {"port": 1}) for k in range(101)]
            err = refused(many, grpc.StatusCode.RESOURCE_EXHAUSTED)
            assert "at most 100 updates" in err.message and "smaller batches" in err.fix
            assert big.usage() == 0  # none of them was applied

            huge = big.update("INSERT", 1, "set_egress", {"port": 1})
            huge.entity.table_entry.data.fields[0].stream = b"\x01" * (2 << 20)  # over the 1 MiB a request may be
            refused([huge], grpc.StatusCode.RESOURCE_EXHAUSTED)

            wide = big.update("INSERT", 1, "set_egress", {"port": 1})
            wide.entity.table_entry.data.fields[0].stream = b"\x01" * 200_000  # fits the request, not the field
            (x,) = refused([wide], grpc.StatusCode.UNKNOWN).errors
            assert x.code_name == "INVALID_ARGUMENT" and "more than 18 bytes, expected 2" in x.message

            port = c.table("$PORT")
            speed = port.update("INSERT", 1, data={"$SPEED": "BF_SPEED_100G", "$FEC": "BF_FEC_TYP_NONE"})
            for f in speed.entity.table_entry.data.fields:
                if f.str_val == "BF_SPEED_100G":
                    f.str_val = "BF_SPEED_" + "9" * 500_000  # an error message would quote it
            (x,) = refused([speed], grpc.StatusCode.UNKNOWN).errors
            assert x.code_name == "INVALID_ARGUMENT" and len(x.message) < 300 and "characters)" in x.message

            mgid = c.table("$pre.mgid")
            members = mgid.update("INSERT", 1, data={"$MULTICAST_NODE_ID": list(range(17))})
            (x,) = refused([members], grpc.StatusCode.UNKNOWN).errors
            assert x.code_name == "INVALID_ARGUMENT" and "17 values; at most 16" in x.message

            cells = c.register("cells")
            entries = [
                pb.TableEntry(table_id=cells.table.info.id, key=cells.table.encode_key(i % 64)) for i in range(101)
            ]
            with pytest.raises(BfrtError) as e:
                c.read_entries(entries)
            assert e.value.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED and "at most 100 entities" in e.value.message
            assert len(c.read_entries(entries[:100])) == 100  # the switch still serves what is within bounds
    finally:
        srv.stop(None).wait(5)


# The switch in a process of its own, so that its memory is its own.
SWITCH = """
import sys
from switch.emulator.bfrt_server import serve
from tests.switch.test_bfrt_bad_requests import PROGRAM
srv = serve(PROGRAM, "127.0.0.1", 0)
print(srv.port, flush=True)
sys.stdin.read()
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def bad_request_suite(c: Client) -> None:
    """Oversize writes, giant values, an oversize batch, unknown types with capped details."""
    big = c.table("big")
    good = big.update("INSERT", 1, "set_egress", {"port": 1})
    for size in (3 << 20, 5 << 20):  # a value within gRPC's 4 MiB but not the field's; a request beyond it
        u = pb.Update()
        u.CopyFrom(good)
        u.entity.table_entry.data.fields[0].stream = b"\xff" * size
        for _ in range(3):
            with pytest.raises(BfrtError):
                c.write([u], [big.name])
    unknown = pb.Update()
    unknown.CopyFrom(good)
    unknown.type = 42
    for n in (65_537, 16_384):  # one too many (refused whole); every one refused (details capped)
        with pytest.raises(BfrtError):
            c.write([unknown] * n)


def test_a_bad_request_suite_leaves_the_switch_memory_where_it_was(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", SWITCH], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        address = f"127.0.0.1:{proc.stdout.readline().strip()}"
        with Client(address, "bad_requests") as c:
            start = rss_mb(proc.pid)
            after = []
            for _ in range(3):
                bad_request_suite(c)
                after.append(rss_mb(proc.pid))
            c.table("big").add(1, "set_egress", {"port": 1})  # and it still serves
        print(f"switch RSS: {start:.0f} MB at start, after each suite {', '.join(f'{x:.0f}' for x in after)} MB")
        # What a request may allocate is bounded: the memory comes and goes (gRPC's
        # buffers, the parsed request), it does not pile up.
        assert max(after) - start < 160, (start, after)
    finally:
        proc.kill()
        proc.wait(10)
