"""`rainmaker testbed`: build, inspect and remove emulated testbeds."""

from __future__ import annotations

import os
import sys

import click
from rich.table import Table

from .app import cli, console, err_console


@cli.group()
def testbed() -> None:
    """Build, inspect and remove the emulated testbed (needs root)."""


def _slot_option(f):
    return click.option(
        "--slot",
        type=click.IntRange(0, 15),
        default=0,
        show_default=True,
        help="which emulated testbed: slots are independent (own namespaces, addresses 10.79.SLOT.0/24)",
    )(f)


class _UpSlot(click.ParamType):
    """A slot number, or `free`: the lowest slot no testbed uses."""

    name = "0..15|free"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "free":
            return value
        if str(value).isdigit() and 0 <= int(value) <= 15:
            return int(value)
        self.fail(f"{value!r} is not a slot: give 0..15, or free", param, ctx)


class _CpuList(click.ParamType):
    """A CPU list as the kernel and taskset write it: 0-3, or 0,2,4-5."""

    name = "LIST"

    def convert(self, value, param, ctx):
        from ..testbed.cpu import parse_cpus

        if isinstance(value, list):
            return value
        try:
            return parse_cpus(str(value))
        except ValueError as e:
            self.fail(f"{e}; give CPU numbers and ranges, like 0-3 or 0,2,4-5", param, ctx)


@testbed.command("up")
@click.option("--clients", type=click.IntRange(1, 14), default=1, show_default=True, help="client hosts")
@click.option("--workers", type=click.IntRange(1, 14), default=2, show_default=True, help="worker hosts")
@click.option(
    "--slot",
    type=_UpSlot(),
    default=0,
    show_default=True,
    help="which emulated testbed: slots are independent (own namespaces, addresses 10.79.SLOT.0/24); "
    "free: the lowest slot no testbed uses",
)
@click.option(
    "--link-delay-us",
    type=click.FloatRange(0, 1e6),
    default=0.0,
    show_default=True,
    help="a slower testbed on purpose: the switch holds every frame it sends this many microseconds "
    "(testbed time), as longer links would",
)
@click.option(
    "--bastion",
    is_flag=True,
    help="a lab behind a gateway: the machines are reachable only through a bastion namespace's sshd "
    "(the inventory gets ssh.jump and switch.bfrt_via_ssh)",
)
@click.option(
    "--cpus",
    type=_CpuList(),
    default=None,
    help="confine the testbed to these cores of this machine (like 2-3 or 0,2,4-5): every process in it, "
    "the switch's data plane included, runs only there  [default: every core]",
)
def testbed_up(
    clients: int, workers: int, slot: int | str, link_delay_us: float, bastion: bool, cpus: list[int] | None
) -> None:
    """Build an emulated testbed: one network namespace per host and one for the switch,
    veth data links host <-> switch, a management bridge, an sshd per machine with pinned
    host keys. With --bastion, this machine reaches them only through a bastion namespace
    (SSH through it; BFRuntime tunnelled over SSH to the switch). With --cpus, everything
    in it runs on those cores only, so that several testbeds can share a many-core
    machine, each measuring on its own cores (docs/emulation.md).

    Progress goes to stderr; stdout gets one line, `inventory: PATH`, the inventory it
    wrote. While it is the only testbed up it is every other command's default
    inventory; with several up, commands need -i PATH (or RAINMAKER_INVENTORY)."""
    from ..testbed.emulated import EmulatedTestbed, up_in_free_slot

    def log(m: str) -> None:
        err_console.print(f"[dim]·[/] {m}")

    kw = {"link_delay_us": link_delay_us, "bastion": bastion, "log": log, **({"cpus": cpus} if cpus else {})}
    inv = (
        up_in_free_slot(clients, workers, **kw) if slot == "free" else EmulatedTestbed(slot).up(clients, workers, **kw)
    )
    click.echo(f"inventory: {inv}")  # plain: `make demo` reads the path from it


@testbed.command("down")
@click.option("--slot", type=click.IntRange(0, 15), help="the testbed's slot  [default: 0, or the inventory's]")
@click.option(
    "-i",
    "--inventory",
    "inv_path",
    help="the inventory `testbed up` printed: take down the testbed that wrote it",
)
def testbed_down(slot: int | None, inv_path: str | None) -> None:
    """Remove the emulated testbed: processes, namespaces, links, routes, state. Safe to
    run twice, and after a half-finished or crashed `up`."""
    from ..testbed.emulated import EmulatedTestbed

    if inv_path is not None:
        from ..inventory import load

        slot = _slot_of(load(inv_path), inv_path, slot)
    EmulatedTestbed(slot or 0).down(log=lambda m: console.print(f"[dim]·[/] {m}"))


