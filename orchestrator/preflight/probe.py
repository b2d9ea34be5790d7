"""The preflight's one look at a machine, run there by the machine's own python3.

Standard library only: it is not deployed, it is sent. The orchestrator (collect.py)
passes this file and the roles' inspection scripts (playbooks/roles/dpdk_host/files/
inspect_host.py, playbooks/roles/roce/files/inspect_roce.py) in one argument, loads
them as modules there, and calls `main(args_json, modules)`: one JSON in, one JSON out,
as the roles run those scripts. What the roles already read (DPDK, hugetlbfs, the NIC's
driver, CPU isolation and governors; RoCE's DSCP, PFC, ECN, GIDs and the iCRC stamp) is
theirs: this script calls their `main` with the arguments the roles give and keeps the
answer. It adds only what no role reads:

- the kernel's release and build options, from /proc/config.gz or
  /boot/config-<release>, and, because either may be missing, what the running kernel
  actually offers: socket(AF_KCM) (EAFNOSUPPORT: no KCM), setsockopt(TCP_ULP, "tls")
  on a TCP socket (ENOTCONN: kTLS is there, ENOENT: it is not), /sys/class/infiniband
  and /sys/module/{ib_core,ib_uverbs,rdma_rxe};
- the huge page pools (/sys/kernel/mm/hugepages/hugepages-<kB>kB/{nr,free}_hugepages);
- `pkg-config --modversion libdpdk`, when neither dpkg nor a prefix names a DPDK;
- the clock source (/sys/devices/system/clocksource/clocksource0/current_clocksource);
- the data netdev's timestamping (`ethtool -T`, else the SIOCETHTOOL GET_TS_INFO ioctl);
- on a Tofino switch, the SDE as the tofino_sde role lays it out ($SDE/bf-sde-<version>
  .manifest, else the compiler's --version; $SDE_INSTALL/bin/bf_switchd) and whether a
  bf_switchd process runs.

`root` moves every file read under a fake tree (tests: tests/mock_connectx); tools come
from `tools` (tests: the mock's). Each section that fails is reported in `errors` and
the others still are: one broken reader never hides the rest.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import json
import os
import re
import shutil
import socket
import struct
import subprocess

TOOLS = {"ethtool": "ethtool", "pkg-config": "pkg-config"}
# The build options the preflight reports (CONFIG_ dropped); which ones a spec needs is
# the orchestrator's business (orchestrator/preflight/needs.py).
KCONFIG = (
    "AF_KCM",
    "BPF_SYSCALL",
    "TLS",
    "INFINIBAND",
    "INFINIBAND_USER_ACCESS",
    "MLX5_CORE",
    "MLX5_INFINIBAND",
    "RDMA_RXE",
    "HUGETLBFS",
    "VFIO_PCI",
)
AF_KCM = 41  # include/linux/socket.h
TCP_ULP = 31  # include/uapi/linux/tcp.h
SIOCETHTOOL = 0x8946
ETHTOOL_GET_TS_INFO = 0x41
# include/uapi/linux/net_tstamp.h: SOF_TIMESTAMPING_* bits ethtool -T names
TS_BITS = {
    0: "hardware-transmit",
    1: "software-transmit",
    2: "hardware-receive",
    3: "software-receive",
    4: "software-system-clock",
    6: "hardware-raw-clock",
}


def read(path: str, default: str | None = None) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return default


def run(argv: list[str]) -> str | None:
    """stdout of a tool, or None when it is not installed or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


# -- the kernel --------------------------------------------------------------------------


def kernel_config(root: str, release: str) -> dict:
    """The build options of KCONFIG ('y', 'm' or 'n') and the file they came from."""
    text, source = None, None
    gz = os.path.join(root, "proc/config.gz")
    try:
        with gzip.open(gz, "rt") as fh:
            text, source = fh.read(), "/proc/config.gz"
    except (OSError, EOFError):
        boot = os.path.join(root, "boot", f"config-{release}")
        text = read(boot)
        source = f"/boot/config-{release}" if text is not None else None
    if text is None:
        return {"source": None, "options": {}}
    opts = {}
    for name in KCONFIG:
        m = re.search(rf"^CONFIG_{name}=(\S+)", text, re.M)
        opts[name] = m.group(1) if m else "n"  # "# CONFIG_X is not set", or absent
    return {"source": source, "options": opts}


