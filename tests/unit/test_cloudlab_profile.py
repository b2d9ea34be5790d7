"""`rainmaker cloudlab profile`: the profile is valid Python and requests the topology asked for.

The strongest check runs the generated profile.py as the portal would, with the real
geni-lib's `geni.rspec.pg` building the request RSpec. Only `geni.portal` is replaced,
by a small shim: the PyPI geni-lib's portal module is Python 2 (print statements) and
cannot be imported here. The shim keeps the portal's contract: parameters bind to
their defaults (or to values a test gives, as the instantiation page would),
reportError + verifyParameters stop the script, printRequestRSpec hands over the XML.
"""

from __future__ import annotations

import argparse
import ast
import sys
import types
import xml.etree.ElementTree as ET

import pytest

from orchestrator.cloudlab.profile import IMAGES, Topology, render
from orchestrator.errors import CloudlabError
from tests.cli import rainmaker

G = "{http://www.geni.net/resources/rspec/3}"
EMULAB = "{http://www.protogeni.net/resources/rspec/ext/emulab/1}"


class ParameterRefused(Exception):
    pass


def portal_shim(overrides: dict | None = None) -> tuple[types.ModuleType, dict]:
    """A stand-in for geni.portal: what the portal's Context does for a profile."""
    from geni.rspec import pg

    out: dict = {"params": {}, "errors": []}

    class ParameterType:
        INTEGER, STRING, BOOLEAN, IMAGE = "integer", "string", "boolean", "image"
        AGGREGATE, NODETYPE, BANDWIDTH, LATENCY = "aggregate", "nodetype", "bandwidth", "latency"
        SIZE, PUBKEY, LOSSRATE = "size", "pubkey", "lossrate"

    class ParameterError(Exception):
        def __init__(self, message, params):
            super().__init__(message)
            self.params = params

    class Context:
        def defineParameter(self, name, description, typ, defaultValue, legalValues=None, **kw):
            if legalValues is not None:  # the portal refuses a default outside the legal values
                legal = [v[0] if isinstance(v, tuple) else v for v in legalValues]
                assert defaultValue in legal, (name, defaultValue, legal)
            out["params"][name] = {"type": typ, "default": defaultValue, "description": description, **kw}

        def bindParameters(self):
            values = {n: p["default"] for n, p in out["params"].items()}
            values.update(overrides or {})
            return argparse.Namespace(**values)

        def reportError(self, err, immediate=False):
            out["errors"].append(err)

        def verifyParameters(self):
            if out["errors"]:
                raise ParameterRefused([str(e) for e in out["errors"]])

        def makeRequestRSpec(self):
            out["request"] = pg.Request()
            return out["request"]

        def printRequestRSpec(self, rspec=None):
            out["xml"] = (rspec or out["request"]).toXMLString(pretty_print=True, ucode=True)

    mod = types.ModuleType("geni.portal")
    mod.Context, mod.ParameterType, mod.ParameterError = Context, ParameterType, ParameterError
    mod.context = Context()
    return mod, out


def run_profile(text: str, monkeypatch, overrides: dict | None = None) -> ET.Element:
    pytest.importorskip("six", reason="geni-lib needs six (pip install six)")
    pytest.importorskip("geni.rspec.pg", reason="geni-lib is not installed (pip install 'geni-lib>=0.9.9' six)")
    import geni

    shim, out = portal_shim(overrides)
    monkeypatch.setitem(sys.modules, "geni.portal", shim)
    monkeypatch.setattr(geni, "portal", shim, raising=False)
    exec(compile(text, "profile.py", "exec"), {"__name__": "__main__"})
    assert "xml" in out, "the profile never called printRequestRSpec"
    return ET.fromstring(out["xml"]), out


def nodes_of(root: ET.Element) -> dict[str, ET.Element]:
    return {n.get("client_id"): n for n in root.findall(f"{G}node")}


def test_profile_is_python_that_portals_of_both_pythons_run():
    text = render(Topology())
    compile(text, "profile.py", "exec")
    tree = ast.parse(text)
    # The portal has run profiles under Python 2 too: nothing Python-3-only.
    py3_only = (ast.JoinedStr, ast.AnnAssign, ast.NamedExpr, ast.AsyncFunctionDef)
    assert not [n for n in ast.walk(tree) if isinstance(n, py3_only)]
    assert ast.get_docstring(tree).startswith("Rain testbed: 1 client(s) and 2 worker(s)")


