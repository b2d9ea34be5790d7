"""A station's files on their way to the coordinator's run folder: packed as a tar
archive where the station measured them (a worker may be another machine, and Dask
carries a task's result, not a folder), unpacked into the run folder, whole or not at
all, where the coordinator gathers them.

    blob = pack(shard_dir, ["points/rain-0.5-r1", "stalled/rain-0.5-r1"])
    unpack(blob, run_dir, "points/rain-0.5-r1")   # replaces that folder whole
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from ..errors import RainmakerError
from ..experiment.layout import CALIBRATION, MANIFEST, PREFLIGHT, SERVICE_PROBE

# What a station hands over about its testbed once prepared (beside its manifest's data)
STATION_FILES = [MANIFEST, PREFLIGHT, CALIBRATION, SERVICE_PROBE]
MAX_BYTES = 2 * 1024**3  # a point folder beyond this is no point folder


class ShardError(RainmakerError):
    """A station's archive that cannot be a run's files."""


def pack(root: Path, rels: list[str]) -> bytes:
    """The files under root/<rel> for each rel that exists, as a gzip'd tar (paths
    relative to root)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        for rel in rels:
            p = root / rel
            if p.exists():
                tar.add(p, arcname=rel)
    return buf.getvalue()


def _safe(member: tarfile.TarInfo, under: str) -> bool:
    """A plain file or folder inside `under` (no links, no climbing out)."""
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts:
        return False
    if not (member.isfile() or member.isdir()):
        return False
    return path.parts[: len(PurePosixPath(under).parts)] == PurePosixPath(under).parts


def unpack(blob: bytes, dest_root: Path, *unders: str) -> list[str]:
    """Extract the archive's folders `unders` (e.g. points/<id>) into dest_root, each
    replacing what was there, through a temporary folder beside it (a crash leaves the
    old folder or the new, never half of one). Returns the folders written."""
    if len(blob) > MAX_BYTES:
        raise ShardError(f"a station's archive of {len(blob):,} bytes is larger than any run's files")
    tmp = dest_root / ".incoming"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            members = tar.getmembers()
            bad = [m.name for m in members if not any(_safe(m, u) for u in unders)]
            if bad:
                raise ShardError(f"a station's archive holds what no run folder has: {', '.join(bad[:3])}")
            tar.extractall(tmp, members=members, filter="data")
        written = []
        for u in unders:
            src, dst = tmp / u, dest_root / u
            if not src.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            old = dst.with_name(f".{dst.name}.old")
            _remove(old)  # a crash's leftover
            if dst.exists():
                dst.replace(old)
            src.replace(dst)
            _remove(old)
            written.append(u)
        return written
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ShardError(f"a station's archive cannot be read: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove(p: Path) -> None:
    """A folder or a file (manifest.json is one of a station's), if there."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
