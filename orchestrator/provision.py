"""Provision a testbed with Ansible: run playbooks/site.yml through ansible-runner.

One call, one run directory (ansible-runner's private data dir) under the testbed's
work folder, holding the exported inventory and runner's artifacts (the full event
log, for post-mortems). Runner's events feed two things: a live progress display
(current play and task, per-host counts) and a `ProvisionReport` (per-host counts,
the tasks that changed something, or would in check mode, and the duration). A
failed run raises `ProvisionError` naming every host and task that failed, with the
report attached as `error.report`.

Nothing printed comes from module arguments or raw output, and private keys are
redacted from every message we keep: the inventory names key files, never contents.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .deploy import ansible_vars as deploy_vars
from .errors import Interrupted, ProvisionError, TaskFailure
from .inventory import Inventory
from .inventory.ansible import export_yaml

PLAYBOOKS = Path(__file__).resolve().parent.parent / "playbooks"
SITE = PLAYBOOKS / "site.yml"
VERIFY = PLAYBOOKS / "verify.yml"  # each role's verify tasks: asserts only, changes nothing
ROLES = PLAYBOOKS / "roles"

REMOTE_TEMP = "/tmp/.ansible-rm"
CONTROL_PERSIST_S = 15  # short: `testbed down` and the next run should not find stale masters
KEEP_RUNS = 20  # run directories kept per testbed (older ones are pruned)
STDERR_TAIL = 5  # lines of a failed module's stderr kept in its TaskFailure
MAX_ITEMS = 6  # loop items shown per task in a summary
DEPLOY_TAG = "deploy"  # the rainmaker_deploy role's tag (playbooks/hosts.yml, verify.yml)

MISSING = "missing: "  # how roles name what a host lacks (roles/common/tasks/missing.yml)
COUNT_FIELDS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
# playbook_on_stats names -> ours
_STATS_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.S)


# -- what a run produced ---------------------------------------------------------------


@dataclass
class HostCounts:
    """Ansible's per-host recap. `ok` includes the tasks that changed something."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def healthy(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


@dataclass(frozen=True)
class TaskChange:
    """A task that changed a host (or, in check mode, would have)."""

    host: str
    task: str
    role: str | None = None
    play: str | None = None
    items: tuple[str, ...] = ()  # the loop items that changed, for loop tasks

    @property
    def label(self) -> str:
        return f"{self.role} : {self.task}" if self.role else self.task


