"""The way to the switch's BFRuntime: its address, or an SSH tunnel rainmaker opens.

A lab switch's gRPC port often answers only on the switch itself (or on a management
network only the switch and a gateway reach). With `switch.bfrt_via_ssh: true`, the
inventory's `switch.bfrt` is the address as the switch sees it, and every BFRuntime
user dials the local end of a tunnel instead: a listener on 127.0.0.1, on a port the
kernel chooses, whose every connection becomes a direct-tcpip channel over the SSH
connection to the switch (through ssh.jump when there is one, with the same pinned
host keys as every other connection: orchestrator/remote.py). The switch's sshd makes
the last hop, as `ssh -L` would.

`dial(inv)` is the one place that says where to dial (orchestrator/switchd.py's
`bfrt_dial`); it holds the tunnel until closed. Tunnels are shared: one per switch and
process, opened by the first holder, closed (listener, channels, SSH connection) when
the last lets go. `Session` is a BFRuntime client that holds its dial while open, so a
run's session keeps its tunnel for the run and closes it with the session.

A tunnel's loss is an error, not a hang: each gRPC call has its deadline (the client's),
a dead SSH connection is found within ssh.dead_peer_s (remote.py's keepalives), its
channels end and the local connections with them, and an error a BFRuntime call raises
while the tunnel is down says so, naming the switch, the tunnel and what broke.
"""

from __future__ import annotations

import functools
import select
import socket
import threading
from typing import Any

import paramiko

from .errors import RemoteError
from .inventory.model import Inventory
from .remote import Remote, Target, targets

CHUNK = 1 << 16
FORWARD_TIMEOUT_S = 10.0  # how long the switch's sshd may take to open the far end


class Tunnel:
    """127.0.0.1:<port> here -> SSH to the switch -> `host`:`port` as the switch sees it."""

    def __init__(self, target: Target, host: str, port: int):
        self.target, self.host, self.port = target, host, port
        self.remote = Remote(target)
        self._ssh = threading.Lock()  # Remote is not thread-safe: channels are opened one at a time
        self._pairs: set[tuple[socket.socket, paramiko.Channel]] = set()
        self._pairs_lock = threading.Lock()
        self.error: str | None = None  # why the last forward failed (None once one works again)
        self.closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))  # only this machine's processes reach the tunnel
        self._listener.listen(64)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._acceptor = threading.Thread(target=self._accept, name=f"rm-tunnel-{target.name}", daemon=True)
        self._acceptor.start()

    def __str__(self) -> str:
        via = f" through the gateway {self.target.jump}" if self.target.jump is not None else ""
        return f"the SSH tunnel {self.address} -> {self.target.name}{via} -> {self.host}:{self.port}"

    def channel(self) -> paramiko.Channel:
        """A forwarded channel to the far end; RemoteError (and self.error) if none opens."""
        with self._ssh:
            try:
                chan = self.remote.open_forward(self.host, self.port, timeout=FORWARD_TIMEOUT_S)
            except RemoteError as e:
                self.error = e.result.error or e.message
                raise
        self.error = None
        return chan

    def probe(self) -> None:
        """Whether the far end accepts a connection, asked of the switch's sshd: returns,
        or raises RemoteError (its text has the switch's reason, e.g. Connection refused)."""
        _close(self.channel())

    def trouble(self) -> str | None:
        """What is wrong with the tunnel now (its SSH connection closed, or the last
        forward failed), or None."""
        if self.error is not None:
            return self.error
        with self._ssh:
            conn = self.remote._conn
            transport = conn.client.get_transport() if conn is not None else None
        if conn is not None and (transport is None or not transport.is_active()):
            return f"the SSH connection to {self.target.name} is closed"
        return None

    def _accept(self) -> None:
        while not self.closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(sock,), name="rm-tunnel-pump", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            chan = self.channel()
        except RemoteError:
            sock.close()  # the client sees its connection end: gRPC reports UNAVAILABLE
            return
        except Exception as e:  # noqa: BLE001 - a bug must still end the client's connection
            self.error = f"{type(e).__name__}: {e}"
            sock.close()
            return
        pair = (sock, chan)
        with self._pairs_lock:
            if self.closed:
                sock.close()
                _close(chan)
                return
            self._pairs.add(pair)
        try:
            _pump(sock, chan)
        finally:
            with self._pairs_lock:
                self._pairs.discard(pair)
            transport = chan.get_transport()
            sock.close()  # first: the client must see its connection end whatever the channel does
            _close(chan)
            if not self.closed and (transport is None or not transport.is_active()):
                self.error = f"the SSH connection to {self.target.name} was lost"

    def close(self) -> None:
        """Stop listening, end every forwarded connection, close the SSH connection."""
        self.closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        with self._pairs_lock:
            pairs, self._pairs = list(self._pairs), set()
        for sock, chan in pairs:
            sock.close()
            _close(chan)
        self._acceptor.join(timeout=5)
        with self._ssh:
            self.remote.close()


def _close(chan: paramiko.Channel) -> None:
    """Close a channel whose SSH connection may be gone (paramiko then raises EOFError)."""
    try:
        chan.close()
    except (OSError, EOFError, paramiko.SSHException):
        pass


