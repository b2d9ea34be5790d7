"""The `rainmaker` command line.

Every verb reads its testbed from an inventory: `-i FILE`, else $RAINMAKER_INVENTORY,
else the emulated testbed that `rainmaker testbed up` built when it is the only one up
(with several up, it refuses and lists them rather than guess). Errors print as one
readable message (file, field, fix) with exit status 2 for bad input and 1 for
failures; RAINMAKER_DEBUG=1 shows the traceback too.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .errors import Interrupted, RainmakerError, interrupted_status, stopped_by

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

INVENTORY_HELP = (
    "testbed inventory (YAML). Default: $RAINMAKER_INVENTORY, else the emulated testbed that is up (if only one is)"
)


def _inventory(path: str | None):
    from .inventory import load, resolve_path

    return load(resolve_path(path))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="rainmaker")
def cli() -> None:
    """rainmaker: run in-network scheduling experiments (Rain and its baselines) on a
    Tofino testbed, or on an emulated testbed built on this machine.

    \b
    A first session, as root:
      rainmaker testbed up --clients 1 --workers 2   # namespaces + sshd, prints its inventory
      rainmaker exec -- uname -n                      # a command on every host, over SSH
      rainmaker provision                             # Ansible: packages, hugepages, DPDK
      rainmaker testbed down                          # removes all of it

    For real hardware, write an inventory (see orchestrator/inventory/examples/rack1.yaml),
    check it with `rainmaker inventory check FILE`, and pass it with -i.
    """


# -- testbed -------------------------------------------------------------------------


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
def testbed_up(clients: int, workers: int, slot: int | str, link_delay_us: float) -> None:
    """Build an emulated testbed: one network namespace per host and one for the switch,
    veth data links host <-> switch, a management bridge, an sshd per machine with pinned
    host keys.

    Progress goes to stderr; stdout gets one line, `inventory: PATH`, the inventory it
    wrote. While it is the only testbed up it is every other command's default
    inventory; with several up, commands need -i PATH (or RAINMAKER_INVENTORY)."""
    from .testbed.emulated import EmulatedTestbed, up_in_free_slot

    def log(m: str) -> None:
        err_console.print(f"[dim]·[/] {m}")

    inv = (
        up_in_free_slot(clients, workers, link_delay_us=link_delay_us, log=log)
        if slot == "free"
        else EmulatedTestbed(slot).up(clients, workers, link_delay_us=link_delay_us, log=log)
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
    from .testbed.emulated import EmulatedTestbed

    if inv_path is not None:
        from .inventory import load

        slot = _slot_of(load(inv_path), inv_path, slot)
    EmulatedTestbed(slot or 0).down(log=lambda m: console.print(f"[dim]·[/] {m}"))


def _slot_of(inv, path: str, slot: int | None) -> int:
    """The slot of the emulated testbed that wrote inventory `inv`, refusing any other."""
    from .errors import UsageError
    from .testbed import state

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

    from .testbed.emulated import EmulatedTestbed

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
    if any(r["sshd"] != "up" for r in st["machines"]):
        sys.exit(1)


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

    from .errors import UsageError
    from .testbed import cpu
    from .testbed.emulated import EmulatedTestbed

    tb = EmulatedTestbed(slot)
    st = tb.status()
    if not st["up"]:
        raise UsageError(f"no emulated testbed in slot {slot}", fix="bring one up with `rainmaker testbed up`")
    usage = cpu.measure({m["name"]: m["netns"] for m in st["machines"]}, seconds)
    rows = usage if threads else cpu.by_process(usage)
    total = sum(u.share for u in rows)
    if as_json:
        click.echo(json.dumps({"seconds": seconds, "total_share": total, "rows": [u.__dict__ for u in rows]}, indent=1))
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


# -- inventory -----------------------------------------------------------------------


@cli.group()
def inventory() -> None:
    """Check and export testbed inventories."""


@inventory.command("check")
@click.argument("file")  # the loader says what is wrong with a folder, with a fix
def inventory_check(file: str) -> None:
    """Validate FILE: types, unknown keys, duplicates (names, MACs, IPs, ports), cabling,
    workers without cores. Every problem is named by file, line and field, with a fix."""
    from .inventory import load, warnings

    inv = load(file)
    for w in warnings(inv, Path(file).parent):
        err_console.print(Text("warning: ", style="yellow") + Text(w.render(file)))
    console.print(
        f"{file}: ok: switch {inv.switch.name} ({inv.switch.kind}, {len(inv.switch.ports)} ports), "
        f"{len(inv.clients)} client(s), {len(inv.workers)} worker(s)"
    )


@inventory.command("export")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--format", "fmt", type=click.Choice(["ansible"]), default="ansible", show_default=True)
def inventory_export(inv_path: str | None, fmt: str) -> None:
    """Print the inventory in another tool's format (Ansible's YAML inventory)."""
    from .inventory.ansible import export_yaml

    click.echo(export_yaml(_inventory(inv_path)), nl=False)


# -- exec ----------------------------------------------------------------------------


@cli.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--role", type=click.Choice(["client", "worker", "switch"]), help="only machines of this role")
@click.option("--host", "hosts", multiple=True, help="only this machine (repeatable)")
@click.option("--timeout", type=float, default=60, show_default=True, help="seconds per host")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(
    inv_path: str | None, role: str | None, hosts: tuple[str, ...], timeout: float, command: tuple[str, ...]
) -> None:
    """Run COMMAND on every machine (or a role / named hosts) over SSH, in parallel, and
    print each host's output and exit status. Put `--` before COMMAND:

    \b
      rainmaker exec -- uname -n
      rainmaker exec --role worker -- 'ls $RAINMAKER_DEPLOY_ROOT'

    A single word is run by the remote shell (so pipes and variables work); several
    words are run as an argument list, each quoted."""
    from .remote import Group, targets

    inv = _inventory(inv_path)
    tg = targets(inv, hosts=list(hosts) or None, role=role)
    t0 = time.monotonic()
    with Group(tg) as g:
        if len(command) == 1:
            results = g.run_shell(command[0], timeout=timeout, check=False)
        else:
            results = g.run(list(command), timeout=timeout, check=False)
    failed = 0
    for name, r in results.items():
        status = "[green]ok[/]" if r.ok else f"[red]{r.error or f'exit {r.exit_code}'}[/]"
        console.print(f"[bold]{name}[/] ({r.duration_s:.2f} s) {status}")
        for line in r.stdout.rstrip("\n").splitlines():
            console.print(f"  {line}", markup=False)
        for line in r.stderr.rstrip("\n").splitlines():
            err_console.print(f"  [yellow]{name}[/] stderr: {line}", markup=True)
        failed += not r.ok
    console.print(f"{len(results) - failed}/{len(results)} hosts ok in {time.monotonic() - t0:.2f} s")
    if failed:
        sys.exit(1)


# -- provision -----------------------------------------------------------------------


@cli.command()
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--check", is_flag=True, help="dry run: report what would change, change nothing")
@click.option(
    "--tags",
    help="only roles/tasks with these tags (comma-separated): common, hugepages, dpdk_host, "
    "roce, deploy, tofino_sde, switchd",
)
@click.option("--limit", help="only these hosts or groups (Ansible pattern), e.g. workers")
@click.option(
    "--verify",
    is_flag=True,
    help="check that every machine is in the state provisioning leaves it in (playbooks/verify.yml); changes nothing",
)
def provision(inv_path: str | None, check: bool, tags: str | None, limit: str | None, verify: bool) -> None:
    """Provision the testbed with Ansible (playbooks/site.yml). Hosts: common (packages,
    deploy root), hugepages, dpdk_host (DPDK 22.11, the NIC, CPU isolation checks), roce
    (RoCEv2 on workers' ConnectX), deploy (binaries and agents). Switch: common,
    hugepages, tofino_sde (SDE checks, the program compiled and installed, bf_switchd as
    a service, ports up). Idempotent: a second run changes nothing.

    \b
    --check    dry run: what would change, and what hardware or vendor software each
               machine lacks (exit status 1 if anything is missing)
    --verify   assert that the machines are provisioned (nothing changes)"""
    from .provision import SITE, VERIFY
    from .provision import provision as run_provision

    if check and verify:
        raise click.UsageError("--check and --verify are two different runs: give one")
    inv = _inventory(inv_path)
    report = run_provision(
        inv, check=check, tags=tags.split(",") if tags else None, limit=limit, playbook=VERIFY if verify else SITE
    )
    console.print(Text(report.summary()))
    if report.missing:
        sys.exit(1)


# -- switch --------------------------------------------------------------------------


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
    help="P4 program to run: rain, r2p2, racksched, draconis or pallas (default: the inventory's switch.program, rain)",
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
    from . import switchd

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
    from . import switchd

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

    from . import switchd

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
    if not st.answers:
        console.print(f"  BFRuntime {st.bfrt}: [red]no answer[/]")
        if st.error:
            console.print(Text("  " + st.error.replace("\n", "\n  ")))
        return
    console.print(f"  BFRuntime {st.bfrt}: program [bold]{st.program}[/]")
    up = sum(p["up"] for p in st.ports.values())
    console.print(f"  ports: {up} of {len(st.ports)} up")
    for dev, p in st.ports.items():
        state = "[green]up[/]" if p["up"] else ("[red]down[/]" if p["enabled"] else "[yellow]disabled[/]")
        speed = (p["speed"] or "").removeprefix("BF_SPEED_")
        console.print(f"    {st.names.get(dev, '?'):>5} dev_port {dev:<3} {speed:>5} {state}")


@switch_group.command("tables")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def switch_tables(inv_path: str | None, as_json: bool) -> None:
    """Print every table of the running program (and $PORT, $pre.mgid, $pre.node) with
    its entries and default action."""
    import json

    from . import switchd

    with switchd.connect(_inventory(inv_path)) as client:
        data = switchd.tables(client)
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

    from . import switchd

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


# -- experiments: plan, run, analyze, plot, report (orchestrator/cli_experiment.py) ----

from .cli_experiment import register as _register_experiments  # noqa: E402

_register_experiments(cli, console)

from .cli_simulate import register as _register_simulate  # noqa: E402

_register_simulate(cli, console)

from .cli_cloudlab import register as _register_cloudlab  # noqa: E402

_register_cloudlab(cli, console, err_console)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stop_as_ctrl_c(signum: int, _frame) -> None:
    """SIGTERM (`kill`, a job's time limit, systemd) or SIGHUP (the terminal closed) stops
    a command as Ctrl-C does: the run marks its point todo, stops the remote processes,
    writes its log and report. Later stop signals are ignored so that clean-up finishes
    (SIGKILL still ends it)."""
    for s in _STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    stopped_by.append(signum)
    try:
        err_console.print(f"{signal.Signals(signum).name}: stopping as for Ctrl-C")
    except OSError:  # SIGHUP: the terminal may be gone
        pass
    raise KeyboardInterrupt


def main() -> None:
    for s in _STOP_SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:  # nohup's SIG_IGN stays ignored
            signal.signal(s, _stop_as_ctrl_c)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # Ctrl-C where no command says what it interrupted
        err_console.print("interrupted")
        sys.exit(interrupted_status())
    except click.exceptions.ClickException as e:
        e.show()
        sys.exit(2)
    except Interrupted as e:
        err_console.print(Text("interrupted: ", style="bold yellow") + Text(e.render()))
        sys.exit(interrupted_status())
    except RainmakerError as e:  # switch/'s SwitchError is one of them
        if os.environ.get("RAINMAKER_DEBUG"):
            import traceback

            traceback.print_exc()
        err_console.print(Text("error: ", style="bold red") + Text(e.render()))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(interrupted_status())
    except OSError as e:  # the machine's, not rainmaker's: a full disk, a read-only or vanished folder
        if os.environ.get("RAINMAKER_DEBUG"):
            import traceback

            traceback.print_exc()
        where = f"{e.filename}: " if e.filename else ""
        err_console.print(
            Text("error: ", style="bold red")
            + Text(f"{where}{e.strerror or e}\n  fix: check that path, its permissions and the free space")
        )
        sys.exit(1)
