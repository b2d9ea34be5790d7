"""rpc-client (hosts/rpc/client.c) against rpc-server on loopback: an open-loop load
generator that measures latency from each request's intended send time.

- coordinated omission cannot hide a slow server: requests go out on schedule while
  earlier ones are outstanding, and their latencies include the queue they met;
- a Poisson load is sent at its rate, and the interval log it writes is read by
  rainmaker's own HdrHistogram reader with the count the summary gives;
- its results are a point's client results as rain-client's are: rainmaker's point
  reader and validity checks read them with nothing missing, latency and slowdown alike;
- against a real memcached (Debian's), the binary protocol's GETs and SETs are answered
  one for one, counted as memcached itself counts them;
- a bad command line exits 2 with a fix.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.experiment.histograms import Hist, read_hlog

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hosts" / "rpc" / "build"


@pytest.fixture(scope="module")
def built() -> Path:
    subprocess.run(["make", "-s", "-C", str(BUILD.parent)], check=True, timeout=120)
    return BUILD


@pytest.fixture
def server(built):
    procs = []

    def start(*args: str) -> int:
        p = subprocess.Popen(
            [str(built / "rpc-server"), "--listen", "127.0.0.1:0", *args], stdout=subprocess.PIPE, text=True
        )
        procs.append(p)
        line = p.stdout.readline()
        assert line.startswith("rpc-server ready port="), line
        return int(line.split("port=")[1].split()[0])

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def client(built: Path, port: int, out: Path, *args: str) -> dict:
    r = subprocess.run(
        [str(built / "rpc-client"), "--connect", f"127.0.0.1:{port}", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text())


def test_a_slow_server_cannot_hide_behind_coordinated_omission(built, server, tmp_path):
    """One connection to one thread serving 20 ms per request, sent every 10 ms: the
    server falls 10 ms further behind with each request. Every request still leaves on
    its schedule, and the k-th one's latency, from its intended time, is about
    20 (k + 1) - 10 k ms: 0.5 s for the last. A closed loop would wait for each answer
    before the next send, and measure 20 ms throughout."""
    port = server("--mode", "cs", "--threads", "1")
    s = client(
        built, port, tmp_path / "co", "--connections", "1", "--rate", "100", "--arrival", "constant",
        "--service", "const:20000000", "--warmup", "0", "--duration", "0.5",
    )  # fmt: skip
    t = s["totals"]
    assert t["sent"] == 50 and t["received"] == 50 and t["in_window"] == 50
    lat = s["latency_ns"]
    assert lat["p50"] > 200e6 and lat["max"] > 480e6, lat  # queued, as intended-time latency must show
    assert lat["max"] < 800e6, lat


def test_a_poisson_load_is_sent_at_its_rate_and_its_log_is_read_back(built, server, tmp_path):
    port = server("--mode", "pool", "--threads", "2", "--io-threads", "1")
    out = tmp_path / "poisson"
    s = client(
        built, port, out, "--connections", "8", "--threads", "2", "--rate", "2000", "--service", "exp:5000",
        "--warmup", "0.2", "--duration", "1", "--seed", "7",
    )  # fmt: skip
    t = s["totals"]
    assert t["received"] == t["sent"] and t["outstanding"] == 0
    assert abs(t["in_window"] / 2000 - 1) < 0.05, t  # a Poisson count of mean 2,000: sd 2.2%
    log = read_hlog(out / "latency.hlog")
    assert len(log.intervals) == 10 and {iv.tag for iv in log.intervals} == {"rpc"}  # the class
    merged = Hist.merge(iv.hist for iv in log.intervals)
    assert merged.total == s["latency_ns"]["count"] == t["in_window"]
    assert merged.percentile(50) >= 5000 * 0.5  # at least the service asked for, on average


@pytest.fixture
def memcached():
    """Debian's memcached on a free loopback port (make setup installs it)."""
    exe = shutil.which("memcached")
    if not exe:
        pytest.skip("no memcached: `make setup` installs Debian's")
    for _ in range(5):  # the port probed free may be taken before memcached binds it
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.Popen([exe, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-m", "16", "-u", "root"])
        deadline = time.monotonic() + 10
        while p.poll() is None and time.monotonic() < deadline:  # readiness: it accepts
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        if p.poll() is None:
            break
    else:
        pytest.fail("memcached did not start on a free loopback port in 5 tries")
    yield port
    p.kill()
    p.wait(timeout=10)


def memcached_stats(port: int) -> dict[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    return {w[1]: w[2] for line in buf.decode().splitlines() if (w := line.split()) and w[0] == "STAT"}


def test_its_results_read_as_a_points_client_results(built, server, tmp_path):
    """What a run collects from a client host (clients/<host>/: summary.json,
    latency.hlog, slowdown.hlog) is read by points.load_point and judged by the same
    validity checks as rain-client's: one class, its counters in rain-client's names."""
    from orchestrator.experiment.points import load_point
    from orchestrator.experiment.validity import check_load, check_losses, check_samples

    port = server("--mode", "ms-user", "--threads", "2", "--io-threads", "1")
    point = tmp_path / "points" / "p"
    (point / "clients").mkdir(parents=True)
    s = client(
        built, port, point / "clients" / "client0", "--connections", "20", "--threads", "2", "--rate", "3000",
        "--service", "bimodal:2500:27500:0.9", "--warmup", "0.2", "--duration", "1", "--seed", "5", "--class", "rpc",
    )  # fmt: skip
    data = load_point(point, {"id": "p", "offered_rps": 3000.0, "dilation": 1.0})
    assert data.problems == [] and data.classes == ["rpc"], data.problems
    c = data.counters()
    t = s["totals"]
    assert c["offered"] == c["sent_in_window"] == t["sent_in_window"] and c["lost"] == 0
    assert abs(c["mean_service_ns"] / 5000 - 1) < 0.25, c  # 0.9 x 2.5 us + 0.1 x 27.5 us, drawn
    assert data.latency["rpc"].total == t["in_window"] == c["offered"]
    sd = data.slowdown["rpc"]
    assert sd.total == t["in_window"] and sd.percentile(1) >= 1000  # no answer before its service time
    assert check_load(data, 0.05).passed, check_load(data, 0.05).message
    assert all(ch.passed for ch in check_losses(data, 0.001))
    assert check_samples(data, 1000).passed
    r = subprocess.run([str(built / "rpc-client"), "--class", "Bad Name"], capture_output=True, text=True)
    assert r.returncode == 2 and "--class: not a class name" in r.stderr


def test_memcached_answers_every_get_and_set_as_memcached_counts_them(built, memcached, tmp_path):
    s = client(
        built, memcached, tmp_path / "mc", "--protocol", "memcached", "--connections", "8", "--threads", "2",
        "--rate", "2000", "--get-fraction", "0.5", "--keys", "50", "--payload", "100",
        "--warmup", "0", "--duration", "0.5",
    )  # fmt: skip
    t, mc = s["totals"], s["memcached"]
    assert s["protocol"] == "memcached" and t["sent"] == t["received"] == mc["gets"] + mc["sets"]
    assert 300 <= mc["gets"] <= 700 and mc["errors"] == 0, mc  # half of about 1,000
    stats = memcached_stats(memcached)
    assert (int(stats["cmd_get"]), int(stats["cmd_set"]), int(stats["get_misses"])) == (
        mc["gets"],
        mc["sets"],
        mc["misses"],
    )
    assert 0 < mc["misses"] < mc["gets"]  # a key is missing until its first SET
    assert s["latency_ns"]["count"] == t["in_window"] == t["sent"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--connections", "0"], "give 1 to 100000"),
        (["--service", "gauss:10"], "const:NS, exp:MEAN_NS or bimodal:NS1:NS2:P1"),
        (["--spread", "zipf:0"], "use uniform, or zipf:S"),
        (["--connect", "nowhere"], "e.g. --connect 10.0.0.2:7000"),
        (["--seed", "7x"], "give a whole number"),
        (["--protocol", "memcached"], "memcached does its own work"),
        (["--protocol", "redis"], "use rpc or memcached"),
    ],
)
def test_a_bad_command_line_exits_2_with_a_fix(built, tmp_path, args, words):
    base = ["--connect", "127.0.0.1:9", "--connections", "1", "--rate", "10", "--service", "const:1000",
            "--duration", "1", "--out", str(tmp_path / "x")]  # fmt: skip
    r = subprocess.run([str(built / "rpc-client"), *base, *args], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_the_generator_benchmark_measures_both_generators_side_by_side(built, tmp_path):
    """`make -C hosts/rpc bench-client` at two low rates: memaslap runs closed loop against
    the same memcached, rpc-client keeps each rate, and each run's requests per
    CPU-second is its answers over its own CPU time (the figure, not a timing: nothing
    here asserts how fast)."""
    if not (shutil.which("memcaslap") or shutil.which("memaslap")) or not shutil.which("memcached"):
        pytest.skip("no memaslap or memcached: `make setup` installs Debian's")
    out = tmp_path / "bench.json"
    env = {"BENCH_SECONDS": "1", "BENCH_RATES": "1000,2000", "BENCH_CONNECTIONS": "4", "BENCH_OUT": str(out)}
    r = subprocess.run(
        ["python3", str(REPO / "hosts/rpc/bench/bench_client.py"), str(built / "rpc-client")],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    slap, *ours = result["runs"]
    assert slap["generator"] == "memaslap" and slap["answered"] > 0
    assert [x["target_rps"] for x in ours] == [1000, 2000] and all(x["kept"] for x in ours), ours
    for x in result["runs"]:
        assert x["requests_per_cpu_s"] == pytest.approx(x["answered"] / x["cpu_s"])
    assert result["rpc_client_best"] == ours[-1]
    assert result["ratio"] == pytest.approx(ours[-1]["requests_per_cpu_s"] / slap["requests_per_cpu_s"])
    assert "requests per CPU-second" in r.stdout


def _time_wait_to(port: int) -> int:
    r = subprocess.run(
        ["ss", "-Htan", "state", "time-wait", f"( dport = :{port} or sport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return len([line for line in r.stdout.splitlines() if line.strip()])


def test_its_connections_end_without_leaving_time_wait_behind(built, server, tmp_path):
    """A point measured in 10 s segments of 5,000 connections each opened 25,000
    connections a minute, each left in TIME_WAIT for 60 s by its FIN, and connect() ran
    out of ephemeral ports (EADDRNOTAVAIL). rpc-client ends each one with a reset."""
    port = server("--mode", "cp", "--threads", "2")
    s = client(
        built, port, tmp_path / "tw", "--connections", "300", "--threads", "2", "--rate", "2000",
        "--service", "const:1000", "--warmup", "0", "--duration", "0.3",
    )  # fmt: skip
    assert s["totals"]["received"] == s["totals"]["sent"] > 0
    assert _time_wait_to(port) == 0


def test_its_trace_is_rain_clients_and_validity_tests_its_gaps(built, server, tmp_path):
    """--trace writes every request in rain-client's columns, and the summary gives the
    schedule: the inter-arrival test and the model's replay read them as rain-client's."""
    import pandas as pd

    from orchestrator.experiment.arrivals import rescaled_gaps

    port = server("--mode", "pool", "--threads", "2", "--io-threads", "1")
    out = tmp_path / "trace"
    s = client(
        built, port, out, "--connections", "8", "--threads", "2", "--rate", "4000", "--service", "exp:20000",
        "--warmup", "0.2", "--duration", "1", "--seed", "3", "--trace",
    )  # fmt: skip
    t = pd.read_csv(out / "trace.csv")
    assert list(t.columns) == [
        "lcore", "client_id", "request_id", "class", "intended_ns", "sent_ns", "service_ns", "latency_ns", "large",
    ]  # fmt: skip
    assert len(t) == s["totals"]["sent"] and s["run"]["trace_dropped"] == 0
    assert (t["latency_ns"] > 0).all() and (t["sent_ns"] >= t["intended_ns"]).all()
    # one schedule at the whole rate, whichever thread sent each request (both did)
    assert set(t["lcore"]) == {0} and s["lcores"] == 1 and (t["class"] == "rpc").all()
    assert sum(s["run"]["sent_by_thread"]) == len(t) and min(s["run"]["sent_by_thread"]) > 0, s["run"]
    assert list(t["request_id"]) == list(range(len(t)))
    assert abs(t["service_ns"].mean() / 20000 - 1) < 0.1  # exp:20000, about 4,800 draws
    window = t[t["intended_ns"] >= 0.2e9]
    assert abs(len(window) / 4000 - 1) < 0.06  # the window's requests at the rate asked
    gaps = rescaled_gaps(out / "trace.csv", s, "intended_ns")  # Exp(1) for a Poisson schedule
    assert len(gaps) > 3000 and abs(gaps.mean() - 1) < 0.06


def stop_thread(tid: int, seconds: float) -> None:
    """Hold one thread of another process still for `seconds`, the others running, as a
    hypervisor holds one vCPU: the thread is not runnable, and its kernel cannot move it
    elsewhere (ptrace: seized, interrupted, then let go)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    seize, interrupt, detach, wall = 0x4206, 0x4207, 17, 0x40000000
    if libc.ptrace(seize, tid, None, None) != 0:
        raise OSError(ctypes.get_errno(), f"ptrace(PTRACE_SEIZE, {tid})")
    try:
        assert libc.ptrace(interrupt, tid, None, None) == 0
        os.waitpid(tid, wall)  # it has stopped
        time.sleep(seconds)
    finally:
        libc.ptrace(detach, tid, None, None)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_stalled_thread_holds_back_no_other_send(built, server, tmp_path, threads):
    """One load thread is held still for 200 ms in the middle of the load, as a
    hypervisor holds a vCPU (the kernel cannot move the thread). With one thread (the
    control) no request leaves meanwhile: the sends leave up to 200 ms late. With two,
    the other thread sends what falls due, on time."""
    port = server("--mode", "pool", "--threads", "2", "--io-threads", "1")
    out = tmp_path / f"stall{threads}"
    cmd = [
        str(built / "rpc-client"), "--connect", f"127.0.0.1:{port}", "--out", str(out),
        "--connections", "8", "--threads", str(threads), "--rate", "2000", "--arrival", "constant",
        "--service", "const:100000", "--warmup", "0", "--duration", "1",
    ]  # fmt: skip
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("rpc-client ready"), p.stderr.read()
        time.sleep(0.3)  # the load runs from 10 ms after "ready", for 1 s
        tids = sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid)
        assert len(tids) == threads
        stop_thread(tids[0], 0.2)  # the first load thread
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        p.kill()
        p.wait()
    s = json.loads((out / "summary.json").read_text())
    lag_ms = s["totals"]["max_lag_ns"] / 1e6
    if threads == 1:
        assert lag_ms > 150, s["totals"]  # held for the 200 ms
    else:
        assert lag_ms < 50, s["totals"]  # not the 200 ms: at most the one it was sending, or a host stall
        assert min(s["run"]["sent_by_thread"]) > 0, s["run"]
