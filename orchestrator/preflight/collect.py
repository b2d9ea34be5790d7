"""Sending the probe (probe.py) to every machine at once and reading its answers.

One SSH command per machine, all in parallel (orchestrator/remote.py's Group): the
machine's own python3 runs a few lines (BOOT) that unpack one argument holding probe.py
and the roles' inspection scripts (inspect_host.py of dpdk_host, inspect_roce.py of
roce), load them as modules, and call the probe with the machine's own JSON arguments.
Nothing is copied to the machine and nothing needs to be deployed first, so a preflight
works on a testbed that was never provisioned. The switch's software is asked at the
same time through switchd.liveness (its BFRuntime port; the emulator's process).

The roles' own defaults (the packages dpdk_host installs, roce's iCRC stamp, the SDE's
compilers) are read from their defaults/main.yml, so the probe asks what they set.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path, PurePosixPath

import yaml

from .. import switchd
from ..inventory import Inventory
from ..inventory.model import Host
from ..remote import Group, Remote, targets

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "playbooks" / "roles"
SCRIPTS = {  # module name on the machine -> its source here
    "inspect_host": ROLES / "dpdk_host" / "files" / "inspect_host.py",
    "inspect_roce": ROLES / "roce" / "files" / "inspect_roce.py",
    "probe": Path(__file__).with_name("probe.py"),
}
BOOT = (
    "import base64,json,sys,types,zlib\n"
    "src=json.loads(zlib.decompress(base64.b64decode(sys.argv[1])))\n"
    "mods={}\n"
    "for name,text in src.items():\n"
    " m=types.ModuleType('rainmaker_preflight_'+name);m.__file__=name+'.py';sys.modules[m.__name__]=m\n"
    " exec(compile(text,m.__file__,'exec'),m.__dict__);mods[name]=m\n"
    "sys.exit(mods['probe'].main(sys.argv[2],mods))\n"
)
PROBE_TIMEOUT_S = 20.0
LIVENESS_TIMEOUT_S = 3.0


@lru_cache(maxsize=1)
def payload() -> str:
    """The scripts, compressed into one argument (about 12 kB)."""
    src = {name: path.read_text() for name, path in SCRIPTS.items()}
    return base64.b64encode(zlib.compress(json.dumps(src).encode(), 9)).decode()


def argv(args: dict) -> list[str]:
    return ["python3", "-c", BOOT, payload(), json.dumps(args, sort_keys=True)]


def run_here(args: dict, python: str = sys.executable) -> dict:
    """The probe run on this machine exactly as on a remote one (tests: a mock's tree as `root`)."""
    cmd = [python, *argv(args)[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"the probe exited with {r.returncode}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


@lru_cache(maxsize=4)
def _defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}


def vdev_iface(vdev: str | None) -> str | None:
    m = re.search(r"(?:^|,)iface=([^,]+)", vdev or "")
    return m.group(1) if m else None


def host_args(inv: Inventory, h: Host, *, root: str = "/", tools: dict | None = None) -> dict:
    """The probe's arguments for a host, the roles' scripts' as the roles give them."""
    tools = dict(tools or {})
    d = _defaults("dpdk_host")
    emulated = h.netns is not None or h.nic.vdev is not None
    packages = list(d["dpdk_host_packages"]) if inv.dpdk.source == "debian" else []
    if not emulated:  # as the role asks: (mlx5 + vfio) | unique
        packages += list(dict.fromkeys(d["dpdk_host_mlx5_packages"] + d["dpdk_host_vfio_packages"]))
    a: dict = {
        "root": root,
        "tools": {k: v for k, v in tools.items() if k in ("ethtool", "pkg-config")},
        "host": {
            "dpdk_source": inv.dpdk.source,
            "dpdk_prefix": str(inv.dpdk.prefix or ""),
            "packages": packages,
            "hugepage_kb": h.hugepages.size_kb,
            "pci": None if emulated else h.nic.pci,
            "mgmt": h.mgmt.address,
            "cores": list(h.cores),
            "isolation": True,
            "root": root,
            "tools": {k: v for k, v in tools.items() if k in ("ip", "modprobe")},
        },
        "netdev": h.nic.netdev,
        "vdev_iface": vdev_iface(h.nic.vdev),
    }
    if h.nic.rdma_transport == "ibverbs":
        stamp = str(_defaults("roce")["roce_icrc_stamp"]).replace("{{ roce_root }}", root.rstrip("/") + "/")
        a["roce"] = {
            "facts_only": False,
            "pci": h.nic.pci,
            "rdma_device": h.nic.rdma_device,
            "netdev": h.nic.netdev,
            "ip": h.nic.ip,
            "service_ip": inv.switch.service_ip,
            "priority": inv.roce.priority,
            "packages": [],
            "facts_file": str(PurePosixPath(h.deploy_root) / "facts" / "roce.json"),
            "icrc_stamp": stamp,
            "root": root,
            "tools": {k: v for k, v in tools.items() if k in ("dcb", "ip", "ibv_devinfo")},
        }
    return a


def switch_args(inv: Inventory, *, root: str = "/") -> dict:
    sw = inv.switch
    a: dict = {"root": root}
    if sw.kind == "tofino":
        compilers = _defaults("tofino_sde").get("tofino_sde_compilers") or ["bf-p4c"]
        a["sde"] = {"sde": str(sw.sde), "install": str(sw.sde_install_path), "compilers": list(compilers)}
    return a


def _probe(r: Remote, args: dict, timeout: float) -> dict | str:
    """The machine's probe answer, or what went wrong as one string."""
    res = r.run(argv(args), timeout=timeout, check=False)
    if not res.ok:
        tail = " | ".join(res.stderr.strip().splitlines()[-3:])
        why = res.error or f"python3 exited with status {res.exit_code}"
        return why + (f": {tail}" if tail else "")
    try:
        out = json.loads(res.stdout)
    except ValueError:
        return f"the probe printed no JSON: {res.stdout.strip()[:300]!r}"
    return out if isinstance(out, dict) else f"the probe printed {type(out).__name__}, not an object"


def collect(inv: Inventory, *, timeout: float = PROBE_TIMEOUT_S) -> tuple[dict[str, dict | str], tuple | None]:
    """Every machine probed at once: {machine: its probe's answer, or an error string},
    and the switch software's liveness (None on a plain LAN)."""
    ts = targets(inv)
    by_name = {h.name: h for h in inv.hosts}
    args = {t.name: host_args(inv, by_name[t.name]) if t.role != "switch" else switch_args(inv) for t in ts}
    with Group(ts) as g, ThreadPoolExecutor(max_workers=len(ts) + 1, thread_name_prefix="rm-preflight") as pool:
        live = pool.submit(switchd.liveness, inv, timeout=LIVENESS_TIMEOUT_S) if inv.switch.programmable else None
        futures = {n: pool.submit(_probe, g.remotes[n], a, timeout) for n, a in args.items()}
        answers: dict[str, dict | str] = {}
        for n, f in futures.items():
            try:
                answers[n] = f.result()
            except Exception as e:  # noqa: BLE001 - a bug in one machine's probe is that machine's
                answers[n] = f"{type(e).__name__}: {e}"
        liveness = None
        if live is not None:
            try:
                liveness = live.result()
            except Exception as e:  # noqa: BLE001
                liveness = ("unknown", f"{type(e).__name__}: {e}")
    return answers, liveness
