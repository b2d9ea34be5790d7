#!/usr/bin/env python3
"""The roce role's one look at a ConnectX: everything RoCEv2 needs, read back.

Run by the role (ansible.builtin.script) with one JSON argument; prints one JSON object.
It only reads:
- sysfs: /sys/bus/pci/devices/<pci>/{infiniband,net}, /sys/class/infiniband/<dev>/ports/<p>/
  {link_layer,state,gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>,
  hw_counters/rx_icrc_encapsulated (RoCE packets dropped for a bad iCRC; mlx5, kernel 4.19,
  when the firmware has the counter)}, /sys/class/net/<netdev>/
  {mtu,operstate,ecn/roce_np/enable/<prio>,ecn/roce_rp/enable/<prio>} (the ecn folder is
  MLNX_OFED's; the inbox mlx5 driver has none, and the role says so);
- configfs: /sys/kernel/config/rdma_cm/<dev>/ports/<p>/default_roce_{mode,tos}
  (Documentation/ABI/testing/configfs-rdma_cm);
- the role's iCRC stamp in /run (JSON: how the check was turned off this boot, and the
  iCRC drop count then);
- tools: `dcb -N app show dev X dscp-prio`, `dcb pfc show dev X prio-pfc` (iproute2),
  `ibv_devinfo -d DEV -i PORT` (active_mtu), `ip -j addr/route/neigh`.
`root` (tests) moves the sysfs and configfs reads under a fake tree; tools come from PATH.
Standard library only: it runs with the host's own python3.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys

TOOLS = {"dcb": "dcb", "ip": "ip", "ibv_devinfo": "ibv_devinfo"}  # the role passes its own (tests: a mock's)


def read(path: str, default: str | None = None) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return default


def listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def run(argv: list[str]) -> str | None:
    """stdout of a tool, or None when it is not installed or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def run_json(argv: list[str]):
    text = run(argv)
    try:
        return json.loads(text) if text and text.strip() else []
    except ValueError:
        return []


def gid_of(ip: str) -> str:
    """The IPv4-mapped GID as sysfs prints it: 0000:0000:0000:0000:0000:ffff:0a0a:0102."""
    packed = ipaddress.IPv6Address("::ffff:" + ip).packed
    return ":".join(packed[i : i + 2].hex() for i in range(0, 16, 2))


def find_device(root: str, pci: str | None, rdma_device: str | None, netdev: str | None) -> dict:
    res: dict = {"pci_present": False, "rdma_device": None, "netdev": None, "problems": []}
    dev = os.path.join(root, "sys/bus/pci/devices", pci) if pci else None
    if dev and os.path.isdir(dev):
        res["pci_present"] = True
        res["pci_rdma_devices"] = listdir(os.path.join(dev, "infiniband"))
        res["pci_netdevs"] = listdir(os.path.join(dev, "net"))
    if rdma_device:
        if os.path.isdir(os.path.join(root, "sys/class/infiniband", rdma_device)):
            res["rdma_device"] = rdma_device
        else:
            res["problems"].append(f"no RDMA device {rdma_device} (hosts[].nic.rdma_device)")
    elif res.get("pci_rdma_devices"):
        res["rdma_device"] = res["pci_rdma_devices"][0]
    if netdev:
        if os.path.isdir(os.path.join(root, "sys/class/net", netdev)):
            res["netdev"] = netdev
        else:
            res["problems"].append(f"no network interface {netdev} (hosts[].nic.netdev)")
    elif res.get("pci_netdevs"):
        res["netdev"] = res["pci_netdevs"][0]
    return res


def port_of(root: str, dev: str, netdev: str | None) -> dict:
    """The device's port behind `netdev` (a ConnectX function has one: 1)."""
    ports_dir = os.path.join(root, "sys/class/infiniband", dev, "ports")
    ports = [p for p in listdir(ports_dir) if p.isdigit()]
    chosen = None
    for p in ports:
        if netdev and read(os.path.join(ports_dir, p, "gid_attrs/ndevs/0")) == netdev:
            chosen = p
            break
    chosen = chosen or (ports[0] if ports else None)
    if chosen is None:
        return {"port": None}
    pd = os.path.join(ports_dir, chosen)
    icrc = read(os.path.join(pd, "hw_counters", "rx_icrc_encapsulated"))
    return {
        "port": int(chosen),
        "link_layer": read(os.path.join(pd, "link_layer"), ""),
        "state": read(os.path.join(pd, "state"), ""),
        "icrc_drops": int(icrc) if icrc and icrc.isdigit() else None,
        "dir": pd,
    }


def gids(port_dir: str, want: str, netdev: str | None) -> dict:
    """Every populated GID entry; the RoCE v2 one of the data IP."""
    entries = []
    found = None
    for i in sorted(int(x) for x in listdir(os.path.join(port_dir, "gids")) if x.isdigit()):
        g = read(os.path.join(port_dir, "gids", str(i)), "")
        if not g or set(g.replace(":", "")) == {"0"}:
            continue  # an empty slot
        t = read(os.path.join(port_dir, "gid_attrs/types", str(i)), "")
        nd = read(os.path.join(port_dir, "gid_attrs/ndevs", str(i)), "")
        entries.append({"index": i, "gid": g, "type": t, "ndev": nd})
        if found is None and g == want and t == "RoCE v2" and (not netdev or not nd or nd == netdev):
            found = i
    return {"gid_entries": entries, "gid_index_found": found}


