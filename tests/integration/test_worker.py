"""rain-worker on a virtual port, against a Python peer that plays the switch.

rain-worker runs in namespace rmtw-a on net_af_packet0 (dp0); the peer in rmtw-b sends
DISPATCHes and RoCEv2 WRITEs and receives tokens and responses, and drives the knobs
through the shared control block (hosts.ctl.ControlBlock). Every loop is bounded.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from hosts import proto
from hosts.ctl import ControlBlock
from tests.netpeer import NetnsPair, RawPeer, frame, parse_udp

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DPDK = REPO / "hosts/dpdk"
BIN = DPDK / "build/rain-worker"
TAG = "rmtw"
CLIENT_IP = "10.81.0.9"  # the client whose address the switch keeps as the dispatch's source
CLIENT_PORT = 40000


@pytest.fixture(scope="module")
def built():
    r = subprocess.run(["make", "-C", str(DPDK), "build/rain-worker"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return BIN


@pytest.fixture(scope="module")
def pair(built, request):
    # The namespaces of the module that asks (its TAG): test_worker_kv.py takes this
    # fixture, and make test may run it in another process while this file runs.
    with NetnsPair(getattr(request.module, "TAG", TAG)) as p:
        yield p


def worker_cmd(
    pair: NetnsPair, prefix: str, args: list[str], *, binary: Path = BIN, vdev: str = "net_af_packet0,iface=dp0"
) -> list[str]:
    """rain-worker in side a on one virtual port, told the peer in side b is the switch."""
    return [
        "ip",
        "netns",
        "exec",
        pair.a.netns,
        str(binary),
        "-l",
        "0",
        "--no-huge",
        "--no-pci",
        "--no-telemetry",
        f"--file-prefix={prefix}",
        "--log-level=lib.eal:error",
        f"--vdev={vdev}",
        "--",
        "--switch-mac",
        pair.b.mac,
        "--switch-ip",
        pair.b.ip,
        "--src-ip",
        pair.a.ip,
        *args,
    ]


class Worker:
    """One rain-worker process in side a, with its control block, registration and stats."""

    def __init__(self, pair: NetnsPair, tmp: Path, name: str, args: list[str], env: dict | None = None, tag: str = TAG):
        self.pair = pair
        self.prefix = f"{tag}-{name}-{os.getpid()}"
        self.ctl_path = tmp / f"{name}.ctl"
        self.reg_path = tmp / f"{name}.reg.json"
        self.stats_path = tmp / f"{name}.stats.json"
        cmd = worker_cmd(
            pair,
            self.prefix,
            [
                "--ctl",
                str(self.ctl_path),
                "--registration",
                str(self.reg_path),
                "--stats",
                str(self.stats_path),
                "--stats-period",
                "0.1",
                *args,
            ],
        )
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
        )
        line = ""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 20
            while "rain-worker ready" not in line and (left := deadline - time.monotonic()) > 0:
                if not sel.select(left):
                    break
                line = self.proc.stdout.readline()
                if not line:  # exited
                    break
        if "rain-worker ready" not in line:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=5)
            self._cleanup()
            raise AssertionError(f"rain-worker did not become ready: {line!r}\n{out}\n{err}")
        self.reg = json.loads(self.reg_path.read_text())
        self.ctl = ControlBlock(self.ctl_path)
        self.final: dict | None = None

    def stats(self) -> dict:
        return json.loads(self.stats_path.read_text())

    def wait_stats(self, pred, timeout: float = 3.0) -> dict:
        """The first periodic statistics that satisfy pred (or the last ones read)."""
        deadline = time.monotonic() + timeout
        st = self.stats()
        while not pred(st) and time.monotonic() < deadline:
            time.sleep(0.05)
            st = self.stats()
        return st

    def stop(self) -> dict:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.stderr = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        self.ctl.close()
        self.left_runtime_dir = Path(f"/var/run/dpdk/{self.prefix}").exists()
        self._cleanup()
        self.final = self.stats()
        return self.final

    def _cleanup(self) -> None:
        shutil.rmtree(f"/var/run/dpdk/{self.prefix}", ignore_errors=True)


class Switch:
    """The peer in side b: sends what a switch sends, keeps what workers send."""

    def __init__(self, pair: NetnsPair):
        self.pair = pair
        self.raw = RawPeer(pair.b)
        self.tokens: dict[int, list[proto.Header]] = {}
        self.responses: dict[tuple[int, int], tuple[int, proto.Header, bytes]] = {}
        self.other: list[proto.Header] = []

    def close(self) -> None:
        self.raw.close()

    def pump(self, timeout: float) -> None:
        """Receive for `timeout` seconds, sorting tokens and responses."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self._one(min(left, 0.1))

    def _one(self, timeout: float) -> bool:
        got = self.raw.recv(timeout)
        if got is None:
            return False
        ts, fr = got
        u = parse_udp(fr)
        if u is None or (u[0] != proto.UDP_PORT and u[1] != proto.UDP_PORT):
            return True
        h = proto.Header.unpack(u[2])
        if h.kind == proto.Kind.TOKEN:
            self.tokens.setdefault(h.worker_id, []).append(h)
        elif h.kind == proto.Kind.RESPONSE:
            self.responses[(h.client_id, h.request_id)] = (ts, h, fr)
        else:
            self.other.append(h)
        return True

    def wait_responses(self, keys, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(k in self.responses for k in keys) and time.monotonic() < deadline:
            self._one(0.05)
        missing = [k for k in keys if k not in self.responses]
        assert not missing, f"no response for {missing}"

    def wait_tokens(self, worker: int, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.tokens.get(worker, [])) < count and time.monotonic() < deadline:
            self._one(0.05)

    def dispatch(
        self,
        worker: int,
        request_id: int,
        *,
        service_ns: int = 0,
        client_id: int = 0x0101,
        flags: int = proto.Flag.INT,
        qdelay: int = 0,
        qlen: int = 0,
        desc: tuple[int, int] | None = None,
        payload: bytes = b"",
        kind: int = proto.Kind.DISPATCH,
        slice_: int | None = None,
    ) -> int:
        """A DISPATCH to `worker`, of the slice of its last token (as the switch's queue
        of that slice would send it), or `slice_`."""
        toks = self.tokens.get(worker)
        h = proto.Header(
            kind=kind,
            flags=flags,
            slice=slice_ if slice_ is not None else (toks[-1].slice if toks else 0),
            client_id=client_id,
            request_id=request_id,
            worker_id=worker,
            int_qdelay_ns=qdelay,
            int_qlen=qlen,
        ).with_service_ns(service_ns)
        if desc is not None:
            h = h.with_desc(*desc)
        self.send_rain(h.pack() + payload)
        return time.monotonic_ns()

    def send_rain(self, payload: bytes, dport: int = proto.UDP_PORT) -> None:
        src = type(self.pair.b)(self.pair.b.netns, "dp0", self.pair.b.mac, CLIENT_IP)
        self.raw.send(frame(src, self.pair.a, payload, CLIENT_PORT, dport))


@pytest.fixture
def switch(pair):
    s = Switch(pair)
    yield s
    s.close()


def outstanding_view(sw: Switch, worker: int, dispatched: int, answered: int) -> int:
    """What the switch can see of a worker's outstanding count: tokens it holds + tasks not answered."""
    return len(sw.tokens.get(worker, [])) - dispatched + (dispatched - answered)


# --------------------------------------------------------------------------------------------
def test_a_moved_worker_runs_its_old_slices_tasks_without_an_extra_token(pair, switch, tmp_path):
    """A move (Algorithm 1): tokens off, slice 5 -> 6 and quota 1, tokens on. The token it
    left in slice 5's queue is forgotten; a task that meets it later still comes here and
    runs, held like any task, and is not taken for the use of its slice-6 token: no
    second slice-6 token goes out at quota 1."""
    w = Worker(pair, tmp_path, "move", ["--threads", "1", "--worker-base", "30", "--mode", "rain"]
               + ["--handler", "sleep", "--quota", "1", "--slice", "5"])  # fmt: skip
    try:
        switch.wait_tokens(30, 1, timeout=3)
        assert [t.slice for t in switch.tokens[30]] == [5]
        w.ctl.set_enabled(0, False)
        w.ctl.set_slice(0, 6)
        w.ctl.set_quota(0, 1)
        switch.pump(0.2)
        w.ctl.set_enabled(0, True)
        switch.wait_tokens(30, 2, timeout=3)
        assert [t.slice for t in switch.tokens[30]] == [5, 6]
        switch.dispatch(30, 1, service_ns=20_000_000, slice_=5)  # slice 5's queue used its old token
        switch.wait_responses([(0x0101, 1)], timeout=3)
        switch.pump(0.3)
        assert [t.slice for t in switch.tokens[30]] == [5, 6]  # its slice-6 token is still out
        st = w.wait_stats(lambda s: s["workers"][0]["tasks_done"] == 1 and s["workers"][0]["outstanding"] == 1)
        st = st["workers"][0]
        assert (st["other_slice"], st["tasks_done"], st["tokens_forgotten"], st["outstanding"]) == (1, 1, 1, 1)
        switch.dispatch(30, 2, service_ns=1_000_000)  # its slice-6 token used: one new token
        switch.wait_responses([(0x0101, 2)], timeout=3)
        switch.wait_tokens(30, 3, timeout=3)
        assert [t.slice for t in switch.tokens[30]] == [5, 6, 6]
    finally:
        w.stop()


def test_tokens_follow_the_quota(pair, switch, tmp_path):
    w = Worker(
        pair,
        tmp_path,
        "tok",
        [
            "--threads",
            "2",
            "--worker-base",
            "10",
            "--mode",
            "rain",
            "--handler",
            "sleep",
            "--quota",
            "3",
            "--slice",
            "5",
        ],
    )
    try:
        assert w.reg["worker_ids"] == [10, 11] and w.ctl.header.ready == 1
        # 2 x 64 x 4096 B: the ring is aligned to its (power-of-two) size (rdma.c)
        assert w.reg["ring"]["size"] == 1 << 19 and w.reg["ring"]["va"][0] % (1 << 19) == 0
        # At start: exactly n_w tokens per thread, stamped with slice and quota.
        switch.pump(0.6)
        for wid in (10, 11):
            toks = switch.tokens.get(wid, [])
            assert len(toks) == 3, (wid, toks)
            assert all(t.slice == 5 and t.report == 3 for t in toks)

        # Use thread 0's tokens: each finished task frees one quota unit -> one new token.
        sent = 0
        for rid in range(1, 4):
            switch.dispatch(10, rid, service_ns=40_000_000)
            sent += 1
        switch.wait_responses([(0x0101, r) for r in range(1, 4)], timeout=3)
        switch.pump(0.2)
        assert len(switch.tokens[10]) == 6
        assert outstanding_view(switch, 10, sent, 3) == 3

        # Lower n_w to 1 while the switch holds 3 tokens: use them; only when the worker is
        # below its new quota does a token come back, and never above it.
        w.ctl.set_quota(0, 1)
        time.sleep(0.05)
        held_before = len(switch.tokens[10])
        for rid in range(4, 7):
            switch.dispatch(10, rid, service_ns=20_000_000)
            sent += 1
        answered = 3
        deadline = time.monotonic() + 3
        while answered < 6 and time.monotonic() < deadline:
            switch._one(0.05)
            answered = sum(1 for r in range(1, 7) if (0x0101, r) in switch.responses)
            new_tokens = len(switch.tokens[10]) - held_before
            # while tasks are still held, the worker is at/above quota: no new token
            if answered < 6:
                assert new_tokens == 0, (answered, new_tokens)
        assert answered == 6
        switch.pump(0.3)
        assert len(switch.tokens[10]) - held_before == 1
        assert outstanding_view(switch, 10, sent, 6) == 1

        # Raise n_w to 4: three more tokens.
        w.ctl.set_quota(0, 4)
        switch.wait_tokens(10, held_before + 4, timeout=2)
        switch.pump(0.2)
        assert len(switch.tokens[10]) - held_before == 4
        assert outstanding_view(switch, 10, sent, 6) == 4
        assert w.ctl.workers[0].stats.outstanding == 4

        # Deregister (enabled = 0): tasks for held tokens still run, no token comes back.
        w.ctl.set_enabled(0, False)
        time.sleep(0.05)
        count = len(switch.tokens[10])
        for rid in range(7, 11):
            switch.dispatch(10, rid, service_ns=5_000_000)
            sent += 1
        switch.wait_responses([(0x0101, r) for r in range(7, 11)], timeout=3)
        switch.pump(0.3)
        assert len(switch.tokens[10]) == count
        # Re-register: the switch dropped this worker's tokens (it holds none), n_w come back.
        w.ctl.set_enabled(0, True)
        switch.wait_tokens(10, count + 4, timeout=2)
        switch.pump(0.2)
        assert len(switch.tokens[10]) == count + 4

        # Thread 1 was never touched: still its initial 3 tokens.
        assert len(switch.tokens[11]) == 3
        # The worker's own count agrees with what the switch received.
        assert w.ctl.workers[0].stats.tokens_sent == len(switch.tokens[10])
        assert w.ctl.workers[0].stats.tasks_done == 10
    finally:
        st = w.stop()
    assert st["final"] and st["workers"][0]["tokens_sent"] == len(switch.tokens[10])
    assert st["drops_total"] == st["drops"]["not_ipv4"], st["drops"]


def test_responses_samples_and_sleep(pair, switch, tmp_path):
    w = Worker(pair, tmp_path, "rsp", ["--threads", "2", "--worker-base", "0", "--mode", "push", "--handler", "sleep"])
    try:
        service = 30_000_000
        t_sent = {}
        # Two back-to-back tasks on thread 1: the second waits in its FIFO for the first.
        for rid, qd, ql in ((100, 12_345, 7), (101, 54_321, 9)):
            t_sent[rid] = switch.dispatch(1, rid, service_ns=service, qdelay=qd, qlen=ql)
        # One on thread 0 without INT.
        t_sent[102] = switch.dispatch(0, 102, service_ns=service, flags=0, qdelay=999, qlen=999)
        switch.wait_responses([(0x0101, r) for r in (100, 101, 102)], timeout=3)

        for rid, wid in ((100, 1), (101, 1), (102, 0)):
            ts, h, fr = switch.responses[(0x0101, rid)]
            assert h.kind == proto.Kind.RESPONSE and h.worker_id == wid
            assert not h.flags & proto.Flag.FAILED
            # swapped: from the worker's MAC/IP/port to the switch's MAC and the client's IP/port
            assert fr[0:6] == bytes.fromhex(pair.b.mac.replace(":", ""))
            assert fr[6:12] == bytes.fromhex(pair.a.mac.replace(":", ""))
            assert fr[26:30] == bytes(map(int, pair.a.ip.split(".")))
            assert fr[30:34] == bytes(map(int, CLIENT_IP.split(".")))
            sport, dport, _ = parse_udp(fr)
            assert (sport, dport) == (proto.UDP_PORT, CLIENT_PORT)
            # the sleep handler held the worker for the service time
            assert ts - t_sent[rid] >= service
        # the second task of thread 1 waited for the first one
        assert switch.responses[(0x0101, 101)][0] - t_sent[101] >= 2 * service - 2_000_000
        # report = FIFO length when answered: the first one had the second behind it
        assert switch.responses[(0x0101, 100)][1].report == 1
        assert switch.responses[(0x0101, 101)][1].report == 0

        s1, lost1 = w.ctl.new_samples(1)
        s0, lost0 = w.ctl.new_samples(0)
        assert lost0 == lost1 == 0 and len(s1) == 2 and len(s0) == 1
        (lw_a, tw_a, qd_a, ql_a), (lw_b, tw_b, qd_b, ql_b) = s1
        assert service - 100_000 <= tw_a < service + 15_000_000 and service - 100_000 <= tw_b < service + 15_000_000
        assert lw_a < 10_000_000  # ran at once
        assert service - 5_000_000 <= lw_b < service + 15_000_000  # queued behind the first
        assert (qd_a, ql_a, qd_b, ql_b) == (12_345, 7, 54_321, 9)
        assert s0[0][2:] == (0, 0)  # no INT flag: no switch values
        st = w.ctl.workers[1].stats
        assert st.tasks_done == 2 and st.busy_ns >= 2 * service and st.polls >= st.empty_polls > 0
    finally:
        w.stop()


# --------------------------------------------------------------------------------------------
# RoCEv2 WRITE ONLY, built with scapy: BTH from scapy.contrib.roce, RETH by hand.
def _roce_frame(
    pair,
    qpn: int,
    psn: int,
    va: int,
    rkey: int,
    data: bytes,
    *,
    opcode: int = 0x0A,
    dma_len: int | None = None,
    icrc: int | None = None,
) -> bytes:
    """icrc None: the right iCRC (scapy's BTH computes it); a number: that trailer
    instead (0 is what the switch sends)."""
    from scapy.contrib.roce import BTH
    from scapy.fields import IntField, XIntField, XLongField
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Packet, Raw

    class RETH(Packet):
        name = "RETH"
        fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]

    p = (
        Ether(src=pair.b.mac, dst=pair.a.mac)
        / IP(src=pair.b.ip, dst=pair.a.ip, flags="DF")
        / UDP(sport=49152, dport=4791, chksum=0)
        / BTH(opcode=opcode, migreq=1, dqpn=qpn, psn=psn, icrc=icrc)
        / RETH(va=va, rkey=rkey, dlen=len(data) if dma_len is None else dma_len)
        / Raw(data)
    )
    return bytes(p)


