"""orchestrator.remote against a real sshd on 127.0.0.1 (a private one, torn down after).

Needs root (sshd drops privileges and logs in as root) and /usr/sbin/sshd. Everything
stays on loopback; every test has its own deploy root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from orchestrator.errors import GroupError, RemoteError
from orchestrator.remote import Group, Remote, Target
from tests.poll import until

pytestmark = pytest.mark.integration

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True)
class Sshd:
    port: int
    dir: Path
    client_key: Path
    known_hosts: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True)


def _banner_ready(port: int, proc: subprocess.Popen, log: Path, timeout: float = 10.0) -> None:
    """Probe until sshd sends its banner; fail at once if it exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-2.0"):
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"sshd not answering on port {port} after {timeout}s")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if os.geteuid() != 0:
        pytest.skip("needs root: sshd must run as root to log in as root")
    if not SSHD.exists() or not shutil.which("ssh-keygen"):
        pytest.skip("needs openssh-server (/usr/sbin/sshd) and ssh-keygen")
    d = tmp_path_factory.mktemp("sshd")
    _keygen(d / "host_key")
    _keygen(d / "client_key")
    shutil.copy(d / "client_key.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
Subsystem sftp internal-sftp
MaxStartups 50:30:100
MaxSessions 50
LogLevel VERBOSE
"""
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    subprocess.run([str(SSHD), "-t", "-f", str(d / "sshd_config")], check=True)
    log = d / "sshd.log"
    proc = subprocess.Popen([str(SSHD), "-D", "-f", str(d / "sshd_config"), "-E", str(log)])
    try:
        _banner_ready(port, proc, log)
        host_key = (d / "host_key.pub").read_text().split()
        (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
        yield Sshd(port, d, d / "client_key", d / "known_hosts")
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def target(sshd: Sshd, tmp_path: Path) -> Target:
    return Target(
        name="h1",
        address="127.0.0.1",
        port=sshd.port,
        user="root",
        key=sshd.client_key,
        known_hosts=sshd.known_hosts,
        role="worker",
        deploy_root=tmp_path / "deploy root",
    )


@pytest.fixture
def remote(target: Target) -> Iterator[Remote]:
    with Remote(target, connect_timeout=5) as r:
        yield r
        r.kill_leftovers(grace=0.5)  # whatever a failed test left running


def _gone(pid: int) -> bool:
    """The process has exited (an unreaped zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


# -- commands ------------------------------------------------------------------------
def test_exit_codes_stdout_stderr(remote: Remote) -> None:
    r = remote.run_shell("echo out; echo err >&2; exit 7", timeout=10, check=False)
    assert (r.exit_code, r.stdout, r.stderr, r.error) == (7, "out\n", "err\n", None)
    assert not r.ok
    with pytest.raises(RemoteError) as e:
        remote.run_shell("echo broken >&2; exit 3", timeout=10)
    assert e.value.result.exit_code == 3
    assert "broken" in e.value.message and "status 3" in e.value.message
    ok = remote.run(["true"], timeout=10)
    assert ok.ok and ok.exit_code == 0


def test_nasty_argv_arrives_literally(remote: Remote, tmp_path: Path) -> None:
    nasty = [
        "a b",
        "it's",
        '"dq"',
        "$HOME",
        "$(id)",
        "`id`",
        "; rm -rf /",
        "*",
        "",
        "back\\slash",
        "tab\there",
        "new\nline",
        "ünï€",
        "-n",
        "&& false",
        "'",
    ]
    odd_dir = tmp_path / "dir with 'quote' $x"
    odd_dir.mkdir()
    r = remote.run(
        [
            "python3",
            "-c",
            "import json, os, sys; print(json.dumps([sys.argv[1:], os.getcwd(), os.environ['V']]))",
            *nasty,
        ],
        timeout=10,
        env={"V": "x'y $z;w"},
        cwd=str(odd_dir),
    )
    assert json.loads(r.stdout) == [nasty, str(odd_dir), "x'y $z;w"]


def test_timeout_returns_and_remote_process_is_gone(remote: Remote) -> None:
    t0 = time.monotonic()
    r = remote.run(["sh", "-c", "sleep 30 & echo $!; wait"], timeout=1, check=False)
    assert time.monotonic() - t0 < 5
    assert r.error == "timed out after 1s" and r.exit_code is None
    pid = int(r.stdout.split()[0])
    assert until(lambda: _gone(pid), 3), "the remote sleep survived the timeout"
    with pytest.raises(RemoteError, match="timed out after 0.5s"):
        remote.run(["sleep", "10"], timeout=0.5)
    # the connection is still usable afterwards
    assert remote.run(["echo", "hi"], timeout=10).stdout == "hi\n"


# -- files ---------------------------------------------------------------------------
def test_put_get_round_trip(remote: Remote, target: Target, tmp_path: Path) -> None:
    src = tmp_path / "bin"
    src.write_bytes(bytes(range(256)) * 1000)
    src.chmod(0o750)
    dest = f"{target.deploy_root}/new/sub/dir/bin"
    remote.put(src, dest)  # creates the folders
    assert remote.run(["stat", "-c", "%a %s", dest], timeout=10).stdout.split() == ["750", "256000"]
    remote.put(src, dest, mode=0o600)
    assert remote.run(["stat", "-c", "%a", dest], timeout=10).stdout.strip() == "600"
    back = tmp_path / "back" / "bin"
    remote.get(dest, back)
    assert back.read_bytes() == src.read_bytes()
    missing = remote.get(f"{target.deploy_root}/nope", tmp_path / "x", check=False)
    assert not missing.ok and "No such file" in (missing.error or "")


def test_tree_round_trip(remote: Remote, target: Target, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for rel, text in {"a.txt": "a", "sub/b.txt": "b", "sub/deeper/c.sh": "#!/bin/sh\n", "empty/.keep": ""}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    (tree / "sub/deeper/c.sh").chmod(0o755)
    r = remote.put_tree(tree, f"{target.deploy_root}/tree")
    assert r.stdout == "4 files"
    back = tmp_path / "back"
    assert remote.get_tree(f"{target.deploy_root}/tree", back).stdout == "4 files"
    files = sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file())
    assert files == ["a.txt", "empty/.keep", "sub/b.txt", "sub/deeper/c.sh"]
    assert (back / "sub/deeper/c.sh").stat().st_mode & 0o777 == 0o755
    assert (back / "sub/b.txt").read_text() == "b"


# -- background processes ------------------------------------------------------------
def test_background_log_ready_then_stop(remote: Remote, target: Target, tmp_path: Path) -> None:
    bg = remote.start(
        "worker",
        ["sh", "-c", 'sleep 0.3; echo "$GREETING ready"; exec sleep 60'],
        cwd=str(tmp_path),
        env={"GREETING": "worker 1"},
    )
    assert bg.log == f"{target.deploy_root}/run/worker.log"
    assert Path(bg.pidfile).read_text().strip() == str(bg.pgid)
    assert os.getpgid(bg.pgid) == bg.pgid and os.getsid(bg.pgid) == bg.pgid  # own session and group
    waited = remote.wait_ready(bg, log_regex="^worker 1 ready$", timeout=10)
    assert waited < 5
    assert remote.stop(bg, grace=5) == "terminated"
    assert _gone(bg.pgid) and not Path(bg.pidfile).exists()
    assert remote.stop(bg) == "not running"


def test_background_port_ready(remote: Remote, tmp_path: Path) -> None:
    port = _free_port()
    bg = remote.start("http", ["python3", "-m", "http.server", "--bind", "127.0.0.1", str(port)], cwd=str(tmp_path))
    remote.wait_ready(bg, port=port, timeout=15)
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert remote.stop(bg) == "terminated"


def test_started_program_has_default_signals_and_stops_on_int(remote: Remote, tmp_path: Path) -> None:
    """A shell's `&` job would start with SIGINT ignored; ours must not (testpmd stops on INT)."""
    code = (
        "import signal, time; print('int ignored:', signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True);"
        " time.sleep(60)"
    )
    bg = remote.start("pyint", ["python3", "-c", code], cwd=str(tmp_path))
    remote.wait_ready(bg, log_regex="^int ignored", timeout=10)
    assert "int ignored: False" in remote.log_tail(bg)
    assert remote.stop(bg, grace=5, signal="INT") == "terminated"
    assert "KeyboardInterrupt" in Path(bg.log).read_text()


def test_same_name_twice_is_refused(remote: Remote, tmp_path: Path) -> None:
    bg = remote.start("once", ["sleep", "60"], cwd=str(tmp_path))
    with pytest.raises(RemoteError, match="already running"):
        remote.start("once", ["sleep", "60"], cwd=str(tmp_path))
    remote.stop(bg, grace=1)


def test_stop_escalates_to_kill(remote: Remote, tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    bg = remote.start("stubborn", ["python3", "-c", code], cwd=str(tmp_path))
    remote.wait_ready(bg, log_regex="^up$", timeout=10)
    t0 = time.monotonic()
    assert remote.stop(bg, grace=0.5) == "killed"
    assert 0.4 < time.monotonic() - t0 < 5
    assert _gone(bg.pgid)


def test_dies_before_ready_fails_fast_with_log_tail(remote: Remote, tmp_path: Path) -> None:
    bg = remote.start("crasher", ["sh", "-c", "echo starting; echo 'boom: bad config' >&2; exit 3"], cwd=str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as e:
        remote.wait_ready(bg, log_regex="ready", timeout=30)
    assert time.monotonic() - t0 < 5
    msg = e.value.message
    assert "exited before it was ready" in msg and "boom: bad config" in msg and "exited with status 3" in msg


def test_not_ready_in_time(remote: Remote, tmp_path: Path) -> None:
    bg = remote.start("silent", ["sleep", "60"], cwd=str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match="not ready after 1s"):
        remote.wait_ready(bg, log_regex="ready", timeout=1)
    assert time.monotonic() - t0 < 5
    remote.stop(bg, grace=1)


def test_kill_leftovers(target: Target, tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # not ours: must survive
    try:
        with Remote(target) as first:
            a = first.start("a", ["sleep", "60"], cwd=str(tmp_path))
            b = first.start("b", ["sh", "-c", "trap '' TERM; echo up; sleep 60"], cwd=str(tmp_path))
            first.wait_ready(b, log_regex="up", timeout=10)
        run = Path(target.deploy_root, "run")
        (run / "stale.pid").write_text("999999999\n")
        (run / "garbage.pid").write_text("-1\n")
        (run / "stranger.pid").write_text(f"{stranger.pid}\n")
        with Remote(target) as later:  # a later run that knows nothing of the first
            stopped = later.kill_leftovers(grace=0.5)
        assert {(s.name, s.pgid, s.how) for s in stopped} == {("a", a.pgid, "terminated"), ("b", b.pgid, "killed")}
        assert _gone(a.pgid) and _gone(b.pgid)
        assert list(run.glob("*.pid")) == []
        assert (run / "a.log").exists()  # logs are kept for the results
        assert stranger.poll() is None
    finally:
        stranger.send_signal(signal.SIGKILL)
        stranger.wait()


# -- connection failures -------------------------------------------------------------
def test_changed_host_key_is_refused(sshd: Sshd, target: Target, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    with Remote(replace(target, known_hosts=kh)) as r:
        res = r.run(["true"], timeout=10, check=False)
        assert res.exit_code is None and "host key mismatch" in (res.error or "")
        assert "ssh-keygen -R" in res.error
        with pytest.raises(RemoteError, match="host key mismatch"):
            r.run(["true"], timeout=10)
        assert not r.put(kh, "/tmp/never", check=False).ok
    assert kh.read_text().count("\n") == 1  # nothing was added


def test_unknown_host_key_is_refused(target: Target, tmp_path: Path) -> None:
    kh = tmp_path / "empty_known_hosts"
    kh.write_text("")
    with Remote(replace(target, known_hosts=kh)) as r:
        res = r.run(["true"], timeout=10, check=False)
    assert "unknown host key" in (res.error or "") and "ssh-keyscan" in res.error
    assert kh.read_text() == ""


def test_auth_failure_and_unreachable(target: Target, tmp_path: Path) -> None:
    _keygen(tmp_path / "stranger_key")
    with Remote(replace(target, key=tmp_path / "stranger_key")) as r:
        assert "authentication failed" in (r.run(["true"], timeout=10, check=False).error or "")
    with Remote(replace(target, port=_free_port()), connect_timeout=2) as r:
        assert "unreachable" in (r.run(["true"], timeout=10, check=False).error or "")


# -- groups --------------------------------------------------------------------------
def test_group_parallel_with_a_failing_host(target: Target) -> None:
    good = [replace(target, name=n) for n in ("a", "b")]
    bad = replace(target, name="c", port=_free_port())
    with Group([*good, bad], connect_timeout=2) as g:
        # In parallel: each host's command runs while the other's does (their
        # [start, end] windows overlap), whatever the machine's load makes of the timing.
        with pytest.raises(GroupError) as e:
            g.run(["sh", "-c", "date +%s.%N; sleep 1.5; date +%s.%N"], timeout=10)
        results = e.value.results
        (a0, a1), (b0, b1) = ([float(x) for x in results[n].stdout.split()] for n in ("a", "b"))
        assert a0 < b1 and b0 < a1, (a0, a1, b0, b1)
        assert list(results) == ["a", "b", "c"]
        assert results["a"].ok and results["b"].ok
        assert not results["c"].ok and "unreachable" in (results["c"].error or "")
        assert "1 of 3 hosts failed" in e.value.message
        # check=False returns the same shape without raising
        out = g.run_shell("echo $((6 * 7))", timeout=10, check=False)
        assert [r.stdout for r in out.values()][:2] == ["42\n", "42\n"]


def test_group_put(target: Target, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("payload")
    ts = [replace(target, name=n, deploy_root=tmp_path / n) for n in ("x", "y")]
    with Group(ts) as g:
        res = g.put(f, "in/f")  # relative: into each target's own deploy root
    assert all(r.ok for r in res.values())
    assert [(tmp_path / n / "in" / "f").read_text() for n in ("x", "y")] == ["payload", "payload"]


def test_find_a_running_background_process(remote: Remote, tmp_path: Path) -> None:
    assert remote.find("finder") is None
    bg = remote.start("finder", ["sleep", "60"], cwd=str(tmp_path))
    found = remote.find("finder")
    assert found is not None and found.pgid == bg.pgid and found.pidfile == bg.pidfile
    assert remote.stop(found, grace=1) == "terminated"
    assert remote.find("finder") is None