def dcb_app(netdev: str) -> dict[str, list[int]] | None:
    text = run([TOOLS["dcb"], "-N", "app", "show", "dev", netdev, "dscp-prio"])
    if text is None:
        return None
    out: dict[str, list[int]] = {}
    for d, p in re.findall(r"(\d+):(\d+)", text):
        out.setdefault(d, []).append(int(p))
    return out


def dcb_pfc(netdev: str) -> dict[str, bool] | None:
    text = run([TOOLS["dcb"], "pfc", "show", "dev", netdev, "prio-pfc"])
    if text is None:
        return None
    return {p: v == "on" for p, v in re.findall(r"(\d):(on|off)", text)}


def missing_packages(names: list[str]) -> list[str]:
    if not names:
        return []
    try:  # dpkg-query exits 1 when a name is unknown to it: read what it printed anyway
        out = subprocess.run(
            ["dpkg-query", "--show", "--showformat=${Package}\t${db:Status-Abbrev}\n", *names],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    ok = {line.split("\t")[0].split(":")[0] for line in out.splitlines() if "\tii" in line}
    return [n for n in names if n not in ok]


def main(argv: list[str]) -> int:
    a = json.loads(argv[1])
    root = a.get("root", "/")
    TOOLS.update({k: v for k, v in (a.get("tools") or {}).items() if k in TOOLS})
    prio = str(a["priority"])
    out: dict = {
        "tools": {t: shutil.which(path) is not None for t, path in TOOLS.items()},
        "missing_packages": missing_packages(a.get("packages", [])),
    }
    if a.get("facts_only"):
        a = {**a, "pci": None, "rdma_device": None, "netdev": None}
    out.update(find_device(root, a.get("pci"), a.get("rdma_device"), a.get("netdev")))
    dev, netdev = out["rdma_device"], out["netdev"]
    out["want_gid"] = gid_of(a["ip"])
    if dev:
        out.update(port_of(root, dev, netdev))
        if out.get("dir"):
            out.update(gids(out.pop("dir"), out["want_gid"], netdev))
            info = run([TOOLS["ibv_devinfo"], "-d", dev, "-i", str(out["port"])]) or ""
            m = re.search(r"active_mtu:\s*(\d+)", info)
            out["active_mtu"] = int(m.group(1)) if m else None
        cfg = os.path.join(root, "sys/kernel/config")
        mounts = read(os.path.join(root, "proc/mounts"), "") or ""
        out["configfs_mounted"] = any(
            f[1:3] == ["/sys/kernel/config", "configfs"] for f in (line.split() for line in mounts.splitlines())
        )
        out["rdma_cm_loaded"] = os.path.isdir(os.path.join(root, "sys/module/rdma_cm"))
        if out.get("port") is not None:
            pd = os.path.join(cfg, "rdma_cm", dev, "ports", str(out["port"]))
            out["cm_mode"] = read(os.path.join(pd, "default_roce_mode"))
            out["cm_tos"] = read(os.path.join(pd, "default_roce_tos"))
    if netdev:
        nd = os.path.join(root, "sys/class/net", netdev)
        mtu = read(os.path.join(nd, "mtu"))
        out["netdev_mtu"] = int(mtu) if mtu and mtu.isdigit() else None
        out["operstate"] = read(os.path.join(nd, "operstate"), "")
        ecn = os.path.join(nd, "ecn")
        out["ecn_sysfs"] = os.path.isdir(ecn)
        out["ecn"] = (
            {k: read(os.path.join(ecn, k, "enable", prio)) for k in ("roce_np", "roce_rp")} if out["ecn_sysfs"] else {}
        )
        out["dscp_prio"] = dcb_app(netdev)
        out["pfc"] = dcb_pfc(netdev)
        links = run_json([TOOLS["ip"], "-j", "addr", "show", "dev", netdev])
        out["ipv4"] = [
            f"{x['local']}/{x.get('prefixlen')}"
            for link in links
            for x in link.get("addr_info", [])
            if x.get("family") == "inet"
        ]
        route = run_json([TOOLS["ip"], "-j", "route", "get", a["service_ip"]])
        out["service_route_dev"] = route[0].get("dev") if route else None
        neigh = run_json([TOOLS["ip"], "-j", "neigh", "show", a["service_ip"], "dev", netdev])
        out["service_neigh"] = {"lladdr": neigh[0].get("lladdr"), "state": neigh[0].get("state", [])} if neigh else None
    stamp = read(a["icrc_stamp"]) if a.get("icrc_stamp") else None
    try:  # absent: not turned off since boot; an older role's empty stamp: {}
        out["icrc_stamp"] = None if stamp is None else json.loads(stamp) if stamp else {}
    except ValueError:
        out["icrc_stamp"] = {}
    facts = read(a["facts_file"]) if a.get("facts_file") else None
    try:
        out["facts"] = json.loads(facts) if facts else None
    except ValueError:
        out["facts"] = None
    out["facts_dir"] = bool(a.get("facts_file")) and os.path.isdir(os.path.dirname(a["facts_file"]))
    json.dump(out, sys.stdout, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
