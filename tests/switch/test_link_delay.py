"""The emulator's link delay (PortSet's `link_delay_us`, `--link-delay-us`): every frame
the switch sends leaves that long after the pipeline emitted it, in order; without a
delay frames go straight out as before.

The switch here is the emulator's own port loop in a thread (tests/switch/echo_switch.py).
"""

from __future__ import annotations

import statistics

import pytest

from switch.emulator.realtime import Realtime
from switch.emulator.schema import PORT_FRAMES_DROPPED_DOWN
from tests.netpeer import NetnsPair
from tests.switch.echo_switch import DEV_PORT, EchoSwitch, round_trips

pytestmark = pytest.mark.integration  # root: network namespaces and packet sockets

DELAY_US = 20_000.0  # 20 ms: far above this machine's scheduling noise, far below a test's patience


@pytest.fixture(scope="module")
def pair():
    with NetnsPair("rmld") as p:
        yield p


def test_frames_leave_after_the_delay_in_order(pair):
    with EchoSwitch(pair, DELAY_US) as sw:
        got = round_trips(pair, 20, 0.002, DELAY_US / 1e6)  # 2 ms apart: ten frames held at once
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
    # The data plane runs at a real-time priority while frames flow, as the emulator's
    # does (--realtime): on a busy machine a thread of the normal class wakes late.
    delay = 0.0003
    with EchoSwitch(pair, delay * 1e6, realtime=Realtime(20)):
        got = round_trips(pair, 20, 0.005)  # 5 ms apart: one frame held at a time
    print("round trips (ms):", [round(1e3 * s, 3) for _, s in got])
    assert len(got) == 20 and all(s >= delay for _, s in got)
    assert statistics.median(s for _, s in got) < 0.0009


def test_without_a_delay_frames_go_straight_out(pair):
    with EchoSwitch(pair, 0.0) as sw:
        got = round_trips(pair, 20, 0.002)
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