@pytest.fixture(scope="module")
def ring_worker(pair, tmp_path_factory):
    w = Worker(
        pair,
        tmp_path_factory.mktemp("ring"),
        "ring",
        [
            "--threads",
            "2",
            "--worker-base",
            "20",
            "--mode",
            "rain",
            "--handler",
            "echo",
            "--quota",
            "2",
            "--ring-slots",
            "8",
            "--slot-size",
            "256",
            "--rkey",
            "0xabcdef",
            "--qpn-base",
            "0x200",
            "--psn",
            "100",
        ],
    )
    yield w
    w.stop()


def _counters(st: dict) -> dict:
    """drops and roce counters in one dict (roce's as roce_<name>), counts only."""
    roce = {f"roce_{k}": v for k, v in st["roce"].items() if type(v) is int}
    return {**st["drops"], **roce}


BARRIER_CLIENT = 0x0606
_barrier_ids = itertools.count(1 << 20)


def _drops(w: Worker, switch, timeout: float = 5.0) -> dict:
    """The drop and RoCE counters once every frame sent to the worker before now is in
    them. One RX loop takes the port's frames in order: a task dispatched last (the
    barrier) comes back answered only after every frame before it was counted. The
    counters then come from a statistics file whose counters were read after that: the
    second file written after the answer came (the first may hold counters read just
    before it). A count of frames that merely stopped changing is not enough: once, on
    a busy machine, the ring worker's RX loop waited in the run queue while two files in
    a row agreed, and the two dispatches of the test before (to a worker id out of the
    ring worker's range: it shares the link) were counted in the next test's
    (bad_worker 4 where it sent 2)."""
    rid = next(_barrier_ids)
    switch.dispatch(w.reg["worker_ids"][0], rid, client_id=BARRIER_CLIENT)
    switch.wait_responses([(BARRIER_CLIENT, rid)], timeout=timeout)
    seen, newer = w.stats_path.stat().st_mtime_ns, 0
    deadline = time.monotonic() + timeout
    while newer < 2:
        assert time.monotonic() < deadline, "the worker wrote no statistics after the barrier"
        time.sleep(0.02)
        m = w.stats_path.stat().st_mtime_ns
        if m != seen:
            seen, newer = m, newer + 1
    return _counters(w.stats())


