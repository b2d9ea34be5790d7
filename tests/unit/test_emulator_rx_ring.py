"""The emulated switch's RX ring (switch/emulator/ports.py): when the slot the loop reads
next stays empty while later slots fill, the loop has lost its place in the ring (seen
once: 40 minutes of a dark switch, epoll saying readable, the loop spinning on an empty
slot). It then reads on from the oldest filled slot, and says so."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from switch.emulator import ports
from switch.emulator.ports import RESYNC_AFTER_S, TP_STATUS_USER, resync_rx, rx_stuck

FS, N = 64, 16


def _ring(filled: list[int], rx_i: int) -> SimpleNamespace:
    mm = bytearray(FS * N)
    for i in filled:
        struct.pack_into("=I", mm, i * FS, TP_STATUS_USER)
    return SimpleNamespace(mm=mm, frame_size=FS, rx_frames=N, rx_i=rx_i, rx_stuck=None)


def test_the_loop_reads_on_from_the_oldest_filled_slot():
    # the kernel wrote 12..15 and 0..2 (its place: 3); the loop waits at 5, which stays empty
    port = _ring([12, 13, 14, 15, 0, 1, 2], rx_i=5)
    assert resync_rx(port) == 7 and port.rx_i == 12


def test_an_empty_ring_is_left_alone():
    port = _ring([], rx_i=5)
    assert resync_rx(port) == 0 and port.rx_i == 5


def test_a_slot_is_stuck_only_after_it_stayed_empty_at_the_same_place():
    port = _ring([9], rx_i=8)
    assert not rx_stuck(port, ready=False, now=10.0)  # first seen: a frame may be in flight
    assert not rx_stuck(port, ready=False, now=10.0 + RESYNC_AFTER_S / 2)
    assert rx_stuck(port, ready=False, now=10.0 + RESYNC_AFTER_S)
    port.rx_i = 9  # the loop moved on in between: the clock starts again
    assert not rx_stuck(port, ready=False, now=10.0 + 2 * RESYNC_AFTER_S)
    assert not rx_stuck(port, ready=True, now=20.0) and port.rx_stuck is None


def test_a_resync_is_counted_and_logged(caplog):
    loop = ports.PortSet.__new__(ports.PortSet)  # only its drop counter is used
    loop.drops = ports.DropStats()
    port = _ring([3], rx_i=1)
    port.dev_port, port.iface = 132, "swp1"
    with caplog.at_level("WARNING", logger=ports.log.name):
        loop._resync(port)
    assert port.rx_i == 3 and loop.drops.counts["rx_ring_resync"] == 1
    assert "dev_port 132 (swp1): RX slot 1 stayed empty" in caplog.text and "slot 3 (2 slots on)" in caplog.text
