"""Checks that relate fields to each other: what a person gets wrong across a file."""
from __future__ import annotations

from pathlib import Path

from ..errors import Problem
from .model import Inventory


def _dups(items: list[tuple[str, str]], what: str, fix: str) -> list[Problem]:
    """items: (path, value). One problem per repeated value, on its second occurrence."""
    first: dict[str, str] = {}
    out = []
    for path, value in items:
        if value in first:
            out.append(Problem(path, f"{what} '{value}' is already used at {first[value]}", fix))
        else:
            first[value] = path
    return out


def check(inv: Inventory, base_dir: Path | None = None) -> list[Problem]:
    p: list[Problem] = []
    sw = inv.switch

    names = [("switch.name", sw.name)] + [(f"hosts[{i}].name", h.name) for i, h in enumerate(inv.hosts)]
    p += _dups(names, "name", "give every machine its own name")
    p += _dups([(f"hosts[{i}].nic.mac", h.nic.mac) for i, h in enumerate(inv.hosts)],
               "MAC address", "each NIC has its own MAC: copy it from `ip link` on that host")
    p += _dups([(f"hosts[{i}].nic.ip", h.nic.ip) for i, h in enumerate(inv.hosts)],
               "data IP address", "give each host its own data-plane address")
    mg = [("switch.mgmt", f"{sw.mgmt.address}:{sw.mgmt.port}")]
    mg += [(f"hosts[{i}].mgmt", f"{h.mgmt.address}:{h.mgmt.port}") for i, h in enumerate(inv.hosts)]
    p += _dups(mg, "management address", "each machine needs its own SSH address (or port)")
    p += _dups([(f"switch.ports[{i}].port", sp.port) for i, sp in enumerate(sw.ports)],
               "switch port", "list each front-panel port once")
    p += _dups([(f"switch.ports[{i}].dev_port", str(sp.dev_port)) for i, sp in enumerate(sw.ports)],
               "dev_port", "each front-panel port has its own dev_port: see `bf-sde> pm show` on the switch")
    if sw.kind == "emulated":
        for i, sp in enumerate(sw.ports):
            if sp.iface is None:
                p.append(Problem(f"switch.ports[{i}].iface", "an emulated switch port needs the interface behind it",
                                 "name the switch namespace's veth for this port (testbed up writes it)"))
    p += _dups([(f"switch.ports[{i}].iface", sp.iface) for i, sp in enumerate(sw.ports) if sp.iface],
               "interface", "each port is backed by its own interface")

    ports = {sp.port for sp in sw.ports}
    cabled: dict[str, str] = {}
    for i, h in enumerate(inv.hosts):
        path = f"hosts[{i}].nic.switch_port"
        sp = h.nic.switch_port
        if sp not in ports:
            have = ", ".join(sorted(ports))
            p.append(Problem(path, f"host {h.name} is cabled to port {sp}, which switch {sw.name} does not have (it has {have})",
                             f"cable it to one of {have}, or add port {sp} under switch.ports"))
        elif sp in cabled:
            p.append(Problem(path, f"port {sp} is already cabled to {cabled[sp]}",
                             "a port takes one cable: use a free port"))
        else:
            cabled[sp] = h.name
        if h.role == "worker" and not h.cores:
            p.append(Problem(f"hosts[{i}].cores", f"worker {h.name} has no cores: it could run no worker thread",
                             "list the CPU cores its worker threads may use, e.g. cores: [2, 3, 4, 5]"))
        if h.nic.vdev and sw.kind == "tofino":
            p.append(Problem(f"hosts[{i}].nic.vdev", f"host {h.name} uses a virtual device but the switch is a real Tofino",
                             "give the PCI address of the NIC cabled to the switch (see `lspci -D | grep -i mellanox`)"))
        if h.nic.pci and sw.kind == "emulated":
            p.append(Problem(f"hosts[{i}].nic.pci", f"host {h.name} names a PCI NIC but the switch is emulated",
                             "use a vdev on the namespace's data interface, e.g. net_af_packet0,iface=data0"))

    if not inv.clients:
        p.append(Problem("hosts", "no host has role 'client': nothing would send load",
                         "give at least one host role: client"))
    if not inv.workers:
        p.append(Problem("hosts", "no host has role 'worker': nothing would serve tasks",
                         "give at least one host role: worker"))

    # Key files are checked where they are named (relative paths resolve against the file).
    def key_problem(path: str, key: Path | None) -> None:
        if key is not None and base_dir is not None:
            k = key if key.is_absolute() else base_dir / key
            if not k.is_file():
                p.append(Problem(path, f"SSH key {k} does not exist", "point it at the private key the orchestrator should use"))

    key_problem("ssh.key", inv.ssh.key)
    key_problem("switch.mgmt.key", sw.mgmt.key)
    for i, h in enumerate(inv.hosts):
        key_problem(f"hosts[{i}].mgmt.key", h.mgmt.key)
    if inv.ssh.known_hosts is not None and base_dir is not None:
        kh = inv.ssh.known_hosts if inv.ssh.known_hosts.is_absolute() else base_dir / inv.ssh.known_hosts
        if not kh.is_file():
            p.append(Problem("ssh.known_hosts", f"known_hosts file {kh} does not exist",
                             "create it with the hosts' keys, e.g. `ssh-keyscan -H HOST >> FILE` after checking fingerprints"))

    return p
