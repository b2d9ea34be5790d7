"""The browser's server: uvicorn on a socket bound here, so that the address it
really listens on (port 0: one the system picks) is known before anyone is told it,
and a busy port is a clear error, not a traceback. In the foreground for `rainmaker
serve`; in a thread for tests and the documentation's screenshots, ready when uvicorn
says it started (probed, never slept for)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from ..errors import RainmakerError, UsageError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_local(host: str) -> bool:
    return host in LOCAL_HOSTS


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on host:port."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise UsageError(
            f"cannot listen on {host}: {e.strerror}", fix="give --host an address of this machine"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {e.strerror}", fix="choose another --port (0: any free port)"
        ) from None
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _server(app):
    import uvicorn

    # lifespan off: the app has no start-up work; access log off: the page polls
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))


def serve(app, host: str, port: int, announce) -> None:
    """Serve app on host:port until Ctrl-C; `announce(url)` once the socket is bound."""
    sock = bind(host, port)
    announce(url_of(sock))
    _server(app).run(sockets=[sock])


@dataclass
class Running:
    url: str
    server: object
    thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def start(app, host: str = "127.0.0.1", port: int = 0, timeout: float = 15.0) -> Running:
    """app served in a thread of this process, answering once this returns."""
    sock = bind(host, port)
    server = _server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="rainmaker-serve", daemon=True)
    thread.start()
    end = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > end:
            server.should_exit = True
            raise RainmakerError(f"the results browser did not start on {url_of(sock)} within {timeout:g} s")
        time.sleep(0.01)
    return Running(url_of(sock), server, thread)
