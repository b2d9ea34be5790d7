"""A BFRuntime error through the SSH tunnel (orchestrator/bfrt_tunnel.py) says the tunnel
is down, even when the client saw its connection end before the SSH transport noticed
(the race behind a flaky test_bastion: 'Stream removed' with no word of the tunnel)."""

from __future__ import annotations

from orchestrator.bfrt_tunnel import Dial
from orchestrator.errors import HostResult, RemoteError
from switch.errors import SwitchError


class _Tunnel:
    def __init__(self, down: str | None):
        self.down, self.error, self.probes = down, None, 0

    def __str__(self) -> str:
        return "the SSH tunnel 127.0.0.1:5 -> sw0 -> 10.0.0.1:50052"

    def trouble(self) -> str | None:
        return self.error

    def probe(self) -> None:
        self.probes += 1
        if self.down:
            self.error = self.down  # as Tunnel.channel records a forward that failed
            raise RemoteError(HostResult("sw0", "forward", None, error=self.down))


def _dial(tunnel: _Tunnel) -> Dial:
    d = Dial.__new__(Dial)
    d.switch, d.bfrt, d.tunnel, d.address, d._held = "sw0", "10.0.0.1:50052", tunnel, "127.0.0.1:5", False
    return d


def test_a_lost_connection_asks_the_tunnel_when_the_transport_has_not_noticed_yet():
    tunnel = _Tunnel(down="the SSH connection to sw0 is closed")
    e = _dial(tunnel).explained(SwitchError("read of $PORT failed: UNAVAILABLE: Stream removed (Socket closed)"))
    assert tunnel.probes == 1
    assert "switch sw0" in e.message and "SSH tunnel 127.0.0.1:" in e.message and "which is down" in e.message
    assert "the SSH connection to sw0 is closed" in e.message and "Stream removed" in e.message


def test_a_working_tunnel_and_other_errors_are_left_as_they_are():
    up = _Tunnel(down=None)
    e = _dial(up).explained(SwitchError("read of $PORT failed: UNAVAILABLE: Stream removed (Socket closed)"))
    assert up.probes == 1 and "which is down" not in e.message  # the tunnel works: the switch's own trouble
    down = _Tunnel(down="closed")
    e = _dial(down).explained(SwitchError("write of x failed: INVALID_ARGUMENT: no such field"))
    assert down.probes == 0 and "which is down" not in e.message  # not a lost connection: no probe
