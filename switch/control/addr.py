"""MAC and IPv4 addresses as the tables take them (integers) and as people write them."""

from __future__ import annotations

import ipaddress
import re

from .errors import ControllerError

_MAC = re.compile(r"^[0-9a-f]{2}([:-][0-9a-f]{2}){5}$")


def mac(value: str, what: str) -> int:
    """A unicast MAC "0c:42:a1:dd:5f:3a" as a 48-bit integer."""
    v = value.lower() if isinstance(value, str) else value
    if not isinstance(v, str) or not _MAC.match(v):
        raise ControllerError(
            f"{what}: {value!r} is not a MAC address", subject=what, fix="write six hex bytes, like 0c:42:a1:dd:5f:3a"
        )
    n = int(v.replace(":", "").replace("-", ""), 16)
    if (n >> 40) & 1:
        raise ControllerError(
            f"{what}: {value} is a multicast MAC address",
            subject=what,
            fix="use the NIC's unicast MAC (first byte even)",
        )
    return n


def ipv4(value: str, what: str) -> int:
    """A unicast IPv4 address "10.10.1.2" as a 32-bit integer."""
    try:
        a = ipaddress.IPv4Address(value)
    except (ValueError, TypeError):
        raise ControllerError(
            f"{what}: {value!r} is not an IPv4 address", subject=what, fix="write a dotted quad, like 10.10.1.2"
        ) from None
    if a.is_multicast or a.is_unspecified or a.is_loopback:
        raise ControllerError(
            f"{what}: {value} is not a unicast host address", subject=what, fix="use an address of the data network"
        )
    return int(a)


def mac_str(n: int) -> str:
    return ":".join(f"{(n >> s) & 0xFF:02x}" for s in range(40, -1, -8))


def ipv4_str(n: int) -> str:
    return str(ipaddress.IPv4Address(n))