@dataclass
class ProvisionReport:
    inventory: str
    check: bool
    hosts: dict[str, HostCounts]
    changed: list[TaskChange]  # in check mode: the tasks that would change something
    failures: list[TaskFailure]
    duration_s: float
    status: str = "successful"  # ansible-runner's: successful, failed, timeout, canceled
    rc: int = 0
    run_dir: Path | None = None
    tags: list[str] | None = None
    limit: str | None = None
    notes: dict[str, list[str]] = field(default_factory=dict)  # message -> hosts
    # What a host lacks to be provisioned (hardware, vendor software): roles say it with
    # a "missing: WHAT; fix: HOW" message (roles/common/tasks/missing.yml). host -> items
    missing: dict[str, list[str]] = field(default_factory=dict)
    roles: list[str] = field(default_factory=list)  # the roles that ran, in order

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failures and not self.missing and all(c.healthy for c in self.hosts.values())

    @property
    def total_changed(self) -> int:
        return sum(c.changed for c in self.hosts.values())

    def changed_by_task(self) -> list[tuple[str, list[str]]]:
        """[(task label, [hosts])] in the order the tasks ran."""
        out: dict[str, list[str]] = {}
        for c in self.changed:
            out.setdefault(c.label, [])
            if c.host not in out[c.label]:
                out[c.label].append(c.host)
        return list(out.items())

    def changed_items(self) -> dict[str, list[tuple[list[str], list[str]]]]:
        """task label -> [(items, hosts that changed exactly those)] for loop tasks."""
        per: dict[str, dict[tuple[str, ...], list[str]]] = {}
        for c in self.changed:
            if c.items:
                per.setdefault(c.label, {}).setdefault(tuple(c.items), []).append(c.host)
        return {label: [(list(its), who) for its, who in groups.items()] for label, groups in per.items()}

    def summary(self) -> str:
        """Plain text: a recap line, a per-host table, what changed and what failed."""
        mode = " (check mode: nothing was changed)" if self.check else ""
        verb = "would change" if self.check else "changed"
        lines = [
            f"provision {self.inventory}{mode}: {len(self.hosts)} hosts, "
            f"{self.total_changed} {verb}, {len(self.failures)} failed, {self.duration_s:.1f} s"
        ]
        width = max([len(h) for h in self.hosts] + [4])
        lines.append("  " + "host".ljust(width) + "".join(f"{f:>12}" for f in COUNT_FIELDS[:5]))
        for host, c in self.hosts.items():
            lines.append("  " + host.ljust(width) + "".join(f"{getattr(c, f):>12}" for f in COUNT_FIELDS[:5]))
        changes = self.changed_by_task()
        if changes:
            lines.append(f"{'would change' if self.check else 'changed'}:")
            items = self.changed_items()
            for label, hosts in changes:
                lines.append(f"  {label}  ({', '.join(hosts)})")
                # What a loop task changed (files, packages), grouped by hosts alike.
                for its, who in items.get(label, []):
                    shown = ", ".join(its[:MAX_ITEMS]) + (
                        f" and {len(its) - MAX_ITEMS} more" if len(its) > MAX_ITEMS else ""
                    )
                    lines.append(f"      {shown}" + (f"  ({', '.join(who)})" if len(who) < len(hosts) else ""))
        for text, hosts in self.notes.items():
            lines.append(f"note ({', '.join(hosts)}): {text}")
        if self.missing:
            lines.append(
                "missing (a real run would stop here; hardware or vendor software):"
                if self.check
                else "missing (hardware or vendor software):"
            )
            for host, items in self.missing.items():
                lines += [f"  {host}: {item}" for item in items]
        for f in self.failures:
            lines.append(f"failed: {f.host}: task '{f.task}': {f.message}")
        return "\n".join(lines)

    def table(self):
        """A rich renderable of the per-host recap."""
        from rich.table import Table
        from rich.text import Text

        verb = "would change" if self.check else "changed"
        t = Table(
            title=f"provision {self.inventory}: {self.total_changed} {verb}, {self.duration_s:.1f} s",
            title_justify="left",
        )
        t.add_column("host")
        for f in COUNT_FIELDS[:5]:
            t.add_column(verb if f == "changed" else f, justify="right")
        for host, c in self.hosts.items():
            t.add_row(Text(host), *[_styled(f, getattr(c, f)) for f in COUNT_FIELDS[:5]])
        return t


def _styled(field_name: str, n: int) -> str:
    style = {"changed": "yellow", "failed": "red", "unreachable": "red"}.get(field_name)
    return f"[{style}]{n}[/]" if style and n else str(n)


# -- runner events -> counts, changes, failures -------------------------------------


def redact(text: str) -> str:
    return _PRIVATE_KEY.sub("(private key redacted)", text)


def _clip(text: str, limit: int = 400) -> str:
    text = redact(text.strip())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tail(text: Any, n: int = STDERR_TAIL) -> list[str]:
    if not isinstance(text, str):
        return []
    lines = redact(text).strip().splitlines()  # redact before cutting a key into lines
    return [_clip(line) for line in lines[-n:] if line.strip()]


UNARCHIVE = ("ansible.builtin.unarchive", "unarchive")  # its changed items: the members (list_files)


def _item_label(res: dict) -> str:
    label = res.get("_ansible_item_label", res.get("item"))
    if isinstance(label, dict):
        label = label.get("name", label.get("path", label))
    return _clip(str(label), 80)


