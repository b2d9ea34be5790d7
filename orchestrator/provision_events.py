"""What an Ansible run produced, read from ansible-runner's events: per-host counts,
the tasks that changed something (or would, in check mode), each failure with its
host, task and message, and the live state of each host for the progress display.
Private keys are redacted from every message kept."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TaskFailure

STDERR_TAIL = 5  # lines of a failed module's stderr kept in its TaskFailure


MAX_ITEMS = 6  # loop items shown per task in a summary


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
        self.tasks = 0  # tasks started (once each, whatever the hosts): the progress bar's count
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
            self.tasks += 1
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
