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

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

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
        raise bad(
            f"'{v}' is not a valid name",
            "use lower-case letters, digits and '-', starting with a letter (at most 31 characters)",
        )
    return v


Name = Annotated[str, AfterValidator(_name)]

_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def login_name(v: str, fix: str) -> str:
    """A login name as useradd takes it (lower case, digits, '_', '-', '.'; not first a
    digit, '-' or '.'), so a typo is caught here rather than as an SSH refusal."""
    if not re.match(r"^[a-z_][a-z0-9_.-]*$", v):
        raise bad(f"'{v}' is not a valid user name", fix)
    return v


def host_address(v: str, what: str, example: str) -> str:
    """An IP address or a host name, as SSH and gRPC resolve them. A dotted string of
    digits is an IPv4 address (the resolver reads it so, never as a name), so 999.1.1.1
    is a typo, not a host; a name follows RFC 1123, its last label not all digits."""
    if v.startswith("[") and v.endswith("]"):  # an IPv6 address as host:port writes it
        v = v[1:-1]
    try:
        a = ipaddress.ip_address(v)
    except ValueError:
        a = None
    if a is not None:
        if a.is_unspecified or a.is_multicast:
            raise bad(f"'{v}' cannot be {what}", f"give a unicast address, like {example}")
        return v
    if re.fullmatch(r"[0-9.]+", v):
        raise bad(
            f"'{v}' is not a valid IPv4 address (four numbers 0..255 separated by dots)",
            f"correct the address, like {example}",
        )
    labels = v.split(".")
    if len(v) > 253 or not all(_LABEL_RE.match(x) for x in labels) or labels[-1].isdigit():
        raise bad(
            f"'{v}' is neither an IP address nor a valid host name",
            f"give {what} as an address (like {example}) or a host name (letters, digits, '-', dots)",
        )
    return v


class Mgmt(Strict):
    """How the orchestrator reaches a machine over SSH."""

    address: str
    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key: Path | None = None  # private key; default: the inventory's ssh.key

    @field_validator("address")
    @classmethod
    def _addr(cls, v: str) -> str:
        return host_address(v, "the machine's management address", "192.0.2.10")

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return login_name(v, "use the login name on that machine, e.g. root")


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
    def _fec_fits_speed(self) -> SwitchPort:
        if self.speed in ("100G", "200G", "400G") and self.fec == "fc":
            raise bad(f"FEC 'fc' (Firecode) does not exist at {self.speed}", "use fec: rs (or none)")
        return self


class Hugepages(Strict):
    size: Literal["2M", "1G"] = "2M"
    count: int = Field(64, ge=1, le=1_000_000)

    @property
    def size_kb(self) -> int:
        return 2048 if self.size == "2M" else 1048576