def _wait_drop(w: Worker, switch, before: dict) -> dict:
    """What the counters gained since `before`, every frame sent meanwhile counted."""
    now = _drops(w, switch)
    return {k: now[k] - before[k] for k in now}


def test_rdma_writes_and_descriptors(pair, switch, ring_worker):
    w = ring_worker
    ring = w.reg["ring"]
    assert ring["qpn"] == [0x200, 0x201] and ring["rkey"] == 0xABCDEF and ring["psn"] == 100
    assert ring["slots"] == 8 and ring["slot_size"] == 256 and ring["region_size"] == 8 * 256
    assert ring["transport"] == "emulated" and ring["qp_type"] == "uc" and ring["device"] is None
    assert ring["icrc_check"] is False
    # The ring is aligned to its size rounded up to a power of two: it never crosses the
    # 4 GiB boundary the switch's 32-bit VA arithmetic cannot (rdma_writer.p4).
    assert ring["size"] == 2 * 8 * 256 and ring["va"][0] % (1 << (ring["size"] - 1).bit_length()) == 0
    va1 = ring["va"][1]
    assert va1 - ring["va"][0] == ring["region_size"]
    qpn1 = ring["qpn"][1]

    def write(slot: int, client: int, rid: int, psn: int, *, service: int = 0, total: int = 120, **kw) -> bytes:
        data = proto.large_payload(client, rid, total, arg=service.to_bytes(8, "big"))
        switch.raw.send(
            _roce_frame(
                pair, kw.pop("qpn", qpn1), psn, kw.pop("va", va1 + slot * 256), kw.pop("rkey", 0xABCDEF), data, **kw
            )
        )
        return data

    before = _drops(w, switch)
    write(3, 0x0202, 7001, psn=100)
    write(5, 0x0202, 7002, psn=101)
    d = _wait_drop(w, switch, before)
    assert d["roce_applied"] == 2 and d["roce_psn_gaps"] == 0

    # A matching descriptor runs; a mismatching one is refused (never run) but answered.
    switch.dispatch(21, 7001, client_id=0x0202, desc=(3, 120))
    switch.dispatch(21, 7999, client_id=0x0202, desc=(5, 120))  # slot 5 holds 7002
    switch.dispatch(21, 7002, client_id=0x0303, desc=(5, 120))  # wrong client
    switch.dispatch(21, 7002, client_id=0x0202, desc=(5, 64))  # wrong length
    switch.dispatch(21, 7002, client_id=0x0202, desc=(9, 120))  # slot out of range
    keys = [(0x0202, 7001), (0x0202, 7999), (0x0303, 7002)]
    switch.wait_responses(keys, timeout=3)
    deadline = time.monotonic() + 3
    while w.ctl.workers[1].stats.failed < 4 and time.monotonic() < deadline:
        switch._one(0.05)
    assert not switch.responses[(0x0202, 7001)][1].flags & proto.Flag.FAILED
    assert switch.responses[(0x0202, 7999)][1].flags & proto.Flag.FAILED
    assert switch.responses[(0x0303, 7002)][1].flags & proto.Flag.FAILED
    st = w.ctl.workers[1].stats
    assert st.desc_mismatch == 4 and st.failed == 4 and st.tasks_done == 1

    # Invalid WRITEs are dropped per reason, and none of them touches the ring: slot 3
    # still holds request 7001 afterwards.
    before = _drops(w, switch)
    write(3, 0x0202, 6666, psn=102, qpn=0x2FF)  # unknown QP
    write(3, 0x0202, 6666, psn=102, rkey=0x123456)  # wrong rkey
    write(3, 0x0202, 6666, psn=102, va=ring["va"][0] + 3 * 256)  # thread 0's region via thread 1's QP
    write(7, 0x0202, 6666, psn=102, total=300)  # runs past the region's end
    write(3, 0x0202, 6666, psn=101)  # stale PSN (a duplicate)
    write(3, 0x0202, 6666, psn=102, opcode=0x06)  # RC WRITE FIRST: not supported
    write(3, 0x0202, 6666, psn=102, dma_len=119)  # RETH length != payload
    d = _wait_drop(w, switch, before)
    assert (d["roce_qpn"], d["roce_rkey"], d["roce_bounds"], d["roce_psn"], d["roce_opcode"], d["truncated"]) == (
        1,
        1,
        2,
        1,
        1,
        1,
    ), d
    assert d["roce_applied"] == 0
    switch.dispatch(21, 7001, client_id=0x0202, desc=(3, 120))
    deadline = time.monotonic() + 3
    while w.ctl.workers[1].stats.tasks_done < 2 and time.monotonic() < deadline:
        switch._one(0.05)
    assert w.ctl.workers[1].stats.tasks_done == 2 and w.ctl.workers[1].stats.desc_mismatch == 4

    # A PSN gap (103..104 lost) is counted, the WRITE applied, the QP resynchronised.
    before = _drops(w, switch)
    write(2, 0x0202, 7003, psn=105)
    write(4, 0x0202, 7004, psn=106)
    d = _wait_drop(w, switch, before)
    assert d["roce_applied"] == 2 and d["roce_psn_gaps"] == 1 and d["roce_psn_skipped"] == 3 and d["roce_psn"] == 0
    # A large task forwarded whole runs from the frame.
    payload = proto.large_payload(0x0202, 7005, 200)
    switch.dispatch(20, 7005, client_id=0x0202, flags=proto.Flag.LARGE | proto.Flag.INT, payload=payload)
    switch.dispatch(21, 7003, client_id=0x0202, desc=(2, 120))
    switch.dispatch(21, 7004, client_id=0x0202, desc=(4, 120))
    switch.wait_responses([(0x0202, 7005), (0x0202, 7003), (0x0202, 7004)], timeout=3)
    for k in ((0x0202, 7005), (0x0202, 7003), (0x0202, 7004)):
        h = switch.responses[k][1]
        assert not h.flags & proto.Flag.FAILED and not h.flags & proto.Flag.LARGE
    # the response of a large task is the header alone
    assert len(parse_udp(switch.responses[(0x0202, 7005)][2])[2]) == proto.HDR_LEN


