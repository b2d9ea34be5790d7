"""orchestrator.remote without a network: command composition, target selection,
connection settings, result mapping and group aggregation with fake connections.

Composed command lines are executed by a local /bin/sh to prove that arguments arrive
literally; no SSH connection is ever opened here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import paramiko
import pytest

from orchestrator.errors import GroupError, HostResult, RemoteError, UsageError
from orchestrator.inventory.model import Inventory
from orchestrator.remote import (
    _SH_LIB,
    Background,
    Group,
    Remote,
    Target,
    _seconds,
    compose,
    make_connection,
    targets,
)

NASTY = [
    "a b",
    "it's",
    '"dq"',
    "$HOME",
    "$(echo no)",
    "`echo no`",
    "; echo no",
    "a && b",
    "*",
    "",
    "back\\slash",
    "tab\there",
    "new\nline",
    "ünï€",
    "-n",
    "'",
    "#",
    "~",
    "x=y",
]
SHOW_ARGS = "import json, os, sys; print(json.dumps([sys.argv[1:], os.getcwd(), os.environ.get('V')]))"
# An ed25519 public key (any valid one will do: it is only pinned, never used).
PINNED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def sh(line: str) -> str:
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, check=True, timeout=10).stdout


# -- composition ---------------------------------------------------------------------
def test_argv_arrives_literally(tmp_path: Path) -> None:
    line = compose([sys.executable, "-c", SHOW_ARGS, *NASTY])
    assert json.loads(sh(line)) == [NASTY, str(Path.cwd()), None]


def test_env_cwd_and_timeout_compose(tmp_path: Path) -> None:
    odd = tmp_path / "dir with 'quote' $x; y"
    odd.mkdir()
    env = {"V": "x'y $z;w `no`"}
    line = compose([sys.executable, "-c", SHOW_ARGS, "$V"], env=env, cwd=str(odd), timeout=5)
    assert line.startswith("cd ") and " && timeout -k 2 5 env " in line
    assert json.loads(sh(line)) == [["$V"], str(odd), env["V"]]


def test_compose_shape_and_errors() -> None:
    assert compose(["echo", "hi"]) == "echo hi"
    assert compose(["echo", "a b"], cwd="/x y") == "cd '/x y' && echo 'a b'"
    assert compose(["ls"], env={"A": "1", "B": "two words"}) == "env A=1 'B=two words' ls"
    assert compose(["ls"], timeout=1.5) == "timeout -k 2 1.5 ls"
    with pytest.raises(ValueError, match="empty"):
        compose([])
    with pytest.raises(ValueError, match="environment variable name"):
        compose(["ls"], env={"A;rm": "1"})
    with pytest.raises(ValueError, match="positive"):
        compose(["ls"], timeout=0)


def test_seconds_format() -> None:
    assert [_seconds(t) for t in (1, 30.0, 0.5, 1.25, 0.0001)] == ["1", "30", "0.5", "1.25", "0"]


def test_remote_guards_never_signal_group_0_or_1() -> None:
    """`kill -TERM -1` would signal every process: the sh library must refuse such pgids."""
    out = sh(
        _SH_LIB + 'for v in "" 0 1 -1 12a " 5" 2 99999; do if _valid "$v"; then echo "$v:y"; else echo "$v:n"; fi; done'
    )
    assert out.split("\n")[:-1] == [":n", "0:n", "1:n", "-1:n", "12a:n", " 5:n", "2:y", "99999:y"]


# -- target selection ----------------------------------------------------------------
def _inventory(**ssh: Any) -> Inventory:
    def host(name: str, role: str, i: int) -> dict:
        return {
            "name": name,
            "role": role,
            "mgmt": {"address": f"192.0.2.{20 + i}", "port": 2200 + i},
            "nic": {
                "vdev": f"net_af_packet{i}",
                "mac": f"02:00:00:00:00:0{i}",
                "ip": f"10.0.0.{i}",
                "switch_port": f"{i}/0",
            },
            "deploy_root": f"/srv/{name}",
        }

    return Inventory.model_validate(
        {
            "name": "lab",
            "switch": {
                "name": "sw",
                "kind": "emulated",
                "mgmt": {"address": "192.0.2.10", "user": "admin", "key": "/k/switch"},
                "bfrt": "192.0.2.10:50052",
                "ports": [{"port": f"{i}/0", "dev_port": i} for i in (1, 2, 3)],
            },
            "hosts": [host("client0", "client", 1), host("worker0", "worker", 2), host("worker1", "worker", 3)],
            "ssh": ssh,
        }
    )


def test_targets_default_and_roles() -> None:
    inv = _inventory(key="/k/default", known_hosts="/k/known_hosts")
    assert [t.name for t in targets(inv)] == ["sw", "client0", "worker0", "worker1"]
    assert [t.name for t in targets(inv, include_switch=False)] == ["client0", "worker0", "worker1"]
    assert [t.name for t in targets(inv, role="worker")] == ["worker0", "worker1"]
    assert [t.name for t in targets(inv, role="switch")] == ["sw"]
    assert [t.name for t in targets(inv, hosts=["worker1", "client0"])] == ["client0", "worker1"]
    sw, c0 = targets(inv)[:2]
    assert sw == Target(
        "sw", "192.0.2.10", 22, "admin", Path("/k/switch"), Path("/k/known_hosts"), "switch", Path("/opt/rainmaker")
    )
    assert (c0.port, c0.user, c0.key, c0.role, c0.deploy_root) == (
        2201,
        "root",
        Path("/k/default"),
        "client",
        Path("/srv/client0"),
    )
    assert str(c0.run_dir) == "/srv/client0/run"
    # the waits for a silent machine: the inventory's (10 s by default), each Remote's own
    assert (c0.connect_timeout_s, c0.dead_peer_s) == (10.0, 10.0)
    short = targets(_inventory(connect_timeout_s=3, dead_peer_s=4))[1]
    assert (short.connect_timeout_s, short.dead_peer_s) == (3.0, 4.0)
    assert Remote(short).connect_timeout == 3.0 and Remote(short, connect_timeout=1).connect_timeout == 1


def test_targets_unknown_names_list_the_valid_ones() -> None:
    inv = _inventory()
    with pytest.raises(UsageError) as e:
        targets(inv, hosts=["worker0", "wroker1"])
    assert "'wroker1'" in e.value.message and "sw, client0, worker0, worker1" in (e.value.fix or "")
    assert e.value.exit_code == 2
    with pytest.raises(UsageError) as e:
        targets(inv, role="workers")
    assert "'workers'" in e.value.message and e.value.fix == "use one of: switch, client, worker"
    with pytest.raises(UsageError, match="is named client0 and of role 'worker'"):
        targets(inv, hosts=["client0"], role="worker")


# -- connection settings (built, never opened) ---------------------------------------
def _target(tmp_path: Path, **kw: Any) -> Target:
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:2222 {PINNED}\n")
    base = dict(
        name="h",
        address="127.0.0.1",
        port=2222,
        user="root",
        key=tmp_path / "id",
        known_hosts=kh,
        role="worker",
        deploy_root=tmp_path / "deploy",
    )
    return Target(**{**base, **kw})


def test_connection_verifies_host_keys_from_the_pinned_file_only(tmp_path: Path) -> None:
    conn = make_connection(_target(tmp_path))
    client = conn.client
    assert isinstance(client._policy, paramiko.RejectPolicy)
    assert len(client.get_host_keys()) == 1 and client.get_host_keys().lookup("[127.0.0.1]:2222")
    assert len(client._system_host_keys) == 0 and client._host_keys_filename is None  # never written back
    assert conn.connect_kwargs["look_for_keys"] is False and conn.connect_kwargs["allow_agent"] is False
    assert conn.connect_kwargs["key_filename"] == [str(tmp_path / "id")]  # that key and no other
    assert dict(conn.ssh_config) == {"hostname": "127.0.0.1"}  # no ~/.ssh/config, no /etc/ssh/ssh_config
    assert not conn.is_connected


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"key": None}, "no SSH private key"),
        ({"known_hosts": None}, "no known_hosts configured"),
        ({"known_hosts": Path("/nonexistent/kh")}, "cannot read known_hosts file /nonexistent/kh"),
    ],
)
def test_missing_ssh_settings_become_host_errors(tmp_path: Path, change: dict, expect: str) -> None:
    r = Remote(_target(tmp_path, **change))
    res = r.run(["true"], timeout=5, check=False)
    assert res.exit_code is None and expect in (res.error or "")
    assert expect in (r.put(tmp_path / "known_hosts", "/x", check=False).error or "")
    with pytest.raises(RemoteError, match=expect):
        r.run(["true"], timeout=5)


# -- result mapping with a fake connection -------------------------------------------
class FakeConn:
    """Answers each run() with the next scripted (exited, stdout, stderr) or exception."""

    def __init__(self, *answers: Any, delay: float = 0.0):
        self.answers = list(answers)
        self.lines: list[str] = []
        self.kwargs: list[dict] = []
        self.delay = delay
        self.closed = False

    def run(self, line: str, **kw: Any) -> SimpleNamespace:
        self.lines.append(line)
        self.kwargs.append(kw)
        time.sleep(self.delay)
        a = self.answers.pop(0) if self.answers else (0, "", "")
        if isinstance(a, BaseException):
            raise a
        return SimpleNamespace(exited=a[0], stdout=a[1], stderr=a[2])

    def close(self) -> None:
        self.closed = True


def test_run_sends_quoted_line_under_remote_timeout(tmp_path: Path) -> None:
    fake = FakeConn((0, "out\n", ""))
    r = Remote(_target(tmp_path), connection=fake)
    res = r.run(["echo", "a b", "$x"], timeout=7, env={"K": "v w"}, cwd="/d d")
    assert fake.lines == ["cd '/d d' && timeout -k 2 7 env 'K=v w' echo 'a b' '$x'"]
    assert res == HostResult("h", "cd '/d d' && env 'K=v w' echo 'a b' '$x'", 0, "out\n", "", None, res.duration_s)
    kw = fake.kwargs[0]
    assert kw["warn"] and kw["hide"] and kw["in_stream"] is False and kw["pty"] is False
    assert kw["timeout"] > 7  # local backstop only
    r.run_shell("echo $HOME; exit 3 | cat", timeout=1, check=False)
    assert fake.lines[1] == "timeout -k 2 1 sh -c 'echo $HOME; exit 3 | cat'"


def test_failures_raise_remote_error_with_result(tmp_path: Path) -> None:
    r = Remote(_target(tmp_path), connection=FakeConn((2, "", "no such file\n")))
    with pytest.raises(RemoteError) as e:
        r.run(["cat", "x"], timeout=5)
    assert e.value.result.exit_code == 2 and "no such file" in e.value.message and "status 2" in e.value.message


def test_timeout_status_is_reported_as_timeout_only_after_the_deadline(tmp_path: Path) -> None:
    slow = Remote(_target(tmp_path), connection=FakeConn((124, "partial", ""), delay=0.06))
    res = slow.run(["sleep", "9"], timeout=0.05, check=False)
    assert res.error == "timed out after 0.05s" and res.exit_code is None and res.stdout == "partial"
    quick = Remote(_target(tmp_path), connection=FakeConn((124, "", "")))
    res = quick.run(["prog"], timeout=30, check=False)  # the program itself exited 124
    assert res.error is None and res.exit_code == 124


def test_connection_lost_is_a_host_error_and_reconnects_next_time(tmp_path: Path) -> None:
    fake = FakeConn(paramiko.SSHException("SSH session not active"))
    r = Remote(_target(tmp_path), connection=fake)
    res = r.run(["true"], timeout=5, check=False)
    assert res.error == "connection lost: SSH session not active" and fake.closed
    assert r._conn is None


def test_start_wait_stop_leftovers_parse_answers(tmp_path: Path) -> None:
    t = _target(tmp_path, deploy_root=Path("/srv/h"))
    fake = FakeConn(
        (0, "4242\n", ""),
        (3, "died\n", ""),
        (0, "boom\n[rainmaker] exited with status 1\n", ""),
        (0, "w 4242 killed\n", ""),
        (0, "a 11 terminated\nb c 12 killed\n", ""),
    )
    r = Remote(t, connection=fake)
    bg = r.start("w", ["prog", "--flag", "x y"], cwd="/srv/h", env={"A": "1"})
    assert bg == Background(
        "h", "w", 4242, "/srv/h/run/w.log", "/srv/h/run/w.pid", "start w: cd /srv/h && env A=1 prog --flag 'x y'"
    )
    assert fake.lines[0].endswith("rainmaker /srv/h/run w /srv/h /srv/h/run/w env A=1 prog --flag 'x y'")
    with pytest.raises(RemoteError) as e:
        r.wait_ready(bg, log_regex="ready", timeout=3)
    assert "exited before it was ready" in e.value.message and "boom" in e.value.message
    assert r.stop(bg, grace=1) == "killed"
    stopped = r.kill_leftovers()
    assert [(s.name, s.pgid, s.how) for s in stopped] == [("a", 11, "terminated"), ("b c", 12, "killed")]


class LocalConn:
    """Runs each command line here, with sh, as the remote shell would (no SSH)."""

    def run(self, line: str, **kw: Any) -> SimpleNamespace:
        r = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30)
        return SimpleNamespace(exited=r.returncode, stdout=r.stdout, stderr=r.stderr)

    def close(self) -> None:
        pass


def test_kill_leftovers_removes_runtime_folders_no_process_holds(tmp_path: Path) -> None:
    """A DPDK program killed with SIGKILL leaves its runtime folder: removed once no
    process has a file open in it; a folder a live program holds is kept."""
    t = _target(tmp_path)
    Path(t.run_dir).mkdir(parents=True)
    held, stale = tmp_path / "dpdk" / "rm-w0-worker-2", tmp_path / "dpdk" / "rm-w0-worker"  # a name a prefix of another
    for d in (held, stale):
        d.mkdir(parents=True)
        (d / "config").write_text("x")
    holder = subprocess.Popen(["sleep", "60"], stdin=open(held / "config"))  # an fd into `held`, like EAL's lock
    try:
        r = Remote(t, connection=LocalConn())
        assert r.kill_leftovers(stale_dirs=[str(held), str(stale), str(tmp_path / "dpdk" / "never")]) == []
        assert held.is_dir() and not stale.exists()
        holder.kill()
        holder.wait()
        r.kill_leftovers(stale_dirs=[str(held)])
        assert not held.exists()
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(ValueError, match="absolute folder"):
        r.kill_leftovers(stale_dirs=["relative/dir"])
    with pytest.raises(ValueError, match="absolute folder"):
        r.kill_leftovers(stale_dirs=["/var"])


def test_background_argument_checks(tmp_path: Path) -> None:
    r = Remote(_target(tmp_path), connection=FakeConn())
    with pytest.raises(ValueError, match="background name"):
        r.start("../evil", ["x"], cwd="/")
    bg = Background("other", "w", 5, "/l", "/p", "c")
    with pytest.raises(ValueError, match="runs on other"):
        r.stop(bg)
    with pytest.raises(ValueError, match="log_regex, port or both"):
        r.wait_ready(Background("h", "w", 5, "/l", "/p", "c"), timeout=1)


# -- groups --------------------------------------------------------------------------
class FakeRemote:
    """Stands in for Remote in a Group: scripted per host, records the threads used."""

    def __init__(self, target: Target, outcome: dict[str, Any], seen: list[str], delay: float = 0.0):
        self.target, self.outcome, self.seen, self.delay = target, outcome, seen, delay
        self.closed = False

    def run(self, argv: list[str], *, timeout: float, check: bool, env: Any = None, cwd: Any = None) -> HostResult:
        assert check is False  # Group aggregates; single hosts never raise
        self.seen.append(threading.current_thread().name)
        time.sleep(self.delay)
        o = self.outcome[self.target.name]
        if isinstance(o, Exception):
            raise o
        return HostResult(self.target.name, " ".join(argv), o, "x\n" if o == 0 else "", "" if o == 0 else "bad\n")

    def run_shell(self, cmd: str, **kw: Any) -> HostResult:
        return self.run(["sh", "-c", cmd], **kw)

    def put(self, local: Any, remote_path: str, *, mode: Any, check: bool) -> HostResult:
        return self.run(["put", remote_path], timeout=1, check=check)

    def close(self) -> None:
        self.closed = True


def _group(tmp_path: Path, outcome: dict[str, Any], delay: float = 0.0) -> tuple[Group, list[str]]:
    seen: list[str] = []
    ts = [_target(tmp_path, name=n) for n in outcome]
    return Group(ts, remote_factory=lambda t: FakeRemote(t, outcome, seen, delay)), seen  # type: ignore[arg-type,return-value]


def test_group_aggregates_partial_results_in_target_order(tmp_path: Path) -> None:
    g, _ = _group(tmp_path, {"w2": 0, "w0": 1, "w1": 0, "w3": RuntimeError("bug")})
    with pytest.raises(GroupError) as e:
        g.run(["ls"], timeout=5)
    res = e.value.results
    assert list(res) == ["w2", "w0", "w1", "w3"]
    assert [r.ok for r in res.values()] == [True, False, True, False]
    assert res["w0"].exit_code == 1 and res["w3"].error == "RuntimeError: bug"
    assert e.value.message.startswith("2 of 4 hosts failed:") and "bad" in e.value.message
    assert not isinstance(e.value, RemoteError)
    out = g.run_shell("ls", timeout=5, check=False)
    assert out["w2"].command == "sh -c ls" and not out["w0"].ok
    with pytest.raises(GroupError):
        g.put("f", "/x")
    g.close()
    assert all(r.closed for r in g.remotes.values())  # type: ignore[attr-defined]


def test_group_runs_in_parallel(tmp_path: Path) -> None:
    g, seen = _group(tmp_path, {f"w{i}": 0 for i in range(4)}, delay=0.3)
    t0 = time.monotonic()
    res = g.run(["sleep"], timeout=5)
    assert time.monotonic() - t0 < 0.9 and all(r.ok for r in res.values())
    assert len(set(seen)) == 4


def test_group_rejects_duplicate_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="listed twice"):
        Group([_target(tmp_path), _target(tmp_path)])


def test_find_a_background_process_by_its_pidfile(tmp_path: Path) -> None:
    t = _target(tmp_path, deploy_root=Path("/srv/h"))
    fake = FakeConn((0, "4242\n", ""), (0, "none\n", ""))
    r = Remote(t, connection=fake)
    bg = r.find("switch")
    assert (bg.host, bg.name, bg.pgid, bg.log, bg.pidfile) == (
        "h",
        "switch",
        4242,
        "/srv/h/run/switch.log",
        "/srv/h/run/switch.pid",
    )
    assert fake.lines[0].endswith("rainmaker /srv/h/run/switch.pid /srv/h/run/switch")
    assert r.find("switch") is None
    with pytest.raises(ValueError, match="background name"):
        r.find("../x")


# -- behind a gateway (ssh.jump), never opened -----------------------------------------
def test_targets_carry_the_gateway_with_its_own_or_the_inventorys_key_and_known_hosts() -> None:
    from orchestrator.remote import JumpHost

    inv = _inventory(key="/k/default", known_hosts="/k/kh", jump={"address": "gw.lab", "user": "alice"})
    gw = JumpHost("gw.lab", 22, "alice", Path("/k/default"), Path("/k/kh"))
    assert {t.jump for t in targets(inv)} == {gw}
    own = _inventory(
        key="/k/default",
        known_hosts="/k/kh",
        dead_peer_s=4,
        jump={"address": "gw.lab", "user": "alice", "port": 2022, "key": "/k/gw", "known_hosts": "/k/gw_kh"},
    )
    j = targets(own)[0].jump
    assert (j.port, j.key, j.known_hosts, j.dead_peer_s) == (2022, Path("/k/gw"), Path("/k/gw_kh"), 4.0)
    assert str(j) == "alice@gw.lab:2022"
    assert targets(_inventory())[0].jump is None


def test_the_gateway_is_a_connection_with_the_same_pinned_key_policy(tmp_path: Path) -> None:
    from orchestrator.remote import JumpHost

    kh = tmp_path / "gw_kh"
    kh.write_text(f"gw.lab {PINNED}\n")
    gw = make_connection(JumpHost("gw.lab", 22, "alice", tmp_path / "gw_id", kh))
    assert isinstance(gw.client._policy, paramiko.RejectPolicy)  # unknown keys refused, never added
    assert gw.client.get_host_keys().lookup("gw.lab") and len(gw.client._system_host_keys) == 0
    assert gw.connect_kwargs["key_filename"] == [str(tmp_path / "gw_id")] and gw.connect_kwargs["allow_agent"] is False
    inner = make_connection(_target(tmp_path), gateway=gw)
    assert inner.gateway is gw  # Fabric opens a direct-tcpip channel through it
    assert isinstance(inner.client._policy, paramiko.RejectPolicy)
    assert dict(inner.ssh_config) == {"hostname": "127.0.0.1"}  # still no ssh config read
    with pytest.raises(Exception, match=r"set ssh.jump.known_hosts \(or ssh.known_hosts\)"):
        make_connection(JumpHost("gw.lab", 22, "alice", tmp_path / "gw_id", None))


def test_a_group_shares_one_gateway_connection_and_closes_it(tmp_path: Path) -> None:
    from dataclasses import replace

    from orchestrator.remote import Gateway, JumpHost

    j1 = JumpHost("gw1.lab", 22, "alice", tmp_path / "id", tmp_path / "kh")
    j2 = JumpHost("gw2.lab", 22, "alice", tmp_path / "id", tmp_path / "kh")
    ts = [replace(_target(tmp_path), name=n, jump=j) for n, j in (("a", j1), ("b", j1), ("c", j2), ("d", None))]
    closed: list[str] = []
    with Group(ts) as g:
        assert set(g.gateways) == {j1, j2}
        assert g.remotes["a"].gateway is g.remotes["b"].gateway is g.gateways[j1]
        assert g.remotes["c"].gateway is g.gateways[j2] and g.remotes["d"].gateway is None
        for gw in g.gateways.values():
            gw._conn = SimpleNamespace(close=lambda gw=gw: closed.append(gw.jump.address), is_connected=True)
    assert sorted(closed) == ["gw1.lab", "gw2.lab"]  # the group closed its gateways
    alone = Remote(ts[0])
    assert isinstance(alone.gateway, Gateway) and alone.gateway.jump == j1  # one of its own
    with pytest.raises(ValueError, match="reached through"):
        Remote(ts[0], gateway=Gateway(j2))


def test_an_unusable_gateway_is_named_in_every_hosts_error(tmp_path: Path) -> None:
    from dataclasses import replace

    from orchestrator.remote import JumpHost

    gw = JumpHost("gw.lab", 2022, "alice", None, tmp_path / "kh")
    with Group([replace(_target(tmp_path), name=n, jump=gw) for n in ("a", "b")]) as g:
        res = g.run(["true"], timeout=5, check=False)
    for r in res.values():
        assert not r.ok and r.error.startswith("gateway alice@gw.lab:2022 (ssh.jump): no SSH private key"), r.error
        assert "set ssh.jump.key (or ssh.key)" in r.error