class Switch(Strict):
    name: Name
    # tofino: a Tofino switch rainmaker programs; emulated: the emulated testbed's; lan: a
    # plain Ethernet network rainmaker neither logs into nor programs (a cluster's LAN,
    # e.g. CloudLab's between xl170 nodes). Only the systems that schedule inside the
    # server (Rakaia's measured layer) run over a lan: there is no switch program.
    kind: Literal["tofino", "emulated", "lan"]
    mgmt: Mgmt | None = Field(None, validate_default=True)  # tofino, emulated: how to log into it
    bfrt: str | None = Field(None, validate_default=True)  # host:port of its BFRuntime server (tofino, emulated)
    # A Tofino's software: the SDE folder ($SDE) and where it is installed
    # ($SDE_INSTALL, default $SDE/install); the SDE version provisioning insists on.
    sde: Path | None = None
    sde_install: Path | None = None
    sde_version: str | None = None
    # asic: the switch's own Tofino; model: the SDE's tofino-model on veths (no ASIC,
    # no kernel module), the vendor's way to run a program without the hardware.
    target: Literal["asic", "model"] = "asic"
    chip: Literal["tofino", "tofino2"] = "tofino"
    # The SDE's kernel module: bf_kdrv (PCIe access, the usual one), bf_kpkt (adds a
    # kernel packet path for the CPU port), or none.
    kernel_module: Literal["bf_kdrv", "bf_kpkt", "none"] = "bf_kdrv"
    # bf_switchd's DMA buffers come from huge pages (the SDE's dma_setup.sh asks for 128).
    hugepages: Hugepages = Hugepages(size="2M", count=128)
    program: str = "rain"
    # The scheduling address clients send tasks (and workers tokens) to, and the
    # source of the RoCEv2 WRITEs the switch builds. The program matches Rain packets
    # by UDP port, so any unused address of the data network will do.
    service_ip: str = "10.255.255.254"
    service_mac: str = "02:52:4d:ff:ff:fe"
    deploy_root: Path = Path("/opt/rainmaker")
    netns: str | None = None  # emulated: the namespace standing for the switch
    # The BFRuntime port answers only on the switch (or its management network): bfrt is
    # then the address as the switch sees it, and rainmaker reaches it through an SSH
    # tunnel to the switch that it opens itself (through ssh.jump, if any).
    bfrt_via_ssh: bool = False
    ports: list[SwitchPort] = Field(default_factory=list)  # tofino, emulated: at least one (validate.py)

    @field_validator("mgmt")
    @classmethod
    def _mgmt(cls, v: Mgmt | None, info: ValidationInfo) -> Mgmt | None:
        if v is None and info.data.get("kind", "lan") != "lan":
            raise bad(f"a {info.data['kind']} switch needs 'mgmt'", "add mgmt: {address: 192.0.2.10, user: root}")
        return v

    @field_validator("bfrt")
    @classmethod
    def _bfrt(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            if info.data.get("kind", "lan") != "lan":
                raise bad(f"a {info.data['kind']} switch needs 'bfrt'", "add bfrt: 192.0.2.10:50052")
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"'{v}' is not host:port", "write the switch's BFRuntime address, e.g. 192.0.2.10:50052")
        host_address(host, "the BFRuntime server's host", "192.0.2.10:50052")
        return v

    @field_validator("service_ip")
    @classmethod
    def _sip(cls, v: str) -> str:
        return Nic._ip(v)

    @field_validator("service_mac")
    @classmethod
    def _smac(cls, v: str) -> str:
        return Nic._mac(v)

    @field_validator("program")
    @classmethod
    def _program(cls, v: str) -> str:
        if not re.match(r"^[a-z][a-z0-9_]{0,63}$", v):
            raise bad(f"'{v}' is not a P4 program name", "use the program's name, like rain (lower case, digits, '_')")
        return v

    @field_validator("sde_version")
    @classmethod
    def _sde_version(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^\d+\.\d+\.\d+$", v):
            raise bad(f"'{v}' is not an SDE version", "write it as major.minor.patch, like 9.13.0 (quote it in YAML)")
        return v

    @model_validator(mode="after")
    def _tofino_needs_sde(self) -> Switch:
        if self.kind == "tofino" and self.sde is None:
            raise bad(
                "a tofino switch needs 'sde', the SDE folder on the switch ($SDE)",
                "add sde: /root/bf-sde-9.13.0 (and sde_install if it is not $SDE/install)",
            )
        return self

    @property
    def sde_install_path(self) -> Path | None:
        """$SDE_INSTALL: given, or $SDE/install."""
        if self.sde_install is not None:
            return self.sde_install
        return None if self.sde is None else self.sde / "install"

    def port(self, name: str) -> SwitchPort | None:
        return next((p for p in self.ports if p.port == name), None)

    @property
    def programmable(self) -> bool:
        """Whether rainmaker logs into this switch and runs a program on it (not a lan)."""
        return self.kind != "lan"

    @property
    def bfrt_host(self) -> str:
        return str(self.bfrt).rpartition(":")[0]

    @property
    def bfrt_port(self) -> int:
        return int(str(self.bfrt).rpartition(":")[2])


class Nic(Strict):
    """The data NIC: a PCI device (ConnectX, bound through mlx5) or a DPDK virtual device."""

    pci: str | None = None
    vdev: str | None = None
    mac: str
    ip: str
    switch_port: str | None = None  # the switch port it is cabled to (not on a lan)
    # A PCI NIC's kernel interface (a ConnectX keeps it: mlx5 is bifurcated), and its
    # RDMA device; both are found from the PCI address when not given.
    netdev: str | None = None
    rdma_device: str | None = None
    # How the NIC reaches DPDK: mlx5 (ConnectX: stays on mlx5_core, no binding),
    # vfio-pci (any other NIC is bound to it), auto (mlx5 for Mellanox's vendor id 15b3).
    driver: Literal["auto", "mlx5", "vfio-pci"] = "auto"
    # How the switch's RoCEv2 WRITEs reach the worker's ring: ibverbs (the NIC writes
    # it; a PCI ConnectX), emulated (rain-worker applies them itself; virtual ports),
    # auto (ibverbs for a PCI NIC, emulated for a vdev).
    rdma: Literal["auto", "ibverbs", "emulated"] = "auto"
    gid_index: int | None = Field(None, ge=0, le=255)  # RoCEv2/IPv4 GID; default: found by the roce role

    @field_validator("pci")
    @classmethod
    def _pci(cls, v: str | None) -> str | None:
        if v is not None:
            v = v.lower()
            if not _PCI_RE.match(v):
                raise bad(
                    f"'{v}' is not a PCI address",
                    "write domain:bus:device.function, like 0000:3b:00.0 (see `lspci -D`)",
                )
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
            raise bad(
                f"'{v}' is a multicast MAC address", "a NIC has a unicast MAC (first byte even): copy it from `ip link`"
            )
        return v

    @field_validator("ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        try:
            a = ipaddress.IPv4Address(v)
        except ValueError:
            raise bad(f"'{v}' is not an IPv4 address", "write the data-plane address, like 10.10.1.2") from None
        if a.is_multicast or a.is_unspecified or a.is_loopback or a.is_reserved:  # reserved: 240/4, broadcast
            raise bad(f"'{v}' cannot be a NIC's address", "use a unicast address of the data network")
        return v

    @field_validator("switch_port")
    @classmethod
    def _sp(cls, v: str | None) -> str | None:
        if v is not None and not _PORT_RE.match(v):
            raise bad(
                f"'{v}' is not a front-panel port name", "write port/lane as in switch.ports, like '1/0' (quoted)"
            )
        return v

    @field_validator("netdev")
    @classmethod
    def _netdev(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$", v):
            raise bad(f"'{v}' is not an interface name", "give the NIC's kernel interface, as `ip link` shows it")
        return v

    @field_validator("rdma_device")
    @classmethod
    def _rdma_device(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z0-9_]{1,63}$", v):
            raise bad(
                f"'{v}' is not an RDMA device name", "give it as `ibv_devices` or `rdma link` shows it, like mlx5_0"
            )
        return v

    @model_validator(mode="after")
    def _one_device(self) -> Nic:
        if (self.pci is None) == (self.vdev is None):
            raise bad(
                "a NIC needs exactly one of 'pci' and 'vdev'",
                "keep 'pci' for a real NIC, or 'vdev' for a DPDK virtual device",
            )
        if self.vdev is not None:
            if self.rdma == "ibverbs":
                raise bad(
                    "rdma: ibverbs needs a PCI NIC (a ConnectX), not a virtual device",
                    "use rdma: emulated (or auto) with a vdev, or give the ConnectX's pci address",
                )
            for f in ("netdev", "rdma_device", "gid_index"):
                if getattr(self, f) is not None:
                    raise bad(
                        f"'{f}' belongs to a PCI NIC; this NIC is a virtual device",
                        f"remove {f}, or give the NIC's pci address instead of vdev",
                    )
            if self.driver != "auto":
                raise bad("'driver' belongs to a PCI NIC; this NIC is a virtual device", "remove driver")
        if self.rdma == "emulated" and (self.rdma_device is not None or self.gid_index is not None):
            raise bad("rdma_device and gid_index are for rdma: ibverbs", "remove them, or set rdma: ibverbs")
        if self.driver == "vfio-pci" and self.rdma_transport == "ibverbs":
            raise bad(
                "a NIC bound to vfio-pci has no RDMA device: ibverbs cannot register the worker's ring",
                "keep a ConnectX on mlx5 (driver: auto or mlx5), or set rdma: emulated",
            )
        return self

    @property
    def rdma_transport(self) -> str:
        """ibverbs or emulated: how RoCEv2 WRITEs reach the worker's ring."""
        if self.rdma != "auto":
            return self.rdma
        return "ibverbs" if self.pci else "emulated"

    @property
    def eal_device_args(self) -> list[str]:
        """EAL arguments that select this NIC."""
        return ["-a", self.pci] if self.pci else ["--no-pci", f"--vdev={self.vdev}"]


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


class Roce(Strict):
    """RoCEv2 on the ConnectX hosts (the roce role; paper 3.2.2, 6.2)."""

    # RDMA path MTU. Each pre-written task must fit one WRITE (6.2): the netdev MTU is
    # set to carry this MTU plus the RoCEv2 headers, and tasks larger than it are refused.
    mtu: Literal[1024, 2048, 4096] = 4096
    priority: int = Field(3, ge=0, le=7)  # 802.1p priority of RoCE traffic: PFC is on for it alone
    dscp: int = Field(26, ge=0, le=63)  # DSCP RoCE packets carry; the NIC trusts DSCP and maps it to `priority`
    pfc: bool = True
    ecn: bool = True  # DCQCN: ECN marking reaction (rp) and notification (np) on `priority`
    # The switch builds WRITEs with UC WRITE ONLY (no ACK comes back to it) or RC
    # WRITE ONLY (the worker's NIC ACKs, the switch drops the ACKs).
    qp_type: Literal["uc", "rc"] = "uc"
    # The switch cannot compute the iCRC and sends zeros (Rain (CoNEXT 2026), 3.2.2), so
    # the NICs must not check it. How to turn the check off is vendor-specific (a
    # firmware register on ConnectX-5/6); give the command and the role runs it once
    # per boot, or leave it out and do it by hand.
    icrc_disable_command: str | None = None
    # Whether the workers' NICs check the iCRC once provisioned. Unset: a ConnectX
    # checks (its default) unless icrc_disable_command turns the check off; an emulated
    # NIC (rain-worker, rdma: emulated) does not. `off` without the command: turned off
    # by hand. `on`: every WRITE from the switch is dropped (an emulated worker then
    # checks too, to show it).
    icrc_check: Literal["on", "off"] | None = None

    @model_validator(mode="after")
    def _icrc(self) -> Roce:
        if self.icrc_check == "on" and self.icrc_disable_command:
            raise bad(
                "roce.icrc_check is on, but roce.icrc_disable_command turns the NICs' iCRC check off",
                "remove icrc_check (the command turns the check off), or remove the command",
            )
        return self

    def nic_checks_icrc(self, transport: str) -> bool:
        """Whether a worker NIC reached through `transport` (ibverbs: a ConnectX;
        emulated: rain-worker's RX loop) checks the iCRC once provisioned."""
        if self.icrc_check is not None:
            return self.icrc_check == "on"
        return transport == "ibverbs" and not self.icrc_disable_command


class Dpdk(Strict):
    """Which DPDK the hosts run."""

    # debian: Debian's 22.11 packages; prefix: a source build installed under `prefix`
    # (meson install; its libdpdk.pc is found below it). With a source build the
    # binaries are built on each host (deploy.build: host).
    source: Literal["debian", "prefix"] = "debian"
    prefix: Path | None = None
    version: str = "22.11"

    @model_validator(mode="after")
    def _prefix(self) -> Dpdk:
        if self.source == "prefix" and self.prefix is None:
            raise bad(
                "dpdk.source: prefix needs dpdk.prefix, where the source build is installed",
                "add prefix: /opt/dpdk-22.11 (the --prefix of its meson build)",
            )
        if self.source == "debian" and self.prefix is not None:
            raise bad("dpdk.prefix is only read with source: prefix", "set source: prefix, or remove prefix")
        return self


class Deploy(Strict):
    """How rain-client, rain-worker and the agents reach the hosts (rainmaker_deploy)."""

    # local: the binaries built here (make build) are copied, so the hosts need the same
    # DPDK ABI (Debian 12's 22.11); host: the sources are copied and built on each host.
    build: Literal["local", "host"] = "local"


class Jump(Strict):
    """A gateway (bastion) host every SSH connection of the testbed goes through, as
    `ssh -J` would: the machines' mgmt addresses are the ones the gateway reaches. Its
    host key is pinned like every other (its own known_hosts, or the inventory's)."""

    address: str
    user: str
    port: int = Field(22, ge=1, le=65535)
    key: Path | None = None  # private key for the gateway; default: ssh.key
    known_hosts: Path | None = None  # the gateway's pinned host key; default: ssh.known_hosts

    @field_validator("address")
    @classmethod
    def _addr(cls, v: str) -> str:
        return host_address(v, "the gateway's address", "gateway.lab.example.org")

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return login_name(v, "use your login name on the gateway, e.g. alice")


class Ssh(Strict):
    """SSH settings shared by every machine of the testbed."""

    key: Path | None = None  # default private key for every mgmt block
    known_hosts: Path | None = None  # pinned host keys; unknown hosts are refused
    # The gateway every connection goes through, when the machines are reachable only
    # from it (a lab behind a bastion); none: the machines are reached directly.
    jump: Jump | None = None
    # How long a machine may take to answer a new connection, and how long one that goes
    # silent on an open connection is waited for before it is lost (its point fails; a
    # retry waits for it): a testbed on one LAN may shorten them, one across the
    # Internet lengthen them.
    connect_timeout_s: float = Field(10.0, ge=1, le=600)
    dead_peer_s: float = Field(10.0, ge=1, le=600)


LINK_DELAY_US_MAX = 1e6  # the emulator's bound (switch/emulator/ports.py): one second
CPUS_MAX = 1024  # glibc's CPU_SETSIZE: the CPU numbers sched_setaffinity (and taskset) take are below it


class Emulation(Strict):
    """Present only in inventories written by `rainmaker testbed up`."""

    state_dir: Path
    slot: int = Field(0, ge=0, le=15)
    # Every frame the emulated switch sends leaves this many microseconds (testbed time)
    # after its pipeline emitted it: longer links, or a slower switch, on purpose.
    link_delay_us: float = 0.0
    # The cores every process of the testbed may run on (each sshd starts confined to
    # them, and everything started over SSH inherits it); empty: every core of the machine.
    cpus: list[int] = Field(default_factory=list)

    @field_validator("link_delay_us")
    @classmethod
    def _delay(cls, v: float) -> float:
        if not 0 <= v <= LINK_DELAY_US_MAX:  # (nan fails both)
            raise bad(
                f"a link delay of {v:g} us is not 0..{LINK_DELAY_US_MAX:.0f}",
                "give microseconds of testbed time, e.g. 2000 for 2 ms (0: none)",
            )
        return v

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: list[int]) -> list[int]:
        wrong = [c for c in v if not 0 <= c < CPUS_MAX]
        if wrong:
            raise bad(
                f"{wrong[0]} is not a CPU number (0..{CPUS_MAX - 1})",
                "list the cores the testbed may run on, numbered as /sys/devices/system/cpu/online "
                "numbers them, e.g. cpus: [2, 3] (or leave cpus out: every core)",
            )
        twice = sorted({c for c in v if v.count(c) > 1})
        if twice:
            raise bad(f"CPU {twice[0]} is listed more than once", "list each core once, e.g. cpus: [2, 3]")
        return v


class Inventory(Strict):
    name: Name
    switch: Switch
    hosts: list[Host] = Field(min_length=1)
    ssh: Ssh = Ssh()
    roce: Roce = Roce()
    dpdk: Dpdk = Dpdk()
    deploy: Deploy = Deploy()
    emulation: Emulation | None = None

    # -- queries -------------------------------------------------------------
    @property
    def is_emulated(self) -> bool:
        return self.switch.kind == "emulated"

    @property
    def shared_system(self) -> bool:
        """Whether the machines are namespaces of one machine (the emulated testbed, or
        a tofino-model testbed built on it): one kernel, one file system, one apt."""
        return self.switch.netns is not None or any(h.netns is not None for h in self.hosts)

    @property
    def realtime_fits(self) -> bool:
        """Whether the testbed's measuring threads (the client's load, the emulated
        switch's data plane) may run real-time (SCHED_FIFO) on the cores they share: not
        on a testbed confined to one core. There the client (at most 80% of a core) and
        the switch (filling the client's rests) leave nothing to the threads they wait
        for, the workers' pollers and the runner (a testbed on one core froze for 10
        minutes so); with two cores or more, one stays for them."""
        return self.emulation is None or len(self.emulation.cpus) != 1

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
        """(host name, switch port) for every cable (none on a lan)."""
        return [(h.name, h.nic.switch_port) for h in self.hosts if h.nic.switch_port is not None]

    def key_for(self, mgmt: Mgmt) -> Path | None:
        return mgmt.key or self.ssh.key

    @property
    def jump_key(self) -> Path | None:
        """The private key for the gateway (ssh.jump.key, or ssh.key); None without a gateway."""
        j = self.ssh.jump
        return None if j is None else j.key or self.ssh.key

    @property
    def jump_known_hosts(self) -> Path | None:
        """Where the gateway's host key is pinned (ssh.jump.known_hosts, or ssh.known_hosts)."""
        j = self.ssh.jump
        return None if j is None else j.known_hosts or self.ssh.known_hosts
