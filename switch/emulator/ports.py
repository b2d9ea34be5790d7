"""The switch's ports: AF_PACKET sockets on the switch namespace's interfaces, one per
dev_port (`--port 132=swp1`), and the single-threaded loop that moves frames between
them and the pipeline.

I/O is PACKET_MMAP (TPACKET_V2): the kernel writes received frames into an RX ring
shared with us, and we write frames to send into a TX ring and flush it with one
send() per batch, so the hot loop makes no system call per frame. Frames are handed
to the pipeline as a writable memoryview of their RX ring slot (processed in place)
and copied once into the egress port's TX ring. Our own transmissions are not seen
again (PACKET_IGNORE_OUTGOING); transmission bypasses the qdisc.

`$PORT_UP` is "added and enabled through $PORT, and the interface has carrier"
(IFF_RUNNING). Frames arriving on, or sent to, a port that is not added and enabled
are dropped; so are frames larger than a ring slot, frames the kernel could not put
in a full RX ring, and copies to a dev_port with no interface. Every such drop is
counted by reason in `DropStats` (logged, and written to the stats file), and the
port's `$PORT_STAT` counts what it received (All vs OK) and sent, and, in two fields
of the emulator's own, each loss of the link's carrier (`$LinkDownEvents`, logged too)
and the frames dropped at the port because it was down (`$FramesDroppedPortDown`).

A link delay (`--link-delay-us`, PortSet's `link_delay_us`) holds every frame the
pipeline sends for that long before it goes out, as the propagation delay of a longer
cable would: see PortSet.run.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import logging
import mmap
import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from switch.errors import SwitchError

from .realtime import Realtime
from .schema import PORT_FRAMES_DROPPED_DOWN, PORT_LINK_DOWN_EVENTS
from .tables import TableStore

log = logging.getLogger(__name__)

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
PACKET_LOSS = 14
PACKET_TX_RING = 13
PACKET_QDISC_BYPASS = 20
PACKET_IGNORE_OUTGOING = 23
TPACKET_V2 = 1
ETH_P_ALL = 0x0003

TP_STATUS_KERNEL = 0
TP_STATUS_USER = 0x1
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
TP_STATUS_AVAILABLE = 0
TP_STATUS_SEND_REQUEST = 0x1
TX_DATA_OFF = 32  # TPACKET_ALIGN(sizeof(struct tpacket2_hdr)): where a TX frame's bytes start

SIOCGIFFLAGS = 0x8913
SIOCGIFMTU = 0x8921
IFF_UP = 0x1
IFF_RUNNING = 0x40

_RX_HDR = struct.Struct("=IIIHHIIHH")  # tpacket2_hdr: status len snaplen mac net sec nsec vlan_tci vlan_tpid
_STATUS = struct.Struct("=I")
_TX_HDR = struct.Struct("=II")  # status, len

REASONS = (
    "rx_port_disabled",  # a frame arrived on a port not added/enabled through $PORT
    "rx_ring_overflow",  # the kernel found the RX ring full (the loop fell behind)
    "rx_oversize",  # a frame larger than a ring slot
    "tx_unknown_port",  # the pipeline sent a copy to a dev_port with no interface
    "tx_port_disabled",  # ... or to a port not added/enabled through $PORT
    "tx_link_down",  # ... or to a port whose interface has no carrier (checked every housekeeping round)
    "tx_ring_full",  # the TX ring had no free slot even after a flush
    "tx_error",  # the kernel refused to send (link down, the peer's backlog full): dropped, never sent later
    "internal_error",  # the pipeline raised (logged with its traceback)
    "egress_skip_replica",  # (P4, uncounted there) a WRITE replica for a rid without build_write entry
    "rx_ring_resync",  # the RX ring's next slot stayed empty while later ones filled: the loop moved on (logged)
)
# How long the RX slot the loop reads next may stay the kernel's while epoll says the ring
# has frames: a frame another CPU is still copying in takes microseconds. Longer, the loop
# has lost its place in the ring (seen once: the kernel writing 788 slots behind the
# loop's place while the loop spun on an empty slot for 40 minutes, the switch dark).
RESYNC_AFTER_S = 0.05


def resync_rx(port) -> int:
    """Move `port`'s RX place to the first filled slot after it (the oldest frame the
    kernel wrote, when the loop has lost its place); returns how many slots it moved,
    0 when no slot is filled."""
    n, fs, mm = port.rx_frames, port.frame_size, port.mm
    for k in range(1, n):
        j = (port.rx_i + k) % n
        if _STATUS.unpack_from(mm, j * fs)[0] & TP_STATUS_USER:
            port.rx_i = j
            return k
    return 0


def rx_stuck(port, ready: bool, now: float) -> bool:
    """Whether `port`, which epoll says has frames, has had its next RX slot empty at the
    same place for RESYNC_AFTER_S (then the loop resyncs it)."""
    if ready:
        port.rx_stuck = None
        return False
    if port.rx_stuck is None or port.rx_stuck[0] != port.rx_i:
        port.rx_stuck = (port.rx_i, now)
        return False
    return now - port.rx_stuck[1] >= RESYNC_AFTER_S


class Recirculation(Protocol):
    """A pipeline's recirculation port (switch/emulator/r2p2/pipeline.py)."""

    def recirculate(self, emit: Callable[[int, object], None], budget: int, now: float) -> int: ...

    def next_due(self) -> float | None: ...


