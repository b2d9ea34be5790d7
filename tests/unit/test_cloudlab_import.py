"""`rainmaker cloudlab import`: manifest + map file -> an inventory that loads.

Every inventory written here is loaded back with orchestrator.inventory.load (the
command does that too) and checked field by field against the manifest and the map.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator import cli
from orchestrator.cloudlab import importer, manifest, mapping
from orchestrator.errors import CloudlabError, MapFileError
from orchestrator.inventory import load as load_inventory
from orchestrator.inventory import warnings
from orchestrator.inventory.ansible import export
from tests.cli import rainmaker

FIX = Path(__file__).resolve().parents[1] / "fixtures/cloudlab"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with the p2p map, its known_hosts and key files (the key a fake: never read)."""
    shutil.copy(FIX / "p2p.map.yaml", tmp_path / "map.yaml")
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys/id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def do_import(man: str | Path, mapdata: dict | str | None, tmp: Path, switch: str | None = None):
    """The library path of the command: plan, build, write, load."""
    m = manifest.load(man)
    if mapdata is None:
        mf = mapping.empty()
    else:
        (tmp / "m.yaml").write_text(mapdata if isinstance(mapdata, str) else yaml.safe_dump(mapdata))
        mf = mapping.load(tmp / "m.yaml")
    p = importer.plan(m, mf, switch)
    out = tmp / "inv.yaml"
    return importer.write(importer.build(p, tmp), out, importer.header(p, out, "test")), p


BASE_MAP = {
    "switch": {"sde": "/root/bf-sde-9.13.0"},
    "host_defaults": {"pci": "0000:41:00.0", "cores": [2, 3]},
    "ssh": {"key": "keys/id_ed25519", "known_hosts": "known_hosts"},
}


def with_ports(nodes: list[str], extra: dict | None = None) -> dict:
    d = yaml.safe_load(yaml.safe_dump(BASE_MAP))
    d["ports"] = {n: {"port": f"{i + 1}/0", "dev_port": 132 + 8 * i} for i, n in enumerate(nodes)}
    for k, v in (extra or {}).items():
        d.setdefault(k, {}).update(v) if isinstance(v, dict) else d.__setitem__(k, v)
    return d


# -- the shapes -------------------------------------------------------------------------


def test_point_to_point_manifest_becomes_the_inventory(work, monkeypatch, capsys):
    code, out, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", str(FIX / "p2p.xml"), "--map", "map.yaml", "-o", "rack.yaml"
    )
    assert code == 0, err
    inv = load_inventory(work / "rack.yaml")
    sw = inv.switch
    assert (inv.name, sw.name, sw.kind) == ("rain", "tofino", "tofino")
    assert (sw.mgmt.address, sw.mgmt.user, sw.mgmt.port) == ("tofino1.utah.cloudlab.us", "alice", 22)
    assert sw.bfrt == "tofino1.utah.cloudlab.us:50052"
    assert str(sw.sde) == "/root/bf-sde-9.13.0" and sw.sde_version == "9.13.0"
    assert sw.service_ip == "10.10.1.254"  # the last free address of the data /24
    assert [(p.port, p.dev_port, p.speed, p.fec) for p in sw.ports] == [
        ("1/0", 132, "100G", "rs"),
        ("2/0", 140, "100G", "rs"),
        ("3/0", 148, "100G", "none"),
    ]  # port_defaults, one override
    assert [(h.name, h.role, h.mgmt.address, h.nic.mac, h.nic.ip, h.nic.switch_port) for h in inv.hosts] == [
        ("client0", "client", "pc21.utah.cloudlab.us", "0c:42:a1:dd:5f:3a", "10.10.1.1", "1/0"),
        ("worker0", "worker", "pc22.utah.cloudlab.us", "0c:42:a1:dd:60:10", "10.10.1.2", "2/0"),
        ("worker1", "worker", "pc23.utah.cloudlab.us", "0c:42:a1:dd:60:11", "10.10.1.3", "3/0"),
    ]
    w1 = inv.host("worker1")
    assert w1.cores == [8, 9] and w1.nic.rdma_device == "mlx5_1" and w1.nic.pci == "0000:41:00.0"
    assert inv.host("worker0").cores == [2, 3, 4, 5] and inv.host("worker0").numa_node == 0
    assert inv.host("client0").hugepages.count == 4096
    assert inv.ssh.key == work / "keys/id_ed25519" and inv.ssh.known_hosts == work / "known_hosts"
    assert inv.host("worker0").nic.rdma_transport == "ibverbs"  # a PCI ConnectX: real RDMA
    groups = export(inv)["all"]["children"]["hosts"]["children"]
    assert set(groups["workers"]["hosts"]) == {"worker0", "worker1"}

    text = (work / "rack.yaml").read_text()
    assert "sha256 " + manifest.load(FIX / "p2p.xml").sha256[:16] in text
    assert "experiment rain of project rainproj-PG0, on utah.cloudlab.us, expires 2031-05-02T16:00:00Z" in text
    assert "Machines: tofino=tofino1 sliver 901, client0=pc21 sliver 902," in text
    assert "PRIVATE KEY" not in text and "ssh: {key: keys/id_ed25519, known_hosts: known_hosts}" in text
    assert (
        "worker worker1: ssh alice@pc23.utah.cloudlab.us:22, nic 0000:41:00.0 0c:42:a1:dd:60:11 10.10.1.3 "
        "on port 3/0 (dev_port 148)" in out
    )
    assert "UBUNTU22-64-STD" in err  # the DPDK note: Ubuntu has no Debian 22.11 packages
    assert not list(work.glob("rack.yaml.*"))  # no temporary or rejected file left


