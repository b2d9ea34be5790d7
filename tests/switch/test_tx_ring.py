"""The emulator's TX ring (switch/emulator/ports.py) on a real veth: a frame the kernel
could not transmit is dropped and counted, never sent later.

The kernel keeps such a frame in the ring and sends it at the next send() on the
socket. For a port that then goes quiet that is whenever the pipeline next sends it a
frame: maybe a later point's, after the switch's counters were reset, so that a worker
counted a DISPATCH the switch had counted in another point (the RocksDB run test: 793
DISPATCHes received, 789 sent).
"""

from __future__ import annotations

import subprocess
import time

import pytest

from switch.emulator.ports import PortSet, PortSpec
from switch.emulator.rain import make_store
from tests.netpeer import NetnsPair, RawPeer, in_netns, mac_bytes

pytestmark = pytest.mark.integration  # root: network namespaces and packet sockets

DEV_PORT = 1


@pytest.fixture
def pair():
    with NetnsPair("rmtx") as p:
        yield p


def port_set(pair: NetnsPair) -> PortSet:
    """A PortSet on side a's interface, its socket opened inside side a's namespace."""

    def make() -> PortSet:
        store = make_store()
        store.ports.add(DEV_PORT, "BF_SPEED_100G", "BF_FEC_TYP_NONE", enable=True)
        return PortSet(store, [PortSpec(DEV_PORT, pair.a.iface)])

    return in_netns(pair.a.netns, make)


def link(pair: NetnsPair, state: str) -> None:
    subprocess.run(["ip", "netns", "exec", pair.b.netns, "ip", "link", "set", pair.b.iface, state], check=True)


def tagged(pair: NetnsPair, tag: bytes) -> bytes:
    return mac_bytes(pair.b.mac) + mac_bytes(pair.a.mac) + b"\x88\xb5" + tag.ljust(46, b".")


def test_a_frame_the_kernel_could_not_send_is_dropped_not_sent_later(pair):
    ports = port_set(pair)
    try:
        # The peer goes down; the switch has not looked at its links since (it does every
        # housekeeping round), so the pipeline's frames still go into the port's ring.
        link(pair, "down")
        ports.emit(DEV_PORT, tagged(pair, b"OLD-1"))
        ports.emit(DEV_PORT, tagged(pair, b"OLD-2"))
        ports.flush()
        link(pair, "up")
        deadline = time.monotonic() + 5
        while not ports.is_up(DEV_PORT) and time.monotonic() < deadline:
            time.sleep(0.02)
        ports.refresh_links()
        peer = RawPeer(pair.b)
        try:
            assert peer.recv_until(lambda f: True, 0.3) == []
            # the next frame to the port (another point's, say) goes out alone
            ports.emit(DEV_PORT, tagged(pair, b"NEW-1"))
            ports.flush()
            got = [f[14:19] for _, f in peer.recv_until(lambda f: f[12:14] == b"\x88\xb5", 0.5)]
        finally:
            peer.close()
        assert got == [b"NEW-1"]
        assert ports.drops.counts["tx_error"] == 2, ports.drops.counts
        assert not ports.ports[DEV_PORT].tx_retained
        # $PORT_STAT counts what left: the new frame, not the two dropped ones
        assert ports.store.ports.stat_cells(DEV_PORT)[4] == 1
    finally:
        ports.close()
