"""hosts/agent/kernel_net.py refuses bad addresses before running any command, naming
what is wrong (the commands themselves run in tests/integration/test_rpc_network.py)."""

from __future__ import annotations

import pytest

from hosts.agent import kernel_net


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["attach", "--iface", "data0", "--ip", "10.0.0.1", "--peer", "10.0.0.2"], "needs --gateway-mac"),
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
