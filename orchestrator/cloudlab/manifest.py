"""Read a CloudLab manifest: the RSpec v3 document that says what an experiment got.

A manifest lists the experiment's nodes (their logins, control host names, hardware
type, disk image) and, per node, its interfaces with the MAC and IPv4 address each
got, and the links (point-to-point or LANs) that join interfaces. geni-lib's own
reader is Python 2 only, so this module parses the XML itself, with expat for line
numbers: every problem names the element, its line and the fix, and all problems
are reported at once. A document with a DTD is refused before anything is expanded
(manifests have none; entities are how XML bombs work).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from ..errors import ManifestError, Problem

RSPEC3 = "http://www.geni.net/resources/rspec/3"
RSPEC2 = "http://www.protogeni.net/resources/rspec/2"
EMULAB = "http://www.protogeni.net/resources/rspec/ext/emulab/1"
# geni-lib's Link.connectSharedVlan(name): the link joins a VLAN that outlives the
# experiment, which is how a switch of your own (not a node of it) reaches the hosts.
SHARED_VLAN = "http://www.geni.net/resources/rspec/ext/shared-vlan/1"

_MAC_BARE = re.compile(r"^[0-9a-f]{12}$")
_MAC_SEP = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")

DOWNLOAD_FIX = 'download the manifest again from the running experiment\'s page in the portal (tab "Manifest")'


def normalise_mac(value: str) -> str | None:
    """'0c42a1dd5f3a', '0C:42:A1:DD:5F:3A' or '0c-42-...' -> '0c:42:a1:dd:5f:3a'; None if not a MAC."""
    v = value.strip().lower()
    if _MAC_BARE.match(v):
        return ":".join(v[i : i + 2] for i in range(0, 12, 2))
    if _MAC_SEP.match(v):
        return v.replace("-", ":")
    return None


@dataclass(frozen=True)
class Login:
    user: str
    hostname: str
    port: int = 22
    authentication: str = "ssh-keys"


@dataclass(frozen=True)
class Interface:
    client_id: str
    node: str  # client_id of the node it belongs to
    line: int
    component_id: str | None = None
    mac: str | None = None  # normalised (aa:bb:...), when the manifest gives it
    ip: ipaddress.IPv4Interface | None = None  # address/prefix (prefix 32 when no netmask is given)

    @property
    def ip_address(self) -> str | None:
        return None if self.ip is None else str(self.ip.ip)


@dataclass(frozen=True)
class Node:
    client_id: str
    line: int
    component_id: str | None = None
    component_manager_id: str | None = None
    sliver_id: str | None = None
    sliver_type: str | None = None
    disk_image: str | None = None
    hardware_type: str | None = None
    physical: str | None = None  # the machine's own name at the cluster (emulab:vnode), e.g. pc749
    logins: tuple[Login, ...] = ()
    host_name: str | None = None  # control-network DNS name (<host name=...>)
    host_ipv4: str | None = None  # control-network address (<host ipv4=...>)
    interfaces: tuple[Interface, ...] = ()

    @property
    def control_address(self) -> str | None:
        """Where SSH reaches it: the login's host name, else the control address or name."""
        if self.logins:
            return self.logins[0].hostname
        return self.host_ipv4 or self.host_name


@dataclass(frozen=True)
class Link:
    client_id: str
    line: int
    interfaces: tuple[str, ...]  # interface client_ids
    link_type: str | None = None  # "lan" for a LAN; None or another name for a link
    ref_lines: tuple[int, ...] = ()  # the line of each interface_ref
    shared_vlan: str | None = None  # the shared VLAN's name (<link_shared_vlan name=...>), if any

    @property
    def is_lan(self) -> bool:
        return self.link_type == "lan" or len(self.interfaces) > 2


@dataclass(frozen=True)
class Manifest:
    source: str
    sha256: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    expires: str | None = None
    generated: str | None = None
    _by_node: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)
    _by_iface: dict[str, Interface] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_node.update({n.client_id: n for n in self.nodes})
        self._by_iface.update({i.client_id: i for n in self.nodes for i in n.interfaces})

    def node(self, client_id: str) -> Node | None:
        return self._by_node.get(client_id)

    def interface(self, client_id: str) -> Interface | None:
        return self._by_iface.get(client_id)

    def link_of(self, iface: str) -> Link | None:
        return next((lk for lk in self.links if iface in lk.interfaces), None)

    @property
    def cluster(self) -> str | None:
        """The aggregate's domain, e.g. utah.cloudlab.us (from the nodes' component manager)."""
        for n in self.nodes:
            m = re.match(r"^urn:publicid:IDN\+([^+]+)\+authority\+", n.component_manager_id or "")
            if m:
                return m.group(1)
        return None

    @property
    def experiment(self) -> tuple[str | None, str | None]:
        """(experiment, project) from a control host name: <node>.<experiment>.<project>.<cluster domain>."""
        for n in self.nodes:
            if n.host_name and n.host_name.startswith(n.client_id + "."):
                parts = n.host_name[len(n.client_id) + 1 :].split(".")
                if len(parts) >= 3:
                    return parts[0], parts[1]
        return None, None


