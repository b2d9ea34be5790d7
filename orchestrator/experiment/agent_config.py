"""What each host's agent is told for a point: the agent-config.json that hosts/agent
reads, for rain-worker (a worker host) and rain-client (a client host), and the rules
both roles share: DPDK's EAL arguments, what an idle poller does, the clients' seeds
and the RocksDB database a worker serves from."""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath

from ..errors import UsageError
from ..inventory import Host, Inventory
from ..simulate.model import RING_SLOTS, client_timeout_us
from ..systems.base import System
from ..testbed.cpu import format_cpus, testbed_cpus
from .plan import Point, phase_schedule
from .spec import Memcached, Spec


def binary(h: Host, name: str) -> str:
    return str(PurePosixPath(h.deploy_root) / "bin" / name)


def kv_path(spec: Spec, h: Host) -> str:
    """The host's RocksDB folder for the spec's database: named by its parameters, so a
    run reuses a database built before and another parameter set gets its own."""
    db = spec.database
    name = f"k{db.keys}-kb{db.key_bytes}-ib{db.item_bytes}-s{db.seed}"
    return str(PurePosixPath(h.deploy_root) / "kv" / name)


def kv_settings(spec: Spec, h: Host, k: float) -> dict:
    db = spec.database
    return {
        "path": kv_path(spec, h),
        "keys": db.keys,
        "key_bytes": db.key_bytes,
        "item_bytes": db.item_bytes,
        "seed": db.seed,
        "dilation": k,  # run the operation, then hold it until k x its run time
    }


def kv_build_s(spec: Spec) -> float:
    """How long rain-worker may take to get ready when it must build the database:
    RocksDB writes a batch-loaded database at tens of MB/s even on a small VM."""
    db = spec.database
    return 60.0 + db.keys * (db.key_bytes + db.item_bytes) / 5e6


def eal(inv: Inventory, host: Host, role: str, lcores: str) -> dict:
    prefix = f"rm{inv.emulation.slot}-{host.name}-{role}" if inv.emulation else f"rain-{host.name}-{role}"
    # Namespace hosts share this machine's few huge pages: they run without (virtual
    # ports need none); a real host uses the pages provisioning reserved for it.
    return {
        "lcores": lcores,
        "no_huge": host.netns is not None,
        "devices": host.nic.eal_device_args,
        "file_prefix": prefix,
    }


def dpdk_runtime_dir(inv: Inventory, host: Host, role: str) -> str:
    """Where DPDK keeps a program's runtime files (per --file-prefix): /var/run/dpdk for
    root, which the agents run as."""
    return f"/var/run/dpdk/{eal(inv, host, role, '')['file_prefix']}"


def lcores(inv: Inventory, host: Host) -> str:
    """DPDK's --lcores for a host's program. A namespace host's lcore floats over the
    testbed's cores, which its programs inherit from the host's sshd: those the testbed
    is confined to (emulation.cpus), else every online CPU of this machine. A CPU set of
    its own ("0@(0-1)" on any machine) would widen that affinity again. A real host
    takes its own cores, one lcore each."""
    if host.netns is not None:
        return f"0@({format_cpus(testbed_cpus(inv))})"
    return ",".join(str(c) for c in host.cores) or "0"


def client_seed(p: Point, client: int, segment: int | None = None) -> int:
    """A client's random seed for a point: a stable hash of the point id (system, load,
    repetition) and the client. Each point draws its own arrivals and service times, and
    the same point the same ones in every run. One seed per repetition, as before, gave
    every load of a curve the same draws: its points erred together (measured: each of
    8 points drew 2-5% below its rate). A point measured in segments (segments.py) draws
    anew in each: with one seed its 15 segments were 15 runs of the same requests, and
    the merged window held no more independent samples than one segment."""
    key = f"{p.id}/client{client}" + (f"/segment{segment}" if segment is not None else "")
    h = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**62 - 1)  # rain-client adds the lcore index


