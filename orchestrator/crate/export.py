"""`rainmaker export RUN_DIR`: a run folder as one zip, a Workflow Run RO-Crate.

Every file of the run goes in (its raw measurements too: anyone can analyse, plot and
report it again), as the run wrote it, but for the secrets scrub.py removes; symbolic
links and what --exclude names stay out, and export.json says so. The zip is written
to a temporary file beside the target and renamed into place at the end: an
interrupted export leaves nothing half-written.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import yaml

from ..errors import UsageError
from ..experiment.layout import MANIFEST, RunDir
from . import layout as L
from .metadata import Author, RunFacts, build, license_entity
from .scrub import Scrubbed, check_leaks, scrub_file, scrub_inventory


@dataclass(frozen=True)
class Exported:
    """What export wrote: the zip, how many run files, their bytes, what was scrubbed."""

    path: Path
    files: int
    bytes: int
    scrubbed: dict
    left_out: list[dict]


def default_name(run_dir: Path) -> str:
    rd = RunDir(run_dir)
    return f"{_experiment(rd)}-{rd.name}{L.SUFFIX}"


def _experiment(rd: RunDir) -> str:
    m = rd.read_manifest()
    spec = m.get("spec") if isinstance(m.get("spec"), dict) else {}
    name = m.get("experiment") or spec.get("name")
    return L.safe_component(name, "the experiment's name", str(rd.manifest))


def _run_files(rd: RunDir, exclude: Sequence[str]) -> tuple[list[str], list[dict]]:
    """(the run's regular files, relative posix paths, in order; what was left out, why)."""
    files, left_out = [], []
    for top, dirs, names in os.walk(rd.path, followlinks=False):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = os.path.join(top, name)
            rel = Path(full).relative_to(rd.path).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                left_out.append({"path": rel, "why": "a symbolic link (its target may be anything on this machine)"})
            elif not stat.S_ISREG(mode):
                left_out.append({"path": rel, "why": "not a regular file"})
            elif name.startswith(".") and name.endswith(".tmp"):
                continue  # a writer's temporary file (layout.atomic_replace)
            elif L.is_crate_file(rel):
                continue  # a crate's own file, in a run imported from one: written afresh
            elif any(fnmatch(rel, pat) for pat in exclude):
                left_out.append({"path": rel, "why": "--exclude"})
            else:
                files.append(rel)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    return files, left_out


def _check_output(out: Path, rd: RunDir, force: bool) -> None:
    if out.resolve().is_relative_to(rd.path.resolve()):
        raise UsageError(f"-o {out}: inside the run folder it exports", fix="write the crate elsewhere")
    if out.is_dir():
        raise UsageError(f"-o {out}: a folder", fix=f"give a file name, e.g. {out / default_name(rd.path)}")
    if out.exists() and not force:
        raise UsageError(f"{out} exists", fix="give another -o FILE, or --force to replace it")


def _zip_time(path: Path) -> tuple[int, int, int, int, int, int]:
    t = datetime.datetime.fromtimestamp(max(path.stat().st_mtime, 315_532_800), datetime.UTC)  # zip: >= 1980
    return (t.year, t.month, t.day, t.hour, t.minute, t.second)


def _put(zf: zipfile.ZipFile, rel: str, data: bytes, when: tuple[int, int, int, int, int, int]) -> None:
    info = zipfile.ZipInfo(rel, date_time=when)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    zf.writestr(info, data)


def export_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    authors: Sequence[str] = (),
    license: str = "CC-BY-4.0",
    exclude: Sequence[str] = (),
    force: bool = False,
) -> Exported:
    """Write the run as a crate zip; returns what was written."""
    rd = RunDir(run_dir).check()
    experiment = _experiment(rd)
    stamp = L.safe_component(rd.name, "the run folder's name", str(rd.path))
    people = [Author.parse(a) for a in authors]
    license_entity(license)  # refused now rather than after the files are read
    target = Path(out) if out is not None else Path.cwd() / f"{experiment}-{stamp}{L.SUFFIX}"
    _check_output(target, rd, force)
    files, left_out = _run_files(rd, exclude)
    if MANIFEST not in files:
        raise UsageError(f"--exclude leaves out {rd.manifest}", fix="a crate needs the run's manifest.json")

    # Pass 1: the JSON files lose their secret fields, and teach what to search for.
    scrubbed = Scrubbed()
    rewritten: dict[str, bytes] = {}
    for rel in files:
        if rel.endswith(".json"):
            data = (rd.path / rel).read_bytes()
            new = scrub_file(rel, data, scrubbed)
            if new is not data:
                rewritten[rel] = new
    manifest = json.loads(rewritten.get(MANIFEST) or rd.manifest.read_bytes())
    raw_inventory = rd.read_manifest().get("inventory")
    inventory, removed, values = scrub_inventory(raw_inventory if isinstance(raw_inventory, dict) else {})
    scrubbed.note(L.INVENTORY, removed, values)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        entries, total = {}, 0
        with zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
            # Pass 2: every file, searched for what was removed, hashed, written.
            for rel in files:
                path = rd.path / rel
                data = check_leaks(rel, rewritten.get(rel) or path.read_bytes(), scrubbed)
                entries[rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                total += len(data)
                _put(zf, rel, data, _zip_time(path))
            now = datetime.datetime.now(datetime.UTC)
            when = (now.year, now.month, now.day, now.hour, now.minute, now.second)
            own = _crate_files(rd, experiment, stamp, manifest, inventory, scrubbed, entries, left_out, people, license)
            for rel, data in own.items():
                _put(zf, rel, check_leaks(rel, data, scrubbed), when)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Exported(target, len(files), total, scrubbed.as_dict(), left_out)


def _crate_files(
    rd: RunDir,
    experiment: str,
    stamp: str,
    manifest: dict,
    inventory: dict,
    scrubbed: Scrubbed,
    entries: dict[str, dict],
    left_out: list[dict],
    people: list[Author],
    license: str,
) -> dict[str, bytes]:
    """The crate's own files, the metadata first."""
    removed = scrubbed.as_dict()["fields"]
    facts = RunFacts(experiment, stamp, manifest, rd.read_sweep(), sorted(entries), removed)
    meta = build(facts, authors=people, license=license)
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    inv_head = "# The testbed inventory of the run (manifest.json: inventory), keys and secrets removed.\n"
    if removed.get(L.INVENTORY):
        inv_head += "# Removed: " + ", ".join(removed[L.INVENTORY]) + "\n"
    export = {
        "format": L.FORMAT,
        "tool": L.TOOL,
        "rainmaker": str((manifest.get("versions") or {}).get("rainmaker", "unknown")),
        "exported_by": _version(),
        "experiment": experiment,
        "run": stamp,
        "exported": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": entries,
        "scrubbed": scrubbed.as_dict(),
        "left_out": left_out,
    }
    return {
        L.METADATA: (json.dumps(meta, indent=2) + "\n").encode(),
        L.README: _readme(experiment, stamp, license, removed, left_out).encode(),
        L.SPEC: (
            "# The experiment spec as the run recorded it (manifest.json: spec); `rainmaker run` takes it.\n"
            + yaml.safe_dump(spec, sort_keys=False)
        ).encode(),
        L.INVENTORY: (inv_head + yaml.safe_dump(inventory, sort_keys=False)).encode(),
        L.EXPORT: (json.dumps(export, indent=1) + "\n").encode(),
    }


def _version() -> str:
    import importlib.metadata as md

    try:
        return md.version("rainmaker")
    except md.PackageNotFoundError:
        return "unknown"


def _readme(experiment: str, stamp: str, license: str, removed: dict, left_out: list[dict]) -> str:
    lines = [
        f"# {experiment}: rainmaker run {stamp}",
        "",
        "A run of a rainmaker experiment, packed by `rainmaker export` as a Workflow Run RO-Crate",
        "(https://www.researchobject.org/workflow-run-crate/): `ro-crate-metadata.json` describes it.",
        "",
        "- `report.md`, `report.html`: the run's report; `plots/`: its figures; `summary.parquet`: its table.",
        "- `points/`: each point's raw files (latency histograms, switch and worker files, verdict).",
        "- `manifest.json`: provenance (spec, testbed, versions, git revision, calibration); `crate/spec.yaml`:",
        "  the spec; `crate/inventory.yaml`: the testbed; `crate/export.json`: each file's SHA-256.",
        "",
        "To open it as a run folder again (then `rainmaker report`, `compare` and `serve` work on it):",
        "",
        "    rainmaker import THIS.crate.zip --results results",
        f"    rainmaker report results/{experiment}/{stamp}",
        "",
        f"License: {license}.",
    ]
    fields = sorted({f"{file}: {p}" for file, paths in removed.items() for p in paths})
    if fields:
        lines += ["", "Removed before export (keys, key paths, pinned host keys, passwords, tokens, certificates):", ""]
        lines += [f"- `{f}`" for f in fields]
    if left_out:
        lines += ["", "Left out:", ""] + [f"- `{e['path']}`: {e['why']}" for e in left_out]
    return "\n".join(lines) + "\n"
