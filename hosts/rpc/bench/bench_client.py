#!/usr/bin/env python3
"""rpc-client's request rate per core against memaslap, side by side, against one memcached.

Both generators speak memcached's binary protocol to Debian's memcached on loopback
(started here on a free port, two threads), over the same number of connections from
one thread, 90% GETs of 10,000 keys and 32-byte values. For each run the table gives
the achieved rate and the generator's CPU time (getrusage of the child, start-up
included), and from them requests per CPU-second: what one core of the client host
buys, the figure that decides how many client cores a point needs.

memaslap (libmemcached's load generator, memcaslap in Debian's libmemcached-tools) is
closed-loop: it runs once, as fast as its connections' windows allow (its --tps
throttle does not hold in Debian's 1.1.4: asked for 5k it did 137k). rpc-client is
open-loop: it runs at rising rates until one is not kept (achieved more than 1% below
the offered rate, or the run not finished), and says how late its sends left, which
memaslap cannot.

Usage: bench_client.py [path/to/rpc-client]. Needs memcached and memcaslap (Debian:
memcached, libmemcached-tools). BENCH_SECONDS (seconds per run, default 3),
BENCH_RATES (rpc-client's rates, requests/s, default 10000,20000,40000,80000,120000,160000,200000,240000),
BENCH_CONNECTIONS (default 16), BENCH_OUT (JSON, default build/bench-client.json).
Bounded: each run at most BENCH_SECONDS + 30 s; about a minute in all.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MEMASLAP = ("memaslap", "memcaslap")  # upstream's name, Debian's
GET_FRACTION, KEYS, VALUE_BYTES = 0.9, 10000, 32


def die(msg: str) -> None:
    print(f"bench-client: {msg}", file=sys.stderr)
    sys.exit(1)


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def start_memcached() -> tuple[subprocess.Popen, int]:
    exe = shutil.which("memcached") or die("no memcached (Debian package memcached)")
    for _ in range(5):  # the port probed free may be taken before memcached binds it
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [exe, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "2", "-m", "64", "-c", "4096", "-u", "root"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while p.poll() is None and time.monotonic() < deadline:  # ready: it accepts
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return p, port
            except OSError:
                time.sleep(0.02)
        p.kill()
        p.wait()
    die("memcached did not start on a free loopback port in 5 tries")
    raise AssertionError


def run_rpc_client(binary: Path, port: int, rate: int, conns: int, seconds: float, out: Path) -> dict:
    cmd = [
        str(binary), "--connect", f"127.0.0.1:{port}", "--protocol", "memcached", "--connections", str(conns),
        "--threads", "1", "--rate", str(rate), "--get-fraction", str(GET_FRACTION), "--keys", str(KEYS),
        "--payload", str(VALUE_BYTES), "--warmup", "0.5", "--duration", str(seconds), "--out", str(out),
    ]  # fmt: skip
    cpu0, t0 = child_cpu(), time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    wall, cpu = time.monotonic() - t0, child_cpu() - cpu0
    if r.returncode != 0:
        die(f"rpc-client failed ({r.returncode}):\n{r.stderr[-2000:]}")
    s = json.loads((out / "summary.json").read_text())
    t = s["totals"]
    answered = t["received"]
    return {
        "generator": "rpc-client",
        "target_rps": rate,
        "achieved_rps": s["achieved_rps"],
        "answered": answered,
        "late_fraction": t["late_sends"] / max(t["sent"], 1),
        "max_lag_us": t["max_lag_ns"] / 1000,
        "cpu_s": cpu,
        "wall_s": wall,
        "requests_per_cpu_s": answered / cpu if cpu > 0 else float("nan"),
    }


def run_memaslap(exe: str, port: int, conns: int, seconds: float, cfg: Path) -> dict:
    cmd = [
        exe, "-s", f"127.0.0.1:{port}", "-T", "1", "-c", str(conns), "-B", "-F", str(cfg),
        "-t", f"{max(1, round(seconds + 0.5))}s",
    ]  # fmt: skip
    cpu0, t0 = child_cpu(), time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    wall, cpu = time.monotonic() - t0, child_cpu() - cpu0
    ops = re.findall(r"Run time:\s*([\d.]+)s\s+Ops:\s*(\d+)\s+TPS:\s*(\d+)", r.stdout)
    if r.returncode != 0 or not ops:
        die(f"{exe} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
    run_s, n, tps = float(ops[-1][0]), int(ops[-1][1]), int(ops[-1][2])
    return {
        "generator": "memaslap",
        "target_rps": None,  # closed loop
        "achieved_rps": tps,
        "answered": n,
        "run_s": run_s,
        "cpu_s": cpu,
        "wall_s": wall,
        "requests_per_cpu_s": n / cpu if cpu > 0 else float("nan"),
    }


def memaslap_config(path: Path) -> Path:
    """Keys of 16 bytes, values of VALUE_BYTES, GET_FRACTION of GETs (memaslap's -F format)."""
    path.write_text(
        "key\n16 16 1\n"
        f"value\n{VALUE_BYTES} {VALUE_BYTES} 1\n"
        f"cmd\n0 {1 - GET_FRACTION:g}\n1 {GET_FRACTION:g}\n"  # 0: set, 1: get
    )
    return path


def main() -> None:
    binary = Path(sys.argv[1] if len(sys.argv) > 1 else HERE / "build/rpc-client").resolve()
    seconds = float(os.environ.get("BENCH_SECONDS", "3"))
    rates = [
        int(x) for x in os.environ.get("BENCH_RATES", "10000,20000,40000,80000,120000,160000,200000,240000").split(",")
    ]
    conns = int(os.environ.get("BENCH_CONNECTIONS", "16"))
    out_path = Path(os.environ.get("BENCH_OUT", HERE / "build/bench-client.json"))
    if not binary.exists():
        die(f"{binary} not built (make -C hosts/rpc)")
    slap = next((x for x in MEMASLAP if shutil.which(x)), None)
    if slap is None:
        die("no memaslap (Debian package libmemcached-tools: memcaslap)")
    print(
        f"bench-client: memcached's binary protocol, {conns} connections from one thread, {GET_FRACTION:.0%} GETs "
        f"of {KEYS:,} keys, {VALUE_BYTES}-byte values, {seconds:g} s a run; rpc-client (open loop) and {slap} "
        "(closed loop) against one memcached on loopback"
    )
    print(f"{'target':>8}  {'generator':<10} {'achieved':>9} {'CPU s':>6} {'req per CPU-s':>13}  notes")
    runs = []
    mc, port = start_memcached()

    def show(r: dict) -> None:
        kept = r.get("kept")
        note = (
            f"{'kept' if kept else 'NOT kept'}; late {100 * r['late_fraction']:.1f}%, max lag {r['max_lag_us']:,.0f} us"
            if r["generator"] == "rpc-client"
            else "closed loop, as fast as it goes"
        )
        target = f"{r['target_rps']:,}" if r["target_rps"] else "-"
        print(
            f"{target:>8}  {r['generator']:<10} {r['achieved_rps']:>9,.0f} {r['cpu_s']:>6.2f} "
            f"{r['requests_per_cpu_s']:>13,.0f}  {note}"
        )

    try:
        with tempfile.TemporaryDirectory() as td:
            r = run_memaslap(slap, port, conns, seconds, memaslap_config(Path(td) / "memaslap.cfg"))
            runs.append(r)
            show(r)
            for i, rate in enumerate(rates):
                r = run_rpc_client(binary, port, rate, conns, seconds, Path(td) / f"c{i}")
                r["kept"] = r["achieved_rps"] >= 0.99 * rate
                runs.append(r)
                show(r)
                if not r["kept"]:
                    break
    finally:
        mc.kill()
        mc.wait(timeout=10)
    kept = [r for r in runs if r.get("kept")]
    top = max(kept, key=lambda r: r["achieved_rps"]) if kept else None
    slap_run = runs[0]
    ratio = top["requests_per_cpu_s"] / slap_run["requests_per_cpu_s"] if top else 0.0
    print(
        f"\nrpc-client kept {top['target_rps'] if top else 0:,} requests/s open loop, at "
        f"{top['requests_per_cpu_s'] if top else 0:,.0f} requests per CPU-second; memaslap, closed loop, "
        f"{slap_run['achieved_rps']:,.0f} requests/s at {slap_run['requests_per_cpu_s']:,.0f} per CPU-second "
        f"(rpc-client {ratio:.2f} x memaslap's per core)"
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(
        json.dumps({"runs": runs, "rpc_client_best": top, "memaslap": slap_run, "ratio": ratio}, indent=1) + "\n"
    )
    print(f"written: {out_path}")


if __name__ == "__main__":
    main()
