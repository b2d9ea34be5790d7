#!/usr/bin/env python3
"""A MOCK ConnectX, for machines that have none (this one has no RDMA device at all).

`build(root, ...)` writes a fake machine tree under `root`: /sys with one mlx5 PCI
function, its RDMA device (one RoCE port) and its netdev, /proc (mounts, meminfo, IRQ
affinities), /lib/modules (modules.dep), and `root/bin/` holding stand-ins for the tools
the dpdk_host and roce roles run: ip, dcb, ibv_devinfo, modprobe, mount, mkdir. Each
stand-in is this file (a symlink; it acts by the name it was called with) and reads and
changes the tree, so the roles converge against it, run again, verify and break it the
way they would a real host.

What it models, from the kernel's documented behaviour:
- an address added to the netdev adds its RoCE v1 and v2 GIDs (::ffff:a.b.c.d) to the
  port's GID table, at the first free indices (the kernel's RoCE GID manager);
- the port's active MTU is the largest IB MTU <= netdev MTU - 80 (iboe_get_mtu);
- rdma_cm's configfs folder appears once rdma_cm is loaded and configfs is mounted, and
  mkdir of a device's folder creates its ports/<p>/default_roce_{mode,tos};
- dcb keeps the DSCP->priority APP entries and the PFC map it is given;
- the port's hw_counters/rx_icrc_encapsulated (RoCE packets dropped for a bad iCRC, as
  mlx5 exposes it) starts at 0; tests raise it to play a NIC whose check is still on.
What it does not check: anything about the NIC itself (firmware, DSCP trust taking
effect, PFC or ECN on the wire), and every tool accepts only the argument forms the
roles use: anything else exits 2 naming the call, so a role that changes its commands
fails here loudly instead of passing against a lenient fake.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys

TOOLS = ("ip", "dcb", "ibv_devinfo", "modprobe", "mount", "mkdir")
IB_MTUS = (256, 512, 1024, 2048, 4096)
MODULES = ("mlx5_core", "mlx5_ib", "rdma_cm", "vfio", "vfio-pci")


def _w(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)


def _r(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def gid_of(ip: str) -> str:
    packed = ipaddress.IPv6Address("::ffff:" + ip).packed
    return ":".join(packed[i : i + 2].hex() for i in range(0, 16, 2))


def build(
    root: str,
    *,
    pci: str,
    rdma_device: str = "mlx5_0",
    netdev: str = "enp59s0f0np0",
    numa_node: int = 0,
    ecn_sysfs: bool = True,
    cpus: int = 8,
    irq_affinity: str = "0-7",
    other_vendor: bool = False,
    iommu: bool = False,
) -> None:
    """Write the fake machine under `root` (a folder that exists) and its tools in root/bin.
    other_vendor: the PCI function is an Intel E810 on the ice driver instead (no RDMA
    device), for the vfio-pci path; iommu: the machine has an IOMMU."""
    sysd = os.path.join(root, "sys")
    dev = os.path.join(sysd, "bus/pci/devices", pci)
    _w(os.path.join(dev, "vendor"), "0x8086\n" if other_vendor else "0x15b3\n")
    _w(os.path.join(dev, "device"), "0x1592\n" if other_vendor else "0x1017\n")  # E810 / ConnectX-5
    _w(os.path.join(dev, "numa_node"), f"{numa_node}\n")
    _w(os.path.join(dev, "driver_override"), "(null)\n")
    drivers = os.path.join(sysd, "bus/pci/drivers", "ice" if other_vendor else "mlx5_core")
    os.makedirs(drivers, exist_ok=True)
    os.symlink(drivers, os.path.join(dev, "driver"))
    os.makedirs(os.path.join(dev, "net", netdev))
    if not other_vendor:
        os.makedirs(os.path.join(dev, "infiniband", rdma_device))
    if iommu:
        os.makedirs(os.path.join(sysd, "class/iommu/dmar0"))
        os.makedirs(os.path.join(sysd, "kernel/iommu_groups/17"))
        os.symlink(os.path.join(sysd, "kernel/iommu_groups/17"), os.path.join(dev, "iommu_group"))
    for irq in (100, 101, 102):
        os.makedirs(os.path.join(dev, "msi_irqs", str(irq)))
        _w(os.path.join(root, "proc/irq", str(irq), "smp_affinity_list"), irq_affinity + "\n")
    port = os.path.join(sysd, "class/infiniband", rdma_device, "ports/1")
    _w(os.path.join(port, "link_layer"), "Ethernet\n")
    _w(os.path.join(port, "state"), "4: ACTIVE\n")
    _w(os.path.join(port, "hw_counters/rx_icrc_encapsulated"), "0\n")
    for i in range(16):
        _w(os.path.join(port, "gids", str(i)), "0000:0000:0000:0000:0000:0000:0000:0000\n")
    # The link-local GIDs every RoCE port has (v1 and v2 of fe80::).
    for i, kind in ((0, "IB/RoCE v1"), (1, "RoCE v2")):
        _w(os.path.join(port, "gids", str(i)), "fe80:0000:0000:0000:0e42:a1ff:fedd:6010\n")
        _w(os.path.join(port, "gid_attrs/types", str(i)), kind + "\n")
        _w(os.path.join(port, "gid_attrs/ndevs", str(i)), netdev + "\n")
    net = os.path.join(sysd, "class/net", netdev)
    _w(os.path.join(net, "mtu"), "1500\n")
    _w(os.path.join(net, "operstate"), "down\n")
    if ecn_sysfs:
        for side, on in (("roce_np", "0"), ("roce_rp", "0")):
            for p in range(8):
                _w(os.path.join(net, "ecn", side, "enable", str(p)), on + "\n")
    os.makedirs(os.path.join(sysd, "module"), exist_ok=True)
    os.makedirs(os.path.join(root, "run"), exist_ok=True)  # a tmpfs on a real machine
    os.makedirs(os.path.join(sysd, "kernel/config"), exist_ok=True)
    cpu = os.path.join(sysd, "devices/system/cpu")
    _w(os.path.join(cpu, "online"), f"0-{cpus - 1}\n")
    _w(os.path.join(cpu, "isolated"), "\n")
    _w(os.path.join(cpu, "nohz_full"), "(null)\n")
    _w(os.path.join(root, "proc/mounts"), "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n")
    _w(os.path.join(root, "proc/meminfo"), "MemTotal: 65536000 kB\nHugepagesize:       2048 kB\n")
    _w(os.path.join(root, "proc/cmdline"), "BOOT_IMAGE=/vmlinuz root=/dev/sda1\n")
    release = os.uname().release
    dep = "".join(f"kernel/drivers/mock/{m}.ko:\n" for m in MODULES)
    _w(os.path.join(root, "lib/modules", release, "modules.dep"), dep)
    _w(
        os.path.join(root, "mock/state.json"),
        json.dumps(
            {
                "netdev": netdev,
                "rdma_device": rdma_device,
                "addrs": [],
                "routes": {},
                "neigh": {},
                "dscp_prio": {},
                "pfc": {str(p): False for p in range(8)},
                "calls": [],
            }
        ),
    )
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    me = os.path.abspath(__file__)
    for t in TOOLS:
        os.symlink(me, os.path.join(root, "bin", t))


def tools(root: str) -> dict[str, str]:
    return {t: os.path.join(root, "bin", t) for t in TOOLS}


def icrc_drops(root: str, rdma_device: str = "mlx5_0", n: int | None = None) -> int:
    """The port's count of RoCE packets dropped for a bad iCRC; set it to n first if given."""
    path = os.path.join(root, "sys/class/infiniband", rdma_device, "ports/1/hw_counters/rx_icrc_encapsulated")
    if n is not None:
        _w(path, f"{n}\n")
    return int(_r(path))


