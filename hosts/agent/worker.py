"""The worker agent: runs rain-worker, hands its registration to the orchestrator,
records the workers' statistics over the run and, when asked, adapts their token
quotas and slices (Algorithm 1) through the shared-memory control block.

Started by the orchestrator as `python3 -m hosts.agent worker --config FILE`. Prints
`rain-agent ready` once rain-worker is ready (its registration is then in the output
folder). Tokens stay off until the orchestrator has programmed the switch and sends
SIGUSR1 to the agent (or runs `python3 -m hosts.agent enable --ctl FILE`). SIGTERM
stops rain-worker cleanly and writes the final files.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from .. import ctl
from .adaptive import Controller, Params
from .common import READY, AgentError, Child, Stop, eal_args, load_config, runtime_dir, say, write_json

QP_TYPES = ("uc", "rc")
QUIET_SAMPLES = 10  # samples with no task done or waiting before the agent samples slower
QUIET_PERIOD_S = 0.25
RDMA_MTUS = (1024, 2048, 4096)


def roce_facts(path: str | None) -> dict:
    """What the roce role recorded about this host's ConnectX (<deploy_root>/facts/roce.json:
    gid_index, rdma_device, netdev, ...), or {} when there is no such file."""
    if not path:
        return {}
    try:
        facts = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise AgentError(f"{path}: {e}; the roce role writes this file: run `rainmaker provision` again") from None
    if not isinstance(facts, dict):
        raise AgentError(
            f"{path}: expected a JSON object; the roce role writes this file: run `rainmaker provision` again"
        )
    return facts


def rdma_argv(rdma: dict) -> list[str]:
    """rain-worker's RDMA options from the agent config's worker.rdma: transport (emulated
    or ibverbs), qp_type, icrc_check (the NIC checks the iCRC the switch leaves zero: an
    emulated worker then checks too, an ibverbs one warns and counts the NIC's drops),
    and for ibverbs the device, GID index, MTU and DSCP. A device or
    GID index the config does not give comes from the roce role's facts file, and failing
    that rain-worker finds them itself (the port's PCI function, the GID of --src-ip)."""
    transport = rdma.get("transport", "emulated")
    if transport not in ("emulated", "ibverbs"):
        raise AgentError(f"worker.rdma.transport {transport!r}: expected emulated or ibverbs")
    argv = ["--rdma", transport]
    qp_type = rdma.get("qp_type")
    if qp_type is not None:
        if qp_type not in QP_TYPES:
            raise AgentError(f"worker.rdma.qp_type {qp_type!r}: expected uc or rc")
        argv += ["--qp-type", qp_type]
    icrc_check = rdma.get("icrc_check", False)
    if not isinstance(icrc_check, bool):
        raise AgentError(f"worker.rdma.icrc_check {icrc_check!r}: expected true or false")
    if icrc_check:
        argv.append("--icrc-check")
    if transport != "ibverbs":
        return argv
    facts = roce_facts(rdma.get("roce_facts"))
    device = rdma.get("device") or facts.get("rdma_device")
    gid = rdma.get("gid_index")
    if gid is None:
        gid = facts.get("gid_index")
    if device is not None:
        argv += ["--rdma-dev", str(device)]
    if isinstance(gid, str) and gid.strip().isdigit():  # a templated fact may be a string
        gid = int(gid)
    if gid is not None and gid != "":
        if isinstance(gid, bool) or not isinstance(gid, int) or not 0 <= gid <= 255:
            raise AgentError(f"gid_index {gid!r}: expected an integer in 0..255")
        argv += ["--gid-index", str(gid)]
    if rdma.get("mtu") is not None:
        if rdma["mtu"] not in RDMA_MTUS:
            raise AgentError(f"worker.rdma.mtu {rdma['mtu']!r}: expected 1024, 2048 or 4096")
        argv += ["--rdma-mtu", str(rdma["mtu"])]
    if rdma.get("dscp") is not None:
        argv += ["--dscp", str(int(rdma["dscp"]))]
    return argv


def baseline_argv(w: dict) -> list[str]:
    """The baselines' worker options from the agent config's worker section: dispatcher
    (RackSched's second layer, one shared FIFO in the server: modes report and push
    only) and fetch_timeout_ns (how long a thread waits for a large task's payload from
    its client: Draconis-SW's pulls, and Rain's descriptors of a slot it never received)."""
    argv: list[str] = []
    mode = w.get("mode", "rain")
    dispatcher = w.get("dispatcher", False)
    if not isinstance(dispatcher, bool):
        raise AgentError(f"worker.dispatcher {dispatcher!r}: expected true or false")
    if dispatcher:
        if mode not in ("report", "push"):
            raise AgentError(
                f"worker.dispatcher needs mode report or push (RackSched-SW), not {mode!r}: tokens and pulls "
                "belong to one thread each; fix: set worker.dispatcher to false or worker.mode to report"
            )
        argv.append("--dispatcher")
    tmo = w.get("fetch_timeout_ns")
    if tmo is not None:
        if isinstance(tmo, bool) or not isinstance(tmo, int) or not 1000 <= tmo <= 60_000_000_000:
            raise AgentError(f"worker.fetch_timeout_ns {tmo!r}: expected an integer in 1000..60000000000 (ns)")
        if mode not in ("pull", "rain"):
            raise AgentError(
                f"worker.fetch_timeout_ns is for modes pull (Draconis-SW) and rain (a descriptor of a slot never "
                f"received), not {mode!r}; fix: remove it"
            )
        argv += ["--fetch-timeout", str(tmo)]
    return argv


def kv_argv(kv: dict, handler: object) -> list[str]:
    """The RocksDB handler's database and time dilation (rain-worker --kv-*)."""
    if handler != "rocksdb":
        raise AgentError(f"worker.kv is for handler rocksdb, not {handler!r}; fix: remove it or set worker.handler")
    argv = []
    for key, lo, hi in (("keys", 1, 2**31), ("key_bytes", 16, 1024), ("item_bytes", 1, 65536), ("seed", 0, 2**64 - 1)):
        v = kv.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise AgentError(f"worker.kv.{key} {v!r}: expected an integer in {lo}..{hi}")
        argv += [f"--kv-{key.replace('_', '-')}", str(v)]
    path = kv.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise AgentError(f"worker.kv.path {path!r}: expected an absolute folder for the database")
    dil = kv.get("dilation", 1)
    if isinstance(dil, bool) or not isinstance(dil, (int, float)) or not 1 <= dil <= 1e6:
        raise AgentError(f"worker.kv.dilation {dil!r}: expected a number in 1..1000000 (the testbed's k)")
    return [*argv, "--kv-path", path, "--kv-dilation", f"{dil:g}"]


def worker_argv(cfg: dict, out: Path) -> list[str]:
    w = cfg["worker"]
    argv = [
        cfg["binary"],
        *eal_args(cfg["eal"]),
        "--",
        "--switch-mac",
        w["switch_mac"],
        "--switch-ip",
        w["switch_ip"],
        "--src-ip",
        w["src_ip"],
        "--threads",
        str(w["threads"]),
        "--worker-base",
        str(w["worker_base"]),
        "--mode",
        w.get("mode", "rain"),
        "--handler",
        w.get("handler", "sleep"),
        "--quota",
        str(w.get("quota", 1)),
        "--slice",
        str(w.get("slice", 0)),
        "--ctl",
        str(out / "worker.ctl"),
        "--registration",
        str(out / "registration.json"),
        "--stats",
        str(out / "stats.json"),
    ]
    for opt in ("ring_slots", "slot_size", "rkey", "qpn_base", "psn", "idle", "fifo_size"):
        if opt in w:
            argv += [f"--{opt.replace('_', '-')}", str(w[opt])]
    argv += baseline_argv(w)
    if w.get("kv"):
        argv += kv_argv(w["kv"], w.get("handler"))
    if w.get("rdma"):
        argv += rdma_argv(w["rdma"])
    if w.get("start_disabled", True):
        argv.append("--start-disabled")
    return argv


def run(config_path: str) -> int:
    cfg = load_config(config_path)
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    stop = Stop()
    argv = worker_argv(cfg, out)
    if cfg["worker"].get("kv"):  # rain-worker makes the database's folder, not its parents
        Path(cfg["worker"]["kv"]["path"]).parent.mkdir(parents=True, exist_ok=True)
    child = Child(argv, out / "worker.log", runtime_dir(cfg["eal"]))
    child.ready("rain-worker ready", cfg)
    try:
        block = ctl.ControlBlock(out / "worker.ctl")
    except (OSError, ValueError) as e:
        child.stop()
        raise AgentError(f"rain-worker's control block: {e}") from None

    def enable_tokens(*_: object) -> None:
        # SIGUSR1 to this agent (not its group: rain-worker would die of it) turns the
        # tokens on, once the orchestrator has programmed the switch. The signal also
        # wakes the loop (Stop.wait), so the first sample with `enabled` set, which marks
        # the load's start (docs/results.md), is taken at once even in a quiet spell.
        for i in range(block.header.n_workers):
            block.set_enabled(i, True)

    signal.signal(signal.SIGUSR1, enable_tokens)
    say(READY)
    period = float(cfg.get("sample_period_s", 0.1))
    adaptive = cfg.get("adaptive")
    params = Params(**{k: adaptive[k] for k in ("s_th", "r_th", "n_max") if k in adaptive}) if adaptive else None
    control_s = float(adaptive.get("control_interval_s", 1.0)) if adaptive else 0.0
    n = block.header.n_workers
    series = open(out / "timeseries.jsonl", "a")
    decisions = open(out / "decisions.jsonl", "a")
    t0 = time.monotonic()
    busy = [block.workers[i].stats.busy_ns for i in range(n)]
    # global worker ids in its reports: the coordinator sums the agents' (adaptive.rebalance)
    controller = Controller(params, n, busy, base=int(cfg["worker"]["worker_base"])) if params is not None else None
    last_ctrl = t0
    quiet, last_state = 0, None  # samples in a row in which the workers did nothing
    try:
        while not stop.requested and child.proc.poll() is None:
            # Nothing changed for QUIET_SAMPLES samples (before the load, after it):
            # sample at QUIET_PERIOD_S until something does, so that an idle testbed
            # does not pay for a time series of nothing. Algorithm 1 keeps its period.
            slow = controller is None and quiet >= QUIET_SAMPLES
            stop.wait(max(period, QUIET_PERIOD_S) if slow else period, child)
            now = time.monotonic()
            row = {"t": round(now - t0, 4), "workers": []}
            for i in range(n):
                w = block.workers[i]
                row["workers"].append(
                    {
                        "fifo": w.stats.fifo_len,
                        "outstanding": w.stats.outstanding,
                        "done": w.stats.tasks_done,
                        "busy_ns": w.stats.busy_ns,
                        "quota": w.knobs.quota,
                        "slice": w.knobs.slice,
                        "enabled": w.knobs.enabled,
                    }
                )
                if controller is not None:
                    controller.add_samples(i, *block.new_samples(i))
            series.write(json.dumps(row) + "\n")
            state = [(w["done"], w["fifo"], w["outstanding"], w["busy_ns"]) for w in row["workers"]]
            quiet = quiet + 1 if state == last_state else 0
            last_state = state
            if controller is not None and now - last_ctrl >= control_s:
                ws = block.workers
                changes, record = controller.step(
                    now - t0,
                    (now - last_ctrl) * 1e9,
                    [ws[i].knobs.quota for i in range(n)],
                    [ws[i].knobs.slice for i in range(n)],
                    [ws[i].stats.busy_ns for i in range(n)],
                )
                for d in changes:
                    if d.quota != ws[d.wid].knobs.quota:
                        block.set_quota(d.wid, d.quota)
                    if d.slice != ws[d.wid].knobs.slice:
                        block.set_slice(d.wid, d.slice)
                record["quotas"] = [ws[i].knobs.quota for i in range(n)]
                decisions.write(json.dumps(record, default=str) + "\n")
                decisions.flush()
                last_ctrl = now
    finally:
        series.close()
        decisions.close()
        status = child.stop()
        block.close()
        write_json(
            out / "agent.json",
            {
                "worker_exit": status,
                "lost_samples": controller.lost if controller else 0,
                "stopped_by": "signal" if stop.requested else "worker exit",
            },
        )
    if status not in (0, None) and not stop.requested:
        raise AgentError(f"rain-worker exited with status {status}:\n{child.tail()}")
    return 0


def enable(ctl_path: str, quota: int | None, slice_: int | None, disable: bool, worker: int | None = None) -> int:
    """One-shot: set every worker's knobs, or one worker's (run by the orchestrator over
    SSH; a slice move is --disable, then the switch's change, then --slice S --quota 1).
    Knobs are set before tokens go on, so the first token carries the new slice."""
    try:
        block = ctl.ControlBlock(ctl_path)
    except (OSError, ValueError) as e:
        raise AgentError(str(e)) from None
    n = block.header.n_workers
    if worker is not None and not 0 <= worker < n:
        block.close()
        raise AgentError(f"--worker {worker}: the control block has workers 0..{n - 1}")
    for i in range(n) if worker is None else (worker,):
        if quota is not None:
            block.set_quota(i, quota)
        if slice_ is not None:
            block.set_slice(i, slice_)
        block.set_enabled(i, not disable)
    block.close()
    return 0