class PortError(SwitchError):
    """A port could not be opened (names the dev_port and interface)."""


@dataclass(frozen=True)
class PortSpec:
    dev_port: int
    iface: str
    name: str | None = None  # front-panel name ("1/0"), served by $PORT_STR_INFO and $PORT_HDL_INFO

    @classmethod
    def parse(cls, text: str) -> PortSpec:
        """`132=swp1` -> PortSpec(132, "swp1"); `132=swp1:1/0` also names it 1/0 on the
        front panel (an interface name never holds ':' or '/')."""
        dev, sep, rest = text.partition("=")
        iface, colon, name = rest.partition(":")
        fix = "give DEV_PORT=INTERFACE[:CONN/CHNL], e.g. --port 132=swp1:1/0"
        if not sep or not dev.strip().isdigit() or not iface.strip():
            raise PortError(f"bad port {text!r}", fix=fix)
        conn, slash, chnl = name.partition("/")
        if colon and not (slash and conn.isdigit() and chnl.isdigit()):
            raise PortError(f"bad front-panel name {name!r} in {text!r}", fix=fix)
        dev_port = int(dev)
        if not 0 <= dev_port < 512:
            raise PortError(f"dev_port {dev_port} in {text!r} is not 0..511")
        return cls(dev_port, iface.strip(), f"{int(conn)}/{int(chnl)}" if colon else None)


class DropStats:
    """Drops outside the P4 program's own `events` counter, by reason (see REASONS)."""

    def __init__(self):
        self.counts = dict.fromkeys(REASONS, 0)
        self._logged = dict(self.counts)

    def add(self, reason: str, n: int = 1) -> None:
        self.counts[reason] += n

    def changes(self) -> dict[str, int]:
        """Reasons whose count changed since the last call (for the periodic log line)."""
        out = {r: c - self._logged[r] for r, c in self.counts.items() if c != self._logged[r]}
        self._logged = dict(self.counts)
        return out


def _ifreq(iface: str) -> bytes:
    return struct.pack("16s16x", iface.encode()[:15])


