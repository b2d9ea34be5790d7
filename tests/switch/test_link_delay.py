"""The emulator's link delay (PortSet's `link_delay_us`, `--link-delay-us`): every frame
the switch sends leaves that long after the pipeline emitted it, in order; without a
delay frames go straight out as before.

The switch here is the emulator's own port loop (ports.py) run in a thread inside one
namespace of a veth pair, with a pipeline that sends each frame back where it came
from; a raw peer in the other namespace sends numbered frames and times their return.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import struct
import threading
import time

import pytest

from switch.emulator.ports import PortSet, PortSpec
from switch.emulator.rain import make_store
from switch.emulator.schema import PORT_FRAMES_DROPPED_DOWN
from tests.netpeer import CLONE_NEWNET, NetnsPair, RawPeer, frame, parse_udp

pytestmark = pytest.mark.integration  # root: network namespaces and packet sockets

DEV_PORT = 1
DELAY_US = 20_000.0  # 20 ms: far above this machine's scheduling noise, far below a test's patience
PORT = 4791 - 1  # any UDP port: the echo does not look


@pytest.fixture(scope="module")
def pair():
    with NetnsPair("rmld") as p:
        yield p


class EchoSwitch:
    """PortSet.run in a thread inside side a's namespace; every frame goes back out of the
    port it came in on, MACs swapped."""

    def __init__(self, pair: NetnsPair, link_delay_us: float):
        self.pair, self.link_delay_us = pair, link_delay_us
        self.ports: PortSet | None = None
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            fd = os.open(f"/run/netns/{self.pair.a.netns}", os.O_RDONLY)
            try:  # this thread only: the test's other threads stay where they are
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            store = make_store()
            store.ports.add(DEV_PORT, "BF_SPEED_100G", "BF_FEC_TYP_NONE", enable=True)
            self.ports = PortSet(store, [PortSpec(DEV_PORT, self.pair.a.iface)], link_delay_us=self.link_delay_us)

            def echo(port, fr, n, emit):
                emit(port, bytes(fr[6:12]) + bytes(fr[0:6]) + bytes(fr[12:n]))
                return 1

            self.ready.set()
            self.ports.run(echo, self.stop.is_set)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e
            self.ready.set()

    def __enter__(self) -> EchoSwitch:
        self.thread.start()
        assert self.ready.wait(10) and self.error is None, self.error
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
        if self.ports is not None:
            self.ports.close()
        assert self.error is None, self.error


def _round_trips(pair: NetnsPair, count: int, gap_s: float) -> list[tuple[int, float]]:
    """Send `count` numbered frames `gap_s` apart; (number, seconds until it came back)
    of each frame that did, in the order they came back (timed by a thread that reads
    them as they come, while the frames are still being sent)."""
    peer = RawPeer(pair.b)
    mine = bytes.fromhex(pair.b.mac.replace(":", ""))
    sent: dict[int, int] = {}
    got: list[tuple[int, float]] = []

    def receive() -> None:
        deadline = time.monotonic() + count * gap_s + 2 + 2 * DELAY_US / 1e6
        while len(got) < count and time.monotonic() < deadline:
            r = peer.recv(0.2)
            if r is None:
                continue
            t, fr = r
            u = parse_udp(fr)
            if u is None or u[1] != PORT or fr[0:6] != mine:
                continue
            (i,) = struct.unpack_from("!I", u[2])
            got.append((i, (t - sent[i]) / 1e9))

    reader = threading.Thread(target=receive)
    try:
        reader.start()
        for i in range(count):
            sent[i] = time.monotonic_ns()
            peer.send(frame(pair.b, pair.a, struct.pack("!I", i) + bytes(28), PORT, PORT))
            time.sleep(gap_s)
        reader.join()
        return got
    finally:
        peer.close()


def test_frames_leave_after_the_delay_in_order(pair):
    with EchoSwitch(pair, DELAY_US) as sw:
        got = _round_trips(pair, 20, 0.002)  # 2 ms apart: ten frames held at once
        assert sw.ports is not None and not sw.ports.held, "every frame went out"
    print("round trips (ms):", [round(1e3 * s, 2) for _, s in got])
    assert [i for i, _ in got] == list(range(20)), "every frame, in the order sent"
    delay = DELAY_US / 1e6
    assert all(s >= delay for _, s in got), "none before the delay"
    # The loop wakes for the next due frame, not at its 100 ms idle timeout: the last
    # frame, which nothing after it wakes the loop for, is back soon after its delay.
    assert got[-1][1] < delay + 0.05
    assert statistics.median(s for _, s in got) < delay + 0.01


def test_a_delay_below_a_millisecond_is_kept_to_the_microsecond(pair):
    # epoll's own timeout is whole milliseconds, rounded up: a frame held 300 us with
    # nothing else to wake the loop would leave after 1 ms or more. The loop's Alarm
    # (a timerfd) wakes it at the frame's due time instead.
    delay = 0.0003
    with EchoSwitch(pair, delay * 1e6):
        got = _round_trips(pair, 20, 0.005)  # 5 ms apart: one frame held at a time
    print("round trips (ms):", [round(1e3 * s, 3) for _, s in got])
    assert len(got) == 20 and all(s >= delay for _, s in got)
    assert statistics.median(s for _, s in got) < 0.0009


def test_without_a_delay_frames_go_straight_out(pair):
    with EchoSwitch(pair, 0.0) as sw:
        got = _round_trips(pair, 20, 0.002)
        assert sw.ports is not None and sw.ports._emit == sw.ports.emit  # the hot path of old
        assert not sw.ports.held
    print("round trips (ms):", [round(1e3 * s, 2) for _, s in got])
    assert [i for i, _ in got] == list(range(20))
    assert statistics.median(s for _, s in got) < DELAY_US / 1e6 / 4


def test_a_frame_the_port_cannot_take_is_dropped_when_emitted(pair):
    """The port is checked when the pipeline emits (the delay is the cable's, after the
    port): counted as without a delay, and nothing is held for it."""
    with EchoSwitch(pair, DELAY_US) as sw:
        ports = sw.ports
        assert ports is not None
        cells = ports.store.ports.stat_cells(DEV_PORT)
        before = cells[PORT_FRAMES_DROPPED_DOWN]
        ports.store.ports.modify(DEV_PORT, enable=False)
        ports.emit_later(DEV_PORT, b"\0" * 60)
        ports.emit_later(99, b"\0" * 60)  # no such port
        assert not ports.held
        assert ports.drops.counts["tx_port_disabled"] == 1 and ports.drops.counts["tx_unknown_port"] == 1
        assert cells[PORT_FRAMES_DROPPED_DOWN] == before + 1
        ports.store.ports.modify(DEV_PORT, enable=True)