def test_lan_manifest_with_roles_and_user_from_the_map(tmp_path):
    mp = with_ports(
        ["node-0", "node-1", "node-2"],
        {
            "user": "bob",
            "hosts": {
                "node-0": {"role": "client", "name": "gen"},
                "node-1": {"role": "worker"},
                "node-2": {"role": "worker", "cores": [4, 5, 6]},
            },
            "dpdk": {"source": "prefix", "prefix": "/opt/dpdk"},
            "deploy": {"build": "host"},
        },
    )
    inv, p = do_import(FIX / "lan.xml", mp, tmp_path, switch="p4sw")
    assert inv.name == "lanexp" and inv.switch.name == "p4sw"
    assert [(h.name, h.role, h.mgmt.user, h.nic.ip) for h in inv.hosts] == [
        ("gen", "client", "bob", "192.168.7.11"),
        ("node-1", "worker", "bob", "192.168.7.12"),
        ("node-2", "worker", "bob", "192.168.7.13"),
    ]
    assert inv.switch.service_ip == "192.168.7.254"
    assert inv.host("node-2").cores == [4, 5, 6]
    assert inv.dpdk.source == "prefix" and inv.deploy.build == "host"
    assert all(h.switch_side is None for h in p.hosts)  # a LAN: the manifest cannot pair ports with hosts
    text = (tmp_path / "inv.yaml").read_text()
    assert "expired at 2020-01-31T10:00:00Z" in text
    assert "DPDK" not in text  # a Debian image, and a DPDK source build anyway


def test_host_with_a_side_link_a_node_without_login_and_one_off_the_switch(tmp_path):
    inv, p = do_import(FIX / "two_ifaces.xml", with_ports(["client0", "worker0", "worker1"]), tmp_path)
    assert [h.name for h in inv.hosts] == ["client0", "worker0", "worker1"]
    assert inv.host("worker0").nic.ip == "10.10.1.2" and inv.host("worker0").nic.mac == "0c:42:a1:00:00:02"
    assert inv.host("client0").nic.ip == "10.10.1.1"  # not its side-link address 10.10.2.1
    w1 = inv.host("worker1")
    assert (w1.mgmt.address, w1.mgmt.user) == ("198.51.100.33", "carol")  # control host; the experiment's user
    assert p.skipped == [("monitor", "no link to the switch tofino")]
    assert "left out node monitor: no link to the switch tofino" in (tmp_path / "inv.yaml").read_text()
    assert inv.name == "twoif"


def test_a_port_for_a_node_left_out_is_refused(tmp_path):
    text = import_error(FIX / "two_ifaces.xml", with_ports(["client0", "worker0", "worker1", "monitor"]), tmp_path)
    assert "ports.monitor: monitor is left out of the inventory (no link to the switch tofino)" in text


def test_skip_and_interface_choice_from_the_map(tmp_path):
    mp = with_ports(
        ["client0", "worker0"], {"hosts": {"worker1": {"skip": True}, "worker0": {"interface": "worker0:data2"}}}
    )
    inv, p = do_import(FIX / "bad/two_switch_ifaces.xml", mp, tmp_path)
    assert [h.name for h in inv.hosts] == ["client0", "worker0"]
    assert (inv.host("worker0").nic.mac, inv.host("worker0").nic.ip) == ("0c:42:a1:dd:60:20", "10.10.1.22")
    assert ("worker1", "skip: true in the map") in p.skipped


def test_switch_settings_from_the_map(tmp_path):
    mp = with_ports(
        ["client0", "worker0", "worker1"],
        {
            "switch": {
                "name": "tf1",
                "bfrt": "127.0.0.1:50052",
                "chip": "tofino2",
                "kernel_module": "bf_kpkt",
                "service_ip": "10.10.1.200",
                "user": "root",
                "hugepages": {"count": 256},
            }
        },
    )
    inv, _ = do_import(FIX / "p2p.xml", mp, tmp_path)
    sw = inv.switch
    assert (sw.name, sw.bfrt, sw.chip, sw.kernel_module, sw.service_ip) == (
        "tf1",
        "127.0.0.1:50052",
        "tofino2",
        "bf_kpkt",
        "10.10.1.200",
    )
    assert sw.mgmt.user == "root" and sw.hugepages.count == 256
    assert all(h.mgmt.user == "alice" for h in inv.hosts)


# -- what is missing -------------------------------------------------------------------