def failure_message(res: dict | None) -> str:
    """The module's message, failed loop items, the return code and stderr's tail, on one line."""
    if not isinstance(res, dict):
        return "failed (no result)"
    parts: list[str] = []
    # A loop: the items that failed, grouped by message (often they all fail alike).
    by_msg: dict[str, list[str]] = {}
    for item in res.get("results") or []:
        if isinstance(item, dict) and (item.get("failed") or item.get("unreachable")):
            by_msg.setdefault(failure_message(item), []).append(_item_label(item))
    for text, labels in by_msg.items():
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        parts.append(f"item{'s' if len(labels) > 1 else ''} {shown}: {text}")
    msg = res.get("msg")
    if msg not in (None, "") and not (by_msg and msg == "One or more items failed"):
        parts.insert(0, _clip(msg if isinstance(msg, str) else str(msg)))
    rc = res.get("rc")
    if isinstance(rc, int) and rc != 0 and not any(f"rc {rc}" in p for p in parts):
        parts.append(f"rc {rc}")
    stderr = _tail(res.get("stderr")) or _tail(res.get("module_stderr"))
    if stderr:
        parts.append("stderr: " + " / ".join(stderr))
    elif isinstance(rc, int) and rc != 0:
        stdout = _tail(res.get("stdout")) or _tail(res.get("module_stdout"))
        if stdout:
            parts.append("stdout: " + " / ".join(stdout))
    if not parts and res.get("exception"):
        parts += _tail(res["exception"], 1)
    return "; ".join(parts) or "failed (the module gave no message)"


@dataclass
class _HostNow:
    task: str = ""
    state: str = ""  # running, ok, changed, failed, unreachable, skipped


