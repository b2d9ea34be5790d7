"""The RPC agents of Rakaia's measured layer: kernel TCP between the hosts, through the
switch running ipv4_forward.

    python3 -m hosts.agent rpc-server --config FILE
    python3 -m hosts.agent rpc-client --config FILE

Both give the host's data interface its IP and its routes through the switch first
(kernel_net.attach: the interface is Rain's DPDK port at other times, with no kernel
IP), and take them away again at the end (detach), whatever happened in between.

rpc-server prints `rain-agent ready` once rpc-server listens, serves until SIGTERM, and
leaves `server.json` (what its done line counted: served, connections, malformed, and
for ms-user the handoffs, queued and stolen) in the output folder. In mode `memcached`
the server is Debian's memcached itself, run as it is: ready once its port accepts a
connection, and `server.json` holds what its `stats` counted just before it was stopped
(served = GETs + SETs, connections = those it accepted, less the agent's own).

rpc-client prints `rain-agent ready` once its interface is up; with `wait_start` the
load starts at the agent's SIGUSR1 (rpc-client opens its connections then: the
warm-up covers them), else at once. With `cpu_wake_latency_us` the agent holds the
kernel's CPU latency request while the load runs (common.WakeLatency). rpc-client's
latency.hlog and summary.json land in the output folder, and `agent.json` says how it
ended and whether the request was held. SIGTERM ends the load early.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from pathlib import Path

from . import kernel_net
from .common import DONE, READY, AgentError, Child, Stop, WakeLatency, load_config, say, write_json

SERVER_MODES = ("cp", "cs", "pool", "ms-user", "kcm")
APPLICATIONS = ("memcached",)  # real servers that take rpc-server's place, run as they are
KEYS = ("binary", "out_dir", "net")
# rpc-client's options an agent config's `client` block may give (key: --key, _ as -)
CLIENT_OPTIONS = (
    "threads", "arrival", "spread", "seed", "late_ns", "interval", "payload", "protocol", "class", "realtime", "drain",
    "get_fraction", "keys",
)  # fmt: skip
CLIENT_FLAGS = ("trace",)  # ... and its switches: trace: every request into out/trace.csv
READY_TIMEOUT_S = 30.0
# memcached's `stats` counters server.json keeps (memcached's doc/protocol.txt)
MEMCACHED_STATS = (
    "cmd_get", "cmd_set", "get_hits", "get_misses", "curr_connections", "total_connections",
    "rejected_connections", "listen_disabled_num", "conn_yields", "threads", "bytes_read", "bytes_written",
)  # fmt: skip
DONE_LINE = re.compile(r"^rpc-server done (.*)$", re.M)


def _need(cfg: dict, block: str, *keys: str) -> dict:
    b = cfg.get(block)
    if not isinstance(b, dict):
        raise AgentError(f"the agent config has no `{block}` block (the orchestrator writes it)")
    missing = [k for k in keys if k not in b]
    if missing:
        raise AgentError(f"the agent config's `{block}` lacks {', '.join(missing)}")
    return b


def net_of(cfg: dict, sys_root: Path = Path("/sys")) -> dict:
    """The config's `net` block, its interface named: `iface`, or the one kernel
    interface of PCI device `pci` (a ConnectX keeps its netdev beside DPDK)."""
    n = _need(cfg, "net", "ip", "peers", "gateway_mac")
    if "iface" in n:
        return n
    if "pci" not in n:
        raise AgentError("the agent config's `net` names neither `iface` nor `pci`")
    found = sorted(p.name for p in (sys_root / "bus/pci/devices" / str(n["pci"]) / "net").glob("*"))
    if len(found) != 1:
        raise AgentError(
            f"PCI device {n['pci']} has {'no kernel interface' if not found else 'interfaces ' + ', '.join(found)}; "
            "fix: give hosts[].nic.netdev in the inventory"
        )
    return n | {"iface": found[0]}


def listen_of(s: dict) -> tuple[str, int]:
    host, sep, port = str(s["listen"]).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise AgentError(f"server.listen {s['listen']!r}: expected IP:PORT")
    return host, int(port)


def memcached_argv(cfg: dict, s: dict) -> list[str]:
    """Debian's memcached on the listen address: its worker threads, room for every
    connection the clients open (and a backlog for them all at once), no UDP."""
    ip, port = listen_of(s)
    conns = int(s.get("max_connections", 1024))
    return [
        cfg["binary"], "-l", ip, "-p", str(port), "-U", "0", "-t", str(int(s["threads"])),
        "-c", str(conns + 64), "-b", str(min(conns + 64, 65535)), "-u", "nobody",
    ]  # fmt: skip


def server_argv(cfg: dict) -> list[str]:
    s = _need(cfg, "server", "listen", "mode", "threads")
    if s["mode"] in APPLICATIONS:
        return memcached_argv(cfg, s)
    if s["mode"] not in SERVER_MODES:
        modes = SERVER_MODES + APPLICATIONS
        raise AgentError(f"server.mode {s['mode']!r}: expected one of {', '.join(modes)}")
    argv = [cfg["binary"], "--listen", s["listen"], "--mode", s["mode"], "--threads", str(int(s["threads"]))]
    if "io_threads" in s:
        argv += ["--io-threads", str(int(s["io_threads"]))]
    if "service" in s:
        argv += ["--service", s["service"]]
    return argv


def client_argv(cfg: dict, out: Path) -> list[str]:
    """rpc-client's command line; `service` is the synthetic RPC's only (memcached does
    its own work)."""
    c = _need(cfg, "client", "connect", "connections", "rate", "warmup_s", "measure_s")
    argv = [cfg["binary"], "--connect", c["connect"], "--connections", str(int(c["connections"]))]
    argv += ["--rate", str(c["rate"])] + (["--service", c["service"]] if "service" in c else [])
    argv += ["--warmup", str(c["warmup_s"]), "--duration", str(c["measure_s"]), "--out", str(out)]
    for opt in CLIENT_OPTIONS:
        if opt in c:
            argv += [f"--{opt.replace('_', '-')}", str(c[opt])]
    for flag in CLIENT_FLAGS:
        if c.get(flag):
            argv.append(f"--{flag}")
    return argv


def done_counts(log_text: str) -> dict[str, int]:
    """rpc-server's done line as numbers: `served=N connections=C malformed=M ...`."""
    m = DONE_LINE.search(log_text)
    if m is None:
        return {}
    out = {}
    for kv in m.group(1).split():
        k, _, v = kv.partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


