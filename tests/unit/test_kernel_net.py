"""hosts/agent/kernel_net.py refuses bad addresses before running any command, naming
what is wrong (the commands themselves run in tests/integration/test_rpc_network.py)."""

from __future__ import annotations

import pytest

from hosts.agent import kernel_net


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["attach", "--iface", "data0", "--ip", "10.0.0.1", "--peer", "10.0.0.1"], "own address, not a peer"),
        (["attach", "--iface", "data0", "--ip", "10.0.0", "--gateway-mac", "02:00:00:00:00:01"], "not an IPv4"),
        (["detach", "--iface", "data0", "--ip", "10.0.0.1", "--peer", "10.0.0.1"], "own address, not a peer"),
        (["attach", "--iface", "data0", "--ip", "10.0.0.1", "--gateway-mac", "02:00:00"], "not a MAC address"),
        (["detach", "--iface", "data0; reboot", "--ip", "10.0.0.1"], "not an interface name"),
    ],
)
def test_bad_addresses_are_refused_before_any_command(argv, words, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(kernel_net, "_run", lambda a, **kw: ran.append(a))
    assert kernel_net.main(argv) == 1
    assert words in capsys.readouterr().err and not ran


def test_attach_and_detach_run_exactly_the_inverse_commands(monkeypatch):
    ran = []
    monkeypatch.setattr(kernel_net, "_run", lambda a, **kw: ran.append(" ".join(a)))
    kernel_net.attach("data0", "10.0.0.1", ["10.0.0.2"], "02:52:4D:09:FF:FE")
    assert ran == [
        "ethtool -K data0 tso off gso off gro off",
        "ip addr replace 10.0.0.1/32 dev data0",
        "ip route replace 10.0.0.2/32 dev data0 src 10.0.0.1",
        "ip neigh replace 10.0.0.2 lladdr 02:52:4d:09:ff:fe dev data0 nud permanent",
    ]
    ran.clear()
    kernel_net.detach("data0", "10.0.0.1", ["10.0.0.2"])
    assert ran == [
        "ip neigh del 10.0.0.2 dev data0",
        "ip route del 10.0.0.2/32 dev data0",
        "ip addr del 10.0.0.1/32 dev data0",
    ]


def test_on_a_plain_lan_the_clusters_address_is_left_alone(monkeypatch):
    """No gateway MAC (switch.kind: lan): an interface with the IP already (CloudLab
    configures it) is not touched, offloads included; one without it gets the /32 and
    routes, and ARP finds the peers (no permanent neighbour)."""
    ran = []
    monkeypatch.setattr(kernel_net, "_run", lambda a, **kw: ran.append(" ".join(a)))
    monkeypatch.setattr(kernel_net, "has_address", lambda iface, ip: True)
    assert kernel_net.attach("eno1", "10.10.1.1", ["10.10.1.2"], None) is False
    assert ran == []
    monkeypatch.setattr(kernel_net, "has_address", lambda iface, ip: False)
    assert kernel_net.attach("eno1", "10.10.1.1", ["10.10.1.2"], None) is True
    assert ran == ["ip addr replace 10.10.1.1/32 dev eno1", "ip route replace 10.10.1.2/32 dev eno1 src 10.10.1.1"]


def test_has_address_reads_the_interfaces_addresses():
    # loopback always has 127.0.0.1 (as 127.0.0.1/8), and never 127.0.0.2 as an address
    assert kernel_net.has_address("lo", "127.0.0.1") is True
    assert kernel_net.has_address("lo", "127.0.0.2") is False
    with pytest.raises(kernel_net.KernelNetError, match="failed"):
        kernel_net.has_address("nosuchif0", "127.0.0.1")