@pytest.mark.parametrize("clients,workers", [(1, 2), (2, 5), (1, 1)])
def test_profile_requests_the_topology_asked_for(monkeypatch, clients, workers):
    topo = Topology(clients=clients, workers=workers, hardware_type="c6525-100g", subnet="10.20.0.0/24")
    root, out = run_profile(render(topo), monkeypatch)
    assert root.get("type") == "request"
    nodes = nodes_of(root)
    hosts = topo.host_names()
    assert set(nodes) == {"tofino", *hosts}
    want = topo.addresses()
    assert want["client0"] == "10.20.0.1" and want[f"worker{workers - 1}"] == f"10.20.0.{clients + workers}"
    for name in hosts:
        n = nodes[name]
        assert n.find(f"{G}sliver_type").get("name") == "raw"  # geni-lib's name for a raw PC
        assert n.find(f"{G}sliver_type/{G}disk_image").get("name") == IMAGES["ubuntu22"]
        assert n.find(f"{G}hardware_type").get("name") == "c6525-100g"
        (iface,) = n.findall(f"{G}interface")
        assert iface.get("client_id") == f"{name}:data"
        ip = iface.find(f"{G}ip")
        assert (ip.get("address"), ip.get("netmask"), ip.get("type")) == (want[name], "255.255.255.0", "ipv4")
    sw = nodes["tofino"]
    assert sw.find(f"{G}hardware_type").get("name") == "tofino"
    assert sw.find(f"{G}sliver_type/{G}disk_image") is None
    assert sw.find(f"{EMULAB}use_type_default_image").get("enabled") == "true"
    assert sorted(i.get("client_id") for i in sw.findall(f"{G}interface")) == sorted(f"tofino:{h}" for h in hosts)
    assert all(i.find(f"{G}ip") is None for i in sw.findall(f"{G}interface"))  # switch ports carry no address

    links = {lk.get("client_id"): lk for lk in root.findall(f"{G}link")}
    assert set(links) == {f"link-{h}" for h in hosts}
    for h in hosts:
        lk = links[f"link-{h}"]
        assert sorted(r.get("client_id") for r in lk.findall(f"{G}interface_ref")) == sorted(
            [f"{h}:data", f"tofino:{h}"]
        )
        caps = {p.get("capacity") for p in lk.findall(f"{G}property")}
        assert caps == {"100000000"}  # 100 Gb/s in kb/s, both directions
        assert lk.find(f"{EMULAB}force_nobwshaping").get("enabled") == "true"
        assert lk.find(f"{EMULAB}interswitch").get("allow") == "false"
    assert out["params"]["switch_type"]["type"] == "nodetype"


def test_portal_parameters_change_the_topology_at_instantiation(monkeypatch):
    text = render(Topology(clients=1, workers=2))
    root, _ = run_profile(
        text,
        monkeypatch,
        {"clients": 2, "workers": 4, "host_type": "r650", "switch_image": IMAGES["ubuntu20"], "bandwidth_gbps": 25},
    )
    nodes = nodes_of(root)
    assert set(nodes) == {"tofino", "client0", "client1", "worker0", "worker1", "worker2", "worker3"}
    assert nodes["worker3"].find(f"{G}interface/{G}ip").get("address") == "10.10.1.6"
    assert nodes["worker3"].find(f"{G}hardware_type").get("name") == "r650"
    assert nodes["tofino"].find(f"{G}sliver_type/{G}disk_image").get("name") == IMAGES["ubuntu20"]
    assert nodes["tofino"].find(f"{EMULAB}use_type_default_image") is None
    assert {p.get("capacity") for p in root.iter(f"{G}property")} == {"25000000"}


@pytest.mark.parametrize(
    "overrides,words",
    [
        ({"workers": 0}, "at least one worker"),
        ({"clients": 0}, "at least one client"),
        ({"workers": 300}, "at most 64 ports"),
    ],
)
def test_portal_refuses_bad_parameters(monkeypatch, overrides, words):
    with pytest.raises(ParameterRefused) as ei:
        run_profile(render(Topology()), monkeypatch, overrides)
    assert any(words in m for m in ei.value.args[0])


def test_small_subnet_is_refused_by_the_profile_too(monkeypatch):
    text = render(Topology(clients=1, workers=4, subnet="10.1.1.0/29"))  # 6 host addresses: 5 hosts + switch
    run_profile(text, monkeypatch)
    with pytest.raises(ParameterRefused, match="cannot address 6 hosts"):
        run_profile(text, monkeypatch, {"workers": 5})


def test_switch_options_reach_the_request(monkeypatch):
    topo = Topology(switch_name="tf2", switch_hardware_type="wedge100bf", switch_image="ubuntu24")
    root, _ = run_profile(render(topo), monkeypatch)
    sw = nodes_of(root)["tf2"]
    assert sw.find(f"{G}hardware_type").get("name") == "wedge100bf"
    assert sw.find(f"{G}sliver_type/{G}disk_image").get("name") == IMAGES["ubuntu24"]
    assert {i.get("client_id") for i in sw.findall(f"{G}interface")} == {"tf2:client0", "tf2:worker0", "tf2:worker1"}


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"workers": 0}, "at least one client and one worker"),
        ({"clients": 40, "workers": 40}, "at most 64"),
        ({"subnet": "10.1.1.0/30"}, "host addresses"),
        ({"subnet": "8.8.8.0/24"}, "not a private network"),
        ({"subnet": "10.1.1.0/33"}, "not an IPv4 network"),
        ({"hardware_type": 'd6515"; import os'}, "not a hardware type name"),
        ({"image": "ubuntu99"}, "neither a known image"),
        ({"switch_image": "urn:publicid:IDN+x+image+a//b'); rm"}, "neither a known image"),
        ({"switch_name": "worker-sw"}, "cannot name the switch node"),
        ({"switch_name": "Tofino"}, "cannot name the switch node"),
        ({"bandwidth_gbps": 0}, "not a link speed"),
    ],
)
def test_bad_topologies_are_refused_with_the_option_named(kw, words):
    with pytest.raises(CloudlabError) as ei:
        render(Topology(**kw))
    assert words in ei.value.message and ei.value.fix


