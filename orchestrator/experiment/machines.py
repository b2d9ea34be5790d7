"""The testbed's machines during a run: one SSH connection to each for the whole run,
work on several at once, the deployed bundle brought up to date, and their facts."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..deploy import VERSION, bundle, differing, parse_sha256sum
from ..errors import UsageError
from ..inventory import Inventory
from ..remote import Remote, Target, targets
from .plan import TestbedShape


def shape_of(inv: Inventory) -> TestbedShape:
    """What the planner needs of the inventory. Time is dilated wherever the machines
    share this one (an emulated switch, or tofino-model with namespace hosts), not only
    with the software switch."""
    return TestbedShape(worker_hosts=len(inv.workers), client_hosts=len(inv.clients), emulated=inv.shared_system)


@dataclass
class Testbed:
    """Open connections to every machine of the testbed, for the whole run."""

    inv: Inventory
    remotes: dict[str, Remote] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for t in targets(self.inv):
            self.remotes[t.name] = Remote(t)

    def target(self, name: str) -> Target:
        return self.remotes[name].target

    def parallel(self, fn, names: list[str]) -> dict:
        """Run fn(name) for each name in threads; raise the first error after all ended."""
        results: dict = {}
        errors: list[BaseException] = []

        def one(n: str) -> None:
            try:
                results[n] = fn(n)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def close(self) -> None:
        for r in self.remotes.values():
            r.close()


_SH_HASHES = (  # $1: the deploy root, then the files: their sha256sum lines, then VERSION
    'cd "$1" 2>/dev/null && shift && sha256sum -- "$@" 2>/dev/null; '
    'printf "version=%s\\n" "$(cat agent/VERSION 2>/dev/null)"; exit 0'
)


def deploy(tb: Testbed, log) -> None:
    """The bundle (orchestrator/deploy.py: binaries and agents) into every host's deploy
    root. One command per host hashes what is there; only files that differ are copied,
    and VERSION is written last. deploy.build: host builds on the hosts, which only
    `rainmaker provision` does: here stale binaries are an error naming it."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rainmaker-bundle-") as stage:
        b = bundle(tb.inv.deploy.build, stage=Path(stage))  # staged: what is hashed is what is copied
        version_file = Path(stage) / "VERSION"
        version_file.write_text(b.digest + "\n")

        def one(name: str) -> int:
            r = tb.remotes[name]
            dests = [f.dest for f in b.all_files()] + ([] if b.build == "local" else list(b.binaries))
            out = r.run(["sh", "-c", _SH_HASHES, "sh", str(r.target.deploy_root), *dests], timeout=30).stdout
            have = parse_sha256sum(out)
            version = next((line[len("version=") :] for line in out.splitlines() if line.startswith("version=")), "")
            if b.build == "host" and (differing(b, have, b.sources) or any(d not in have for d in b.binaries)):
                raise UsageError(
                    f"{name}: rain-client, rain-worker and the rpc programs are built on the host (deploy.build: host) "
                    f"and were not built from these sources",
                    fix="run `rainmaker provision --tags deploy`: it copies the sources and builds them there",
                )
            todo = differing(b, have)
            for f in todo:
                r.put(f.src, f.dest, mode=f.mode)
            if todo or version != b.digest:
                r.put(version_file, VERSION, mode=0o644)
            return len(todo)

        hosts = [h.name for h in tb.inv.hosts]
        copied = tb.parallel(one, hosts)
    n = sum(copied.values())
    if n:
        log(
            f"deployed {n} file(s) of bundle {b.digest} (rain-client, rain-worker, rpc-client, rpc-server, agents) to "
            f"{sum(1 for c in copied.values() if c)} of {len(hosts)} hosts"
        )
    else:
        log(f"bundle {b.digest} already on all {len(hosts)} hosts")


def host_facts(tb: Testbed) -> dict:
    """Per machine: kernel, CPUs, DPDK, hugepages, CPU model, and what the roce role
    recorded (<deploy_root>/facts/roce.json: RDMA device, GID index, MTUs, ...)."""
    cmd = (
        "echo kernel=$(uname -r); echo cpus=$(nproc); echo python=$(python3 -V 2>&1); "
        "echo dpdk=$(dpkg-query -W -f='${Version}' dpdk 2>/dev/null); "
        "echo hugepages=$(cat /proc/sys/vm/nr_hugepages); echo model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); "
        'printf "roce=%s\\n" "$(tr -d "\\n" < "$1/facts/roce.json" 2>/dev/null)"'
    )

    def one(n: str) -> dict:
        r = tb.remotes[n]
        res = r.run(["sh", "-c", cmd, "sh", str(r.target.deploy_root)], timeout=20, check=False)
        facts: dict = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
        roce = facts.pop("roce", "").strip()
        if roce:
            try:
                facts["roce"] = json.loads(roce)
            except ValueError:
                facts["roce"] = {"error": f"unreadable facts/roce.json: {roce[:200]}"}
        return facts

    return tb.parallel(one, list(tb.remotes))
