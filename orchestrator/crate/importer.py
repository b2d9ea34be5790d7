"""`rainmaker import CRATE`: a crate `rainmaker export` wrote, laid out as a run folder.

The crate lands in <results>/<experiment>/<timestamp>/, the folder it was exported
from, so that report, compare and serve read it as any run. Before anything is
written, the crate is checked: an RO-Crate (ro-crate-metadata.json at its root) that
rainmaker exported (its crate/export.json), no member that would land outside the run
folder (zip slip) or is a link, every file listed with its size. Files are written
into a temporary folder beside the target, each checked against its SHA-256, and
renamed into place at the end; an existing run folder is replaced only with --force,
and then only once the new one is whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import UsageError
from . import layout as L
from .metadata import SPEC_LANGUAGE

_NOT_OURS = "import only crates `rainmaker export` made (open other RO-Crates with their own tools)"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Imported:
    """Where the run landed, and how many files it has."""

    path: Path
    experiment: str
    run: str
    files: int
    replaced: bool


class _Source:
    """The crate's members, from a zip or an unpacked folder: name -> size, and a reader."""

    def __init__(self, where: Path):
        self.where = where
        self.zip: zipfile.ZipFile | None = None
        if where.is_dir():
            self.sizes = self._folder_sizes(where)
        elif zipfile.is_zipfile(where):
            self.zip = zipfile.ZipFile(where)
            self.sizes = self._zip_sizes(self.zip)
        elif where.exists():
            raise UsageError(
                f"{where} is not a zip file (nor a folder)",
                fix="give the .crate.zip `rainmaker export` wrote, or the folder it was unpacked to",
            )
        else:
            raise UsageError(f"{where} does not exist", fix="give the .crate.zip `rainmaker export` wrote")

    def _zip_sizes(self, zf: zipfile.ZipFile) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for info in zf.infolist():
            name = L.safe_member(info.filename, str(self.where))
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise UsageError(
                    f"{self.where}: the member {info.filename!r} is a link or a device, not a file",
                    fix="do not import this file: " + _NOT_OURS,
                )
            if info.is_dir():
                continue
            if name in sizes:
                raise UsageError(f"{self.where}: the member {name!r} appears twice", fix=_NOT_OURS)
            sizes[name] = info.file_size
        return sizes

    def _folder_sizes(self, root: Path) -> dict[str, int]:
        sizes = {}
        for top, dirs, names in os.walk(root, followlinks=False):
            for name in names + dirs:
                full = Path(top) / name
                rel = L.safe_member(full.relative_to(root).as_posix(), str(root))
                if full.is_symlink():
                    raise UsageError(f"{full} is a symbolic link", fix="do not import this folder: " + _NOT_OURS)
                if name in names and full.is_file():
                    sizes[rel] = full.stat().st_size
        return sizes

    @contextmanager
    def open(self, name: str) -> Iterator[IO[bytes]]:
        if self.zip is not None:
            with self.zip.open(name) as f:
                yield f
        else:
            with open(self.where / name, "rb") as f:
                yield f

    def read(self, name: str, limit: int = 64 << 20) -> bytes:
        with self.open(name) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise UsageError(f"{self.where}: {name} is larger than {limit >> 20} MB", fix=_NOT_OURS)
        return data

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()


def _json(src: _Source, name: str) -> dict:
    if name not in src.sizes:
        raise UsageError(f"{src.where}: no {name} at its root", fix=_NOT_OURS)
    try:
        obj = json.loads(src.read(name))
    except ValueError as e:
        raise UsageError(f"{src.where}: {name} is not JSON ({e})", fix=_NOT_OURS) from None
    if not isinstance(obj, dict):
        raise UsageError(f"{src.where}: {name} is not a JSON object", fix=_NOT_OURS)
    return obj