def test_without_a_map_every_missing_item_is_listed_with_a_snippet_that_fills_them(work, monkeypatch, capsys):
    code, _, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", str(FIX / "p2p.xml"), "-o", "rack.yaml", "--no-interactive"
    )
    assert code == 2
    for item in (
        "switch.sde",
        "ports.client0 (port, dev_port)",
        "ports.worker1 (port, dev_port)",
        "host_defaults.pci",
        "host_defaults.cores",
        "ssh.key",
        "ssh.known_hosts",
    ):
        assert f"  - {item}" in err, item
    assert "11 things the manifest cannot say are missing (no --map given)" in err
    assert "ssh-keyscan -p 22 tofino1.utah.cloudlab.us pc21.utah.cloudlab.us" in err
    assert "switch side tofino:client0 (tofino1:eth1)" in err  # the cabling hint from the manifest
    assert not (work / "rack.yaml").exists()

    # The snippet is a map file: written as it is, the import goes through.
    snippet = err.split("(replace the examples):\n", 1)[1].split("\n  or run in a terminal")[0]
    (work / "from_error.yaml").write_text("\n".join(line[4:] for line in snippet.splitlines()))
    code, _, err = rainmaker(
        monkeypatch,
        capsys,
        "cloudlab",
        "import",
        str(FIX / "p2p.xml"),
        "--map",
        "from_error.yaml",
        "-o",
        "rack.yaml",
        "--no-interactive",
    )
    assert code == 0, err
    inv = load_inventory(work / "rack.yaml")
    assert [p.port for p in inv.switch.ports] == ["1/0", "2/0", "3/0"]


def test_needs_follow_what_the_map_already_says(tmp_path):
    m = manifest.load(FIX / "p2p.xml")
    partial = with_ports(["client0"])
    del partial["host_defaults"]["cores"]
    partial["hosts"] = {"worker0": {"cores": [1, 2]}}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(partial))
    needs = importer.needs(importer.plan(m, mapping.load(tmp_path / "m.yaml")))
    assert [".".join(n.path) for n in needs] == [
        "ports.worker0.port",
        "ports.worker0.dev_port",
        "ports.worker1.port",
        "ports.worker1.dev_port",
        "hosts.worker1.cores",
    ]


def test_interactive_import_asks_and_re_asks_a_bad_answer(work):
    answers = [
        "/root/bf-sde-9.13.0",
        "1/0",
        "132",
        "9/9/9",
        "2/0",
        "140",
        "3/0",
        "many",
        "148",  # a bad port and a bad dev_port re-asked
        "0000:41:00.0",
        "2-4,7",
        "keys/id_ed25519",
        "known_hosts",
    ]
    r = CliRunner().invoke(
        cli.cli,
        ["cloudlab", "import", str(FIX / "p2p.xml"), "-o", "rack.yaml", "--interactive"],
        input="\n".join(answers) + "\n",
    )
    assert r.exit_code == 0, r.output
    assert "'9/9/9' is not a front-panel port name" in r.output and "'many' is not a whole number" in r.output
    inv = load_inventory(work / "rack.yaml")
    assert inv.host("worker1").cores == [2, 3, 4, 7]
    assert [(p.port, p.dev_port) for p in inv.switch.ports] == [("1/0", 132), ("2/0", 140), ("3/0", 148)]
    assert "To skip these questions next time" in r.output and "host_defaults:" in r.output


def test_interactive_role_answers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "known_hosts").write_text("")
    mp = with_ports(["node-0", "node-1", "node-2"], {"user": "alice"})
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mp))
    r = CliRunner().invoke(
        cli.cli,
        [
            "cloudlab",
            "import",
            str(FIX / "lan.xml"),
            "--switch",
            "p4sw",
            "--map",
            "m.yaml",
            "-o",
            "inv.yaml",
            "--interactive",
        ],
        input="client\nspare\nworker\nworker\n",
    )
    assert r.exit_code == 0, r.output
    assert "'spare' is not one of 'client', 'worker'" in r.output
    assert [h.role for h in load_inventory(tmp_path / "inv.yaml").hosts] == ["client", "worker", "worker"]


# -- contradictions and bad input ------------------------------------------------------


def import_error(man, mapdata, tmp, switch=None) -> str:
    with pytest.raises(CloudlabError) as ei:
        do_import(man, mapdata, tmp, switch)
    return ei.value.render()


def test_no_switch_node_names_the_nodes_and_the_option(tmp_path):
    mp = with_ports(["client0", "worker0", "worker1"])
    text = import_error(FIX / "bad/no_switch.xml", mp, tmp_path)
    assert "no switch node: the default names 'tofino'" in text and "sw0, client0, worker0, worker1" in text
    assert "--switch NODE" in text
    assert "node sw0 is a tofino: --switch sw0?" in text and "--network lan" in text  # the LAN way out too
    inv, _ = do_import(FIX / "bad/no_switch.xml", mp, tmp_path, switch="sw0")
    assert inv.switch.name == "sw0"
    text = import_error(FIX / "p2p.xml", dict(mp, switch={"sde": "/x", "node": "tofino9"}), tmp_path)
    assert "switch.node in the map names 'tofino9'" in text


