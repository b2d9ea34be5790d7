"""Manifest + map file -> a rainmaker inventory.

Three steps, so that the command line can ask for what is missing in between:
`plan()` reads the manifest against the map (which node is the switch, or whether the
hosts share a plain LAN with no Tofino; which nodes are hosts, each host's role and
data interface) and refuses contradictions; `needs()` lists what neither says (each
with the question to ask, and an example for the map file); `build()` makes the
inventory once nothing is missing, and `write()` writes it with a header saying where
it came from and loads it back, so a file that would not validate is never left
behind as the inventory.

One module of about 1,050 lines, and plan() and needs() of about 190 lines each: the
steps read the same manifest and map shapes (a Tofino node, an external switch or a
plain LAN), and each is a flat list of rules in the order a user meets them (one
refusal or question each), kept flat so that every rule reads alone beside its
message and fix.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ..errors import CloudlabError, Problem
from .manifest import Interface, Link, Manifest, Node
from .mapping import MapFile

DEFAULT_SWITCH = "tofino"  # the switch node's client_id in profiles `rainmaker cloudlab profile` writes
DEFAULT_LAN = "lan"  # a plain LAN's name in the inventory (switch: {name: lan, kind: lan})
# Hardware types clusters give their Tofino switches: such a node is never taken for a
# host on a LAN, even when it shares one with them.
_TOFINO_TYPE_RE = re.compile(r"tofino|wedge", re.IGNORECASE)
BFRT_PORT = 50052
# Hosts' huge pages when the map says nothing: 8 GiB of 2M pages, as examples/rack1.yaml.
DEFAULT_HUGEPAGES = {"size": "2M", "count": 4096}
_ROLE_RE = re.compile(r"^(client|worker)", re.IGNORECASE)


@dataclass
class HostPlan:
    node: Node
    name: str
    role: str | None  # None: to be asked (hosts.<node>.role)
    data: Interface
    switch_side: Interface | None  # the switch's interface on a point-to-point link
    link: str


@dataclass
class Plan:
    manifest: Manifest
    mapfile: MapFile
    switch: Node
    switch_name: str
    hosts: list[HostPlan]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (node, why)
    users: list[str] = field(default_factory=list)  # login names the manifest lists
    # An external switch (switch.external in the map) is no node of the experiment:
    # `switch` then stands for it (no logins, no interfaces) and `link` reaches it.
    external_link: Link | None = None
    # A plain LAN (switch.kind: lan): no switch at all; `switch` stands for the LAN (no
    # logins, no interfaces), the hosts are the nodes on `lan_link`, and `lan_why` says
    # how the import knew (an option, the map, or the manifest's shape).
    lan_link: Link | None = None
    lan_why: str = ""

    @property
    def external(self) -> bool:
        return self.external_link is not None

    @property
    def lan(self) -> bool:
        return self.lan_link is not None


@dataclass
class Need:
    """One thing neither the manifest nor the map says."""

    path: tuple[str, ...]  # where it goes in the map file
    question: str  # asked when the terminal is interactive
    comment: str  # shown next to the example in the map snippet
    example: Any  # a value of the right shape, for the snippet
    parse: Callable[[str], Any] = str  # prompt text -> value (the map is validated again after)
    default: str | None = None  # offered at the prompt
    choices: tuple[str, ...] = ()


# -- plan ------------------------------------------------------------------------------


def _name(client_id: str) -> str:
    """An inventory name from a client_id: lower case, [a-z0-9-], starting with a letter."""
    n = re.sub(r"[^a-z0-9-]+", "-", client_id.lower()).strip("-")
    if not n or not n[0].isalpha():
        n = "n-" + n
    return n[:31].rstrip("-")


def _links_to_switch(manifest: Manifest, node: Node, switch_ifaces: set[str]) -> list[tuple[Interface, Any, Any]]:
    """(interface, link, the switch's interface on it when point-to-point) for each link to the switch."""
    out = []
    for i in node.interfaces:
        lk = manifest.link_of(i.client_id)
        theirs = [r for r in lk.interfaces if r in switch_ifaces] if lk is not None else []
        if theirs:
            side = manifest.interface(theirs[0]) if not lk.is_lan and len(theirs) == 1 else None
            out.append((i, lk, side))
    return out


def plan(manifest: Manifest, mapfile: MapFile, switch_node: str | None = None, network: str | None = None) -> Plan:
    """Which node is the switch (or whether the hosts share a plain LAN), which are hosts
    and how each reaches it; raise on contradictions. network: tofino or lan as the
    user said it (--network); None: switch.kind in the map, else what the manifest shows."""
    m = mapfile.map
    mf, mp = manifest.source, mapfile.where()
    problems: list[tuple[str, Problem]] = []

    def man(path: str, msg: str, fix: str, line: int | None) -> None:
        problems.append((mf, Problem(path, msg, fix, line)))

    def mapp(path: str, msg: str, fix: str) -> None:
        problems.append((mp, Problem(path, msg, fix, mapfile.line_of(path))))

    names = [n.client_id for n in manifest.nodes]
    ext_link: Link | None = None
    lan_link: Link | None = None
    kind, why, tofino_fix = _network(manifest, mapfile, switch_node, network)
    if kind == "lan":
        lan_link = _lan_link(manifest, mapfile)
        sw = Node(m.switch.name or DEFAULT_LAN, 0)
        # A Tofino's settings in the map contradict the LAN: each is named, with the way back.
        for f in sorted(m.switch.model_fields_set - {"kind", "name", "link"}):
            mapp(f"switch.{f}", f"'{f}' is a Tofino's setting; the hosts are on a plain LAN ({why})", tofino_fix)
        for section, said in (("ports", m.ports), ("port_defaults", m.port_defaults.model_fields_set)):
            if said:
                mapp(section, f"a plain LAN ({why}) has no switch ports", tofino_fix)
    elif m.switch.external:
        if switch_node is not None:
            raise CloudlabError(
                f"--switch {switch_node} names a node of the experiment, and {mp} says the switch is external "
                "(switch.external: true)",
                fix="drop --switch for a switch of your own, or external: true if the switch is that node",
            )
        ext_link = _external_link(manifest, mapfile)
        sw = Node(m.switch.name or DEFAULT_SWITCH, 0)
    else:
        wanted = switch_node or m.switch.node or DEFAULT_SWITCH
        sw = manifest.node(wanted)
        if sw is None:
            how = "--switch" if switch_node else ("switch.node in the map" if m.switch.node else "the default")
            raise _no_switch_node(manifest, mapfile, how, wanted, lan_read=how == "the default" and kind is None)
    # The link every host reaches the network on, when no switch node's links say it.
    via = ext_link or lan_link
    # How a host off the switch is described (in refusals and the skipped list).
    if lan_link:
        off_switch = f"not on the LAN {lan_link.client_id}"
        join_fix = "put it on the LAN in the profile"
    elif ext_link:
        off_switch = f"not on link {ext_link.client_id} to the external switch"
        join_fix = "link it to the switch in the profile"
    else:
        off_switch = f"no link to the switch {sw.client_id}"
        join_fix = "link it to the switch in the profile"

    for section in ("ports", "hosts"):
        for key in getattr(m, section):
            if manifest.node(key) is None:
                mapp(
                    f"{section}.{key}",
                    f"no node '{key}' in the manifest (its nodes: {', '.join(names)})",
                    "key this entry by a node's client_id, as the manifest names it",
                )
            elif key == sw.client_id and not lan_link:
                mapp(f"{section}.{key}", f"'{key}' is the switch node", "settings of the switch go under switch:")

    switch_ifaces = {i.client_id for i in sw.interfaces}
    hosts: list[HostPlan] = []
    skipped: list[tuple[str, str]] = []
    for node in manifest.nodes:
        if node is sw:
            continue
        hm = m.hosts.get(node.client_id)
        if hm is not None and hm.skip:
            skipped.append((node.client_id, "skip: true in the map"))
            continue
        if via is not None:
            on_switch = [(i, via, None) for i in node.interfaces if i.client_id in via.interfaces]
        else:
            on_switch = _links_to_switch(manifest, node, switch_ifaces)
        if hm is not None and hm.interface is not None:
            pick = [t for t in on_switch if t[0].client_id == hm.interface]
            if not pick:
                ok = ", ".join(t[0].client_id for t in on_switch) or "none"
                mapp(
                    f"hosts.{node.client_id}.interface",
                    f"'{hm.interface}' is not an interface of {node.client_id} on a link to the switch "
                    f"(those are: {ok})",
                    "name one of them",
                )
                continue
            on_switch = pick
        if not on_switch:
            if hm is not None and hm.role is not None:
                mapp(
                    f"hosts.{node.client_id}.role",
                    f"{node.client_id} {'is' if via else 'has'} {off_switch}, so it cannot be a client or a worker",
                    f"{join_fix}, or remove it here",
                )
            else:
                skipped.append((node.client_id, off_switch))
            continue
        if len(on_switch) > 1:
            which = ", ".join(f"{i.client_id} (link {lk.client_id})" for i, lk, _ in on_switch)
            man(
                f"node[{node.client_id}]",
                f"host {node.client_id} has {len(on_switch)} interfaces on "
                + (f"the LAN {lan_link.client_id}" if lan_link else "links to the switch")
                + f": {which}; a rainmaker host has one data NIC",
                f"keep one link per host in the profile, or pick one with hosts.{node.client_id}.interface "
                "in the map file",
                node.line,
            )
            continue
        iface, lk, side = on_switch[0]
        role = hm.role if hm is not None and hm.role else None
        if role is None and (r := _ROLE_RE.match(node.client_id)):
            role = r.group(1).lower()
        name = (hm.name if hm is not None and hm.name else None) or _name(node.client_id)
        hosts.append(HostPlan(node, name, role, iface, side, lk.client_id))
        if iface.mac is None and (hm is None or hm.mac is None):
            man(
                f"node[{node.client_id}].interface[{iface.client_id}].mac_address",
                f"the data interface {iface.client_id} has no MAC address",
                "download the manifest again once the experiment is ready (a ready one has every MAC), or give "
                f"hosts.{node.client_id}.mac in the map file",
                iface.line,
            )
        if iface.ip is None and (hm is None or hm.ip is None):
            man(
                f"node[{node.client_id}].interface[{iface.client_id}].ip",
                f"the data interface {iface.client_id} has no IPv4 address",
                f"give its interface an address in the profile (pg.IPv4Address), or hosts.{node.client_id}.ip "
                "in the map file",
                iface.line,
            )

    for node_id, off in [] if lan_link else skipped:  # (a LAN's ports are refused above)
        if node_id in m.ports:
            mapp(
                f"ports.{node_id}",
                f"{node_id} is left out of the inventory ({off}), so it has no switch port",
                "remove this entry, or link the node to the switch",
            )
    switch_name = m.switch.name or _name(sw.client_id)
    seen: dict[str, str] = {switch_name: sw.client_id}
    for h in hosts:
        if h.name in seen:
            mapp(
                f"hosts.{h.node.client_id}.name",
                f"nodes {seen[h.name]} and {h.node.client_id} would both be named '{h.name}' in the inventory",
                f"give one a name of its own: hosts.{h.node.client_id}.name",
            )
        seen.setdefault(h.name, h.node.client_id)

    if not problems and hosts:
        known = [h for h in hosts if h.role]
        if known and len(known) == len(hosts):
            for role in ("client", "worker"):
                if not any(h.role == role for h in hosts):
                    man(
                        "rspec",
                        f"no host node is a {role} (clients send load, workers serve it)",
                        f"name a node {role}0 in the profile, or set hosts.<node>.role: {role} in the map file",
                        None,
                    )
    if not hosts and not problems:
        left = "; ".join(f"{n}: {w}" for n, w in skipped) or "the manifest has only the switch"
        if lan_link:
            where, fix = f"the LAN {lan_link.client_id}", "the profile must put each client and worker on the LAN"
        elif ext_link:
            where = f"link {ext_link.client_id}"
            fix = "the profile must link each client and worker to the switch (connect that link to the shared VLAN)"
        else:
            where, fix = (
                f"a link to the switch {sw.client_id}",
                "the profile must link each client and worker to the switch",
            )
        man("rspec", f"no host is on {where} ({left})", fix, None)

    ports = m.ports
    for field_name in ("port", "dev_port"):
        owner: dict[str, str] = {}
        for node_id, sp in ports.items():
            v = str(getattr(sp, field_name))
            if v in owner:
                mapp(
                    f"ports.{node_id}.{field_name}",
                    f"{field_name} {v} is already the port of {owner[v]}",
                    "each host has its own cable, so its own port",
                )
            owner.setdefault(v, node_id)

    if problems:
        n = len(problems)
        lines = [f"cannot import {mf}: {n} problem{'s' if n != 1 else ''}"]
        lines += ["  " + p.render(file) for file, p in problems]
        raise CloudlabError("\n".join(lines))
    users = sorted({lg.user for n in manifest.nodes for lg in n.logins})
    return Plan(manifest, mapfile, sw, switch_name, hosts, skipped, users, ext_link, lan_link, why)


def _no_switch_node(manifest: Manifest, mapfile: MapFile, how: str, wanted: str, lan_read: bool) -> CloudlabError:
    """The refusal of a manifest without the switch node: every way out, and, when the
    manifest's shape was read for a LAN too (lan_read), why it is none."""
    names = ", ".join(n.client_id for n in manifest.nodes)
    typed = [n for n in manifest.nodes if n.hardware_type and _TOFINO_TYPE_RE.search(n.hardware_type)]
    hint = "".join(f"; node {n.client_id} is a {n.hardware_type}: --switch {n.client_id}?" for n in typed)
    full = [lk.client_id for lk in _full_lans(manifest, mapfile)]
    why = f"several links join every node ({', '.join(full)})" if full else "they are not all on one LAN"
    if len(full) > 1:
        lan_how = "pass --network lan and name the LAN with switch.link in the map file"
    elif full:  # one LAN, read as a Tofino's because a node looks like one
        lan_how = "pass --network lan"
    else:
        lan_how = "put every node on one LAN in the profile, or pass --network lan"
    lan_fix = f"; for hosts on a plain LAN with no Tofino (`rainmaker cloudlab profile --network lan`), {lan_how}"
    return CloudlabError(
        f"{manifest.source}: no switch node: {how} names '{wanted}', and the manifest's nodes are {names}"
        + (f" ({why}, so no plain LAN either)" if lan_read and not typed else "")
        + hint,
        fix="name the Tofino node with --switch NODE (or switch.node in the map file); for a switch that "
        "is not a node of the experiment (yours, on a shared VLAN), set switch.external: true in the map "
        "file, with its address, user and the hosts' ports" + (lan_fix if lan_read else ""),
    )


def _network(
    manifest: Manifest, mapfile: MapFile, switch_node: str | None, network: str | None
) -> tuple[str | None, str, str]:
    """(kind, why, how to say tofino instead): lan when the user says so (--network lan,
    switch.kind: lan) or, when nothing names a switch, when the manifest has no switch
    node and one LAN joins every node, as `rainmaker cloudlab profile --network lan`
    requests it; tofino when said; None: the switch node decides (and its absence is
    refused with both ways out)."""
    m, mp = mapfile.map, mapfile.where()
    said = m.switch.kind
    if network is not None and said is not None and network != said:
        raise CloudlabError(
            f"--network {network} contradicts switch.kind: {said} in {mp}",
            fix="drop one of them, or make them say the same",
        )
    if network == "lan" or said == "lan":
        if switch_node is not None:
            raise CloudlabError(
                f"--switch {switch_node} names a Tofino node, and "
                + ("--network lan" if network else f"{mp} (switch.kind: lan)")
                + " says the hosts are on a plain LAN with none",
                fix="drop --switch for hosts on a plain LAN, or "
                + ("drop --network lan" if network else "set switch.kind: tofino")
                + " if they are cabled to that node",
            )
        if network:
            return (
                "lan",
                "--network lan",
                "remove it, or import with --network tofino if the hosts are cabled to a Tofino",
            )
        return (
            "lan",
            f"switch.kind: lan in {mp}",
            "remove it, or set switch.kind: tofino if the hosts are cabled to a Tofino",
        )
    if network == "tofino" or said == "tofino":
        return "tofino", "", ""
    if switch_node or m.switch.node or m.switch.external or manifest.node(DEFAULT_SWITCH):
        return None, "", ""
    typed = any(n.hardware_type and _TOFINO_TYPE_RE.search(n.hardware_type) for n in manifest.nodes)
    if typed or _one_lan(manifest, mapfile) is None:
        return None, "", ""
    return (
        "lan",
        "no switch node in the manifest, and one LAN joins every node",
        "remove it, or name the Tofino node with --switch NODE if the hosts are cabled to one",
    )


def _full_lans(manifest: Manifest, mapfile: MapFile) -> list[Link]:
    """The links of the experiment that every node (but those the map skips) has an
    interface on. A shared VLAN's link reaches a switch outside the experiment, so it
    is no plain LAN."""
    skip = {k for k, h in mapfile.map.hosts.items() if h.skip}
    nodes = {n.client_id for n in manifest.nodes} - skip
    if len(nodes) < 2:
        return []
    owner = {i.client_id: n.client_id for n in manifest.nodes for i in n.interfaces}
    return [lk for lk in manifest.links if not lk.shared_vlan and nodes <= {owner.get(r) for r in lk.interfaces}]


def _one_lan(manifest: Manifest, mapfile: MapFile) -> Link | None:
    """The one link joining every node; None when there is none, or several."""
    full = _full_lans(manifest, mapfile)
    return full[0] if len(full) == 1 else None


def _named_link(manifest: Manifest, mapfile: MapFile, listed: str, fix: str) -> Link:
    """The link switch.link names in the map, or a refusal listing the manifest's links."""
    m = mapfile.map
    lk = next((x for x in manifest.links if x.client_id == m.switch.link), None)
    if lk is None:
        raise CloudlabError(
            f"{mapfile.where()}:{mapfile.line_of('switch.link') or ''}: switch.link names '{m.switch.link}', which "
            f"is not a link of {manifest.source} (its links: {listed or 'none'})",
            fix=fix,
        )
    return lk


def _lan_link(manifest: Manifest, mapfile: MapFile) -> Link:
    """The hosts' LAN: switch.link, else the one link joining every node, else the
    manifest's one LAN (or one link)."""
    links = manifest.links
    listed = ", ".join(lk.client_id + (" (LAN)" if lk.is_lan else "") for lk in links)
    if mapfile.map.switch.link is not None:
        return _named_link(manifest, mapfile, listed, "name the LAN the hosts share, by its client_id")
    full = _one_lan(manifest, mapfile)
    if full is not None:
        return full
    lans = [x for x in links if x.is_lan and not x.shared_vlan] or [x for x in links if not x.shared_vlan]
    if len(lans) == 1:
        return lans[0]
    raise CloudlabError(
        f"{manifest.source}: which link is the hosts' LAN? No link joins every node, and "
        + (f"{len(lans)} could be it" if lans else "the manifest has none")
        + f" (links: {listed or 'none'})",
        fix="name it in the map file: switch.link: <its client_id>"
        if lans
        else "the profile must put the hosts on one LAN (rainmaker cloudlab profile --network lan)",
    )


def _external_link(manifest: Manifest, mapfile: MapFile) -> Link:
    """The link the hosts reach an external switch on: switch.link, else the one link
    on a shared VLAN, else the manifest's only link."""
    m = mapfile.map
    links = manifest.links
    listed = ", ".join(lk.client_id + (f" (shared VLAN {lk.shared_vlan})" if lk.shared_vlan else "") for lk in links)
    if m.switch.link is not None:
        return _named_link(
            manifest, mapfile, listed, "name the link (or LAN) the hosts reach your switch on, by its client_id"
        )
    shared = [x for x in links if x.shared_vlan]
    if len(shared) == 1:
        return shared[0]
    if not shared and len(links) == 1:
        return links[0]
    raise CloudlabError(
        f"{manifest.source}: which link reaches the external switch? "
        + (f"{len(shared)} links are on shared VLANs" if shared else f"{len(links)} links, none on a shared VLAN")
        + f" (links: {listed or 'none'})",
        fix="name it in the map file: switch.link: <its client_id>"
        if links
        else "the profile must put the hosts on a link to the shared VLAN (connectSharedVlan)",
    )


# -- needs -----------------------------------------------------------------------------


def _port_name(text: str) -> str:
    from ..inventory.model import SwitchPort

    return SwitchPort._port(text.strip())


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"'{text}' is not a whole number") from None


