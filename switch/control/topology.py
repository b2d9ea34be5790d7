"""The part of a testbed inventory the controller needs: the switch's ports and which
host sits behind which port.

switch/ does not import orchestrator (it is deployed and runs without it), so this
reads an `orchestrator.inventory.Inventory` by attribute (switch.ports[], hosts[] with
nic.mac/ip/switch_port) and keeps a plain copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import addr
from .constants import ROCE_DSCP, pipe_of
from .errors import ControllerError


@dataclass(frozen=True)
class PortSpec:
    name: str  # front-panel name, "1/0"
    dev_port: int
    speed: str = "100G"
    fec: str = "none"
    autoneg: str = "default"  # default | enable | disable

    @property
    def pipe(self) -> int:
        return pipe_of(self.dev_port)


@dataclass(frozen=True)
class HostLink:
    name: str
    role: str  # client | worker
    mac: str
    ip: str
    port: PortSpec

    @property
    def mac_int(self) -> int:
        return addr.mac(self.mac, f"host {self.name}: nic.mac")

    @property
    def ip_int(self) -> int:
        return addr.ipv4(self.ip, f"host {self.name}: nic.ip")


@dataclass(frozen=True)
class Topology:
    ports: tuple[PortSpec, ...]
    hosts: Mapping[str, HostLink]
    service_mac: str | None = None  # the switch's scheduling address (inventory switch.service_*)
    service_ip: str | None = None
    # The DSCP the hosts' NICs keep lossless (inventory roce.dscp): the switch's WRITEs
    # carry it, or PFC would not cover them.
    roce_dscp: int = ROCE_DSCP

    @classmethod
    def from_inventory(cls, inv: Any) -> Topology:
        sw = inv.switch
        ports = tuple(PortSpec(p.port, p.dev_port, p.speed, p.fec, p.autoneg) for p in sw.ports)
        by_name = {p.name: p for p in ports}
        hosts = {}
        for h in inv.hosts:
            port = by_name.get(h.nic.switch_port)
            if port is None:
                raise ControllerError(
                    f"host {h.name} is cabled to switch port {h.nic.switch_port}, which the "
                    f"inventory's switch.ports does not list",
                    subject=h.name,
                    fix="add the port to switch.ports, or fix the host's nic.switch_port",
                )
            hosts[h.name] = HostLink(h.name, h.role, h.nic.mac, h.nic.ip, port)
        dscp = getattr(getattr(inv, "roce", None), "dscp", None)
        if dscp is not None and not (isinstance(dscp, int) and 0 <= dscp < 64):
            raise ControllerError(f"inventory roce.dscp: {dscp!r} is not a 6-bit DSCP", subject="roce.dscp")
        return cls(
            ports,
            hosts,
            getattr(sw, "service_mac", None),
            getattr(sw, "service_ip", None),
            ROCE_DSCP if dscp is None else dscp,
        )

    def host(self, name: str, what: str) -> HostLink:
        h = self.hosts.get(name)
        if h is None:
            raise ControllerError(
                f"{what}: host {name!r} is not in the inventory",
                subject=name,
                fix=f"use one of: {', '.join(self.hosts) or '(no hosts)'}",
            )
        return h

    @property
    def rain_ports(self) -> tuple[PortSpec, ...]:
        """The ports a Rain host sits behind (each once)."""
        seen: dict[int, PortSpec] = {}
        for h in self.hosts.values():
            seen.setdefault(h.port.dev_port, h.port)
        return tuple(seen.values())

    def rain_pipe(self) -> int:
        """The one pipe every Rain port is in; a ControllerError naming the ports otherwise.

        Registers exist once per pipe and a task must meet the tokens of its slice, so
        every host must be behind a port of the same pipe (rain.p4's header comment)."""
        pipes: dict[int, list[str]] = {}
        for h in self.hosts.values():
            pipes.setdefault(h.port.pipe, []).append(f"{h.name} on {h.port.name} (dev_port {h.port.dev_port})")
        if not pipes:
            raise ControllerError("the inventory has no hosts", subject="hosts")
        if len(pipes) > 1:
            lines = "; ".join(f"pipe {p}: {', '.join(names)}" for p, names in sorted(pipes.items()))
            raise ControllerError(
                f"Rain ports span {len(pipes)} pipes ({lines}); the queue registers exist once per pipe, "
                "so every task and token of a slice must enter through one pipe",
                subject=sorted(pipes),
                fix="cable every Rain host to ports of one pipe (dev_port >> 7 equal) "
                "and update switch.ports in the inventory",
            )
        return next(iter(pipes))