def _pump(sock: socket.socket, chan: paramiko.Channel) -> None:
    """Copy bytes both ways until either side ends (or the tunnel closes them)."""
    while True:
        try:
            ready, _, _ = select.select([sock, chan], [], [], 5.0)
        except (OSError, ValueError):  # closed under us
            return
        for src, dst in ((sock, chan), (chan, sock)):
            if src not in ready:
                continue
            try:
                data = src.recv(CHUNK)
                if not data:
                    return
                dst.sendall(data)
            except (OSError, EOFError, paramiko.SSHException):
                return


# -- shared tunnels -----------------------------------------------------------------------
_lock = threading.Lock()
_tunnels: dict[tuple, tuple[Tunnel, int]] = {}  # key -> (tunnel, holders)


def _key(inv: Inventory) -> tuple:
    (t,) = targets(inv, role="switch")
    return (t, inv.switch.bfrt_host.strip("[]"), inv.switch.bfrt_port)


def _acquire(inv: Inventory) -> Tunnel:
    key = _key(inv)
    with _lock:
        tunnel, holders = _tunnels.get(key, (None, 0))
        if tunnel is None:
            tunnel = Tunnel(*key)
        _tunnels[key] = (tunnel, holders + 1)
        return tunnel


def _release(tunnel: Tunnel) -> None:
    key = (tunnel.target, tunnel.host, tunnel.port)
    with _lock:
        held, holders = _tunnels.get(key, (None, 0))
        if held is not tunnel:
            return
        if holders > 1:
            _tunnels[key] = (tunnel, holders - 1)
            return
        del _tunnels[key]
    tunnel.close()


class Dial:
    """Where to dial the switch's BFRuntime (`address`): switch.bfrt itself, or the local
    end of `tunnel`, held until `close()`."""

    def __init__(self, inv: Inventory):
        self.switch = inv.switch.name
        self.bfrt = str(inv.switch.bfrt)
        self.tunnel = _acquire(inv) if inv.switch.bfrt_via_ssh else None
        self.address = self.tunnel.address if self.tunnel is not None else self.bfrt
        self._held = self.tunnel is not None

    def __enter__(self) -> Dial:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._held and self.tunnel is not None:
            self._held = False
            _release(self.tunnel)

    def __str__(self) -> str:
        return self.bfrt if self.tunnel is None else f"{self.bfrt} (through {self.tunnel})"

    def explained(self, e: Exception) -> Exception:
        """`e` (a BFRuntime error), saying first that the tunnel is down and why, if it is:
        the same exception, so that whoever handles a lost session still does."""
        if self.tunnel is None or not hasattr(e, "message"):
            return e
        why = self.tunnel.trouble()
        if why is None and "UNAVAILABLE" in str(e.message):
            why = self._probed()
        if why is None:
            return e
        e.message = (
            f"switch {self.switch}: BFRuntime is reached through {self.tunnel}, which is down: {why}\n  {e.message}"  # type: ignore[attr-defined]
        )
        e.args = (e.message,)  # type: ignore[attr-defined]
        e.fix = (  # type: ignore[attr-defined]
            f"check the SSH path to {self.switch} (and its gateway, if any): `rainmaker exec --role switch -- true`; "
            "a new session opens the tunnel again"
        )
        return e

    def _probed(self) -> str | None:
        """The tunnel asked directly, for an error that lost the connection: the client
        can see its connection end before the SSH transport has noticed its peer is gone
        (the pump closes the client's socket first), and trouble() then still reads an
        active transport. A forward opened now fails (bounded by FORWARD_TIMEOUT_S)
        when the tunnel is down, and says why."""
        if self.tunnel is None:
            return None
        try:
            self.tunnel.probe()
        except RemoteError as e:
            return self.tunnel.trouble() or e.message
        return None


def dial(inv: Inventory) -> Dial:
    """The address to dial for `inv`'s BFRuntime, as a Dial to close when done."""
    return Dial(inv)


@functools.cache
def session_class() -> type:
    """switch.bfrt's Client, dialled through `dial`: it holds the tunnel while open (a
    reconnect may get a new local port), and its errors say when the tunnel is down."""
    from switch.bfrt.client import Client
    from switch.errors import SwitchError

    class Session(Client):
        def __init__(self, inv: Inventory, **kwargs: Any):
            self._inv = inv
            self._dial: Dial | None = None
            super().__init__(str(inv.switch.bfrt), **kwargs)

        def _open(self, connect_timeout: float, bind: bool, p4_name: str | None) -> None:
            d = self._dial = self._dial or dial(self._inv)
            self.address = d.address
            try:
                super()._open(connect_timeout, bind, p4_name)
            except SwitchError as e:
                raise d.explained(e) from None

        def close(self) -> None:
            try:
                super().close()
            finally:
                if self._dial is not None:
                    self._dial.close()
                    self._dial = None

        def write(self, *args: Any, **kwargs: Any) -> None:
            d = self._dial
            try:
                super().write(*args, **kwargs)
            except SwitchError as e:
                raise (d.explained(e) if d is not None else e) from None

        def _read(self, *args: Any, **kwargs: Any) -> list:
            d = self._dial
            try:
                return super()._read(*args, **kwargs)
            except SwitchError as e:
                raise (d.explained(e) if d is not None else e) from None

    return Session
