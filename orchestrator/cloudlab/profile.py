"""Topology -> a CloudLab profile: the geni-lib `profile.py` the portal runs.

The portal executes a profile with its own geni-lib to build the request RSpec. The
geni-lib on PyPI cannot import `geni.portal` on Python 3, so rainmaker does not run
geni-lib here: it renders the profile as text from a template. The text is plain
Python that runs under both Python 2 and 3 (the portal has used both), and it
exposes the counts, hardware types and images as profile parameters, so that the
portal's instantiation page can change them without editing code.

The topology is the Rain testbed's: clients and workers are raw PCs with one data
interface each, every one on its own point-to-point link to a port of the Tofino
switch, which CloudLab allocates as a node too. Data addresses come from one subnet:
the clients first (.1, ...), then the workers; the last address of the subnet stays
free for the switch's scheduling address. The names (`tofino`, `client0`,
`worker0`, interfaces `client0:data` and `tofino:client0`) are what
`rainmaker cloudlab import` expects back in the manifest.

The other topology, `kind="lan"`, is the one of Rakaia's paper: the hosts (xl170
nodes, Ubuntu 24.04) on one experiment LAN of the cluster's own Ethernet switches, no
Tofino. rainmaker programs nothing on it (the inventory's `switch.kind: lan`), so only
the systems that schedule inside the server run there. Its names (`client0`,
`worker0`, interfaces `client0:data` on the LAN `lan`) are what `rainmaker cloudlab
import` recognises: no switch node, and one LAN joining every node.

The third, `kind="shared-vlan"`, is for a Tofino outside the experiment (a lab's own
switch, reached over a CloudLab shared VLAN): no switch node; the hosts' data
interfaces are on one LAN, `data-vlan`, that joins the named shared VLAN (geni-lib's
`Link.connectSharedVlan`; the VLAN itself is created by whoever owns it, with
`createSharedVlan`, and shared with the project). Data addresses are as in the Tofino
topology (the last stays for the switch's scheduling address); `rainmaker cloudlab
import` takes the switch from the map file (`switch: {external: true, ...}`) and
finds the hosts on the shared-VLAN link of the manifest.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ..errors import CloudlabError

# Disk images that CloudLab's clusters all carry (emulab-ops standard images).
IMAGES = {
    "ubuntu22": "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU22-64-STD",
    "ubuntu24": "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU24-64-STD",
    "ubuntu20": "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU20-64-STD",
}
_LABELS = {"ubuntu22": "Ubuntu 22.04", "ubuntu24": "Ubuntu 24.04", "ubuntu20": "Ubuntu 20.04"}
DEFAULT_IMAGE = "ubuntu22"
DEFAULT_HOST_TYPE = "d6515"  # CloudLab Utah: AMD EPYC, dual-port 100G ConnectX-5
# Which type stands for a Tofino switch differs by cluster and changes over time: the
# user must look it up (the cluster's hardware page) and pass --switch-hardware-type.
DEFAULT_SWITCH_TYPE = "tofino"
MAX_HOSTS = 64
# Rakaia's paper: CloudLab Utah's xl170 (10-core E5-2640v4, 25 GbE ConnectX-4 Lx), Ubuntu
# 24.04, one server and one load generator on the experiment LAN
RAKAIA = {"kind": "lan", "clients": 1, "workers": 1, "hardware_type": "xl170", "image": "ubuntu24",
          "bandwidth_gbps": 25}  # fmt: skip

_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_URN_RE = re.compile(r"^urn:publicid:IDN\+[A-Za-z0-9.-]+\+image\+[A-Za-z0-9_.-]+(//?|:)[A-Za-z0-9_.:-]+$")
_NODE_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
_VLAN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
KINDS = ("tofino", "lan", "shared-vlan")
VLAN_LINK = "data-vlan"  # the hosts' LAN joined to the shared VLAN (its client_id in the manifest)


@dataclass(frozen=True)
class Topology:
    clients: int = 1
    workers: int = 2
    hardware_type: str = DEFAULT_HOST_TYPE
    image: str = DEFAULT_IMAGE  # a name of IMAGES, or an image URN
    switch_name: str = "tofino"
    switch_hardware_type: str = DEFAULT_SWITCH_TYPE
    switch_image: str | None = None  # None: the hardware type's own default image
    subnet: str = "10.10.1.0/24"
    bandwidth_gbps: int = 100
    kind: str = "tofino"  # tofino: each host cabled to the switch node; lan: one LAN, no switch (--network)
    shared_vlan: str | None = None  # shared-vlan: the shared VLAN's name (--shared-vlan)

    def check(self) -> Topology:
        """Refuse what the portal would refuse later, naming the option and the fix."""

        def no(msg: str, fix: str) -> CloudlabError:
            return CloudlabError(msg, fix=fix)

        if self.kind not in KINDS:
            raise no(f"--network '{self.kind}' is not a topology", "use " + ", ".join(KINDS))
        if self.kind == "shared-vlan":
            if not self.shared_vlan:
                raise no(
                    "--network shared-vlan needs the shared VLAN's name",
                    "add --shared-vlan NAME: the name its owner gave it (the portal lists the shared VLANs "
                    "your project may join)",
                )
            if not _VLAN_RE.match(self.shared_vlan):
                raise no(
                    f"--shared-vlan '{self.shared_vlan}' is not a shared VLAN name",
                    "use letters, digits, '-' and '_' (at most 32), as the portal lists it",
                )
        elif self.shared_vlan is not None:
            raise no(
                f"--shared-vlan {self.shared_vlan} names a shared VLAN, and --network {self.kind} has none",
                "add --network shared-vlan (a Tofino outside the experiment), or drop --shared-vlan",
            )
        if self.clients < 1 or self.workers < 1:
            raise no(
                "a Rain testbed needs at least one client and one worker",
                "use --clients 1 or more, --workers 1 or more",
            )
        if self.kind != "lan" and self.clients + self.workers > MAX_HOSTS:
            raise no(
                f"{self.clients + self.workers} hosts: a Tofino has at most {MAX_HOSTS} ports to cable them to",
                f"ask for at most {MAX_HOSTS} clients and workers together",
            )
        for opt, v in (("--hardware-type", self.hardware_type), ("--switch-hardware-type", self.switch_hardware_type)):
            if not _TYPE_RE.match(v):
                raise no(
                    f"{opt} '{v}' is not a hardware type name",
                    "use the type's name as the cluster lists it, like d6515",
                )
        for opt, v in (("--image", self.image), ("--switch-image", self.switch_image)):
            if v is not None and v not in IMAGES and not _URN_RE.match(v):
                raise no(
                    f"{opt} '{v}' is neither a known image ({', '.join(IMAGES)}) nor an image URN",
                    "give a name from that list, or a URN like " + IMAGES[DEFAULT_IMAGE],
                )
        if not _NODE_RE.match(self.switch_name) or re.match(r"^(client|worker)", self.switch_name):
            raise no(
                f"--switch-name '{self.switch_name}' cannot name the switch node",
                "use lower-case letters, digits and '-', not starting with client or worker (default: tofino)",
            )
        net = self.network
        if net.num_addresses - 2 < self.clients + self.workers + 1:
            raise no(
                f"subnet {net} has {max(net.num_addresses - 2, 0)} host addresses; {self.clients + self.workers} hosts "
                "and the switch's scheduling address need more",
                "use a larger subnet, e.g. --subnet 10.10.1.0/24",
            )
        if not 1 <= self.bandwidth_gbps <= 400:
            raise no(f"--bandwidth-gbps {self.bandwidth_gbps} is not a link speed", "give the NICs' speed, e.g. 100")
        return self

    @property
    def network(self) -> ipaddress.IPv4Network:
        try:
            net = ipaddress.IPv4Network(self.subnet, strict=False)
        except ValueError:
            raise CloudlabError(
                f"--subnet '{self.subnet}' is not an IPv4 network", fix="write it as address/prefix, e.g. 10.10.1.0/24"
            ) from None
        if not net.is_private:
            raise CloudlabError(
                f"--subnet {net} is not a private network: the data network must not shadow real addresses",
                fix="use a private range, e.g. 10.10.1.0/24",
            )
        return net

    @property
    def image_urn(self) -> str:
        return IMAGES.get(self.image, self.image)

    @property
    def switch_image_urn(self) -> str:
        return "" if self.switch_image is None else IMAGES.get(self.switch_image, self.switch_image)

    def host_names(self) -> list[str]:
        return [f"client{i}" for i in range(self.clients)] + [f"worker{i}" for i in range(self.workers)]

    def addresses(self) -> dict[str, str]:
        """Each host's data address, as the profile assigns them (clients first)."""
        hosts = list(self.network.hosts())
        return {name: str(hosts[i]) for i, name in enumerate(self.host_names())}


