"""`rainmaker preflight`: what an experiment needs of each machine, checked (orchestrator/preflight)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.text import Text

from .app import INVENTORY_HELP, cli, console

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}


def lines(report) -> list[Text]:
    """The checks, machine by machine: status, needed, name, what was found; the fix below."""
    out: list[Text] = [Text(report.summary(), style="bold")]
    machine = None
    for c in report.checks:
        if c.machine != machine:
            machine = c.machine
            out.append(Text(f"{c.machine} ({c.role})", style="bold"))
        row = Text("  ")
        row.append(f"{c.status:<5}", style=STYLE[c.status])
        row.append(f" {'needed' if c.needed else '':<6} {c.name:<13} {c.detail}")
        out.append(row)
        if c.fix and c.status in ("warn", "fail"):
            out.append(Text(f"{'':<29}fix: {c.fix}", style="dim" if c.status == "warn" else ""))
    return out


@cli.command("preflight")
@click.argument("spec", required=False)
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("-o", "--output", metavar="FILE", help="also write the report as JSON (preflight.json's format)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON instead of the list of checks")
def preflight_cmd(spec: str | None, inv_path: str | None, output: str | None, as_json: bool) -> None:
    """Check every machine for what SPEC needs (without SPEC: the main job, Rain).

    \b
    One SSH command per machine, all at once: the kernel and its options (KCM, TLS,
    RDMA), huge pages, DPDK and the data NIC's driver, RoCE (DSCP, PFC, iCRC), the
    NIC's timestamping, the clock source, the CPU governor and isolated cores, and on a
    Tofino the SDE and bf_switchd. Each check is ok, warn, fail or n/a, and needed or
    not by SPEC; each problem names its fix. Exit status 1 when a needed check fails
    (`rainmaker run` then refuses to start; docs/preflight.md lists the checks)."""
    from ..experiment import handler_alone
    from ..experiment.spec import load as load_spec
    from ..inventory import load as load_inv
    from ..inventory import resolve_path
    from ..preflight import PreflightFailed, preflight

    inv = load_inv(resolve_path(inv_path))
    s = None if spec is None or handler_alone.is_handler_spec(spec) else load_spec(spec)
    report = preflight(inv, s)
    if output:
        report.write(Path(output))
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=1))
    else:
        for line in lines(report):
            console.print(line)
        if output:
            console.print(f"report: {output}")
    if report.blocking:
        raise PreflightFailed(report, what=report.needs["source"])
