"""The `rainmaker` command group, its consoles and its entry point.

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

import click
from rich.console import Console
from rich.text import Text

from ..errors import Interrupted, RainmakerError, interrupted_status, stopped_by

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

INVENTORY_HELP = (
    "testbed inventory (YAML). Default: $RAINMAKER_INVENTORY, else the emulated testbed that is up (if only one is)"
)


def _inventory(path: str | None):
    from ..inventory import load, resolve_path

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
