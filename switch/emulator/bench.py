"""Throughput of the emulator against the raw I/O it is built on, in one bounded run.

    python -m switch.emulator.bench [--seconds 1.5] [--repeat 2] [--json FILE]   # root, ~12 s

One veth pair between two network namespaces made here (`rmbench-sw`, `rmbench-gen`):
a generator process in rmbench-gen sends 60-byte-payload frames as fast as it can
while staying at most 1024 frames ahead of what the switch has taken (a PACKET_TX_RING
sender, qdisc bypassed; --open-loop: no limit), and a switch process in rmbench-sw runs
the emulator's own port loop (ports.py) with, in turn:

  gen-only  nothing reading the switch end (the generator's own maximum)
  echo      no pipeline: every frame is sent back out of the port it came in on
  forward   the Rain pipeline, frames routed back by the `forward` table
  rain      the Rain pipeline on alternating task and token frames (one slice, a
            token's worker on the same port): task+token pairs dispatched per second
  ipv4_forward  the server-side systems' forwarder (ipv4_forward.p4) on TCP segments
            of a 32-byte RPC header: what each frame of Rakaia's TCP RPCs costs

Rates are measured by the switch over the middle of each run (frames it sent, or
dispatch events for `rain`), so the generator's excess, dropped by the kernel when
the switch's RX ring is full, does not count. The modes run interleaved, `--repeat`
rounds, and the best run of each is reported (all runs are listed). Each rate is also given per second of
the switch process's CPU time: on a shared machine, the wall-clock rate says how
much CPU the switch got as much as how fast it is. Targets: forward >= 0.5 x echo
and >= 80 kpps.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing as mp
import os
import socket
import struct
import subprocess
import sys
import time

SW_NS, GEN_NS = "rmbench-sw", "rmbench-gen"
SW_IF, GEN_IF = "swp0", "gen0"
DEV_PORT = 1
GEN_MAC, SW_MAC = bytes.fromhex("02524dbe0001"), bytes.fromhex("02524dbe00fe")
NEXT_HOP_MAC = bytes.fromhex("02524dbe0099")
GEN_IP, DST_IP = "10.85.0.1", "10.85.0.2"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _sh(*argv: str, check: bool = True) -> None:
    subprocess.run(argv, check=check, capture_output=True)


def _enter(ns: str) -> None:
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({ns})")
    finally:
        os.close(fd)


PIN = False  # --pin: generator on the first CPU, switch on the second
PROFILE = False  # --profile: cProfile the switch process (rates then mean nothing)
WINDOW = 1024  # frames the generator keeps ahead of the switch (0: --open-loop, as fast as it can)


def _pin(cpu: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if PIN and len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[cpu % len(cpus)]})


def _csum(b: bytes) -> int:
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _frame(payload: bytes, dport: int, proto: int = 17) -> bytes:
    if proto == 6:  # a TCP segment (PSH|ACK, no options); the switch reads no further than IPv4
        udp = struct.pack("!HHIIBBHHH", 40000, dport, 1, 1, 5 << 4, 0x18, 65535, 0, 0) + payload
    else:
        udp = struct.pack("!HHHH", 40000, dport, 8 + len(payload), 0) + payload
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp),
        0,
        0x4000,
        64,
        proto,
        0,
        socket.inet_aton(GEN_IP),
        socket.inet_aton(DST_IP),
    )
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    return SW_MAC + GEN_MAC + b"\x08\x00" + ip + udp


def _frames(mode: str) -> list[bytes]:
    from hosts.proto import Header, Kind

    if mode == "rain":
        task = Header(kind=Kind.TASK, client_id=0x0100, request_id=1, data=b"\0\0\0\0\0\0\x27\x10").pack()
        token = Header(kind=Kind.TOKEN, worker_id=1).pack()
        return [_frame(task + bytes(28), 21057), _frame(token + bytes(28), 21057)]
    if mode == "ipv4_forward":
        return [_frame(b"RPC1" + bytes(28), 7000, proto=6)]
    return [_frame(bytes(60), 9)]


# ---------------------------------------------------------------- the generator


def _generate(frames: list[bytes], seconds: float, conn, progress=None, window: int = 0) -> None:
    """Send `frames` round robin as fast as possible; with `window`, keep at most that
    many frames ahead of what the switch has taken (`progress`, shared memory): the
    switch never starves and never overflows, and no CPU goes to frames it would drop."""
    _pin(0)
    _enter(GEN_NS)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: sends only
    s.bind((GEN_IF, 0))
    s.setsockopt(263, 20, 1)  # PACKET_QDISC_BYPASS
    s.setsockopt(263, 10, 1)  # TPACKET_V2
    fs, n = 2048, 1024
    s.setsockopt(263, 13, struct.pack("IIII", 1 << 16, n * fs >> 16, fs, n))  # PACKET_TX_RING
    mm = mmap.mmap(s.fileno(), n * fs)
    for i in range(n):
        f = frames[i % len(frames)]
        mm[i * fs + 32 : i * fs + 32 + len(f)] = f
        struct.pack_into("=II", mm, i * fs, 0, len(f))
    status, pack = struct.Struct("=I").unpack_from, struct.Struct("=I").pack_into
    conn.send("ready")
    conn.recv()
    sent, i = 0, 0
    t0 = time.monotonic()
    end = t0 + seconds
    limit = 256
    lost = 0  # frames that never reached the switch's socket (forgiven after a stall)
    stalled_since, seen = 0.0, -1
    while time.monotonic() < end:
        if window:
            done = progress.value
            limit = min(256, window - (sent - lost - done))
            if limit <= 0:
                now = time.monotonic()
                if done != seen:
                    seen, stalled_since = done, now
                elif now - stalled_since > 0.005:  # no progress for 5 ms: what is missing was lost
                    lost = sent - done
                time.sleep(0.0001)
                continue
        k = 0
        while k < limit:
            off = i * fs
            if status(mm, off)[0] != 0:
                break
            pack(mm, off, 1)
            i = (i + 1) % n
            k += 1
        try:
            s.send(b"", socket.MSG_DONTWAIT)
        except OSError:
            pass
        sent += k
    conn.send((sent, time.monotonic() - t0))


# ---------------------------------------------------------------- the switch


def _switch(mode: str, seconds: float, conn, progress) -> None:
    _pin(1)
    _enter(SW_NS)
    from switch.emulator import ipv4_forward
    from switch.emulator.pipeline import Pipeline
    from switch.emulator.ports import PortSet, PortSpec
    from switch.emulator.rain import make_store

    store = ipv4_forward.make_store() if mode == "ipv4_forward" else make_store()
    store.ports.add(DEV_PORT, "BF_SPEED_100G", "BF_FEC_TYP_NONE", enable=True)
    ports = PortSet(store, [PortSpec(DEV_PORT, SW_IF)])
    # Frames the switch sends back are addressed to a next hop that is not the generator's
    # interface (as an echo's are: they keep dst = the switch's MAC), so the generator's
    # kernel drops them all the same, early, whatever the mode.
    gen_mac = int.from_bytes(NEXT_HOP_MAC, "big")
    if mode == "echo":

        def process(port, frame, n, emit):
            emit(port, frame)
            return 1
    elif mode == "ipv4_forward":
        process = ipv4_forward.pipeline(store).process
        store.table("forward").add(
            int.from_bytes(socket.inet_aton(DST_IP), "big"), "set_egress", {"port": DEV_PORT, "dmac": gen_mac}
        )
    else:
        process = Pipeline(store).process
        store.table("forward").add(
            int.from_bytes(socket.inet_aton(DST_IP), "big"), "set_egress", {"port": DEV_PORT, "dmac": gen_mac}
        )
        store.table("config_slice").add(
            0,
            "set_slice_config",
            {
                "first": 0,
                "last": 65535,
                "neg_cap": (-65536) & 0xFFFFFFFF,
                "neg_large_cap": 0,
                "last_slot": 0,
                "mgid": 0,
            },
        )
        store.table("select_worker").add(
            1, "to_worker", {"port": DEV_PORT, "dmac": gen_mac, "dip": int.from_bytes(socket.inet_aton(GEN_IP), "big")}
        )
    events = store.counter("events").packets
    cells = store.ports.stat_cells(DEV_PORT)
    import gc

    gc.freeze()  # as __main__ does
    samples = []

    def sample() -> None:
        out = cells[4] if mode != "rain" else events[2] + events[3]
        t = os.times()
        samples.append((time.monotonic(), cells[0], out, t.user + t.system, t.system))

    next_sample = [0.0]

    def tick() -> None:  # every millisecond: tell the generator how far we are
        progress.value = cells[1]
        now = time.monotonic()
        if now >= next_sample[0]:
            next_sample[0] = now + 0.05
            sample()

    conn.send("ready")
    conn.recv()
    t_end = time.monotonic() + seconds
    sample()
    if PROFILE:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(ports.run, process, lambda: time.monotonic() >= t_end, housekeeping=0.001, on_housekeeping=tick)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    else:
        ports.run(process, lambda: time.monotonic() >= t_end, housekeeping=0.001, on_housekeeping=tick)
    sample()
    ports.close()
    conn.send({"samples": samples, "drops": ports.drops.counts})


def _middle(samples: list, seconds: float) -> tuple:
    """The first and last sample of the middle of the run (skip the first 25% and the last 15%)."""
    t0 = samples[0][0]
    mid = [s for s in samples if t0 + 0.25 * seconds <= s[0] <= t0 + 0.85 * seconds]
    if len(mid) < 2:
        mid = [samples[0], samples[-1]]
    return mid[0], mid[-1]


def _rate(samples: list, seconds: float, field: int, clock: int = 0) -> float:
    """Rate of sample field `field` per second of wall time (clock 0) or of the switch
    process's CPU time (clock 3) over the middle of the run."""
    a, b = _middle(samples, seconds)
    return (b[field] - a[field]) / max(b[clock] - a[clock], 1e-9)


