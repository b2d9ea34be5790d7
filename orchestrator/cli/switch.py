"""`rainmaker switch`: start, stop and read the switch's software."""

from __future__ import annotations

import sys

import click
from rich.table import Table
from rich.text import Text

from .app import INVENTORY_HELP, _inventory, cli, console


@cli.group("switch")
def switch_group() -> None:
    """Start, stop and inspect the switch's software.

    \b
    emulated  the software switch (python -m switch.emulator), run on the switch
              machine over SSH from this checkout
    tofino    bf_switchd as a service, through the tofino_sde role (Ansible): the P4
              program is compiled and installed first if its sources changed, and on
              switch.target: model tofino-model is started before bf_switchd
    status, tables and registers read any switch that answers BFRuntime."""


@switch_group.command("start")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option(
    "--program",
    help="P4 program to run: rain, r2p2, racksched, draconis, pallas or ipv4_forward "
    "(default: the inventory's switch.program, rain)",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=None,
    help="seconds to wait for the switch to answer BFRuntime [default: 60 emulated, 300 tofino]",
)
@click.option(
    "--port-timeout",
    type=click.FloatRange(min=1),
    default=30,
    show_default=True,
    help="seconds to wait for every port to be up",
)
@click.option("--restart", is_flag=True, help="stop the switch's software first if it runs")
def switch_start(
    inv_path: str | None, program: str | None, timeout: float | None, port_timeout: float, restart: bool
) -> None:
    """Start the switch and bring the inventory's ports up (added, enabled, oper up).

    \b
    emulated  run the emulator on the switch machine, wait for its ready line and for
              BFRuntime to answer; a running emulator is an error unless --restart
    tofino    run the tofino_sde role: check the SDE, compile and install the program
              when its sources changed, start bf_switchd (systemd, else
              start-stop-daemon) and wait until BFRuntime serves the program; a running
              bf_switchd is kept unless its program or configuration changed, or --restart"""
    from .. import switchd

    inv = _inventory(inv_path)
    st = switchd.start(
        inv,
        program,
        log=lambda m: console.print(Text(f"· {m}", style="dim")),
        ready_timeout=timeout,
        port_timeout=port_timeout,
        restart=restart,
        progress=inv.switch.kind == "tofino",
    )
    _print_switch_status(st)
    if not st.ok:
        sys.exit(1)


@switch_group.command("stop")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option(
    "--grace", type=click.FloatRange(min=0), default=5, show_default=True, help="seconds between TERM and KILL"
)
def switch_stop(inv_path: str | None, grace: float) -> None:
    """Stop the switch's software (TERM, then KILL after --grace seconds). Safe to run twice.
    On a tofino: the tofino_sde role stops bf_switchd (and tofino-model)."""
    from .. import switchd

    inv = _inventory(inv_path)
    how = switchd.stop(
        inv, grace=grace, log=lambda m: console.print(Text(f"· {m}", style="dim")), progress=inv.switch.kind == "tofino"
    )
    console.print(f"switch {inv.switch.name}: {how}")


@switch_group.command("status")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def switch_status(inv_path: str | None, as_json: bool) -> None:
    """Whether the switch's software runs and answers BFRuntime, its program and its
    ports. Exits 1 when it does not run or does not answer."""
    import dataclasses
    import json

    from .. import switchd

    st = switchd.status(_inventory(inv_path))
    if as_json:
        d = dataclasses.asdict(st)
        d["ports"] = {str(k): v for k, v in d["ports"].items()}
        d["names"] = {str(k): v for k, v in d["names"].items()}
        click.echo(json.dumps(d, indent=2))
    else:
        _print_switch_status(st)
    if not st.ok:
        sys.exit(1)


def _print_switch_status(st) -> None:
    console.print(f"switch [bold]{st.name}[/] ({st.kind}): {st.process}")
    if st.running is False:
        return
    bfrt = st.bfrt if st.via is None else f"{st.bfrt} (through {st.via})"
    if not st.answers:
        console.print(f"  BFRuntime {bfrt}: [red]no answer[/]")
        if st.error:
            console.print(Text("  " + st.error.replace("\n", "\n  ")))
        return
    console.print(f"  BFRuntime {bfrt}: program [bold]{st.program}[/]")
    up = sum(p["up"] for p in st.ports.values())
    console.print(f"  ports: {up} of {len(st.ports)} up")
    for dev, p in st.ports.items():
        state = "[green]up[/]" if p["up"] else ("[red]down[/]" if p["enabled"] else "[yellow]disabled[/]")
        speed = (p["speed"] or "").removeprefix("BF_SPEED_")
        console.print(f"    {st.names.get(dev, '?'):>5} dev_port {dev:<3} {speed:>5} {state}")


# $PORT's fields that `switch tables` shows without --all (bf_switchd serves 33).
PORT_COLUMNS = ("$PORT_NAME", "$SPEED", "$FEC", "$N_LANES", "$AUTO_NEGOTIATION", "$PORT_ENABLE", "$PORT_UP")