# The generated script's helpers both topologies share (no braces: it is a format value).
_HOSTS_CODE = """
def dotted(n):
    return ".".join(str((n >> s) & 255) for s in (24, 16, 8, 0))


hosts = ["client%d" % i for i in range(params.clients)] + ["worker%d" % i for i in range(params.workers)]"""

# The parts every profile shares, each a format string like the templates they join.
_DATA_CODE = """NETWORK = {network!r}  # the data network {subnet}, as a 32-bit number
PREFIX = {prefix}
IMAGES = [
{images}
]
"""
# The hosts of a LAN profile (lan, shared-vlan): each with one data address on the LAN.
_LAN_HOSTS_CODE = """
netmask = dotted((0xFFFFFFFF << (32 - PREFIX)) & 0xFFFFFFFF)
for i, name in enumerate(hosts):
    host = request.RawPC(name)
    host.hardware_type = params.host_type
    host.disk_image = params.host_image
    lan.addInterface(host.addInterface("data", pg.IPv4Address(dotted(NETWORK + 1 + i), netmask)))

pc.printRequestRSpec(request)
"""

# A Rain testbed's checks of its parameters (tofino, shared-vlan): hosts of both roles,
# then addresses and Tofino ports enough for them (formatted first, then inserted).
_RAIN_HOSTS_CHECK = """if params.clients < 1:
    pc.reportError(portal.ParameterError("A Rain testbed needs at least one client.", ["clients"]))
if params.workers < 1:
    pc.reportError(portal.ParameterError("A Rain testbed needs at least one worker.", ["workers"]))"""
