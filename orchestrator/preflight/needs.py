"""What an experiment needs of the machines, from its systems (orchestrator/systems):
which programs run on the hosts and which kernel features they use. Pure: a spec in,
a Needs out; the checks (checks.py) mark a check `needed` from it.

    rain and the baselines   rain-client and rain-worker: DPDK (huge pages, the data NIC);
                             a worker on a ConnectX receives the switch's RoCEv2 WRITEs
                             (rdma: ibverbs: RDMA in the kernel, RoCE settings, no iCRC check)
    cp, cs, ms, rakaia       rpc-server and rpc-client over kernel TCP: nothing beyond a kernel
    kcm                      rpc-server --mode kcm: AF_KCM sockets and BPF (CONFIG_AF_KCM,
                             CONFIG_BPF_SYSCALL) on the worker hosts
    memcached                Debian's memcached: nothing beyond a kernel
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..systems import get as get_system

# Without a spec, a preflight judges the testbed for the main job: Rain.
DEFAULT_SYSTEMS = ("rain",)
# rpc-server's modes that need kernel options, on the worker hosts (hosts/rpc/server.c).
SERVER_MODE_OPTIONS = {"kcm": {"AF_KCM": "rpc-server --mode kcm opens AF_KCM sockets", "BPF_SYSCALL": "KCM's parser"}}


@dataclass(frozen=True)
class Needs:
    """What the run needs; `source` says whose needs they are (a spec, or the default)."""

    source: str
    systems: tuple[str, ...]
    dpdk: bool  # rain-client and rain-worker run (an in-switch system)
    # build option -> why, on the worker hosts
    worker_options: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "systems": list(self.systems),
            "dpdk": self.dpdk,
            "worker_kernel_options": dict(self.worker_options),
        }


# The RocksDB handler measured alone (rain-worker --kv-bench, figure 2): no DPDK port, no
# switch, no kernel option; only that every machine answers.
HANDLER_ALONE = Needs("the RocksDB handler alone (rain-worker --kv-bench)", (), dpdk=False)


def needs_of(spec=None) -> Needs:
    """The needs of `spec` (an orchestrator.experiment.spec.Spec), or of the main job."""
    systems = tuple(spec.systems) if spec is not None else DEFAULT_SYSTEMS
    source = f"spec {spec.name}" if spec is not None else "the main job (rain; give a spec for its own needs)"
    found = [get_system(s) for s in systems]
    options: dict[str, str] = {}
    for s in found:
        for opt, why in SERVER_MODE_OPTIONS.get(s.server_mode or "", {}).items():
            options[opt] = why
    return Needs(source, systems, dpdk=any(not s.server_side for s in found), worker_options=options)
