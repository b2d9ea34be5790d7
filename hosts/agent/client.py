"""The client agent: runs rain-client with the point's load profile and leaves its
histograms and summary in the output folder. Started as
`python3 -m hosts.agent client --config FILE`; prints `rain-agent ready` when
rain-client is ready (and, with `wait_start`, hands on the SIGUSR1 that starts the
load) and `rain-agent done` when it has written its results. SIGTERM
ends rain-client early (its summary is then marked partial)."""

from __future__ import annotations

import signal
from pathlib import Path

from .common import (
    DONE,
    READY,
    AgentError,
    Child,
    Stop,
    WakeLatency,
    eal_args,
    load_config,
    runtime_dir,
    say,
    write_json,
)


def client_argv(cfg: dict, out: Path) -> list[str]:
    c = cfg["client"]
    argv = [
        cfg["binary"],
        *eal_args(cfg["eal"]),
        "--",
        "--src-ip",
        c["src_ip"],
        "--dst-mac",
        c["dst_mac"],
        "--dst-ip",
        c["dst_ip"],
        "--client-id",
        str(c.get("client_id", 0)),
        "--arrival",
        c.get("arrival", "poisson"),
        "--warmup",
        str(c["warmup_s"]),
        "--duration",
        str(c["measure_s"]),
        "--out",
        str(out),
    ]
    if "schedule" in c:
        argv += ["--schedule", c["schedule"]]
    else:
        argv += ["--rate", str(c["rate"])]
    for cls in c["classes"]:
        argv += ["--class", cls]
    for opt in ("large_fraction", "large_bytes", "max_outstanding", "timeout_us", "dilation", "seed", "idle", "epoch"):
        if opt in c:
            argv += [f"--{opt.replace('_', '-')}", str(c[opt])]
    if c.get("resubmit"):
        argv.append("--resubmit")
    if c.get("trace"):
        argv += ["--trace", str(out / "trace.csv")]
    if c.get("wait_start"):
        argv.append("--wait-start")
    if cfg.get("realtime"):
        # On shared cores the load generator is the measuring instrument: a real-time
        # priority lets it preempt the busy pollers when a send is due. rain-client takes
        # it for its load only, and bounds how long it runs without sleeping (its
        # --help); start-up, in the normal class, never competes with another
        # testbed's load for the machine.
        argv += ["--realtime", str(int(cfg["realtime"]))]
    return argv


class NicCounters:
    """The kernel's counters of the data interface behind a DPDK virtual port
    (`iface=` of an af_packet or af_xdp vdev), from the load's start to the client's end:
    with the switch's count of what it sent to this host's port and rain-client's of
    what its port and its loop took, they say where a frame that never reached the
    client was lost. None for a NIC the kernel does not see (a PCI device bound to DPDK)."""

    FIELDS = ("rx_packets", "rx_dropped", "rx_errors", "tx_packets", "tx_dropped")

    def __init__(self, eal: dict) -> None:
        self.iface = next(
            (
                kv.split("=", 1)[1]
                for dev in eal.get("devices", [])
                for kv in str(dev).split(",")
                if kv.startswith("iface=")
            ),
            None,
        )
        self.before: dict[str, int] | None = None

    def _now(self) -> dict[str, int] | None:
        if self.iface is None:
            return None
        out = {}
        for f in self.FIELDS:
            try:
                out[f] = int(Path(f"/sys/class/net/{self.iface}/statistics/{f}").read_text())
            except (OSError, ValueError):
                return None
        return out

    def mark(self) -> None:
        self.before = self._now()

    def read(self) -> dict | None:
        after = self._now()
        if self.before is None or after is None:
            return None
        return {"iface": self.iface, **{f: after[f] - self.before[f] for f in self.FIELDS}}


def run(config_path: str) -> int:
    cfg = load_config(config_path)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    stop = Stop()
    # With wait_start, the orchestrator starts the load with SIGUSR1 to this agent,
    # which hands it on to rain-client.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    argv = client_argv(cfg, out)
    nic = NicCounters(cfg["eal"])
    child = Child(argv, out / "client.log", runtime_dir(cfg["eal"]))
    child.ready("rain-client ready", cfg)
    wake = WakeLatency()
    held: list[str] = []

    def start(*_) -> None:
        nic.mark()
        if cfg.get("cpu_wake_latency_us") is not None and not held:
            held.append(wake.hold(cfg["cpu_wake_latency_us"]))
            say(f"CPU wake-up latency request: {held[0]}")
        child.proc.send_signal(signal.SIGUSR1)

    signal.signal(signal.SIGUSR1, start)
    say(READY)
    try:
        while not stop.requested and child.proc.poll() is None:
            stop.wait(1.0, child)  # woken by the client's exit or a signal
        status = child.stop()
    finally:
        wake.release()
    write_json(
        out / "agent.json",
        {
            "client_exit": status,
            "stopped_by": "signal" if stop.requested else "client exit",
            "cpu_wake_latency": held[0] if held else None,
            "nic": nic.read(),
        },
    )
    if status != 0 and not stop.requested:
        raise AgentError(f"rain-client exited with status {status}:\n{child.tail()}")
    say(DONE)
    return 0
