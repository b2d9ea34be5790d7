"""`rainmaker simulate SPEC --like RUN_DIR`: what a measured run should have measured.

The measured run's points are simulated exactly: its worker hosts and threads per
host, its loads (paper kRPS), its system parameters, and its durations in paper time
(the run's dilation undone: an emulated run's 1 s + 4 s at k = 100 is 10 ms + 40 ms
of paper time). The point ids stay the same, so `rainmaker compare` pairs them.

The network is the run's testbed's: the delays its manifest recorded
(`calibration.network`, the fields of model.Network in paper-time ns; the emulated
testbed's calibration writes it, issue 13), otherwise defaults for its kind:
- hardware or tofino-model: the paper's testbed (Network.paper());
- emulated at dilation k: emulated_network(k) below, from docs/emulation.md's
  measurements: a veth hop takes about 2 us of testbed time and each polling loop
  naps for 0.5 us x k (1 to 100 us) when idle, so a packet waits half a nap on
  average at each of its receivers; a worker spends about 1 us per packet it receives
  or sends (af_packet, an estimate). All shrink by k in paper time. These are rough:
  the emulated switch's own per-packet cost is not measured yet (issue 13).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import UsageError
from ..experiment.layout import RunDir
from ..experiment.plan import Point
from ..experiment.points import spec_of, testbed_kind
from ..experiment.spec import Dilation, Spec

VETH_HOP_NS = 2_000  # testbed time: half a DPDK ping-pong's p50 over one veth (docs/emulation.md, Limits)
SWITCH_PKT_NS = 0  # the emulated switch's cost per packet: not measured yet (issue 13 calibrates it)
WORKER_PKT_NS = 1_000  # testbed time: an af_packet receive or send by a DPDK poller, an estimate (issue 13)


def nap_ns(k: float) -> float:
    """An idle polling loop's nap on the emulated testbed, testbed ns (experiment/agent_config.idle)."""
    return min(100_000.0, max(1_000.0, 500.0 * k))


def emulated_network(k: float):
    """The emulated testbed's delays in paper time at dilation k: a veth hop plus half
    a nap of the receiving poller, each divided by k."""
    from .model import Network

    hop = round((VETH_HOP_NS + nap_ns(k) / 2) / k)
    return dataclasses.replace(
        Network.paper(),
        client_switch_ns=hop,
        switch_worker_ns=hop,
        switch_pkt_ns=round(SWITCH_PKT_NS / k),
        worker_pkt_ns=round(WORKER_PKT_NS / k),
        prewrite_ns=0,  # no NIC: the worker's own receive loop writes the ring, in the hop above
    )


def network_of(manifest: dict, k: float):
    """The measured run's network model (paper time) and where it came from."""
    from .model import Network

    cal = manifest.get("calibration")
    net = cal.get("network") if isinstance(cal, dict) else None
    if isinstance(net, dict):
        fields = {f.name for f in dataclasses.fields(Network)}
        known = {key: v for key, v in net.items() if key in fields}
        return dataclasses.replace(Network.paper(), **known), "the run's calibration (manifest.json)"
    kind = testbed_kind(manifest)
    if kind == "emulated":
        return emulated_network(k), f"the emulated testbed's defaults at k = {k:g} (orchestrator/simulate/like.py)"
    return Network.paper(), "the paper's testbed (no calibration recorded)"


def _points(rd: RunDir, manifest: dict) -> list[dict]:
    pts = manifest.get("points")
    if isinstance(pts, list) and pts and all(isinstance(p, dict) for p in pts):
        return pts
    return [p for p in (d.read_point() for d in rd.points()) if p is not None]


def paper_point(p: dict) -> Point:
    """A measured run's point in paper time: the same id, load and parameters, the
    durations and the workload phases' start times divided by its dilation, dilation 1."""
    k = float(p.get("dilation") or 1.0)
    return Point(
        id=p["id"],
        index=int(p["index"]),
        system=p["system"],
        variant=p.get("variant"),
        variant_label=p.get("variant_label"),
        repetition=int(p["repetition"]),
        load_krps=float(p["load_krps"]),
        capacity_fraction=p.get("capacity_fraction"),
        offered_rps=round(float(p["load_krps"]) * 1000.0, 3),
        dilation=1.0,
        warmup_s=float(p["warmup_s"]) / k,
        measure_s=float(p["measure_s"]) / k,
        phase_at_s=tuple(float(a) / k for a in p.get("phase_at_s") or ()),
        handler=p.get("handler") or "spin",
        worker_threads=int(p["worker_threads"]),
        params=dict(p.get("params") or {}),
    )


def plan_like(spec: Spec | None, run_dir: Path, *, ideal: bool = False):
    """The Plan (model.Plan) of a measured run's points on the simulated testbed."""
    from .model import Network, Plan

    rd = RunDir(run_dir).check()
    m = rd.read_manifest()
    kind = testbed_kind(m)
    if kind == "simulated":
        raise UsageError(
            f"--like {run_dir}: that run is itself simulated", fix="give a run `rainmaker run` measured on a testbed"
        )
    measured = spec_of(m)
    if measured is None:
        raise UsageError(
            f"--like {run_dir}: its manifest.json records no spec", fix="give a run folder `rainmaker run` wrote"
        )
    if spec is not None and spec.name != measured.name:
        raise UsageError(
            f"--like {run_dir}: that run is of {measured.name!r}, the spec given is {spec.name!r}",
            fix=f"give the run's own spec ({m.get('spec_file') or measured.name})",
        )
    raw = _points(rd, m)
    try:
        points = [paper_point(p) for p in raw]
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(
            f"--like {run_dir}: a point of that run is damaged ({e})", fix="give a run folder `rainmaker run` wrote"
        ) from None
    if not points:
        raise UsageError(f"--like {run_dir}: that run has no points", fix="give a run that planned some")
    tb = m.get("testbed") if isinstance(m.get("testbed"), dict) else {}
    hosts = int(tb.get("workers") or 0) or 1
    threads = points[0].worker_threads // hosts
    k = float(raw[0].get("dilation") or 1.0)
    network, source = (Network.ideal(), "ideal (--ideal)") if ideal else network_of(m, k)
    s = measured.model_copy(
        update={
            "dilation": Dilation(emulated=measured.dilation.emulated, hardware=1),
            "workers": measured.workers.model_copy(update={"per_host_threads": threads}),
        }
    )
    s._path = measured._path
    return Plan(
        spec=s,
        points=points,
        worker_hosts=hosts,
        threads_per_host=threads,
        network=network,
        like={
            "run": str(rd.path),
            "experiment": measured.name,
            "testbed": kind,
            "dilation": k,
            "network_from": source,
        },
    )