def test_two_interfaces_of_one_host_on_the_switch(tmp_path):
    text = import_error(FIX / "bad/two_switch_ifaces.xml", with_ports(["client0", "worker0", "worker1"]), tmp_path)
    assert re.search(
        r"two_switch_ifaces.xml:44: node\[worker0\]: host worker0 has 2 interfaces on links to the "
        r"switch: worker0:data \(link link-worker0\), worker0:data2 \(link link-extra\)",
        text,
    )
    assert "hosts.worker0.interface" in text


def test_missing_mac_and_ip_are_refused_unless_the_map_gives_them(tmp_path):
    mp = with_ports(["client0", "worker0", "worker1"])
    text = import_error(FIX / "bad/missing_mac.xml", mp, tmp_path)
    assert (
        "missing_mac.xml:53: node[worker0].interface[worker0:data].mac_address: the data interface "
        "worker0:data has no MAC address" in text
    )
    assert "hosts.worker0.mac" in text
    text = import_error(FIX / "bad/no_ip.xml", mp, tmp_path)
    assert "client0:data has no IPv4 address" in text and "hosts.client0.ip" in text
    inv, _ = do_import(FIX / "bad/missing_mac.xml", dict(mp, hosts={"worker0": {"mac": "0C42A1DD6010"}}), tmp_path)
    assert inv.host("worker0").nic.mac == "0c:42:a1:dd:60:10"


def test_map_entries_for_unknown_nodes_and_duplicate_ports(tmp_path):
    mp = with_ports(["client0", "worker0", "worker1"])
    mp["ports"]["worker1"] = {"port": "2/0", "dev_port": 140}
    mp["hosts"] = {"worker9": {"cores": [1]}, "tofino": {"cores": [1]}}
    text = import_error(FIX / "p2p.xml", mp, tmp_path)
    assert "m.yaml" in text
    assert re.search(r"m.yaml:\d+: hosts.worker9: no node 'worker9' in the manifest", text)
    assert "hosts.tofino: 'tofino' is the switch node" in text
    assert "ports.worker1.port: port 2/0 is already the port of worker0" in text
    assert "ports.worker1.dev_port: dev_port 140 is already the port of worker0" in text


def test_names_that_collide_and_missing_roles(tmp_path):
    doc = (FIX / "p2p.xml").read_text().replace('"worker1', '"Worker_0').replace('"tofino:worker1', '"tofino:Worker_0')
    doc = doc.replace('"worker0', '"worker-0').replace('"tofino:worker0', '"tofino:worker-0')
    (tmp_path / "c.xml").write_text(doc)
    text = import_error(tmp_path / "c.xml", with_ports(["client0", "worker-0", "Worker_0"]), tmp_path)
    assert "nodes worker-0 and Worker_0 would both be named 'worker-0'" in text
    inv, _ = do_import(
        tmp_path / "c.xml",
        with_ports(["client0", "worker-0", "Worker_0"], {"hosts": {"Worker_0": {"name": "worker-1"}}}),
        tmp_path,
    )
    assert [h.name for h in inv.hosts] == ["client0", "worker-0", "worker-1"]

    no_client = (
        (FIX / "p2p.xml").read_text().replace('"client0', '"worker9').replace('"tofino:client0', '"tofino:worker9')
    )
    (tmp_path / "w.xml").write_text(no_client)
    text = import_error(tmp_path / "w.xml", with_ports(["worker9", "worker0", "worker1"]), tmp_path)
    assert "no host node is a client" in text


def test_map_file_errors_name_file_line_field_and_fix(tmp_path):
    (tmp_path / "m.yaml").write_text(
        "switch:\n  sde: /x\n  sde_verison: '9.13.0'\nhost_defaults:\n  pci: 3b:00.0\n"
        "ssh:\n  key: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    abc\n"
        "ports:\n  client0: {port: '1/0'}\n"
    )
    with pytest.raises(MapFileError) as ei:
        mapping.load(tmp_path / "m.yaml")
    text = ei.value.render()
    assert f"{tmp_path / 'm.yaml'}:3: switch.sde_verison: unknown field 'sde_verison'" in text
    assert "did you mean 'sde_version'?" in text
    assert ":5: host_defaults.pci: '3b:00.0' is not a PCI address" in text
    assert ":7: ssh.key: this looks like a key's contents, not a path to it" in text
    assert "abc" not in text  # the key's contents are never echoed
    assert ":11: ports.client0.dev_port: this field is required" in text
    assert ei.value.exit_code == 2


def test_an_inventory_that_does_not_validate_is_kept_aside(tmp_path):
    mp = with_ports(["client0", "worker0", "worker1"], {"switch": {"service_ip": "10.10.1.2"}})
    text = import_error(FIX / "p2p.xml", mp, tmp_path)
    assert "does not validate" in text and "data IP address '10.10.1.2' is already used" in text
    assert not (tmp_path / "inv.yaml").exists() and (tmp_path / "inv.yaml.rejected").exists()


