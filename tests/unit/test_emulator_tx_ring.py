"""The emulated switch's TX ring (switch/emulator/ports.py), against a kernel played here:
after a send() the kernel leaves in the ring the frames it did not send, and sends them
at the next send(), however late. A frame it refused (ENOBUFS: the link down, the peer's
backlog full) is dropped and counted; frames its send buffer held back (EAGAIN) are sent
at the loop's next round, whether or not the pipeline sends the port anything else.
(tests/switch/test_tx_ring.py shows the kernel doing it, on a veth.)"""

from __future__ import annotations

import errno
import struct

from switch.emulator import ports
from switch.emulator.ports import TP_STATUS_AVAILABLE, TP_STATUS_SEND_REQUEST, RingPort

FS, N = 64, 8
OFF = 32  # TX_DATA_OFF


class Kernel:
    """tpacket_snd over the ring: from its head, send each send-requested frame (skip a
    malformed one, as PACKET_LOSS says), stop at the first that fails."""

    def __init__(self, port: RingPort):
        self.port, self.head, self.sent = port, 0, []
        self.fail: int | None = None  # errno of the next send() (after what `budget` lets through)
        self.budget: int | None = None

    def send(self, data: bytes, flags: int = 0) -> int:
        mm, p = self.port.mm, self.port
        while True:
            off = p.tx_base + self.head * p.frame_size
            status, length = struct.unpack_from("=II", mm, off)
            if status != TP_STATUS_SEND_REQUEST:
                return 0
            if length < 14:  # malformed: skipped
                struct.pack_into("=I", mm, off, TP_STATUS_AVAILABLE)
            elif self.budget == 0 and self.fail is not None:
                e, self.fail, self.budget = self.fail, None, None
                raise OSError(e, "kernel")
            else:
                self.sent.append(bytes(mm[off + OFF : off + OFF + length]))
                struct.pack_into("=I", mm, off, TP_STATUS_AVAILABLE)
                if self.budget is not None:
                    self.budget -= 1
            self.head = (self.head + 1) % p.tx_frames


def ring() -> tuple[RingPort, Kernel]:
    port = RingPort.__new__(RingPort)
    port.dev_port, port.iface = 1, "swp1"
    port.mm = bytearray(FS * 2 * N)
    port.frame_size, port.rx_frames, port.tx_frames, port.tx_base = FS, N, N, FS * N
    port.tx_i = port.tx_pending = port.tx_packets = port.tx_bytes = port.tx_refused = 0
    port.tx_retained = False
    port.sock = kernel = Kernel(port)
    return port, kernel


def frames(port: RingPort, *tags: bytes) -> None:
    for t in tags:
        assert port.send(t.ljust(20, b"."))


def test_frames_the_kernel_refused_are_dropped_and_never_sent_later():
    port, kernel = ring()
    frames(port, b"A", b"B", b"C")
    kernel.fail, kernel.budget = errno.ENOBUFS, 1  # A goes, B fails (C behind it is not tried)
    assert port.flush() is False
    assert [f[:1] for f in kernel.sent] == [b"A"] and port.tx_refused == 2 and not port.tx_retained
    assert port.tx_packets == 1 and port.tx_bytes == 20
    frames(port, b"D")  # the next frame to this port, maybe much later
    assert port.flush() is True
    assert [f[:1] for f in kernel.sent] == [b"A", b"D"] and port.tx_refused == 2


def test_frames_held_back_by_the_send_buffer_go_at_the_next_round():
    port, kernel = ring()
    frames(port, b"A", b"B")
    kernel.fail, kernel.budget = errno.EAGAIN, 1
    assert port.flush() is True
    assert [f[:1] for f in kernel.sent] == [b"A"] and port.tx_retained and port.tx_refused == 0
    # nothing else for this port: the loop's flush sends B anyway
    loop = ports.PortSet.__new__(ports.PortSet)
    loop.ports, loop.drops = {1: port}, ports.DropStats()
    loop._cells = {1: [0] * 8}
    loop.flush()
    assert [f[:1] for f in kernel.sent] == [b"A", b"B"] and not port.tx_retained
    assert loop.drops.counts["tx_error"] == 0 and loop._cells[1][4] == 2


def test_the_loop_counts_what_a_full_ring_flush_dropped():
    port, kernel = ring()
    frames(port, b"A")
    kernel.fail, kernel.budget = errno.ENOBUFS, 0
    port.flush()
    loop = ports.PortSet.__new__(ports.PortSet)
    loop.ports, loop.drops = {1: port}, ports.DropStats()
    loop._cells = {1: [0] * 8}
    loop.flush()
    assert loop.drops.counts["tx_error"] == 1 and port.tx_refused == 0 and loop._cells[1][4] == 0
