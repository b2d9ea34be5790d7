"""The map file of `rainmaker cloudlab import`: what a manifest cannot say.

A manifest knows the nodes, their logins, MACs, IPs and links. It cannot know the
switch's front-panel port and dev_port behind each link, the hosts' NIC PCI
addresses and cores, where the SDE is, or which SSH key and pinned host keys to
use. This file says those, keyed by the manifest's node names (client_id):

    switch:
      sde: /root/bf-sde-9.13.0
    ports:                      # per host node: the switch port its data link is cabled to
      client0: {port: "1/0", dev_port: 132}
      worker0: {port: "2/0", dev_port: 140}
    host_defaults:              # every host (nodes of one hardware type are alike)
      pci: "0000:41:00.0"
      cores: [2, 3, 4, 5]
    ssh:
      key: ~/.ssh/id_ed25519    # a path: private keys are never copied anywhere
      known_hosts: known_hosts

A switch that is not a node of the experiment (a Tofino of your own, joined to the
CloudLab hosts by a shared VLAN) is `external`: the map gives what the manifest
would have, its SSH address and user, and the ports stay as above:

    switch:
      external: true
      name: tofino1
      address: 192.0.2.10       # SSH; BFRuntime defaults to <address>:50052
      user: root
      link: vlan-tofino         # the link (shared VLAN) the hosts reach it on; default:
                                # the manifest's one shared-VLAN link

Hosts on a plain LAN and no Tofino (`rainmaker cloudlab profile --network lan`, the
Rakaia paper's xl170 nodes) need none of the switch's settings: the import finds that
topology in the manifest (or is told, `switch: {kind: lan}` or --network lan), and the
map gives only the hosts' NICs, cores and the SSH files; `switch.link` names the LAN
when the manifest has several.

Typed like the inventory: unknown keys are errors, values are checked by the same
rules as the inventory's, and every problem names the file, line, field and fix.
Relative paths are relative to the map file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from .. import yamlfile
from ..errors import MapFileError, Problem
from ..inventory.model import (
    FECS,
    SPEEDS,
    Deploy,
    Dpdk,
    Host,
    Hugepages,
    Mgmt,
    Name,
    Nic,
    Roce,
    Strict,
    Switch,
    SwitchPort,
    bad,
)
from .manifest import normalise_mac


def _opt(check):
    """An optional value checked by the inventory's own rule when given."""
    return AfterValidator(lambda v: v if v is None else check(v))


Address = Annotated[str | None, _opt(Mgmt._addr)]
User = Annotated[str | None, _opt(Mgmt._user)]
Pci = Annotated[str | None, _opt(Nic._pci)]
# Manifests write MACs bare (0c42a1dd5f3a) or with colons; the map takes both too.
Mac = Annotated[str | None, _opt(lambda v: Nic._mac(normalise_mac(v) or v))]
Ip = Annotated[str | None, _opt(Nic._ip)]
Netdev = Annotated[str | None, _opt(Nic._netdev)]
RdmaDevice = Annotated[str | None, _opt(Nic._rdma_device)]
Cores = Annotated[list[int] | None, _opt(Host._cores)]


def _key_path(v: Path | None) -> Path | None:
    text = str(v) if v is not None else ""
    if "BEGIN" in text or "\n" in text or len(text) > 400:
        raise bad(
            "this looks like a key's contents, not a path to it",
            "give the path of the private key file, e.g. ~/.ssh/id_ed25519 (its contents never go in any file)",
        )
    return v


KeyPath = Annotated[Path | None, AfterValidator(_key_path)]


class SshMap(Strict):
    """The key the orchestrator logs in with (a path) and the pinned host keys."""

    key: KeyPath = None
    known_hosts: Path | None = None


class SwitchMap(Strict):
    """The Tofino node: which one it is, and what its inventory entry needs beyond the manifest."""

    # tofino: the hosts are cabled to a Tofino (a node, or external); lan: they share a
    # plain LAN and nothing below but name and link applies. Default: the manifest says.
    kind: Literal["tofino", "lan"] | None = None
    node: str | None = None  # its client_id in the manifest (default: tofino, as the profile names it)
    # Not a node of the experiment (a switch of your own on a shared VLAN): its address,
    # user and ports come from this file, and `link` says which link reaches it.
    external: bool = False
    # external: the client_id of that link (default: the one shared-VLAN link); lan: of the
    # LAN (default: the one link every node is on)
    link: str | None = None
    name: Name | None = None  # its name in the inventory (default: from the client_id; a LAN: lan)
    address: Address = None  # SSH address (default: the node's login host name)
    user: User = None  # SSH user (default: the login's)
    ssh_port: int | None = Field(None, ge=1, le=65535)
    key: KeyPath = None
    bfrt: str | None = None  # BFRuntime host:port (default: <address>:50052; an SSH tunnel: 127.0.0.1:50052)
    sde: Path | None = None
    sde_install: Path | None = None
    sde_version: Annotated[str | None, _opt(Switch._sde_version)] = None
    target: Literal["asic", "model"] | None = None
    chip: Literal["tofino", "tofino2"] | None = None
    kernel_module: Literal["bf_kdrv", "bf_kpkt", "none"] | None = None
    hugepages: Hugepages | None = None
    program: Annotated[str | None, _opt(Switch._program)] = None
    service_ip: Ip = None  # default: the last free address of the hosts' data network
    service_mac: Mac = None
    deploy_root: Path | None = None

    @field_validator("bfrt")
    @classmethod
    def _bfrt(cls, v: str | None) -> str | None:
        # The inventory's rule reads the switch's kind only when bfrt is absent.
        return v if v is None else Switch._bfrt(v, SimpleNamespace(data={"kind": "tofino"}))

    @model_validator(mode="after")
    def _external(self) -> SwitchMap:
        if self.external and self.node is not None:
            raise bad(
                f"an external switch is not a node of the experiment, yet node names '{self.node}'",
                "remove node (the switch is yours, not CloudLab's), or remove external: true if it is that node",
            )
        if self.link is not None and not self.external and self.kind != "lan":
            raise bad(
                "link names the link to an external switch (or the hosts' LAN); this switch is a node of the "
                "experiment",
                "remove link (a node switch's links are in the manifest), or add external: true (kind: lan for "
                "hosts on a plain LAN)",
            )
        return self