def test_existing_output_is_kept_without_force(work, monkeypatch, capsys):
    (work / "rack.yaml").write_text("# mine\n")
    code, _, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", str(FIX / "p2p.xml"), "--map", "map.yaml", "-o", "rack.yaml"
    )
    assert code == 2 and "rack.yaml exists" in err and "--force" in err
    assert (work / "rack.yaml").read_text() == "# mine\n"
    code, _, err = rainmaker(
        monkeypatch,
        capsys,
        "cloudlab",
        "import",
        str(FIX / "p2p.xml"),
        "--map",
        "map.yaml",
        "-o",
        "rack.yaml",
        "--force",
    )
    assert code == 0, err
    assert load_inventory(work / "rack.yaml").name == "rain"


def test_bad_manifest_exits_2_with_the_element_named(work, monkeypatch, capsys):
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "import", str(FIX / "bad/request.xml"), "-o", "x.yaml")
    assert code == 2
    assert "request.xml:3: rspec.type: this is a request RSpec" in err and "fix:" in err


# -- profile -> manifest -> inventory ------------------------------------------------------


def manifest_from_request(request_xml: str) -> str:
    """What CloudLab would answer to a request: the same nodes and links, with MACs and logins."""
    g = "{http://www.geni.net/resources/rspec/3}"
    ET.register_namespace("", g[1:-1])
    root = ET.fromstring(request_xml)
    root.set("type", "manifest")
    root.set("expires", "2031-01-01T00:00:00Z")
    for k, node in enumerate(root.findall(f"{g}node")):
        name = node.get("client_id")
        node.set("component_manager_id", "urn:publicid:IDN+utah.cloudlab.us+authority+cm")
        services = node.find(f"{g}services") or ET.SubElement(node, f"{g}services")
        ET.SubElement(
            services,
            f"{g}login",
            authentication="ssh-keys",
            hostname=f"pc{100 + k}.utah.cloudlab.us",
            port="22",
            username="alice",
        )
        ET.SubElement(node, f"{g}host", name=f"{name}.rt.proj.utah.cloudlab.us", ipv4=f"198.51.100.{100 + k}")
        for j, iface in enumerate(node.findall(f"{g}interface")):
            iface.set("mac_address", f"0c42a1{k:02x}{j:02x}00")
    return ET.tostring(root, encoding="unicode")


def test_the_profile_s_topology_comes_back_as_the_inventory(tmp_path, monkeypatch):
    from orchestrator.cloudlab.profile import Topology, render
    from tests.unit.test_cloudlab_profile import run_profile

    topo = Topology(clients=2, workers=3, subnet="10.30.0.0/24")
    root, _ = run_profile(render(topo), monkeypatch)
    (tmp_path / "manifest.xml").write_text(manifest_from_request(ET.tostring(root, encoding="unicode")))
    inv, p = do_import(tmp_path / "manifest.xml", with_ports(topo.host_names()), tmp_path)
    assert [(h.name, h.role, h.nic.ip) for h in inv.hosts] == [
        (n, n.rstrip("0123456789"), ip) for n, ip in topo.addresses().items()
    ]
    assert inv.switch.name == "tofino" and inv.switch.service_ip == "10.30.0.254"
    assert [h.switch_side.client_id for h in p.hosts] == [f"tofino:{n}" for n in topo.host_names()]
    assert inv.name == "rt"


def test_header_dates_and_notes_are_deterministic(tmp_path):
    m = manifest.load(FIX / "p2p.xml")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(with_ports(["client0", "worker0", "worker1"])))
    p = importer.plan(m, mapping.load(tmp_path / "m.yaml"))
    late = datetime(2032, 1, 1, tzinfo=UTC)
    assert any("expired at 2031-05-02T16:00:00Z" in n for n in importer.notes(p, late))
    assert not any("expired" in n for n in importer.notes(p, datetime(2030, 1, 1, tzinfo=UTC)))
    head = importer.header(p, tmp_path / "inv.yaml", "rainmaker cloudlab import x", late)
    assert head.startswith("# Written by `rainmaker cloudlab import x` on 2032-01-01 00:00 UTC")
    assert all(line.startswith("# ") and len(line) <= 100 for line in head.splitlines())


# -- a switch that is not a node of the experiment ----------------------------------------


def test_external_switch_on_a_shared_vlan(work, monkeypatch, capsys):
    """Hosts from CloudLab, the Tofino your own on a shared VLAN: the map gives the
    switch's address, user and the hosts' ports; the manifest the rest."""
    shutil.copy(FIX / "shared_vlan.map.yaml", work / "map.yaml")
    code, out, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", str(FIX / "shared_vlan.xml"), "--map", "map.yaml", "-o", "own.yaml"
    )
    assert code == 0, err
    inv = load_inventory(work / "own.yaml")
    sw = inv.switch
    assert (sw.name, sw.kind, sw.mgmt.address, sw.mgmt.user, sw.mgmt.port) == (
        "tofino1",
        "tofino",
        "192.0.2.10",
        "root",
        22,
    )
    assert sw.bfrt == "192.0.2.10:50052" and str(sw.sde) == "/root/bf-sde-9.13.0"
    assert sw.service_ip == "10.20.1.254"  # the last free address of the VLAN's /24
    assert [(p.port, p.dev_port, p.speed, p.fec) for p in sw.ports] == [
        ("9/0", 4, "100G", "rs"),
        ("10/0", 12, "100G", "rs"),
        ("11/0", 20, "100G", "rs"),
    ]
    assert [
        (h.name, h.role, h.mgmt.address, h.mgmt.user, h.nic.mac, h.nic.ip, h.nic.switch_port) for h in inv.hosts
    ] == [
        ("client0", "client", "pc31.wisc.cloudlab.us", "alice", "0c:42:a1:ee:00:01", "10.20.1.1", "9/0"),
        ("worker0", "worker", "pc32.wisc.cloudlab.us", "alice", "0c:42:a1:ee:00:02", "10.20.1.2", "10/0"),
        ("worker1", "worker", "pc33.wisc.cloudlab.us", "alice", "0c:42:a1:ee:00:03", "10.20.1.3", "11/0"),
    ]  # client0's VLAN interface, not its side link's (10.30.1.1)
    text = (work / "own.yaml").read_text()
    assert "left out node monitor: not on link vlan-tofino to the external switch" in text
    assert "the switch tofino1 is not a node of the experiment" in " ".join(text.replace("# ", "").split())
    assert "shared VLAN rain-tofino" in " ".join(text.replace("# ", "").split())
    assert "switch tofino1: ssh root@192.0.2.10:22, BFRuntime 192.0.2.10:50052" in out


