"""The `rainmaker` command line, one module per family of verbs.

Every verb reads its testbed from an inventory: `-i FILE`, else $RAINMAKER_INVENTORY,
else the emulated testbed that `rainmaker testbed up` built when it is the only one up
(with several up, it refuses and lists them rather than guess). Errors print as one
readable message (file, field, fix) with exit status 2 for bad input and 1 for
failures; RAINMAKER_DEBUG=1 shows the traceback too.

    app         the group, its consoles, main() (errors, Ctrl-C and stop signals)
    testbed     testbed up / down / status / cpu (the emulated testbed)
    hosts       inventory check / export, exec, provision
    switch      switch start / stop / status / tables / registers
    experiment  plan, run, calibrate, analyze, plot, report
    preflight   preflight (what a spec needs of each machine, checked)
    simulate    simulate, compare
    serve       serve (the results browser)
    crate       export, import (a run as an RO-Crate zip, to share)
    cloudlab    cloudlab profile / import (files)
    cloudlab_portal  cloudlab start / status / extend / terminate (the portal)
"""

from __future__ import annotations

from . import cloudlab, cloudlab_portal, crate, experiment, hosts, preflight, serve, simulate, switch, testbed  # noqa: F401  (their verbs join the group on import)
from .app import cli, console, err_console, main

__all__ = ["cli", "console", "err_console", "main"]
