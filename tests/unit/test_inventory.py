"""Inventory validation: every mistake a person makes is named by field, line and fix."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import InventoryError
from orchestrator.inventory import load
from orchestrator.inventory.ansible import export

EXAMPLE = Path(__file__).resolve().parents[2] / "orchestrator/inventory/examples/rack1.yaml"


def base() -> dict:
    return {
        "name": "rack1",
        "switch": {
            "name": "tofino1",
            "kind": "tofino",
            "mgmt": {"address": "192.0.2.10"},
            "bfrt": "192.0.2.10:50052",
            "sde": "/opt/bf-sde-9.13.0",
            "ports": [
                {"port": "1/0", "dev_port": 132, "fec": "rs"},
                {"port": "2/0", "dev_port": 140, "fec": "rs"},
                {"port": "3/0", "dev_port": 148, "fec": "rs"},
            ],
        },
        "hosts": [
            {
                "name": "client0",
                "role": "client",
                "mgmt": {"address": "192.0.2.21"},
                "nic": {"pci": "0000:3b:00.0", "mac": "0c:42:a1:dd:5f:3a", "ip": "10.10.1.1", "switch_port": "1/0"},
                "cores": [2, 3],
            },
            {
                "name": "worker0",
                "role": "worker",
                "mgmt": {"address": "192.0.2.22"},
                "nic": {"pci": "0000:3b:00.0", "mac": "0c:42:a1:dd:60:10", "ip": "10.10.1.2", "switch_port": "2/0"},
                "cores": [2, 3],
            },
            {
                "name": "worker1",
                "role": "worker",
                "mgmt": {"address": "192.0.2.23"},
                "nic": {"pci": "0000:3b:00.0", "mac": "0c:42:a1:dd:60:11", "ip": "10.10.1.3", "switch_port": "3/0"},
                "cores": [2, 3],
            },
        ],
    }


def write(tmp_path: Path, data) -> Path:
    p = tmp_path / "inv.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False) if not isinstance(data, str) else data)
    return p


def problems_of(tmp_path: Path, data) -> InventoryError:
    with pytest.raises(InventoryError) as ei:
        load(write(tmp_path, data))
    return ei.value


def test_valid_inventory_loads(tmp_path):
    inv = load(write(tmp_path, base()))
    assert [h.name for h in inv.workers] == ["worker0", "worker1"]
    assert inv.links == [("client0", "1/0"), ("worker0", "2/0"), ("worker1", "3/0")]
    assert inv.switch.bfrt_port == 50052


def test_shipped_example_is_valid():
    inv = load(EXAMPLE)
    assert inv.switch.kind == "tofino" and len(inv.hosts) == 3


def mutate(fn):
    d = copy.deepcopy(base())
    fn(d)
    return d


CASES = [
    # (id, mutation, field path named, words in the message)
    ("typo-in-key", lambda d: d["hosts"][0].update(coress=[1]), "hosts[0].coress", "unknown field"),
    ("duplicate-host-name", lambda d: d["hosts"][2].update(name="worker0"), "hosts[2].name", "already used"),
    ("host-named-like-switch", lambda d: d["hosts"][0].update(name="tofino1"), "hosts[0].name", "already used"),
    (
        "duplicate-mac",
        lambda d: d["hosts"][2]["nic"].update(mac="0C:42:A1:DD:60:10"),
        "hosts[2].nic.mac",
        "already used",
    ),
    ("duplicate-ip", lambda d: d["hosts"][1]["nic"].update(ip="10.10.1.1"), "hosts[1].nic.ip", "already used"),
    ("duplicate-port", lambda d: d["switch"]["ports"][1].update(port="1/0"), "switch.ports[1].port", "already used"),
    (
        "duplicate-dev-port",
        lambda d: d["switch"]["ports"][2].update(dev_port=132),
        "switch.ports[2].dev_port",
        "already used",
    ),
    (
        "cabled-to-missing-port",
        lambda d: d["hosts"][1]["nic"].update(switch_port="9/0"),
        "hosts[1].nic.switch_port",
        "does not have",
    ),
    (
        "two-hosts-one-port",
        lambda d: d["hosts"][2]["nic"].update(switch_port="2/0"),
        "hosts[2].nic.switch_port",
        "already cabled",
    ),
    ("worker-without-cores", lambda d: d["hosts"][1].update(cores=[]), "hosts[1].cores", "no cores"),
    ("bad-mac", lambda d: d["hosts"][0]["nic"].update(mac="0c:42:a1:dd:5f"), "hosts[0].nic.mac", "not a MAC"),
    ("multicast-mac", lambda d: d["hosts"][0]["nic"].update(mac="01:00:5e:00:00:01"), "hosts[0].nic.mac", "multicast"),
    ("bad-ip", lambda d: d["hosts"][0]["nic"].update(ip="10.10.1.300"), "hosts[0].nic.ip", "not an IPv4"),
    ("bad-pci", lambda d: d["hosts"][0]["nic"].update(pci="3b:00.0"), "hosts[0].nic.pci", "PCI address"),
    (
        "pci-and-vdev",
        lambda d: d["hosts"][0]["nic"].update(vdev="net_af_packet0,iface=data0"),
        "hosts[0].nic",
        "exactly one",
    ),
    ("unknown-role", lambda d: d["hosts"][0].update(role="server"), "hosts[0].role", "client"),
    ("missing-mgmt", lambda d: d["hosts"][0].pop("mgmt"), "hosts[0].mgmt", "required"),
    ("bad-speed", lambda d: d["switch"]["ports"][0].update(speed="100g"), "switch.ports[0].speed", "100G"),
    ("firecode-at-100g", lambda d: d["switch"]["ports"][0].update(fec="fc"), "switch.ports[0]", "Firecode"),
    ("bad-port-name", lambda d: d["switch"]["ports"][0].update(port="Ethernet1"), "switch.ports[0].port", "port name"),
    ("tofino-without-sde", lambda d: d["switch"].pop("sde"), "switch", "SDE"),
    ("bad-bfrt", lambda d: d["switch"].update(bfrt="192.0.2.10"), "switch.bfrt", "host:port"),
    ("dev-port-range", lambda d: d["switch"]["ports"][0].update(dev_port=600), "switch.ports[0].dev_port", "511"),
    ("no-workers", lambda d: [h.update(role="client") for h in d["hosts"]], "hosts", "no host has role 'worker'"),
    ("core-twice", lambda d: d["hosts"][1].update(cores=[2, 2]), "hosts[1].cores", "twice"),
    (
        "vdev-on-tofino",
        lambda d: d["hosts"][1].update(nic={**d["hosts"][1]["nic"], "pci": None, "vdev": "net_af_packet0,iface=data0"}),
        "hosts[1].nic.vdev",
        "virtual device",
    ),
    (
        "bad-hugepage-size",
        lambda d: d["hosts"][1].update(hugepages={"size": "4K", "count": 10}),
        "hosts[1].hugepages.size",
        "2M",
    ),
    ("bad-name", lambda d: d["hosts"][1].update(name="Worker_0"), "hosts[1].name", "not a valid name"),
    (
        "duplicate-mgmt",
        lambda d: d["hosts"][1]["mgmt"].update(address="192.0.2.21"),
        "hosts[1].mgmt",
        "management address",
    ),
    # Every address field: a dotted all-numeric string is an IPv4 address, and must be a
    # valid one; anything else must be a valid host name.
    (
        "mgmt-bad-ipv4",
        lambda d: d["switch"]["mgmt"].update(address="999.1.1.1"),
        "switch.mgmt.address",
        "not a valid IPv4",
    ),
    (
        "host-mgmt-bad-ipv4",
        lambda d: d["hosts"][1]["mgmt"].update(address="192.0.2.256"),
        "hosts[1].mgmt.address",
        "not a valid IPv4",
    ),
    (
        "mgmt-three-numbers",
        lambda d: d["hosts"][1]["mgmt"].update(address="192.0.2"),
        "hosts[1].mgmt.address",
        "not a valid IPv4",
    ),
    (
        "mgmt-unspecified",
        lambda d: d["hosts"][1]["mgmt"].update(address="0.0.0.0"),
        "hosts[1].mgmt.address",
        "cannot be",
    ),
    (
        "mgmt-underscore",
        lambda d: d["hosts"][1]["mgmt"].update(address="node_1.lab"),
        "hosts[1].mgmt.address",
        "host name",
    ),
    (
        "mgmt-hyphen-label",
        lambda d: d["hosts"][1]["mgmt"].update(address="-node1.lab"),
        "hosts[1].mgmt.address",
        "host name",
    ),
    (
        "mgmt-empty-label",
        lambda d: d["hosts"][1]["mgmt"].update(address="node1..lab"),
        "hosts[1].mgmt.address",
        "host name",
    ),
    (
        "mgmt-numeric-tld",
        lambda d: d["hosts"][1]["mgmt"].update(address="node1.lab.42"),
        "hosts[1].mgmt.address",
        "host name",
    ),
    ("bfrt-bad-ipv4", lambda d: d["switch"].update(bfrt="999.1.1.1:50052"), "switch.bfrt", "not a valid IPv4"),
    ("bfrt-bad-host", lambda d: d["switch"].update(bfrt="tofino_1:50052"), "switch.bfrt", "host name"),
    ("nic-ip-broadcast", lambda d: d["hosts"][0]["nic"].update(ip="255.255.255.255"), "hosts[0].nic.ip", "cannot be"),
    ("service-ip-bad", lambda d: d["switch"].update(service_ip="10.255.255.256"), "switch.service_ip", "not an IPv4"),
    ("service-ip-name", lambda d: d["switch"].update(service_ip="sched.lab"), "switch.service_ip", "not an IPv4"),
    # real-hardware fields
    ("bad-sde-version", lambda d: d["switch"].update(sde_version="9.13"), "switch.sde_version", "not an SDE version"),
    ("bad-target", lambda d: d["switch"].update(target="hardware"), "switch.target", "asic"),
    ("bad-kernel-module", lambda d: d["switch"].update(kernel_module="bf_knet"), "switch.kernel_module", "bf_kdrv"),
    ("bad-program", lambda d: d["switch"].update(program="Rain-1"), "switch.program", "not a P4 program"),
    ("model-port-without-iface", lambda d: d["switch"].update(target="model"), "switch.ports[0].iface", "tofino-model"),
    (
        "ibverbs-on-vdev",
        lambda d: d["hosts"][1].update(
            nic={**d["hosts"][1]["nic"], "pci": None, "vdev": "net_af_packet0,iface=data0", "rdma": "ibverbs"}
        ),
        "hosts[1].nic",
        "needs a PCI NIC",
    ),
    (
        "netdev-on-vdev",
        lambda d: d["hosts"][1].update(
            nic={**d["hosts"][1]["nic"], "pci": None, "vdev": "net_af_packet0,iface=data0", "netdev": "eth1"}
        ),
        "hosts[1].nic",
        "belongs to a PCI NIC",
    ),
    ("bad-netdev", lambda d: d["hosts"][1]["nic"].update(netdev="eth 1"), "hosts[1].nic.netdev", "interface name"),
    (
        "bad-rdma-device",
        lambda d: d["hosts"][1]["nic"].update(rdma_device="mlx5/0"),
        "hosts[1].nic.rdma_device",
        "RDMA device",
    ),
    (
        "gid-without-ibverbs",
        lambda d: d["hosts"][1]["nic"].update(rdma="emulated", gid_index=3),
        "hosts[1].nic",
        "ibverbs",
    ),
    (
        "vfio-with-ibverbs",
        lambda d: d["hosts"][1]["nic"].update(driver="vfio-pci", rdma="ibverbs"),
        "hosts[1].nic",
        "vfio-pci",
    ),
    ("gid-out-of-range", lambda d: d["hosts"][1]["nic"].update(gid_index=300), "hosts[1].nic.gid_index", "255"),
    ("bad-roce-mtu", lambda d: d.update(roce={"mtu": 9000}), "roce.mtu", "4096"),
    ("dead-peer-zero", lambda d: d.setdefault("ssh", {}).update(dead_peer_s=0), "ssh.dead_peer_s", "1"),
    (
        "connect-timeout-text",
        lambda d: d.setdefault("ssh", {}).update(connect_timeout_s="soon"),
        "ssh.connect_timeout_s",
        "number",
    ),
    ("bad-roce-priority", lambda d: d.update(roce={"priority": 8}), "roce.priority", "7"),
    ("bad-qp-type", lambda d: d.update(roce={"qp_type": "ud"}), "roce.qp_type", "uc"),
    ("roce-typo", lambda d: d.update(roce={"pfcs": True}), "roce.pfcs", "unknown field"),
    ("dpdk-prefix-missing", lambda d: d.update(dpdk={"source": "prefix"}), "dpdk", "needs dpdk.prefix"),
    (
        "dpdk-source-with-local-build",
        lambda d: d.update(dpdk={"source": "prefix", "prefix": "/opt/dpdk"}),
        "deploy.build",
        "source build",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_inventory_names_field(tmp_path, case):
    _, fn, path, words = case
    err = problems_of(tmp_path, mutate(fn))
    rendered = err.render()
    match = [p for p in err.problems if p.path == path]
    assert match, f"no problem at {path}; got: {[p.path for p in err.problems]}\n{rendered}"
    assert any(words.lower() in p.message.lower() for p in match), rendered
    assert all(p.fix for p in match), f"every problem carries a fix:\n{rendered}"
    assert str(tmp_path / "inv.yaml") in rendered and path in rendered


def test_addresses_and_host_names_that_are_fine(tmp_path):
    def fn(d):
        d["switch"]["mgmt"]["address"] = "tofino1.lab.example.org"
        d["switch"]["bfrt"] = "[2001:db8::10]:50052"
        d["hosts"][0]["mgmt"]["address"] = "2001:db8::21"
        d["hosts"][1]["mgmt"]["address"] = "node-1"
        d["hosts"][2]["mgmt"]["address"] = "127.0.0.1"

    inv = load(write(tmp_path, mutate(fn)))
    assert inv.switch.bfrt_host == "[2001:db8::10]" and inv.hosts[1].mgmt.address == "node-1"


def test_typo_suggests_the_right_field(tmp_path):
    err = problems_of(tmp_path, mutate(lambda d: d["hosts"][0]["nic"].update(switchport="1/0")))
    p = next(p for p in err.problems if p.path == "hosts[0].nic.switchport")
    assert "switch_port" in p.fix


def test_problems_carry_line_numbers(tmp_path):
    text = textwrap.dedent(
        yaml.safe_dump(mutate(lambda d: d["hosts"][2]["nic"].update(mac="0c:42:a1:dd:60:10")), sort_keys=False)
    )
    p = write(tmp_path, text)
    with pytest.raises(InventoryError) as ei:
        load(p)
    prob = next(x for x in ei.value.problems if x.path == "hosts[2].nic.mac")
    assert "0c:42:a1:dd:60:10" in p.read_text().splitlines()[prob.line - 1]


def test_duplicate_yaml_key_is_refused(tmp_path):
    text = yaml.safe_dump(base(), sort_keys=False).replace("name: rack1\n", "name: rack1\nname: rack2\n", 1)
    err = problems_of(tmp_path, text)
    assert any("appears twice" in p.message and p.line == 2 for p in err.problems), err.render()


def test_syntax_error_names_line(tmp_path):
    err = problems_of(tmp_path, "name: x\nswitch: {name: a\nhosts: []\n")
    assert err.problems[0].line is not None and "YAML" in err.problems[0].message


def test_not_a_mapping(tmp_path):
    err = problems_of(tmp_path, "- just\n- a list\n")
    assert "mapping" in err.problems[0].message


def test_all_problems_reported_at_once(tmp_path):
    def many(d):
        d["hosts"][1]["cores"] = []
        d["hosts"][2]["nic"]["switch_port"] = "7/0"
        d["hosts"][2]["nic"]["ip"] = "10.10.1.1"

    err = problems_of(tmp_path, mutate(many))
    assert {p.path for p in err.problems} >= {"hosts[1].cores", "hosts[2].nic.switch_port", "hosts[2].nic.ip"}


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(InventoryError) as ei:
        load(tmp_path / "nope.yaml")
    assert "cannot read" in ei.value.render()


def test_relative_key_paths_resolve_against_the_file(tmp_path):
    (tmp_path / "k").write_text("x")
    inv = load(write(tmp_path, {**base(), "ssh": {"key": "k"}}))
    assert inv.ssh.key == (tmp_path / "k").resolve()


def test_ansible_export_groups_and_pins_keys(tmp_path):
    inv = load(write(tmp_path, {**base(), "ssh": {"known_hosts": "/etc/kh"}}))
    a = export(inv)["all"]
    assert "StrictHostKeyChecking=yes" in a["vars"]["ansible_ssh_common_args"]
    assert "UserKnownHostsFile=/etc/kh" in a["vars"]["ansible_ssh_common_args"]
    kids = a["children"]
    assert list(kids["switch"]["hosts"]) == ["tofino1"]
    assert list(kids["hosts"]["children"]["workers"]["hosts"]) == ["worker0", "worker1"]
    w0 = kids["hosts"]["children"]["workers"]["hosts"]["worker0"]
    assert w0["ansible_host"] == "192.0.2.22" and w0["rainmaker_hugepages_size_kb"] == 2048


def test_real_hardware_fields_have_sound_defaults(tmp_path):
    inv = load(write(tmp_path, base()))
    sw = inv.switch
    assert str(sw.sde_install_path) == "/opt/bf-sde-9.13.0/install"
    assert (sw.target, sw.chip, sw.kernel_module) == ("asic", "tofino", "bf_kdrv")
    assert (sw.hugepages.size, sw.hugepages.count) == ("2M", 128)
    w = inv.host("worker0").nic
    assert w.rdma_transport == "ibverbs" and w.driver == "auto"  # a PCI NIC: the ConnectX writes the ring
    assert (inv.roce.mtu, inv.roce.priority, inv.roce.qp_type) == (4096, 3, "uc")
    assert inv.dpdk.source == "debian" and inv.deploy.build == "local"
    assert not inv.shared_system


def test_sde_install_can_be_given(tmp_path):
    inv = load(write(tmp_path, mutate(lambda d: d["switch"].update(sde_install="/usr/local/sde"))))
    assert str(inv.switch.sde_install_path) == "/usr/local/sde"


def test_tofino_model_takes_virtual_hosts(tmp_path):
    def model(d):
        d["switch"].update(target="model")
        for i, p in enumerate(d["switch"]["ports"]):
            p["iface"] = f"veth{2 * i}"
        for h in d["hosts"]:
            h["nic"] = {**h["nic"], "pci": None, "vdev": "net_af_packet0,iface=data0"}

    inv = load(write(tmp_path, mutate(model)))
    assert all(h.nic.rdma_transport == "emulated" for h in inv.hosts)


def test_source_built_dpdk_with_host_builds(tmp_path):
    inv = load(
        write(tmp_path, {**base(), "dpdk": {"source": "prefix", "prefix": "/opt/dpdk"}, "deploy": {"build": "host"}})
    )
    assert str(inv.dpdk.prefix) == "/opt/dpdk"


def test_ansible_export_carries_the_hardware_settings(tmp_path):
    inv = load(
        write(
            tmp_path,
            mutate(
                lambda d: (
                    d["switch"].update(sde_version="9.13.0", kernel_module="bf_kpkt"),
                    d["hosts"][1]["nic"].update(netdev="enp59s0f0np0", gid_index=3),
                    d.update(roce={"priority": 5, "pfc": False}),
                )
            ),
        )
    )
    a = export(inv)["all"]
    v = a["vars"]
    assert v["rainmaker_roce"]["priority"] == 5 and v["rainmaker_roce"]["pfc"] is False
    assert v["rainmaker_service_ip"] == inv.switch.service_ip and v["rainmaker_shared_system"] is False
    assert v["rainmaker_dpdk"] == {"source": "debian", "prefix": None, "version": "22.11"}
    sw = a["children"]["switch"]["hosts"]["tofino1"]
    assert sw["rainmaker_sde"] == "/opt/bf-sde-9.13.0" and sw["rainmaker_sde_install"] == "/opt/bf-sde-9.13.0/install"
    assert sw["rainmaker_sde_version"] == "9.13.0" and sw["rainmaker_switch_kernel_module"] == "bf_kpkt"
    assert sw["rainmaker_switch_target"] == "asic" and sw["rainmaker_hugepages_count"] == 128
    w0 = a["children"]["hosts"]["children"]["workers"]["hosts"]["worker0"]
    assert w0["rainmaker_rdma"] == "ibverbs" and w0["rainmaker_host_emulated"] is False
    assert w0["rainmaker_nic"]["netdev"] == "enp59s0f0np0" and w0["rainmaker_nic"]["gid_index"] == 3


def lan() -> dict:
    """The hosts of base() on a plain LAN (CloudLab's xl170 nodes): no switch to program."""
    d = copy.deepcopy(base())
    d["switch"] = {"name": "lan", "kind": "lan"}
    for h in d["hosts"]:
        del h["nic"]["switch_port"]
    return d


def test_a_plain_lan_needs_no_switch_login_ports_or_cables(tmp_path):
    inv = load(write(tmp_path, lan()))
    assert not inv.switch.programmable and inv.links == [] and inv.switch.mgmt is None
    a = export(inv)["all"]
    # no machine in the switch group: the switch play runs on nothing; the roce role is skipped
    assert a["children"]["switch"]["hosts"] == {} and a["vars"]["rainmaker_switch_kind"] == "lan"
    from orchestrator.remote import targets

    assert [t.name for t in targets(inv)] == ["client0", "worker0", "worker1"]
    assert [t.name for t in targets(inv, include_switch=False)] == ["client0", "worker0", "worker1"]


LAN_CASES = [
    ("lan-with-bfrt", lambda d: d["switch"].update(bfrt="192.0.2.10:50052"), "switch.bfrt", "plain LAN"),
    (
        "lan-with-ports",
        lambda d: d["switch"].update(ports=[{"port": "1/0", "dev_port": 132}]),
        "switch.ports",
        "no ports",
    ),
    ("lan-host-cabled", lambda d: d["hosts"][1]["nic"].update(switch_port="2/0"), "hosts[1].nic.switch_port", "LAN"),
]


@pytest.mark.parametrize("case", LAN_CASES, ids=[c[0] for c in LAN_CASES])
def test_what_a_plain_lan_cannot_have_is_named(tmp_path, case):
    _, fn, path, words = case
    d = lan()
    fn(d)
    err = problems_of(tmp_path, d)
    match = [p for p in err.problems if p.path == path]
    assert match and any(words in p.message for p in match) and all(p.fix for p in match), err.render()


def test_a_programmed_switch_still_needs_its_login_address_and_cables(tmp_path):
    def no_bfrt(d):
        del d["switch"]["bfrt"]

    err = problems_of(tmp_path, mutate(no_bfrt))
    assert any(p.path == "switch.bfrt" and "needs 'bfrt'" in p.message for p in err.problems), err.render()
    err = problems_of(tmp_path, mutate(lambda d: d["hosts"][0]["nic"].pop("switch_port")))
    assert any(p.path == "hosts[0].nic.switch_port" and "no switch_port" in p.message for p in err.problems)


def test_a_plain_lan_is_not_warned_about_the_switchs_writes(tmp_path):
    from orchestrator.inventory import warnings

    d = lan()
    d["ssh"] = {"known_hosts": "/etc/ssh/ssh_known_hosts"}
    assert not [w for w in warnings(load(write(tmp_path, d)), tmp_path) if w.path == "roce.icrc_check"]


# -- behind a gateway (ssh.jump) -----------------------------------------------------------
def _behind_gateway(**jump) -> dict:
    d = base()
    d["ssh"] = {"key": "/k/lab", "known_hosts": "/k/known_hosts", "jump": {"address": "gw.lab.example.org", **jump}}
    return d


def test_a_gateway_takes_the_inventorys_key_and_known_hosts_unless_given_its_own(tmp_path):
    inv = load(write(tmp_path, _behind_gateway(user="alice")))
    assert (inv.ssh.jump.address, inv.ssh.jump.user, inv.ssh.jump.port) == ("gw.lab.example.org", "alice", 22)
    assert (inv.jump_key, inv.jump_known_hosts) == (Path("/k/lab"), Path("/k/known_hosts"))
    (tmp_path / "gw_key").write_text("x")
    inv = load(write(tmp_path, _behind_gateway(user="alice", port=2222, key="gw_key", known_hosts="gw_kh")))
    # relative paths resolve against the inventory's folder, like every key path
    assert (inv.jump_key, inv.jump_known_hosts) == ((tmp_path / "gw_key").resolve(), (tmp_path / "gw_kh").resolve())
    assert load(write(tmp_path, base())).jump_key is None


@pytest.mark.parametrize(
    ("jump", "path", "said"),
    [
        ({"address": "gw..lab", "user": "alice"}, "ssh.jump.address", "neither an IP address nor a valid host name"),
        ({"address": "gw", "user": "Alice Smith"}, "ssh.jump.user", "not a valid user name"),
        ({"address": "gw", "user": "alice", "port": 0}, "ssh.jump.port", "greater than or equal to 1"),
        ({"address": "gw", "user": "alice", "proxy": "x"}, "ssh.jump.proxy", ""),
        ({"address": "gw"}, "ssh.jump.user", ""),
    ],
)
def test_a_malformed_gateway_is_named_by_field(tmp_path, jump, path, said):
    d = base()
    d["ssh"] = {"key": "/k/lab", "known_hosts": "/k/kh", "jump": jump}
    err = problems_of(tmp_path, d)
    assert [p.path for p in err.problems] == [path], err.render()
    assert said in err.problems[0].message


def test_a_gateway_without_a_key_or_pinned_host_key_is_refused_with_the_fix(tmp_path):
    d = base()
    d["ssh"] = {"jump": {"address": "gw.lab.example.org", "user": "alice"}}
    err = problems_of(tmp_path, d)
    by_path = {p.path: p for p in err.problems}
    assert set(by_path) == {"ssh.jump.key", "ssh.jump.known_hosts"}
    assert "ssh-keyscan -p 22 gw.lab.example.org" in by_path["ssh.jump.known_hosts"].fix
    assert by_path["ssh.jump.key"].line is not None  # located in the file


def test_a_machine_cannot_be_its_own_gateway(tmp_path):
    d = _behind_gateway(user="alice")
    d["ssh"]["jump"]["address"] = "192.0.2.22"
    err = problems_of(tmp_path, d)
    assert [p.path for p in err.problems] == ["ssh.jump.address"] and "hosts[1].mgmt" in err.problems[0].message


def test_bfrt_via_ssh_is_for_a_switch_rainmaker_programs(tmp_path):
    d = base()
    d["switch"]["bfrt_via_ssh"] = True
    d["switch"]["bfrt"] = "127.0.0.1:50052"  # as the switch sees it
    inv = load(write(tmp_path, d))
    assert inv.switch.bfrt_via_ssh and inv.switch.bfrt_host == "127.0.0.1"
    assert load(write(tmp_path, base())).switch.bfrt_via_ssh is False
    lan = base()
    lan["switch"] = {"name": "lan0", "kind": "lan", "bfrt_via_ssh": True}
    for h in lan["hosts"]:
        del h["nic"]["switch_port"]
    err = problems_of(tmp_path, lan)
    assert [p.path for p in err.problems] == ["switch.bfrt_via_ssh"]


def _proxy_argv(common_args: str) -> list[str]:
    """What the ProxyCommand in Ansible's ssh arguments runs, with %h:%p as ssh fills
    them in: split as Ansible splits them (shlex), then run by /bin/sh as ssh runs it,
    with `ssh` swapped for a program that prints its arguments."""
    import json
    import shlex
    import subprocess
    import sys

    words = shlex.split(common_args)
    (cmd,) = [w.removeprefix("ProxyCommand=") for w in words if w.startswith("ProxyCommand=")]
    assert words[words.index("ProxyCommand=" + cmd) - 1] == "-o"
    assert cmd.startswith("ssh ")
    cmd = cmd.replace("%h", "192.0.2.22").replace("%p", "22").replace("%%", "%")  # ssh's own expansion
    show = f"{shlex.quote(sys.executable)} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
    out = subprocess.run(["sh", "-c", show + cmd[3:]], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_ansible_reaches_the_machines_through_the_gateway_pinning_its_key(tmp_path):
    odd = tmp_path / "it's a 50% dir"
    odd.mkdir()
    (odd / "kh").write_text("")
    d = _behind_gateway(user="alice", port=2222, key=str(odd / "gw key"), known_hosts=str(odd / "kh"))
    inv = load(write(tmp_path, d))
    args = export(inv)["all"]["vars"]["ansible_ssh_common_args"]
    argv = _proxy_argv(args)
    # the gateway's own host key is pinned, and nothing but the inventory is read
    assert argv[:2] == ["-F", "/dev/null"]
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "StrictHostKeyChecking=yes" in opts and "BatchMode=yes" in opts and "IdentitiesOnly=yes" in opts
    assert f'UserKnownHostsFile="{odd / "kh"}"' in opts  # double quotes: ssh splits this option at spaces
    assert argv[argv.index("-i") + 1] == str(odd / "gw key")
    assert argv[-8:] == ["-p", "2222", "-l", "alice", "-W", "192.0.2.22:22", "--", "gw.lab.example.org"]
    # the machines' own keys stay pinned in the inventory's file
    assert "UserKnownHostsFile=/k/known_hosts" in args and "StrictHostKeyChecking=yes" in args
    assert "ProxyCommand" not in export(load(write(tmp_path, base())))["all"]["vars"]["ansible_ssh_common_args"]


def test_the_shipped_gateway_example_is_valid():
    inv = load(EXAMPLE.with_name("rack1-gateway.yaml"))
    assert inv.ssh.jump.user == "alice" and inv.switch.bfrt_via_ssh and inv.switch.bfrt_host == "127.0.0.1"
    assert inv.jump_known_hosts == EXAMPLE.parent / "gateway_known_hosts"
    assert "ProxyCommand=ssh " in export(inv)["all"]["vars"]["ansible_ssh_common_args"]