def test_external_switch_needs_its_address_user_and_ports(tmp_path):
    mp = {**BASE_MAP, "switch": {"external": True}}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mp))
    p = importer.plan(manifest.load(FIX / "shared_vlan.xml"), mapping.load(tmp_path / "m.yaml"))
    assert p.external and p.external_link.client_id == "vlan-tofino"  # the one shared-VLAN link
    paths = {".".join(n.path) for n in importer.needs(p)}
    assert {"switch.address", "switch.user", "switch.sde"} <= paths
    assert {f"ports.{h}.{f}" for h in ("client0", "worker0", "worker1") for f in ("port", "dev_port")} <= paths
    assert "switch:\n  address: 192.0.2.10" in importer.snippet(importer.needs(p))
    # Answers (or map entries) fill them, and the switch's ssh-keyscan uses its address.
    mp["switch"] = {"external": True, "address": "tofino1.lab.example", "user": "root"}
    mp = with_ports(["client0", "worker0", "worker1"], {"switch": mp["switch"]})
    inv, p = do_import(FIX / "shared_vlan.xml", mp, tmp_path)
    assert inv.switch.mgmt.address == "tofino1.lab.example" and inv.switch.name == "tofino"
    assert importer.keyscan_command(p).startswith("ssh-keyscan -p 22 tofino1.lab.example pc31.wisc.cloudlab.us")


def test_no_switch_node_points_to_an_external_switch(tmp_path):
    """The issue: a manifest whose switch is not a node was refused with no way out."""
    text = import_error(FIX / "shared_vlan.xml", with_ports(["client0", "worker0", "worker1"]), tmp_path)
    assert "no switch node" in text and "switch.external: true" in text
    assert "(they are not all on one LAN, so no plain LAN either)" in text  # and so not read as a LAN


def test_external_switch_link_is_named_when_the_manifest_cannot_say(tmp_path):
    ports = with_ports(
        ["client0", "worker0", "worker1"], {"switch": {"external": True, "address": "192.0.2.10", "user": "root"}}
    )
    # Without the shared-VLAN marker, two links: which one is the switch's?
    text = (FIX / "shared_vlan.xml").read_text().replace('<sharedvlan:link_shared_vlan name="rain-tofino"/>', "")
    (tmp_path / "plain.xml").write_text(text)
    err = import_error(tmp_path / "plain.xml", ports, tmp_path)
    assert "which link reaches the external switch? 2 links, none on a shared VLAN (links: side, vlan-tofino)" in err
    assert "switch.link" in err
    ports["switch"]["link"] = "vlan-tofino"
    inv, _ = do_import(tmp_path / "plain.xml", ports, tmp_path)
    assert [h.nic.ip for h in inv.hosts] == ["10.20.1.1", "10.20.1.2", "10.20.1.3"]
    ports["switch"]["link"] = "lan-9"
    err = import_error(tmp_path / "plain.xml", ports, tmp_path)
    assert "switch.link names 'lan-9', which is not a link" in err and "side, vlan-tofino" in err


def test_external_switch_contradictions(tmp_path):
    mp = with_ports(["client0", "worker0", "worker1"], {"switch": {"external": True, "node": "tofino"}})
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mp))
    with pytest.raises(MapFileError, match="external switch is not a node"):
        mapping.load(tmp_path / "m.yaml")
    mp["switch"] = {"link": "vlan-tofino"}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mp))
    with pytest.raises(MapFileError, match="add external: true"):
        mapping.load(tmp_path / "m.yaml")
    mp["switch"] = {"external": True, "address": "192.0.2.10", "user": "root"}
    text = import_error(FIX / "shared_vlan.xml", mp, tmp_path, switch="worker0")
    assert "--switch worker0" in text and "external" in text


# -- hosts on a plain LAN (the Rakaia paper's xl170 nodes) -------------------------------