class EventAggregator:
    """Consumes ansible-runner events (as passed to `event_handler`) into a report.

    Counts are kept live from the per-task events, for the progress display, and
    replaced by Ansible's own recap (the `playbook_on_stats` event) when it arrives.
    """

    def __init__(self, check: bool = False):
        self.check = check
        self.lock = threading.Lock()
        self.play: str | None = None
        self.task: str | None = None
        self.role: str | None = None
        self.hosts: dict[str, HostCounts] = {}
        self.now: dict[str, _HostNow] = {}
        self.changed: list[TaskChange] = []
        self.failures: list[TaskFailure] = []
        self.stats_seen = False
        self.events = 0
        self.notes: dict[str, list[str]] = {}  # message -> hosts: debug tasks' messages, module warnings
        self.missing: dict[str, list[str]] = {}  # host -> what it lacks ("missing: ..." messages)
        self.roles: list[str] = []  # roles whose tasks ran, in order
        self._changed_items: dict[tuple[str, str], list[str]] = {}
        self._tasks: dict[str, tuple[str, str | None, str | None]] = {}  # task uuid -> (task, role, play)

    def __call__(self, event: dict) -> bool:  # ansible-runner's event_handler
        self.feed(event)
        return True  # keep the event in the artifacts

    def feed(self, event: dict) -> None:
        with self.lock:
            self.events += 1
            self._feed(event.get("event", ""), event.get("event_data") or {})

    # The task an event belongs to: from the event itself, else the last one started.
    def _where(self, data: dict) -> tuple[str, str | None, str | None]:
        uuid = data.get("task_uuid")
        if uuid and uuid in self._tasks:
            return self._tasks[uuid]
        task = data.get("task") or self.task or "?"
        return task, data.get("role") or self.role, data.get("play") or self.play

    def _counts(self, host: str) -> HostCounts:
        if host not in self.hosts:
            self.hosts[host] = HostCounts()
            self.now[host] = _HostNow()
        return self.hosts[host]

    def _feed(self, kind: str, data: dict) -> None:
        if kind == "playbook_on_play_start":
            self.play = data.get("play") or data.get("name")
            self.task = self.role = None
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            self.task = data.get("task") or data.get("name") or "?"
            self.role = data.get("role") or None
            if self.role and self.role not in self.roles:
                self.roles.append(self.role)
            if data.get("task_uuid"):
                self._tasks[data["task_uuid"]] = (self.task, self.role, self.play)
        elif kind == "runner_on_start":
            host = data.get("host")
            if host:
                self._counts(host)
                self.now[host] = _HostNow(self._where(data)[0], "running")
        elif kind == "runner_item_on_ok":
            res = data.get("res") or {}
            if res.get("changed") and data.get("host"):
                key = (data["host"], data.get("task_uuid") or "")
                self._changed_items.setdefault(key, []).append(_item_label(res))
        elif kind == "runner_on_ok":
            self._result(data, "changed" if (data.get("res") or {}).get("changed") else "ok")
        elif kind == "runner_on_failed":
            self._result(data, "ignored" if data.get("ignore_errors") else "failed")
        elif kind == "runner_on_unreachable":
            self._result(data, "unreachable")
        elif kind == "runner_on_skipped":
            self._result(data, "skipped")
        elif kind == "playbook_on_stats":
            self._stats(data)

    def _note(self, host: str, text: Any) -> None:
        if isinstance(text, (list, tuple)):  # a debug task may say several things
            for t in text:
                self._note(host, t)
            return
        text = _clip(str(text), 600)
        if text.startswith(MISSING):
            self._missing(host, text)
            return
        hosts = self.notes.setdefault(text, [])
        if host not in hosts:
            hosts.append(host)

    def _missing(self, host: str, text: str) -> None:
        items = self.missing.setdefault(host, [])
        for item in text[len(MISSING) :].split(" | "):
            item = item.strip()
            if item and item not in items:
                items.append(item)

    def _result(self, data: dict, outcome: str) -> None:
        host = data.get("host")
        if not host:
            return
        res = data.get("res") or {}
        task, role, play = self._where(data)
        c = self._counts(host)
        self.now[host] = _HostNow(task, outcome)
        for w in res.get("warnings") or []:
            self._note(host, f"warning: {w}")
        if outcome in ("ok", "changed"):
            c.ok += 1
            # What a role says to the person running it (ansible.builtin.debug).
            if data.get("task_action") in ("ansible.builtin.debug", "debug") and res.get("msg"):
                self._note(host, res["msg"])
            if outcome == "changed":
                c.changed += 1
                items = tuple(self._changed_items.pop((host, data.get("task_uuid") or ""), ()))
                if not items and data.get("task_action") in UNARCHIVE and isinstance(res.get("files"), list):
                    items = tuple(_clip(str(f), 80) for f in res["files"])  # the members it extracted
                self.changed.append(TaskChange(host, task, role, play, items))
        elif outcome == "ignored":
            c.ignored += 1
        elif outcome == "failed":
            c.failed += 1
            label = f"{role} : {task}" if role else task
            message = failure_message(res)
            if isinstance(res.get("msg"), str) and res["msg"].startswith(MISSING):
                self._missing(host, _clip(res["msg"], 2000))
            self.failures.append(TaskFailure(host, label, message))
        elif outcome == "unreachable":
            c.unreachable += 1
            label = f"{role} : {task}" if role else task
            self.failures.append(TaskFailure(host, label, "unreachable: " + failure_message(res)))
        elif outcome == "skipped":
            # Runner's skip events carry no result, so a command that check mode skipped
            # cannot be told from one whose `when` was false: roles give such commands
            # `creates`/`removes`, which make check mode report them as changes instead.
            c.skipped += 1

    def _stats(self, data: dict) -> None:
        self.stats_seen = True
        hosts: set[str] = set()
        for key in list(_STATS_KEYS) + ["processed"]:
            if isinstance(data.get(key), dict):
                hosts |= set(data[key])
        recap: dict[str, HostCounts] = {}
        # Hosts in the order they first reported, then any the events did not show.
        for host in [h for h in self.hosts if h in hosts] + sorted(hosts - set(self.hosts)):
            c = HostCounts()
            for key, ours in _STATS_KEYS.items():
                setattr(c, ours, int((data.get(key) or {}).get(host, 0)))
            recap[host] = c
        self.hosts = recap
        for host in recap:
            self.now.setdefault(host, _HostNow())
        # A failure inside a block that rescued it is not a failure of the run.
        self.failures = [f for f in self.failures if f.host not in recap or not recap[f.host].healthy]

    def report(
        self,
        inventory: str,
        *,
        duration_s: float,
        status: str = "successful",
        rc: int = 0,
        run_dir: Path | None = None,
        tags: list[str] | None = None,
        limit: str | None = None,
    ) -> ProvisionReport:
        with self.lock:
            return ProvisionReport(
                inventory=inventory,
                check=self.check,
                hosts={h: HostCounts(**vars(c)) for h, c in self.hosts.items()},
                changed=list(self.changed),
                failures=list(self.failures),
                duration_s=duration_s,
                status=status,
                rc=rc,
                run_dir=run_dir,
                tags=tags,
                limit=limit,
                notes={k: list(v) for k, v in self.notes.items()},
                missing={k: list(v) for k, v in self.missing.items()},
                roles=list(self.roles),
            )

    # -- the live display ------------------------------------------------------------
    def __rich__(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            where = self.play or "starting ansible-playbook"
            if self.task:
                where += " › " + (f"{self.role} : {self.task}" if self.role else self.task)
            t = Table(box=None, pad_edge=False, show_edge=False)
            t.add_column("host", no_wrap=True)
            for f in COUNT_FIELDS[:5]:
                t.add_column("would change" if (f == "changed" and self.check) else f, justify="right", no_wrap=True)
            t.add_column("last task", no_wrap=True, overflow="ellipsis", min_width=8, max_width=48)
            for host, c in self.hosts.items():
                now = self.now.get(host) or _HostNow()
                t.add_row(
                    Text(host),
                    *[_styled(f, getattr(c, f)) for f in COUNT_FIELDS[:5]],
                    Text(f"{now.state} {now.task}".strip()),
                )  # Text: task names are not markup
            head = Text(("[check] " if self.check else "") + where, style="bold", no_wrap=True, overflow="ellipsis")
            return Group(head, t)


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
    # shared with experiment/machines.py's deploy()), staged only for runs that include that role (not
    # `switch start`, `--tags switchd`, ...); the caller's extra vars win.
    deploy_runs = (tags is None or DEPLOY_TAG in tags) and DEPLOY_TAG not in (skip_tags or [])
    bundle = deploy_vars(inv.deploy.build, stage=run_dir / "bundle") if deploy_runs else {}
    kwargs["extravars"] = {**bundle, **(extra_vars or {})}
    if timeout:
        kwargs["timeout"] = timeout

    t0 = time.monotonic()
    # ansible-runner turns SIGINT and SIGTERM into a "canceled" run (it stops
    # ansible-playbook cleanly) and leaves its handlers installed: put ours back after.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with _live(agg, progress, console):
            r = ansible_runner.run(**kwargs)
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, h in handlers.items():
                if h is not None:  # None: set outside Python, cannot be put back
                    signal.signal(sig, h)
    duration = time.monotonic() - t0
    if r.status == "canceled":
        what = "the dry run" if check else "verifying" if Path(playbook) == VERIFY else "provisioning"
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

    if report.failures:
        bad = sorted({f.host for f in report.failures})
        err = ProvisionError(
            f"provisioning {inv.name} failed on {len(bad)} host{'s' if len(bad) > 1 else ''} "
            f"({', '.join(bad)}); ansible's events are in {run_dir / 'artifacts'}",
            report.failures,
        )
        err.report = report  # type: ignore[attr-defined]
        raise err
    if report.rc != 0 or report.status != "successful":
        # ansible-playbook stopped before any task failed: a syntax error, a missing role,
        # no host matching --limit, or ansible-playbook not found at all.
        tail = _runner_output_tail(r)
        err = ProvisionError(
            f"ansible-playbook ended with status {report.status} (rc {report.rc}) "
            f"without a failed task; its last output:\n" + (tail or "(none)"),
            [],
        )
        err.report = report  # type: ignore[attr-defined]
        raise err
    if not report.hosts:
        err = ProvisionError(
            f"ansible-playbook provisioned no host of {inv.name}"
            + (f" (--limit {limit!r})" if limit else "")
            + f"; see {run_dir / 'artifacts'}",
            [],
        )
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report


class _live:
    """A transient rich Live display of the aggregator, on stderr; nothing when disabled."""

    def __init__(self, agg: EventAggregator, enabled: bool, console=None):
        self.agg, self.enabled, self.console = agg, enabled, console
        self.live = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            console = self.console or Console(stderr=True)
            self.live = Live(
                get_renderable=lambda: self.agg,
                console=console,
                transient=True,
                refresh_per_second=4,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()


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