def test_icrc_is_checked_when_the_nic_checks_it(pair, switch, tmp_path):
    """The switch sends its WRITEs with a zero iCRC. With --icrc-check (the inventory's
    roce.icrc_check: on) the emulated NIC drops them as a checking ConnectX does, counts
    them (roce_icrc) and their tasks fail; a WRITE with the right iCRC is applied. Without
    it, both are applied."""
    args = ["--threads", "1", "--mode", "push", "--handler", "echo", "--ring-slots", "8", "--slot-size", "256"]
    args += ["--rkey", "0xabcdef", "--qpn-base", "0x300"]

    def write(w: Worker, slot: int, rid: int, psn: int, icrc: int | None) -> None:
        ring = w.reg["ring"]
        data = proto.large_payload(0x0505, rid, 120)
        switch.raw.send(_roce_frame(pair, 0x300, psn, ring["va"][0] + slot * 256, 0xABCDEF, data, icrc=icrc))

    def run(w: Worker, rid: int, slot: int) -> bool:
        """Dispatch the task pre-written to `slot`; True if it ran (not FAILED)."""
        switch.dispatch(0, rid, client_id=0x0505, desc=(slot, 120))
        switch.wait_responses([(0x0505, rid)], timeout=3)
        return not switch.responses[(0x0505, rid)][1].flags & proto.Flag.FAILED

    w = Worker(pair, tmp_path, "icrc-on", [*args, "--icrc-check"])
    try:
        assert w.reg["ring"]["icrc_check"] is True
        before = _drops(w, switch)
        write(w, 1, 8001, psn=0, icrc=None)  # the right iCRC
        write(w, 2, 8002, psn=1, icrc=0)  # what the switch sends
        write(w, 3, 8003, psn=1, icrc=0xDEADBEEF)  # a wrong one
        d = _wait_drop(w, switch, before)
        assert (d["roce_applied"], d["roce_icrc"], d["roce_icrc_bad"]) == (1, 2, 2), d
        # a dropped WRITE consumes no PSN: the next one, PSN 1, is in order
        write(w, 4, 8004, psn=1, icrc=None)
        d = _wait_drop(w, switch, before)
        assert (d["roce_applied"], d["roce_psn_gaps"], d["roce_psn"]) == (2, 0, 0), d
        assert run(w, 8001, 1) and run(w, 8004, 4)
        assert not run(w, 8002, 2) and not run(w, 8003, 3)  # never written: refused by the slot check
        assert w.ctl.workers[0].stats.desc_mismatch == 2
    finally:
        st = w.stop()
    assert st["roce"]["icrc_check"] is True and st["drops"]["roce_icrc"] == 2
    assert st["roce"]["nic_icrc_drops"] is None  # emulated: no NIC counter

    w = Worker(pair, tmp_path, "icrc-off", args)
    try:
        assert w.reg["ring"]["icrc_check"] is False
        before = _drops(w, switch)
        write(w, 1, 8101, psn=0, icrc=None)
        write(w, 2, 8102, psn=1, icrc=0)
        d = _wait_drop(w, switch, before)
        assert (d["roce_applied"], d["roce_icrc"]) == (2, 0), d
        assert run(w, 8101, 1) and run(w, 8102, 2)
    finally:
        st = w.stop()
    assert st["roce"]["icrc_check"] is False and st["drops"]["roce_icrc"] == 0