class PortDefaults(Strict):
    """Settings every port shares unless `ports.<node>` says otherwise."""

    speed: Literal[SPEEDS] | None = None  # type: ignore[valid-type]
    fec: Literal[FECS] | None = None  # type: ignore[valid-type]
    autoneg: Literal["default", "enable", "disable"] | None = None


class HostSettings(Strict):
    """What `host_defaults` and `hosts.<node>` may both say (the latter wins)."""

    pci: Pci = None
    netdev: Netdev = None
    rdma_device: RdmaDevice = None
    driver: Literal["auto", "mlx5", "vfio-pci"] | None = None
    rdma: Literal["auto", "ibverbs", "emulated"] | None = None
    gid_index: int | None = Field(None, ge=0, le=255)
    cores: Cores = None
    numa_node: int | None = Field(None, ge=0, le=7)
    hugepages: Hugepages | None = None
    deploy_root: Path | None = None
    user: User = None
    key: KeyPath = None


class HostMap(HostSettings):
    """One host node of the manifest."""

    name: Name | None = None  # its name in the inventory (default: from the client_id)
    role: Literal["client", "worker"] | None = None  # default: from the client_id (client*, worker*)
    skip: bool = False  # leave this node out of the inventory
    interface: str | None = None  # client_id of its data interface, when several reach the switch
    address: Address = None  # SSH address (default: the node's login host name)
    ssh_port: int | None = Field(None, ge=1, le=65535)
    mac: Mac = None  # only when the manifest lacks it
    ip: Ip = None  # only when the manifest lacks it


class Map(Strict):
    name: Name | None = None  # the inventory's name (default: the experiment's)
    user: User = None  # the login to use when the manifest lists several users
    ssh: SshMap = SshMap()
    switch: SwitchMap = SwitchMap()
    port_defaults: PortDefaults = PortDefaults()
    ports: dict[str, SwitchPort] = Field(default_factory=dict)
    host_defaults: HostSettings = HostSettings()
    hosts: dict[str, HostMap] = Field(default_factory=dict)
    roce: Roce | None = None
    dpdk: Dpdk | None = None
    deploy: Deploy | None = None


@dataclass
class MapFile:
    """A validated map plus where it came from (for line numbers and relative paths)."""

    map: Map
    path: Path | None = None
    located: yamlfile.Located | None = None
    data: dict[str, Any] | None = None  # the map as written (answers from prompts are added to it)

    def line_of(self, field_path: str) -> int | None:
        return self.located.line_of(field_path) if self.located else None

    def where(self) -> str:
        return str(self.path) if self.path else "the map file"

    def resolve(self, p: Path | None) -> Path | None:
        """A path of the map, as the user meant it: ~ expanded, relative to the map's folder."""
        if p is None:
            return None
        p = p.expanduser()
        if p.is_absolute() or self.path is None:
            return p if p.is_absolute() else p.resolve()
        return (self.path.parent / p).resolve()


def load(path: str | Path) -> MapFile:
    path = Path(path)
    problems: list[Problem] = []
    located = yamlfile.load(path, problems)
    if located is None:
        raise MapFileError(str(path), problems)
    data = located.data if located.data is not None else {}
    if not isinstance(data, dict):
        problems.append(
            Problem(
                "",
                "a map file is a mapping (switch, ports, host_defaults, hosts, ssh)",
                "see `rainmaker cloudlab import --help` for an example",
                1,
            )
        )
        raise MapFileError(str(path), problems)
    if problems:
        raise MapFileError(str(path), problems)
    try:
        m = Map.model_validate(data)
    except ValidationError as e:
        raise MapFileError(str(path), yamlfile.pydantic_problems(e, located, Map)) from None
    return MapFile(m, path, located, data)


def empty() -> MapFile:
    return MapFile(Map(), None, None, {})


def with_answers(mf: MapFile, answers: dict[tuple[str, ...], Any]) -> MapFile:
    """The map with prompted answers added (validated again: answers are input too)."""
    import copy

    data = copy.deepcopy(mf.data or {})
    for path, value in answers.items():
        d = data
        for k in path[:-1]:
            d = d.setdefault(k, {})
            if not isinstance(d, dict):
                raise MapFileError(
                    mf.where(),
                    [
                        Problem(
                            ".".join(path),
                            "cannot add an answer below a value that is not a mapping",
                            "fix that section of the map file",
                        )
                    ],
                )
        d[path[-1]] = value
    try:
        m = Map.model_validate(data)
    except ValidationError as e:
        located = mf.located or yamlfile.Located(data, {})
        raise MapFileError(mf.where(), yamlfile.pydantic_problems(e, located, Map)) from None
    return MapFile(m, mf.path, mf.located, data)
