"""The RPC agents of Rakaia's measured layer: kernel TCP between the hosts, through the
switch running ipv4_forward.

    python3 -m hosts.agent rpc-server --config FILE
    python3 -m hosts.agent rpc-client --config FILE

Both give the host's data interface its IP and its routes through the switch first
(kernel_net.attach: the interface is Rain's DPDK port at other times, with no kernel
IP), and take them away again at the end (detach), whatever happened in between.

rpc-server prints `rain-agent ready` once rpc-server listens, serves until SIGTERM, and
leaves `server.json` (what its done line counted: served, connections, malformed, and
for ms-user the handoffs, queued and stolen) in the output folder.

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
from pathlib import Path

from . import kernel_net
from .common import DONE, READY, AgentError, Child, Stop, WakeLatency, load_config, say, write_json

SERVER_MODES = ("cp", "cs", "pool", "ms-user", "kcm")
KEYS = ("binary", "out_dir", "net")
# rpc-client's options an agent config's `client` block may give (key: --key, _ as -)
CLIENT_OPTIONS = (
    "threads", "arrival", "spread", "seed", "late_ns", "interval", "payload", "protocol", "class", "realtime", "drain",
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


def server_argv(cfg: dict) -> list[str]:
    s = _need(cfg, "server", "listen", "mode", "threads")
    if s["mode"] not in SERVER_MODES:
        raise AgentError(f"server.mode {s['mode']!r}: expected one of {', '.join(SERVER_MODES)}")
    argv = [cfg["binary"], "--listen", s["listen"], "--mode", s["mode"], "--threads", str(int(s["threads"]))]
    if "io_threads" in s:
        argv += ["--io-threads", str(int(s["io_threads"]))]
    if "service" in s:
        argv += ["--service", s["service"]]
    return argv


def client_argv(cfg: dict, out: Path) -> list[str]:
    c = _need(cfg, "client", "connect", "connections", "rate", "service", "warmup_s", "measure_s")
    argv = [cfg["binary"], "--connect", c["connect"], "--connections", str(int(c["connections"]))]
    argv += ["--rate", str(c["rate"]), "--service", c["service"]]
    argv += ["--warmup", str(c["warmup_s"]), "--duration", str(c["measure_s"]), "--out", str(out)]
    for opt in CLIENT_OPTIONS:
        if opt in c:
            argv += [f"--{opt.replace('_', '-')}", str(c[opt])]
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


class Attached:
    """The data interface's kernel IP and routes for as long as the agent runs."""

    def __init__(self, net: dict) -> None:
        self.net = net

    def __enter__(self) -> Attached:
        n = self.net
        try:
            kernel_net.attach(n["iface"], n["ip"], n["peers"], n["gateway_mac"])
        except kernel_net.KernelNetError as e:
            self.__exit__()  # what attach did before it failed is taken away too
            raise AgentError(str(e)) from None
        return self

    def __exit__(self, *exc: object) -> None:
        n = self.net
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
    with Attached(net_of(cfg)):
        child = Child(argv, out / "server.log")
        child.ready("rpc-server ready", cfg)
        say(READY)
        while not stop.requested and child.proc.poll() is None:
            stop.wait(1.0, child)
        died = child.proc.poll() is not None and not stop.requested
        status = child.stop()
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
