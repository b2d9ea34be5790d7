"""Kernel TCP on a host's data interface, for the server-side systems (Rakaia's measured
layer): their programs use the kernel's own stack, where Rain's use DPDK on the same
interface.

    attach("data0", "10.80.9.1", peers=["10.80.9.2"], gateway_mac="02:52:4d:09:ff:fe")
    ...
    detach("data0", "10.80.9.1", peers=["10.80.9.2"])

attach gives the interface its data IP as a /32 (no connected route: nothing else of
the subnet is reached by ARP), a /32 route and a permanent neighbour for each peer at the
switch's MAC (the switch routes by destination IP and rewrites the MAC, as it does for
Rain), and turns segmentation and receive offloads off, so the frames the switch sees
are frames of the wire's MTU. detach undoes exactly that, and is idempotent: Rain's
DPDK programs need the interface without a kernel IP (the kernel would answer their UDP
with ICMP port-unreachable).

On a plain LAN (no gateway MAC: the inventory's switch.kind is lan) the hosts find each
other by ARP, as any cluster's hosts do. An interface that already has the data IP (the
cluster configured it, as CloudLab does) is left exactly as it is, offloads included;
one without it gets the /32 and the peers' /32 routes, and no neighbour entries.

`python3 -m hosts.agent.kernel_net attach|detach ...` runs it on a host.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import subprocess
import sys
from collections.abc import Sequence

OFFLOADS = ("tso", "gso", "gro")
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


class KernelNetError(Exception):
    """A bad address or a command that failed, with what to do."""


def _check(iface: str, ip: str, peers: Sequence[str], gateway_mac: str | None = None) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", iface):
        raise KernelNetError(f"{iface!r} is not an interface name")
    for a in (ip, *peers):
        try:
            ipaddress.IPv4Address(a)
        except ValueError:
            raise KernelNetError(f"{a!r} is not an IPv4 address") from None
    if ip in peers:
        raise KernelNetError(f"{ip} is this host's own address, not a peer")
    if gateway_mac is not None and not _MAC.match(gateway_mac.lower()):
        raise KernelNetError(f"{gateway_mac!r} is not a MAC address (aa:bb:cc:dd:ee:ff)")


def _run(argv: list[str], *, ok_if: tuple[str, ...] = ()) -> None:
    """Run argv; a failure whose message has one of `ok_if` is what was asked already (gone)."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0 and not any(w in r.stderr for w in ok_if):
        raise KernelNetError(f"`{' '.join(argv)}` failed: {r.stderr.strip() or r.returncode}")


def has_address(iface: str, ip: str) -> bool:
    """Whether `ip` is already one of `iface`'s addresses (any prefix)."""
    r = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", iface], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise KernelNetError(f"`ip addr show dev {iface}` failed: {r.stderr.strip() or r.returncode}")
    return any(w.split("/")[0] == ip for line in r.stdout.splitlines() for w in line.split()[3:4])


def attach(iface: str, ip: str, peers: Sequence[str], gateway_mac: str | None) -> bool:
    """The data IP on `iface`, every peer through the switch (gateway_mac), offloads
    off; on a plain LAN (gateway_mac None) through ARP, and nothing changed when the
    interface has the IP already. Whether anything was changed (detach undoes it)."""
    _check(iface, ip, peers, gateway_mac)
    if gateway_mac is None and has_address(iface, ip):
        return False
    if gateway_mac is not None:
        _run(["ethtool", "-K", iface, *(w for o in OFFLOADS for w in (o, "off"))])
    _run(["ip", "addr", "replace", f"{ip}/32", "dev", iface])
    for p in peers:
        _run(["ip", "route", "replace", f"{p}/32", "dev", iface, "src", ip])
        if gateway_mac is not None:
            _run(["ip", "neigh", "replace", p, "lladdr", gateway_mac.lower(), "dev", iface, "nud", "permanent"])
    return True


def detach(iface: str, ip: str, peers: Sequence[str]) -> None:
    """What attach added, gone (what is already gone is fine)."""
    _check(iface, ip, peers)
    for p in peers:
        _run(["ip", "neigh", "del", p, "dev", iface], ok_if=("No such file",))
        _run(["ip", "route", "del", f"{p}/32", "dev", iface], ok_if=("No such process",))
    _run(["ip", "addr", "del", f"{ip}/32", "dev", iface], ok_if=("Address not found", "Cannot assign"))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hosts.agent.kernel_net", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("attach", "detach"))
    ap.add_argument("--iface", required=True, help="the data interface (emulated hosts: data0)")
    ap.add_argument("--ip", required=True, help="this host's data IP (the inventory's nic.ip)")
    ap.add_argument("--peer", action="append", default=[], help="a host this one talks to (repeat)")
    ap.add_argument(
        "--gateway-mac",
        help="attach: the switch's MAC (the inventory's switch.service_mac); without it, a plain LAN (ARP)",
    )
    a = ap.parse_args(argv)
    try:
        if a.action == "attach":
            if not attach(a.iface, a.ip, a.peer, a.gateway_mac):
                print(f"kernel_net: {a.ip} is already on {a.iface}: left as it is")
        else:
            detach(a.iface, a.ip, a.peer)
    except KernelNetError as e:
        print(f"kernel_net: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