def _check_ours(src: _Source) -> dict:
    """crate/export.json, once the crate proved to be one rainmaker exported."""
    if L.METADATA not in src.sizes:
        raise UsageError(f"{src.where} is not an RO-Crate: no {L.METADATA} at its root", fix=_NOT_OURS)
    meta = _json(src, L.METADATA)
    graph = meta.get("@graph")
    ids = {e.get("@id") for e in graph if isinstance(e, dict)} if isinstance(graph, list) else set()
    if SPEC_LANGUAGE not in ids or L.EXPORT not in src.sizes:
        raise UsageError(f"{src.where} is an RO-Crate, but not a run `rainmaker export` wrote", fix=_NOT_OURS)
    export = _json(src, L.EXPORT)
    if export.get("tool") != L.TOOL or export.get("format") != L.FORMAT or not isinstance(export.get("files"), dict):
        raise UsageError(
            f"{src.where}: {L.EXPORT} is not of format {L.FORMAT} (made by another version of rainmaker?)",
            fix="import it with the rainmaker that exported it (its version is in crate/export.json)",
        )
    return export


def _check_listing(src: _Source, files: dict) -> None:
    """Every member is a run file listed with its size, or one of the crate's own."""
    extra = sorted(n for n in src.sizes if n not in files and not L.is_crate_file(n))
    missing = sorted(n for n in files if n not in src.sizes)
    if extra:
        raise UsageError(
            f"{src.where}: {len(extra)} file(s) not listed in {L.EXPORT}, e.g. {extra[0]!r}: the crate was altered",
            fix="import the crate as it was exported",
        )
    if missing:
        raise UsageError(
            f"{src.where} is damaged: {len(missing)} file(s) listed in {L.EXPORT} are missing, e.g. {missing[0]!r}",
            fix="download or copy the crate again",
        )
    for name, entry in files.items():
        L.safe_member(name, f"{src.where}: {L.EXPORT}")
        if not isinstance(entry, dict) or entry.get("bytes") != src.sizes[name]:
            raise UsageError(f"{src.where} is damaged: {name} is not the size {L.EXPORT} says", fix="copy it again")


def _copy(src: _Source, name: str, dest: Path, want: str | None, size: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    written = 0
    with src.open(name) as f, open(dest, "wb") as out:
        while chunk := f.read(_CHUNK):
            written += len(chunk)
            if written > size:  # more than the listing says: stop before a bomb fills the disk
                break
            h.update(chunk)
            out.write(chunk)
    if written != size or (want is not None and h.hexdigest() != want):
        raise UsageError(
            f"{src.where} is damaged: {name} does not match its SHA-256 in {L.EXPORT}",
            fix="download or copy the crate again",
        )


def import_crate(crate: str | Path, results: str | Path = "results", *, force: bool = False) -> Imported:
    """Lay the crate out as <results>/<experiment>/<timestamp>/; returns where."""
    src = _Source(Path(crate))
    try:
        export = _check_ours(src)
        files = export["files"]
        _check_listing(src, files)
        where = f"{src.where}: {L.EXPORT}"
        experiment = L.safe_component(export.get("experiment"), "the experiment", where)
        run = L.safe_component(export.get("run"), "the run", where)
        root = Path(results)
        if root.exists() and not root.is_dir():
            raise UsageError(f"--results {root}: a file, not a folder", fix="give the folder runs are kept in")
        target = root / experiment / run
        if target.exists() and not force:
            raise UsageError(
                f"{target} exists: a run of that name is already there",
                fix="give --results OTHER_FOLDER, or --force to replace it",
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{run}.import-", dir=target.parent))
        try:
            for name, size in sorted(src.sizes.items()):
                dest = tmp / name
                if not dest.resolve().is_relative_to(tmp.resolve()):  # safe_member already refused it
                    raise UsageError(f"{src.where}: {name!r} leads outside the run folder", fix=_NOT_OURS)
                entry = files.get(name)
                _copy(src, name, dest, entry.get("sha256") if isinstance(entry, dict) else None, size)
            replaced = _swap(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Imported(target, experiment, run, len(files), replaced)
    finally:
        src.close()


def _swap(new: Path, target: Path) -> bool:
    """Rename the whole new folder into place; an old one is moved aside first, and
    back if the rename fails, then removed. True when a run was replaced."""
    if not target.exists():
        os.rename(new, target)
        return False
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.replaced-", dir=target.parent))
    os.rmdir(old)
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return True