def test_malformed_frames_are_counted_and_dropped(pair, switch, ring_worker):
    w = ring_worker
    before = _drops(w, switch)

    def rain(h: proto.Header, extra: bytes = b"") -> None:
        switch.send_rain(h.pack() + extra)

    good = proto.Header(kind=proto.Kind.DISPATCH, client_id=0x0404, request_id=1, worker_id=20)
    switch.send_rain(good.pack()[:20])  # truncated rain header
    rain(proto.Header(kind=proto.Kind.DISPATCH, worker_id=20, version=9))  # bad version
    b = bytearray(good.pack())
    b[1] = 99  # unknown kind
    switch.send_rain(bytes(b))
    rain(proto.Header(kind=proto.Kind.TOKEN, worker_id=20))  # a kind workers do not take
    rain(proto.Header(kind=proto.Kind.RESPONSE, worker_id=20))
    rain(proto.Header(kind=proto.Kind.DISPATCH, worker_id=22))  # worker id out of range
    rain(proto.Header(kind=proto.Kind.DISPATCH, worker_id=19))
    rain(
        proto.Header(kind=proto.Kind.DISPATCH, worker_id=20, flags=proto.Flag.LARGE), b"\x00" * 40
    )  # large task, bad slot magic
    short = proto.SlotHeader(0x0404, 2, length=8).pack()
    rain(proto.Header(kind=proto.Kind.DISPATCH, worker_id=20, flags=proto.Flag.LARGE), short)  # length < its header
    switch.send_rain(b"\x00" * 40, dport=9999)  # not our port
    garbage = os.urandom(64)
    switch.raw.send(bytes.fromhex(pair.a.mac.replace(":", "")) + garbage)  # garbage after a MAC
    ip_garbage = (
        bytes.fromhex(pair.a.mac.replace(":", "") + pair.b.mac.replace(":", ""))
        + b"\x08\x00"
        + bytes([0x45])
        + os.urandom(10)
    )  # IPv4 type, cut short
    switch.raw.send(ip_garbage)
    fr = bytearray(frame(pair.b, pair.a, good.pack(), CLIENT_PORT, proto.UDP_PORT))
    struct.pack_into("!H", fr, 38, 200)  # UDP length past the frame
    switch.raw.send(bytes(fr))

    expect = {"truncated": 3, "bad_version": 1, "bad_kind": 3, "bad_worker": 2, "bad_payload": 2, "not_ours": 1}
    d = _wait_drop(w, switch, before)
    for k, n in expect.items():
        assert d[k] == n, (k, d)
    assert d["not_ipv4"] >= 0 and d["no_room"] == 0

    # ... and the worker still answers.
    switch.dispatch(20, 4242, client_id=0x0404)
    switch.wait_responses([(0x0404, 4242)], timeout=3)
    assert switch.responses[(0x0404, 4242)][1].worker_id == 20


