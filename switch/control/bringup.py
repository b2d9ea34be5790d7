"""Check that a switch serves a program and bring its ports up, over BFRuntime; say so in JSON.

    python -m switch.control.bringup --bfrt 192.0.2.10:50052 --program rain \\
        --ports '[{"port": "1/0", "dev_port": 132, "speed": "100G", "fec": "rs"}]' [--timeout 60]

The tofino_sde role runs it on the control node (delegate_to: localhost) once
bf_switchd's gRPC port answers, with the inventory's switch.ports as JSON. It
subscribes as client 0, checks that GetForwardingPipelineConfig names the program,
binds to it, adds (or modifies) each port through $PORT with its speed, FEC and
autoneg, enables it, and waits until every one reports $PORT_UP (probed, never slept
for). With --verify it only looks, as a reader that never binds: the program is served
and every port is up; nothing changes (the role's verify tasks).

stdout is one JSON object: {"ok", "bfrt", "program", "bound", "ports": {dev_port:
{name, speed, fec, enabled, up}}, "waited_s"}, plus {"error", "fix", "down"} when it
fails; the message and its fix also go to stderr. Exit status 0 when everything is up,
1 when the switch is not in that state, 2 for bad arguments.

It reaches the switch only through switch.bfrt, like the controller, and imports
nothing from orchestrator: it runs wherever rainmaker's Python does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from switch.errors import SwitchError

from .errors import ControllerError
from .topology import PortSpec

SPEEDS = ("1G", "10G", "25G", "40G", "50G", "100G", "200G", "400G")
FECS = ("none", "fc", "rs")
AUTONEGS = ("default", "enable", "disable")
PORT_KEYS = {"port", "dev_port", "speed", "fec", "autoneg", "iface"}  # iface: the inventory's; unused here
BIND_CLIENT_ID = 0  # the controller's id: bf_switchd lets one client bind a program
READER_CLIENT_ID = 7  # --verify: a reader that never binds, on the first free id from 7 (as orchestrator.switchd)
READER_SPARE_IDS = 63
_PORT_NAME = re.compile(r"^\d{1,2}/\d$")


class BringupError(SwitchError):
    """The switch does not serve the program, or ports stayed down. `down`: their dev_ports."""

    def __init__(self, message: str, *, fix: str | None = None, down: Sequence[int] = ()):
        self.down = list(down)
        super().__init__(message, fix=fix)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 2 with the usage, like argparse, but the message first
        self.exit(2, f"error: {message}\n{self.format_usage()}")


def parse_ports(text: str) -> list[PortSpec]:
    """The --ports JSON: a list of {port, dev_port, speed, fec, autoneg}. Raises ValueError naming the bad entry."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"--ports is not JSON ({e.msg} at character {e.pos}); give a list like "
            '[{"port": "1/0", "dev_port": 132, "speed": "100G", "fec": "rs"}]'
        ) from None
    if not isinstance(data, list) or not data:
        raise ValueError("--ports must be a non-empty JSON list of ports (the inventory's switch.ports)")
    out: list[PortSpec] = []
    seen: dict[int, str] = {}
    for i, p in enumerate(data):
        where = f"--ports[{i}]"
        if not isinstance(p, dict):
            raise ValueError(f"{where} is {type(p).__name__}, not an object with port, dev_port, speed, fec")
        unknown = sorted(set(p) - PORT_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; a port has {', '.join(sorted(PORT_KEYS))}")
        for key in ("port", "dev_port"):
            if key not in p:
                raise ValueError(f"{where} has no '{key}'")
        name, dev = p["port"], p["dev_port"]
        if not isinstance(name, str) or not _PORT_NAME.match(name):
            raise ValueError(f"{where}.port {name!r} is not a front-panel port name like '1/0'")
        where = f"{where} (port {name})"
        if isinstance(dev, bool) or not isinstance(dev, int) or not 0 <= dev <= 511:
            raise ValueError(f"{where}: dev_port {dev!r} is not an integer from 0 to 511")
        speed, fec, autoneg = p.get("speed", "100G"), p.get("fec", "none"), p.get("autoneg", "default")
        if speed not in SPEEDS:
            raise ValueError(f"{where}: speed {speed!r} is not one of {', '.join(SPEEDS)}")
        if fec not in FECS:
            raise ValueError(f"{where}: fec {fec!r} is not one of {', '.join(FECS)}")
        if autoneg not in AUTONEGS:
            raise ValueError(f"{where}: autoneg {autoneg!r} is not one of {', '.join(AUTONEGS)}")
        if dev in seen:
            raise ValueError(f"{where}: dev_port {dev} is also port {seen[dev]}")
        seen[dev] = name
        out.append(PortSpec(name, dev, speed, fec, autoneg))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = _Parser(prog="python -m switch.control.bringup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bfrt", required=True, metavar="HOST:PORT", help="the switch's BFRuntime gRPC address")
    ap.add_argument("--program", required=True, help="the P4 program the switch must serve, e.g. rain")
    ap.add_argument(
        "--ports",
        required=True,
        metavar="JSON",
        help="the ports as a JSON list of {port, dev_port, speed, fec, autoneg}",
    )
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every port to be up (default 60)")
    ap.add_argument(
        "--connect-timeout", type=float, default=10.0, help="seconds to wait for BFRuntime to answer (default 10)"
    )
    ap.add_argument("--verify", action="store_true", help="only check (no bind, no port changes)")
    args = ap.parse_args(argv)
    host, sep, port = args.bfrt.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        ap.error(f"--bfrt {args.bfrt!r} is not HOST:PORT (e.g. 192.0.2.10:50052)")
    if not re.match(r"^[a-z][a-z0-9_]{0,63}$", args.program):
        ap.error(f"--program {args.program!r} is not a P4 program name (lower case, digits, '_')")
    for opt in ("timeout", "connect_timeout"):
        value = getattr(args, opt)
        if not value > 0 or value > 3600:
            ap.error(f"--{opt.replace('_', '-')} {value:g} must be more than 0 and at most 3600 seconds")
    try:
        args.ports = parse_ports(args.ports)
    except ValueError as e:
        ap.error(str(e))
    return args


def _port_rows(client, ports: Sequence[PortSpec]) -> dict[str, dict[str, Any]]:
    from .ports import Ports

    state = Ports(client).status()
    names = {p.dev_port: p.name for p in ports}
    return {str(dev): {"name": names.get(dev), **row} for dev, row in state.items() if dev in names}


def bring_up(
    bfrt: str,
    program: str,
    ports: Sequence[PortSpec],
    *,
    timeout: float,
    connect_timeout: float,
    verify: bool = False,
    clock=time.monotonic,
) -> dict[str, Any]:
    """Do (or, with verify, check) what the module's doc says; returns the report, raises SwitchError."""
    from switch.bfrt.client import Client

    from .ports import Ports

    client_id = READER_CLIENT_ID if verify else BIND_CLIENT_ID
    # Client fetches the program by name: a switch serving another one raises, naming what it serves.
    spare = READER_SPARE_IDS if verify else 0
    with Client(
        bfrt, p4_name=program, client_id=client_id, spare_ids=spare, bind=not verify, connect_timeout=connect_timeout
    ) as client:
        report: dict[str, Any] = {
            "ok": False,
            "bfrt": bfrt,
            "program": client.p4_name,
            "bound": client.bound,
            "changed": False,
        }
        t0 = clock()
        try:
            if verify:
                have = client.ports.all()
                down = [p for p in ports if not have.get(p.dev_port, {}).get("$PORT_UP")]
                if down:
                    raise ControllerError("ports down", subject=[p.dev_port for p in down])
            else:
                have = client.ports.all()
                todo = [p for p in ports if not _configured(client, have.get(p.dev_port), p)]
                ports_ctl = Ports(client)
                ports_ctl.configure(todo)  # only what differs: a second run writes nothing
                report["changed"] = bool(todo)
                ports_ctl.wait_up(ports, timeout, clock=clock)
        except ControllerError as e:
            down_ids = set(e.subject or [])
            report["ports"] = _port_rows(client, ports)
            down = [p for p in ports if p.dev_port in down_ids]
            raise _down_error(down, report["ports"], timeout if not verify else None) from None
        report.update(ok=True, ports=_port_rows(client, ports), waited_s=round(clock() - t0, 3))
        return report


def _configured(client, row: dict[str, Any] | None, p: PortSpec) -> bool:
    """Whether $PORT already holds this port as asked (added, enabled, same speed, FEC, autoneg)."""
    from .ports import _AUTONEG

    if row is None:
        return False
    # The client's own encoding of the fields, so the comparison is with what it would write.
    want = client.ports._fields(p.speed, p.fec, True, _AUTONEG.get(p.autoneg, p.autoneg), None)
    return all(row.get(k) == v for k, v in want.items())


def _down_error(down: Sequence[PortSpec], rows: dict[str, dict], timeout: float | None) -> BringupError:
    def one(p: PortSpec) -> str:
        row = rows.get(str(p.dev_port))
        state = "not added" if row is None else ("disabled" if not row["enabled"] else "enabled, link down")
        return f"{p.name} (dev_port {p.dev_port}, {p.speed} fec {p.fec} autoneg {p.autoneg}: {state})"

    when = f"after {timeout:g} s" if timeout is not None else "now"
    return BringupError(
        f"{len(down)} port(s) not up {when}: " + ", ".join(one(p) for p in down),
        fix="check the cable and the peer of each port (its NIC is up, e.g. `ip link` on the host); set the port's "
        "speed and fec in the inventory to what the peer runs (100G ConnectX: fec rs); for DAC cables try "
        "autoneg: enable, for optics autoneg: disable",
        down=[p.dev_port for p in down],
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = bring_up(
            args.bfrt,
            args.program,
            args.ports,
            timeout=args.timeout,
            connect_timeout=args.connect_timeout,
            verify=args.verify,
        )
    except SwitchError as e:
        out = {
            "ok": False,
            "bfrt": args.bfrt,
            "program": args.program,
            "error": e.message,
            "fix": e.fix,
            "down": getattr(e, "down", []),
        }
        print(json.dumps(out, sort_keys=True))
        print(f"error: {e.render()}", file=sys.stderr)
        return 1
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
