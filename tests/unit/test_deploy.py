"""The deploy bundle (orchestrator/deploy.py) and run's deploy(), without SSH.

deploy() is driven against a fake host that keeps its files in a dict and answers the
one hashing command with real `sha256sum` output computed from them.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest

from orchestrator import deploy as dep
from orchestrator.errors import UsageError
from orchestrator.experiment import machines

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path) -> Path:
    """A copy of the files a bundle is made of, with small fake binaries."""
    root = tmp_path / "repo"
    for f in dep.AGENT_FILES:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / f, root / f)
    for folder, globs in dep.SOURCES.items():
        src = root / "hosts" / folder
        for pattern in globs:
            for p in (REPO / "hosts" / folder).glob(pattern):
                dest = src / p.relative_to(REPO / "hosts" / folder)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)
        (src / "README.md").write_text("not deployed\n")
        (src / "build").mkdir()
        for b in dep.PROGRAMS[folder]:
            (src / "build" / b).write_bytes(b"\x7fELF fake " + b.encode())
    return root


def test_local_bundle_holds_the_binaries_and_agents_with_their_modes(repo):
    b = dep.bundle("local", repo=repo)
    dests = {f.dest: f for f in b.files}
    programs = {"bin/rain-client", "bin/rain-worker", "bin/rpc-client", "bin/rpc-server"}
    assert set(dests) == programs | {f"agent/{f}" for f in dep.AGENT_FILES}
    assert dests["bin/rain-worker"].mode == 0o755 and dests["agent/hosts/agent/worker.py"].mode == 0o644
    assert dests["bin/rain-client"].sha256 == hashlib.sha256(b"\x7fELF fake rain-client").hexdigest()
    assert dests["bin/rpc-server"].sha256 == hashlib.sha256(b"\x7fELF fake rpc-server").hexdigest()
    assert b.sources == () and len(b.digest) == 16


def test_missing_binaries_name_make_build(repo):
    (repo / "hosts/dpdk/build/rain-worker").unlink()
    with pytest.raises(UsageError) as e:
        dep.bundle("local", repo=repo)
    assert "rain-worker is not built" in e.value.message and "make build" in e.value.fix
    (repo / "hosts/rpc/build/rpc-client").unlink()
    with pytest.raises(UsageError) as e:
        dep.bundle("local", repo=repo)
    assert "rain-worker and rpc-client are not built" in e.value.message
    assert str(repo / "hosts/rpc/build/rpc-client") in e.value.message


def test_ansible_vars_carry_the_error_instead_of_raising(monkeypatch, repo):
    """The role gets the reason instead of a bundle, and fails with it only when it runs."""
    (repo / "hosts/dpdk/build/rain-client").unlink()
    real = dep.bundle
    monkeypatch.setattr(dep, "bundle", lambda build="local", *, stage=None: real(build, repo=repo, stage=stage))
    v = dep.ansible_vars("local")["rainmaker_bundle"]
    assert set(v) == {"error"} and "make build" in v["error"]


def test_host_bundle_holds_the_sources_not_the_binaries(repo):
    b = dep.bundle("host", repo=repo)
    assert all(not f.dest.startswith("bin/") for f in b.files)
    dests = {f.dest for f in b.sources}
    assert "src/dpdk/Makefile" in dests and "src/dpdk/include/rain_proto.h" in dests
    assert "src/rpc/Makefile" in dests and "src/rpc/server.c" in dests and "src/rpc/rpc_proto.h" in dests
    # rpc's Makefile reads rain-client's HdrHistograms and workloads from ../dpdk
    assert {"src/dpdk/client/hdr.c", "src/dpdk/client/workload.h"} <= dests
    assert "src/dpdk/README.md" not in dests and "src/rpc/README.md" not in dests
    assert not any("/build/" in d for d in dests)
    assert b.binaries == ("bin/rain-client", "bin/rain-worker", "bin/rpc-client", "bin/rpc-server")
    builds = dep.ansible_vars("host")["rainmaker_bundle"]["builds"]
    assert builds == [
        {"dir": "src/dpdk", "binaries": ["rain-client", "rain-worker"]},
        {"dir": "src/rpc", "binaries": ["rpc-client", "rpc-server"]},
    ]
    # A build on the host needs no local binaries.
    shutil.rmtree(repo / "hosts/dpdk/build")
    shutil.rmtree(repo / "hosts/rpc/build")
    assert dep.bundle("host", repo=repo).digest == b.digest


def test_the_digest_changes_with_any_content_mode_destination_or_build(repo):
    b = dep.bundle("local", repo=repo)
    assert dep.bundle("local", repo=repo).digest == b.digest  # deterministic
    f = b.files[0]
    moved = dep.BundleFile(f.src, f.dest + ".x", f.mode, f.sha256)
    assert dep.digest_of("local", (moved,) + b.files[1:]) != b.digest
    chmod = dep.BundleFile(f.src, f.dest, 0o600, f.sha256)
    assert dep.digest_of("local", (chmod,) + b.files[1:]) != b.digest
    assert dep.digest_of("host", b.files) != b.digest
    (repo / dep.AGENT_FILES[-1]).write_text("# changed\n")
    assert dep.bundle("local", repo=repo).digest != b.digest
    assert dep.digest_of("local", tuple(reversed(b.files))) == b.digest  # order does not matter


def test_a_staged_bundle_deploys_what_it_hashed(repo, tmp_path):
    stage = tmp_path / "stage"
    b = dep.bundle("local", repo=repo, stage=stage)
    agent = next(f for f in b.files if f.dest == "agent/hosts/proto.py")
    assert agent.src == stage / "agent/hosts/proto.py"
    (repo / "hosts/proto.py").write_text("# edited while provisioning\n")  # the checkout moves on
    assert dep.sha256_file(agent.src) == agent.sha256


def test_ansible_vars_list_every_folder_parents_first(repo, monkeypatch):
    real = dep.bundle
    monkeypatch.setattr(dep, "bundle", lambda build="local", *, stage=None: real(build, repo=repo, stage=stage))
    v = dep.ansible_vars("host")["rainmaker_bundle"]
    assert v["build"] == "host" and v["version_file"] == "agent/VERSION"
    dirs = v["dirs"]
    for d in ("agent", "agent/hosts", "agent/hosts/agent", "bin", "src", "src/dpdk", "src/dpdk/worker", "src/rpc"):
        assert d in dirs
    assert dirs.index("agent") < dirs.index("agent/hosts") < dirs.index("agent/hosts/agent")
    f = v["files"][0]
    assert set(f) == {"src", "dest", "mode", "sha256"} and f["mode"] in ("0644", "0755")


def test_the_archive_holds_every_file_by_its_destination_with_its_mode(repo, tmp_path, monkeypatch):
    """The role sends one tar and extracts the members that differ: each member is named
    by its destination, has its mode, is root's, and holds what the bundle hashed."""
    import tarfile

    real = dep.bundle
    monkeypatch.setattr(dep, "bundle", lambda build="local", *, stage=None: real(build, repo=repo, stage=stage))
    stage = tmp_path / "stage"
    v = dep.ansible_vars("host", stage=stage)["rainmaker_bundle"]
    assert v["archive"] == str(stage / dep.ARCHIVE)
    with tarfile.open(v["archive"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        expected = v["files"] + v["sources"]
        assert set(members) == {f["dest"] for f in expected}
        for f in expected:
            m = members[f["dest"]]
            assert m.isfile() and f"{m.mode:04o}" == f["mode"] and (m.uid, m.gid, m.uname) == (0, 0, "root")
            assert hashlib.sha256(tar.extractfile(m).read()).hexdigest() == f["sha256"]
    assert dep.ansible_vars("local")["rainmaker_bundle"]["archive"] is None  # no stage: nothing to send


def test_parse_sha256sum_and_differing(repo):
    b = dep.bundle("local", repo=repo)
    good = {f.dest: f.sha256 for f in b.files}
    text = "".join(f"{d}  {p}\n" for p, d in good.items()) + "garbage line\n"
    assert dep.parse_sha256sum(text) == good
    assert dep.differing(b, good) == []
    bad = dict(good, **{"bin/rain-worker": "0" * 64})
    del bad["agent/hosts/ctl.py"]
    assert {f.dest for f in dep.differing(b, bad)} == {"bin/rain-worker", "agent/hosts/ctl.py"}


# -- run's deploy() against a fake host -------------------------------------------------------


class FakeHost:
    """Files in a dict; answers deploy()'s hashing command like sh + sha256sum would."""

    def __init__(self, name: str, root: str):
        self.target = SimpleNamespace(name=name, deploy_root=PurePosixPath(root))
        self.files: dict[str, bytes] = {}
        self.puts: list[str] = []

    def run(self, argv, *, timeout, check=True):
        assert argv[:2] == ["sh", "-c"] and argv[2] == machines._SH_HASHES
        root, dests = argv[4], argv[5:]
        assert root == str(self.target.deploy_root)
        lines = [f"{hashlib.sha256(self.files[d]).hexdigest()}  {d}" for d in dests if d in self.files]
        version = self.files.get("agent/VERSION", b"").decode().strip()
        return SimpleNamespace(stdout="\n".join(lines + [f"version={version}"]) + "\n", ok=True)

    def put(self, local, remote, *, mode=None, check=True):
        self.files[remote] = Path(local).read_bytes()
        self.puts.append(remote)


class FakeTestbed:
    def __init__(self, inv, hosts):
        self.inv, self.remotes = inv, hosts

    def parallel(self, fn, names):
        return {n: fn(n) for n in names}


@pytest.fixture
def fake_tb(repo, monkeypatch):
    real = dep.bundle
    monkeypatch.setattr(machines, "bundle", lambda build="local", *, stage=None: real(build, repo=repo, stage=stage))
    hosts = {"client0": FakeHost("client0", "/opt/rm/client0"), "worker0": FakeHost("worker0", "/opt/rm/worker0")}
    inv = SimpleNamespace(deploy=SimpleNamespace(build="local"), hosts=[SimpleNamespace(name=n) for n in hosts])
    return FakeTestbed(inv, hosts)


def test_deploy_copies_everything_once_then_nothing(fake_tb, repo):
    logs: list[str] = []
    machines.deploy(fake_tb, logs.append)
    b = dep.bundle("local", repo=repo)
    for h in fake_tb.remotes.values():
        assert set(h.puts) == {f.dest for f in b.files} | {"agent/VERSION"}
        assert h.puts[-1] == "agent/VERSION"  # written last, once the files are in place
        assert h.files["agent/VERSION"] == (b.digest + "\n").encode()
        h.puts.clear()
    machines.deploy(fake_tb, logs.append)
    assert all(h.puts == [] for h in fake_tb.remotes.values())
    assert logs[-1] == f"bundle {b.digest} already on all 2 hosts"


def test_deploy_replaces_a_changed_file_even_when_version_matches(fake_tb):
    machines.deploy(fake_tb, lambda m: None)
    for h in fake_tb.remotes.values():
        h.puts.clear()
    w = fake_tb.remotes["worker0"]
    w.files["agent/hosts/agent/common.py"] += b"# changed on the host\n"
    del w.files["bin/rain-worker"]
    machines.deploy(fake_tb, lambda m: None)
    assert w.puts == ["bin/rain-worker", "agent/hosts/agent/common.py", "agent/VERSION"]
    assert w.files["agent/hosts/agent/common.py"] == (REPO / "hosts/agent/common.py").read_bytes()
    assert fake_tb.remotes["client0"].puts == []


def test_deploy_with_a_build_on_the_host_refuses_stale_binaries(fake_tb):
    fake_tb.inv.deploy.build = "host"
    with pytest.raises(UsageError) as e:
        machines.deploy(fake_tb, lambda m: None)
    assert "provision --tags deploy" in e.value.fix
    assert all(h.puts == [] for h in fake_tb.remotes.values())


def test_the_hashing_command_reports_sums_and_version_and_never_fails(tmp_path):
    import subprocess

    root = tmp_path / "root"
    (root / "agent").mkdir(parents=True)
    (root / "agent/VERSION").write_text("abc123\n")
    (root / "bin").mkdir()
    (root / "bin/rain-client").write_bytes(b"x")
    argv = ["sh", "-c", machines._SH_HASHES, "sh", str(root), "bin/rain-client", "bin/rain-worker", "agent/a b.py"]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0
    assert dep.parse_sha256sum(r.stdout) == {"bin/rain-client": hashlib.sha256(b"x").hexdigest()}
    assert r.stdout.splitlines()[-1] == "version=abc123"
    # No deploy root yet: no sums, an empty version, still status 0.
    r = subprocess.run(
        ["sh", "-c", machines._SH_HASHES, "sh", str(tmp_path / "nothing"), "bin/rain-client"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and r.stdout == "version=\n"