def calls(root: str) -> list[list[str]]:
    """Every call the tools received that changed something, in order."""
    return json.loads(_r(os.path.join(root, "mock/state.json")))["calls"]


# -- the tools --------------------------------------------------------------------------------


class Usage(Exception):
    pass


class Mock:
    def __init__(self, root: str):
        self.root = root
        self.state_file = os.path.join(root, "mock/state.json")
        self.s = json.loads(_r(self.state_file))
        self.net = os.path.join(root, "sys/class/net", self.s["netdev"])
        self.port = os.path.join(root, "sys/class/infiniband", self.s["rdma_device"], "ports/1")

    def save(self, argv: list[str]) -> None:
        self.s["calls"].append(argv)
        _w(self.state_file, json.dumps(self.s))

    def dev(self, name: str) -> None:
        if name != self.s["netdev"]:
            print(f'Cannot find device "{name}"', file=sys.stderr)
            raise SystemExit(1)

    # ip -------------------------------------------------------------------------------------
    def ip(self, a: list[str]) -> str:
        nd = self.s["netdev"]
        if a[:3] == ["-j", "addr", "show"]:
            if a[3:] and a[3:] != ["dev", nd]:
                self.dev(a[4])
            info = [
                {"family": "inet", "local": x.split("/")[0], "prefixlen": int(x.split("/")[1])} for x in self.s["addrs"]
            ]
            return json.dumps([{"ifname": nd, "mtu": int(_r(os.path.join(self.net, "mtu"))), "addr_info": info}])
        if a[:3] == ["-j", "route", "get"] and len(a) == 4:
            dst = ipaddress.IPv4Address(a[3])
            on_link = any(dst in ipaddress.IPv4Interface(x).network for x in self.s["addrs"])
            if a[3] in self.s["routes"] or on_link:
                return json.dumps([{"dst": a[3], "dev": nd}])
            print("RTNETLINK answers: Network is unreachable", file=sys.stderr)
            raise SystemExit(2)
        if a[:3] == ["-j", "neigh", "show"] and len(a) == 6 and a[4] == "dev":
            self.dev(a[5])
            n = self.s["neigh"].get(a[3])
            return json.dumps([{"dst": a[3], "lladdr": n, "state": ["PERMANENT"]}] if n else [])
        if a[:3] == ["link", "set", "dev"] and len(a) == 6 and a[4] == "mtu":
            self.dev(a[3])
            _w(os.path.join(self.net, "mtu"), f"{int(a[5])}\n")
            return ""
        if a[:3] == ["link", "set", "dev"] and len(a) == 5 and a[4] == "up":
            self.dev(a[3])
            _w(os.path.join(self.net, "operstate"), "up\n")
            return ""
        if a[:2] == ["addr", "add"] and len(a) == 5 and a[3] == "dev":
            self.dev(a[4])
            ipaddress.IPv4Interface(a[2])
            if a[2] in self.s["addrs"]:
                print("RTNETLINK answers: File exists", file=sys.stderr)
                raise SystemExit(2)
            self.s["addrs"].append(a[2])
            self.add_gids(a[2].split("/")[0])
            return ""
        if a[:2] == ["route", "replace"] and len(a) == 5 and a[2].endswith("/32") and a[3] == "dev":
            self.dev(a[4])
            self.s["routes"][a[2][:-3]] = a[4]
            return ""
        if (
            a[:2] == ["neigh", "replace"]
            and len(a) == 9
            and a[3] == "lladdr"
            and a[5] == "dev"
            and a[7:] == ["nud", "permanent"]
        ):
            self.dev(a[6])
            self.s["neigh"][a[2]] = a[4].lower()
            return ""
        raise Usage()

    def add_gids(self, ip: str) -> None:
        free = [i for i in range(16) if set(_r(os.path.join(self.port, "gids", str(i))).replace(":", "")) == {"0"}]
        for i, kind in zip(free, ("IB/RoCE v1", "RoCE v2")):
            _w(os.path.join(self.port, "gids", str(i)), gid_of(ip) + "\n")
            _w(os.path.join(self.port, "gid_attrs/types", str(i)), kind + "\n")
            _w(os.path.join(self.port, "gid_attrs/ndevs", str(i)), self.s["netdev"] + "\n")

    # dcb ------------------------------------------------------------------------------------
    def dcb(self, a: list[str]) -> str:
        if a[:3] == ["-N", "app", "show"] and len(a) == 6 and a[5] == "dscp-prio":
            self.dev(a[4])
            pairs = sorted((int(d), p) for d, ps in self.s["dscp_prio"].items() for p in ps)
            return "dscp-prio " + " ".join(f"{d}:{p}" for d, p in pairs) + "\n"
        if a[:2] == ["app", "replace"] and len(a) == 6 and a[4] == "dscp-prio":
            self.dev(a[3])
            d, p = a[5].split(":")
            if not (0 <= int(d) <= 63 and 0 <= int(p) <= 7):
                raise Usage()
            self.s["dscp_prio"][str(int(d))] = [int(p)]
            return ""
        if a[:2] == ["pfc", "show"] and len(a) == 5 and a[4] == "prio-pfc":
            self.dev(a[3])
            return "prio-pfc " + " ".join(f"{p}:{'on' if self.s['pfc'][str(p)] else 'off'}" for p in range(8)) + "\n"
        if a[:2] == ["pfc", "set"] and len(a) >= 6 and a[4] == "prio-pfc":
            self.dev(a[3])
            for m in a[5:]:
                p, v = m.split(":")
                if p not in self.s["pfc"] or v not in ("on", "off"):
                    raise Usage()
                self.s["pfc"][p] = v == "on"
            return ""
        raise Usage()

    # the rest ------------------------------------------------------------------------------
    def ibv_devinfo(self, a: list[str]) -> str:
        if len(a) != 4 or a[0] != "-d" or a[2] != "-i" or a[1] != self.s["rdma_device"] or a[3] != "1":
            raise Usage()
        usable = int(_r(os.path.join(self.net, "mtu"))) - 80
        active = max([m for m in IB_MTUS if m <= usable] or [256])
        return (
            f"hca_id:\t{a[1]}\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n"
            f"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
            f"\t\t\tactive_mtu:\t\t{active} ({IB_MTUS.index(active) + 1})\n\t\t\tlink_layer:\t\tEthernet\n"
        )

    def modprobe(self, a: list[str]) -> str:
        if len(a) != 1:
            raise Usage()
        name = a[0].replace("-", "_")
        if name not in [m.replace("-", "_") for m in MODULES]:
            print(f"modprobe: FATAL: Module {a[0]} not found", file=sys.stderr)
            raise SystemExit(1)
        os.makedirs(os.path.join(self.root, "sys/module", name), exist_ok=True)
        self.configfs_rdma_cm()
        return ""

    def mount(self, a: list[str]) -> str:
        if a != ["-t", "configfs", "none", os.path.join(self.root, "sys/kernel/config")]:
            raise Usage()
        with open(os.path.join(self.root, "proc/mounts"), "a") as fh:
            fh.write("configfs /sys/kernel/config configfs rw,relatime 0 0\n")
        self.configfs_rdma_cm()
        return ""

    def configfs_rdma_cm(self) -> None:
        mounted = "/sys/kernel/config configfs" in _r(os.path.join(self.root, "proc/mounts"))
        if mounted and os.path.isdir(os.path.join(self.root, "sys/module/rdma_cm")):
            os.makedirs(os.path.join(self.root, "sys/kernel/config/rdma_cm"), exist_ok=True)

    def mkdir(self, a: list[str]) -> str:
        cm = os.path.join(self.root, "sys/kernel/config/rdma_cm")
        if len(a) != 1 or os.path.dirname(a[0]) != cm or not os.path.isdir(cm):
            raise Usage()
        if os.path.basename(a[0]) != self.s["rdma_device"]:
            print(f"mkdir: cannot create directory '{a[0]}': No such device", file=sys.stderr)
            raise SystemExit(1)
        os.mkdir(a[0])
        _w(os.path.join(a[0], "ports/1/default_roce_mode"), "IB/RoCE v1\n")
        _w(os.path.join(a[0], "ports/1/default_roce_tos"), "0\n")
        return ""


def main() -> int:
    name = os.path.basename(sys.argv[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0])))
    if name not in TOOLS:
        print(f"mock_connectx: called as {name}; link it as one of {', '.join(TOOLS)}", file=sys.stderr)
        return 2
    m = Mock(root)
    argv = sys.argv[1:]
    try:
        out = getattr(m, name)(argv)
    except Usage:
        print(f"mock_connectx: {name} {' '.join(argv)}: not a call the roles make", file=sys.stderr)
        return 2
    except (ValueError, IndexError) as e:
        print(f"mock_connectx: {name} {' '.join(argv)}: {e}", file=sys.stderr)
        return 2
    if not (name in ("ip", "dcb") and ("show" in argv or "get" in argv)) and name != "ibv_devinfo":
        m.save([name, *argv])
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