_RAIN_SWITCH_CHECK = """if len(hosts) + 1 > (1 << (32 - PREFIX)) - 2:
    pc.reportError(portal.ParameterError("The data network %s/%d cannot address %d hosts and the switch."
                                         % (dotted(NETWORK), PREFIX, len(hosts)), ["clients", "workers"]))
if len(hosts) > {max_hosts}:
    pc.reportError(portal.ParameterError("A Tofino has at most {max_hosts} ports for the hosts.", ["clients", "workers"]))"""

_TEMPLATE = (
    '''\
"""Rain testbed: {clients} client(s) and {workers} worker(s) on {hardware_type}, each cabled to a Tofino switch.

Every host has one data interface on a point-to-point link to its own port of the
switch; data addresses are {subnet} (clients first, then workers; the last address
stays free for the switch's scheduling address). Written by rainmaker:
    {command}

Instructions:
When the experiment is ready, download its manifest (the experiment's page, tab
"Manifest") and turn it into a rainmaker inventory:

    rainmaker cloudlab import manifest.xml --map map.yaml -o cloudlab.yaml
    rainmaker provision --check -i cloudlab.yaml
"""

import geni.portal as portal
import geni.rspec.pg as pg
import geni.rspec.emulab  # noqa: F401  Emulab's extensions (type default image, no shaping)

SWITCH = {switch_name!r}
'''
    + _DATA_CODE
    + """
pc = portal.Context()
pc.defineParameter("clients", "Client hosts (they send the load)", portal.ParameterType.INTEGER, {clients})
pc.defineParameter("workers", "Worker hosts (they serve it)", portal.ParameterType.INTEGER, {workers})
pc.defineParameter("host_type", "Hardware type of the hosts", portal.ParameterType.NODETYPE, {hardware_type!r},
                   longDescription="Raw PCs with a ConnectX NIC that reaches the Tofino switch.")
pc.defineParameter("host_image", "Disk image of the hosts", portal.ParameterType.IMAGE, {image!r}, IMAGES)
pc.defineParameter("switch_type", "Hardware type of the Tofino switch", portal.ParameterType.NODETYPE,
                   {switch_hardware_type!r},
                   longDescription="Clusters name their Tofino switches differently: check the cluster's "
                   "hardware list, and pick the cluster of the hosts.")
pc.defineParameter("switch_image", "Disk image of the switch (empty: the switch type's own image)",
                   portal.ParameterType.IMAGE, {switch_image!r}, advanced=True)
pc.defineParameter("bandwidth_gbps", "Speed of each data link (Gb/s)", portal.ParameterType.INTEGER,
                   {bandwidth_gbps}, advanced=True)
params = pc.bindParameters()

{hosts_code}
{rain_hosts_check}
{rain_switch_check}
pc.verifyParameters()

request = pc.makeRequestRSpec()

switch = request.RawPC(SWITCH)
switch.hardware_type = params.switch_type
if params.switch_image:
    switch.disk_image = params.switch_image
else:
    switch.setUseTypeDefaultImage()

netmask = dotted((0xFFFFFFFF << (32 - PREFIX)) & 0xFFFFFFFF)
for i, name in enumerate(hosts):
    host = request.RawPC(name)
    host.hardware_type = params.host_type
    host.disk_image = params.host_image
    data = host.addInterface("data", pg.IPv4Address(dotted(NETWORK + 1 + i), netmask))
    port = switch.addInterface(name)  # the switch's side: SWITCH:<host>
    link = request.Link("link-" + name, members=[data, port])
    link.bandwidth = params.bandwidth_gbps * 1000 * 1000  # kb/s
    # A direct cable: no shaping node, no trunk between the cluster's switches.
    link.setNoBandwidthShaping()
    link.setNoInterSwitchLinks()

pc.printRequestRSpec(request)
"""
)