def _cores(text: str) -> list[int]:
    """'2,3,4' or '2-5' or '2-5,8' -> [2, 3, 4, 5, 8]."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.replace(" ", ",").split(","))):
        a, sep, b = part.partition("-")
        try:
            out += list(range(int(a), int(b) + 1)) if sep else [int(a)]
        except ValueError:
            raise ValueError(f"'{part}' is not a core number or range (like 2-5)") from None
    if not out:
        raise ValueError("list at least one core, like 2-5 or 2,3,4,5")
    return out


def _login(node: Node, user: str | None):
    return next((lg for lg in node.logins if lg.user == user), node.logins[0] if node.logins else None)


def chosen_user(p: Plan) -> str | None:
    m = p.mapfile.map
    if m.user:
        return m.user
    return p.users[0] if len(p.users) == 1 else None


def needs(p: Plan) -> list[Need]:
    """What neither the manifest nor the map file says, each with the question to ask
    and an example for the map file (a flat list of rules: the module says why)."""
    m = p.mapfile.map
    out: list[Need] = []
    user = chosen_user(p)

    if user is None and p.users:
        out.append(
            Need(
                ("user",),
                f"The manifest lists several logins ({', '.join(p.users)}): which user logs in?",
                "the login the orchestrator uses on every node",
                p.users[0],
                choices=tuple(p.users),
            )
        )
    elif user is None and not (
        (p.lan or m.switch.user) and all(_host(m, h).user or m.host_defaults.user for h in p.hosts)
    ):
        out.append(
            Need(
                ("user",),
                "The manifest has no logins: which user logs in to the nodes?",
                "your CloudLab user name",
                "alice",
            )
        )

    sw = p.switch
    if p.external and m.switch.address is None:
        out.append(
            Need(
                ("switch", "address"),
                f"SSH address of your switch {p.switch_name} (not a node of the experiment)?",
                "the external switch's management address or host name",
                "192.0.2.10",
            )
        )
    elif not p.lan and m.switch.address is None and sw.control_address is None:
        out.append(
            Need(
                ("switch", "address"),
                f"SSH address of the switch node {sw.client_id}?",
                "the switch's control-network host name or address",
                "tofino1.example.net",
            )
        )
    if p.external and m.switch.user is None:
        # The experiment's logins are CloudLab's; a switch of your own has its own.
        out.append(
            Need(
                ("switch", "user"),
                f"SSH user on your switch {p.switch_name}?",
                "the login on the external switch",
                "root",
            )
        )
    if not p.lan and m.switch.sde is None:
        out.append(
            Need(
                ("switch", "sde"),
                f"SDE folder ($SDE) on the switch {sw.client_id}?",
                "$SDE on the switch: the folder of the Intel P4 Studio SDE",
                "/root/bf-sde-9.13.0",
                parse=lambda t: t.strip(),
            )
        )

    has_client = any(h.role == "client" for h in p.hosts)
    for k, h in enumerate(p.hosts):
        cid = h.node.client_id
        if h.role is None:
            example = "worker" if has_client else "client"
            has_client = True
            out.append(
                Need(
                    ("hosts", cid, "role"),
                    f"Role of node {cid} (its name says neither client nor worker)?",
                    "client (sends load) or worker (serves it)",
                    example,
                    choices=("client", "worker"),
                )
            )
        hm = m.hosts.get(cid)
        if (hm is None or hm.address is None) and h.node.control_address is None:
            out.append(
                Need(
                    ("hosts", cid, "address"),
                    f"SSH address of node {cid} (the manifest has no login for it)?",
                    "its control-network host name or address",
                    f"{cid}.example.net",
                )
            )
        if not p.lan and cid not in m.ports:  # (a LAN has no switch ports)
            hint = f"link {h.link}"
            if h.switch_side is not None:
                hint += f", switch side {h.switch_side.client_id}"
                if h.switch_side.component_id:
                    hint += f" ({h.switch_side.component_id.rpartition('+')[2]})"
            out.append(
                Need(
                    ("ports", cid, "port"),
                    f"Front-panel port of the switch cabled to {cid} ({hint}), like 1/0?",
                    f"{hint}: its faceplate port and dev_port (bfshell: pm show)",
                    f"{k + 1}/0",
                    parse=_port_name,
                )
            )
            out.append(
                Need(
                    ("ports", cid, "dev_port"),
                    "dev_port of that port (bfshell: pm show, column D_P)?",
                    "",
                    132 + 8 * k,
                    parse=_int,
                )
            )

    def per_host(key: str, hosts: list[HostPlan], question: str, comment: str, example: Any, parse) -> None:
        lacking = [h for h in hosts if getattr(_host(m, h), key) is None and getattr(m.host_defaults, key) is None]
        if not lacking:
            return
        types = {h.node.hardware_type for h in hosts}
        if len(lacking) == len(hosts) and len(types) == 1:
            kind = f" (all {next(iter(types))})" if None not in types else ""
            out.append(
                Need(("host_defaults", key), question.format(where=f"every host{kind}"), comment, example, parse=parse)
            )
        else:
            for h in lacking:
                out.append(
                    Need(
                        ("hosts", h.node.client_id, key),
                        question.format(where=h.node.client_id),
                        comment,
                        example,
                        parse=parse,
                    )
                )

    per_host(
        "pci",
        p.hosts,
        "PCI address of the data NIC on {where} (lspci -D | grep -i mellanox)?",
        "the data NIC: `lspci -D | grep -i mellanox` on the host",
        "0000:41:00.0",
        lambda t: t.strip().lower(),
    )
    per_host(
        "cores",
        [h for h in p.hosts if h.role != "client"],
        "Cores for the worker threads on {where}, like 2-15?",
        "CPU cores of the worker threads (`lscpu`; keep core 0 for the OS)",
        [2, 3, 4, 5],
        _cores,
    )

    if m.ssh.key is None and not (
        (p.lan or m.switch.key) and all(_host(m, h).key or m.host_defaults.key for h in p.hosts)
    ):
        default = next(
            (
                str(Path("~/.ssh", k))
                for k in ("id_ed25519", "id_ecdsa", "id_rsa")
                if (Path.home() / ".ssh" / k).is_file()
            ),
            None,
        )
        out.append(
            Need(
                ("ssh", "key"),
                "Path of the private key whose public key is in your CloudLab account?",
                "a path: the key itself is never copied",
                "~/.ssh/id_ed25519",
                default=default,
                parse=lambda t: t.strip(),
            )
        )
    if m.ssh.known_hosts is None:
        out.append(
            Need(
                ("ssh", "known_hosts"),
                f"Path of the known_hosts file pinning the nodes' host keys (make it with: {keyscan_command(p)})?",
                f"pinned host keys: {keyscan_command(p)} (then compare the fingerprints)",
                "known_hosts",
                parse=lambda t: t.strip(),
            )
        )
    return out


def _host(m, h: HostPlan):
    from .mapping import HostMap

    return m.hosts.get(h.node.client_id) or HostMap()


def keyscan_command(p: Plan) -> str:
    """The ssh-keyscan command that collects every node's host key."""
    import shlex

    by_port: dict[int, list[str]] = {}
    user = chosen_user(p)
    m = p.mapfile.map
    if p.external and m.switch.address:
        by_port.setdefault(m.switch.ssh_port or 22, []).append(m.switch.address)
    for node in ([] if p.external or p.lan else [p.switch]) + [h.node for h in p.hosts]:
        lg = _login(node, user)
        addr = node.control_address
        if addr:
            by_port.setdefault(lg.port if lg else 22, []).append(addr)
    parts = [f"ssh-keyscan -p {port} " + " ".join(shlex.quote(a) for a in addrs) for port, addrs in by_port.items()]
    return " ; ".join(p_ + " >> known_hosts" for p_ in parts) if parts else "ssh-keyscan HOST >> known_hosts"