def test_sigterm_writes_final_stats_and_cleans_up(pair, switch, tmp_path):
    w = Worker(pair, tmp_path, "stop", ["--threads", "1", "--mode", "rain", "--handler", "sleep", "--quota", "3"])
    switch.pump(0.3)
    assert len(switch.tokens.get(0, [])) == 3
    # a task still running when the stop comes is finished and answered; the two queued
    # behind it are not run, and the final books say so exactly
    for rid in (1, 2, 3):
        switch.dispatch(0, rid, service_ns=300_000_000)
    w.wait_stats(lambda s: s["workers"][0]["dispatched"] == 3)
    st = w.stop()
    assert w.proc.returncode == 0, w.stderr
    (th,) = st["workers"]
    assert st["final"] is True and th["tasks_done"] == 1 and th["failed"] == 0, th
    assert (th["dispatched"], th["fifo_len"]) == (3, 2), th
    switch.pump(0.3)
    assert (0x0101, 1) in switch.responses
    assert not w.left_runtime_dir  # rain-worker removed its own /var/run/dpdk/<prefix>
    assert set(st["drops"]) == {
        "not_ipv4",
        "not_udp",
        "bad_ip",
        "not_ours",
        "truncated",
        "bad_version",
        "bad_kind",
        "bad_worker",
        "bad_payload",
        "roce_qpn",
        "roce_rkey",
        "roce_bounds",
        "roce_psn",
        "roce_opcode",
        "roce_offloaded",
        "roce_icrc",
        "no_room",
    }


