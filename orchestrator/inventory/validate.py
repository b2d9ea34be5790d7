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


def check(inv: Inventory) -> list[Problem]:
    """Every cross-field problem of `inv`, each with its field and fix, in the order a
    reader meets the fields. A flat list of rules (about 200 lines) on purpose: each is
    a line or two with its own message, and reads alone."""
    p: list[Problem] = []
    sw = inv.switch

    names = [("switch.name", sw.name)] + [(f"hosts[{i}].name", h.name) for i, h in enumerate(inv.hosts)]
    p += _dups(names, "name", "give every machine its own name")
    lan = not sw.programmable  # a plain LAN: no service address, no login, no ports
    if lan:
        if sw.bfrt_via_ssh:
            p.append(
                Problem(
                    "switch.bfrt_via_ssh",
                    "a plain LAN (kind: lan) has no BFRuntime port to tunnel to",
                    "remove bfrt_via_ssh, or set kind: tofino if the hosts are cabled to a Tofino",
                )
            )
        for f in ("mgmt", "bfrt", "sde", "sde_install", "sde_version", "netns"):
            if getattr(sw, f) is not None:
                p.append(
                    Problem(
                        f"switch.{f}",
                        f"'{f}' belongs to a switch rainmaker programs; this one is a plain LAN (kind: lan)",
                        f"remove {f}, or set kind: tofino if the hosts are cabled to a Tofino",
                    )
                )
        if sw.ports:
            p.append(
                Problem(
                    "switch.ports",
                    "a LAN (kind: lan) has no ports rainmaker programs",
                    "remove switch.ports (and the hosts' nic.switch_port)",
                )
            )
    else:  # (its mgmt and bfrt: model.py)
        if not sw.ports:
            p.append(
                Problem(
                    "switch.ports",
                    f"a {sw.kind} switch needs its ports",
                    "list them under ports: [{port: '1/0', dev_port: 132, speed: 100G}, ...]",
                )
            )
    service = [] if lan else [("switch.service_mac", sw.service_mac)]
    p += _dups(
        service + [(f"hosts[{i}].nic.mac", h.nic.mac) for i, h in enumerate(inv.hosts)],
        "MAC address",
        "each NIC has its own MAC: copy it from `ip link` on that host",
    )
    service = [] if lan else [("switch.service_ip", sw.service_ip)]
    p += _dups(
        service + [(f"hosts[{i}].nic.ip", h.nic.ip) for i, h in enumerate(inv.hosts)],
        "data IP address",
        "give each host its own data-plane address",
    )
    mg = [] if sw.mgmt is None else [("switch.mgmt", f"{sw.mgmt.address}:{sw.mgmt.port}")]
    mg += [(f"hosts[{i}].mgmt", f"{h.mgmt.address}:{h.mgmt.port}") for i, h in enumerate(inv.hosts)]
    p += _dups(mg, "management address", "each machine needs its own SSH address (or port)")
    p += _dups(
        [(f"switch.ports[{i}].port", sp.port) for i, sp in enumerate(sw.ports)],
        "switch port",
        "list each front-panel port once",
    )
    p += _dups(
        [(f"switch.ports[{i}].dev_port", str(sp.dev_port)) for i, sp in enumerate(sw.ports)],
        "dev_port",
        "each front-panel port has its own dev_port: see `bf-sde> pm show` on the switch",
    )
    needs_iface = sw.kind == "emulated" or sw.target == "model"
    if needs_iface:
        what = "an emulated switch port" if sw.kind == "emulated" else "a tofino-model port (switch.target: model)"
        for i, sp in enumerate(sw.ports):
            if sp.iface is None:
                p.append(
                    Problem(
                        f"switch.ports[{i}].iface",
                        f"{what} needs the interface behind it",
                        "name the switch machine's veth for this port (testbed up writes it)",
                    )
                )
    p += _dups(
        [(f"switch.ports[{i}].iface", sp.iface) for i, sp in enumerate(sw.ports) if sp.iface],
        "interface",
        "each port is backed by its own interface",
    )

    ports = {sp.port for sp in sw.ports}
    cabled: dict[str, str] = {}
    for i, h in enumerate(inv.hosts):
        path = f"hosts[{i}].nic.switch_port"
        sp = h.nic.switch_port
        if lan:
            if sp is not None:
                p.append(
                    Problem(
                        path,
                        f"host {h.name} names switch port {sp}, but the network is a plain LAN (switch.kind: lan)",
                        "remove switch_port: rainmaker does not program a LAN's ports",
                    )
                )
        elif sp is None:
            p.append(
                Problem(path, f"host {h.name} has no switch_port", f"name the port of {sw.name} its NIC is cabled to")
            )
        elif sp not in ports:
            have = ", ".join(sorted(ports))
            p.append(
                Problem(
                    path,
                    f"host {h.name} is cabled to port {sp}, which switch {sw.name} does not have (it has {have})",
                    f"cable it to one of {have}, or add port {sp} under switch.ports",
                )
            )
        elif sp in cabled:
            p.append(
                Problem(path, f"port {sp} is already cabled to {cabled[sp]}", "a port takes one cable: use a free port")
            )
        else:
            cabled[sp] = h.name
        if h.role == "worker" and not h.cores:
            p.append(
                Problem(
                    f"hosts[{i}].cores",
                    f"worker {h.name} has no cores: it could run no worker thread",
                    "list the CPU cores its worker threads may use, e.g. cores: [2, 3, 4, 5]",
                )
            )
        if h.nic.vdev and sw.kind == "tofino" and sw.target == "asic":
            p.append(
                Problem(
                    f"hosts[{i}].nic.vdev",
                    f"host {h.name} uses a virtual device but the switch is a real Tofino",
                    "give the PCI address of the NIC cabled to the switch (see `lspci -D | grep -i mellanox`), "
                    "or set switch.target: model to run the program on tofino-model",
                )
            )
        if h.nic.pci and sw.kind == "emulated":
            p.append(
                Problem(
                    f"hosts[{i}].nic.pci",
                    f"host {h.name} names a PCI NIC but the switch is emulated",
                    "use a vdev on the namespace's data interface, e.g. net_af_packet0,iface=data0",
                )
            )

    jump = inv.ssh.jump
    if jump is not None and inv.jump_key is None:
        p.append(
            Problem(
                "ssh.jump.key",
                f"the gateway {jump.address} has no key: neither ssh.jump.key nor ssh.key is given",
                "add key: ~/.ssh/id_ed25519 under ssh.jump (the key your gateway account accepts), or set ssh.key",
            )
        )
    if jump is not None and inv.jump_known_hosts is None:
        p.append(
            Problem(
                "ssh.jump.known_hosts",
                f"the gateway {jump.address} has no pinned host key: neither ssh.jump.known_hosts nor "
                "ssh.known_hosts is given, and unknown host keys are always refused",
                f"collect its key with `ssh-keyscan -p {jump.port} {jump.address} >> FILE`, check the "
                "fingerprint with your lab, and set known_hosts: FILE under ssh.jump (or ssh.known_hosts)",
            )
        )
    if jump is not None:
        for path, m in [("switch.mgmt", sw.mgmt)] + [(f"hosts[{i}].mgmt", h.mgmt) for i, h in enumerate(inv.hosts)]:
            if m is not None and m.address == jump.address and m.port == jump.port:
                p.append(
                    Problem(
                        "ssh.jump.address",
                        f"the gateway is {path} itself ({jump.address}): a machine cannot be its own jump host",
                        "give the gateway's own address, or remove ssh.jump if the machines are reached directly",
                    )
                )
    if inv.dpdk.source == "prefix" and inv.deploy.build == "local":
        p.append(
            Problem(
                "deploy.build",
                "the hosts run a DPDK source build, but deploy.build: local copies binaries "
                "built here against Debian's DPDK 22.11, whose libraries the hosts may lack",
                "set deploy.build: host (the sources are built on each host against dpdk.prefix)",
            )
        )

    if not inv.clients:
        p.append(
            Problem(
                "hosts", "no host has role 'client': nothing would send load", "give at least one host role: client"
            )
        )
    if not inv.workers:
        p.append(
            Problem(
                "hosts", "no host has role 'worker': nothing would serve tasks", "give at least one host role: worker"
            )
        )

    return p