# -- XML with line numbers ------------------------------------------------------------


class _El:
    __slots__ = ("ns", "tag", "attrib", "children", "line")

    def __init__(self, ns: str, tag: str, attrib: dict[str, str], line: int):
        self.ns, self.tag, self.attrib, self.line = ns, tag, attrib, line
        self.children: list[_El] = []

    def all(self, tag: str, ns: str = RSPEC3) -> list[_El]:
        return [c for c in self.children if c.tag == tag and c.ns == ns]

    def first(self, tag: str, ns: str = RSPEC3) -> _El | None:
        found = self.all(tag, ns)
        return found[0] if found else None


class _Refused(Exception):
    pass


def _split(name: str) -> tuple[str, str]:
    ns, _, local = name.rpartition(" ")
    return ns, local


def _xml(data: bytes, problems: list[Problem]) -> _El | None:
    parser = expat.ParserCreate(namespace_separator=" ")
    stack: list[_El] = []
    root: list[_El] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        ns, tag = _split(name)
        # Unprefixed attributes have no namespace; keep those by their plain names.
        el = _El(ns, tag, {k: v for k, v in attrs.items() if " " not in k}, parser.CurrentLineNumber)
        (stack[-1].children if stack else root).append(el)
        stack.append(el)

    def end(name: str) -> None:
        stack.pop()

    def refuse(*_args) -> None:
        raise _Refused(parser.CurrentLineNumber)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    try:
        parser.Parse(data, True)
    except _Refused as e:
        problems.append(
            Problem(
                "",
                "the document declares a DTD or entities, which a manifest never does",
                "use the manifest exactly as the portal gives it",
                e.args[0],
            )
        )
        return None
    except expat.ExpatError as e:
        problems.append(
            Problem(
                "",
                f"not valid XML: {expat.ErrorString(e.code)} (column {e.offset + 1})",
                "give the manifest's XML file, complete: " + DOWNLOAD_FIX,
                e.lineno,
            )
        )
        return None
    return root[0] if root else None


# -- the RSpec v3 manifest ----------------------------------------------------------