def _errno_name(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno))


def kernel_offers(root: str) -> dict:
    """What the running kernel offers, asked directly (the answer when no config file is
    there; modules load on demand, so these may load kcm or tls)."""
    out: dict = {}
    try:
        socket.socket(AF_KCM, socket.SOCK_DGRAM, 0).close()
        out["af_kcm"] = "yes"
    except OSError as e:
        out["af_kcm"] = _errno_name(e)  # EAFNOSUPPORT: built without CONFIG_AF_KCM
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
        out["tls"] = "yes"
    except OSError as e:  # ENOTCONN: the ULP exists, the socket is not connected
        out["tls"] = "yes" if e.errno == errno.ENOTCONN else _errno_name(e)
    finally:
        s.close()
    ib = os.path.join(root, "sys/class/infiniband")
    out["rdma_devices"] = sorted(os.listdir(ib)) if os.path.isdir(ib) else []
    mods = os.path.join(root, "sys/module")
    out["modules"] = {m: os.path.isdir(os.path.join(mods, m)) for m in ("ib_core", "ib_uverbs", "rdma_rxe", "kcm")}
    return out


# -- memory, clock, timestamps -----------------------------------------------------------


def hugepage_pools(root: str) -> dict:
    """Per page size (kB): the pool's pages and the free ones."""
    base = os.path.join(root, "sys/kernel/mm/hugepages")
    out = {}
    for d in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        m = re.fullmatch(r"hugepages-(\d+)kB", d)
        if m:
            n = {k: read(os.path.join(base, d, f"{k}_hugepages"), "0") for k in ("nr", "free")}
            out[m.group(1)] = {k: int(v) if v and v.isdigit() else 0 for k, v in n.items()}
    return out


def clocksource(root: str) -> dict:
    d = os.path.join(root, "sys/devices/system/clocksource/clocksource0")
    return {
        "current": read(os.path.join(d, "current_clocksource")),
        "available": (read(os.path.join(d, "available_clocksource"), "") or "").split(),
    }


def _ethtool_ts(text: str) -> dict:
    caps = re.search(r"Capabilities:\n((?:\s+\S.*\n?)*)", text)
    phc = re.search(r"PTP Hardware Clock:\s*(\S+)", text)
    return {
        "capabilities": [c.strip().split()[0] for c in caps.group(1).splitlines() if c.strip()] if caps else [],
        "phc": None if not phc or phc.group(1) == "none" else phc.group(1),
        "via": "ethtool -T",
    }


def _ioctl_ts(netdev: str) -> dict:
    """SIOCETHTOOL ETHTOOL_GET_TS_INFO: struct ethtool_ts_info is 11 u32 (cmd,
    so_timestamping, phc_index, tx_types, 3 reserved, rx_filters, 3 reserved)."""
    import array
    import fcntl

    buf = array.array("B", struct.pack("=I", ETHTOOL_GET_TS_INFO) + bytes(40))
    addr, _n = buf.buffer_info()
    ifreq = struct.pack("16sP", netdev.encode()[:15], addr) + bytes(16)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)
    _cmd, so, phc = struct.unpack_from("=IIi", buf.tobytes())
    return {
        "capabilities": [name for bit, name in sorted(TS_BITS.items()) if so >> bit & 1],
        "phc": None if phc < 0 else str(phc),
        "via": "SIOCETHTOOL",
    }


def timestamping(netdev: str) -> dict:
    text = run([TOOLS["ethtool"], "-T", netdev])
    if text is not None:
        return {"netdev": netdev, **_ethtool_ts(text)}
    try:
        return {"netdev": netdev, **_ioctl_ts(netdev)}
    except OSError as e:
        return {"netdev": netdev, "capabilities": None, "phc": None, "via": None, "error": f"{_errno_name(e)}: {e}"}


# -- the switch's SDE --------------------------------------------------------------------


