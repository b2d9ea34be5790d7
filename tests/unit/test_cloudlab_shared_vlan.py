"""`rainmaker cloudlab profile --network shared-vlan`: a Tofino outside the experiment,
on a CloudLab shared VLAN the hosts' LAN joins.

As in test_cloudlab_profile.py, the generated profile runs under the real geni-lib
(geni.portal shimmed). Its request is then turned into the manifest the portal would
return for it (logins, MACs, host names added), and `rainmaker cloudlab import` must
make an inventory of it with the switch taken from the map file.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from orchestrator.cloudlab import importer, manifest, mapping
from orchestrator.cloudlab.profile import VLAN_LINK, Topology, render
from orchestrator.errors import CloudlabError
from orchestrator.inventory import load as load_inventory
from tests.cli import rainmaker
from tests.unit.test_cloudlab_profile import EMULAB, G, ParameterRefused, nodes_of, run_profile

FIX = Path(__file__).resolve().parents[1] / "fixtures/cloudlab"
SVLAN = "{http://www.geni.net/resources/rspec/ext/shared-vlan/1}"


def test_the_hosts_lan_joins_the_named_shared_vlan_and_no_switch_node_is_asked_for(monkeypatch):
    topo = Topology(kind="shared-vlan", shared_vlan="rain-tofino", clients=1, workers=3, subnet="10.20.1.0/24")
    root, out = run_profile(render(topo), monkeypatch)
    nodes = nodes_of(root)
    assert set(nodes) == {"client0", "worker0", "worker1", "worker2"}  # the switch is not the experiment's
    (lan,) = root.findall(f"{G}link")
    assert lan.get("client_id") == VLAN_LINK
    assert lan.find(f"{SVLAN}link_shared_vlan").get("name") == "rain-tofino"
    assert sorted(r.get("client_id") for r in lan.findall(f"{G}interface_ref")) == sorted(f"{n}:data" for n in nodes)
    assert lan.find(f"{EMULAB}force_nobwshaping").get("enabled") == "true"
    assert nodes["worker2"].find(f"{G}interface/{G}ip").get("address") == "10.20.1.4"
    assert out["params"]["shared_vlan"]["default"] == "rain-tofino"
    # the portal's instantiation page can name another VLAN, and refuses none
    root, _ = run_profile(render(topo), monkeypatch, {"shared_vlan": "lab-tofino-2"})
    assert root.find(f"{G}link/{SVLAN}link_shared_vlan").get("name") == "lab-tofino-2"
    with pytest.raises(ParameterRefused, match="Name the shared VLAN"):
        run_profile(render(topo), monkeypatch, {"shared_vlan": ""})
    with pytest.raises(ParameterRefused, match="at most 64 ports"):
        run_profile(render(topo), monkeypatch, {"workers": 70})


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"kind": "shared-vlan"}, "needs the shared VLAN's name"),
        ({"kind": "shared-vlan", "shared_vlan": "a vlan'); import os"}, "not a shared VLAN name"),
        ({"kind": "tofino", "shared_vlan": "rain-tofino"}, "--network tofino has none"),
        ({"kind": "shared-vlan", "shared_vlan": "v", "clients": 40, "workers": 40}, "at most 64"),
    ],
)
def test_bad_shared_vlan_topologies_are_refused(kw, words):
    with pytest.raises(CloudlabError) as ei:
        render(Topology(**kw))
    assert words in ei.value.message and ei.value.fix


def test_command_line_writes_the_shared_vlan_profile(tmp_path, monkeypatch, capsys):
    out = tmp_path / "profile.py"
    code, _, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "profile", "--network", "shared-vlan", "--shared-vlan", "rain-tofino",
        "--workers", "1", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "shared VLAN rain-tofino" in err and "switch.external" in err
    text = out.read_text()
    assert "--network shared-vlan --shared-vlan rain-tofino" in text and "external: true" in text
    root, _ = run_profile(text, monkeypatch)
    assert set(nodes_of(root)) == {"client0", "worker0"}
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "profile", "--network", "shared-vlan")
    assert code == 2 and "--shared-vlan NAME" in err
    code, help_text, _ = rainmaker(monkeypatch, capsys, "cloudlab", "profile", "--help")
    assert "--network [tofino|lan|shared-vlan]" in help_text and "--shared-vlan NAME" in help_text


def as_manifest(request: ET.Element) -> str:
    """The manifest the portal returns for a request: nodes placed on a cluster, with a
    login, a host name and MACs (the rest, links and shared VLAN, as requested)."""
    text = ET.tostring(request, encoding="unicode").replace('type="request"', 'type="manifest"')
    root = ET.fromstring(text)
    cm = "urn:publicid:IDN+wisc.cloudlab.us+authority+cm"
    for i, node in enumerate(root.findall(f"{G}node")):
        cid = node.get("client_id")
        node.set("component_manager_id", cm)
        node.set("component_id", f"urn:publicid:IDN+wisc.cloudlab.us+node+pc{40 + i}")
        services = ET.SubElement(node, f"{G}services")
        ET.SubElement(
            services, f"{G}login",
            {"authentication": "ssh-keys", "hostname": f"pc{40 + i}.wisc.cloudlab.us", "port": "22", "username": "alice"},
        )  # fmt: skip
        ET.SubElement(
            node, f"{G}host", {"name": f"{cid}.rain.rainproj-PG0.wisc.cloudlab.us", "ipv4": f"198.51.100.{40 + i}"}
        )
        for j, iface in enumerate(node.findall(f"{G}interface")):
            iface.set("mac_address", f"0c42a1ee{i:02x}{j:02x}")
    return ET.tostring(root, encoding="unicode")


def test_the_import_reads_its_manifest_with_the_switch_from_the_map(tmp_path, monkeypatch, capsys):
    topo = Topology(kind="shared-vlan", shared_vlan="rain-tofino", clients=1, workers=2)
    root, _ = run_profile(render(topo), monkeypatch)
    (tmp_path / "manifest.xml").write_text(as_manifest(root))
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys/id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n")
    mp = yaml.safe_load((FIX / "shared_vlan.map.yaml").read_text())
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(mp))
    monkeypatch.chdir(tmp_path)

    # Without switch.external the import says how to name a switch outside the experiment.
    bare = {k: v for k, v in mp.items() if k != "switch"}
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(bare))
    with pytest.raises(CloudlabError) as ei:
        importer.plan(manifest.load(tmp_path / "manifest.xml"), mapping.load(tmp_path / "bare.yaml"))
    assert "no switch node" in ei.value.message and "switch.external: true" in ei.value.fix

    code, out, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", "manifest.xml", "--map", "map.yaml", "-o", "lab.yaml"
    )
    assert code == 0, err
    inv = load_inventory(tmp_path / "lab.yaml")
    sw = inv.switch
    assert (sw.name, sw.kind, sw.mgmt.address, sw.mgmt.user) == ("tofino1", "tofino", "192.0.2.10", "root")
    assert sw.service_ip == "10.10.1.254"  # the last address of the profile's data network
    want = topo.addresses()
    assert {h.name: (h.nic.ip, h.nic.switch_port) for h in inv.hosts} == {
        "client0": (want["client0"], "9/0"),
        "worker0": (want["worker0"], "10/0"),
        "worker1": (want["worker1"], "11/0"),
    }
    assert "shared VLAN rain-tofino" in " ".join((tmp_path / "lab.yaml").read_text().replace("# ", "").split())
    shutil.rmtree(tmp_path / "keys")
