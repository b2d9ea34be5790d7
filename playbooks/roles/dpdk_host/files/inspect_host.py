#!/usr/bin/env python3
"""dpdk_host's one look at a host: DPDK, hugetlbfs, the NIC, CPU isolation.

Run by the role (ansible.builtin.script) with one JSON argument; prints one JSON object.
It only reads: /sys, /proc, dpkg, apt's lists, a source build's files. Everything the
role decides is computed here from what is found, so tests can run it against a fake
/sys and /proc tree (`root`); the role itself only acts on the differences.
Standard library only: it runs with the host's own python3.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

MELLANOX = "0x15b3"


def read(path: str, default: str | None = None) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return default


def cpulist(text: str | None) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; anything unparsable (e.g. '(null)') -> []."""
    out: list[int] = []
    for part in (text or "").replace("\n", ",").split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            out.extend(range(lo, hi + 1))
    return sorted(set(out))


def cpumask(text: str | None) -> list[int]:
    """A hex CPU mask as in IRQBALANCE_BANNED_CPUS ('0000003c' or '00000000,0000003c')."""
    try:
        v = int((text or "").replace(",", "").strip() or "0", 16)
    except ValueError:
        return []
    return [i for i in range(v.bit_length()) if v >> i & 1]


def ranges(cpus: list[int]) -> str:
    """[2, 3, 4, 8] -> '2-4,8'."""
    out, cpus = [], sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=30, env={**os.environ, "LC_ALL": "C"}
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None


# -- DPDK ------------------------------------------------------------------------------


def packages(names: list[str]) -> dict:
    """Which of `names` dpkg has installed, and the version of the `dpdk` package."""
    status = {}
    out = (
        run(["dpkg-query", "--show", "--showformat=${Package}\t${db:Status-Abbrev}\t${Version}\n", *names, "dpdk"])
        or ""
    )
    for line in out.splitlines():
        name, _, rest = line.partition("\t")
        abbrev, _, version = rest.partition("\t")
        status[name.split(":")[0]] = (abbrev, version)
    ok = {n for n, (abbrev, _v) in status.items() if abbrev.startswith("ii")}
    return {"missing": [n for n in names if n not in ok], "dpdk": status["dpdk"][1] if "dpdk" in ok else "(none)"}


def dpdk_candidate() -> str:
    m = re.search(r"^\s*Candidate:\s*(\S+)", run(["apt-cache", "policy", "dpdk"]) or "", re.M)
    return m.group(1) if m else "(none)"


def dpdk_prefix(prefix: str) -> dict:
    """A meson-installed DPDK below `prefix`: its libdpdk.pc, version, and PMDs."""
    res: dict = {
        "prefix": prefix,
        "exists": os.path.isdir(prefix),
        "pc": None,
        "version": None,
        "mlx5_pmd": False,
        "pmds": [],
    }
    for here, _dirs, files in os.walk(prefix):
        if "libdpdk.pc" in files and os.path.basename(here) == "pkgconfig" and res["pc"] is None:
            res["pc"] = os.path.join(here, "libdpdk.pc")
        for f in files:
            m = re.match(r"librte_net_([a-z0-9_]+)\.so", f)
            if m and m.group(1) not in res["pmds"]:
                res["pmds"].append(m.group(1))
    if res["pc"]:
        m = re.search(r"^Version:\s*(\S+)", read(res["pc"], "") or "", re.M)
        res["version"] = m.group(1) if m else None
    res["pmds"].sort()
    res["mlx5_pmd"] = "mlx5" in res["pmds"]
    return res


