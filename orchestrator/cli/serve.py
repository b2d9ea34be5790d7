"""`rainmaker serve`: the results browser (orchestrator/serve)."""

from __future__ import annotations

from pathlib import Path

import click

from .app import cli, console, err_console


@cli.command("serve")
@click.argument("results_root", default="results", metavar="[RESULTS_ROOT]")
@click.option("--host", default="127.0.0.1", show_default=True, help="the address to listen on")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="the port (0: any free one)"
)
def serve_cmd(results_root: str, host: str, port: int) -> None:
    """Browse the runs under RESULTS_ROOT (default ./results) in a web browser: every
    run with its testbed, k, valid points and claims; a run's report, figures,
    verdicts, the model beside each point, its provenance, and the progress of a
    run still going; runs of one spec overlaid.

    \b
    Read-only: it reads run folders, never changes or starts a run. It listens on
    127.0.0.1 only, unless --host says otherwise (anyone who can reach that address
    then reads every run, its manifest and inventory included).
      rainmaker serve                       # http://127.0.0.1:8765
      rainmaker serve results/sim --port 0  # any free port, printed"""
    from ..serve import make_app
    from ..serve.server import is_local, serve

    root = Path(results_root)
    if not root.is_dir():
        err_console.print(f"note: {root} does not exist yet: runs appear once `rainmaker run` writes them")
    if not is_local(host):
        err_console.print(
            f"[bold yellow]warning:[/] listening on {host}: anyone who can reach it reads every run under {root} "
            "(manifests and inventories included), with no password; 127.0.0.1 keeps it to this machine",
            markup=True,
        )

    def announce(url: str) -> None:
        console.print(f"serving {root.resolve()} at [bold]{url}/[/] (read-only; Ctrl-C stops)", markup=True)

    serve(make_app(root), host, port, announce)
