"""The crate's layout: what `rainmaker export` writes and `rainmaker import` reads.

    <experiment>-<timestamp>.crate.zip
      ro-crate-metadata.json   the RO-Crate description (metadata.py), first in the zip
      README.md                what the crate is, how to open it, what was removed
      crate/spec.yaml          the experiment spec as the run recorded it (the instrument)
      crate/inventory.yaml     the testbed inventory, keys and secrets removed
      crate/export.json        EXPORT: each run file's size and SHA-256, what was scrubbed
      manifest.json, sweep.json, run.log, preflight.json, summary.parquet,
      timeseries.parquet, report.md, report.html, plots/, points/, calibration/,
      service-probe/, stalled/       the run folder's own files, as the run wrote them
                                      (secrets scrubbed: scrub.py)

Everything in the zip lands in the imported run folder, so that folder is itself the
crate (a second export writes the crate's own files afresh).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..errors import UsageError

METADATA = "ro-crate-metadata.json"
PREVIEW = "ro-crate-preview.html"
README = "README.md"
CRATE_DIR = "crate"
SPEC = f"{CRATE_DIR}/spec.yaml"
INVENTORY = f"{CRATE_DIR}/inventory.yaml"
EXPORT = f"{CRATE_DIR}/export.json"
TOOL = "rainmaker export"
FORMAT = 1
SUFFIX = ".crate.zip"

# The crate's own files: written by the exporter, never taken from the run folder.
CRATE_FILES = (METADATA, README, SPEC, INVENTORY, EXPORT)
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]*")


def is_crate_file(rel: str) -> bool:
    """A file the exporter writes itself (a run imported from a crate holds them)."""
    return rel in (METADATA, PREVIEW, README) or rel.split("/", 1)[0] == CRATE_DIR


def safe_component(value: object, what: str, where: str) -> str:
    """A name that becomes one folder of the results tree (experiment, timestamp)."""
    text = str(value) if isinstance(value, str) else ""
    if not _SAFE_NAME.fullmatch(text) or text in (".", ".."):
        raise UsageError(
            f"{where}: {what} {value!r} cannot name a folder (letters, digits and . _ + = @ - only)",
            fix="this crate was not made by `rainmaker export`, or was altered",
        )
    return text


def safe_member(name: str, where: str) -> str:
    """A zip member's name, refused unless it stays inside the folder it is extracted
    to: no absolute path, no drive, no backslash, no `..`, no empty part (zip slip)."""
    bad = (
        not name
        or "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or re.match(r"[A-Za-z]:", name) is not None
        or any(p in ("", ".", "..") for p in name.rstrip("/").split("/"))
    )
    if bad:
        raise UsageError(
            f"{where}: the member {name!r} would be written outside the run folder (a zip-slip path)",
            fix="do not import this file: it was not made by `rainmaker export`, or was altered to attack "
            "the machine that opens it",
        )
    return str(PurePosixPath(name.rstrip("/")))
