"""The CloudLab verbs that talk to CloudLab's portal: `rainmaker cloudlab start`,
`status`, `extend` and `terminate` (orchestrator/cloudlab/portal.py, lifecycle.py).
`profile` and `import`, which work on files, are in cloudlab.py."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import click
from rich.text import Text

from .app import console, err_console
from .cloudlab import _import_manifest, cloudlab

CERT_ENV = "RAINMAKER_CLOUDLAB_CERT"
PASSPHRASE_ENV = "RAINMAKER_CLOUDLAB_PASSPHRASE"
PORTAL_ENV = "RAINMAKER_CLOUDLAB_PORTAL"
PORTAL_CA_ENV = "RAINMAKER_CLOUDLAB_PORTAL_CA"
_NAME_RE = re.compile(r"^[A-Za-z][-A-Za-z0-9]{0,15}$")  # the portal's experiment names: 16 characters at most
_PROJECT_RE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_]{0,47}$")


def _portal_options(f):
    """--cert, --portal, --portal-ca: the user's portal certificate and the portal."""
    from ..cloudlab.portal import DEFAULT_PORTAL

    f = click.option(
        "--portal-ca",
        "portal_ca",
        envvar=PORTAL_CA_ENV,
        show_envvar=True,
        type=click.Path(dir_okay=False),
        default=None,
        help="CA certificate (PEM) that signed the portal's server certificate, instead of the system's CAs "
        "(the server is always verified)",
    )(f)
    f = click.option(
        "--portal",
        "portal_url",
        envvar=PORTAL_ENV,
        show_envvar=True,
        default=DEFAULT_PORTAL,
        show_default=True,
        help="the portal's XML-RPC address (the one CloudLab's portal-tools use)",
    )(f)
    f = click.option(
        "--cert",
        envvar=CERT_ENV,
        show_envvar=True,
        type=click.Path(dir_okay=False),
        default=str(Path("~/.ssl/cloudlab.pem")),
        show_default=True,
        help="your portal certificate: the PEM (certificate and encrypted key) the portal's Download Credentials "
        f"gives. Its passphrase comes from ${PASSPHRASE_ENV}, else a prompt; never from the command line",
    )(f)
    return f


def _connect(cert: str, portal_url: str, portal_ca: str | None):
    """A Portal for these options; asks for the passphrase when the key has one."""
    from ..cloudlab.portal import CertificateError, Portal, Secret, key_is_encrypted

    path = Path(cert).expanduser()
    secret = None
    if key_is_encrypted(path):
        given = os.environ.get(PASSPHRASE_ENV)
        if given is not None:
            secret = Secret(given)
        elif sys.stdin.isatty():
            secret = Secret(
                click.prompt(f"passphrase of {path}", hide_input=True, err=True, default="", show_default=False)
            )
        else:
            raise CertificateError(
                f"portal certificate {path}: its key is encrypted and no passphrase was given",
                fix=f"set {PASSPHRASE_ENV} (not on a command line others can read), or run in a terminal to be asked",
            )
    return Portal(path, secret, url=portal_url, ca=Path(portal_ca).expanduser() if portal_ca else None)


def _expires(st) -> str:
    from ..cloudlab.lifecycle import duration

    if st.expires is None:
        return "expiration unknown"
    left = st.remaining_s()
    return f"expires {st.expires:%Y-%m-%d %H:%M} UTC ({'in ' + duration(left) if left and left > 0 else 'passed'})"