def listing(needs_: list[Need]) -> str:
    """One line per missing item (a port's name and dev_port together)."""
    out = []
    for n in needs_:
        if n.path[0] == "ports" and n.path[-1] == "dev_port":
            continue
        path = ".".join(n.path[:-1]) + " (port, dev_port)" if n.path[0] == "ports" else ".".join(n.path)
        out.append(f"  - {path}" + (f": {n.comment}" if n.comment else ""))
    return "\n".join(out)


def snippet(needs_: list[Need]) -> str:
    """A map-file fragment that fills every need (examples to replace), with a comment each."""
    tree: dict = {}
    for n in needs_:
        d = tree
        for k in n.path[:-1]:
            d = d.setdefault(k, {})
        d[n.path[-1]] = n
    lines: list[str] = []

    def value(n: Need) -> str:
        port = isinstance(n.example, str) and re.match(r"^\d+/\d$", n.example)
        return f'"{n.example}"' if port else _scalar(n.example)

    def line(indent: int, text: str, comments: list[str]) -> None:
        note = "; ".join(c for c in comments if c)
        lines.append((" " * indent + text).ljust(40) + (f"  # {note}" if note else ""))

    def emit(d: dict, indent: int) -> None:
        for k, v in d.items():
            key = _scalar(k)
            if isinstance(v, Need):
                line(indent, f"{key}: {value(v)}", [v.comment])
            elif indent and all(isinstance(x, Need) for x in v.values()):  # a small section: one line
                inner = ", ".join(f"{_scalar(kk)}: {value(x)}" for kk, x in v.items())
                line(indent, f"{key}: {{{inner}}}", [x.comment for x in v.values()])
            else:
                lines.append(" " * indent + f"{key}:")
                emit(v, indent + 2)

    emit(tree, 0)
    return "\n".join(lines)


