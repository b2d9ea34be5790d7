"""Test plumbing for data-path tests: a pair of network namespaces joined by a veth,
and a raw-socket peer inside one of them that sends and receives whole frames.

Only namespaces this module creates are used, and nothing in them has a route out.
Frames are built with `frame()` (Ethernet/IPv4/UDP around a payload) or scapy.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass
class Side:
    netns: str
    iface: str
    mac: str
    ip: str


class NetnsPair:
    """Two namespaces `<tag>-a` and `<tag>-b`, each with a veth end named `dp0` (no IP).

    Side a is where the program under test runs (its DPDK vdev is
    net_af_packet0,iface=dp0); side b hosts the Python peer.
    """

    def __init__(
        self,
        tag: str,
        mac_a: str = "02:52:4d:aa:00:01",
        mac_b: str = "02:52:4d:aa:00:02",
        ip_a: str = "10.81.0.1",
        ip_b: str = "10.81.0.2",
    ):
        self.tag = tag
        self.a = Side(f"{tag}-a", "dp0", mac_a, ip_a)
        self.b = Side(f"{tag}-b", "dp0", mac_b, ip_b)

    def __enter__(self) -> NetnsPair:
        self.close()
        for s in (self.a, self.b):
            _sh("ip", "netns", "add", s.netns)
            _sh(
                "ip",
                "netns",
                "exec",
                s.netns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            )
            _sh("ip", "netns", "exec", s.netns, "ip", "link", "set", "lo", "up")
        tmp_a, tmp_b = f"{self.tag}xa"[:15], f"{self.tag}xb"[:15]
        _sh("ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
        for s, tmp in ((self.a, tmp_a), (self.b, tmp_b)):
            _sh("ip", "link", "set", tmp, "netns", s.netns)
            _sh("ip", "netns", "exec", s.netns, "ip", "link", "set", tmp, "name", s.iface)
            _sh("ip", "netns", "exec", s.netns, "ip", "link", "set", s.iface, "address", s.mac)
            subprocess.run(["ip", "netns", "exec", s.netns, "ethtool", "-K", s.iface, "tx", "off"], capture_output=True)
            _sh("ip", "netns", "exec", s.netns, "ip", "link", "set", s.iface, "up")
        return self

    def close(self) -> None:
        for s in (self.a, self.b):
            r = subprocess.run(["ip", "netns", "pids", s.netns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", s.netns], capture_output=True)

    def __exit__(self, *exc) -> None:
        self.close()


def enter_netns(netns: str) -> None:
    """Move the calling thread (only it: the test's other threads stay) into `netns`."""
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({netns})")
    finally:
        os.close(fd)


def in_netns(netns: str, fn):
    """fn() run in a short-lived thread inside `netns`; its result (sockets it made stay
    in that namespace), or its exception raised here."""
    out: dict = {}

    def inner() -> None:
        try:
            enter_netns(netns)
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            out["err"] = e

    t = threading.Thread(target=inner)
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    return out["value"]


def netns_socket(netns: str, family: int, type_: int, proto: int) -> socket.socket:
    """A socket created inside `netns`."""
    return in_netns(netns, lambda: socket.socket(family, type_, proto))


class RawPeer:
    """Sends and receives whole Ethernet frames on an interface inside a namespace."""

    def __init__(self, side: Side):
        self.side = side
        self.sock = netns_socket(side.netns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((side.iface, 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def recv(self, timeout: float = 1.0) -> tuple[int, bytes] | None:
        """(receive time in CLOCK_MONOTONIC ns, frame), or None after `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data, addr = self.sock.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING:  # skip our own transmissions
                    return time.monotonic_ns(), data
        except (TimeoutError, BlockingIOError):
            return None

    def recv_until(self, pred, timeout: float) -> list[tuple[int, bytes]]:
        """Frames matching pred(frame) until `timeout` seconds pass."""
        out = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            got = self.recv(min(left, 0.2))
            if got and pred(got[1]):
                out.append(got)
        return out

    def close(self) -> None:
        self.sock.close()


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def ip_bytes(ip: str) -> bytes:
    return socket.inet_aton(ip)


def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(src: Side, dst: Side, payload: bytes, sport: int, dport: int) -> bytes:
    """Ethernet/IPv4/UDP frame from src to dst (UDP checksum 0, IP checksum set)."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, ip_bytes(src.ip), ip_bytes(dst.ip))
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    return mac_bytes(dst.mac) + mac_bytes(src.mac) + b"\x08\x00" + ip + udp


def parse_udp(fr: bytes) -> tuple[int, int, bytes] | None:
    """(sport, dport, payload) of an Ethernet/IPv4/UDP frame, else None."""
    if len(fr) < 42 or fr[12:14] != b"\x08\x00" or fr[23] != 17:
        return None
    ihl = (fr[14] & 0x0F) * 4
    sport, dport, ulen = struct.unpack_from("!HHH", fr, 14 + ihl)
    return sport, dport, fr[14 + ihl + 8 : 14 + ihl + ulen]