XL170_MAP = {
    "host_defaults": {"pci": "0000:03:00.1", "netdev": "ens1f1np1", "cores": [2, 3, 4, 5, 6, 7, 8, 9]},
    "hosts": {"worker0": {"cores": list(range(20))}},
    "ssh": {"key": "keys/id_ed25519", "known_hosts": "known_hosts"},
    "dpdk": {"source": "prefix", "prefix": "/opt/dpdk-22.11"},
    "deploy": {"build": "host"},
}


@pytest.fixture
def xl170(work):
    """The xl170 LAN manifest and its map, in the work folder."""
    from tests.unit.test_cloudlab_manifest import XL170_LAN

    (work / "xl170.xml").write_text(XL170_LAN)
    (work / "map.yaml").write_text(yaml.safe_dump(XL170_MAP))
    return work


def test_a_lan_manifest_becomes_a_lan_inventory(xl170, monkeypatch, capsys):
    """No switch node and one LAN joining every node: switch {name: lan, kind: lan}, the
    hosts' NICs found as on the Tofino topology, and no switch_port."""
    code, out, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", "xl170.xml", "--map", "map.yaml", "-o", "rakaia.yaml"
    )
    assert code == 0, err
    inv = load_inventory(xl170 / "rakaia.yaml")  # loads and passes every cross-field check
    sw = inv.switch
    assert (inv.name, sw.name, sw.kind, sw.mgmt, sw.bfrt, sw.ports) == ("rakaia", "lan", "lan", None, None, [])
    assert not sw.programmable and inv.links == []
    assert [
        (h.name, h.role, h.mgmt.address, h.mgmt.user, h.nic.pci, h.nic.netdev, h.nic.mac, h.nic.ip, h.nic.switch_port)
        for h in inv.hosts
    ] == [
        ("client0", "client", "hp041.utah.cloudlab.us", "alice", "0000:03:00.1", "ens1f1np1", "ec:0d:9a:6e:2f:41",
         "10.10.1.1", None),
        ("worker0", "worker", "hp042.utah.cloudlab.us", "alice", "0000:03:00.1", "ens1f1np1", "ec:0d:9a:6e:3a:17",
         "10.10.1.2", None),
    ]  # fmt: skip
    assert inv.host("worker0").cores == list(range(20)) and inv.dpdk.source == "prefix"
    assert [w.path for w in warnings(inv, xl170)] == []  # no switch, so no iCRC warning either
    a = export(inv)["all"]
    assert a["children"]["switch"]["hosts"] == {} and a["vars"]["rainmaker_switch_kind"] == "lan"

    data = yaml.safe_load((xl170 / "rakaia.yaml").read_text())
    assert data["switch"] == {"name": "lan", "kind": "lan"}
    assert all("switch_port" not in h["nic"] for h in data["hosts"])
    head = " ".join((xl170 / "rakaia.yaml").read_text().replace("# ", "").split())
    assert "Machines: client0=hp041 sliver 1201, worker0=hp042 sliver 1202." in head
    assert "the hosts share the LAN lan (no switch node in the manifest, and one LAN joins every node)" in head
    assert "Rain's systems need the Tofino topology" in head
    assert "network lan: the experiment's LAN lan, a plain LAN (kind: lan): no switch to log into or program" in out
    assert (
        "worker worker0: ssh alice@hp042.utah.cloudlab.us:22, nic 0000:03:00.1 ec:0d:9a:6e:3a:17 10.10.1.2 "
        "on the LAN lan" in out
    )
    assert "BFRuntime" not in out


def test_a_lan_needs_only_the_hosts_part_of_the_map(xl170, monkeypatch, capsys):
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "import", "xl170.xml", "-o", "r.yaml", "--no-interactive")
    assert code == 2
    # no switch.sde and no ports: nothing of a switch is asked for
    assert re.findall(r"^  - ([^\s:]+)", err, re.M) == [
        "host_defaults.pci",
        "host_defaults.cores",
        "ssh.key",
        "ssh.known_hosts",
    ]
    assert "ssh-keyscan -p 22 hp041.utah.cloudlab.us hp042.utah.cloudlab.us >> known_hosts" in err
    # The snippet is a map file: written as it is, the import goes through.
    snippet = err.split("(replace the examples):\n", 1)[1].split("\n  or run in a terminal")[0]
    (xl170 / "from_error.yaml").write_text("\n".join(line[4:] for line in snippet.splitlines()))
    code, _, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "import", "xl170.xml", "--map", "from_error.yaml", "-o", "r.yaml"
    )
    assert code == 0, err
    assert load_inventory(xl170 / "r.yaml").switch.kind == "lan"