def _scalar(v: Any) -> str:
    """A value as YAML writes it inline (quoted when it must be)."""
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


# -- build -----------------------------------------------------------------------------


def _first(*values):
    return next((v for v in values if v is not None), None)


def _service_ip(p: Plan, ips: list[str]) -> str:
    """The last free address of the hosts' data network: where tasks and tokens go."""
    nets = {h.data.ip.network for h in p.hosts if h.data.ip is not None and h.data.ip.network.prefixlen < 32}
    if len(nets) == 1:
        net = next(iter(nets))
    else:  # no netmask in the manifest (or several networks): the /24 of the first host
        net = ipaddress.IPv4Network(f"{ips[0]}/24", strict=False)
    used = set(ips)
    for a in reversed(list(net.hosts()) if net.num_addresses <= 65536 else []):
        if str(a) not in used:
            return str(a)
    raise CloudlabError(
        f"the data network {net} has no free address for the switch's scheduling address",
        fix="set switch.service_ip in the map file to an unused address the hosts can reach",
    )


def build(p: Plan, out_dir: Path) -> dict[str, Any]:
    """The inventory to write in `out_dir` (as a YAML mapping). Call once needs() is empty."""
    left = needs(p)
    if left:
        raise CloudlabError("still missing: " + ", ".join(".".join(n.path) for n in left))
    mf = p.mapfile
    m = mf.map
    user = chosen_user(p)
    man = p.manifest

    def path(v: Path) -> str:
        """A map path (relative to the map) as the inventory says it (relative to the inventory)."""
        if str(v).startswith("~"):
            return str(v)
        a = mf.resolve(v)
        try:
            return str(a.relative_to(out_dir.resolve()))
        except ValueError:
            return str(a)

    def mgmt(node: Node, address: str | None, u: str | None, port: int | None, key) -> dict[str, Any]:
        lg = _login(node, u or user)
        d: dict[str, Any] = {
            "address": address or node.control_address,
            "user": u or user or (lg.user if lg else None),
            "port": port or (lg.port if lg else 22),
        }
        if key is not None:
            d["key"] = path(key)
        return d

    hosts = []
    ports = []
    for h in p.hosts:
        cid = h.node.client_id
        hm = _host(m, h)
        hd = m.host_defaults
        nic: dict[str, Any] = {
            "pci": _first(hm.pci, hd.pci),
            "mac": _first(hm.mac, h.data.mac),
            "ip": _first(hm.ip, h.data.ip_address),
        }
        if not p.lan:  # on a LAN no port is cabled to a switch rainmaker programs
            sp = m.ports[cid]
            port = sp.model_dump(include={"port", "dev_port", "speed", "fec", "autoneg"})
            for k in ("speed", "fec", "autoneg"):
                if k not in sp.model_fields_set and getattr(m.port_defaults, k) is not None:
                    port[k] = getattr(m.port_defaults, k)
            if port["autoneg"] == "default":
                del port["autoneg"]
            ports.append(port)
            nic["switch_port"] = sp.port
        for k in ("netdev", "rdma_device", "driver", "rdma", "gid_index"):
            v = _first(getattr(hm, k), getattr(hd, k))
            if v is not None:
                nic[k] = v
        host: dict[str, Any] = {
            "name": h.name,
            "role": h.role or hm.role,
            "mgmt": mgmt(h.node, hm.address, hm.user or hd.user, hm.ssh_port, _first(hm.key, hd.key)),
            "nic": nic,
        }
        numa = _first(hm.numa_node, hd.numa_node)
        if numa is not None:
            host["numa_node"] = numa
        host["cores"] = list(_first(hm.cores, hd.cores) or [])
        hp = _first(hm.hugepages, hd.hugepages)
        host["hugepages"] = hp.model_dump() if hp is not None else dict(DEFAULT_HUGEPAGES)
        root = _first(hm.deploy_root, hd.deploy_root)
        if root is not None:
            host["deploy_root"] = str(root)
        hosts.append(host)

    inv: dict[str, Any] = {"name": m.name or _inventory_name(man)}
    if p.lan:
        # Nothing to log into or program: the hosts reach each other by ARP on the LAN.
        inv["switch"] = {"name": p.switch_name, "kind": "lan"}
    else:
        inv["switch"] = _switch(p, mgmt, [h["nic"]["ip"] for h in hosts], ports)
    inv["hosts"] = hosts
    ssh: dict[str, Any] = {}
    if m.ssh.key is not None:
        ssh["key"] = path(m.ssh.key)
    ssh["known_hosts"] = path(m.ssh.known_hosts)
    inv["ssh"] = ssh
    for k in ("roce", "dpdk", "deploy"):
        v = getattr(m, k)
        if v is not None:
            inv[k] = v.model_dump(mode="json", exclude_unset=True)
    return inv


