"""Provisioning without SSH: runner events -> report, failures, the environment and
inventory handed to ansible-playbook, and the playbooks' syntax.

The event dicts below have the shape ansible-runner 2.4 gives `event_handler` (copied
from a real run against the emulated testbed, trimmed to the fields that matter).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from orchestrator import provision as prov
from orchestrator.errors import ProvisionError, TaskFailure
from orchestrator.inventory import Inventory
from orchestrator.inventory.ansible import export, export_yaml
from orchestrator.provision import EventAggregator, ProvisionReport, failure_message

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "orchestrator/inventory/examples/rack1.yaml"
VENV_BIN = Path(sys.executable).parent
PLAY_HOSTS = "Provision the clients and workers"
PLAY_SWITCH = "Provision the switch"


# -- event builders ---------------------------------------------------------------------


class Events:
    """Builds a plausible runner event stream, task by task."""

    def __init__(self) -> None:
        self.out: list[dict] = []
        self.counter = 0
        self.play = None
        self.task_uuid = None
        self.task = None
        self.role = None

    def _ev(self, kind: str, **data) -> dict:
        self.counter += 1
        ev = {
            "event": kind,
            "counter": self.counter,
            "uuid": f"u{self.counter}",
            "runner_ident": "r",
            "stdout": "",
            "event_data": {"playbook": "/x/playbooks/site.yml", **data},
        }
        self.out.append(ev)
        return ev

    def start(self) -> Events:
        self._ev("playbook_on_start")
        return self

    def play_start(self, name: str) -> Events:
        self.play = name
        self._ev("playbook_on_play_start", play=name, name=name, pattern="hosts")
        return self

    def task_start(self, task: str, role: str | None = None, action: str = "ansible.builtin.shell") -> Events:
        self.task, self.role = task, role
        self.task_uuid = f"t{self.counter + 1}"
        self._ev(
            "playbook_on_task_start",
            play=self.play,
            task=task,
            task_uuid=self.task_uuid,
            task_action=action,
            role=role or "",
            name=f"{role} : {task}" if role else task,
        )
        return self

    def _host(self, kind: str, host: str, res: dict | None = None, **extra) -> Events:
        data = dict(
            play=self.play,
            task=self.task,
            task_uuid=self.task_uuid,
            role=self.role or "",
            host=host,
            remote_addr=host,
            duration=0.5,
            **extra,
        )
        if res is not None:
            data["res"] = res
        self._ev(
            "runner_on_start", play=self.play, task=self.task, task_uuid=self.task_uuid, role=self.role or "", host=host
        )
        self._ev(kind, **data)
        return self

    def ok(self, host: str, changed: bool = False, **res) -> Events:
        return self._host("runner_on_ok", host, {"changed": changed, **res})

    def failed(self, host: str, ignore_errors: bool | None = None, **res) -> Events:
        return self._host(
            "runner_on_failed", host, {"failed": True, "changed": False, **res}, ignore_errors=ignore_errors
        )

    def unreachable(self, host: str, msg: str) -> Events:
        return self._host("runner_on_unreachable", host, {"unreachable": True, "msg": msg, "changed": False})

    def skipped(self, host: str) -> Events:
        return self._host("runner_on_skipped", host)

    def item_ok(self, host: str, item: str, changed: bool) -> Events:
        self._ev(
            "runner_item_on_ok",
            play=self.play,
            task=self.task,
            task_uuid=self.task_uuid,
            role=self.role or "",
            host=host,
            res={"changed": changed, "item": item, "_ansible_item_label": item},
        )
        return self

    def stats(self, **maps) -> Events:
        keys = ("changed", "dark", "failures", "ignored", "ok", "processed", "rescued", "skipped")
        self._ev("playbook_on_stats", **{k: maps.get(k, {}) for k in keys}, artifact_data={})
        return self


def feed(events: list[dict], check: bool = False) -> EventAggregator:
    agg = EventAggregator(check=check)
    for e in events:
        assert agg(e) is True  # runner keeps the event
    return agg


def converge_events() -> Events:
    """A cold run: two hosts and the switch, some changes, one loop task."""
    ev = Events().start().play_start(PLAY_HOSTS)
    ev.task_start("Inspect the system, the base packages and the deploy root", "common")
    ev.ok("client0", stdout="os=debian 12").ok("worker0", stdout="os=debian 12")
    ev.task_start("Install the base packages", "common", "ansible.builtin.apt")
    ev.ok("client0", changed=True).skipped("worker0")
    ev.task_start("Create the deploy root and its subdirectories", "common", "ansible.builtin.file")
    ev.item_ok("client0", "/opt/rainmaker/bin", True).item_ok("client0", "/opt/rainmaker/run", False)
    ev.ok("client0", changed=True)
    ev.ok("worker0")
    ev.task_start("Raise the huge page pool to the pages needed", "hugepages")
    ev.ok("client0", changed=True, stdout="raised from 0 to 64").ok("worker0")
    ev.play_start(PLAY_SWITCH)
    ev.task_start("Inspect the system, the base packages and the deploy root", "common")
    ev.ok("sw0")
    ev.stats(
        ok={"client0": 4, "worker0": 3, "sw0": 1},
        changed={"client0": 3},
        skipped={"worker0": 1},
        processed={"client0": 1, "worker0": 1, "sw0": 1},
    )
    return ev


# -- aggregation ----------------------------------------------------------------------


def test_counts_come_from_ansibles_recap_and_changes_name_role_and_task():
    agg = feed(converge_events().out)
    assert agg.stats_seen
    assert list(agg.hosts) == ["client0", "worker0", "sw0"]  # the order hosts first reported
    assert vars(agg.hosts["client0"]) == dict(ok=4, changed=3, failed=0, unreachable=0, skipped=0, rescued=0, ignored=0)
    assert agg.hosts["worker0"].skipped == 1 and agg.hosts["worker0"].changed == 0
    assert [(c.host, c.label) for c in agg.changed] == [
        ("client0", "common : Install the base packages"),
        ("client0", "common : Create the deploy root and its subdirectories"),
        ("client0", "hugepages : Raise the huge page pool to the pages needed"),
    ]
    loop = agg.changed[1]
    assert loop.items == ("/opt/rainmaker/bin",)  # only the item that changed
    assert loop.play == PLAY_HOSTS
    assert agg.failures == []


def test_live_counts_before_the_recap():
    ev = converge_events()
    agg = feed(ev.out[:-1])  # everything but playbook_on_stats
    assert not agg.stats_seen
    assert agg.hosts["client0"].ok == 4 and agg.hosts["client0"].changed == 3
    assert agg.hosts["worker0"].skipped == 1
    assert agg.play == PLAY_SWITCH and agg.task.startswith("Inspect")


def test_warm_run_reports_nothing_changed():
    ev = Events().start().play_start(PLAY_HOSTS).task_start("Inspect", "common")
    ev.ok("client0").ok("worker0").task_start("Install the base packages", "common")
    ev.skipped("client0").skipped("worker0")
    ev.stats(
        ok={"client0": 1, "worker0": 1}, skipped={"client0": 1, "worker0": 1}, processed={"client0": 1, "worker0": 1}
    )
    r = feed(ev.out).report("emulated5", duration_s=9.5)
    assert r.ok and r.total_changed == 0 and r.changed == []
    assert all(c.changed == 0 for c in r.hosts.values())


def test_failed_and_unreachable_tasks_become_task_failures():
    ev = Events().start().play_start(PLAY_HOSTS)
    ev.task_start("Inspect the system, the base packages and the deploy root", "common")
    ev.ok("client0")
    ev.unreachable(
        "worker1",
        'Task failed: Data could not be sent to remote host "10.79.5.3". Make sure this host '
        "can be reached over ssh: ssh: connect to host 10.79.5.3 port 2222: Connection refused",
    )
    ev.task_start("Raise the huge page pool to the pages needed", "hugepages")
    ev.failed(
        "client0",
        msg="non-zero return code",
        rc=3,
        stdout="raised from 0 to 30",
        stderr="the kernel reserved only 30 of the 64 pages of 2048 kB asked for: memory is too small",
    )
    ev.stats(ok={"client0": 1}, failures={"client0": 1}, dark={"worker1": 1}, processed={"client0": 1, "worker1": 1})
    agg = feed(ev.out)
    assert agg.hosts["worker1"].unreachable == 1 and agg.hosts["client0"].failed == 1
    by_host = {f.host: f for f in agg.failures}
    assert by_host["worker1"].task == "common : Inspect the system, the base packages and the deploy root"
    assert by_host["worker1"].message.startswith("unreachable: ")
    assert "port 2222: Connection refused" in by_host["worker1"].message
    f = by_host["client0"]
    assert f.task == "hugepages : Raise the huge page pool to the pages needed"
    assert f.message == (
        "non-zero return code; rc 3; stderr: the kernel reserved only 30 of the 64 pages "
        "of 2048 kB asked for: memory is too small"
    )


def test_ignored_and_rescued_failures_are_not_failures():
    ev = Events().start().play_start(PLAY_HOSTS)
    ev.task_start("Try something", "common").failed("client0", ignore_errors=True, msg="meh")
    ev.task_start("Try in a block", "common").failed("worker0", msg="rescued later")
    ev.stats(
        ok={"client0": 1, "worker0": 1},
        ignored={"client0": 1},
        rescued={"worker0": 1},
        processed={"client0": 1, "worker0": 1},
    )
    agg = feed(ev.out)
    assert agg.failures == []
    assert agg.hosts["client0"].ignored == 1 and agg.hosts["worker0"].rescued == 1
    assert agg.report("x", duration_s=1).ok


def test_check_mode_lists_what_would_change():
    ev = Events().start().play_start(PLAY_HOSTS)
    ev.task_start("Mount hugetlbfs", "hugepages", "ansible.builtin.command")
    ev.ok("client0", changed=True, msg="Command would have run if not in check mode")
    ev.stats(ok={"client0": 1}, changed={"client0": 1}, processed={"client0": 1})
    r = feed(ev.out, check=True).report("emulated5", duration_s=3.0)
    assert r.check
    text = r.summary()
    assert "check mode: nothing was changed" in text
    assert "1 would change" in text
    assert "would change:\n  hugepages : Mount hugetlbfs  (client0)" in text


def test_debug_messages_and_module_warnings_become_notes():
    ev = Events().start().play_start(PLAY_HOSTS)
    ev.task_start("Say how to keep 1G pages across reboots", "hugepages", "ansible.builtin.debug")
    for host in ("worker0", "worker1"):
        ev._host(
            "runner_on_ok",
            host,
            {"changed": False, "msg": "Add hugepagesz=1G to the kernel command line"},
            task_action="ansible.builtin.debug",
        )
    ev.task_start("Install the DPDK runtime", "dpdk", "ansible.builtin.apt")
    ev.ok("worker0", changed=True, warnings=["apt-key is deprecated"])
    ev.stats(ok={"worker0": 2, "worker1": 1}, changed={"worker0": 1}, processed={"worker0": 1, "worker1": 1})
    r = feed(ev.out).report("rack1", duration_s=1.0)
    assert r.notes == {
        "Add hugepagesz=1G to the kernel command line": ["worker0", "worker1"],
        "warning: apt-key is deprecated": ["worker0"],
    }
    assert "note (worker0, worker1): Add hugepagesz=1G to the kernel command line" in r.summary()


def test_events_without_host_or_data_are_ignored():
    agg = feed([{"event": "verbose"}, {"event": "runner_on_ok", "event_data": {}}, {}])
    assert agg.hosts == {} and agg.events == 3


# -- failure messages -----------------------------------------------------------------


def test_failure_message_keeps_the_tail_of_stderr():
    res = {"msg": "non-zero return code", "rc": 1, "stderr": "\n".join(f"line {i}" for i in range(20))}
    assert failure_message(res) == "non-zero return code; rc 1; stderr: line 15 / line 16 / line 17 / line 18 / line 19"


def test_failure_message_uses_stdout_when_stderr_is_empty():
    res = {"msg": "non-zero return code", "rc": 2, "stdout": "a\nb\nthe reason", "stderr": ""}
    assert failure_message(res).endswith("stdout: a / b / the reason")


def test_failure_message_groups_failed_loop_items():
    msg = "There was an issue creating /proc/rainmaker as requested: [Errno 2] No such file or directory"
    items = [
        {"failed": True, "msg": msg, "item": f"/proc/rainmaker/{d}", "_ansible_item_label": f"/proc/rainmaker/{d}"}
        for d in ("bin", "agent", "run", "log")
    ]
    items.insert(1, {"changed": False, "item": "/opt/ok", "failed": False})
    text = failure_message({"msg": "One or more items failed", "results": items, "failed": True})
    assert text == f"items /proc/rainmaker/bin, /proc/rainmaker/agent, /proc/rainmaker/run and 1 more: {msg}"


def test_failure_message_of_a_module_crash():
    res = {
        "msg": "MODULE FAILURE\nSee stdout/stderr for the exact error",
        "rc": 1,
        "module_stderr": "Traceback (most recent call last):\n  ...\nImportError: no apt",
        "module_stdout": "",
    }
    text = failure_message(res)
    assert text.startswith("MODULE FAILURE")
    assert "ImportError: no apt" in text


def test_failure_message_never_shows_a_private_key():
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    text = failure_message({"msg": f"bad key {key}", "stderr": key})
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in text
    assert "BEGIN OPENSSH PRIVATE KEY" not in text
    assert "private key redacted" in text


def test_failure_message_without_anything():
    assert failure_message({}) == "failed (the module gave no message)"
    assert failure_message(None) == "failed (no result)"


def test_provision_error_lists_every_failure():
    fails = [
        TaskFailure("worker1", "common : Inspect", "unreachable: connection refused"),
        TaskFailure("client0", "dpdk : Check", "needs DPDK 22.11"),
    ]
    e = ProvisionError("provisioning rack1 failed on 2 hosts", fails)
    assert e.failures == fails
    assert e.render().splitlines() == [
        "provisioning rack1 failed on 2 hosts",
        "  worker1: task 'common : Inspect': unreachable: connection refused",
        "  client0: task 'dpdk : Check': needs DPDK 22.11",
    ]


def test_report_summary_and_table():
    r = feed(converge_events().out).report("rack1", duration_s=12.34)
    text = r.summary()
    assert text.splitlines()[0] == "provision rack1: 3 hosts, 3 changed, 0 failed, 12.3 s"
    assert "  common : Install the base packages  (client0)" in text
    assert r.changed_by_task()[0] == ("common : Install the base packages", ["client0"])
    table = r.table()
    assert table.row_count == 3


# -- provision() with ansible-runner replaced --------------------------------------------


@pytest.fixture
def example_inventory() -> Inventory:
    return Inventory.model_validate(yaml.safe_load(EXAMPLE.read_text()))


class FakeRunner:
    """Stands in for ansible_runner.run: records its arguments and replays events."""

    def __init__(self, events: list[dict], rc: int = 0, status: str = "successful", stdout: str = ""):
        self.events, self.rc, self.status, self.stdout = events, rc, status, stdout
        self.kwargs: dict = {}

    def run(self, **kwargs):
        self.kwargs = kwargs
        # What ansible-playbook would read: the inventory must exist and parse.
        self.inventory = yaml.safe_load(Path(kwargs["inventory"]).read_text())
        for e in self.events:
            kwargs["event_handler"](e)
        import io

        return SimpleNamespace(rc=self.rc, status=self.status, stdout=io.StringIO(self.stdout))


@pytest.fixture
def fake_runner(monkeypatch):
    import ansible_runner

    def install(fake: FakeRunner) -> FakeRunner:
        monkeypatch.setattr(ansible_runner, "run", fake.run)
        return fake

    return install


def test_provision_passes_playbook_inventory_env_and_options(tmp_path, example_inventory, fake_runner):
    fake = fake_runner(FakeRunner(converge_events().out))
    report = prov.provision(
        example_inventory, check=True, tags=["dpdk", "hugepages"], limit="workers", progress=False, work_dir=tmp_path
    )
    kw = fake.kwargs
    assert kw["playbook"] == str(REPO / "playbooks/site.yml") and Path(kw["playbook"]).is_absolute()
    assert kw["cmdline"] == "--check --diff"
    assert kw["tags"] == "dpdk,hugepages" and kw["limit"] == "workers"
    assert kw["quiet"] is True
    run_dir = Path(kw["private_data_dir"])
    assert run_dir.parent == tmp_path / "runs" and "-check-" in run_dir.name
    assert fake.inventory == export(example_inventory)
    env = kw["envvars"]
    assert env["PATH"].split(os.pathsep)[0] == str(VENV_BIN)
    assert env["ANSIBLE_ROLES_PATH"] == str(REPO / "playbooks/roles")
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(tmp_path / "cp")
    assert "ControlPersist=15s" in env["ANSIBLE_SSH_ARGS"]
    for var in ("ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_CONFIG"):
        assert env[var].startswith(str(tmp_path)), var
    assert env["ANSIBLE_REMOTE_TEMP"] == "/tmp/.ansible-rm"
    assert report.check and report.run_dir == run_dir
    assert [h for h in report.hosts] == ["client0", "worker0", "sw0"]


def test_provision_without_check_has_no_cmdline(tmp_path, example_inventory, fake_runner):
    fake = fake_runner(FakeRunner(converge_events().out))
    report = prov.provision(example_inventory, progress=False, work_dir=tmp_path)
    assert "cmdline" not in fake.kwargs and "tags" not in fake.kwargs and "limit" not in fake.kwargs
    assert report.ok and report.total_changed == 3


def test_provision_raises_with_every_failed_host_and_the_report(tmp_path, example_inventory, fake_runner):
    ev = (
        Events()
        .start()
        .play_start(PLAY_HOSTS)
        .task_start("Check that the DPDK installed, or else offered, is 22.11", "dpdk")
    )
    ev.failed("worker0", msg="worker0 needs DPDK 22.11 (...), but apt has dpdk 21.11.4-0ubuntu0.22.04.1 installed")
    ev.ok("worker1")
    ev.stats(ok={"worker1": 1}, failures={"worker0": 1}, processed={"worker0": 1, "worker1": 1})
    fake_runner(FakeRunner(ev.out, rc=2, status="failed"))
    with pytest.raises(ProvisionError) as ei:
        prov.provision(example_inventory, progress=False, work_dir=tmp_path)
    e = ei.value
    assert [(f.host, f.task) for f in e.failures] == [
        ("worker0", "dpdk : Check that the DPDK installed, or else offered, is 22.11")
    ]
    assert "failed on 1 host (worker0)" in e.message
    assert "apt has dpdk 21.11.4" in e.render()
    assert e.report.hosts["worker0"].failed == 1 and e.report.hosts["worker1"].ok == 1


def test_provision_reports_an_early_ansible_error(tmp_path, example_inventory, fake_runner):
    fake_runner(
        FakeRunner([], rc=1, status="failed", stdout="[ERROR]: the role 'dpdkk' was not found in /x/playbooks/roles\n")
    )
    with pytest.raises(ProvisionError) as ei:
        prov.provision(example_inventory, progress=False, work_dir=tmp_path)
    assert "rc 1" in ei.value.message and "the role 'dpdkk' was not found" in ei.value.message


def test_provision_with_no_host_processed_is_an_error(tmp_path, example_inventory, fake_runner):
    fake_runner(FakeRunner(Events().start().stats().out))
    with pytest.raises(ProvisionError, match="provisioned no host"):
        prov.provision(example_inventory, progress=False, work_dir=tmp_path)


def test_old_run_directories_are_pruned(tmp_path, example_inventory, fake_runner):
    runs = tmp_path / "runs"
    runs.mkdir()
    for i in range(prov.KEEP_RUNS + 5):
        (runs / f"20200101-0000{i:02d}-apply-1").mkdir()
    fake_runner(FakeRunner(converge_events().out))
    prov.provision(example_inventory, progress=False, work_dir=tmp_path)
    assert len(list(runs.iterdir())) == prov.KEEP_RUNS


def test_progress_display_renders(tmp_path, example_inventory, fake_runner):
    from rich.console import Console

    agg = feed(converge_events().out[:12])
    console = Console(record=True, width=120, file=open(os.devnull, "w"))
    console.print(agg)
    text = console.export_text()
    assert "Provision the clients and workers" in text and "client0" in text


def test_emulated_testbeds_keep_control_sockets_where_testbed_down_looks(tmp_path, example_inventory):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["emulation"] = {"state_dir": str(tmp_path / "slot5"), "slot": 5}
    inv = Inventory.model_validate(data)
    work = prov.work_dir_for(inv)
    assert work == tmp_path / "slot5" / "ansible"
    # orchestrator/testbed/emulated.py closes the masters it finds in <state>/ansible/cp.
    assert prov.ansible_env(work)["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(tmp_path / "slot5/ansible/cp")


# -- what ansible itself makes of our inventory and playbooks ----------------------------


def _ansible(tool: str, *args: str, work: Path) -> subprocess.CompletedProcess:
    exe = VENV_BIN / tool
    if not exe.exists():
        pytest.skip(f"{tool} is not installed in this venv")
    work.mkdir(parents=True, exist_ok=True)
    (work / "ansible.cfg").write_text("[defaults]\n")
    env = {**os.environ, **prov.ansible_env(work)}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=120, cwd=work)


def test_exported_inventory_is_what_ansible_inventory_parses(tmp_path, example_inventory):
    inv_file = tmp_path / "hosts.yml"
    inv_file.write_text(export_yaml(example_inventory))
    r = _ansible("ansible-inventory", "-i", str(inv_file), "--list", work=tmp_path / "work")
    assert r.returncode == 0, r.stderr
    parsed = json.loads(r.stdout)
    assert parsed["switch"]["hosts"] == ["tofino1"]
    assert sorted(parsed["hosts"]["children"]) == ["clients", "workers"]
    assert parsed["clients"]["hosts"] == ["client0"]
    assert parsed["workers"]["hosts"] == ["worker0", "worker1"]
    hv = parsed["_meta"]["hostvars"]
    w0 = hv["worker0"]
    assert w0["ansible_host"] == "192.0.2.22" and w0["ansible_user"] == "root"
    assert w0["rainmaker_hugepages_size_kb"] == 2048 and w0["rainmaker_hugepages_count"] == 4096
    assert w0["rainmaker_deploy_root"] == "/opt/rainmaker"
    assert w0["rainmaker_shared_system"] is False and w0["rainmaker_emulated"] is False
    assert "StrictHostKeyChecking=yes" in w0["ansible_ssh_common_args"]
    assert hv["tofino1"]["rainmaker_deploy_root"] == "/opt/rainmaker"
    # Every variable the roles read from the inventory is there.
    for var in (
        "rainmaker_deploy_root",
        "rainmaker_hugepages_size_kb",
        "rainmaker_hugepages_count",
        "rainmaker_emulated",
        "rainmaker_shared_system",
    ):
        assert all(var in hv[h] for h in ("client0", "worker0", "worker1")), var


def test_site_playbook_passes_syntax_check_and_lists_the_roles(tmp_path, example_inventory):
    inv_file = tmp_path / "hosts.yml"
    inv_file.write_text(export_yaml(example_inventory))
    r = _ansible("ansible-playbook", "-i", str(inv_file), "--syntax-check", str(prov.SITE), work=tmp_path / "work")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _ansible(
        "ansible-playbook", "-i", str(inv_file), "--list-tasks", "--list-tags", str(prov.SITE), work=tmp_path / "work"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for role in ROLES:
        assert f"{role} : " in r.stdout, role
    tags = {t for play in re.findall(r"TASK TAGS: \[([^\]]*)\]", r.stdout) for t in play.split(", ")}
    assert {"common", "hugepages", "dpdk_host", "roce", "deploy", "tofino_sde", "switchd"} <= tags, tags
    assert "play #2 (switch)" in r.stdout
    # verify.yml: every role's checks, in a playbook of its own
    r = _ansible("ansible-playbook", "-i", str(inv_file), "--list-tasks", str(prov.VERIFY), work=tmp_path / "work")
    assert r.returncode == 0, r.stdout + r.stderr
    for role in ("common", "dpdk_host", "roce", "rainmaker_deploy", "tofino_sde"):
        assert f"Verify the {role.replace('_', ' ')}" in r.stdout or role in r.stdout, role


ROLES = ("common", "hugepages", "dpdk_host", "roce", "rainmaker_deploy", "tofino_sde")


def test_roles_follow_the_house_layout():
    roles = REPO / "playbooks/roles"
    assert sorted(p.name for p in roles.iterdir() if p.is_dir()) == sorted(ROLES)
    for role in ROLES:
        for part in ("defaults/main.yml", "tasks/main.yml", "meta/main.yml"):
            assert (roles / role / part).is_file(), f"{role}/{part}"
        defaults = yaml.safe_load((roles / role / "defaults/main.yml").read_text())
        assert all(k.startswith(f"{role}_") for k in defaults), f"{role}: every default is prefixed by the role name"
        meta = yaml.safe_load((roles / role / "meta/main.yml").read_text())
        assert meta["galaxy_info"]["role_name"] == role


def test_report_dataclass_defaults():
    r = ProvisionReport("x", False, {}, [], [], 0.0)
    assert r.ok and r.total_changed == 0 and r.summary().startswith("provision x: 0 hosts")


def test_summary_names_what_loop_tasks_would_change_and_what_hosts_lack():
    from orchestrator.provision import TaskChange

    copy = "Copy the files that differ from the bundle"
    r = ProvisionReport(
        "rack1",
        True,
        {},
        [
            TaskChange("worker0", copy, "rainmaker_deploy", items=("bin/rain-worker",)),
            TaskChange("worker1", copy, "rainmaker_deploy", items=("bin/rain-worker",)),
            TaskChange("client0", copy, "rainmaker_deploy", items=tuple(f"agent/f{i}.py" for i in range(9))),
            TaskChange("client0", "Mount hugetlbfs", "hugepages"),
        ],
        [],
        1.0,
        missing={"tofino1": ["a Tofino ASIC on PCI; fix: run this on the switch"]},
    )
    text = r.summary()
    assert "  rainmaker_deploy : Copy the files that differ from the bundle  (worker0, worker1, client0)" in text
    assert "      bin/rain-worker  (worker0, worker1)" in text
    assert "agent/f0.py, agent/f1.py, agent/f2.py, agent/f3.py, agent/f4.py, agent/f5.py and 3 more  (client0)" in text
    assert "missing (a real run would stop here; hardware or vendor software):\n  tofino1: a Tofino ASIC on PCI" in text
    assert not r.ok  # something is missing: a real run would not succeed


@pytest.mark.parametrize(
    "tags,skip,staged",
    [
        (None, None, True),
        (["deploy", "roce"], None, True),
        (["switchd"], None, False),
        (["tofino_sde"], None, False),
        (None, ["deploy"], False),
    ],
)
def test_the_bundle_is_staged_only_for_runs_that_deploy(tmp_path, example_inventory, fake_runner, tags, skip, staged):
    fake = fake_runner(FakeRunner(converge_events().out))
    prov.provision(
        example_inventory,
        tags=tags,
        skip_tags=skip,
        progress=False,
        work_dir=tmp_path,
        extra_vars={"tofino_sde_state": "stopped"},
    )
    kw = fake.kwargs
    assert ("rainmaker_bundle" in kw["extravars"]) == staged
    assert (Path(kw["private_data_dir"]) / "bundle").exists() == staged
    assert kw["extravars"]["tofino_sde_state"] == "stopped"  # the caller's own vars always go through
