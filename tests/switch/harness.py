"""A small PTF-style harness: a switch under test with N ports, each wired to a raw
peer, programmed only through BFRuntime.

    with SwitchUnderTest(ports=4) as sw:          # emulator in its own namespace
        sw.bfrt.table("forward").add(...)          # switch.bfrt.Client, bound to "rain"
        sw.send(1, frame)                          # port index 1..N (sw.dev(i) is its dev_port)
        got = sw.expect(2, lambda f: ..., timeout=1.0)
        sw.expect_nothing([1, 3], timeout=0.2)

Layout (all namespaces are created here and deleted on close):

    root ns: <tag>m0 10.83.a.b/30 --- switch ns <tag>-sw: mgmt0 (BFRuntime), swp1..swpN
                                              |  (veth)
                                    peer ns <tag>-h: p1..pN (no IP), one RawPeer each

The same tests can run against tofino-model or hardware: everything they do goes
through `send`, `expect*`, and the BFRuntime client; only this set-up is emulator
specific (`SwitchUnderTest.attach(address, ports)` takes a switch that already runs).
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from switch.bfrt.client import Client
from tests.netpeer import RawPeer, Side

REPO = Path(__file__).resolve().parents[2]
DEV_PORTS = (132, 140, 148, 156, 164, 172, 180, 188)  # Tofino-like dev_port numbers (9 bits)

Match = Callable[[bytes], bool]


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class HarnessError(AssertionError):
    pass


class SwitchUnderTest:
    """The Rain emulator with `ports` ports and a raw peer behind each."""

    def __init__(
        self,
        ports: int = 4,
        *,
        tag: str | None = None,
        program: str = "rain",
        log_dir: Path | None = None,
        keep_logs: bool = bool(os.environ.get("RAINMAKER_KEEP_LOGS")),
    ):
        if not 1 <= ports <= len(DEV_PORTS):
            raise ValueError(f"1..{len(DEV_PORTS)} ports")
        self.external = False  # attach(): a switch this harness did not start
        self._address: str | None = None
        self._devs: dict[int, int] = {}
        self.tag = tag or f"rmp{os.getpid() % 10000}"
        ident = zlib.crc32(self.tag.encode()) % 16000
        self.nports = ports
        self.program = program
        base = 4 * ident
        self.mgmt_host = f"10.83.{base >> 8 & 255}.{(base & 255) + 1}"
        self.mgmt_switch = f"10.83.{base >> 8 & 255}.{(base & 255) + 2}"
        self.sw_ns, self.peer_ns = f"{self.tag}-sw", f"{self.tag}-h"
        self.log_dir = Path(log_dir or f"/tmp/{self.tag}")
        self.keep_logs = keep_logs  # else the emulator's log and stats go with close()
        self.proc: subprocess.Popen | None = None
        self.bfrt: Client | None = None
        self.peers: dict[int, RawPeer] = {}
        self.sides: dict[int, Side] = {}
        self.unexpected: dict[int, list[bytes]] = {}

    # ------------------------------------------------------------ addressing
    def dev(self, i: int) -> int:
        """The dev_port of port index i (1..N)."""
        return self._devs[i] if self.external else DEV_PORTS[i - 1]

    def side(self, i: int) -> Side:
        """The peer behind port i: its namespace, interface, MAC and (notional) IP."""
        return self.sides[i]

    @property
    def address(self) -> str:
        return self._address or f"{self.mgmt_switch}:50052"

    @classmethod
    def attach(cls, address: str, ports: dict[int, tuple[int, Side]], program: str = "rain") -> SwitchUnderTest:
        """A switch that already runs (tofino-model with bf_switchd, or hardware): port
        index i is dev_port `ports[i][0]`, wired to the interface `ports[i][1]` (its
        netns "" for this namespace, e.g. tofino-model's veths). The same tests then run
        unchanged, but for the few emulator-only checks (its drop statistics)."""
        self = cls(ports=len(ports), program=program, keep_logs=True)
        self.external = True
        self._address = address
        self._devs = {i: d for i, (d, _) in ports.items()}
        for i, (_, side) in ports.items():
            self.sides[i] = side
            self.peers[i] = RawPeer(side) if side.netns else _LocalPeer(side)
            self.unexpected[i] = []
        self.bfrt = Client(address, p4_name=program)
        for i in ports:
            try:
                self.bfrt.ports.add(self.dev(i), "100G", "none", enable=True)
            except Exception:  # noqa: BLE001 - already added by whoever set the switch up
                self.bfrt.ports.modify(self.dev(i), enable=True)
        self.wait_ports_up(30)
        return self

    # ------------------------------------------------------------ life cycle
    def __enter__(self) -> SwitchUnderTest:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, timeout: float = 20.0) -> None:
        self._teardown_net()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for ns in (self.sw_ns, self.peer_ns):
            _sh("ip", "netns", "add", ns)
            _sh(
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            )
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        _sh("ip", "route", "replace", "blackhole", "10.64.0.0/10")
        m_root, m_sw = f"{self.tag}m0", f"{self.tag}m1"
        _sh("ip", "link", "add", m_root, "type", "veth", "peer", "name", m_sw)
        _sh("ip", "link", "set", m_sw, "netns", self.sw_ns)
        _sh("ip", "netns", "exec", self.sw_ns, "ip", "link", "set", m_sw, "name", "mgmt0")
        _sh("ip", "netns", "exec", self.sw_ns, "ip", "addr", "add", f"{self.mgmt_switch}/30", "dev", "mgmt0")
        _sh("ip", "netns", "exec", self.sw_ns, "ip", "link", "set", "mgmt0", "up")
        _sh("ip", "addr", "add", f"{self.mgmt_host}/30", "dev", m_root)
        _sh("ip", "link", "set", m_root, "up")
        for i in range(1, self.nports + 1):
            a, b = f"{self.tag}s{i}", f"{self.tag}p{i}"
            _sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            _sh("ip", "link", "set", a, "netns", self.sw_ns)
            _sh("ip", "link", "set", b, "netns", self.peer_ns)
            _sh("ip", "netns", "exec", self.sw_ns, "ip", "link", "set", a, "name", f"swp{i}")
            _sh("ip", "netns", "exec", self.peer_ns, "ip", "link", "set", b, "name", f"p{i}")
            mac = f"02:52:4d:{ident_byte(self.tag)}:00:{i:02x}"
            _sh("ip", "netns", "exec", self.peer_ns, "ip", "link", "set", f"p{i}", "address", mac)
            for ns, ifc in ((self.sw_ns, f"swp{i}"), (self.peer_ns, f"p{i}")):
                _sh("ip", "netns", "exec", ns, "ethtool", "-K", ifc, "tx", "off", check=False)
                _sh("ip", "netns", "exec", ns, "ip", "link", "set", ifc, "up")
            self.sides[i] = Side(self.peer_ns, f"p{i}", mac, f"10.84.{ident_byte(self.tag, int)}.{i}")
            self.peers[i] = RawPeer(self.sides[i])
            self.unexpected[i] = []
        argv = [
            "ip",
            "netns",
            "exec",
            self.sw_ns,
            sys.executable,
            "-m",
            "switch.emulator",
            "--program",
            self.program,
            "--grpc",
            self.address,
            "--log",
            str(self.log_dir / "emulator.log"),
            "--stats",
            str(self.log_dir / "stats.json"),
        ]
        for i in range(1, self.nports + 1):
            argv += ["--port", f"{self.dev(i)}=swp{i}"]
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self._wait_ready(timeout)
        self.bfrt = Client(self.address, p4_name=self.program, connect_timeout=timeout)
        for i in range(1, self.nports + 1):
            self.bfrt.ports.add(self.dev(i), "100G", "none", enable=True)
        self.wait_ports_up(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline()
                if line.strip() == f"{self.program} emulator ready":
                    return
            if self.proc.poll() is not None:
                break
        err = self.proc.stderr.read() if self.proc.poll() is not None else ""
        raise HarnessError(
            f"the emulator did not print ready within {timeout} s (exit {self.proc.poll()}): {line!r} {err[-2000:]}"
        )

    def wait_ports_up(self, timeout: float = 10.0) -> None:
        """Probe $PORT_UP of every port (readiness is probed, never slept for)."""
        deadline = time.monotonic() + timeout
        while True:
            down = [i for i in range(1, self.nports + 1) if not self.bfrt.ports.is_up(self.dev(i))]
            if not down:
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"ports {down} not up after {timeout} s")
            time.sleep(0.05)

    def stop_emulator(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the emulator and wait; returns its exit status."""
        if self.bfrt is not None:
            self.bfrt.close()
            self.bfrt = None
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        rc = self.proc.returncode
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()
        self.proc = None
        return rc

    def close(self) -> None:
        if self.external:
            if self.bfrt is not None:
                self.bfrt.close()
            for p in self.peers.values():
                p.close()
            return
        self.stop_emulator()
        for p in self.peers.values():
            p.close()
        self.peers.clear()
        self._teardown_net()
        if not self.keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.log_dir / "emulator.log").read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _teardown_net(self) -> None:
        for ns in (self.sw_ns, self.peer_ns):
            r = _sh("ip", "netns", "pids", ns, check=False)
            for pid in r.stdout.split():
                if self.proc is None or int(pid) != self.proc.pid:
                    try:
                        os.kill(int(pid), signal.SIGKILL)  # only processes inside our own namespaces
                    except (ProcessLookupError, ValueError):
                        pass
            _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "link", "del", f"{self.tag}m0", check=False)

    # ------------------------------------------------------------ packets
    def send(self, i: int, frame: bytes) -> None:
        self.peers[i].send(frame)

    def expect(self, i: int, match: Match | bytes, timeout: float = 2.0) -> bytes:
        """The first frame out of port i that matches (a predicate, or equal bytes);
        other frames seen meanwhile are kept in `unexpected[i]`. Fails on timeout."""
        pred = match if callable(match) else (lambda f, want=bytes(match): f == want)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            got = self._recv(i, min(left, 0.2))
            if got is None:
                continue
            if pred(got[1]):
                return got[1]
            self.unexpected[i].append(got[1])
        raise HarnessError(
            f"port {i}: no matching frame within {timeout} s "
            f"({len(self.unexpected[i])} other frames: {[f[:64].hex() for f in self.unexpected[i][-3:]]})"
            f"\nemulator log:\n{self.log_tail()}"
        )

    def _recv(self, i: int, timeout: float) -> tuple[int, bytes] | None:
        try:
            return self.peers[i].recv(timeout)
        except OSError as e:  # a packet socket reports a link that went down once (ENETDOWN)
            if e.errno != errno.ENETDOWN:
                raise
            return None

    def expect_all(self, i: int, count: int, match: Match | None = None, timeout: float = 2.0) -> list[bytes]:
        """`count` frames out of port i (those matching), in arrival order."""
        return [self.expect(i, match or (lambda f: True), timeout) for _ in range(count)]

    def expect_nothing(self, ports: Iterable[int], timeout: float = 0.2) -> None:
        """No frame leaves any of `ports` within `timeout` seconds."""
        ports = list(ports)
        deadline = time.monotonic() + timeout
        socks = {self.peers[i].sock: i for i in ports}
        for s in socks:
            s.setblocking(False)
        try:
            while (left := deadline - time.monotonic()) > 0:
                r, _, _ = select.select(list(socks), [], [], left)
                for s in r:
                    try:
                        data, addr = s.recvfrom(65535)
                    except BlockingIOError:
                        continue
                    except OSError as e:
                        if e.errno == errno.ENETDOWN:
                            continue
                        raise
                    if addr[2] != socket.PACKET_OUTGOING:
                        raise HarnessError(f"port {socks[s]}: unexpected frame {data[:64].hex()}")
        finally:
            for s in socks:
                s.setblocking(True)

    def drain(self, ports: Iterable[int] | None = None, quiet: float = 0.05) -> None:
        """Read and forget whatever the peers have queued."""
        for i in ports or self.peers:
            while self._recv(i, quiet) is not None:
                pass
            self.unexpected[i].clear()


class _LocalPeer(RawPeer):
    """A RawPeer on an interface of this process's own namespace."""

    def __init__(self, side: Side):
        self.side = side
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind((side.iface, 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)


def ident_byte(tag: str, kind=str):
    """A byte derived from the tag (keeps MACs/IPs of concurrent harnesses apart)."""
    v = zlib.crc32(tag.encode()) >> 8 & 0xFF
    return f"{v:02x}" if kind is str else v