_LAN_TEMPLATE = (
    '''\
"""Hosts on one LAN: {clients} client(s) and {workers} server(s) on {hardware_type}, no Tofino.

The topology of Rakaia's measured results: the hosts share one experiment LAN of the
cluster's own Ethernet switches; data addresses are {subnet} (clients first, then
the servers). rainmaker programs nothing on it (switch.kind: lan), so it runs the
systems that schedule inside the server (Rakaia's specs, memcached). Written by rainmaker:
    {command}

Instructions:
When the experiment is ready, download its manifest (the experiment's page, tab
"Manifest") and turn it into a rainmaker inventory (switch {{name: lan, kind: lan}}):

    rainmaker cloudlab import manifest.xml --map map.yaml -o rakaia.yaml
    rainmaker provision --check -i rakaia.yaml
"""

import geni.portal as portal
import geni.rspec.pg as pg
import geni.rspec.emulab  # noqa: F401  Emulab's extensions (no shaping)

'''
    + _DATA_CODE
    + """
pc = portal.Context()
pc.defineParameter("clients", "Client hosts (they send the load)", portal.ParameterType.INTEGER, {clients})
pc.defineParameter("workers", "Server hosts (the first one serves; Rakaia's paper used one)",
                   portal.ParameterType.INTEGER, {workers})
pc.defineParameter("host_type", "Hardware type of the hosts", portal.ParameterType.NODETYPE, {hardware_type!r},
                   longDescription="Rakaia's paper: xl170 at CloudLab Utah (10-core E5-2640v4, 25 GbE).")
pc.defineParameter("host_image", "Disk image of the hosts", portal.ParameterType.IMAGE, {image!r}, IMAGES)
pc.defineParameter("bandwidth_gbps", "Speed of the LAN (Gb/s)", portal.ParameterType.INTEGER,
                   {bandwidth_gbps}, advanced=True)
params = pc.bindParameters()

{hosts_code}
if params.clients < 1:
    pc.reportError(portal.ParameterError("At least one client is needed.", ["clients"]))
if params.workers < 1:
    pc.reportError(portal.ParameterError("At least one server is needed.", ["workers"]))
if len(hosts) > (1 << (32 - PREFIX)) - 2:
    pc.reportError(portal.ParameterError("The data network %s/%d cannot address %d hosts."
                                         % (dotted(NETWORK), PREFIX, len(hosts)), ["clients", "workers"]))
pc.verifyParameters()

request = pc.makeRequestRSpec()
lan = request.LAN("lan")
lan.bandwidth = params.bandwidth_gbps * 1000 * 1000  # kb/s
# The cluster's switches, as the paper's hosts had them: no shaping node in the path.
lan.setNoBandwidthShaping()
lan.best_effort = True
"""
    + _LAN_HOSTS_CODE
)