@switch_group.command("tables")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="every fixed table the switch serves (TM, mirror, pktgen, LAG, ...) and every $PORT field",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def switch_tables(inv_path: str | None, everything: bool, as_json: bool) -> None:
    """Print every table of the running program (and $PORT, $pre.mgid, $pre.node) with
    its entries and default action; $PORT by its main fields (--all: every field, and
    every fixed table)."""
    import json

    from .. import switchd

    with switchd.connect(_inventory(inv_path)) as client:
        data = switchd.tables(client, everything=everything)
        program = client.p4_name
    if as_json:
        click.echo(json.dumps(data, indent=1, default=str))
        return
    console.print(f"program [bold]{program}[/]: {len(data)} tables")
    for t in data:
        widths = t["widths"]
        title = f"{t['name']}  ({len(t['entries'])}/{t['size']} entries"
        title += f", default {_call(t['default'], widths)})" if t["default"] else ")"
        if not t["entries"]:
            console.print(Text(f"{title}: empty", style="dim"))
            continue
        tab = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        keys = t["keys"]
        for k in keys:
            tab.add_column(k, overflow="fold")
        has_action = any(e["action"] for e in t["entries"])
        if has_action:
            tab.add_column("action")
        data_cols = [] if has_action else sorted({n for e in t["entries"] for n in e["data"]})
        if t["name"] == "$PORT" and not everything:  # 33 fields; these say how a port is set up
            data_cols = [c for c in PORT_COLUMNS if c in data_cols]
        for c in data_cols:
            tab.add_column(c, overflow="fold")
        if has_action:
            tab.add_column("parameters", overflow="fold")
        for e in t["entries"]:
            row = [_value(k, e["key"].get(k), widths.get(k, 0)) for k in keys]
            if has_action:
                row += [
                    e["action"] or "",
                    ", ".join(f"{n}={_value(n, v, widths.get(n, 0))}" for n, v in e["data"].items()),
                ]
            else:
                row += [_value(c, e["data"].get(c), widths.get(c, 0)) for c in data_cols]
            tab.add_row(*row)
        console.print(tab)


@switch_group.command("registers")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="read the 128K-entry arrays too (slow: a minute or more through BFRuntime)",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output (the controller's snapshot)")
def switch_registers(inv_path: str | None, everything: bool, as_json: bool) -> None:
    """Print the registers and counters: small registers fully (non-zero cells), the
    queue entry arrays summarised by the ranges the queues occupy, the event counters
    by name."""
    import json

    from .. import switchd

    inv = _inventory(inv_path)
    with switchd.connect(inv) as client:
        snap = switchd.registers(client, inv, everything=everything)
    if as_json:
        click.echo(json.dumps(snap, indent=1))
        return
    console.print(f"program [bold]{snap['program']}[/]")
    for name, r in snap["registers"].items():
        head = f"{name} [{r['size']} x {r['width']} bit]"
        if r.get("skipped"):
            occ = r.get("occupied")
            where = (
                (f"queues occupy {r['occupied_count']} entries: " + ", ".join(f"{a}..{b}" for a, b in occ))
                if occ
                else "queues empty"
            )
            console.print(Text(f"{head}: not read ({where if occ is not None else 'use --all'})"))
            continue
        for p, cells in enumerate(r["pipes"]):
            nz = [f"{i}={v}" for i, v in enumerate(cells) if v]
            pipe = f" pipe {p}" if len(r["pipes"]) > 1 else ""
            body = ", ".join(nz) + (" (others 0)" if nz and len(nz) < len(cells) else "") if nz else "all 0"
            console.print(Text(f"{head}{pipe}: {body}"))
    for name, c in snap["counters"].items():
        nz = {k: v for k, v in c.items() if v["packets"] or v["bytes"]}
        body = ", ".join(f"{k}={v['packets']} pkts/{v['bytes']} B" for k, v in nz.items()) or "all 0"
        console.print(Text(f"{name}: {body}"))
    for s, q in snap.get("queues", {}).items():
        console.print(
            Text(
                f"queue of slice {s}: entries {q['first']}..{q['last']} ({q['capacity']}), balance {q['balance']} "
                f"({q['tasks']} tasks, {q['tokens']} tokens waiting), head {q['head']}, tail {q['tail']}; "
                f"RDMA ring {q['ring_slots']} slots, next {q['ring_offset']}, mgid {q['mgid']}"
            )
        )


def _call(d: dict, widths: dict) -> str:
    args = ", ".join(f"{n}={_value(n, v, widths.get(n, 0))}" for n, v in d["data"].items())
    return f"{d['action']}({args})"


_SIGNED_PARAMS = {"cap", "neg_cap"}  # int<32> parameters of bidir_queue.p4's set_slice_config


def _value(name: str, v, width: int) -> str:
    """A table value as a person reads it: MACs and IPv4 addresses in their notation."""
    import ipaddress

    if isinstance(v, str):
        return v.removeprefix("BF_SPEED_").removeprefix("BF_FEC_TYP_").removeprefix("PM_AN_")
    if isinstance(v, bool) or not isinstance(v, int):
        return "" if v is None else str(v)
    if name in _SIGNED_PARAMS and width and v >> (width - 1):
        return str(v - (1 << width))
    last = name.rsplit(".", 1)[-1].lower()
    if width == 48 and ("mac" in last or last in ("dst_addr", "src_addr")):
        return ":".join(f"{(v >> s) & 0xFF:02x}" for s in range(40, -1, -8))
    if width == 32 and (last in ("ip", "dip", "sip") or last.endswith("_addr") or "ipv4" in name):
        return str(ipaddress.IPv4Address(v))
    return str(v)