def test_the_rakaia_profile_s_lan_comes_back_as_a_lan_inventory(tmp_path, monkeypatch):
    from orchestrator.cloudlab.profile import RAKAIA, Topology, render
    from tests.unit.test_cloudlab_profile import run_profile

    topo = Topology(**{**RAKAIA, "clients": 2, "workers": 3})
    root, _ = run_profile(render(topo), monkeypatch)
    (tmp_path / "manifest.xml").write_text(manifest_from_request(ET.tostring(root, encoding="unicode")))
    mp = {k: v for k, v in BASE_MAP.items() if k != "switch"}
    inv, p = do_import(tmp_path / "manifest.xml", mp, tmp_path)
    assert p.lan and p.lan_link.client_id == "lan" and inv.switch.kind == "lan"
    assert [(h.name, h.role, h.nic.ip, h.nic.switch_port) for h in inv.hosts] == [
        (n, n.rstrip("0123456789"), ip, None) for n, ip in topo.addresses().items()
    ]
    assert inv.name == "rt"
    # said as well as found, with a name of its own
    inv, p = do_import(tmp_path / "manifest.xml", {**mp, "switch": {"kind": "lan", "name": "utah-lan"}}, tmp_path)
    assert inv.switch.name == "utah-lan" and p.lan_why.startswith("switch.kind: lan in ")


def test_a_tofino_s_settings_in_a_lan_s_map_are_refused(xl170):
    mp = with_ports(["client0", "worker0"], {"switch": {"bfrt": "127.0.0.1:50052"}})
    text = import_error(xl170 / "xl170.xml", mp, xl170)
    assert re.search(
        r"m.yaml:\d+: switch.sde: 'sde' is a Tofino's setting; the hosts are on a plain LAN \(no switch node", text
    )
    assert "switch.bfrt: 'bfrt' is a Tofino's setting" in text
    assert re.search(r"m.yaml:\d+: ports: a plain LAN \(.*\) has no switch ports", text)
    assert "name the Tofino node with --switch NODE" in text
    mp = {**BASE_MAP, "switch": {"kind": "lan", "sde": "/x"}}
    text = import_error(xl170 / "xl170.xml", mp, xl170)
    assert "(switch.kind: lan in " in text and "set switch.kind: tofino" in text


def test_the_network_said_wins_and_contradictions_are_refused(xl170):
    m = manifest.load(xl170 / "xl170.xml")
    with pytest.raises(CloudlabError, match=r"no switch node: the default names 'tofino'") as ei:
        importer.plan(m, mapping.empty(), network="tofino")
    assert "--network lan" not in ei.value.render()  # the user said tofino: no LAN to offer
    (xl170 / "k.yaml").write_text("switch: {kind: tofino}\n")
    with pytest.raises(CloudlabError, match="--network lan contradicts switch.kind: tofino"):
        importer.plan(m, mapping.load(xl170 / "k.yaml"), network="lan")
    with pytest.raises(CloudlabError, match="--switch worker0 names a Tofino node") as ei:
        importer.plan(m, mapping.empty(), "worker0", network="lan")
    assert "drop --switch" in ei.value.fix
    # A Tofino's manifest read as a LAN: its hosts are on point-to-point links, none joins them all.
    with pytest.raises(CloudlabError, match="which link is the hosts' LAN") as ei:
        importer.plan(manifest.load(FIX / "p2p.xml"), mapping.empty(), network="lan")
    assert "switch.link" in ei.value.fix
    # lan.xml: the Tofino shares the hosts' LAN, so only --switch (or --network lan) says which it is.
    p = importer.plan(manifest.load(FIX / "lan.xml"), mapping.empty(), "p4sw")
    assert not p.lan and p.switch.client_id == "p4sw"
    with pytest.raises(CloudlabError, match="node p4sw is a wedge100bf: --switch p4sw"):
        importer.plan(manifest.load(FIX / "lan.xml"), mapping.empty())


def test_the_lan_link_is_named_when_several_could_be_it(xl170):
    from tests.unit.test_cloudlab_manifest import XL170_LAN

    # A second LAN that joins only client0 (a monitor port, say): the full one is still found.
    side = XL170_LAN.replace(
        '</node>\n  <node client_id="worker0"',
        '<interface client_id="client0:mon"/></node>\n  <node client_id="worker0"',
        1,
    ).replace(
        "<rs:site_info",
        '<link client_id="mon"><interface_ref client_id="client0:mon"/>'
        '<interface_ref client_id="worker0:mon"/><link_type name="lan"/></link>\n  <rs:site_info',
    )
    side = side.replace('<emulab:vnode name="hp042"', '<interface client_id="worker0:mon"/><emulab:vnode name="hp042"')
    (xl170 / "two.xml").write_text(side)
    m = manifest.load(xl170 / "two.xml")
    with pytest.raises(CloudlabError, match=r"several links join every node \(lan, mon\)") as ei:  # cannot tell
        importer.plan(m, mapping.empty())
    assert "pass --network lan and name the LAN with switch.link" in ei.value.fix
    with pytest.raises(CloudlabError, match="which link is the hosts' LAN") as ei:
        importer.plan(m, mapping.empty(), network="lan")
    (xl170 / "k.yaml").write_text("switch: {kind: lan, link: lan}\n")
    p = importer.plan(m, mapping.load(xl170 / "k.yaml"))
    assert p.lan_link.client_id == "lan" and [h.data.client_id for h in p.hosts] == ["client0:data", "worker0:data"]
    (xl170 / "k.yaml").write_text("switch: {kind: lan, link: lan9}\n")
    with pytest.raises(CloudlabError, match="switch.link names 'lan9', which is not a link"):
        importer.plan(m, mapping.load(xl170 / "k.yaml"))