def idle(inv: Inventory, k: float, mean_service_ns: float) -> str:
    """What polling loops do when idle. Hardware: spin (dedicated cores). Emulated: every
    busy poller steals one of two shared cores from the switch, so sleep between polls,
    for at most ~0.5 us of paper time (k x 0.5 us, capped at 100 us). Measured here:
    shorter naps for the client starve the switch more than they sharpen the sends.
    After 100 dilated mean tasks without a frame (at least 100 ms of wall-clock time: no
    load gets there) a poller naps 10 ms, so that an idle testbed costs next to nothing."""
    if not inv.shared_system:
        return "spin"
    long_ns = round(long_idle_s(mean_service_ns) * 1e9)
    return f"sleep:{int(min(100_000, max(1_000, 500 * k)))}:{long_ns}"


def long_idle_s(mean_service_ns: float) -> float:
    """After how long without a frame a poller takes its long naps: 100 dilated mean
    tasks, at least 100 ms."""
    return max(100e6, 100 * mean_service_ns) / 1e9


def mean_service_ns(spec: Spec, p: Point) -> float:
    """The workload's mean service time in testbed time (dilated by the point's k)."""
    return spec.workload.mean_service_us * 1000 * p.dilation


def adaptive(p: Point) -> dict | None:
    """Algorithm 1's parameters for a Rain point that adapts its quotas; K samples of dt
    each, in testbed time (paper: 1000 x 10 us = 10 ms)."""
    if p.system != "rain" or not p.params.get("adaptive"):
        return None
    r = p.params
    return {
        "s_th": r["s_th"],
        "r_th": r["r_th"],
        "n_max": r["n_max"],
        "control_interval_s": r["k_samples"] * r["sample_interval_us"] * 1e-6 * p.dilation,
    }


def worker(
    inv: Inventory, spec: Spec, p: Point, system: System, name: str, out: PurePosixPath, *, slices: list[int]
) -> dict:
    """rain-worker's agent configuration on worker host `name`: its threads, in
    `system`'s mode, serving p's handler, with tokens off until the load starts."""
    h = inv.host(name)
    threads = spec.workers.threads(inv.shared_system)
    i = [w.name for w in inv.workers].index(name)
    service_ns = mean_service_ns(spec, p)
    cfg = {
        "binary": binary(h, "rain-worker"),
        "out_dir": str(out),
        "eal": eal(inv, h, "worker", lcores(inv, h)),
        "sample_period_s": max(0.01, min(0.5, p.measure_s / 50)),
        "adaptive": adaptive(p),
        "worker": {
            "switch_mac": inv.switch.service_mac,
            "switch_ip": inv.switch.service_ip,
            "src_ip": h.nic.ip,
            "threads": threads,
            "worker_base": i * threads,
            "mode": system.worker_mode,
            "handler": p.handler,
            "quota": int(p.params.get("initial_quota", 1)),
            "slice": slices[i * threads],
            "slot_size": 2048,
            "ring_slots": RING_SLOTS,
            "idle": idle(inv, p.dilation, service_ns),
            "start_disabled": True,
        },
    }
    if p.handler == "rocksdb":
        cfg["worker"]["kv"] = kv_settings(spec, h, p.dilation)
        # the first point on a host builds its database before rain-worker is ready
        cfg["ready_timeout_s"] = kv_build_s(spec)
    # How the switch's WRITEs reach the ring: the NIC (ibverbs) or the worker itself,
    # and whether that NIC checks their iCRC (the switch leaves it zero).
    rdma = {
        "transport": h.nic.rdma_transport,
        "qp_type": inv.roce.qp_type,
        "icrc_check": inv.roce.nic_checks_icrc(h.nic.rdma_transport),
    }
    if h.nic.rdma_transport == "ibverbs":
        rdma.update(
            device=h.nic.rdma_device,
            gid_index=h.nic.gid_index,
            mtu=inv.roce.mtu,
            dscp=inv.roce.dscp,
            roce_facts=str(PurePosixPath(h.deploy_root) / "facts" / "roce.json"),
        )
    cfg["worker"]["rdma"] = rdma
    # a large task's payload fetched from its client (Draconis-SW's pulls; Rain's
    # descriptors of a slot pre-written before a move): a few round trips' wait
    if system.fetches_payloads:
        cfg["worker"]["fetch_timeout_ns"] = int(min(6e10, max(1e6, 20 * service_ns)))
    return cfg


def _service_arg(c, p: Point, spec: Spec) -> str:
    if p.handler == "rocksdb":
        return c.service.client_arg(p.dilation, spec.database)
    return c.service.client_arg(p.dilation)