_VLAN_TEMPLATE = (
    '''\
"""Rain testbed: {clients} client(s) and {workers} worker(s) on {hardware_type}, on the shared VLAN {shared_vlan}.

The Tofino switch is not part of the experiment: it belongs to a lab and is cabled
to the shared VLAN {shared_vlan!r}, which the hosts' data interfaces join (one LAN,
{vlan_link}). Data addresses are {subnet} (clients first, then workers; the last
address stays free for the switch's scheduling address). Written by rainmaker:
    {command}

Instructions:
When the experiment is ready, download its manifest (the experiment's page, tab
"Manifest") and turn it into a rainmaker inventory; the map file says where the
switch is (switch: {{external: true, address: ..., user: ...}}) and which of its
ports each host is cabled to:

    rainmaker cloudlab import manifest.xml --map map.yaml -o cloudlab.yaml
    rainmaker provision --check -i cloudlab.yaml
"""

import geni.portal as portal
import geni.rspec.pg as pg
import geni.rspec.emulab  # noqa: F401  Emulab's extensions (no shaping)

VLAN_LINK = {vlan_link!r}
'''
    + _DATA_CODE
    + """
pc = portal.Context()
pc.defineParameter("clients", "Client hosts (they send the load)", portal.ParameterType.INTEGER, {clients})
pc.defineParameter("workers", "Worker hosts (they serve it)", portal.ParameterType.INTEGER, {workers})
pc.defineParameter("host_type", "Hardware type of the hosts", portal.ParameterType.NODETYPE, {hardware_type!r},
                   longDescription="Raw PCs with a ConnectX NIC on the cluster that carries the shared VLAN.")
pc.defineParameter("host_image", "Disk image of the hosts", portal.ParameterType.IMAGE, {image!r}, IMAGES)
pc.defineParameter("shared_vlan", "Shared VLAN of the Tofino switch", portal.ParameterType.STRING,
                   {shared_vlan!r},
                   longDescription="The name its owner gave the shared VLAN the lab's Tofino is on; your "
                   "project must be allowed to join it.")
pc.defineParameter("bandwidth_gbps", "Speed of the data LAN (Gb/s)", portal.ParameterType.INTEGER,
                   {bandwidth_gbps}, advanced=True)
params = pc.bindParameters()

{hosts_code}
{rain_hosts_check}
if not params.shared_vlan:
    pc.reportError(portal.ParameterError("Name the shared VLAN the Tofino switch is on.", ["shared_vlan"]))
{rain_switch_check}
pc.verifyParameters()

request = pc.makeRequestRSpec()
lan = request.LAN(VLAN_LINK)
lan.bandwidth = params.bandwidth_gbps * 1000 * 1000  # kb/s
lan.setNoBandwidthShaping()
lan.connectSharedVlan(params.shared_vlan)  # the switch is on the VLAN, not in the experiment
"""
    + _LAN_HOSTS_CODE
)


def render(topo: Topology, command: str = "rainmaker cloudlab profile") -> str:
    """The profile's text. Every value is inserted as a Python literal (repr), never as code."""
    topo.check()
    net = topo.network
    images = [(urn, _LABELS[name]) for name, urn in IMAGES.items()]
    if topo.image_urn not in IMAGES.values():
        images.insert(0, (topo.image_urn, topo.image_urn.rpartition("+")[2].lstrip("/:")))
    images_text = "\n".join(f"    {pair!r}," for pair in images)
    values = dict(  # every template's fields (str.format ignores those a template lacks)
        clients=topo.clients,
        workers=topo.workers,
        hardware_type=topo.hardware_type,
        image=topo.image_urn,
        images=images_text,
        switch_name=topo.switch_name,
        switch_hardware_type=topo.switch_hardware_type,
        switch_image=topo.switch_image_urn,
        shared_vlan=topo.shared_vlan,
        vlan_link=VLAN_LINK,
        subnet=str(net),
        network=int(net.network_address),
        prefix=net.prefixlen,
        bandwidth_gbps=topo.bandwidth_gbps,
        max_hosts=MAX_HOSTS,
        command=_docstring_safe(command),
        hosts_code=_HOSTS_CODE,
    )
    values["rain_hosts_check"] = _RAIN_HOSTS_CHECK
    values["rain_switch_check"] = _RAIN_SWITCH_CHECK.format(**values)
    template = {"shared-vlan": _VLAN_TEMPLATE, "lan": _LAN_TEMPLATE}.get(topo.kind, _TEMPLATE)
    return template.format(**values)


def _docstring_safe(text: str) -> str:
    """A command line shown inside the profile's docstring, with nothing that could end it."""
    return re.sub(r"[^A-Za-z0-9 _./:=,+@-]", "?", text)