def _switch(p: Plan, mgmt: Callable[..., dict[str, Any]], ips: list[str], ports: list[dict]) -> dict[str, Any]:
    """The Tofino's inventory entry: its login (the node's, or the map's for an external
    one), BFRuntime, the map's settings, a free scheduling address, its ports."""
    s = p.mapfile.map.switch
    sw_mgmt = mgmt(p.switch, s.address, s.user, s.ssh_port, s.key)
    switch: dict[str, Any] = {
        "name": p.switch_name,
        "kind": "tofino",
        "mgmt": sw_mgmt,
        "bfrt": s.bfrt or f"{sw_mgmt['address']}:{BFRT_PORT}",
    }
    for k in (
        "sde",
        "sde_install",
        "sde_version",
        "target",
        "chip",
        "kernel_module",
        "program",
        "service_mac",
        "deploy_root",
    ):
        v = getattr(s, k)
        if v is not None:
            switch[k] = str(v) if isinstance(v, Path) else v
    if s.hugepages is not None:
        switch["hugepages"] = s.hugepages.model_dump()
    switch["service_ip"] = s.service_ip or _service_ip(p, ips)
    switch["ports"] = ports
    return switch


def _inventory_name(man: Manifest) -> str:
    exp, _ = man.experiment
    return _name(exp) if exp else "cloudlab"