def test_command_line_writes_the_profile(tmp_path, monkeypatch, capsys):
    out = tmp_path / "profile.py"
    code, _, err = rainmaker(
        monkeypatch,
        capsys,
        "cloudlab",
        "profile",
        "--clients",
        "2",
        "--workers",
        "3",
        "--switch-hardware-type",
        "tofino-utah",
        "-o",
        str(out),
    )
    assert code == 0, err
    text = out.read_text()
    compile(text, str(out), "exec")
    assert "--switch-hardware-type tofino-utah" in text and "'tofino-utah'" in text
    assert "client0 10.10.1.1" in err and "worker2 10.10.1.5" in err


def test_command_line_prints_the_profile_without_output_file(monkeypatch, capsys):
    code, out, _ = rainmaker(monkeypatch, capsys, "cloudlab", "profile", "--workers", "1")
    assert code == 0
    root, _ = run_profile(out, monkeypatch)
    assert set(nodes_of(root)) == {"tofino", "client0", "worker0"}


def test_command_line_refuses_bad_input_with_status_2(monkeypatch, capsys):
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "profile", "--subnet", "10.0.0.0/30")
    assert code == 2
    assert "subnet 10.0.0.0/30" in err and "fix:" in err


def test_the_rakaia_preset_requests_xl170_nodes_on_one_lan(monkeypatch, capsys):
    """Rakaia's paper: xl170 nodes, Ubuntu 24.04, the cluster's own LAN and no Tofino."""
    code, out, err = rainmaker(monkeypatch, capsys, "cloudlab", "profile", "--preset", "rakaia", "--clients", "2")
    assert code == 0, err
    assert "one LAN, no Tofino" in err and "client1 10.10.1.2" in err and "worker0 10.10.1.3" in err
    root, got = run_profile(out, monkeypatch)
    nodes = nodes_of(root)
    assert set(nodes) == {"client0", "client1", "worker0"}  # the option given beside the preset wins
    for n in nodes.values():
        assert n.find(f"{G}hardware_type").get("name") == "xl170"
        assert n.find(f"{G}sliver_type/{G}disk_image").get("name") == IMAGES["ubuntu24"]
    (lan,) = root.findall(f"{G}link")
    assert lan.get("client_id") == "lan"
    assert sorted(r.get("client_id") for r in lan.findall(f"{G}interface_ref")) == sorted(f"{h}:data" for h in nodes)
    assert {p.get("capacity") for p in lan.findall(f"{G}property")} == {"25000000"}  # 25 Gb/s in kb/s
    assert lan.find(f"{EMULAB}force_nobwshaping").get("enabled") == "true"
    assert "switch_type" not in got["params"]
    # its instructions: the import reads this topology back (switch.kind: lan)
    assert "rainmaker cloudlab import manifest.xml" in ast.get_docstring(ast.parse(out))
    # the portal's parameters still shape it at instantiation
    root, _ = run_profile(out, monkeypatch, {"clients": 1, "workers": 3})
    assert set(nodes_of(root)) == {"client0", "worker0", "worker1", "worker2"}


def test_a_lan_is_not_limited_by_a_tofinos_ports():
    Topology(kind="lan", clients=40, workers=40).check()
    with pytest.raises(CloudlabError, match="at most 64 ports"):
        Topology(clients=40, workers=40).check()
    with pytest.raises(CloudlabError, match="--network 'ring'"):
        Topology(kind="ring").check()


def test_the_help_names_the_lan_and_the_rakaia_preset(monkeypatch, capsys):
    code, out, _ = rainmaker(monkeypatch, capsys, "cloudlab", "--help")
    assert code == 0 and "--preset rakaia" in out and "kind: lan" in out
    code, out, _ = rainmaker(monkeypatch, capsys, "cloudlab", "profile", "--help")
    assert code == 0 and "--network [tofino|lan|shared-vlan]" in out and "--preset [rakaia]" in out
    code, out, _ = rainmaker(monkeypatch, capsys, "cloudlab", "import", "--help")
    assert code == 0 and "--network [tofino|lan]" in out and "{name: lan, kind: lan}" in out
