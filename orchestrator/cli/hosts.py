"""`rainmaker inventory`, `exec` and `provision`: the machines an inventory names."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.text import Text

from .app import INVENTORY_HELP, _inventory, cli, console, err_console


@cli.group()
def inventory() -> None:
    """Check and export testbed inventories."""


@inventory.command("check")
@click.argument("file")  # the loader says what is wrong with a folder, with a fix
def inventory_check(file: str) -> None:
    """Validate FILE: types, unknown keys, duplicates (names, MACs, IPs, ports), cabling,
    workers without cores. Every problem is named by file, line and field, with a fix."""
    from ..inventory import load, warnings

    inv = load(file)
    for w in warnings(inv, Path(file).parent):
        err_console.print(Text("warning: ", style="yellow") + Text(w.render(file)))
    console.print(
        f"{file}: ok: "
        + (
            f"switch {inv.switch.name} ({inv.switch.kind}, {len(inv.switch.ports)} ports), "
            if inv.switch.programmable
            else f"network {inv.switch.name} (a plain LAN: no switch program), "
        )
        + f"{len(inv.clients)} client(s), {len(inv.workers)} worker(s)"
    )


@inventory.command("export")
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--format", "fmt", type=click.Choice(["ansible"]), default="ansible", show_default=True)
def inventory_export(inv_path: str | None, fmt: str) -> None:
    """Print the inventory in another tool's format (Ansible's YAML inventory)."""
    from ..inventory.ansible import export_yaml

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
    from ..remote import Group, targets

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
    a service, ports up). Idempotent: a second run changes nothing. On a terminal a bar
    counts the tasks done, with a rough ETA once a run of the same kind has counted them.

    \b
    --check    dry run: what would change, and what hardware or vendor software each
               machine lacks (exit status 1 if anything is missing)
    --verify   assert that the machines are provisioned (nothing changes)"""
    from ..provision import SITE, VERIFY
    from ..provision import provision as run_provision

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