def warnings(inv: Inventory, base_dir: Path) -> list[Problem]:
    """Things that may be fine on another machine (key files), reported but not fatal."""
    out: list[Problem] = []

    def need(path: str, f: Path | None, what: str, fix: str) -> None:
        if f is not None:
            f = f.expanduser()
            f = f if f.is_absolute() else base_dir / f
            if not f.is_file():
                out.append(Problem(path, f"{what} {f} does not exist (on this machine)", fix))

    key_fix = "point it at the private key the orchestrator uses to log in"
    need("ssh.key", inv.ssh.key, "SSH key", key_fix)
    if inv.switch.mgmt is not None:
        need("switch.mgmt.key", inv.switch.mgmt.key, "SSH key", key_fix)
    for i, h in enumerate(inv.hosts):
        need(f"hosts[{i}].mgmt.key", h.mgmt.key, "SSH key", key_fix)
    need(
        "ssh.known_hosts",
        inv.ssh.known_hosts,
        "known_hosts file",
        "collect the keys with `ssh-keyscan HOST >> FILE` and check their fingerprints",
    )
    if inv.ssh.jump is not None:
        need("ssh.jump.key", inv.ssh.jump.key, "SSH key", "point it at the private key your gateway account accepts")
        need(
            "ssh.jump.known_hosts",
            inv.ssh.jump.known_hosts,
            "known_hosts file",
            f"collect the gateway's key with `ssh-keyscan {inv.ssh.jump.address} >> FILE` and check its fingerprint",
        )
    out += _icrc(inv)
    if inv.ssh.known_hosts is None:
        out.append(
            Problem(
                "ssh.known_hosts",
                "no known_hosts file: host keys cannot be verified, so SSH will refuse every host",
                "add ssh.known_hosts with the machines' pinned host keys",
            )
        )
    return out


def _icrc(inv: Inventory) -> list[Problem]:
    """Workers whose NIC checks the iCRC drop every WRITE of the switch, which leaves
    it zero: each large task pre-written to them fails (desc_mismatch)."""
    checking = [h for h in inv.workers if inv.roce.nic_checks_icrc(h.nic.rdma_transport)]
    if not checking or not inv.switch.programmable:  # a plain LAN: no switch writes to the workers
        return []
    names = ", ".join(h.name for h in checking)
    if inv.roce.icrc_check == "on":
        why = "roce.icrc_check is on"
    else:
        why = "a ConnectX checks it unless turned off, and roce.icrc_disable_command is not given"
    return [
        Problem(
            "roce.icrc_check",
            f"the NICs of {names} check the RoCEv2 iCRC ({why}), but the switch sends its WRITEs with a zero "
            "iCRC: they would drop every task the switch pre-writes to them",
            "give roce.icrc_disable_command (the roce role runs it once per boot), or turn the check off by "
            "hand and set roce.icrc_check: off",
        )
    ]
