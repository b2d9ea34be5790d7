"""The sharing verbs of the CLI: export (a run folder as an RO-Crate zip) and import."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import interruptible
from .app import cli, console


@cli.command("export")
@click.argument("run_dir")
@click.option("-o", "--output", "out", help="the zip to write [default: ./<experiment>-<timestamp>.crate.zip]")
@click.option(
    "--author",
    "authors",
    multiple=True,
    help='who made the run: "Name" or "Name <ORCID or URL>"; repeat for several [default: a placeholder]',
)
@click.option(
    "--license", "license_", default="CC-BY-4.0", show_default=True, help="the crate's license: an SPDX id or a URL"
)
@click.option(
    "--exclude", multiple=True, help="leave out the run files matching this glob, e.g. 'points/*/*/*/trace.csv'"
)
@click.option("--force", is_flag=True, help="replace the zip if it exists")
def export_cmd(
    run_dir: str, out: str | None, authors: tuple[str, ...], license_: str, exclude: tuple[str, ...], force: bool
) -> None:
    """Pack RUN_DIR as a Workflow Run RO-Crate: one zip, ready for Zenodo.

    Every file of the run goes in (raw measurements, analysis, figures, report), with
    the spec and the testbed's inventory; keys, key paths, pinned host keys,
    passwords, tokens and certificates are removed first (docs/sharing.md)."""
    from ..crate.export import export_run

    with interruptible(
        f"the export of {run_dir}", "the run folder is untouched and no zip was written", f"rainmaker export {run_dir}"
    ):
        done = export_run(run_dir, out, authors=authors, license=license_, exclude=exclude, force=force)
    console.print(f"{done.path}: {done.files} files of the run, {done.bytes / 1e6:,.1f} MB before compression")
    fields = done.scrubbed["fields"]
    for file, paths in fields.items():
        console.print(f"  removed from {file}: {', '.join(paths)}")
    for file, n in done.scrubbed["values_replaced"].items():
        console.print(f"  removed from {file}: {n} occurrence(s) of a removed value")
    for e in done.left_out:
        console.print(f"  left out {e['path']}: {e['why']}")
    if not authors:
        console.print('  author: a placeholder (give --author "Name <ORCID>" before you publish it)')


@cli.command("import")
@click.argument("crate")
@click.option("--results", default="results", show_default=True, help="where runs are kept")
@click.option("--force", is_flag=True, help="replace a run folder of the same experiment and timestamp")
def import_cmd(crate: str, results: str, force: bool) -> None:
    """Lay CRATE (a zip `rainmaker export` wrote, or its unpacked folder) out as a run
    folder, results/<experiment>/<timestamp>/, for report, compare and serve."""
    from ..crate.importer import import_crate

    with interruptible(
        f"the import of {crate}", "nothing was written to the results folder", f"rainmaker import {crate}"
    ):
        done = import_crate(Path(crate), results, force=force)
    what = "replaced" if done.replaced else "imported"
    console.print(f"{done.path}: {what}, {done.files} files of the run")
    console.print(f"  rainmaker report {done.path}")