@cloudlab.command("start")
@click.argument("profile")
@click.option("--project", required=True, help="the CloudLab project the experiment belongs to")
@click.option("--name", required=True, help="the experiment's name (letters, digits, '-'; at most 16)")
@click.option(
    "--hours",
    type=click.IntRange(1, 7 * 24),
    default=16,
    show_default=True,
    help="how long it runs before it expires (`cloudlab extend` adds more)",
)
@click.option("--aggregate", default=None, metavar="URN", help="the cluster to run on (default: the profile's)")
@click.option(
    "--map", "map_path", type=click.Path(dir_okay=False), help="the import's map file (see `cloudlab import`)"
)
@click.option("--switch", "switch_node", help="the Tofino node's client_id (see `cloudlab import`)")
@click.option(
    "--network", type=click.Choice(["tofino", "lan"]), default=None, help="the hosts' network (see `cloudlab import`)"
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), default="cloudlab.yaml", show_default=True, help="the inventory"
)
@click.option(
    "--manifest",
    "manifest_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="where the portal's manifest is kept (default: beside the inventory, <output>.manifest.xml)",
)
@click.option("--force", is_flag=True, help="overwrite the inventory and the manifest if they exist")
@click.option("--attach", is_flag=True, help="the experiment is started already: wait for it and import it")
@click.option(
    "--wait-minutes",
    type=click.FloatRange(0.01, 24 * 60),
    default=60.0,
    show_default=True,
    help="give up waiting for the experiment after this long (it keeps starting on CloudLab)",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(0.01, 600),
    default=10.0,
    show_default=True,
    help="first pause between status checks; pauses grow by half up to 60 s",
)
@click.option(
    "--interactive/--no-interactive", default=None, help="ask for what the map misses (see `cloudlab import`)"
)
@_portal_options
def start_cmd(
    profile: str,
    project: str,
    name: str,
    hours: int,
    aggregate: str | None,
    map_path: str | None,
    switch_node: str | None,
    network: str | None,
    output: str,
    manifest_out: str | None,
    force: bool,
    attach: bool,
    wait_minutes: float,
    poll_seconds: float,
    interactive: bool | None,
    cert: str,
    portal_url: str,
    portal_ca: str | None,
) -> None:
    """Start an experiment from PROFILE (PROJECT,NAME as the portal lists it, or its
    UUID), wait until it is ready, and import its manifest into an inventory.

    \b
      export RAINMAKER_CLOUDLAB_CERT=~/cloudlab.pem   # Download Credentials, in the portal
      rainmaker cloudlab start rainproj,rain-tofino --project rainproj --name rain-1 \\
          --hours 8 --map map.yaml -o cloudlab.yaml
      rainmaker provision --check -i cloudlab.yaml

    The passphrase of the certificate's key is asked for (or read from
    $RAINMAKER_CLOUDLAB_PASSPHRASE); it is never written anywhere. While the
    portal provisions the nodes, each change of status is printed; the manifest is
    kept beside the inventory (<output>.manifest.xml), then imported exactly as
    `rainmaker cloudlab import MANIFEST --map MAP` does. Ctrl-C stops the wait, not
    the experiment: `--attach` with the same options picks it up again.

    Failures are the portal's words: a quota used up, not enough free nodes, a
    profile that does not run, a name already taken. The experiment then stays (or
    never was): `rainmaker cloudlab terminate PROJECT,NAME` frees it.
    """
    from ..cloudlab import lifecycle
    from ..cloudlab import mapping as mapping_mod
    from ..cloudlab.portal import check_experiment
    from ..errors import UsageError, interruptible

    check_experiment(profile, "PROFILE")
    if not _PROJECT_RE.match(project):
        raise UsageError(f"--project '{project}' is not a project name", fix="give the project as the portal names it")
    if not _NAME_RE.match(name):
        raise UsageError(
            f"--name '{name}' cannot name an experiment",
            fix="use letters, digits and '-', starting with a letter, 16 characters at most (e.g. rain-1)",
        )
    out = Path(output)
    man_path = Path(manifest_out) if manifest_out else out.with_name(out.stem + ".manifest.xml")
    for p, opt in ((out, "-o"), (man_path, "--manifest")):
        if p.exists() and not force:
            raise UsageError(f"{p} exists", fix=f"pass --force to overwrite it, or {opt} another file")
    if map_path:
        mapping_mod.load(map_path)  # a bad map is refused before anything starts on CloudLab
    experiment = f"{project},{name}"
    portal = _connect(cert, portal_url, portal_ca)

    if not attach:
        said = portal.start(profile, project, name, hours, aggregate)
        err_console.print(f"{experiment}: started from profile {profile} for {hours} h", markup=False)
        for line in said.strip().splitlines()[:5]:
            err_console.print(Text("  portal: " + line))
    redo = shlex.join(
        ["rainmaker", "cloudlab", "start", profile, "--project", project, "--name", name, "--attach"]
        + [w for o, v in (("--map", map_path), ("-o", output)) if v for w in (o, v)]
    )
    with interruptible(
        f"waiting for {experiment}",
        "the experiment keeps starting on CloudLab",
        redo + "` (or free it: `rainmaker cloudlab terminate " + experiment,
    ):
        st = lifecycle.wait_ready(
            portal,
            experiment,
            deadline_s=wait_minutes * 60,
            backoff=lifecycle.Backoff(first=poll_seconds, cap=max(60.0, poll_seconds)),
            say=lambda m: err_console.print(m, markup=False),
        )
        aggregate_urn, xml = lifecycle.pick_manifest(portal.manifests(experiment), experiment)
    lifecycle.write_private(man_path, xml)
    err_console.print(f"{experiment}: ready, {_expires(st)}; manifest of {aggregate_urn} in {man_path}", markup=False)
    err_console.print(
        f"  (should the import stop, fix the map and run: rainmaker cloudlab import {man_path}"
        + (f" --map {map_path}" if map_path else " --map MAP")
        + f" -o {output} --force)",
        markup=False,
    )
    _import_manifest(str(man_path), map_path, switch_node, network, output, True, interactive)
    err_console.print(
        f"next: rainmaker provision --check -i {output}; keep it alive during a run: rainmaker cloudlab extend "
        f"{experiment} --keep-alive --inventory {output} --reason '...'; free it: rainmaker cloudlab terminate "
        f"{experiment}",
        markup=False,
    )


