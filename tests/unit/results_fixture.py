"""Synthetic results directories for the analysis, validity, plot and report tests.

Interval logs are written with the `hdrh` package (HdrHistogram(1, 100 s, 3), as
rain-client) in exactly rain-client's line format (hosts/dpdk/client/hdr.c,
hdr_log_write): comment, version, StartTime, BaseTime, legend, then
`Tag=<class>,<start %.3f>,<length %.3f>,<max / ratio %.3f>,<payload>`; summary.json
carries rain-client's keys (report.c). Nothing here uses the code under test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from orchestrator.experiment.spec import PLOTS

COUNTER_KEYS = (
    "offered",
    "sent",
    "sent_in_window",
    "received",
    "failed",
    "timed_out",
    "rejected",
    "resubmitted",
    "late_reply",
    "lost",
    "not_sent",
    "waited_for_admission",
    "late_sends",
    "max_lag_ns",
    "large",
)


def hdr_from(values: Iterable[int] | np.ndarray):
    """An hdrh histogram of the values (repeated values recorded with a count)."""
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram(1, 100_000_000_000, 3)
    v, n = np.unique(
        np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.int64), return_counts=True
    )
    for x, c in zip(v.tolist(), n.tolist()):
        h.record_value(int(x), int(c))
    return h


def write_client_hlog(
    path: Path,
    per_interval: Sequence[Mapping[str, Iterable[int]]],
    *,
    start_unix_s: float,
    max_ratio: float,
    last_len_s: float = 1.0,
) -> None:
    """per_interval[k][class] = values recorded in second k of the window."""
    classes = list(per_interval[0]) if per_interval else []
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(start_unix_s)))
    lines = [
        "#[rain-client test fixture]",
        "#[Histogram log format version 1.3]",
        f"#[StartTime: {start_unix_s:.3f} (seconds since epoch), {when}]",
        f"#[BaseTime: {start_unix_s:.3f} (seconds since epoch)]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    n = len(per_interval)
    for k, row in enumerate(per_interval):
        for c in classes:
            h = hdr_from(row.get(c, []))
            length = last_len_s if k + 1 == n else 1.0
            lines.append(
                f"Tag={c},{k * 1.0:.3f},{length:.3f},{h.get_max_value() / max_ratio:.3f},{h.encode().decode()}"
            )
    path.write_text("\n".join(lines) + "\n")


def counters(**kw) -> dict:
    c = {k: 0 for k in COUNTER_KEYS}
    c.update(
        {"mean_service_ns": 10_000.0, "mean_keys": 0.0, "scheduled_rps": 0.0, "achieved_rps": 0.0, "received_rps": 0.0}
    )
    c.update(kw)
    return c


def make_summary(
    classes: Mapping[str, dict],
    *,
    duration_s: float = 2.0,
    warmup_s: float = 0.5,
    offered_rps: float | None = None,
    achieved_rps: float | None = None,
    arrival: str = "poisson",
    schedule: list | None = None,
    lcores: int = 1,
    partial: bool = False,
    dilation: float = 100.0,
) -> dict:
    tot = counters()
    for c in classes.values():
        for k in COUNTER_KEYS + ("scheduled_rps", "achieved_rps", "received_rps"):
            tot[k] = max(tot[k], c[k]) if k == "max_lag_ns" else tot[k] + c[k]
    off = offered_rps if offered_rps is not None else tot["offered"] / duration_s
    ach = achieved_rps if achieved_rps is not None else tot["sent_in_window"] / duration_s
    return {
        "tool": "rain-client",
        "format": 1,
        "partial": partial,
        "client_host": 0,
        "lcores": lcores,
        "driver": "net_af_packet",
        "arrival": arrival,
        "schedule": schedule or [[0.0, off]],
        "dilation": dilation,
        "warmup_s": warmup_s,
        "duration_s": duration_s,
        "timeout_us": 100000,
        "intervals": int(round(duration_s)),
        "offered_rps": off,
        "achieved_rps": ach,
        "schedule_error": abs(ach - off) / off if off else 0.0,
        "totals": tot,
        "classes": {
            name: {
                "task_type": i,
                "weight": 1,
                "payload": 8,
                "service": "exp:1000000",
                "mean_service_ns_expected": 1e6,
                **c,
            }
            for i, (name, c) in enumerate(classes.items())
        },
        "run": {},
        "drops": {},
        "per_lcore": [],
    }


def good_counters(n: int, duration_s: float = 2.0) -> dict:
    return counters(
        offered=n,
        sent=n,
        sent_in_window=n,
        received=n,
        scheduled_rps=n / duration_s,
        achieved_rps=n / duration_s,
        received_rps=n / duration_s,
        max_lag_ns=20_000,
    )


def write_point(run_dir: Path, point: dict, hosts: Mapping[str, dict]) -> Path:
    """hosts[name] = {"latency": per_interval, "slowdown": per_interval, "summary": dict,
    "trace": optional CSV text}. point.json as the runner writes it (the plan's Point:
    its status lives in sweep.json, see write_sweep)."""
    d = run_dir / "points" / point["id"]
    d.mkdir(parents=True, exist_ok=True)
    (d / "point.json").write_text(json.dumps({k: v for k, v in point.items() if k != "status"}))
    for i, (host, h) in enumerate(hosts.items()):
        hd = d / "clients" / host
        hd.mkdir(parents=True, exist_ok=True)
        start = 1_700_000_000.0 + i * 0.37
        if h.get("latency") is not None:
            write_client_hlog(hd / "latency.hlog", h["latency"], start_unix_s=start, max_ratio=1e6)
        if h.get("slowdown") is not None:
            write_client_hlog(hd / "slowdown.hlog", h["slowdown"], start_unix_s=start, max_ratio=1e3)
        if h.get("summary") is not None:
            (hd / "summary.json").write_text(json.dumps(h["summary"], indent=1))
        if h.get("trace") is not None:
            (hd / "trace.csv").write_text(h["trace"])
    return d


def write_sweep(run_dir: Path, states: Mapping[str, dict]) -> None:
    """sweep.json as orchestrator/experiment/sweep.py writes it: point id -> state."""
    full = {
        pid: {"status": "done", "digest": "0" * 16, "attempts": 1, "reason": None, "valid": None}
        | dict(st)
        | {"started": 1.0, "finished": 2.0, "wall_s": 1.0}
        for pid, st in states.items()
    }
    (run_dir / "sweep.json").write_text(json.dumps({"points": full}, indent=1))


def switch_queue_rows(balances: Sequence[int], period_s: float = 0.05, slices: int = 1) -> str:
    """switch/queue.jsonl as the runner's sampler writes it: the signed balance of each
    slice per sample (the first slice gets the value, the others 0)."""
    rows = [
        {"t_s": round(i * period_s, 4), "balance": {str(s): (b if s == 0 else 0) for s in range(slices)}}
        for i, b in enumerate(balances)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


def worker_sample_rows(fifos: Sequence[Sequence[int]], *, period_s: float, on_at: int, quota: int = 2) -> str:
    """timeseries.jsonl as the worker agent writes it (hosts/agent/worker.py): per sample
    each worker's fifo, outstanding, done, busy_ns, quota, slice, enabled; tokens are
    turned on (the load starts) at sample `on_at`."""
    rows = [
        {
            "t": round((i + 1) * period_s, 4),
            "workers": [
                {
                    "fifo": f,
                    "outstanding": f + 1,
                    "done": 10 * i,
                    "busy_ns": 0,
                    "quota": quota,
                    "slice": 0,
                    "enabled": int(i >= on_at),
                }
                for f in per_worker
            ],
        }
        for i, per_worker in enumerate(fifos)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_point(
    pid: str,
    *,
    system: str = "rain",
    load_krps: float = 1000.0,
    rep: int = 1,
    k: float = 100.0,
    index: int = 0,
    variant: str | None = None,
    **extra,
) -> dict:
    p = {
        "id": pid,
        "index": index,
        "system": system,
        "variant": variant,
        "variant_label": variant,
        "repetition": rep,
        "load_krps": load_krps,
        "capacity_fraction": None,
        "offered_rps": load_krps * 1000.0 / k,
        "dilation": k,
        "warmup_s": 0.5,
        "measure_s": 2.0,
        "handler": "sleep",
        "worker_threads": 4,
        "params": {},
        "status": "done",
    }
    p.update(extra)
    return p


def trace_csv(
    times_by_lcore: Mapping[int, np.ndarray], intended_by_lcore: Mapping[int, np.ndarray] | None = None
) -> str:
    rows = ["lcore,client_id,request_id,class,intended_ns,sent_ns"]
    for lc, sent in times_by_lcore.items():
        intended = intended_by_lcore[lc] if intended_by_lcore else sent
        for i, (a, b) in enumerate(zip(intended, sent)):
            rows.append(f"{lc},{lc},{i},task,{a:.0f},{b:.0f}")
    return "\n".join(rows) + "\n"


def synthetic_run(
    root: Path,
    *,
    systems=("rain", "pallas"),
    loads=(1000.0, 2000.0, 3000.0),
    reps: int = 2,
    classes=("get", "scan"),
    n: int = 24000,
    k: float = 100.0,
    seed: int = 0,
    with_optional: bool = True,
) -> Path:
    """A small run: systems x loads x repetitions, two classes, two client hosts, a
    manifest with a spec, optional worker stats series, switch snapshots and agent
    decisions. Latency grows with load; pallas is worse than rain."""
    rng = np.random.default_rng(seed)
    run = root / "results" / "demo" / "20260101-000000"
    run.mkdir(parents=True)
    spec = {
        "name": "demo",
        "figure": "7",
        "systems": list(systems),
        "workload": {"classes": [{"name": c, "service": {"dist": "exponential", "mean_us": 10}} for c in classes]},
        "load": {"krps": list(loads)},
        "repetitions": reps,
        "slo": {"p99_slowdown": 10},
        "plots": list(PLOTS),  # every kind the spec knows
        "validity": {"min_samples_p99": 100},
    }
    manifest = {
        "experiment": "demo",
        "created_unix": 1767225600.0,
        "spec": spec,
        "testbed": {"kind": "emulated", "switch": "emulated", "workers": 1, "clients": 2},
        "git": {"revision": "0123456789abcdef", "dirty": False, "dirty_files": []},
        "host_facts": {
            "client0": {"kernel": "6.1.0-18-amd64", "cpus": "2"},
            "worker0": {"kernel": "6.1.0-18-amd64", "cpus": "2"},
        },
        "points": [],
        "inventory": {"name": "emulated"},
        "versions": {"dpdk": "22.11.4", "kernel": "6.1.0"},
        "hashes": {"rain.p4": "sha256:abc", "bf-rt.json": "sha256:def"},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    idx = 0
    states: dict[str, dict] = {}
    for rep in range(1, reps + 1):
        for si, system in enumerate(systems):
            for load in loads:
                pid = f"{system}-k{int(load)}-r{rep}"
                point = make_point(pid, system=system, load_krps=load, rep=rep, k=k, index=idx)
                idx += 1
                # mean latency (ns, testbed time, k=100): p99 slowdown ~ 4.6 x scale / 1 ms, so rain
                # meets a slowdown SLO of 10 up to 2000 kRPS and pallas only at 1000
                scale = (0.3 + 0.4 * (load / 1000.0) ** 2) * (1.0 + si) * 1_000_000
                hosts = {}
                for host in ("client0", "client1"):
                    per_iv = []
                    per_sd = []
                    for _ in range(2):
                        row, srow = {}, {}
                        for ci, c in enumerate(classes):
                            lat = rng.exponential(scale * (1 + ci), n // 4)
                            row[c] = (lat // 10_000 * 10_000 + 10_000).astype(np.int64)  # few distinct values
                            srow[c] = (lat / (1_000_000 * (1 + ci)) * 100).astype(np.int64) * 10 + 1000
                        per_iv.append(row)
                        per_sd.append(srow)
                    per_class = int(point["offered_rps"] / 2 / len(classes) * 2.0)
                    cl = {c: good_counters(per_class) for c in classes}
                    if system == systems[-1] and load == loads[-1] and len(systems) > 1:
                        for c in cl.values():  # overloaded: requests time out, the point is invalid
                            c["timed_out"] = c["received"] // 10
                            c["received"] -= c["timed_out"]
                    hosts[host] = {
                        "latency": per_iv,
                        "slowdown": per_sd,
                        "summary": make_summary(
                            cl, offered_rps=point["offered_rps"] / 2, achieved_rps=point["offered_rps"] / 2 * 0.99
                        ),
                    }
                d = write_point(run, point, hosts)
                states[pid] = {"status": "done"}
                if with_optional:
                    # what the runner collects (orchestrator/experiment/layout.py): the
                    # controller's snapshot, the switch queue samples and the worker
                    # agent's samples (hosts/agent/worker.py), warm-up 0.5 s, window 2 s
                    frac = min(0.9, load / 4000.0 * (1 + si))
                    (d / "switch").mkdir()
                    (d / "switch" / "snapshot.json").write_text(
                        json.dumps(
                            {
                                "program": "rain",
                                "rain_pipe": 0,
                                "registers": {
                                    "pipe.SwitchIngress.bidir_queue.balance": {
                                        "size": 64,
                                        "width": 32,
                                        "signed": True,
                                        "pipes": [[-3] + [0] * 63],
                                    }
                                },
                                "counters": {
                                    "pipe.SwitchIngress.events.events": {
                                        "EV_TASK_IN": {"packets": 1000, "bytes": 64000},
                                        "EV_DISPATCH_DIRECT": {"packets": int(1000 * (1 - frac)), "bytes": 0},
                                        "EV_DISPATCH_QUEUED": {"packets": int(1000 * frac), "bytes": 0},
                                    }
                                },
                                "queues": {"0": {"balance": -3, "tasks": 3, "tokens": 0}},
                            }
                        )
                    )
                    # the switch queue: tokens waiting at low load, tasks waiting at high load
                    depth = int(load // 1000) * (1 + si)  # tasks; 1..6
                    bal = [(-depth if (i // 4) % 2 else 4 - depth) for i in range(60)]
                    (d / "switch" / "queue.jsonl").write_text(switch_queue_rows(bal))
                    wd = d / "workers" / "worker0"
                    wd.mkdir(parents=True)
                    q = 1 + int(load // 1000) + si
                    fifos = [[(t + w) % 3 for w in range(2)] for t in range(30)]
                    (wd / "timeseries.jsonl").write_text(worker_sample_rows(fifos, period_s=0.1, on_at=3, quota=q))
                    (wd / "stats.json").write_text(json.dumps({"program": "rain-worker", "final": True, "workers": []}))
                    (wd / "decisions.jsonl").write_text(
                        "\n".join(json.dumps({"t": t * 0.01, "changes": [], "quotas": [q, q]}) for t in range(5)) + "\n"
                    )
    write_sweep(run, states)
    return run
