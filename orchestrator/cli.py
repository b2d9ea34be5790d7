"""The `rainmaker` command line.

Every verb reads its testbed from an inventory: `-i FILE`, else $RAINMAKER_INVENTORY,
else the emulated testbed that `rainmaker testbed up` built. Errors print as one
readable message (file, field, fix) with exit status 2 for bad input and 1 for
failures; RAINMAKER_DEBUG=1 shows the traceback too.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .errors import RainmakerError

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

INVENTORY_HELP = ("testbed inventory (YAML). Default: $RAINMAKER_INVENTORY, else the emulated "
                  "testbed that is up")


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
    return click.option("--slot", type=click.IntRange(0, 15), default=0, show_default=True,
                        help="which emulated testbed: slots are independent (own namespaces, addresses 10.79.SLOT.0/24)")(f)


@testbed.command("up")
@click.option("--clients", type=click.IntRange(1, 14), default=1, show_default=True, help="client hosts")
@click.option("--workers", type=click.IntRange(1, 14), default=2, show_default=True, help="worker hosts")
@_slot_option
def testbed_up(clients: int, workers: int, slot: int) -> None:
    """Build an emulated testbed: one network namespace per host and one for the switch,
    veth data links host <-> switch, a management bridge, an sshd per machine with pinned
    host keys. Prints the path of the inventory it writes, which becomes the default
    inventory of every other command while the testbed is up."""
    from .testbed.emulated import EmulatedTestbed

    inv = EmulatedTestbed(slot).up(clients, workers, log=lambda m: console.print(f"[dim]·[/] {m}"))
    console.print(f"inventory: [bold]{inv}[/]")


@testbed.command("down")
@_slot_option
def testbed_down(slot: int) -> None:
    """Remove the emulated testbed: processes, namespaces, links, routes, state. Safe to
    run twice, and after a half-finished or crashed `up`."""
    from .testbed.emulated import EmulatedTestbed

    EmulatedTestbed(slot).down(log=lambda m: console.print(f"[dim]·[/] {m}"))


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
        t.add_row(*(str(row[c]) for c in ("name", "role", "netns", "mgmt", "sshd", "data")),
                  style=None if row["sshd"] == "up" else "red")
    console.print(t)
    console.print(f"inventory: {st['inventory']}")
    if any(r["sshd"] != "up" for r in st["machines"]):
        sys.exit(1)


# -- inventory -----------------------------------------------------------------------

@cli.group()
def inventory() -> None:
    """Check and export testbed inventories."""


@inventory.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def inventory_check(file: str) -> None:
    """Validate FILE: types, unknown keys, duplicates (names, MACs, IPs, ports), cabling,
    workers without cores. Every problem is named by file, line and field, with a fix."""
    from .inventory import load, warnings

    inv = load(file)
    for w in warnings(inv, Path(file).parent):
        err_console.print(Text("warning: ", style="yellow") + Text(w.render(file)))
    console.print(f"{file}: ok: switch {inv.switch.name} ({inv.switch.kind}, {len(inv.switch.ports)} ports), "
                  f"{len(inv.clients)} client(s), {len(inv.workers)} worker(s)")


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
def exec_(inv_path: str | None, role: str | None, hosts: tuple[str, ...], timeout: float, command: tuple[str, ...]) -> None:
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
@click.option("--tags", help="only roles/tasks with these tags (comma-separated), e.g. dpdk,hugepages")
@click.option("--limit", help="only these hosts or groups (Ansible pattern), e.g. workers")
def provision(inv_path: str | None, check: bool, tags: str | None, limit: str | None) -> None:
    """Provision the testbed with Ansible (playbooks/site.yml): base packages and deploy
    roots, hugepages, DPDK 22.11. Idempotent: a second run changes nothing."""
    from .provision import provision as run_provision

    inv = _inventory(inv_path)
    report = run_provision(inv, check=check, tags=tags.split(",") if tags else None, limit=limit)
    console.print(Text(report.summary()))


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except click.exceptions.ClickException as e:
        e.show()
        sys.exit(2)
    except RainmakerError as e:
        if os.environ.get("RAINMAKER_DEBUG"):
            import traceback

            traceback.print_exc()
        err_console.print(Text("error: ", style="bold red") + Text(e.render()))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
