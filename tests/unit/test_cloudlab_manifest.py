"""Reading CloudLab manifests (RSpec v3): the shapes a profile produces, and malformed ones.

The fixtures in tests/fixtures/cloudlab/ are written by hand to the RSpec v3 manifest
schema (manifest.xsd, plus the emulab extension namespace CloudLab adds); bad/ holds
the malformed ones, each saying what is wrong with it in its first comment.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from orchestrator.cloudlab.manifest import load, normalise_mac, parse
from orchestrator.errors import ManifestError

FIX = Path(__file__).resolve().parents[1] / "fixtures/cloudlab"

# A manifest as CloudLab Utah returns it for `rainmaker cloudlab profile --preset rakaia`:
# two xl170 nodes (HPE m510 cartridges, named hpNNN at the cluster; 25 GbE ConnectX-4
# Lx; Ubuntu 24.04) on the experiment LAN "lan", no switch node. Written by hand to the
# RSpec v3 manifest schema, like the files in FIX (control addresses from the
# documentation ranges). test_cloudlab_import.py imports it.
XL170_LAN = """<?xml version="1.0" encoding="UTF-8"?>
<rspec xmlns="http://www.geni.net/resources/rspec/3"
       xmlns:emulab="http://www.protogeni.net/resources/rspec/ext/emulab/1"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.geni.net/resources/rspec/3 http://www.geni.net/resources/rspec/3/manifest.xsd"
       type="manifest" generated="2031-06-10T14:02:11Z" expires="2031-06-12T14:02:11Z">
  <node client_id="client0" component_id="urn:publicid:IDN+utah.cloudlab.us+node+hp041"
        component_manager_id="urn:publicid:IDN+utah.cloudlab.us+authority+cm"
        exclusive="true" sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1201">
    <sliver_type name="raw-pc">
      <disk_image name="urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU24-64-STD"/>
    </sliver_type>
    <hardware_type name="xl170"/>
    <services>
      <login authentication="ssh-keys" hostname="hp041.utah.cloudlab.us" port="22" username="alice"/>
      <emulab:console server="boss.utah.cloudlab.us"/>
    </services>
    <interface client_id="client0:data" component_id="urn:publicid:IDN+utah.cloudlab.us+interface+hp041:eth1"
               sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1211" mac_address="ec0d9a6e2f41">
      <ip address="10.10.1.1" type="ipv4" netmask="255.255.255.0"/>
    </interface>
    <emulab:vnode name="hp041" hardware_type="xl170"/>
    <host name="client0.rakaia.rainproj-PG0.utah.cloudlab.us" ipv4="198.51.100.41"/>
  </node>
  <node client_id="worker0" component_id="urn:publicid:IDN+utah.cloudlab.us+node+hp042"
        component_manager_id="urn:publicid:IDN+utah.cloudlab.us+authority+cm"
        exclusive="true" sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1202">
    <sliver_type name="raw-pc">
      <disk_image name="urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU24-64-STD"/>
    </sliver_type>
    <hardware_type name="xl170"/>
    <services>
      <login authentication="ssh-keys" hostname="hp042.utah.cloudlab.us" port="22" username="alice"/>
      <emulab:console server="boss.utah.cloudlab.us"/>
    </services>
    <interface client_id="worker0:data" component_id="urn:publicid:IDN+utah.cloudlab.us+interface+hp042:eth1"
               sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1212" mac_address="EC0D9A6E3A17">
      <ip address="10.10.1.2" type="ipv4" netmask="255.255.255.0"/>
    </interface>
    <emulab:vnode name="hp042" hardware_type="xl170"/>
    <host name="worker0.rakaia.rainproj-PG0.utah.cloudlab.us" ipv4="198.51.100.42"/>
  </node>
  <link client_id="lan" sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1221" vlantag="287">
    <interface_ref client_id="client0:data" component_id="urn:publicid:IDN+utah.cloudlab.us+interface+hp041:eth1"
                   sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1211"/>
    <interface_ref client_id="worker0:data" component_id="urn:publicid:IDN+utah.cloudlab.us+interface+hp042:eth1"
                   sliver_id="urn:publicid:IDN+utah.cloudlab.us+sliver+1212"/>
    <component_manager name="urn:publicid:IDN+utah.cloudlab.us+authority+cm"/>
    <link_type name="lan"/>
    <emulab:best_effort enabled="true"/>
    <emulab:force_nobwshaping enabled="true"/>
    <property source_id="client0:data" dest_id="lan" capacity="25000000"/>
    <property source_id="worker0:data" dest_id="lan" capacity="25000000"/>
  </link>
  <rs:site_info xmlns:rs="http://www.protogeni.net/resources/rspec/ext/site-info/1">
    <rs:location country="US" latitude="40.750714" longitude="-111.893288"/>
  </rs:site_info>