def client(
    inv: Inventory,
    spec: Spec,
    p: Point,
    name: str,
    out: PurePosixPath,
    *,
    q_max: int,
    epoch: int,
    segment: int | None,
) -> dict:
    """rain-client's agent configuration on client host `name`: its share of p's load
    (latency from intended send times), at most its share of the admission cap `q_max`
    outstanding, holding the load until its start signal."""
    h = inv.host(name)
    k = p.dilation
    n_clients = len(inv.clients)
    i = [c.name for c in inv.clients].index(name)
    service_ns = mean_service_ns(spec, p)
    c = {
        "client_id": i,
        "src_ip": h.nic.ip,
        "dst_mac": inv.switch.service_mac,
        "dst_ip": inv.switch.service_ip,
        "arrival": spec.workload.arrival,
        "rate": round(p.offered_rps / n_clients, 3),
        "classes": [
            f"{c.name}:{c.weight}:{c.task_type}:{_service_arg(c, p, spec)}:{c.payload.bytes}"
            for c in spec.workload.classes
        ],
        "warmup_s": p.warmup_s,
        "measure_s": p.measure_s,
        "max_outstanding": max(1, q_max // n_clients),
        "timeout_us": timeout_us(spec, p),
        "dilation": k,
        "seed": client_seed(p, i, segment),
        "trace": p.offered_rps / n_clients * (p.warmup_s + p.measure_s) <= 2_000_000,
        "idle": idle(inv, k, service_ns),
        "wait_start": True,
        "epoch": epoch,
    }
    # A time-varying workload: each phase's rate (dilated, this client's share) and classes.
    schedule = ",".join(
        f"{at:g}:{rps / k / n_clients:.3f}:{'+'.join(names)}" for at, rps, names in phase_schedule(spec, p)
    )
    if schedule:
        del c["rate"]
        c["schedule"] = schedule
    large = spec.workload.classes[0].payload if spec.workload.classes else None
    if large is not None and large.large_fraction > 0:
        c["large_fraction"], c["large_bytes"] = large.large_fraction, large.large_bytes
    return {
        "binary": binary(h, "rain-client"),
        "out_dir": str(out),
        "eal": eal(inv, h, "client", lcores(inv, h)),
        "client": c,
        # Above the switch's data plane (20): the client is the measuring instrument.
        "realtime": 30 if inv.shared_system and inv.realtime_fits else 0,
        # and on shared cores (a VM) its CPU must wake when a send is due (WakeLatency)
        "cpu_wake_latency_us": 0 if inv.shared_system else None,
    }


def timeout_us(spec: Spec, p: Point) -> int:
    """How long a client waits for a request's answer before counting it timed out."""
    return int(client_timeout_us(mean_service_ns(spec, p) / 1000))


# -- Rakaia's measured layer: rpc-server and rpc-client over kernel TCP -------------------
RPC_PORT = 7000  # rpc-server's port on the server host's data IP
MEMCACHED_BINARY = "/usr/bin/memcached"  # Debian's package memcached


def _net(inv: Inventory, h: Host, peers: list[Host]) -> dict:
    """The data interface the RPC agent attaches to the kernel: nic.netdev, or the `iface=`
    of its DPDK virtual device (an emulated host's data0), or else the PCI NIC's own
    interface, which the agent finds on the host (/sys/bus/pci/devices/<pci>/net)."""
    iface = h.nic.netdev or next(
        (kv.split("=", 1)[1] for kv in str(h.nic.vdev or "").split(",") if kv.startswith("iface=")), None
    )
    if iface is None and not h.nic.pci:
        raise UsageError(
            f"{h.name}: the RPC programs use the kernel's TCP on the data NIC, and its kernel interface is not known",
            fix=f"give hosts[{h.name}].nic.netdev (the NIC's interface name, `ip link` on the host)",
        )
    return {
        **({"iface": iface} if iface else {"pci": h.nic.pci}),
        "ip": h.nic.ip,
        "peers": [p.nic.ip for p in peers],
        # ipv4_forward routes by IP, as Rain's switch does; a plain LAN's hosts find each
        # other by ARP (None)
        "gateway_mac": inv.switch.service_mac if inv.switch.programmable else None,
    }


def rpc_server(inv: Inventory, spec: Spec, p: Point, system: System, name: str, out: PurePosixPath) -> dict:
    """rpc-server's agent configuration on worker host `name`: the point's system as its
    mode, the point's worker threads, service as rain-worker's handler (sleep emulated,
    spin on hardware), listening on its data IP."""
    if system.server_mode is None:
        raise UsageError(f"{system.name} schedules in the switch, not inside a server", fix="run it with rain-worker")
    h = inv.host(name)
    server = {"listen": f"{h.nic.ip}:{RPC_PORT}", "mode": system.server_mode, "threads": p.worker_threads}
    if system.server_mode == "memcached":  # Debian's, from the host's PATH (the common role installs it)
        exe = MEMCACHED_BINARY
        server["max_connections"] = int(p.params.get("connections", 20))
    else:
        exe = binary(h, "rpc-server")
        server["service"] = "spin" if p.handler == "spin" else "sleep"
    return {"binary": exe, "out_dir": str(out), "net": _net(inv, h, list(inv.clients)), "server": server}


def rpc_client(
    inv: Inventory, spec: Spec, p: Point, name: str, server: str, out: PurePosixPath, segment: int | None = None
) -> dict:
    """rpc-client's agent configuration on client host `name`: its share of p's load and
    of the connections (the spec's `rpc:` block), to rpc-server on host `server`,
    holding the load until its start signal. Each segment of a point draws anew."""
    h, srv = inv.host(name), inv.host(server)
    n_clients = len(inv.clients)
    i = [c.name for c in inv.clients].index(name)
    connections = int(p.params.get("connections", 20))
    mine = connections // n_clients + (1 if i < connections % n_clients else 0)
    if mine < 1:
        raise UsageError(
            f"{connections} connection(s) over {n_clients} client hosts leave {name} none",
            fix="give rpc.connections at least the number of client hosts",
        )
    svc = spec.workload.classes[0].service if len(spec.workload.classes) == 1 else None
    if not hasattr(svc, "client_arg") and not isinstance(svc, Memcached):
        raise UsageError(
            f"{spec.name}: rpc-client draws every request's service time from one distribution",
            fix="give the RPC spec's workload one class, of constant, exponential or bimodal service "
            "(or of memcached's, for systems: [memcached])",
        )
    cls = spec.workload.classes[0]
    c = {
        "connect": f"{srv.nic.ip}:{RPC_PORT}",
        "connections": mine,
        # a thread per core it may use, all sending whatever is due: a core the host's
        # hypervisor takes away holds back no send but the one its thread was making
        "threads": max(1, min(mine, len(testbed_cpus(inv)) if h.netns is not None else len(h.cores) or 1)),
        "rate": round(p.offered_rps / n_clients, 3),
        "arrival": spec.workload.arrival,
        # memcached's requests are its protocol's; a synthetic RPC carries its service time
        **(cls.service.client_options() if isinstance(svc, Memcached) else {"service": svc.client_arg(p.dilation)}),
        "warmup_s": p.warmup_s,
        "measure_s": p.measure_s,
        "seed": client_seed(p, i, segment),
        # late: 1 us of paper time, as rain-client's threshold (validity's max_late_fraction)
        "late_ns": max(1, round(1000 * p.dilation)),
        "class": cls.name,
        # the answers of the window's last requests: as long as rain-client waits (its timeout)
        "drain": round(timeout_us(spec, p) / 1e6, 3),
        # every request, for the model's replay and the inter-arrival test (as rain-client's)
        "trace": p.offered_rps / n_clients * (p.warmup_s + p.measure_s) <= 2_000_000,
        # on shared cores the load generator is the measuring instrument, as rain-client is:
        # real-time while the load runs (not while it connects), never holding a core
        "realtime": 30 if inv.shared_system and inv.realtime_fits else 0,
    }
    if p.params.get("spread") == "zipf":
        c["spread"] = f"zipf:{float(p.params.get('zipf_s', 1.0)):g}"
    return {
        "binary": binary(h, "rpc-client"),
        "out_dir": str(out),
        "net": _net(inv, h, [srv]),
        "client": c,
        "wait_start": True,
        # idle CPUs that wake at once while the load runs, as rain-client's agent asks
        "cpu_wake_latency_us": 0 if inv.shared_system else None,
    }