def hugetlbfs(root: str, size_kb: int) -> dict:
    """Mounts of hugetlbfs and their page sizes (a mount without pagesize= has the default size)."""
    default_kb = None
    m = re.search(r"^Hugepagesize:\s*(\d+)\s*kB", read(os.path.join(root, "proc/meminfo"), "") or "", re.M)
    if m:
        default_kb = int(m.group(1))
    mounts = []
    for line in (read(os.path.join(root, "proc/mounts"), "") or "").splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] == "hugetlbfs":
            kb = default_kb
            pm = re.search(r"pagesize=(\d+)([KMG])", f[3])
            if pm:
                kb = int(pm.group(1)) * {"K": 1, "M": 1024, "G": 1048576}[pm.group(2)]
            mounts.append({"path": f[1], "size_kb": kb})
    return {"mounts": mounts, "mounted": any(x["size_kb"] == size_kb for x in mounts)}


# -- the NIC ---------------------------------------------------------------------------

TOOLS = {"ip": "ip", "modprobe": "modprobe"}  # the role passes its own (tests: a mock's)


def addresses(netdevs: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    text = run([TOOLS["ip"], "-j", "addr", "show"])
    try:
        links = json.loads(text) if text else []
    except ValueError:
        links = []
    for link in links:
        if link.get("ifname") in netdevs:
            out[link["ifname"]] = [a.get("local") for a in link.get("addr_info", []) if a.get("local")]
    return out


def mgmt_addresses(mgmt: str) -> list[str]:
    try:
        return sorted({ai[4][0] for ai in socket.getaddrinfo(mgmt, None)})
    except OSError:
        return [mgmt]


def nic(root: str, pci: str, mgmt: str) -> dict:
    dev = os.path.join(root, "sys/bus/pci/devices", pci)
    if not os.path.isdir(dev):
        return {"present": False}
    drv = os.path.join(dev, "driver")
    netdevs = sorted(os.listdir(os.path.join(dev, "net"))) if os.path.isdir(os.path.join(dev, "net")) else []
    rdma = sorted(os.listdir(os.path.join(dev, "infiniband"))) if os.path.isdir(os.path.join(dev, "infiniband")) else []
    numa = read(os.path.join(dev, "numa_node"), "-1")
    res = {
        "present": True,
        "vendor": read(os.path.join(dev, "vendor"), ""),
        "device": read(os.path.join(dev, "device"), ""),
        "driver": os.path.basename(os.readlink(drv)) if os.path.islink(drv) else "",
        "driver_override": read(os.path.join(dev, "driver_override"), "(null)"),
        "numa_node": int(numa) if numa and numa.lstrip("-").isdigit() else -1,
        "netdevs": netdevs,
        "rdma_devices": rdma,
        "iommu_group": os.path.basename(os.readlink(os.path.join(dev, "iommu_group")))
        if os.path.islink(os.path.join(dev, "iommu_group"))
        else None,
        "irqs": sorted(int(i) for i in os.listdir(os.path.join(dev, "msi_irqs")) if i.isdigit())
        if os.path.isdir(os.path.join(dev, "msi_irqs"))
        else [],
    }
    res["addresses"] = addresses(netdevs)
    mine = set(mgmt_addresses(mgmt)) if mgmt else set()
    res["mgmt_netdevs"] = sorted(n for n, addrs in res["addresses"].items() if mine & set(addrs))
    return res


def kernel(root: str) -> dict:
    mods = os.path.join(root, "sys/module")
    noiommu = read(os.path.join(root, "sys/module/vfio/parameters/enable_unsafe_noiommu_mode"), "N")
    iommu_dir = os.path.join(root, "sys/class/iommu")
    # What the kernel could load: modules.dep (modules) and modules.builtin (built in).
    release = os.uname().release
    known = set()
    for f in ("modules.dep", "modules.builtin"):
        for line in (read(os.path.join(root, "lib/modules", release, f), "") or "").splitlines():
            name = os.path.basename(line.split(":", 1)[0])
            known.add(re.sub(r"\.ko(\.[a-z]+)?$", "", name).replace("-", "_"))
    names = ("mlx5_core", "mlx5_ib", "vfio_pci", "vfio")
    return {
        "loaded": {m: os.path.isdir(os.path.join(mods, m)) for m in names},
        "available": {m: m in known or os.path.isdir(os.path.join(mods, m)) for m in names},
        "modprobe": shutil.which(TOOLS["modprobe"]) is not None,
        "iommu": bool(os.path.isdir(iommu_dir) and os.listdir(iommu_dir)),
        "noiommu": noiommu in ("Y", "1"),
        "release": release,
    }


# -- CPU isolation -----------------------------------------------------------------------


def isolation(root: str, cores: list[int], irqs: list[int]) -> dict:
    cpu = os.path.join(root, "sys/devices/system/cpu")
    online = cpulist(read(os.path.join(cpu, "online"), ""))
    isolated = cpulist(read(os.path.join(cpu, "isolated"), ""))
    nohz = cpulist(read(os.path.join(cpu, "nohz_full"), ""))
    cmdline = read(os.path.join(root, "proc/cmdline"), "") or ""
    irqbalance = False
    proc = os.path.join(root, "proc")
    for pid in os.listdir(proc) if os.path.isdir(proc) else []:
        if pid.isdigit() and read(os.path.join(proc, pid, "comm")) == "irqbalance":
            irqbalance = True
            break
    banned: list[int] = []
    for line in (read(os.path.join(root, "etc/default/irqbalance"), "") or "").splitlines():
        m = re.match(r'^\s*IRQBALANCE_BANNED_CPULIST\s*=\s*"?([^"#]*)"?', line)
        if m:
            banned += cpulist(m.group(1))
        m = re.match(r'^\s*IRQBALANCE_BANNED_CPUS\s*=\s*"?([0-9a-fA-F,]*)"?', line)
        if m:
            banned += cpumask(m.group(1))
    irq_on_cores = {}
    for irq in irqs:
        aff = cpulist(read(os.path.join(root, "proc/irq", str(irq), "smp_affinity_list"), ""))
        hit = sorted(set(aff) & set(cores))
        if hit:
            irq_on_cores[str(irq)] = hit
    governors = {}
    for c in cores:
        g = read(os.path.join(cpu, f"cpu{c}", "cpufreq", "scaling_governor"))
        if g is not None:
            governors[str(c)] = g
    return {
        "online": online,
        "isolated": isolated,
        "nohz_full": nohz,
        "cmdline": cmdline,
        "absent": sorted(set(cores) - set(online)) if online else [],
        "not_isolated": sorted(set(cores) - set(isolated)),
        "not_nohz_full": sorted(set(cores) - set(nohz)),
        "irqbalance": irqbalance,
        "irqbalance_banned": sorted(set(banned)),
        # irqbalance leaves isolated and nohz_full CPUs alone (it reads both lists).
        "irqbalance_on_cores": sorted(set(cores) - set(banned) - set(isolated) - set(nohz)) if irqbalance else [],
        "irq_on_cores": irq_on_cores,
        "cpufreq": bool(governors),
        "governors": governors,
        "not_performance": sorted(int(c) for c, g in governors.items() if g != "performance"),
        "cores_range": ranges(cores),
    }


def main(argv: list[str]) -> int:
    a = json.loads(argv[1])
    root = a.get("root", "/")
    TOOLS.update(a.get("tools") or {})
    out: dict = {"packages": packages(a["packages"])}
    if a["dpdk_source"] == "prefix":
        out["prefix"] = dpdk_prefix(a["dpdk_prefix"])
    elif out["packages"]["dpdk"] == "(none)":
        out["packages"]["candidate"] = dpdk_candidate()  # reading apt's lists takes a second
    out["hugetlbfs"] = hugetlbfs(root, int(a["hugepage_kb"]))
    out["kernel"] = kernel(root)
    out["nic"] = nic(root, a["pci"], a.get("mgmt", "")) if a.get("pci") else {"present": False, "vdev": True}
    if a.get("isolation", True):
        out["isolation"] = isolation(root, [int(c) for c in a.get("cores", [])], out["nic"].get("irqs", []))
    json.dump(out, sys.stdout, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
