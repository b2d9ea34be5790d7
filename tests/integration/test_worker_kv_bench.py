"""rain-worker --kv-bench: the RocksDB handler alone, on a database in the test's folder.

No network: the worker opens (or builds) the database as the handler does, times each
OP:COUNT's requests and prints one JSON line. A second run over the same folder opens
the database as it is; a bad --kv-bench is refused with a message that names it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    # the Makefile's test: without the header rain-worker is built without the handler
    pytest.mark.skipif(not Path("/usr/include/rocksdb/c.h").exists(), reason="librocksdb-dev is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
DPDK = REPO / "hosts/dpdk"
BIN = DPDK / "build/rain-worker"
KEYS, KEY_BYTES, ITEM = 20000, 64, 256
RESULT_KEYS = {"op", "count", "requests", "mean_ns", "p50_ns", "p99_ns", "min_ns", "max_ns", "cpu_mean_ns"}


@pytest.fixture(scope="module")
def built():
    r = subprocess.run(["make", "-C", str(DPDK), "build/rain-worker"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return BIN


def bench(db: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """rain-worker with its own EAL prefix and no port, on database folder db."""
    prefix = f"rmkb-{name}-{os.getpid()}"
    cmd = [
        str(BIN),
        "-l",
        "0",
        "--no-huge",
        "--no-pci",
        "--no-telemetry",
        f"--file-prefix={prefix}",
        "--log-level=lib.eal:error",
        "--",
        "--kv-path",
        str(db),
        "--kv-keys",
        str(KEYS),
        "--kv-key-bytes",
        str(KEY_BYTES),
        "--kv-item-bytes",
        str(ITEM),
        *args,
    ]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)  # an rte_exit leaves it


POINTS = ["--handler", "rocksdb", "--kv-bench", "get:10", "--kv-bench", "scan:10,200", "--kv-bench-requests", "200"]


def test_bench_times_each_point_and_opens_the_database_it_built(built, tmp_path):
    first = bench(tmp_path / "db", "first", *POINTS)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 1, first.stdout  # one JSON object, progress on stderr
    out = json.loads(lines[0])
    assert {k: out[k] for k in ("bench", "keys", "key_bytes", "item_bytes", "seed", "built", "dilation")} == {
        "bench": "rain-kv",
        "keys": KEYS,
        "key_bytes": KEY_BYTES,
        "item_bytes": ITEM,
        "seed": 1,
        "built": True,
        "dilation": 1,
    }
    assert out["build_s"] > 0 and "building" in first.stderr
    res = out["results"]
    assert [(r["op"], r["count"]) for r in res] == [("get", 10), ("scan", 10), ("scan", 200)]
    for r in res:
        assert set(r) == RESULT_KEYS and r["requests"] == 200
        assert 0 < r["min_ns"] <= r["p50_ns"] <= r["p99_ns"] <= r["max_ns"]
        assert r["min_ns"] <= r["mean_ns"] <= r["max_ns"]
        assert 0 < r["cpu_mean_ns"] <= 1.5 * r["mean_ns"]  # alone on a core: CPU time is about the wall time
    assert res[2]["mean_ns"] > res[1]["mean_ns"]  # 200 items take longer than 10
    assert (tmp_path / "db" / "MANIFEST-rain").exists()

    # held as a dilated testbed holds a request (k x its run time, asleep): reopened, not rebuilt
    t0 = time.monotonic()
    again = bench(
        tmp_path / "db",
        "again",
        "--handler",
        "rocksdb",
        "--kv-bench",
        "get:10",
        "--kv-bench-requests",
        "20",
        "--kv-dilation",
        "50",
    )
    took = time.monotonic() - t0
    assert again.returncode == 0, again.stderr
    out2 = json.loads(again.stdout)
    assert out2["built"] is False and out2["build_s"] == 0 and "building" not in again.stderr
    assert out2["dilation"] == 50
    (r,) = out2["results"]
    assert r["mean_ns"] == r["cpu_mean_ns"]  # timed by the thread's CPU time when dilated
    assert took >= 22 * 49 * r["mean_ns"] / 1e9  # 22 requests (2 warm-up), each held 50 x its run time


@pytest.mark.parametrize(
    "args, says",
    [
        (["--handler", "rocksdb", "--kv-bench", "scan:0"], "--kv-bench scan:0: counts are integers in [1, 10000]"),
        (["--handler", "rocksdb", "--kv-bench", "scan:10,10001"], "--kv-bench scan:10,10001: counts are integers"),
        (["--handler", "rocksdb", "--kv-keys", "500", "--kv-bench", "scan:501"], "do not fit --kv-keys 500; fix:"),
        (["--handler", "rocksdb", "--kv-bench", "put:10"], "--kv-bench put:10: unknown op 'put'"),
        (["--kv-bench", "scan:10"], "--kv-bench measures the RocksDB handler; fix: add --handler rocksdb"),
        (["--handler", "rocksdb", "--kv-bench-requests", "100"], "--kv-bench-requests goes with --kv-bench"),
    ],
    ids=["count-0", "count-above-max", "count-beyond-keys", "op-put", "no-handler", "requests-alone"],
)
def test_a_bad_bench_option_is_refused_before_the_database(built, tmp_path, args, says):
    r = bench(tmp_path / "db", "bad", *args)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert r.stdout == "" and not (tmp_path / "db").exists()