@cloudlab.command("status")
@click.argument("experiment")
@click.option("--json", "as_json", is_flag=True, help="print the portal's status object as JSON")
@_portal_options
def status_cmd(experiment: str, as_json: bool, cert: str, portal_url: str, portal_ca: str | None) -> None:
    """Say EXPERIMENT's status (PROJECT,NAME or UUID): provisioning, ready, failed...,
    and when it expires.

    \b
      rainmaker cloudlab status rainproj,rain-1
    """
    import json

    from ..cloudlab.portal import check_experiment

    check_experiment(experiment)
    st = _connect(cert, portal_url, portal_ca).status(experiment)
    if as_json:
        click.echo(json.dumps(st.raw, indent=2, sort_keys=True, default=str))
        return
    console.print(f"{experiment}: {st.status}, {_expires(st)}" + (f", uuid {st.uuid}" if st.uuid else ""), markup=False)
    more = st.details()
    if more:
        console.print(f"  {more}", markup=False)


@cloudlab.command("extend")
@click.argument("experiment")
@click.option(
    "--hours",
    type=click.IntRange(1, 7 * 24),
    default=None,
    help="hours to add (by hand: required; with --keep-alive: each extension, default 4)",
)
@click.option("--reason", default=None, help="why you need it: the portal requires it, and administrators read it")
@click.option(
    "--keep-alive",
    is_flag=True,
    help="keep extending whenever the time left falls below --margin-hours, until the run on --inventory ends "
    "(or Ctrl-C)",
)
@click.option(
    "--inventory",
    "inv_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="with --keep-alive: stop when no `rainmaker run` (or calibrate) on this inventory is running on this "
    "machine; without it, keep alive until Ctrl-C",
)
@click.option(
    "--margin-hours",
    type=click.FloatRange(0.01, 7 * 24),
    default=2.0,
    show_default=True,
    help="with --keep-alive: extend when less than this is left",
)
@click.option(
    "--interval-seconds",
    type=click.FloatRange(0.01, 24 * 3600),
    default=600.0,
    show_default=True,
    help="with --keep-alive: time between checks",
)
@click.option(
    "--checks",
    type=click.IntRange(1),
    default=None,
    help="with --keep-alive: stop after this many checks (default: no limit)",
)
@_portal_options
def extend_cmd(
    experiment: str,
    hours: int | None,
    reason: str | None,
    keep_alive: bool,
    inv_path: str | None,
    margin_hours: float,
    interval_seconds: float,
    checks: int | None,
    cert: str,
    portal_url: str,
    portal_ca: str | None,
) -> None:
    """Extend EXPERIMENT (PROJECT,NAME or UUID) by --hours, saying why (--reason).

    \b
      rainmaker cloudlab extend rainproj,rain-1 --hours 8 --reason "Rain fig. 6 sweep"

    With --keep-alive it watches instead: every --interval-seconds it reads the time
    left and extends by --hours (default 4) once less than --margin-hours remains,
    for as long as a run on --inventory is going (start the run first):

    \b
      rainmaker run experiments/fig6.yaml -i cloudlab.yaml &
      rainmaker cloudlab extend rainproj,rain-1 --keep-alive --inventory cloudlab.yaml \\
          --reason "Rain fig. 6 sweep, about 10 h"

    An extension the portal does not grant at once (it needs an administrator) is
    said in the portal's words; keep-alive asks again at its next check. Ctrl-C stops
    keep-alive; the experiment stays until it expires.
    """
    from ..cloudlab import lifecycle
    from ..cloudlab.portal import check_experiment
    from ..errors import UsageError, interruptible

    check_experiment(experiment)
    if not reason or not reason.strip():
        raise UsageError(
            "an extension needs a reason",
            fix='add --reason "..." (what runs, how long): the portal requires it and its administrators read it',
        )
    if not keep_alive:
        for opt, given in (("--inventory", inv_path), ("--checks", checks)):
            if given is not None:
                raise UsageError(f"{opt} goes with --keep-alive", fix="add --keep-alive, or drop " + opt)
        if hours is None:
            raise UsageError("how many hours?", fix="add --hours N (or --keep-alive to extend as a run needs)")
        portal = _connect(cert, portal_url, portal_ca)
        said = portal.extend(experiment, hours, reason)
        st = portal.status(experiment)
        console.print(f"{experiment}: extension of {hours} h asked; {_expires(st)}", markup=False)
        for line in said.strip().splitlines()[:5]:
            err_console.print(Text("  portal: " + line))
        return

    running = lambda: True  # noqa: E731  until Ctrl-C (or --checks)
    if inv_path is not None:
        inv = Path(inv_path)
        if not inv.is_file():
            raise UsageError(f"--inventory {inv}: no such file", fix="give the inventory the run uses (-i of the run)")
        if not lifecycle.runs_on(inv):
            raise UsageError(
                f"no `rainmaker run` (or calibrate) on {inv} is running on this machine",
                fix="start the run first (another terminal, or with &), then keep-alive; or drop --inventory to keep "
                "the experiment alive until Ctrl-C",
            )
        running = lambda: bool(lifecycle.runs_on(inv))  # noqa: E731
    portal = _connect(cert, portal_url, portal_ca)
    keeper = lifecycle.KeepAlive(
        portal,
        experiment,
        hours=hours or 4,
        reason=reason,
        margin_s=margin_hours * 3600,
        interval_s=interval_seconds,
        running=running,
        say=lambda m: err_console.print(m, markup=False),
    )
    err_console.print(
        f"{experiment}: keep-alive, extending by {keeper.hours} h when less than {margin_hours:g} h is left; "
        + (f"until the run on {inv_path} ends" if inv_path else "until Ctrl-C")
        + (f" (at most {checks} checks)" if checks else ""),
        markup=False,
    )
    with interruptible(
        f"keep-alive of {experiment}",
        "the experiment stays until it expires",
        "rainmaker cloudlab extend " + experiment + " --keep-alive ...",
    ):
        n = keeper.loop(max_checks=checks)
    console.print(f"{experiment}: keep-alive ended, {n} extension(s) granted", markup=False)


@cloudlab.command("terminate")
@click.argument("experiment")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@_portal_options
def terminate_cmd(experiment: str, yes: bool, cert: str, portal_url: str, portal_ca: str | None) -> None:
    """Terminate EXPERIMENT (PROJECT,NAME or UUID): its nodes are freed and their disks
    erased. Asks first, unless --yes.

    \b
      rainmaker cloudlab terminate rainproj,rain-1
    """
    from ..cloudlab.portal import check_experiment
    from ..errors import UsageError

    check_experiment(experiment)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(
                f"terminating {experiment} erases its nodes, and there is no terminal to confirm it",
                fix="add --yes when you mean it",
            )
        if not click.confirm(f"terminate {experiment}? Its nodes are freed and their disks erased", err=True):
            err_console.print("not terminated")
            return
    portal = _connect(cert, portal_url, portal_ca)
    said = portal.terminate(experiment)
    console.print(f"{experiment}: terminated", markup=False)
    for line in said.strip().splitlines()[:5]:
        err_console.print(Text("  portal: " + line))
