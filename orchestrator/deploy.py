"""What rainmaker deploys to each client and worker, defined once: the bundle.

A host's deploy root receives
- bin/rain-client, bin/rain-worker (Rain's DPDK programs, hosts/dpdk) and bin/rpc-client,
  bin/rpc-server (Rakaia's kernel-TCP programs, hosts/rpc): built here by `make build`
  (deploy.build: local), or built on the host from the sources copied to src/dpdk/ and
  src/rpc/ (deploy.build: host);
- agent/hosts/...: the agents, run there as `python3 -m hosts.agent`;
- agent/VERSION: the bundle's digest, written last, once everything else is in place.

Two paths deploy it, both from `bundle()`: the rainmaker_deploy role (`rainmaker provision`
passes `ansible_vars()` as extra vars) and `orchestrator/experiment/run.py:deploy()` (SFTP,
before a run). Both compare each file's SHA-256 on the host with the bundle's and copy
only what differs, so a run after `provision` copies nothing, and a file changed on a host
is found even when VERSION still matches.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import UsageError

REPO = Path(__file__).resolve().parent.parent
# The programs, by the source folder below hosts/ that builds them (into its build/).
PROGRAMS = {"dpdk": ("rain-client", "rain-worker"), "rpc": ("rpc-client", "rpc-server")}
BINARIES = tuple(b for names in PROGRAMS.values() for b in names)
AGENT_FILES = (
    "hosts/__init__.py",
    "hosts/proto.py",
    "hosts/ctl.py",
    "hosts/agent/__init__.py",
    "hosts/agent/__main__.py",
    "hosts/agent/common.py",
    "hosts/agent/worker.py",
    "hosts/agent/client.py",
    "hosts/agent/adaptive.py",
    "hosts/agent/kernel_net.py",
    "hosts/agent/rpc.py",
)
# What `make -C src/<folder>` needs on a host, by folder (README files, benchmarks and
# build/ stay here); rpc's Makefile also reads ../dpdk's client/ and include/.
SOURCES = {
    "dpdk": ("Makefile", "include/*.h", "common/*.[ch]", "client/*.[ch]", "worker/*.[ch]"),
    "rpc": ("Makefile", "*.[ch]"),
}
VERSION = "agent/VERSION"
SOURCE_ROOT = "src"  # deploy.build: host: where the sources go, below the deploy root


@dataclass(frozen=True)
class BundleFile:
    src: Path  # on this machine
    dest: str  # relative to the host's deploy root
    mode: int
    sha256: str

    def as_var(self) -> dict[str, Any]:
        return {"src": str(self.src), "dest": self.dest, "mode": f"{self.mode:04o}", "sha256": self.sha256}


@dataclass(frozen=True)
class Bundle:
    build: str  # local: `files` include the binaries; host: `sources` are built on the host
    files: tuple[BundleFile, ...]  # copied as they are
    sources: tuple[BundleFile, ...]  # build: host only
    digest: str  # what agent/VERSION holds

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(f"bin/{b}" for b in BINARIES)

    def all_files(self) -> tuple[BundleFile, ...]:
        return self.files + self.sources


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _file(src: Path, dest: str, mode: int, stage: Path | None) -> BundleFile:
    """One file of the bundle. With `stage`, the file is first copied there and the copy
    is what gets hashed and deployed: a rebuild or an edit while hosts are being
    provisioned then cannot make VERSION name content other than what was copied."""
    if stage is not None:
        staged = stage / dest
        staged.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, staged)
        src = staged
    return BundleFile(src=src, dest=dest, mode=mode, sha256=sha256_file(src))


def digest_of(build: str, files: tuple[BundleFile, ...]) -> str:
    """The bundle's identity: every file's destination, mode and content, and how the
    binaries are made. 16 hex digits (64 bits) name a deploy well enough."""
    h = hashlib.sha256(f"rainmaker-bundle 1 build={build}\n".encode())
    for f in sorted(files, key=lambda f: f.dest):
        h.update(f"{f.dest} {f.mode:o} {f.sha256}\n".encode())
    return h.hexdigest()[:16]


def binary_path(name: str, repo: Path = REPO) -> Path:
    """Where `make build` leaves program `name` (hosts/<folder>/build/<name>)."""
    folder = next(f for f, names in PROGRAMS.items() if name in names)
    return repo / "hosts" / folder / "build" / name


def missing_binaries(repo: Path = REPO) -> list[str]:
    return [b for b in BINARIES if not binary_path(b, repo).is_file()]


def bundle(build: str = "local", *, repo: Path = REPO, stage: Path | None = None) -> Bundle:
    """The bundle for `deploy.build` (local | host), its files copied into `stage` when
    given (see _file). Raises UsageError naming `make build` when the binaries a local
    build deploys are not built."""
    if build not in ("local", "host"):
        raise UsageError(f"unknown deploy.build '{build}'", fix="use local or host")
    agents = tuple(_file(repo / f, f"agent/{f}", 0o644, stage) for f in AGENT_FILES)
    if build == "local":
        missing = missing_binaries(repo)
        if missing:
            raise UsageError(
                f"{' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} not built "
                f"(no {', '.join(str(binary_path(m, repo)) for m in missing)})",
                fix="run `make build` (it builds hosts/dpdk against the DPDK here, and hosts/rpc)",
            )
        binaries = tuple(_file(binary_path(b, repo), f"bin/{b}", 0o755, stage) for b in BINARIES)
        files, sources = binaries + agents, ()
    else:
        if not (repo / "hosts" / "dpdk" / "Makefile").is_file():
            raise UsageError(
                f"no DPDK sources in {repo / 'hosts' / 'dpdk'}", fix="run rainmaker from a complete checkout"
            )
        found = []
        for folder, globs in SOURCES.items():
            src = repo / "hosts" / folder
            for p in sorted({p for g in globs for p in src.glob(g) if p.is_file()}):
                dest = PurePosixPath(SOURCE_ROOT, folder, *p.relative_to(src).parts)
                found.append(_file(p, str(dest), 0o644, stage))
        sources = tuple(found)
        files = agents
    return Bundle(build=build, files=files, sources=sources, digest=digest_of(build, files + sources))


ARCHIVE = "bundle.tar"


def write_archive(b: Bundle, path: Path) -> Path:
    """Every file of the bundle in one tar, each member named by its destination, with
    its mode, owned by root: the rainmaker_deploy role sends it in one transfer and
    extracts the members that differ. A loop of one copy per file cost about 1.8 s a
    file (a stat, a transfer and a module run each): 20 s for a host's 11 files, over a
    minute for a build on the host's sources. Uncompressed: the hosts need only tar."""
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        for f in sorted(b.all_files(), key=lambda f: f.dest):
            info = tar.gettarinfo(str(f.src), arcname=f.dest)
            info.mode, info.uid, info.gid, info.uname, info.gname = f.mode, 0, 0, "root", "root"
            with open(f.src, "rb") as fh:
                tar.addfile(info, fh)
    tmp.replace(path)
    return path


