"""Typed testbed inventory: the switch, the hosts and how they are cabled.

The same models describe a real testbed (a Tofino switch and servers with ConnectX
NICs) and the emulated one that `rainmaker testbed up` builds; only values differ.
Field-level checks live here; checks that relate fields to each other (duplicates,
cabling) are in `validate.py` so each can name the exact field path it concerns.
"""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic_core import PydanticCustomError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

_PORT_RE = re.compile(r"^(\d{1,2})/(\d)$")
_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_PCI_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_VDEV_RE = re.compile(r"^net_[a-z_]+\d*(,[a-z_]+=[^,\s]+)*$")

SPEEDS = ("1G", "10G", "25G", "40G", "50G", "100G", "200G", "400G")
FECS = ("none", "fc", "rs")


def bad(message: str, fix: str) -> PydanticCustomError:
    """A validation error that carries its fix (shown to the user under the message)."""
    return PydanticCustomError("rainmaker", "{message}", {"message": message, "fix": fix})


class Strict(BaseModel):
    """Unknown keys are typos, and typos are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _name(v: str) -> str:
    if not _NAME_RE.match(v):
        raise bad(f"'{v}' is not a valid name", "use lower-case letters, digits and '-', starting with a letter (at most 31 characters)")
    return v


Name = Annotated[str, AfterValidator(_name)]


class Mgmt(Strict):
    """How the orchestrator reaches a machine over SSH."""

    address: str
    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key: Path | None = None  # private key; default: the inventory's ssh.key

    @field_validator("address")
    @classmethod
    def _addr(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9.-]*$", v):
                raise bad(f"'{v}' is neither an IP address nor a host name", "give the machine's management address") from None
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not re.match(r"^[a-z_][a-z0-9_-]*$", v):
            raise bad(f"'{v}' is not a valid user name", "use the login name on that machine, e.g. root")
        return v


class SwitchPort(Strict):
    """A front-panel port: its name as on the faceplate ("1/0") and its device port."""

    port: str
    dev_port: int = Field(ge=0, le=511)
    speed: Literal[SPEEDS] = "100G"  # type: ignore[valid-type]
    fec: Literal[FECS] = "none"  # type: ignore[valid-type]
    autoneg: Literal["default", "enable", "disable"] = "default"
    iface: str | None = None  # emulated switches: the namespace interface behind the port

    @field_validator("port")
    @classmethod
    def _port(cls, v: str) -> str:
        if not _PORT_RE.match(v):
            raise bad(f"'{v}' is not a front-panel port name", "write it as port/lane, like '1/0' (quote it in YAML)")
        return v

    @model_validator(mode="after")
    def _fec_fits_speed(self) -> "SwitchPort":
        if self.speed in ("100G", "200G", "400G") and self.fec == "fc":
            raise bad(f"FEC 'fc' (Firecode) does not exist at {self.speed}", "use fec: rs (or none)")
        return self


class Switch(Strict):
    name: Name
    kind: Literal["tofino", "emulated"]
    mgmt: Mgmt
    bfrt: str  # host:port of the BFRuntime gRPC server
    sde: Path | None = None  # SDE install path on the switch (tofino)
    program: str = "rain"
    # The scheduling address clients send tasks (and workers tokens) to, and the
    # source of the RoCEv2 WRITEs the switch builds. The program matches Rain packets
    # by UDP port, so any unused address of the data network will do.
    service_ip: str = "10.255.255.254"
    service_mac: str = "02:52:4d:ff:ff:fe"
    deploy_root: Path = Path("/opt/rainmaker")
    netns: str | None = None  # emulated: the namespace standing for the switch
    ports: list[SwitchPort] = Field(min_length=1)

    @field_validator("bfrt")
    @classmethod
    def _bfrt(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"'{v}' is not host:port", "write the switch's BFRuntime address, e.g. 192.0.2.10:50052")
        return v

    @field_validator("service_ip")
    @classmethod
    def _sip(cls, v: str) -> str:
        return Nic._ip(v)

    @field_validator("service_mac")
    @classmethod
    def _smac(cls, v: str) -> str:
        return Nic._mac(v)

    @model_validator(mode="after")
    def _tofino_needs_sde(self) -> "Switch":
        if self.kind == "tofino" and self.sde is None:
            raise bad("a tofino switch needs 'sde', the SDE install path on the switch", "add sde: /opt/bf-sde-9.13.0 (your $SDE_INSTALL)")
        return self

    def port(self, name: str) -> SwitchPort | None:
        return next((p for p in self.ports if p.port == name), None)

    @property
    def bfrt_host(self) -> str:
        return self.bfrt.rpartition(":")[0]

    @property
    def bfrt_port(self) -> int:
        return int(self.bfrt.rpartition(":")[2])


class Nic(Strict):
    """The data NIC: a PCI device (ConnectX, bound through mlx5) or a DPDK virtual device."""

    pci: str | None = None
    vdev: str | None = None
    mac: str
    ip: str
    switch_port: str

    @field_validator("pci")
    @classmethod
    def _pci(cls, v: str | None) -> str | None:
        if v is not None:
            v = v.lower()
            if not _PCI_RE.match(v):
                raise bad(f"'{v}' is not a PCI address", "write domain:bus:device.function, like 0000:3b:00.0 (see `lspci -D`)")
        return v

    @field_validator("vdev")
    @classmethod
    def _vdev(cls, v: str | None) -> str | None:
        if v is not None and not _VDEV_RE.match(v):
            raise bad(f"'{v}' is not a DPDK vdev", "write a virtual device, like net_af_packet0,iface=data0")
        return v

    @field_validator("mac")
    @classmethod
    def _mac(cls, v: str) -> str:
        v = v.lower().replace("-", ":")
        if not _MAC_RE.match(v):
            raise bad(f"'{v}' is not a MAC address", "write six hex bytes, like 0c:42:a1:dd:5f:3a (see `ip link`)")
        if int(v[:2], 16) & 1:
            raise bad(f"'{v}' is a multicast MAC address", "a NIC has a unicast MAC (first byte even): copy it from `ip link`")
        return v

    @field_validator("ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        try:
            a = ipaddress.IPv4Address(v)
        except ValueError:
            raise bad(f"'{v}' is not an IPv4 address", "write the data-plane address, like 10.10.1.2") from None
        if a.is_multicast or a.is_unspecified or a.is_loopback:
            raise bad(f"'{v}' cannot be a NIC's address", "use a unicast address of the data network")
        return v

    @field_validator("switch_port")
    @classmethod
    def _sp(cls, v: str) -> str:
        if not _PORT_RE.match(v):
            raise bad(f"'{v}' is not a front-panel port name", "write port/lane as in switch.ports, like '1/0' (quoted)")
        return v

    @model_validator(mode="after")
    def _one_device(self) -> "Nic":
        if (self.pci is None) == (self.vdev is None):
            raise bad("a NIC needs exactly one of 'pci' and 'vdev'", "keep 'pci' for a real NIC, or 'vdev' for a DPDK virtual device")
        return self

    @property
    def eal_device_args(self) -> list[str]:
        """EAL arguments that select this NIC."""
        return ["-a", self.pci] if self.pci else ["--no-pci", f"--vdev={self.vdev}"]


class Hugepages(Strict):
    size: Literal["2M", "1G"] = "2M"
    count: int = Field(64, ge=1, le=1_000_000)

    @property
    def size_kb(self) -> int:
        return 2048 if self.size == "2M" else 1048576


class Host(Strict):
    name: Name
    role: Literal["client", "worker"]
    mgmt: Mgmt
    nic: Nic
    numa_node: int = Field(0, ge=0, le=7)
    cores: list[int] = Field(default_factory=list)
    hugepages: Hugepages = Hugepages()
    deploy_root: Path = Path("/opt/rainmaker")
    netns: str | None = None  # emulated: the namespace standing for the host

    @field_validator("cores")
    @classmethod
    def _cores(cls, v: list[int]) -> list[int]:
        if any(c < 0 or c > 4095 for c in v):
            raise bad("core ids are CPU numbers from 0 to 4095", "list CPUs that exist on the host (see `lscpu`)")
        if len(set(v)) != len(v):
            dup = sorted({c for c in v if v.count(c) > 1})
            raise bad(f"core {dup[0]} is listed twice", "list each core once")
        return v


class Ssh(Strict):
    """SSH settings shared by every machine of the testbed."""

    key: Path | None = None  # default private key for every mgmt block
    known_hosts: Path | None = None  # pinned host keys; unknown hosts are refused


class Emulation(Strict):
    """Present only in inventories written by `rainmaker testbed up`."""

    state_dir: Path
    slot: int = Field(0, ge=0, le=15)


class Inventory(Strict):
    name: Name
    switch: Switch
    hosts: list[Host] = Field(min_length=1)
    ssh: Ssh = Ssh()
    emulation: Emulation | None = None

    # -- queries -------------------------------------------------------------
    @property
    def is_emulated(self) -> bool:
        return self.switch.kind == "emulated"

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def by_role(self, role: str) -> list[Host]:
        return [h for h in self.hosts if h.role == role]

    @property
    def clients(self) -> list[Host]:
        return self.by_role("client")

    @property
    def workers(self) -> list[Host]:
        return self.by_role("worker")

    @property
    def links(self) -> list[tuple[str, str]]:
        """(host name, switch port) for every cable."""
        return [(h.name, h.nic.switch_port) for h in self.hosts]

    def key_for(self, mgmt: Mgmt) -> Path | None:
        return mgmt.key or self.ssh.key