def _slot_of(inv, path: str, slot: int | None) -> int:
    """The slot of the emulated testbed that wrote inventory `inv`, refusing any other."""
    from ..errors import UsageError
    from ..testbed import state

    if inv.emulation is None:
        raise UsageError(
            f"{path} is not an emulated testbed's inventory (it has no emulation block)",
            fix="give the inventory `rainmaker testbed up` printed, or --slot N",
        )
    if slot is not None and slot != inv.emulation.slot:
        raise UsageError(
            f"--slot {slot} and {path} (slot {inv.emulation.slot}) name two testbeds", fix="give one of them"
        )
    mine = state.slot_dir(inv.emulation.slot)
    if inv.emulation.state_dir.resolve() != mine.resolve():
        raise UsageError(
            f"{path} was written by a testbed whose state is in {inv.emulation.state_dir}, not {mine}",
            fix=f"run it with RAINMAKER_STATE_DIR={inv.emulation.state_dir.parent.parent}",
        )
    return inv.emulation.slot


@testbed.command("status")
@_slot_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def testbed_status(slot: int, as_json: bool) -> None:
    """Show the machines of the emulated testbed and whether their sshd answers."""
    import json

    from ..testbed.emulated import EmulatedTestbed

    st = EmulatedTestbed(slot).status()
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    if not st["up"]:
        console.print(f"no emulated testbed in slot {slot} (bring one up with `rainmaker testbed up`)")
        return
    t = Table(title=f"emulated testbed, slot {slot}" + ("" if st["complete"] else " (INCOMPLETE: run `testbed down`)"))
    for col in ("name", "role", "netns", "mgmt", "sshd", "data"):
        t.add_column(col)
    for row in st["machines"]:
        t.add_row(
            *(str(row[c]) for c in ("name", "role", "netns", "mgmt", "sshd", "data")),
            style=None if row["sshd"] == "up" else "red",
        )
    console.print(t)
    console.print(f"inventory: {st['inventory']}")
    if st.get("link_delay_us"):
        console.print(f"link delay: {st['link_delay_us']:g} us on every frame the switch sends")
    console.print(_cores_line(st.get("cpus") or []))
    if any(r["sshd"] != "up" for r in st["machines"]):
        sys.exit(1)


def _cores_line(cpus: list[int]) -> str:
    from ..testbed.cpu import format_cpus, online_cpus

    if cpus:
        return f"cpus: {format_cpus(cpus)} (every process of the testbed runs on these {len(cpus)} core(s) only)"
    return f"cpus: any of this machine's {format_cpus(online_cpus())} (not confined)"


@testbed.command("cpu")
@_slot_option
@click.option("--seconds", type=click.FloatRange(0.1, 3600), default=5.0, show_default=True, help="the window")
@click.option("--threads", is_flag=True, help="one row per thread (rain-worker's lcores and worker threads)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def testbed_cpu(slot: int, seconds: float, threads: bool, as_json: bool) -> None:
    """Show where the emulated testbed's CPU goes: every process (or thread) of its
    machines' namespaces and the share of one core it used over a window.

    \b
    rainmaker testbed cpu                  # idle: the whole testbed should use a few percent
    rainmaker testbed cpu --seconds 10 --threads   # while a point runs: who takes the cores
    """
    import json

    from rich.markup import escape

    from ..errors import UsageError
    from ..testbed import cpu
    from ..testbed.emulated import EmulatedTestbed

    tb = EmulatedTestbed(slot)
    st = tb.status()
    if not st["up"]:
        raise UsageError(f"no emulated testbed in slot {slot}", fix="bring one up with `rainmaker testbed up`")
    machines = {m["name"]: m["netns"] for m in st["machines"]}
    usage = cpu.measure(machines, seconds)
    rows = usage if threads else cpu.by_process(usage)
    total = sum(u.share for u in rows)
    strays = cpu.outside(machines, st["cpus"]) if st.get("cpus") else []
    if as_json:
        out = {"seconds": seconds, "total_share": total, "rows": [u.__dict__ for u in rows]}
        out |= {"cpus": st["cpus"], "outside": [t.__dict__ for t in strays]} if st.get("cpus") else {}
        click.echo(json.dumps(out, indent=1))
        return
    t = Table(title=f"CPU of the emulated testbed in slot {slot} over {seconds:g} s (100% = one core)")
    for col in ("machine", "pid", *(["tid", "thread"] if threads else []), "program", "CPU"):
        t.add_column(col, justify="right" if col in ("pid", "tid", "CPU") else "left")
    for u in rows:
        if u.cpu_s <= 0:
            continue
        cells = [u.machine, str(u.pid), *([str(u.tid), u.name] if threads else []), u.program, f"{100 * u.share:.1f}%"]
        t.add_row(*cells)
    console.print(t)
    console.print(f"total: {100 * total:.1f}% of one core ({os.cpu_count()} cores on this machine)")
    if st.get("cpus"):
        console.print(_cores_line(st["cpus"]))
        for x in strays:
            where = f"{x.machine} pid {x.pid} tid {x.tid} {x.name} ({x.program}) on {x.allowed}"
            console.print(f"[red]outside them[/]: {escape(where)}")
        if not strays:
            console.print("every thread of the testbed is confined to them")


# -- inventory -----------------------------------------------------------------------
