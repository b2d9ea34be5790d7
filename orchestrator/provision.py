"""Provision a testbed with Ansible: run playbooks/site.yml through ansible-runner.

One call, one run directory (ansible-runner's private data dir) under the testbed's
work folder, holding the exported inventory and runner's artifacts (the full event
log, for post-mortems). Runner's events feed two things (provision_events.py): a live
progress display (a bar of tasks with a rough ETA, the current play and task, per-host
counts; on a terminal only) and a `ProvisionReport`
(per-host counts, the tasks that changed something, or would in check mode, and the
duration). A
failed run raises `ProvisionError` naming every host and task that failed, with the
report attached as `error.report`.

Nothing printed comes from module arguments or raw output, and private keys are
redacted from every message we keep: the inventory names key files, never contents.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .deploy import ansible_vars as deploy_vars
from .errors import Interrupted, ProvisionError
from .inventory import Inventory
from .inventory.ansible import export_yaml
from .progress import Bar
from .provision_events import EventAggregator, HostCounts, ProvisionReport, TaskChange, failure_message, redact

PLAYBOOKS = Path(__file__).resolve().parent.parent / "playbooks"
SITE = PLAYBOOKS / "site.yml"
VERIFY = PLAYBOOKS / "verify.yml"  # each role's verify tasks: asserts only, changes nothing
ROLES = PLAYBOOKS / "roles"

REMOTE_TEMP = "/tmp/.ansible-rm"
CONTROL_PERSIST_S = 15  # short: `testbed down` and the next run should not find stale masters
KEEP_RUNS = 20  # run directories kept per testbed (older ones are pruned)
TASKS_FILE = "provision-tasks.json"  # tasks each kind of run started last time: the bar's total
TASK_STARTS = ("playbook_on_task_start", "playbook_on_handler_task_start")
DEPLOY_TAG = "deploy"  # the rainmaker_deploy role's tag (playbooks/hosts.yml, verify.yml)


# -- what a run produced ---------------------------------------------------------------


# -- runner events -> counts, changes, failures -------------------------------------


# -- running ansible-playbook --------------------------------------------------------------


def work_dir_for(inv: Inventory) -> Path:
    """Where runs of this testbed keep their state (control sockets, run directories)."""
    if inv.emulation is not None:
        # `testbed down` closes the ControlPersist masters it finds under ansible/cp.
        return Path(inv.emulation.state_dir) / "ansible"
    from .testbed import state

    candidates = [state.root() / "provision" / inv.name]
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    candidates.append(Path(xdg) / "rainmaker" / "provision" / inv.name)
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK | os.X_OK):
            return d
    raise ProvisionError(f"no writable work directory for provisioning (tried {', '.join(map(str, candidates))})", [])


def ansible_env(work: Path) -> dict[str, str]:
    """Environment of ansible-playbook: this venv's tools first, every folder Ansible writes under `work`."""
    venv_bin = str(Path(sys.executable).parent)
    path = [venv_bin] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    return {
        "PATH": os.pathsep.join(path),  # runner runs `ansible-playbook` from PATH
        "ANSIBLE_CONFIG": str(work / "ansible.cfg"),  # ours: no stray ./ansible.cfg or ~/.ansible.cfg
        "ANSIBLE_HOME": str(work / "home"),
        "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
        "ANSIBLE_REMOTE_TEMP": REMOTE_TEMP,
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp"),
        "ANSIBLE_SSH_ARGS": f"-C -o ControlMaster=auto -o ControlPersist={CONTROL_PERSIST_S}s",
        "ANSIBLE_ROLES_PATH": str(ROLES),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        # No -tt: in a pty the host's stderr joins the script's stdout, so a login shell's
        # warning (e.g. a `pyenv rehash` in ~/.bashrc losing a race) broke the probes' JSON.
        "ANSIBLE_SSH_USETTY": "False",
        "ANSIBLE_TIMEOUT": "15",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_INVENTORY_ENABLED": "yaml",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        # ansible-playbook imports some 600 modules: with no byte-code cache (a machine that
        # sets PYTHONDONTWRITEBYTECODE) each run compiled them again, 0.6-0.9 s of CPU
        "PYTHONDONTWRITEBYTECODE": "",
    }


_ANSIBLE_CFG = """\
# Written by rainmaker: every setting comes from the environment of the run
# (orchestrator/provision.py, ansible_env). This file only keeps other
# ansible.cfg files (./ansible.cfg, ~/.ansible.cfg, /etc/ansible) out.
[defaults]
"""