def load(path: str | Path) -> Manifest:
    """Parse a manifest file; raise ManifestError naming every problem."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ManifestError(str(path), [Problem("", f"cannot read the file: {e.strerror}", "check the path")]) from None
    return parse(data, str(path))


def parse(data: bytes | str, source: str = "<manifest>") -> Manifest:
    if isinstance(data, str):
        data = data.encode()
    problems: list[Problem] = []
    root = _xml(data, problems)
    if root is None:
        raise ManifestError(source, problems)
    _check_root(root, problems)
    if problems:
        raise ManifestError(source, problems)

    nodes = [n for el in root.all("node") if (n := _node(el, problems)) is not None]
    links = [lk for el in root.all("link") if (lk := _link(el, problems)) is not None]
    if not root.all("node"):
        problems.append(
            Problem(
                "rspec", "the manifest has no node", "the experiment must have its nodes: " + DOWNLOAD_FIX, root.line
            )
        )
    _check_ids(nodes, links, problems)
    if problems:
        raise ManifestError(source, problems)
    return Manifest(
        source=source,
        sha256=hashlib.sha256(data).hexdigest(),
        nodes=tuple(nodes),
        links=tuple(links),
        expires=root.attrib.get("expires"),
        generated=root.attrib.get("generated"),
    )


def _check_root(root: _El, problems: list[Problem]) -> None:
    if root.tag != "rspec":
        problems.append(
            Problem(
                root.tag,
                f"the document is a <{root.tag}>, not an RSpec (<rspec>)",
                "give the experiment's manifest: " + DOWNLOAD_FIX,
                root.line,
            )
        )
        return
    if root.ns == RSPEC2:
        problems.append(
            Problem(
                "rspec",
                "this is an RSpec v2 (ProtoGENI) document; rainmaker reads RSpec v3",
                'download the manifest in GENI RSpec v3 form (xmlns="' + RSPEC3 + '")',
                root.line,
            )
        )
        return
    if root.ns != RSPEC3:
        got = f"namespace '{root.ns}'" if root.ns else "no namespace"
        problems.append(
            Problem(
                "rspec",
                f"the <rspec> element has {got}, not RSpec v3's",
                f'an RSpec v3 manifest declares xmlns="{RSPEC3}": ' + DOWNLOAD_FIX,
                root.line,
            )
        )
        return
    kind = root.attrib.get("type")
    if kind == "manifest":
        return
    if kind == "request":
        problems.append(
            Problem(
                "rspec.type",
                "this is a request RSpec (what a profile asks for), not a manifest "
                "(what the experiment got: MACs, logins)",
                DOWNLOAD_FIX,
                root.line,
            )
        )
    elif kind == "advertisement":
        problems.append(
            Problem(
                "rspec.type",
                "this is an advertisement RSpec (a cluster's resources), not a manifest",
                DOWNLOAD_FIX,
                root.line,
            )
        )
    else:
        what = f"type '{kind}'" if kind else "no type"
        problems.append(
            Problem("rspec.type", f'the <rspec> has {what}; a manifest has type="manifest"', DOWNLOAD_FIX, root.line)
        )


def _node(el: _El, problems: list[Problem]) -> Node | None:
    cid = el.attrib.get("client_id")
    if not cid:
        problems.append(
            Problem(
                "node",
                "a <node> without client_id",
                "every node of a manifest has its client_id: " + DOWNLOAD_FIX,
                el.line,
            )
        )
        return None
    where = f"node[{cid}]"
    st = el.first("sliver_type")
    image = st.first("disk_image") if st is not None else None
    hw = el.first("hardware_type")
    vnode = el.first("vnode", EMULAB)
    host = el.first("host")

    logins = []
    services = el.first("services")
    for lg in services.all("login") if services is not None else []:
        user, hostname, port = lg.attrib.get("username"), lg.attrib.get("hostname"), lg.attrib.get("port", "22")
        if not user or not hostname:
            problems.append(
                Problem(f"{where}.services.login", "a <login> needs both username and hostname", DOWNLOAD_FIX, lg.line)
            )
            continue
        if not port.isdigit() or not 0 < int(port) < 65536:
            problems.append(
                Problem(f"{where}.services.login.port", f"'{port}' is not a TCP port", DOWNLOAD_FIX, lg.line)
            )
            continue
        logins.append(Login(user, hostname, int(port), lg.attrib.get("authentication", "ssh-keys")))

    ifaces = []
    for ie in el.all("interface"):
        icid = ie.attrib.get("client_id")
        if not icid:
            problems.append(Problem(f"{where}.interface", "an <interface> without client_id", DOWNLOAD_FIX, ie.line))
            continue
        iwhere = f"{where}.interface[{icid}]"
        mac = None
        raw_mac = ie.attrib.get("mac_address")
        if raw_mac is not None:
            mac = normalise_mac(raw_mac)
            if mac is None:
                problems.append(
                    Problem(
                        f"{iwhere}.mac_address",
                        f"'{raw_mac}' is not a MAC address",
                        "a MAC is six hex bytes, as 0c42a1dd5f3a or 0c:42:a1:dd:5f:3a",
                        ie.line,
                    )
                )
        ifaces.append(Interface(icid, cid, ie.line, ie.attrib.get("component_id"), mac, _ip(ie, iwhere, problems)))

    return Node(
        client_id=cid,
        line=el.line,
        component_id=el.attrib.get("component_id"),
        component_manager_id=el.attrib.get("component_manager_id"),
        sliver_id=el.attrib.get("sliver_id"),
        sliver_type=st.attrib.get("name") if st is not None else None,
        disk_image=image.attrib.get("name") if image is not None else None,
        hardware_type=(hw.attrib.get("name") if hw is not None else None)
        or (vnode.attrib.get("hardware_type") if vnode is not None else None),
        physical=vnode.attrib.get("name") if vnode is not None else None,
        logins=tuple(logins),
        host_name=host.attrib.get("name") if host is not None else None,
        host_ipv4=host.attrib.get("ipv4") if host is not None else None,
        interfaces=tuple(ifaces),
    )


def _ip(ie: _El, where: str, problems: list[Problem]) -> ipaddress.IPv4Interface | None:
    for ip in ie.all("ip"):
        if ip.attrib.get("type", "ipv4") != "ipv4":
            continue
        addr, mask = ip.attrib.get("address"), ip.attrib.get("netmask")
        try:
            a = ipaddress.IPv4Address(addr or "")
        except ValueError:
            problems.append(Problem(f"{where}.ip.address", f"'{addr}' is not an IPv4 address", DOWNLOAD_FIX, ip.line))
            return None
        if not mask:
            return ipaddress.IPv4Interface(f"{a}/32")
        try:
            return ipaddress.IPv4Interface(f"{a}/{mask}")
        except ValueError:
            problems.append(
                Problem(
                    f"{where}.ip.netmask",
                    f"'{mask}' is not a netmask",
                    "write it dotted, like 255.255.255.0, or as a prefix length",
                    ip.line,
                )
            )
            return None
    return None


def _link(el: _El, problems: list[Problem]) -> Link | None:
    cid = el.attrib.get("client_id")
    if not cid:
        problems.append(Problem("link", "a <link> without client_id", DOWNLOAD_FIX, el.line))
        return None
    refs, lines = [], []
    for ref in el.all("interface_ref"):
        rid = ref.attrib.get("client_id")
        if not rid:
            problems.append(
                Problem(f"link[{cid}].interface_ref", "an <interface_ref> without client_id", DOWNLOAD_FIX, ref.line)
            )
            continue
        refs.append(rid)
        lines.append(ref.line)
    lt = el.first("link_type")
    sv = el.first("link_shared_vlan", SHARED_VLAN)
    return Link(
        cid,
        el.line,
        tuple(refs),
        lt.attrib.get("name") if lt is not None else None,
        tuple(lines),
        (sv.attrib.get("name") or "?") if sv is not None else None,
    )


def _check_ids(nodes: list[Node], links: list[Link], problems: list[Problem]) -> None:
    seen_nodes: dict[str, int] = {}
    for n in nodes:
        if n.client_id in seen_nodes:
            problems.append(
                Problem(
                    f"node[{n.client_id}]",
                    f"client_id '{n.client_id}' is already a node on line {seen_nodes[n.client_id]}",
                    "client_ids are unique in a manifest (was it edited or merged?): " + DOWNLOAD_FIX,
                    n.line,
                )
            )
        else:
            seen_nodes[n.client_id] = n.line
    owner: dict[str, Interface] = {}
    for n in nodes:
        for i in n.interfaces:
            if i.client_id in owner:
                first = owner[i.client_id]
                problems.append(
                    Problem(
                        f"node[{n.client_id}].interface[{i.client_id}]",
                        f"interface '{i.client_id}' already belongs to node {first.node} (line {first.line})",
                        "interface client_ids are unique in a manifest (was it edited or merged?): " + DOWNLOAD_FIX,
                        i.line,
                    )
                )
            else:
                owner[i.client_id] = i
    seen_links: dict[str, int] = {}
    on_link: dict[str, str] = {}
    for lk in links:
        where = f"link[{lk.client_id}]"
        if lk.client_id in seen_links:
            problems.append(
                Problem(
                    where,
                    f"client_id '{lk.client_id}' is already a link on line {seen_links[lk.client_id]}",
                    "link client_ids are unique in a manifest (was it edited or merged?): " + DOWNLOAD_FIX,
                    lk.line,
                )
            )
            continue
        seen_links[lk.client_id] = lk.line
        # A shared VLAN's far end (a switch of your own) is no interface of the experiment.
        if len(lk.interfaces) < (1 if lk.shared_vlan else 2):
            problems.append(
                Problem(
                    where,
                    f"link '{lk.client_id}' joins {len(lk.interfaces)} interface(s); a link joins two or more"
                    + (" (a shared VLAN, one or more)" if lk.shared_vlan else ""),
                    DOWNLOAD_FIX,
                    lk.line,
                )
            )
        for ref, line in zip(lk.interfaces, lk.ref_lines):
            if ref not in owner:
                problems.append(
                    Problem(
                        f"{where}.interface_ref[{ref}]",
                        f"link '{lk.client_id}' refers to interface '{ref}', which no node has",
                        "the manifest is incomplete or was edited: " + DOWNLOAD_FIX,
                        line,
                    )
                )
            elif ref in on_link:
                problems.append(
                    Problem(
                        f"{where}.interface_ref[{ref}]",
                        f"interface '{ref}' is already on link '{on_link[ref]}'",
                        "an interface is on one link or LAN: " + DOWNLOAD_FIX,
                        line,
                    )
                )
            else:
                on_link[ref] = lk.client_id
