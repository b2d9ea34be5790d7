"""A run's provenance for its manifest.json: the checkout, the versions of what ran, and
the hashes of the programs and agents (any testbed, simulated included)."""

from __future__ import annotations

import hashlib
import platform
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from ..deploy import AGENT_FILES, BINARIES, binary_path
from ..inventory import Inventory
from .plan import Point
from .spec import Spec

REPO = Path(__file__).resolve().parents[2]


def git_state() -> dict:
    """The checkout's revision and uncommitted files, for a run's provenance (any testbed)."""
    status = _git("status", "--porcelain")
    return {"revision": _git("rev-parse", "HEAD"), "dirty": bool(status), "dirty_files": status.splitlines()[:50]}


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _sha256(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("rainmaker", "ansible-core", "grpcio", "protobuf", "fabric", "paramiko", "pandas", "hdrhistogram"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    try:
        out["dpdk"] = subprocess.run(
            ["pkg-config", "--modversion", "libdpdk"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        pass
    return out


def manifest(
    spec_path: Path,
    spec: Spec,
    inv: Inventory,
    inv_path: Path | None,
    points: list[Point],
    host_facts: dict,
    bfrt_json_sha: str | None,
) -> dict:
    return {
        "experiment": spec.name,
        "created_unix": time.time(),
        "git": git_state(),
        "spec_file": str(spec_path),
        "spec": spec.model_dump(mode="json"),
        "inventory_file": str(inv_path) if inv_path else None,
        # Key *paths* only: an inventory never holds key material.
        "inventory": inv.model_dump(mode="json"),
        "testbed": {
            "kind": "emulated" if inv.is_emulated else ("tofino-model" if inv.switch.target == "model" else "hardware"),
            "switch": inv.switch.kind,
            "switch_target": inv.switch.target,
            "workers": len(inv.workers),
            "clients": len(inv.clients),
        },
        "points": [asdict(p) for p in points],
        "host_facts": host_facts,
        "versions": _versions(),
        "hashes": {
            "p4_program": _sha256(list((REPO / "switch" / "p4").glob("*.p4"))),
            "bfrt_json": bfrt_json_sha,
            **{b: _sha256([binary_path(b)]) if binary_path(b).exists() else None for b in BINARIES},
            "agents": _sha256([REPO / f for f in AGENT_FILES]),
        },
    }
