"""rain-worker --rdma ibverbs without RDMA hardware.

There is no ConnectX here (rdma-core installs, 0 devices), so two kinds of tests:
- with the real libibverbs: the worker fails fast, naming what is missing and the fix;
- with a mock ConnectX (tests/mock_ibverbs, interposed with LD_PRELOAD; it logs every
  verb with its arguments): what the worker asks the NIC for, checked call by call
  against its registration, through re-registration and teardown.
The worker runs in namespace rmti-a on an af_packet port, as in test_worker.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hosts import proto
from switch.control.rdma_writer import WriteTarget, check_ring
from switch.control.registration import WorkerRegistration
from tests.integration.test_worker import BIN, DPDK, Switch, Worker, _roce_frame, worker_cmd
from tests.netpeer import NetnsPair

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MOCK_DIR = REPO / "tests/mock_ibverbs"
TAG = "rmti"
IP_A = "10.81.0.1"
# Port 1's GID table: link-local and IPv4 entries in both RoCE versions, index 3 empty.
GIDS = f"0=v1:fe80::52:4dff:feaa:1,1=v2:fe80::52:4dff:feaa:1,2=v1:::ffff:{IP_A},4=v2:::ffff:{IP_A}"
ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE = 1, 2  # enum ibv_access_flags
MTU_ENUM = {1024: 3, 2048: 4, 4096: 5}  # enum ibv_mtu


@pytest.fixture(scope="module")
def built():
    r = subprocess.run(["make", "-C", str(DPDK), "build/rain-worker"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    if "ibv_" not in subprocess.run(["objdump", "-T", str(BIN)], capture_output=True, text=True).stdout:
        pytest.skip("rain-worker was built without ibverbs (libibverbs-dev missing)")
    return BIN


@pytest.fixture(scope="module")
def mock_lib(built, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mock") / "libmock_ibverbs.so"
    r = subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            f"-Wl,--version-script={MOCK_DIR / 'libibverbs.map'}",
            "-Wl,-soname,libmock_ibverbs.so",
            "-o",
            str(out),
            str(MOCK_DIR / "mock_ibverbs.c"),
            "-lpthread",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def pair(built):
    with NetnsPair(TAG) as p:
        yield p


@pytest.fixture
def switch(pair):
    s = Switch(pair)
    yield s
    s.close()


def mock_env(lib: Path, log: Path, **knobs: str) -> dict:
    env = {"LD_PRELOAD": str(lib), "MOCK_IBVERBS_LOG": str(log), "MOCK_IBVERBS_GIDS": GIDS}
    env.update({f"MOCK_IBVERBS_{k.upper()}": v for k, v in knobs.items()})
    return env


def calls(log: Path, name: str | None = None) -> list[dict]:
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [r for r in rows if name is None or r["call"] == name]


def run_failing(
    pair, args: list[str], env: dict | None = None, *, binary: Path = BIN, vdev: str = "net_af_packet0,iface=dp0"
) -> tuple[int, str, float]:
    """Start a worker that must refuse to start: (exit status, stderr, seconds)."""
    prefix = f"{TAG}-fail-{os.getpid()}"
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            worker_cmd(pair, prefix, args, binary=binary, vdev=vdev),
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, **(env or {})},
        )
    finally:
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)
    assert "rain-worker ready" not in r.stdout
    return r.returncode, r.stderr, time.monotonic() - t0


def one_line(stderr: str) -> str:
    return " ".join(stderr.split())


# --------------------------------------------------------------------------------------------
def test_the_mock_covers_every_verb_the_worker_imports(built):
    imported = set(
        re.findall(
            r"\s(_?ibv_\w+)$",
            subprocess.run(["objdump", "-T", str(built)], capture_output=True, text=True).stdout,
            re.M,
        )
    )
    text = (MOCK_DIR / "libibverbs.map").read_text()
    mocked = set(re.findall(r"^\s*(_?ibv_\w+);", text, re.M))
    assert imported and imported <= mocked, sorted(imported - mocked)
    # ... under the versions the binary asks for
    versions = set(
        re.findall(
            r"\((IBVERBS_[\d.]+)\)",
            subprocess.run(["objdump", "-T", str(built)], capture_output=True, text=True).stdout,
        )
    )
    assert versions <= set(re.findall(r"^(IBVERBS_[\d.]+) \{", text, re.M)), versions


def test_the_mock_refuses_what_a_connectx_would(mock_lib, tmp_path):
    # Its checks are what the worker tests lean on: each must be able to fail.
    exe = tmp_path / "selftest"
    r = subprocess.run(
        ["gcc", "-O1", "-Wall", "-Werror", "-o", str(exe), str(MOCK_DIR / "selftest.c"), "-libverbs"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    log = tmp_path / "verbs.jsonl"
    out = subprocess.run(
        [str(exe)], capture_output=True, text=True, timeout=30, env={**os.environ, **mock_env(mock_lib, log)}
    )
    assert out.returncode == 0, out.stderr
    got = dict(line.split() for line in out.stdout.splitlines())
    einval, efault, ebusy, eopnotsupp = "22", "14", "16", "95"
    assert got == {
        "mr_unmapped": efault,
        "mr_remote_write_alone": einval,
        "mr_ok": "0",
        "ud_qp": eopnotsupp,
        "reset_to_rtr": einval,
        "init_without_port": einval,
        "init_ok": "0",
        "rtr_without_rq_psn": einval,
        "uc_rtr_with_rc_attrs": einval,
        "rtr_empty_sgid": einval,
        "uc_rtr_ok": "0",
        "rc_init_ok": "0",
        "rc_rtr_without_rnr_timer": einval,
        "rc_rtr_ok": "0",
        "destroy_cq_in_use": ebusy,
        "dealloc_pd_in_use": ebusy,
        "destroy_cq": "0",
        "dealloc_pd_with_mr": ebusy,
        "dealloc_pd": "0",
    }, got
    assert calls(log, "ibv_close_device")[0]["leaked"] == {"pd": 0, "mr": 0, "cq": 0, "qp": 0}


def test_no_rdma_hardware_fails_fast_with_the_fix(pair):
    # This machine's real libibverbs: no device. On an af_packet port the worker cannot
    # even name one (a vdev has no PCI function).
    rc, err, secs = run_failing(pair, ["--rdma", "ibverbs"])
    assert rc != 0 and secs < 15
    assert "port 0 (net_af_packet0) is not a PCI device (bus vdev)" in one_line(err), err
    assert "fix: run on the ConnectX's PCI port" in one_line(err)
    # PCI-less (net_null, --no-pci) with the device named: the RDMA stack has none.
    rc, err, secs = run_failing(pair, ["--rdma", "ibverbs", "--rdma-dev", "mlx5_0"], vdev="net_null0")
    assert rc != 0 and secs < 15
    if any(Path("/sys/class/infiniband").glob("*")):
        assert "--rdma-dev mlx5_0: no such RDMA device" in err or "ibverbs" in err
    else:
        text = one_line(err)
        assert "this host has no RDMA device" in text or "this host has no RDMA stack" in text, err
        assert "fix:" in text and "--rdma emulated" in text


def test_worker_built_without_ibverbs_says_so(pair, tmp_path):
    build = tmp_path / "build"
    r = subprocess.run(
        ["make", "-C", str(DPDK), f"BUILD={build}", "IBVERBS=no", f"{build}/rain-worker"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    binary = build / "rain-worker"
    assert "ibv_" not in subprocess.run(["objdump", "-T", str(binary)], capture_output=True, text=True).stdout
    rc, err, secs = run_failing(pair, ["--rdma", "ibverbs"], binary=binary)
    assert rc != 0 and secs < 15
    assert "built without ibverbs; fix: install libibverbs-dev and rebuild" in one_line(err), err


@pytest.mark.parametrize(
    "args, knobs, expect",
    [
        ([], {"devices": ""}, ["this host has no RDMA device", "--rdma emulated"]),
        (["--rdma-dev", "mlx5_9"], {}, ["--rdma-dev mlx5_9: no such RDMA device (this host has: mock_mlx5_0)"]),
        (
            [],
            {"gids": f"2=v1:::ffff:{IP_A},5=v2:::ffff:10.81.0.77"},
            [
                f"mock_mlx5_0 port 1 has no RoCE v2 GID for {IP_A}",
                "its RoCE v2 GIDs: 5 ::ffff:10.81.0.77",
                f"fix: assign {IP_A} to",
            ],
        ),
        (["--gid-index", "2"], {}, ["--gid-index 2: GID 2 of mock_mlx5_0 port 1 is RoCE v1"]),
        (["--gid-index", "3"], {}, ["--gid-index 3: mock_mlx5_0 port 1 has no such GID"]),
        (
            [],
            {"active_mtu": "1024"},
            ["--rdma-mtu 4096: port 1 of mock_mlx5_0 carries RDMA MTU 1024 at most", "at least 4192"],
        ),
        ([], {"link_ib": "1"}, ["port 1 of mock_mlx5_0 is InfiniBand, not Ethernet"]),
        ([], {"fail": "ibv_reg_mr=12"}, ["ibv_reg_mr(mock_mlx5_0", "Cannot allocate memory", "locked-memory limit"]),
        (
            [],
            {"fail": "rtr=110"},
            ["to RTR: Connection timed out", "ip neigh replace 10.81.0.2 lladdr 02:52:4d:aa:00:02 dev"],
        ),
        (["--rkey", "5"], {}, ["--rkey is an option of --rdma emulated"]),
        (["--rdma-port", "2"], {}, ["ibv_query_port(mock_mlx5_0, 2)", "--rdma-port"]),
    ],
    ids=[
        "no-device",
        "wrong-device",
        "no-gid",
        "gid-v1",
        "gid-empty",
        "mtu",
        "infiniband",
        "reg-mr",
        "rtr",
        "rkey",
        "port",
    ],
)
def test_mock_connectx_refusals(pair, mock_lib, tmp_path, args, knobs, expect):
    log = tmp_path / "verbs.jsonl"
    rdma_dev = [] if "--rdma-dev" in args else ["--rdma-dev", "mock_mlx5_0"]
    rc, err, secs = run_failing(pair, ["--rdma", "ibverbs", *rdma_dev, *args], mock_env(mock_lib, log, **knobs))
    assert rc != 0 and secs < 15, err
    text = one_line(err)
    for e in expect:
        assert e in text, (e, err)


def test_ibverbs_options_are_refused_on_the_emulated_path(pair):
    rc, err, _ = run_failing(pair, ["--gid-index", "3"])
    assert rc != 0 and "--gid-index is an option of --rdma ibverbs" in err


# --------------------------------------------------------------------------------------------
def test_mock_connectx_uc_registration_reregistration_teardown(pair, switch, mock_lib, tmp_path):
    log = tmp_path / "verbs.jsonl"
    threads, slots, slot = 3, 8, 2048
    w = Worker(
        pair,
        tmp_path,
        "uc",
        [
            "--rdma",
            "ibverbs",
            "--rdma-dev",
            "mock_mlx5_0",
            "--threads",
            str(threads),
            "--worker-base",
            "4",
            "--mode",
            "rain",
            "--handler",
            "echo",
            "--quota",
            "2",
            "--ring-slots",
            str(slots),
            "--slot-size",
            str(slot),
            "--psn",
            "77",
        ],
        env=mock_env(mock_lib, log),
        tag=TAG,
    )
    try:
        ring = w.reg["ring"]
        region = slots * slot
        assert (ring["transport"], ring["qp_type"], ring["device"], ring["port"]) == ("ibverbs", "uc", "mock_mlx5_0", 1)
        assert ring["icrc_check"] is False
        # the GID of --src-ip, RoCE v2 (index 4: 2 is its v1 twin, 3 is empty)
        assert (ring["gid_index"], ring["gid"], ring["mtu"]) == (4, f"::ffff:{IP_A}", 4096)
        assert ring["size"] == threads * region and ring["region_size"] == region
        assert [v - ring["va"][0] for v in ring["va"]] == [i * region for i in range(threads)]
        # aligned to the power of two above 48 KiB: no region crosses a 4 GiB boundary
        assert ring["va"][0] % (64 << 10) == 0

        # One MR over exactly the ring, writable by the switch.
        (mr,) = calls(log, "ibv_reg_mr")
        assert (mr["addr"], mr["length"]) == (ring["va"][0], ring["size"])
        assert mr["access"] == ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE and mr["errno"] == 0
        assert ring["rkey"] == mr["rkey"]
        # One CQ, one UC QP per thread on it; the registration's QPNs are the NIC's.
        (cq,) = calls(log, "ibv_create_cq")
        qps = calls(log, "ibv_create_qp")
        assert [q["type"] for q in qps] == ["UC"] * threads
        assert all(q["send_cq"] == q["recv_cq"] == cq["cq"] and q["pd"] == mr["pd"] for q in qps)
        assert ring["qpn"] == [q["qpn"] for q in qps] and len(set(ring["qpn"])) == threads

        def moves(qpn: int) -> list[dict]:
            return [m for m in calls(log, "ibv_modify_qp") if m["qpn"] == qpn]

        for qpn in ring["qpn"]:
            init, rtr = moves(qpn)  # RESET -> INIT -> RTR, no RTS: a responder needs no more
            assert (init["from"], init["to"], init["ret"]) == ("RESET", "INIT", 0)
            assert (init["port"], init["pkey_index"], init["access"]) == (1, 0, ACCESS_REMOTE_WRITE)
            assert (rtr["from"], rtr["to"], rtr["ret"]) == ("INIT", "RTR", 0)
            assert rtr["path_mtu"] == MTU_ENUM[4096] and rtr["rq_psn"] == 77
            assert rtr["is_global"] == 1 and rtr["dgid"] == f"::ffff:{pair.b.ip}" and rtr["sgid_index"] == 4
            assert (rtr["hop_limit"], rtr["traffic_class"], rtr["ah_port"]) == (64, 26 << 2, 1)
            assert rtr["dest_qp_num"] == 0xFFFFFE  # the switch has no QP: a number nobody owns

        # The controller takes this registration: UC WRITE ONLY to each NIC QP.
        reg = WorkerRegistration.from_json("worker0", w.reg)
        assert reg.ring.transport == "ibverbs" and reg.ring.qp_type == "uc"
        t = WriteTarget(4, 0, 0, 0, 0, reg.ring.qpn[4], reg.ring.rkey, reg.ring.va[4], qp_type=reg.ring.qp_type)
        assert t.params()["opcode"] == proto.ROCE_OP_UC_WRITE_ONLY and t.params()["qpn"] == ring["qpn"][0]
        for wid in reg.worker_ids:
            check_ring(wid, "worker0", reg.ring.va[wid], slot, slots, slots)

        # Tokens flow as with the emulated path.
        switch.pump(0.5)
        assert all(len(switch.tokens.get(wid, [])) == 2 for wid in (4, 5, 6)), switch.tokens

        # A RoCE frame that reaches DPDK is the NIC's business: dropped, counted.
        before = w.stats()["drops"]["roce_offloaded"]
        switch.raw.send(_roce_frame(pair, ring["qpn"][0], 77, ring["va"][0], ring["rkey"], b"\x00" * 64))
        st = w.wait_stats(lambda s: s["drops"]["roce_offloaded"] > before)
        assert st["drops"]["roce_offloaded"] == before + 1 and st["roce"]["applied"] == 0

        # Re-registration of thread 1 (paper 6.1): its QP goes back through RESET to RTR
        # at the initial PSN; the others are left alone.
        n_before = {qpn: len(moves(qpn)) for qpn in ring["qpn"]}
        w.ctl.set_enabled(1, False)
        # until the thread has seen it (its `registered`): a thread napping past a fixed
        # pause on a loaded machine saw it enabled throughout, and never re-registered
        st = w.wait_stats(lambda s: s["workers"][1]["registered"] == 0, timeout=10)
        assert st["workers"][1]["registered"] == 0, st["workers"][1]
        w.ctl.set_enabled(1, True)
        switch.wait_tokens(5, 4, timeout=3)
        qpn1 = ring["qpn"][1]
        deadline = time.monotonic() + 3
        while len(moves(qpn1)) < n_before[qpn1] + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        again = moves(qpn1)[n_before[qpn1] :]
        assert [(m["from"], m["to"], m["ret"]) for m in again] == [
            ("RTR", "RESET", 0),
            ("RESET", "INIT", 0),
            ("INIT", "RTR", 0),
        ]
        assert again[2]["rq_psn"] == 77 and again[2]["dgid"] == f"::ffff:{pair.b.ip}"
        assert all(len(moves(q)) == n_before[q] for q in ring["qpn"] if q != qpn1)
        st = w.wait_stats(lambda s: s["workers"][1]["qp_resets"] == 1)
        assert [x["qp_resets"] for x in st["workers"]] == [0, 1, 0] and not any(x["qp_failed"] for x in st["workers"])
        assert len(switch.tokens[5]) == 4  # n_w again after the re-registration
    finally:
        st = w.stop()
    assert w.proc.returncode == 0, w.stderr
    assert st["final"]
    # Teardown in the reverse order of creation, nothing refused, nothing left open.
    tail = [c["call"] for c in calls(log)][-(threads + 4) :]
    assert tail == ["ibv_destroy_qp"] * threads + [
        "ibv_destroy_cq",
        "ibv_dereg_mr",
        "ibv_dealloc_pd",
        "ibv_close_device",
    ], tail
    assert all(c["ret"] == 0 for c in calls(log) if c["call"].startswith(("ibv_destroy", "ibv_dealloc", "ibv_dereg")))
    (close,) = calls(log, "ibv_close_device")
    assert close["leaked"] == {"pd": 0, "mr": 0, "cq": 0, "qp": 0}
    # The device list was freed once, right after the device was opened.
    names = [c["call"] for c in calls(log)]
    assert names.count("ibv_free_device_list") == 1
    assert names.index("ibv_free_device_list") == names.index("ibv_open_device") + 1


def test_mock_connectx_rc_qps(pair, switch, mock_lib, tmp_path):
    log = tmp_path / "verbs.jsonl"
    w = Worker(
        pair,
        tmp_path,
        "rc",
        [
            "--rdma",
            "ibverbs",
            "--rdma-dev",
            "mock_mlx5_0",
            "--qp-type",
            "rc",
            "--gid-index",
            "4",
            "--rdma-mtu",
            "2048",
            "--dscp",
            "46",
            "--threads",
            "2",
            "--slot-size",
            "2048",
            "--remote-qpn",
            "0x123",
            "--icrc-check",
        ],
        env=mock_env(mock_lib, log),
        tag=TAG,
    )
    try:
        ring = w.reg["ring"]
        assert (ring["qp_type"], ring["gid_index"], ring["mtu"]) == ("rc", 4, 2048)
        # The NIC checks the iCRC the switch leaves zero: said at start, recorded; the
        # mock exposes no rx_icrc_encapsulated counter, so its drops are unknown (null).
        assert ring["icrc_check"] is True
        st = w.stats()
        assert st["roce"]["icrc_check"] is True and st["roce"]["nic_icrc_drops"] is None
        assert [q["type"] for q in calls(log, "ibv_create_qp")] == ["RC", "RC"]
        rtrs = [m for m in calls(log, "ibv_modify_qp") if m["to"] == "RTR"]
        assert [m["qpn"] for m in rtrs] == ring["qpn"]
        for m in rtrs:  # RC's RTR also needs the responder resources and the RNR timer
            assert m["ret"] == 0 and m["max_dest_rd_atomic"] == 0 and m["min_rnr_timer"] == 12
            assert m["path_mtu"] == MTU_ENUM[2048] and m["traffic_class"] == 46 << 2 and m["dest_qp_num"] == 0x123
        # no GID search when the index is given
        assert [c["index"] for c in calls(log, "ibv_query_gid_ex")] == [4]
        reg = WorkerRegistration.from_json("worker0", w.reg)
        t = WriteTarget(0, 0, 0, 0, 0, reg.ring.qpn[0], reg.ring.rkey, reg.ring.va[0], qp_type=reg.ring.qp_type)
        assert t.params()["opcode"] == proto.ROCE_OP_RC_WRITE_ONLY
    finally:
        w.stop()
    assert w.proc.returncode == 0, w.stderr
    warning = one_line(w.stderr)
    assert "--icrc-check: mock_mlx5_0 checks the RoCEv2 iCRC" in warning
    assert "every pre-written task will be dropped (this NIC exposes no count of them)" in warning


def test_mock_connectx_qp_that_cannot_be_reset_stops_its_tokens(pair, switch, mock_lib, tmp_path):
    # RTR #1 and #2 set the two QPs up; #3 is thread 0's re-registration: it fails.
    log = tmp_path / "verbs.jsonl"
    w = Worker(
        pair,
        tmp_path,
        "dead",
        [
            "--rdma",
            "ibverbs",
            "--rdma-dev",
            "mock_mlx5_0",
            "--threads",
            "2",
            "--quota",
            "2",
            "--handler",
            "echo",
            "--slot-size",
            "2048",
        ],
        env=mock_env(mock_lib, log, fail="rtr=110@3"),
        tag=TAG,
    )
    try:
        switch.pump(0.4)
        assert len(switch.tokens.get(0, [])) == 2
        w.ctl.set_enabled(0, False)
        time.sleep(0.1)
        w.ctl.set_enabled(0, True)
        st = w.wait_stats(lambda s: s["workers"][0]["qp_failed"] == 1)
        assert st["workers"][0]["qp_failed"] == 1 and st["workers"][1]["qp_failed"] == 0
        switch.pump(0.4)
        assert len(switch.tokens[0]) == 2  # a dead QP would lose every pre-written task: no tokens
        # The next re-registration brings the QP back, and the tokens with it.
        w.ctl.set_enabled(0, False)
        time.sleep(0.1)
        w.ctl.set_enabled(0, True)
        switch.wait_tokens(0, 4, timeout=3)
        st = w.wait_stats(lambda s: s["workers"][0]["qp_failed"] == 0)
        assert st["workers"][0]["qp_failed"] == 0 and st["workers"][0]["qp_resets"] == 2
        assert len(switch.tokens[0]) == 4
    finally:
        w.stop()
    assert "did not come back to RTR: Connection timed out" in w.stderr