def run_one(mode: str, seconds: float) -> dict:
    ctx = mp.get_context("fork")
    g_parent, g_child = ctx.Pipe()
    progress = ctx.RawValue("q", 0)
    window = WINDOW if mode != "gen-only" else 0
    gen = ctx.Process(target=_generate, args=(_frames(mode), seconds + 0.3, g_child, progress, window), daemon=True)
    procs = [gen]
    s_parent = None
    if mode != "gen-only":
        s_parent, s_child = ctx.Pipe()
        sw = ctx.Process(target=_switch, args=(mode, seconds, s_child, progress), daemon=True)
        procs.append(sw)
        sw.start()
        if not s_parent.poll(20):
            raise RuntimeError("the switch process did not start")
        s_parent.recv()
    gen.start()
    if not g_parent.poll(10):
        raise RuntimeError("the generator did not start")
    g_parent.recv()
    if s_parent:
        s_parent.send("go")
    g_parent.send("go")
    sent, gen_time = g_parent.recv()
    out = {"mode": mode, "generator_pps": sent / gen_time}
    if s_parent:
        res = s_parent.recv()
        out["rx_pps"] = _rate(res["samples"], seconds, 1)
        out["pps"] = _rate(res["samples"], seconds, 2)
        out["pps_per_cpu_s"] = _rate(res["samples"], seconds, 2, clock=3)
        a, b = _middle(res["samples"], seconds)
        out["cpu_share"] = (b[3] - a[3]) / max(b[0] - a[0], 1e-9)
        out["sys_share"] = (b[4] - a[4]) / max(b[3] - a[3], 1e-9)
        out["drops"] = {k: v for k, v in res["drops"].items() if v}
    for p in procs:
        p.join(5)
    return out