def ansible_vars(build: str = "local", stage: Path | None = None) -> dict[str, Any]:
    """Extra vars for the rainmaker_deploy role: the bundle (staged in `stage`, with its
    archive; without a stage the role can inspect and verify, not copy), or why there is
    none (the role fails with it only when it runs, so other tags work without a build)."""
    try:
        b = bundle(build, stage=stage)
    except UsageError as e:
        return {"rainmaker_bundle": {"error": e.render()}}
    archive = str(write_archive(b, stage / ARCHIVE)) if stage is not None else None
    return {
        "rainmaker_bundle": {
            "build": b.build,
            "digest": b.digest,
            "version_file": VERSION,
            # deploy.build: host: each folder below src/ is built with make, its programs installed
            "builds": [{"dir": f"{SOURCE_ROOT}/{f}", "binaries": list(names)} for f, names in PROGRAMS.items()],
            "binaries": list(b.binaries),
            # Every folder the files need, parents first: the role makes them 0755 like the
            # deploy root's own (roles/common).
            "dirs": directories(b),
            "files": [f.as_var() for f in b.files],
            "sources": [f.as_var() for f in b.sources],
            "archive": archive,
        }
    }


def directories(b: Bundle) -> list[str]:
    """Every folder below the deploy root that the bundle's files (and binaries) sit in."""
    out: set[str] = set()
    for dest in [f.dest for f in b.all_files()] + list(b.binaries):
        for parent in PurePosixPath(dest).parents:
            if str(parent) != ".":
                out.add(str(parent))
    return sorted(out, key=lambda d: (d.count("/"), d))


def parse_sha256sum(text: str) -> dict[str, str]:
    """`sha256sum` output -> {path: digest} (paths as given to it)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64:
            out[path] = digest
    return out


def differing(b: Bundle, have: dict[str, str], files: tuple[BundleFile, ...] | None = None) -> list[BundleFile]:
    """The bundle's files whose content on the host (`have`: dest -> sha256) differs."""
    return [f for f in (b.files if files is None else files) if have.get(f.dest) != f.sha256]


__all__ = [
    "AGENT_FILES",
    "ARCHIVE",
    "BINARIES",
    "Bundle",
    "BundleFile",
    "SOURCES",
    "VERSION",
    "ansible_vars",
    "bundle",
    "differing",
    "directories",
    "digest_of",
    "missing_binaries",
    "parse_sha256sum",
    "sha256_file",
    "write_archive",
]
