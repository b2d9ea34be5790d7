"""The client agent: runs rain-client with the point's load profile and leaves its
histograms and summary in the output folder. Started as
`python3 -m hosts.agent client --config FILE`; prints `rain-agent ready` when
rain-client is ready (and, with `wait_start`, hands on the SIGUSR1 that starts the
load) and `rain-agent done` when it has written its results. SIGTERM
ends rain-client early (its summary is then marked partial)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from .common import DONE, READY, AgentError, Child, Stop, eal_args, load_config, runtime_dir, say, write_json


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
    for opt in ("large_fraction", "large_bytes", "max_outstanding", "timeout_us", "dilation", "seed", "idle"):
        if opt in c:
            argv += [f"--{opt.replace('_', '-')}", str(c[opt])]
    if c.get("resubmit"):
        argv.append("--resubmit")
    if c.get("trace"):
        argv += ["--trace", str(out / "trace.csv")]
    if c.get("wait_start"):
        argv.append("--wait-start")
    return argv


def run(config_path: str) -> int:
    cfg = load_config(config_path)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    stop = Stop()
    # With wait_start, the orchestrator starts the load with SIGUSR1 to this agent,
    # which hands it on to rain-client.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    argv = client_argv(cfg, out)
    if cfg.get("realtime"):
        # On shared cores the load generator is the measuring instrument: a real-time
        # priority lets it preempt the busy pollers when a send is due (it sleeps
        # between sends, so it takes little CPU). CFS alone stalls it for milliseconds.
        argv = ["chrt", "--fifo", str(int(cfg["realtime"])), *argv]
    child = Child(argv, out / "client.log", runtime_dir(cfg["eal"]))
    child.ready("rain-client ready", cfg)
    signal.signal(signal.SIGUSR1, lambda *_: child.proc.send_signal(signal.SIGUSR1))
    say(READY)
    while not stop.requested and child.proc.poll() is None:
        time.sleep(0.05)
    status = child.stop()
    write_json(out / "agent.json", {"client_exit": status, "stopped_by": "signal" if stop.requested else "client exit"})
    if status != 0 and not stop.requested:
        raise AgentError(f"rain-client exited with status {status}:\n{child.tail()}")
    say(DONE)
    return 0