# -- notes and writing -------------------------------------------------------------------


def notes(p: Plan, now: datetime | None = None) -> list[str]:
    """Things the user should know about this import (printed, and kept in the header)."""
    out = [f"left out node {n}: {why}" for n, why in p.skipped]
    if p.lan_link is not None:
        out.append(
            f"the hosts share the LAN {p.lan_link.client_id} ({p.lan_why}): switch.kind: lan, so rainmaker "
            "programs no switch and only server-side systems run on this inventory (Rakaia's specs, memcached); "
            "Rain's systems need the Tofino topology"
        )
    if p.external_link is not None:
        lk = p.external_link
        vlan = f" (shared VLAN {lk.shared_vlan})" if lk.shared_vlan else ""
        out.append(
            f"the switch {p.switch_name} is not a node of the experiment: its address, user and ports come from "
            f"the map file, and the hosts reach it on link {lk.client_id}{vlan}"
        )
    exp = p.manifest.expires
    if exp:
        try:
            when = datetime.fromisoformat(exp.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            if when < (now or datetime.now(UTC)):
                out.append(f"the experiment expired at {exp}: its nodes are gone or belong to someone else now")
        except ValueError:
            pass
    m = p.mapfile.map
    images = sorted(
        {h.node.disk_image.rpartition("+")[2].lstrip("/:").split("//")[-1] for h in p.hosts if h.node.disk_image}
    )
    if images and not any("DEBIAN" in i.upper() for i in images) and (m.dpdk is None or m.dpdk.source == "debian"):
        out.append(
            f"the hosts run {', '.join(images)}: rainmaker's default DPDK is Debian 12's 22.11 packages, which "
            "this image does not have; build DPDK 22.11 on the hosts and set dpdk: {source: prefix, prefix: ...} "
            "and deploy: {build: host} in the map file, or use a Debian 12 image"
        )
    return out


def header(p: Plan, out: Path, argv: str, now: datetime | None = None) -> str:
    man = p.manifest
    now = now or datetime.now(UTC)
    exp, proj = man.experiment
    src = Path(man.source).resolve()
    try:
        src = src.relative_to(out.parent.resolve())
    except ValueError:
        pass
    lines = [
        f"Written by `{argv}` on {now:%Y-%m-%d %H:%M} UTC",
        # A non-breaking space: the digest stays beside its label when the line wraps.
        f"from the CloudLab manifest {src} (sha256\u00a0{man.sha256[:16]})"
        + (f" and the map {p.mapfile.path}" if p.mapfile.path else "")
        + ".",
    ]
    what = []
    if exp:
        what.append(f"experiment {exp}" + (f" of project {proj}" if proj else ""))
    if man.cluster:
        what.append(f"on {man.cluster}")
    if man.expires:
        what.append(f"expires {man.expires}")
    if what:
        lines.append(", ".join(what) + ": import again after a new instantiation.")
    machines = []
    for n in ([] if p.lan else [p.switch]) + [h.node for h in p.hosts]:
        what = [n.physical] if n.physical else []
        if n.sliver_id:
            what.append("sliver " + n.sliver_id.rpartition("+")[2])
        if what:
            machines.append(f"{n.client_id}={' '.join(what)}")
    if machines:
        lines.append("Machines: " + ", ".join(machines) + ".")
    lines += notes(p, now)
    lines.append(f"Next: rainmaker inventory check {out.name}; rainmaker provision --check -i {out.name}")
    import textwrap

    return "".join(
        "# " + w.replace("\u00a0", " ") + "\n"
        for ln in lines
        for w in textwrap.wrap(ln, 96, subsequent_indent="  ", break_on_hyphens=False)
    )


def write(inv: dict[str, Any], out: Path, head: str):
    """Write the inventory and load it back like any user file; on failure keep it as <out>.rejected."""
    from ..errors import InventoryError
    from ..inventory import load

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    # Flow style for the innermost mappings and lists (mgmt, nic, ports, cores), as people write them.
    tmp.write_text(head + yaml.safe_dump(inv, sort_keys=False, default_flow_style=None, width=120))
    try:
        loaded = load(tmp)
    except InventoryError as e:
        rejected = out.with_name(out.name + ".rejected")
        os.replace(tmp, rejected)
        raise CloudlabError(
            f"the inventory built from the manifest does not validate (kept as {rejected}):\n"
            + e.render().replace(str(tmp), str(rejected)),
            fix="correct the map file (or the profile) and import again",
        ) from None
    os.replace(tmp, out)
    return loaded


def answers_yaml(answers: dict[tuple[str, ...], Any]) -> str:
    """Prompted answers as the map file would say them."""
    tree: dict[str, Any] = {}
    for path, value in answers.items():
        d = tree
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = value
    return yaml.safe_dump(tree, sort_keys=False, default_flow_style=None).rstrip()
