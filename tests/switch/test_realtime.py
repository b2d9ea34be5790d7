"""The software switch's data plane at a real-time priority (switch/emulator/realtime.py):
only while frames flow, and never long without a sleep. On a testbed whose cores are
shared, a real-time thread that never sleeps holds its core against everything else."""

from __future__ import annotations

import os
import threading
import time

import pytest

from switch.emulator.realtime import Realtime
from tests.netpeer import NetnsPair
from tests.poll import until
from tests.switch.echo_switch import EchoSwitch, round_trips

pytestmark = pytest.mark.integration  # root: real-time priorities, namespaces, packet sockets


@pytest.fixture(scope="module")
def pair():
    with NetnsPair("rmrt") as p:
        yield p


def test_the_data_plane_is_real_time_only_while_frames_flow(pair):
    rt = Realtime(20, idle_s=0.3)
    with EchoSwitch(pair, 0.0, realtime=rt) as sw:
        tid = sw.thread.native_id
        assert os.sched_getscheduler(tid) == os.SCHED_OTHER, "no frame yet: the normal class"
        got = round_trips(pair, 20, 0.002)
        assert len(got) == 20
        assert rt.on and os.sched_getscheduler(tid) == os.SCHED_FIFO, "frames flow: real-time"
        assert os.sched_getparam(tid).sched_priority == 20
        assert until(lambda: not rt.on, timeout=3), "the loop leaves real-time 0.3 s after its last frame"
        assert os.sched_getscheduler(tid) == os.SCHED_OTHER
        got = round_trips(pair, 5, 0.002)  # and takes it again for the next frames
        assert len(got) == 5 and rt.on
    assert rt.error is None and not rt.on, "the loop's end leaves real-time"


def test_a_busy_real_time_loop_sleeps_after_each_slice():
    """A loop that always has frames (busy every round) rests rest_s after each slice_s:
    it holds the CPU at most slice / (slice + rest) of the time."""
    rt = Realtime(10, slice_s=0.01, rest_s=0.005)
    out: dict = {}

    def loop() -> None:  # a thread of its own: only it becomes real-time
        t0 = time.monotonic()
        slept = 0.0
        while (now := time.monotonic()) - t0 < 0.3:
            before = rt.rests
            rt.busy(now)
            if rt.rests != before:
                slept += time.monotonic() - now
        out["policy"] = os.sched_getscheduler(0)
        rt.leave()
        out["after"] = os.sched_getscheduler(0)
        out["slept"] = slept

    t = threading.Thread(target=loop)
    t.start()
    t.join(5)
    assert rt.error is None
    assert out["policy"] == os.SCHED_FIFO and out["after"] == os.SCHED_OTHER
    # 0.3 s of slices of 10 ms: about 20 rests of at least 5 ms each
    assert 10 <= rt.rests <= 30, rt.rests
    assert out["slept"] >= rt.rests * 0.005