</rspec>
"""


def test_point_to_point_manifest():
    m = load(FIX / "p2p.xml")
    assert [n.client_id for n in m.nodes] == ["tofino", "client0", "worker0", "worker1"]
    assert m.expires == "2031-05-02T16:00:00Z"
    assert m.cluster == "utah.cloudlab.us"
    assert m.experiment == ("rain", "rainproj-PG0")
    c = m.node("client0")
    assert (c.hardware_type, c.physical, c.sliver_type) == ("d6515", "pc21", "raw-pc")
    assert c.disk_image == "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU22-64-STD"
    assert [(lg.user, lg.hostname, lg.port) for lg in c.logins] == [("alice", "pc21.utah.cloudlab.us", 22)]
    assert c.control_address == "pc21.utah.cloudlab.us" and c.host_ipv4 == "198.51.100.21"
    (data,) = c.interfaces
    assert data.mac == "0c:42:a1:dd:5f:3a"  # written 0c42a1dd5f3a
    assert data.ip == ipaddress.IPv4Interface("10.10.1.1/24")
    assert m.interface("worker0:data").mac == "0c:42:a1:dd:60:10"  # written 0C:42:A1:DD:60:10
    assert m.node("tofino").interfaces[0].ip is None  # switch ports carry no address
    lk = m.link_of("worker1:data")
    assert lk.client_id == "link-worker1" and lk.interfaces == ("worker1:data", "tofino:worker1") and not lk.is_lan
    assert len(m.sha256) == 64


def test_lan_manifest():
    m = load(FIX / "lan.xml")
    (lan,) = m.links
    assert lan.is_lan and lan.link_type == "lan" and len(lan.interfaces) == 4
    assert m.interface("interface-1").mac == "1c:34:da:5e:0a:02"  # upper case, no separators
    assert m.interface("interface-2").mac == "1c:34:da:5e:0a:03"  # dashes
    assert m.interface("interface-0").ip == ipaddress.IPv4Interface("192.168.7.11/24")  # netmask as a prefix length
    assert sorted({lg.user for n in m.nodes for lg in n.logins}) == ["alice", "bob"]


def test_xl170_lan_manifest():
    """The Rakaia preset's experiment: two nodes on one LAN, no switch node."""
    m = parse(XL170_LAN, "xl170.xml")
    assert [n.client_id for n in m.nodes] == ["client0", "worker0"]
    assert (m.cluster, m.experiment) == ("utah.cloudlab.us", ("rakaia", "rainproj-PG0"))
    w = m.node("worker0")
    assert (w.hardware_type, w.physical, w.control_address) == ("xl170", "hp042", "hp042.utah.cloudlab.us")
    assert w.disk_image.endswith("//UBUNTU24-64-STD")
    (lan,) = m.links
    assert lan.client_id == "lan" and lan.is_lan and lan.interfaces == ("client0:data", "worker0:data")
    assert m.interface("worker0:data").mac == "ec:0d:9a:6e:3a:17"  # written upper case, bare
    assert m.interface("client0:data").ip == ipaddress.IPv4Interface("10.10.1.1/24")


def test_node_without_login_is_reached_at_its_control_host():
    m = load(FIX / "two_ifaces.xml")
    w1 = m.node("worker1")
    assert w1.logins == () and w1.control_address == "198.51.100.33"
    assert m.node("monitor").interfaces == ()
    assert m.link_of("worker0:if0").client_id == "side"


@pytest.mark.parametrize(
    "text,want",
    [
        ("0c42a1dd5f3a", "0c:42:a1:dd:5f:3a"),
        ("0C:42:A1:DD:5F:3A", "0c:42:a1:dd:5f:3a"),
        ("0c-42-a1-dd-5f-3a", "0c:42:a1:dd:5f:3a"),
        (" 0c42a1dd5f3a ", "0c:42:a1:dd:5f:3a"),
        ("0c42a1dd5f3", None),
        ("0c:42-a1:dd:5f:3a", None),
        ("0c:42:a1:dd:5f:3g", None),
        ("", None),
    ],
)
def test_mac_notations(text, want):
    assert normalise_mac(text) == want