def wait_accepting(addr: tuple[str, int], child: Child, timeout: float = READY_TIMEOUT_S) -> None:
    """Until a server that prints no ready line accepts a connection on `addr`."""
    deadline = time.monotonic() + timeout
    while True:
        if child.proc.poll() is not None:
            raise AgentError(f"{Path(child.argv[0]).name} exited with status {child.proc.returncode}:\n{child.tail()}")
        try:
            socket.create_connection(addr, timeout=1.0).close()
            return
        except OSError as e:
            if time.monotonic() > deadline:
                child.stop()
                name = Path(child.argv[0]).name
                raise AgentError(f"{name} did not accept on {addr[0]}:{addr[1]} in {timeout:.0f} s ({e})") from None
        time.sleep(0.05)


def parse_stats(text: str) -> dict[str, int]:
    """memcached's `stats` answer (`STAT name value` lines up to END), its counters as numbers."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT" and parts[1] in MEMCACHED_STATS and parts[2].isdigit():
            out[parts[1]] = int(parts[2])
    return out


def memcached_stats(addr: tuple[str, int], timeout: float = 5.0) -> dict[str, int]:
    """Ask memcached for its counters (its text protocol's `stats`)."""
    with socket.create_connection(addr, timeout=timeout) as c:
        c.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = c.recv(65536)
            if not chunk:
                raise OSError("memcached closed the connection before END")
            buf += chunk
            if len(buf) > 1 << 20:
                raise OSError("memcached's stats answer is over 1 MiB")
    return parse_stats(buf.decode(errors="replace"))


def memcached_counts(stats: dict[str, int], agent_connections: int) -> dict:
    """server.json's numbers from memcached's counters: what the clients' requests cost
    it. Its total_connections counts its listening socket too (one: one address, no
    UDP) and the agent's own (the readiness probe, the stats), which are taken off."""
    return {
        "served": stats.get("cmd_get", 0) + stats.get("cmd_set", 0),
        "connections": max(0, stats.get("total_connections", 0) - 1 - agent_connections),
        "stats": stats,
    }


class Attached:
    """The data interface's kernel IP and routes for as long as the agent runs."""

    def __init__(self, net: dict) -> None:
        self.net = net
        self.changed = True  # until attach says it left the interface as it was

    def __enter__(self) -> Attached:
        n = self.net
        try:
            self.changed = kernel_net.attach(n["iface"], n["ip"], n["peers"], n["gateway_mac"])
        except kernel_net.KernelNetError as e:
            self.__exit__()  # what attach did before it failed is taken away too
            raise AgentError(str(e)) from None
        if not self.changed:
            say(f"{n['ip']} is already on {n['iface']} (a plain LAN's own address): left as it is")
        return self

    def __exit__(self, *exc: object) -> None:
        n = self.net
        if not self.changed:  # the cluster's address, not ours to take away
            return
        try:
            kernel_net.detach(n["iface"], n["ip"], n["peers"])
        except kernel_net.KernelNetError as e:
            say(f"detach: {e}")


def run_server(config_path: str) -> int:
    cfg = load_config(config_path, KEYS)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    argv = server_argv(cfg)
    stop = Stop()
    app = cfg["server"]["mode"] in APPLICATIONS
    counts: dict = {}
    with Attached(net_of(cfg)):
        child = Child(argv, out / "server.log")
        if app:
            wait_accepting(listen_of(cfg["server"]), child, float(cfg.get("ready_timeout_s", READY_TIMEOUT_S)))
        else:
            child.ready("rpc-server ready", cfg)
        say(READY)
        while not stop.requested and child.proc.poll() is None:
            stop.wait(1.0, child)
        died = child.proc.poll() is not None and not stop.requested
        if app and not died:
            try:  # before it stops: its counters go with it
                counts = memcached_counts(memcached_stats(listen_of(cfg["server"])), agent_connections=2)
            except OSError as e:
                say(f"memcached's stats: {e}")
        status = child.stop()
    if not app:
        counts = done_counts(child.log_path.read_text(errors="replace"))
    write_json(out / "server.json", {"exit": status, "stopped_by": "signal" if not died else "exit", **counts})
    if died:
        raise AgentError(f"rpc-server exited with status {status} while serving:\n{child.tail()}")
    say(DONE)
    return 0


def run_client(config_path: str) -> int:
    cfg = load_config(config_path, KEYS)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    argv = client_argv(cfg, out)
    stop = Stop()
    go: list[bool] = []
    signal.signal(signal.SIGUSR1, lambda *_: go.append(True))
    wake, held = WakeLatency(), None
    with Attached(net_of(cfg)):
        say(READY)
        if cfg.get("wait_start"):
            while not go and not stop.requested:
                stop.wait(1.0)
        status = None
        if not stop.requested:
            # rpc-client sleeps between its sends, as rain-client does: on a VM a halted
            # vCPU wakes it late (common.WakeLatency), from the load's start to its end
            if cfg.get("cpu_wake_latency_us") is not None:
                held = wake.hold(cfg["cpu_wake_latency_us"])
                say(f"CPU wake-up latency request: {held}")
            try:
                child = Child(argv, out / "client.log")
                while not stop.requested and child.proc.poll() is None:
                    stop.wait(1.0, child)
                status = child.stop()
            finally:
                wake.release()
    write_json(
        out / "agent.json",
        {
            "client_exit": status,
            "stopped_by": "signal" if stop.requested else "client exit",
            "cpu_wake_latency": held,
        },
    )
    if status not in (0, None) and not stop.requested:
        raise AgentError(f"rpc-client exited with status {status}:\n{child.tail()}")
    say(DONE)
    return 0
