"""The emulator's own port loop (switch/emulator/ports.py) run in a thread inside one
namespace of a veth pair, with a pipeline that sends each frame back where it came
from, and a raw peer in the other namespace that sends numbered frames and times their
return: for tests of the loop itself (link delay, real-time priority)."""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time

from switch.emulator.ports import PortSet, PortSpec
from switch.emulator.rain import make_store
from switch.emulator.realtime import Realtime
from tests.netpeer import NetnsPair, RawPeer, enter_netns, frame, parse_udp

DEV_PORT = 1
PORT = 4791 - 1  # any UDP port: the echo does not look


class EchoSwitch:
    """PortSet.run in a thread inside side a's namespace; every frame goes back out of the
    port it came in on, MACs swapped."""

    def __init__(self, pair: NetnsPair, link_delay_us: float, realtime: Realtime | None = None):
        self.pair, self.link_delay_us, self.realtime = pair, link_delay_us, realtime
        self.ports: PortSet | None = None
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            enter_netns(self.pair.a.netns)  # this thread only: the test's other threads stay
            store = make_store()
            store.ports.add(DEV_PORT, "BF_SPEED_100G", "BF_FEC_TYP_NONE", enable=True)
            self.ports = PortSet(store, [PortSpec(DEV_PORT, self.pair.a.iface)], link_delay_us=self.link_delay_us)

            def echo(port, fr, n, emit):
                emit(port, bytes(fr[6:12]) + bytes(fr[0:6]) + bytes(fr[12:n]))
                return 1

            self.ready.set()
            self.ports.run(echo, self.stop.is_set, realtime=self.realtime)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e
            self.ready.set()

    def __enter__(self) -> EchoSwitch:
        # As the emulator does (switch/emulator/__main__.py): the loop takes the GIL back
        # from another thread of this process (the test's sender and reader, a client an
        # earlier test left) within 0.5 ms rather than 5.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        self.thread.start()
        assert self.ready.wait(10) and self.error is None, self.error
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)
        sys.setswitchinterval(self._switch_interval)
        if self.ports is not None:
            self.ports.close()
        assert self.error is None, self.error


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; also the SCM type of the timestamp


def round_trips(pair: NetnsPair, count: int, gap_s: float, wait_s: float = 0.0) -> list[tuple[int, float]]:
    """Send `count` numbered frames `gap_s` apart; (number, seconds until it came back)
    of each frame that did, in the order they came back (read by a thread as they come,
    while the frames are still being sent). A frame's return is the kernel's receive
    timestamp, not the reading thread's: on a busy machine that thread's wake-up, and
    the GIL it shares with the sender and an echo switch in this process, would be
    measured too."""
    peer = RawPeer(pair.b)
    peer.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    mine = bytes.fromhex(pair.b.mac.replace(":", ""))
    sent: dict[int, int] = {}
    got: list[tuple[int, float]] = []

    def receive() -> None:
        deadline = time.monotonic() + count * gap_s + 2 + 2 * wait_s
        peer.sock.settimeout(0.2)
        while len(got) < count and time.monotonic() < deadline:
            try:
                fr, anc, _, addr = peer.sock.recvmsg(65535, 256)
            except (TimeoutError, BlockingIOError):
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            stamps = [struct.unpack("qq", blob[:16]) for lvl, typ, blob in anc if typ == SO_TIMESTAMPNS]
            t = stamps[0][0] * 1_000_000_000 + stamps[0][1] if stamps else time.time_ns()
            u = parse_udp(fr)
            if u is None or u[1] != PORT or fr[0:6] != mine:
                continue
            (i,) = struct.unpack_from("!I", u[2])
            got.append((i, (t - sent[i]) / 1e9))

    reader = threading.Thread(target=receive)
    try:
        reader.start()
        for i in range(count):
            sent[i] = time.time_ns()  # CLOCK_REALTIME, the kernel's timestamps' clock
            peer.send(frame(pair.b, pair.a, struct.pack("!I", i) + bytes(28), PORT, PORT))
            time.sleep(gap_s)
        reader.join()
        return got
    finally:
        peer.close()