# (fixture in bad/, field path named, line, words of the message, words of the fix)
MALFORMED = [
    ("not_xml.xml", "(top level)", 53, "not valid XML", "complete"),
    ("not_rspec.xml", "html", 3, "not an RSpec", "Manifest"),
    ("request.xml", "rspec.type", 3, "request RSpec", "Manifest"),
    ("rspec_v2.xml", "rspec", 3, "RSpec v2", "rspec/3"),
    ("no_namespace.xml", "rspec", 3, "no namespace", "xmlns="),
    ("unknown_interface.xml", "link[link-worker1].interface_ref[worker1:eth9]", 94, "which no node has", "Manifest"),
    ("duplicate_client_id.xml", "node[worker0]", 60, "already a node on line 43", "unique"),
    ("bad_mac.xml", "node[worker0].interface[worker0:data].mac_address", 53, "not a MAC address", "six hex bytes"),
    ("dtd.xml", "(top level)", 3, "DTD", "as the portal gives it"),
]


@pytest.mark.parametrize("name,path,line,words,fix", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_manifests_are_rejected_naming_element_line_and_fix(name, path, line, words, fix):
    f = FIX / "bad" / name
    with pytest.raises(ManifestError) as ei:
        load(f)
    (p,) = ei.value.problems
    text = ei.value.render()
    assert f"{f}:{line}: {path}: " in text, text
    assert words in p.message and fix in p.fix
    assert ei.value.exit_code == 2


def test_every_problem_is_reported_at_once():
    doc = """<rspec xmlns="http://www.geni.net/resources/rspec/3" type="manifest">
      <node client_id="a"><interface client_id="a:0" mac_address="zz"><ip address="10.0.0.300"/></interface></node>
      <node client_id="a"><interface client_id="a:0"/></node>
      <node><services><login hostname="h" port="x" username="u"/></services></node>
      <link client_id="l"><interface_ref client_id="a:0"/></link>
      <link client_id="l2"><interface_ref client_id="a:0"/><interface_ref client_id="nope"/><interface_ref/></link>
    </rspec>"""
    with pytest.raises(ManifestError) as ei:
        parse(doc, "m.xml")
    got = [(p.path, p.line) for p in ei.value.problems]
    assert got == [
        ("node[a].interface[a:0].mac_address", 2),
        ("node[a].interface[a:0].ip.address", 2),
        ("node", 4),
        ("link[l2].interface_ref", 6),
        ("node[a]", 3),
        ("node[a].interface[a:0]", 3),
        ("link[l]", 5),
        ("link[l2].interface_ref[a:0]", 6),
        ("link[l2].interface_ref[nope]", 6),
    ]


def test_a_manifest_without_nodes_is_refused():
    with pytest.raises(ManifestError, match="has no node"):
        parse('<rspec xmlns="http://www.geni.net/resources/rspec/3" type="manifest"/>')


def test_unreadable_and_empty_files(tmp_path):
    with pytest.raises(ManifestError, match="cannot read the file"):
        load(tmp_path / "missing.xml")
    (tmp_path / "empty.xml").write_text("")
    with pytest.raises(ManifestError, match="not valid XML: no element found"):
        load(tmp_path / "empty.xml")


def test_entity_expansion_is_never_attempted():
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "'
        + "x" * 1000
        + '">'
        + "".join(f'<!ENTITY a{i} "{"&a;" * 10}">' for i in range(8))
        + "]><r>&a7;</r>"
    )
    with pytest.raises(ManifestError, match="DTD"):
        parse(bomb)


def test_login_port_and_ipv6_addresses():
    m = parse("""<rspec xmlns="http://www.geni.net/resources/rspec/3" type="manifest">
      <node client_id="vm1"><services><login authentication="ssh-keys" hostname="pc1.example.net" port="26010"
        username="u"/></services>
        <interface client_id="vm1:if0" mac_address="02aabbccddee">
          <ip address="fd00::1" type="ipv6"/><ip address="10.1.1.1" netmask="255.255.255.0" type="ipv4"/>
        </interface></node></rspec>""")
    n = m.node("vm1")
    assert n.logins[0].port == 26010
    assert n.interfaces[0].ip_address == "10.1.1.1"


def test_shared_vlan_links():
    """A link joined to a shared VLAN carries its name; its far end (a switch outside
    the experiment) is no interface of the manifest, so one interface is enough."""
    m = load(FIX / "shared_vlan.xml")
    lk = m.link_of("worker0:vlan")
    assert (lk.client_id, lk.shared_vlan, lk.is_lan) == ("vlan-tofino", "rain-tofino", True)
    assert m.link_of("client0:side").shared_vlan is None
    one = (
        (FIX / "shared_vlan.xml")
        .read_text()
        .replace('<interface_ref client_id="worker0:vlan"/>\n    <interface_ref client_id="worker1:vlan"/>\n', "")
    )
    assert load_text(one).link_of("client0:vlan").interfaces == ("client0:vlan",)
    with pytest.raises(ManifestError, match="joins 1 interface"):
        load_text(one.replace('<interface_ref client_id="client0:side"/>\n', ""))


def load_text(text: str):
    return parse(text, "m.xml")
