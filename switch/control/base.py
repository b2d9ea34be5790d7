"""What every controller shares, whatever P4 program the switch runs: the BFRuntime
session (and a new one after a switch restart), the inventory's ports and their links,
the forward table's routes to every inventory host, the client host ids, and reading
registers and counters back as plain data.

A subclass names its program (PROGRAM, TITLE), binds its P4 controls' tables in
_bind() (a switch serving another program fails there, by table name, and becomes a
ControllerError), and forgets what it installed in _forget() when the session is new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from switch.bfrt.client import Client
from switch.bfrt.errors import BfrtNameError

from . import _cells
from .errors import ControllerError
from .ports import LinkState, Ports, link_changes
from .registration import ClientRegistration, WorkerRegistration
from .topology import Topology


class SwitchController:
    PROGRAM: ClassVar[str]  # the P4 program's name (switch/p4/<PROGRAM>.p4)
    TITLE: ClassVar[str]  # how the errors name it

    def __init__(self, client: Client, inventory: Any):
        self.client = client
        self.topology = inventory if isinstance(inventory, Topology) else Topology.from_inventory(inventory)

    @property
    def port_up_timeout_s(self) -> float:
        return self.settings.port_up_timeout_s

    def _attach(self, client: Client) -> None:
        """One object per P4 control over this session's tables, plus the ports."""
        try:
            self._bind(client)
        except BfrtNameError as e:
            raise ControllerError(
                f"the switch at {client.address} runs {client.p4_name!r}, which is not the {self.TITLE} program: "
                f"{e.message}",
                subject=client.p4_name,
                fix=f"start the switch with the {self.PROGRAM} program (rainmaker switch start --program {self.PROGRAM})",
            ) from None
        self.ports = Ports(client)

    def _bind(self, client: Client) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        """Nothing installed (a new session: the switch restarted)."""
        raise NotImplementedError

    # -- the session -------------------------------------------------------------------
    @property
    def switch_restarted(self) -> bool:
        """The switch ended our BFRuntime session: bf_switchd (or the emulator) stopped or
        restarted, and everything this controller installed is gone with it."""
        return self.client.lost

    def reconnect(self, timeout: float = 60.0, port_timeout: float | None = None) -> float:
        """After a switch restart: a new session (same program, bound again), the ports
        brought up again, nothing else installed (program() next). Returns the seconds taken."""
        took = self.client.reconnect(timeout)
        self._attach(self.client)
        self._forget()
        return took + self.bring_up_ports(port_timeout)

    def ensure_session(self, timeout: float = 60.0) -> float | None:
        """Reconnect if the switch restarted since the last call; the seconds it took, or None."""
        return self.reconnect(timeout) if self.switch_restarted else None

    # -- ports -----------------------------------------------------------------------
    def _host_of(self, reg: WorkerRegistration):
        """The inventory's host of a worker registration, once its NIC is the one the
        inventory names (a worker on another NIC would get frames it never sees)."""
        if not isinstance(reg, WorkerRegistration):
            raise ControllerError(f"expected a WorkerRegistration, got {type(reg).__name__}", subject=reg)
        host = self.topology.host(reg.host, reg.where)
        if reg.mac_int != host.mac_int or reg.ip_int != host.ip_int:
            raise ControllerError(
                f"{reg.where}: it reports MAC {reg.mac} / IP {reg.ip}, but the inventory gives {host.name} "
                f"MAC {host.mac} / IP {host.ip}",
                subject=reg.host,
                fix="correct the inventory's nic block, or run the worker on the NIC the inventory names",
            )
        return host

    @staticmethod
    def _check_new_id(reg: WorkerRegistration, wid: int, existing: Mapping, adding: Mapping) -> None:
        """A worker id is registered once: not already installed, nor twice in one call."""
        if wid in existing:
            raise ControllerError(
                f"{reg.where}: worker {wid} is already registered (on {existing[wid].host})",
                subject=wid,
                fix="deregister it first, or give the server another --worker-base",
            )
        if wid in adding:
            raise ControllerError(
                f"{reg.where}: worker {wid} is also registered by {adding[wid].host}",
                subject=wid,
                fix="give each server its own range of worker ids (--worker-base)",
            )

    def bring_up_ports(self, timeout: float | None = None) -> float:
        """Add and enable every inventory port ($PORT: speed, FEC, autoneg), then wait
        until each reports $PORT_UP; returns the seconds waited."""
        return self.ports.bring_up(self.topology.ports, self.port_up_timeout_s if timeout is None else timeout)

    def links(self) -> dict[int, LinkState]:
        """Every inventory port's link now ($PORT_UP, link losses, frames dropped while down)."""
        return self.ports.links(p.dev_port for p in self.topology.ports)

    def links_between(self, before: dict[int, LinkState], after: dict[int, LinkState]) -> list[dict]:
        """Per inventory port, what its link did between two links() reads, with the
        hosts cabled to it (none: a spare port, down the whole time harmlessly)."""
        return [
            {
                "port": p.name,
                "dev_port": p.dev_port,
                "hosts": sorted(h.name for h in self.topology.hosts.values() if h.port.dev_port == p.dev_port),
                **link_changes(before.get(p.dev_port), after.get(p.dev_port)),
            }
            for p in self.topology.ports
        ]

    # -- what every program installs -----------------------------------------------------
    def routes(self) -> dict[int, tuple[int, int]]:
        """forward's entries: every inventory host's IP -> (its dev_port, its MAC)."""
        return {h.ip_int: (h.port.dev_port, h.mac_int) for h in self.topology.hosts.values()}

    def default_clients(self) -> list[ClientRegistration]:
        """The inventory's client hosts, host id = position among them."""
        return [
            ClientRegistration(h.name, i, h.ip)
            for i, h in enumerate(h for h in self.topology.hosts.values() if h.role == "client")
        ]

    def _resolve_clients(self, clients: Sequence[ClientRegistration]) -> dict[int, ClientRegistration]:
        out: dict[int, ClientRegistration] = {}
        for c in clients:
            if not isinstance(c, ClientRegistration):
                raise ControllerError(f"expected a ClientRegistration, got {type(c).__name__}", subject=c)
            host = self.topology.host(c.host, f"client {c.host}")
            if c.ip_int != host.ip_int:
                raise ControllerError(
                    f"client {c.host}: IP {c.ip} is not the inventory's {host.ip}",
                    subject=c.host,
                    fix="use the IP of the host's data NIC",
                )
            if c.host_id in out:
                raise ControllerError(
                    f"client host id {c.host_id} is given to {out[c.host_id].host} and {c.host}",
                    subject=c.host_id,
                    fix="give each client host its own id (rain-client --client-id)",
                )
            out[c.host_id] = c
        return out

    # -- reading back ----------------------------------------------------------------
    def _register_dump(self, reg) -> dict:
        return {
            "size": reg.size,
            "width": reg.field.width,
            "signed": reg.signed,
            "pipes": _cells.values_per_pipe(reg.read_all()),
        }

    @staticmethod
    def _counter_dump(counter, names: Mapping[int, str] | None = None) -> dict[str, dict]:
        """index (or its name) -> {packets, bytes}: every named index, other indexes if non-zero."""
        names = names or {}
        out = {}
        for i, v in enumerate(counter.read_all()):
            if i in names:
                out[names[i]] = {"packets": v.packets, "bytes": v.bytes}
            elif v.packets or v.bytes:
                out[str(i)] = {"packets": v.packets, "bytes": v.bytes}
        return out