def setup() -> None:
    teardown()
    for ns in (SW_NS, GEN_NS):
        _sh("ip", "netns", "add", ns)
        _sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    _sh("ip", "link", "add", "rmbenchs", "type", "veth", "peer", "name", "rmbenchg")
    for tmp, ns, name, mac in (("rmbenchs", SW_NS, SW_IF, SW_MAC), ("rmbenchg", GEN_NS, GEN_IF, GEN_MAC)):
        _sh("ip", "link", "set", tmp, "netns", ns)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", tmp, "name", name)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", name, "address", mac.hex(":"))
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", name, "up")


def teardown() -> None:
    for ns in (SW_NS, GEN_NS):
        _sh("ip", "netns", "del", ns, check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m switch.emulator.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="seconds per run (default 1.5)")
    ap.add_argument(
        "--repeat", type=int, default=2, help="rounds of runs; the best of each mode is reported (default 2)"
    )
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--pin", action="store_true", help="pin the generator and the switch to different CPUs")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of each switch run (slows it)")
    ap.add_argument("--modes", default="gen-only,echo,forward,rain,ipv4_forward", help="which runs (comma-separated)")
    ap.add_argument(
        "--open-loop",
        action="store_true",
        help="the generator sends as fast as it can (default: at most 1024 frames ahead of the switch)",
    )
    args = ap.parse_args(argv)
    global PIN, PROFILE, WINDOW
    PIN, PROFILE = args.pin, args.profile
    if args.open_loop:
        WINDOW = 0
    if os.geteuid() != 0:
        print("error: needs root (network namespaces, packet sockets)", file=sys.stderr)
        return 2
    modes = [m for m in ("gen-only", "echo", "forward", "rain", "ipv4_forward") if m in args.modes.split(",")]
    results: dict[str, dict] = {}
    setup()
    try:  # the modes interleaved, `repeat` rounds, the best of each kept (a shared machine)
        for round_ in range(args.repeat):
            for mode in modes:
                if mode == "gen-only" and round_:
                    continue
                r = run_one(mode, args.seconds if mode != "gen-only" else min(args.seconds, 1.0))
                r["runs"] = results.get(mode, {}).get("runs", []) + [round(r.get("pps", r["generator_pps"]))]
                if mode not in results or r.get("pps", 0) > results[mode].get("pps", 0):
                    results[mode] = r
                else:
                    results[mode]["runs"] = r["runs"]
    finally:
        teardown()
    if "gen-only" in results:
        print(f"generator alone      {results['gen-only']['generator_pps'] / 1e3:8.1f} kpps")
    for mode in ("echo", "forward", "rain", "ipv4_forward"):
        if mode not in results:
            continue
        r = results[mode]
        unit = "kpairs/s" if mode == "rain" else "kpps   "
        print(
            f"{mode:12s} switch out {r['pps'] / 1e3:8.1f} {unit} (switch rx {r['rx_pps'] / 1e3:.1f} kpps, "
            f"generator {r['generator_pps'] / 1e3:.1f} kpps; switch had {100 * r['cpu_share']:.0f}% of a CPU: "
            f"{r['pps_per_cpu_s'] / 1e3:.1f} k per CPU-second, {100 * r['sys_share']:.0f}% of it in the kernel; "
            f"runs {[round(x / 1e3, 1) for x in r['runs']]} k)"
        )
    ratio, ok = None, None
    if "echo" in results and "forward" in results:
        echo, fwd = results["echo"]["pps"], results["forward"]["pps"]
        ratio = fwd / echo if echo else 0.0
        ok = ratio >= 0.5 and fwd >= 80e3
        cpu_ratio = results["forward"]["pps_per_cpu_s"] / max(results["echo"]["pps_per_cpu_s"], 1)
        print(
            f"forward / echo = {ratio:.2f} (target >= 0.5); forward {fwd / 1e3:.1f} kpps (target >= 80): "
            f"{'OK' if ok else 'BELOW TARGET'}; per CPU-second: forward / echo = {cpu_ratio:.2f}, "
            f"forward {results['forward']['pps_per_cpu_s'] / 1e3:.1f} k"
        )
    if "rain" in results:
        rain = results["rain"]["pps"]
        print(f"rain: {rain / 1e3:.1f} k task+token pairs/s ({2 * rain / 1e3:.1f} kpps in, {rain / 1e3:.1f} kpps out)")
    if "ipv4_forward" in results:
        per = 1e6 / max(results["ipv4_forward"]["pps_per_cpu_s"], 1)
        print(f"ipv4_forward: {per:.1f} us of switch CPU per TCP frame")
    summary = {
        "results": results,
        "ratio": ratio,
        "targets_met": ok,
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg": os.getloadavg(),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