def _prepare(work: Path, check: bool) -> Path:
    for sub in ("home", "tmp", "cp", "runs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o700)
    (work / "ansible.cfg").write_text(_ANSIBLE_CFG)
    runs = work / "runs"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = runs / f"{stamp}-{'check' if check else 'apply'}-{os.getpid()}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = runs / f"{stamp}-{'check' if check else 'apply'}-{os.getpid()}-{n}"
    run_dir.mkdir(mode=0o700)
    old = sorted(p for p in runs.iterdir() if p.is_dir() and p != run_dir)
    for p in old[: max(0, len(old) - (KEEP_RUNS - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return run_dir


def _runner_output_tail(r: Any, n: int = 15) -> str:
    try:
        text = r.stdout.read()
    except Exception:  # noqa: BLE001 - artifacts may be missing after an early failure
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return redact("\n".join(lines[-n:]))


def provision(
    inv: Inventory,
    *,
    check: bool = False,
    tags: list[str] | None = None,
    limit: str | None = None,
    progress: bool = True,
    skip_tags: list[str] | None = None,
    extra_vars: dict[str, Any] | None = None,
    work_dir: Path | None = None,
    timeout: int | None = None,
    console=None,
    playbook: Path = SITE,
) -> ProvisionReport:
    """Run playbooks/site.yml (or `playbook`, e.g. VERIFY) against `inv`; return the
    report, or raise ProvisionError.

    check: ansible-playbook --check --diff (nothing changes; the report lists what would).
    tags, skip_tags: role tags (common, hugepages, dpdk_host, roce, deploy, tofino_sde;
    switchd: only the switch's service tasks). limit: an Ansible host pattern.
    extra_vars: role variables to override (e.g. {"hugepages_persist": True}).
    """
    import ansible_runner

    playbook = Path(playbook)
    if not playbook.is_file():
        raise ProvisionError(f"the playbook {playbook} is missing", [])
    work = Path(work_dir) if work_dir is not None else work_dir_for(inv)
    run_dir = _prepare(work, check)
    inventory_file = run_dir / "inventory" / "hosts.yml"
    inventory_file.parent.mkdir(mode=0o700)
    inventory_file.write_text(export_yaml(inv))

    agg = EventAggregator(check=check)
    kwargs = _runner_args(inv, run_dir, playbook, inventory_file, work, agg, check, tags, skip_tags, limit)
    kwargs["extravars"] = {**kwargs["extravars"], **(extra_vars or {})}  # the caller's extra vars win
    if timeout:
        kwargs["timeout"] = timeout
    counts, key = _tasks_file(inv, work_dir, work), _run_key(playbook, check, tags, skip_tags, limit)
    bar = Bar(console or _stderr(), enabled=progress, below=lambda: agg, transient=True)
    t0 = time.monotonic()
    r = _run(ansible_runner, kwargs, agg, bar, _planned(counts, key), _what(check, playbook))
    duration = time.monotonic() - t0
    if r.status == "successful":
        _remember(counts, key, agg.tasks)
    if r.status == "canceled":
        what = {"dry run": "the dry run", "verify": "verifying"}.get(_what(check, playbook), "provisioning")
        raise Interrupted(
            f"{what} of {inv.name} stopped after {duration:.0f} s; ansible's events so far are in "
            f"{run_dir / 'artifacts'}" + ("" if check or Path(playbook) == VERIFY else "; what it changed stays"),
            fix="redo it with the same `rainmaker provision` command: it is idempotent, and finishes what was begun",
        )
    report = agg.report(
        inv.name,
        duration_s=duration,
        status=r.status,
        rc=r.rc if r.rc is not None else -1,
        run_dir=run_dir,
        tags=tags,
        limit=limit,
    )
    _raise_unless_done(report, r, inv, run_dir, limit)
    return report


def _runner_args(inv, run_dir, playbook, inventory_file, work, agg, check, tags, skip_tags, limit) -> dict[str, Any]:
    """ansible_runner.run's arguments for this run."""
    kwargs: dict[str, Any] = dict(
        private_data_dir=str(run_dir),
        playbook=str(playbook),
        inventory=str(inventory_file),
        envvars=ansible_env(work),
        event_handler=agg,
        quiet=True,
    )
    if check:
        kwargs["cmdline"] = "--check --diff"
    if tags:
        kwargs["tags"] = ",".join(tags)
    if skip_tags:
        kwargs["skip_tags"] = ",".join(skip_tags)
    if limit:
        kwargs["limit"] = limit
    # The bundle the rainmaker_deploy role copies (orchestrator/deploy.py: defined once,
    # shared with experiment/machines.py's deploy()), staged only for runs that include
    # that role (not `switch start`, `--tags switchd`, ...).
    deploy_runs = (tags is None or DEPLOY_TAG in tags) and DEPLOY_TAG not in (skip_tags or [])
    kwargs["extravars"] = deploy_vars(inv.deploy.build, stage=run_dir / "bundle") if deploy_runs else {}
    return kwargs


def _run(ansible_runner, kwargs: dict[str, Any], agg: EventAggregator, bar: Bar, planned: int | None, what: str):
    """ansible_runner.run, under the progress bar. ansible-runner turns SIGINT and
    SIGTERM into a "canceled" run (it stops ansible-playbook cleanly) and leaves its
    handlers installed: ours are put back after."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with bar:
            bar.start(planned, label=what)
            if planned is None:
                bar.eta_text("no ETA: no earlier run of these tags here to count tasks by")
            return ansible_runner.run(**{**kwargs, "event_handler": _following(agg, bar, planned)})
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, h in handlers.items():
                if h is not None:  # None: set outside Python, cannot be put back
                    signal.signal(sig, h)


def _following(agg: EventAggregator, bar: Bar, planned: int | None):
    """`agg` as runner's event handler, moving the bar as each task ends (the next one
    starts, or the recap comes): tasks done of as many as the last run of this kind
    started (Ansible does not say how many it will run: `when`, tags and includes decide
    as it goes), the ETA from the time per task so far. Rough: an apt install takes
    minutes, a check a fraction of a second."""
    last = [time.monotonic()]

    def handler(event: dict) -> bool:
        keep = agg(event)
        kind = event.get("event")
        if kind in TASK_STARTS or (kind == "playbook_on_stats" and agg.tasks):
            now = time.monotonic()
            done = agg.tasks - (kind in TASK_STARTS)  # a task is done when the next starts, or the recap comes
            if planned is None:
                bar.update(completed=done)
            elif done > 0:
                bar.update(total=max(planned, agg.tasks))  # more than last time: the total grows
                bar.did(spent_s=now - last[0])
            last[0] = now
        return keep

    return handler


def _what(check: bool, playbook: Path) -> str:
    return "dry run" if check else "verify" if Path(playbook) == VERIFY else "provision"


def _stderr():
    from rich.console import Console

    return Console(stderr=True)


# -- how many tasks a run starts: remembered from the last one of its kind --------------


def _tasks_file(inv: Inventory, work_dir: Path | None, work: Path) -> Path:
    """An emulated testbed's counts go beside its run history (history.py), which
    outlives its slot (`testbed down` removes the slot, and so its work folder); other
    testbeds keep them in their work folder, as does a caller that chose that folder."""
    if inv.emulation is not None and work_dir is None:
        from .experiment.history import history_path

        return history_path(inv).parent / TASKS_FILE
    return work / TASKS_FILE


def _run_key(playbook: Path, check: bool, tags, skip_tags, limit) -> str:
    return json.dumps([Path(playbook).name, check, sorted(tags or []), sorted(skip_tags or []), limit])


def _known(path: Path) -> dict:
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _planned(path: Path, key: str) -> int | None:
    n = _known(path).get(key)
    return n if isinstance(n, int) and n > 0 else None


def _remember(path: Path, key: str, tasks: int) -> None:
    """Keep this run's count for the next (written whole, then renamed). A state folder
    this user cannot write only costs the next run its ETA."""
    known = _known(path) | {key: tasks}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        pass


def _raise_unless_done(report: ProvisionReport, r, inv: Inventory, run_dir: Path, limit: str | None) -> None:
    """ProvisionError, with the report attached, unless every host ran the play through."""
    err = None
    if report.failures:
        bad = sorted({f.host for f in report.failures})
        err = ProvisionError(
            f"provisioning {inv.name} failed on {len(bad)} host{'s' if len(bad) > 1 else ''} "
            f"({', '.join(bad)}); ansible's events are in {run_dir / 'artifacts'}",
            report.failures,
        )
    elif report.rc != 0 or report.status != "successful":
        # ansible-playbook stopped before any task failed: a syntax error, a missing role,
        # no host matching --limit, or ansible-playbook not found at all.
        tail = _runner_output_tail(r)
        err = ProvisionError(
            f"ansible-playbook ended with status {report.status} (rc {report.rc}) "
            f"without a failed task; its last output:\n" + (tail or "(none)"),
            [],
        )
    elif not report.hosts:
        err = ProvisionError(
            f"ansible-playbook provisioned no host of {inv.name}"
            + (f" (--limit {limit!r})" if limit else "")
            + f"; see {run_dir / 'artifacts'}",
            [],
        )
    if err is not None:
        err.report = report  # type: ignore[attr-defined]
        raise err


__all__ = [
    "EventAggregator",
    "HostCounts",
    "ProvisionReport",
    "TaskChange",
    "ansible_env",
    "failure_message",
    "provision",
    "work_dir_for",
    "PLAYBOOKS",
    "SITE",
    "VERIFY",
    "ROLES",
]