def sde(a: dict) -> dict:
    """The SDE as the tofino_sde role finds it (roles/tofino_sde/tasks/inspect.yml)."""
    root, sde_dir, inst = a.get("root", "/"), a["sde"], a["install"]
    out: dict = {
        "sde": os.path.isdir(sde_dir),
        "install": os.path.isdir(inst),
        "switchd": os.access(os.path.join(inst, "bin/bf_switchd"), os.X_OK),
        "version": None,
        "version_from": None,
    }
    manifests = sorted(f for f in os.listdir(sde_dir) if re.fullmatch(r"bf-sde-.+\.manifest", f)) if out["sde"] else []
    if len(manifests) == 1:
        out["version"] = manifests[0][len("bf-sde-") : -len(".manifest")]
        out["version_from"] = os.path.join(sde_dir, manifests[0])
    elif len(manifests) > 1:
        out["version_from"] = f"{len(manifests)} manifests in {sde_dir}"
    else:
        for c in a.get("compilers", ()):
            path = os.path.join(inst, "bin", c)
            if os.access(path, os.X_OK):
                m = re.search(r"\d+\.\d+\.\d+", run([path, "--version"]) or "")
                out["version"], out["version_from"] = (m.group(0) if m else None), f"{path} --version"
                break
    proc = os.path.join(root, "proc")
    out["switchd_running"] = any(
        read(os.path.join(proc, p, "comm")) == "bf_switchd" for p in os.listdir(proc) if p.isdigit()
    )
    return out


# -- one machine ---------------------------------------------------------------------------


def _role_script(module, args: dict) -> dict:
    """A role's inspection script, as the role runs it: main([name, json]) -> one JSON on stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main([module.__name__, json.dumps(args)])
    return json.loads(out.getvalue())


def _sections(a: dict, modules: dict) -> dict:
    """name -> a function giving that section (each run alone: see main)."""
    root = a.get("root", "/")
    release = a.get("release") or os.uname().release
    s: dict = {
        "kernel": lambda: {"release": release, **kernel_config(root, release), "offers": kernel_offers(root)},
        "clocksource": lambda: clocksource(root),
        "hugepages": lambda: hugepage_pools(root),
    }
    if a.get("host") is not None:
        host_args = dict(a["host"])
        if host_args.get("isolation") and not host_args.get("cores"):  # nothing pinned: every online CPU
            online = modules["inspect_host"].cpulist(read(os.path.join(root, "sys/devices/system/cpu/online"), ""))
            host_args["cores"] = online
        s["host"] = lambda: _role_script(modules["inspect_host"], host_args)
        s["dpdk_pkgconfig"] = lambda: (run([TOOLS["pkg-config"], "--modversion", "libdpdk"]) or "").strip() or None
    if a.get("roce") is not None:
        s["roce"] = lambda: _role_script(modules["inspect_roce"], a["roce"])
    if a.get("vdev_iface"):
        iface = a["vdev_iface"]
        s["vdev"] = lambda: {"iface": iface, "present": os.path.isdir(os.path.join(root, "sys/class/net", iface))}
    if a.get("sde") is not None:
        s["sde"] = lambda: sde({"root": root, **a["sde"]})
    return s


def main(args_json: str, modules: dict) -> int:
    """Probe this machine as `args_json` asks; print one JSON object."""
    a = json.loads(args_json)
    TOOLS.update({k: v for k, v in (a.get("tools") or {}).items() if k in TOOLS})
    out: dict = {"errors": {}}
    for name, fn in _sections(a, modules).items():
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - reported, and the other sections still run
            out[name] = None
            out["errors"][name] = f"{type(e).__name__}: {e}"
    netdev = a.get("netdev")
    if not netdev and out.get("host"):
        netdev = next(iter((out["host"].get("nic") or {}).get("netdevs") or []), None)
    netdev = netdev or (a.get("vdev_iface") if (out.get("vdev") or {}).get("present") else None)
    if netdev:
        try:
            out["timestamping"] = timestamping(netdev)
        except Exception as e:  # noqa: BLE001
            out["errors"]["timestamping"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out, sort_keys=True))
    return 0