class RingPort:
    """One interface: an AF_PACKET socket with TPACKET_V2 RX and TX rings."""

    def __init__(self, spec: PortSpec, *, rx_frames: int = 2048, tx_frames: int = 512, frame_size: int | None = None):
        self.dev_port, self.iface = spec.dev_port, spec.iface
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except OSError as e:
            raise PortError(
                f"dev_port {self.dev_port}: cannot open a packet socket: {e}", fix="run as root (CAP_NET_RAW)"
            ) from e
        try:
            self.sock.bind((self.iface, 0))
            mtu = struct.unpack_from("=16xi", fcntl.ioctl(self.sock.fileno(), SIOCGIFMTU, _ifreq(self.iface)))[0]
            if frame_size is None:  # a slot holds tpacket2_hdr + sockaddr_ll + padding + the frame
                frame_size = 2048
                while frame_size < mtu + 18 + 128:
                    frame_size *= 2
            s = self.sock
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
            s.setsockopt(SOL_PACKET, PACKET_LOSS, 1)
            s.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            block = max(frame_size, 1 << 16)
            per_block = block // frame_size
            rx_frames = -(-rx_frames // per_block) * per_block
            tx_frames = -(-tx_frames // per_block) * per_block
            s.setsockopt(
                SOL_PACKET, PACKET_RX_RING, struct.pack("IIII", block, rx_frames // per_block, frame_size, rx_frames)
            )
            s.setsockopt(
                SOL_PACKET, PACKET_TX_RING, struct.pack("IIII", block, tx_frames // per_block, frame_size, tx_frames)
            )
            self.mm = mmap.mmap(
                s.fileno(), (rx_frames + tx_frames) * frame_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError as e:
            self.sock.close()
            raise PortError(
                f"dev_port {self.dev_port}: cannot use interface {self.iface!r}: {e}",
                fix="is the interface in this network namespace (ip link show)?",
            ) from e
        s.setblocking(False)
        self.mv = memoryview(self.mm)
        self.frame_size = frame_size
        self.rx_frames, self.tx_frames = rx_frames, tx_frames
        self.tx_base = rx_frames * frame_size
        self.max_tx = frame_size - TX_DATA_OFF
        self.rx_i = 0
        self.rx_stuck: tuple[int, float] | None = None  # (rx_i, since when) while its slot stays empty
        self.tx_i = 0
        self.tx_pending = 0
        self.tx_retained = False  # the kernel left frames queued at the last flush: flush again
        self.tx_refused = 0  # frames the kernel refused, dropped (not yet added to DropStats)
        # counts not yet added to $PORT_STAT (added per batch)
        self.tx_packets = self.tx_bytes = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def carrier(self) -> bool:
        """The interface is up and has carrier (IFF_UP and IFF_RUNNING)."""
        try:
            flags = struct.unpack_from("=16xH", fcntl.ioctl(self.sock.fileno(), SIOCGIFFLAGS, _ifreq(self.iface)))[0]
        except (OSError, ValueError):  # ValueError: the port is closed
            return False
        return bool(flags & IFF_UP and flags & IFF_RUNNING)

    def carrier_downs(self) -> int | None:
        """The kernel's count of this interface's carrier losses (sysfs carrier_down_count),
        or None where it keeps none or the sysfs seen here is another namespace's."""
        base = f"/sys/class/net/{self.iface}"
        try:
            with open(f"{base}/ifindex") as f:
                if int(f.read()) != socket.if_nametoindex(self.iface):
                    return None
            with open(f"{base}/carrier_down_count") as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def kernel_drops(self) -> int:
        """Frames the kernel dropped for want of a free RX slot since the last call."""
        try:
            _packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        except OSError:
            return 0
        return drops

    # ------------------------------------------------------------ transmit

    def send(self, data) -> bool:
        """Queue one frame in the TX ring (sent at the next flush); False if the ring is full."""
        n = len(data)
        off = self.tx_base + self.tx_i * self.frame_size
        mm = self.mm
        if _STATUS.unpack_from(mm, off)[0] != TP_STATUS_AVAILABLE:
            self.flush()
            if _STATUS.unpack_from(mm, off)[0] != TP_STATUS_AVAILABLE:
                return False
        start = off + TX_DATA_OFF
        mm[start : start + n] = data
        _TX_HDR.pack_into(mm, off, TP_STATUS_SEND_REQUEST, n)
        i = self.tx_i + 1
        self.tx_i = 0 if i == self.tx_frames else i
        self.tx_pending += 1
        self.tx_bytes += n
        return True

    def flush(self) -> bool:
        """Hand every queued frame to the kernel; False if it refused some (dropped, and
        counted in `tx_refused`).

        The kernel does not drop a frame it could not transmit (the link down, the peer's
        backlog full: ENOBUFS): it puts the frame back in the ring, as it does with the
        frames its socket's send buffer held back (EAGAIN, or a short send), and sends
        them at the next send() on this socket, however late. For a port that then goes
        quiet that is the next frame the pipeline sends it, maybe a later point's, after
        the switch's counters were reset: the worker got a DISPATCH the switch had counted
        in another point (the RocksDB run test saw 793 DISPATCHes received and 789 sent).
        So a refused frame is dropped here, as the switch drops a frame for a port that is
        down; a held-back one stays queued and `tx_retained` has the loop flush again next
        round, whether or not anything else is sent to this port."""
        if not self.tx_pending and not self.tx_retained:
            return True
        self.tx_packets += self.tx_pending
        self.tx_pending = 0
        self.tx_retained = False
        err = 0
        try:
            self.sock.send(b"", socket.MSG_DONTWAIT)
        except OSError as e:
            err = e.errno or -1
        held = self._held()
        if not held:
            return True
        if err in (0, errno.EAGAIN):  # the send buffer is full: they go at the next round
            self.tx_retained = True
            return True
        mm, n = self.mm, 0
        for off in held:
            length = _TX_HDR.unpack_from(mm, off)[1]
            if length:  # (0: dropped already, waiting for the kernel to skip it)
                n += 1
                self.tx_packets -= 1
                self.tx_bytes -= length
            _TX_HDR.pack_into(mm, off, TP_STATUS_SEND_REQUEST, 0)
        # A frame shorter than its link-layer header is malformed: with PACKET_LOSS the
        # kernel skips it (marks its slot available and moves on), now or, if the
        # interface is down, at the next send().
        try:
            self.sock.send(b"", socket.MSG_DONTWAIT)
        except OSError:
            pass
        self.tx_refused += n
        log.debug("dev_port %d: send: %s; %d frame(s) dropped", self.dev_port, os.strerror(err) if err > 0 else err, n)
        return n == 0

    def _held(self) -> list[int]:
        """The offsets of the TX slots the kernel left queued after a send(): it sends in
        ring order and stops at the first it cannot send, so they are the run of
        send-requested slots that ends at the last one written."""
        mm, fs, base, n = self.mm, self.frame_size, self.tx_base, self.tx_frames
        held = []
        i = self.tx_i
        for _ in range(n):
            i = n - 1 if i == 0 else i - 1
            off = base + i * fs
            if _STATUS.unpack_from(mm, off)[0] != TP_STATUS_SEND_REQUEST:
                break
            held.append(off)
        held.reverse()
        return held

    def close(self) -> None:
        try:
            self.mv.release()
            self.mm.close()
        except (BufferError, ValueError):
            pass
        self.sock.close()


Process = Callable[[int, memoryview, int, Callable], int]


LINK_DELAY_US_MAX = 1e6  # one second: longer is no cable, and the held frames would pile up


class PortSet:
    """The switch's ports and the loop that runs them through a pipeline.

    `link_delay_us`: every frame sent leaves that many microseconds (testbed time) after
    the pipeline emitted it, in emission order."""

    def __init__(self, store: TableStore, specs: Iterable[PortSpec], *, link_delay_us: float = 0.0, **ring_options):
        if not 0 <= link_delay_us <= LINK_DELAY_US_MAX:
            raise PortError(
                f"a link delay of {link_delay_us:g} us is not 0..{LINK_DELAY_US_MAX:.0f}",
                fix="give the delay in microseconds, e.g. --link-delay-us 2000 for 2 ms",
            )
        self.store = store
        self.link_delay = link_delay_us / 1e6  # seconds
        # Frames emitted but not yet due: (due, port, bytes). One constant delay keeps
        # emission order, so the first is always the next due.
        self.held: deque[tuple[float, RingPort, bytes]] = deque()
        self.drops = DropStats()
        self.ports: dict[int, RingPort] = {}
        try:
            for spec in specs:
                if spec.dev_port in self.ports:
                    raise PortError(f"dev_port {spec.dev_port} given twice")
                self.ports[spec.dev_port] = RingPort(spec, **ring_options)
        except BaseException:
            self.close()
            raise
        self._cfg = store.ports.config_getter  # dev_port -> PortConfig | None (the $PORT table)
        self._cells = {d: store.ports.stat_cells(d) for d in self.ports}
        self._down: set[int] = set()  # ports without carrier at the last look (refresh_links)
        self._carrier_downs: dict[int, int | None] = {d: p.carrier_downs() for d, p in self.ports.items()}
        self._down = {d for d, p in self.ports.items() if not p.carrier()}  # not a loss: how it started
        store.ports.up_hook = self.is_up
        # bound once (the hot loop passes it per frame); without a delay, straight to TX
        self._emit = self.emit_later if self.link_delay else self.emit

    def is_up(self, dev_port: int) -> bool:
        port = self.ports.get(dev_port)
        return port is not None and port.carrier()

    def _enabled(self, dev_port: int) -> bool:
        cfg = self._cfg(dev_port)
        return cfg is not None and cfg.enable

    def emit(self, dev_port: int, data) -> None:
        """Send one frame out of `dev_port` (dropped and counted if it cannot go).
        `egress` and RingPort.send inlined: this runs once per frame sent."""
        port = self.ports.get(dev_port)
        if port is None:
            self.drops.add("tx_unknown_port")
            return
        cfg = self._cfg(dev_port)
        if cfg is None or not cfg.enable:
            self.drops.add("tx_port_disabled")
            self._cells[dev_port][PORT_FRAMES_DROPPED_DOWN] += 1
            return
        if dev_port in self._down:
            self.drops.add("tx_link_down")
            self._cells[dev_port][PORT_FRAMES_DROPPED_DOWN] += 1
            return
        n = len(data)
        off = port.tx_base + port.tx_i * port.frame_size
        mm = port.mm
        if _STATUS.unpack_from(mm, off)[0] != TP_STATUS_AVAILABLE:
            port.flush()
            if _STATUS.unpack_from(mm, off)[0] != TP_STATUS_AVAILABLE:
                self.drops.add("tx_ring_full")
                return
        start = off + TX_DATA_OFF
        mm[start : start + n] = data
        _TX_HDR.pack_into(mm, off, TP_STATUS_SEND_REQUEST, n)
        i = port.tx_i + 1
        port.tx_i = 0 if i == port.tx_frames else i
        port.tx_pending += 1
        port.tx_bytes += n

    def egress(self, dev_port: int) -> RingPort | None:
        """The port a frame to `dev_port` leaves by, or None (the drop counted)."""
        port = self.ports.get(dev_port)
        if port is None:
            self.drops.add("tx_unknown_port")
            return None
        cfg = self._cfg(dev_port)
        if cfg is None or not cfg.enable:
            self.drops.add("tx_port_disabled")
            self._cells[dev_port][PORT_FRAMES_DROPPED_DOWN] += 1
            return None
        if dev_port in self._down:
            self.drops.add("tx_link_down")
            self._cells[dev_port][PORT_FRAMES_DROPPED_DOWN] += 1
            return None
        return port

    def emit_later(self, dev_port: int, data) -> None:
        """`emit` with the link delay: the frame is held (copied: its RX slot is reused)
        until it is due, then released by `release`. The port is checked now, when the
        switch hands the frame to its port: the delay is the cable's, after the port, so
        a frame the port cannot take is dropped and counted where it would be without a
        delay; a frame in flight when its link goes down is lost on the cable, unseen."""
        port = self.egress(dev_port)
        if port is not None:
            self.held.append((time.monotonic() + self.link_delay, port, bytes(data)))

    def release(self, now: float) -> int:
        """Send every held frame due by `now` (monotonic seconds); returns how many."""
        held = self.held
        n = 0
        while held and held[0][0] <= now:
            _due, port, data = held.popleft()
            if not port.send(data):
                self.drops.add("tx_ring_full")
            n += 1
        return n

    def _deliver(
        self,
        port: RingPort,
        off: int,
        status: int,
        length: int,
        snap: int,
        mac: int,
        tci: int,
        tpid: int,
        process: Process,
        enabled: bool,
    ) -> bool:
        """One received frame (ring slot at `off`) through `process`; the slot is released.
        Returns whether the frame was accepted (for $PORT_STAT's OK counters)."""
        ok = False
        if not enabled:
            self.drops.add("rx_port_disabled")
            self._cells[port.dev_port][PORT_FRAMES_DROPPED_DOWN] += 1
        elif snap < length:
            self.drops.add("rx_oversize")
        else:
            ok = True
            start = off + mac
            mv = port.mv
            if status & TP_STATUS_VLAN_VALID:  # the kernel took the tag off: put it back
                frame = bytearray(mv[start : start + 12])
                frame += struct.pack("!HH", tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100, tci)
                frame += mv[start + 12 : start + snap]
                snap += 4
            else:
                frame = mv[start : start + snap]
            try:
                process(port.dev_port, frame, snap, self._emit)
            except Exception:  # noqa: BLE001 - a frame must never stop the switch
                self._failed(port, frame)
        _STATUS.pack_into(port.mm, off, TP_STATUS_KERNEL)
        return ok

    def _count_rx(self, port: RingPort, frames: int, nbytes: int, ok: int, ok_bytes: int) -> None:
        c = self._cells[port.dev_port]
        c[0] += ok
        c[1] += frames
        c[2] += ok_bytes
        c[3] += nbytes

    def poll_port(self, port: RingPort, process: Process, budget: int) -> int:
        """Run up to `budget` received frames of `port` through `process`, in arrival
        order; returns how many. (The hot loop: _deliver inlined for the common case.)"""
        mm, mv, fs, nframes = port.mm, port.mv, port.frame_size, port.rx_frames
        unpack, release, emit = _RX_HDR.unpack_from, _STATUS.pack_into, self._emit
        dev_port = port.dev_port
        i = port.rx_i
        done = nbytes = bad = bad_bytes = 0
        enabled = self._enabled(dev_port)
        while done < budget:
            off = i * fs
            status, length, snap, mac, _net, _s, _ns, tci, tpid = unpack(mm, off)
            if not status & TP_STATUS_USER:
                break
            done += 1
            nbytes += length
            if enabled and snap == length and not status & TP_STATUS_VLAN_VALID:
                start = off + mac
                try:
                    process(dev_port, mv[start : start + snap], snap, emit)
                except Exception:  # noqa: BLE001 - a frame must never stop the switch
                    self._failed(port, mv[start : start + snap])
                release(mm, off, TP_STATUS_KERNEL)
            elif not self._deliver(port, off, status, length, snap, mac, tci, tpid, process, enabled):
                bad += 1
                bad_bytes += length
            i += 1
            if i == nframes:
                i = 0
        port.rx_i = i
        if done:
            self._count_rx(port, done, nbytes, done - bad, nbytes - bad_bytes)
        return done

    def _resync(self, port: RingPort) -> None:
        at = port.rx_i
        moved = resync_rx(port)
        port.rx_stuck = None
        if moved:
            self.drops.add("rx_ring_resync")
            log.warning(
                "dev_port %d (%s): RX slot %d stayed empty for %.0f ms while later slots filled; "
                "reading on from slot %d (%d slots on)",
                port.dev_port, port.iface, at, RESYNC_AFTER_S * 1000, port.rx_i, moved,
            )  # fmt: skip

    def _failed(self, port: RingPort, frame) -> None:
        self.drops.add("internal_error")
        if self.drops.counts["internal_error"] <= 10:
            log.exception(
                "dev_port %d: the pipeline failed on a %d-byte frame %s",
                port.dev_port,
                len(frame),
                bytes(frame[:64]).hex(),
            )

    def poll_merged(self, ports: list[RingPort], process: Process, budget: int) -> int:
        """Several ports have frames: take them in the order the kernel received them
        (ring timestamps), as a switch would, up to `budget` frames per port."""
        unpack, deliver = _RX_HDR.unpack_from, self._deliver
        enabled = {p.dev_port: self._enabled(p.dev_port) for p in ports}
        taken = dict.fromkeys(ports, 0)
        counts = {p: [0, 0, 0, 0] for p in ports}
        done = 0
        while True:
            best = best_ts = best_hdr = None
            for p in ports:
                if taken[p] >= budget:
                    continue
                off = p.rx_i * p.frame_size
                h = unpack(p.mm, off)
                if not h[0] & TP_STATUS_USER:
                    continue
                ts = (h[5], h[6])
                if best is None or ts < best_ts:
                    best, best_ts, best_hdr = p, ts, h
            if best is None:
                break
            status, length, snap, mac, _net, _s, _ns, tci, tpid = best_hdr
            c = counts[best]
            c[0] += 1
            c[1] += length
            if deliver(
                best, best.rx_i * best.frame_size, status, length, snap, mac, tci, tpid, process, enabled[best.dev_port]
            ):
                c[2] += 1
                c[3] += length
            best.rx_i = (best.rx_i + 1) % best.rx_frames
            taken[best] += 1
            done += 1
        for p, (frames, nbytes, ok, ok_bytes) in counts.items():
            if frames:
                self._count_rx(p, frames, nbytes, ok, ok_bytes)
        return done

    def _ready(self, port: RingPort) -> bool:
        return bool(_STATUS.unpack_from(port.mm, port.rx_i * port.frame_size)[0] & TP_STATUS_USER)

    def flush(self) -> None:
        for port in self.ports.values():
            if port.tx_pending or port.tx_retained:
                port.flush()
            if port.tx_refused:  # (also from the flushes of a full ring in emit and send)
                self.drops.add("tx_error", port.tx_refused)
                port.tx_refused = 0
            if port.tx_packets:
                c = self._cells[port.dev_port]
                c[4] += port.tx_packets
                c[5] += port.tx_packets
                c[6] += port.tx_bytes
                c[7] += port.tx_bytes
                port.tx_packets = port.tx_bytes = 0

    def refresh_links(self) -> None:
        """Which ports have no carrier now (one ioctl per port; done every housekeeping
        round), and how often each lost it since the last look: the kernel's count where
        there is one (it also sees a flap shorter than a round), else up -> down seen here."""
        down = {d for d, p in self.ports.items() if not p.carrier()}
        for d, p in self.ports.items():
            before, now = self._carrier_downs[d], p.carrier_downs()
            if before is not None and now is not None:
                lost = max(0, now - before)
            else:
                lost = int(d in down and d not in self._down)
            self._carrier_downs[d] = now
            if lost:
                self._cells[d][PORT_LINK_DOWN_EVENTS] += lost
                log.warning("dev_port %d (%s): link down (%d carrier loss(es))", d, p.iface, lost)
            if d in self._down and d not in down:
                log.warning("dev_port %d (%s): link up", d, p.iface)
        self._down = down

    def collect_kernel_drops(self) -> None:
        for port in self.ports.values():
            n = port.kernel_drops()
            if n:
                self.drops.add("rx_ring_overflow", n)
                c = self._cells[port.dev_port]
                c[1] += n

    def run(
        self,
        process: Process,
        should_stop: Callable[[], bool],
        *,
        budget: int = 64,
        idle_timeout: float = 0.1,
        housekeeping: float = 0.25,
        on_housekeeping: Callable[[], None] | None = None,
        recirculation: Recirculation | None = None,
        realtime: Realtime | None = None,
    ) -> None:
        """The hot loop: drain every port's RX ring (at most `budget` frames per port per
        round), flush TX, and sleep in epoll when nothing arrived. Every `housekeeping`
        seconds, collect the kernel's RX drops, look at the links' carrier and call
        `on_housekeeping`.

        With a link delay, each round also sends the held frames that are due, and an
        idle loop sleeps only until the next one is (never spins): an Alarm (a timerfd in
        the epoll set) wakes it then to the microsecond, where epoll's own timeout would
        round up to whole milliseconds. Frames still held when the loop stops are not sent.

        `recirculation`, for a program that recirculates (its pipeline has `recirculate`
        and `next_due`): each round, after the arrivals, the frames due in the pipe's
        recirculation port run again, and an idle loop sleeps only until the next is due.

        `realtime` (realtime.py) is told of every round that moved frames and every
        sleep: it runs the loop at its real-time priority only while frames flow, and
        bounds how long the loop runs without sleeping."""
        ep = select.epoll()
        ports = list(self.ports.values())
        for p in ports:
            ep.register(p.fileno(), select.EPOLLIN)
        alarm = Alarm.open() if (self.link_delay or recirculation is not None) else None
        if alarm is not None:
            ep.register(alarm.fd, select.EPOLLIN)
        poll_port, poll_merged, flush, ready_ = self.poll_port, self.poll_merged, self.flush, self._ready
        by_fd = {p.fileno(): p for p in ports}
        held, release, monotonic = self.held, self.release, time.monotonic
        next_chores = monotonic() + housekeeping
        try:
            while not should_stop():
                ready = [p for p in ports if ready_(p)]
                if len(ready) == 1:
                    busy = poll_port(ready[0], process, budget)
                elif ready:
                    busy = poll_merged(ready, process, budget)
                else:
                    busy = 0
                if recirculation is not None:
                    busy += recirculation.recirculate(self._emit, budget, monotonic())
                if held:  # (empty, and so one test a round, without a link delay)
                    release(monotonic())
                flush()
                if not busy:
                    due = held[0][0] if held else None
                    if recirculation is not None and (r := recirculation.next_due()) is not None:
                        due = r if due is None else min(due, r)
                    timeout = idle_timeout
                    if due is not None:
                        # the alarm wakes the loop at `due`; the timeout (1 ms later at most,
                        # by its rounding) is only the fallback without one
                        timeout = min(timeout, max(0.0, due - monotonic()))
                        if alarm is not None and timeout > 0:
                            alarm.arm(due)
                    events = ep.poll(timeout)
                    if alarm is not None and alarm.armed is not None and any(fd == alarm.fd for fd, _ in events):
                        alarm.clear()  # it fired: read it, or epoll reports it forever
                    for fd, _ in events:  # readable, and yet its next slot is empty?
                        p = by_fd.get(fd)
                        if p is not None and rx_stuck(p, ready_(p), monotonic()):
                            self._resync(p)
                now = monotonic()
                if realtime is not None:
                    if busy:
                        realtime.busy(now)
                    else:
                        realtime.slept(now)
                if now >= next_chores:
                    next_chores = now + housekeeping
                    if realtime is not None:
                        realtime.housekeeping(now)
                    self.collect_kernel_drops()
                    self.refresh_links()
                    if on_housekeeping:
                        on_housekeeping()
        finally:
            if realtime is not None:
                realtime.leave()
            ep.close()
            if alarm is not None:
                alarm.close()
            self.flush()
            self.collect_kernel_drops()

    def close(self) -> None:
        for p in self.ports.values():
            p.close()
        self.ports = {}
        if self.store.ports.up_hook == self.is_up:
            self.store.ports.up_hook = None

    def stats_json(self) -> str:
        return json.dumps(
            {
                "drops": self.drops.counts,
                "ports": {d: self.store.ports.stats(d) if self.store.ports.get(d) else None for d in self.ports},
            },
            indent=1,
        )


class Alarm:
    """A one-shot CLOCK_MONOTONIC timerfd in the loop's epoll set: it wakes the loop at a
    deadline to the microsecond, where epoll's own timeout is whole milliseconds rounded
    up (CPython). Without it, R2P2's recirculation pass, held 1 ms at k = 1000, took 1 to
    2 ms (1.4 on average), and a frame held 300 us came back after 1.4 to 1.7 ms.
    Python 3.11's os has no timerfd, so libc's is called through ctypes; `Alarm.open()`
    is None where there is none (the loop then falls back to epoll's timeout)."""

    CLOCK_MONOTONIC = 1  # time.monotonic()'s clock on Linux
    TFD_NONBLOCK, TFD_CLOEXEC, TFD_TIMER_ABSTIME = os.O_NONBLOCK, os.O_CLOEXEC, 1

    class _Itimerspec(ctypes.Structure):  # two struct timespec: {tv_sec, tv_nsec} each
        _fields_ = [("it_interval", ctypes.c_long * 2), ("it_value", ctypes.c_long * 2)]

    def __init__(self, fd: int, settime) -> None:
        self.fd, self._settime = fd, settime
        self._spec = self._Itimerspec()
        self.armed: float | None = None

    @classmethod
    def open(cls) -> Alarm | None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            create, settime = libc.timerfd_create, libc.timerfd_settime
        except (OSError, AttributeError):
            return None
        fd = create(cls.CLOCK_MONOTONIC, cls.TFD_NONBLOCK | cls.TFD_CLOEXEC)
        return cls(fd, settime) if fd >= 0 else None

    def arm(self, deadline: float) -> None:
        """Fire once at `deadline` (time.monotonic() seconds; a past one fires at once)."""
        if deadline == self.armed:
            return
        sec = int(deadline)
        nsec = max(1, int((deadline - sec) * 1e9))  # all zero would disarm it
        self._spec.it_value[0], self._spec.it_value[1] = sec, nsec
        if self._settime(self.fd, self.TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")
        self.armed = deadline

    def clear(self) -> None:
        """After it fired: read its count, so epoll stops reporting it."""
        self.armed = None
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)


def write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