def test_baseline_modes_report_and_pull(pair, switch, tmp_path):
    # report (R2P2/RackSched-SW): a REPORT at start and after every task, with the depth left.
    w = Worker(
        pair, tmp_path, "rep", ["--threads", "1", "--worker-base", "3", "--mode", "report", "--handler", "sleep"]
    )
    try:
        switch.pump(0.3)
        assert [(h.kind, h.worker_id, h.report) for h in switch.other] == [(proto.Kind.REPORT, 3, 0)]
        assert not switch.tokens
        switch.dispatch(3, 1, service_ns=30_000_000)
        switch.dispatch(3, 2, service_ns=30_000_000)
        switch.wait_responses([(0x0101, 1), (0x0101, 2)], timeout=3)
        switch.pump(0.2)
        assert [h.report for h in switch.other if h.kind == proto.Kind.REPORT] == [0, 1, 0]
    finally:
        w.stop()

    # pull (Draconis-SW): one PULL at a time while idle; EMPTY or a DISPATCH answers it.
    switch.other.clear()
    w = Worker(pair, tmp_path, "pull", ["--threads", "1", "--worker-base", "6", "--mode", "pull", "--handler", "echo"])
    try:
        pulls = lambda: [h for h in switch.other if h.kind == proto.Kind.PULL]  # noqa: E731
        switch.pump(0.3)
        assert len(pulls()) == 1 and pulls()[0].worker_id == 6
        switch.dispatch(6, 0, kind=proto.Kind.EMPTY)
        switch.pump(0.3)
        assert len(pulls()) == 2
        switch.dispatch(6, 77)
        switch.wait_responses([(0x0101, 77)], timeout=3)
        switch.pump(0.3)
        assert len(pulls()) == 3
        # deregistered: the pending pull is answered, no new one follows
        w.ctl.set_enabled(0, False)
        time.sleep(0.05)
        switch.dispatch(6, 0, kind=proto.Kind.EMPTY)
        switch.pump(0.3)
        assert len(pulls()) == 3
        assert w.stats()["workers"][0]["pulls_sent"] == 3
    finally:
        st = w.stop()
    assert st["drops"]["bad_kind"] == 0
