"""What never leaves the machine in a crate: secrets and keys, found and removed.

Three layers, each tested with canaries (tests/unit/test_crate.py):

1. The inventory (manifest.json's `inventory`, and the crate's copy of it) loses every
   field that is a key, a key's path, pinned host keys, a password, a passphrase, a
   token or a certificate: `ssh.key`, `ssh.known_hosts`, `ssh.jump.key`,
   `ssh.jump.known_hosts`, each `mgmt.key`, and any such field a later inventory adds.
   The shape stays (hosts, roles, NICs, ports, addresses).
2. Every other JSON file of the run loses the fields whose names only a secret has
   (password, passphrase, secret, credentials, private_key, known_hosts, api/auth
   tokens, certificate files); a run's own data (Rain's tokens, rkeys) is kept.
3. Then every file is searched for the values removed above: a text file has them
   replaced by REMOVED; a binary file with one is refused. A file holding private key
   material (a PEM or OpenSSH private key block) is refused whatever its name.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError

REMOVED = "[removed by rainmaker export]"

# Inventory fields that hold a secret or say where one is (orchestrator/inventory/model.py:
# Mgmt.key, Ssh.key, Ssh.known_hosts, Jump.key, Jump.known_hosts), and their likes.
_INVENTORY_SECRET = re.compile(
    r"^(key|.*_key|keys|known_hosts|.*password.*|.*passwd.*|.*passphrase.*|.*secret.*|.*token.*"
    r"|.*credential.*|.*private.*|cert|certs|certificate.*|.*_cert|.*_cert_.*|identity_?file)$",
    re.IGNORECASE,
)
# Any other JSON of the run: names that only a secret has.
_ANY_SECRET = re.compile(
    r"^(.*password.*|.*passwd.*|.*passphrase.*|.*secret.*|.*credential.*|known_hosts|private_?key"
    r"|ssh_?key|api_?key|(access|auth|api|bearer|refresh|session)_?token|cert(ificate)?(_?(file|path))?"
    r"|identity_?file)$",
    re.IGNORECASE,
)
_KEY_MATERIAL = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|PuTTY-User-Key-File-\d")
_SHORTEST_VALUE = 6  # removed values shorter than this are too common to search for


class SecretInCrate(UsageError):
    """A file of the run holds a secret that cannot be removed from it."""


@dataclass
class Scrubbed:
    """What was removed: field paths per file, and the values to search every file for."""

    fields: dict[str, list[str]] = field(default_factory=dict)  # file -> dotted field paths
    replaced: dict[str, int] = field(default_factory=dict)  # file -> occurrences of removed values
    values: set[str] = field(default_factory=set)

    def note(self, file: str, paths: list[str], values: list[str]) -> None:
        if paths:
            self.fields.setdefault(file, []).extend(paths)
        self.values |= {v for v in values if len(v) >= _SHORTEST_VALUE}

    def as_dict(self) -> dict:
        return {
            "fields": {f: sorted(set(p)) for f, p in sorted(self.fields.items())},
            "values_replaced": dict(sorted(self.replaced.items())),
        }


def _leaves(value: Any) -> list[str]:
    """The strings (and numbers) inside a removed value."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]


def _drop(obj: Any, pattern: re.Pattern, path: str, removed: list[str], values: list[str]) -> Any:
    """obj without the fields whose name matches (a null field holds nothing: kept)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            where = f"{path}.{k}" if path else str(k)
            if pattern.match(str(k)) and v not in (None, "", [], {}):
                removed.append(where)
                values.extend(_leaves(v))
                continue
            out[k] = _drop(v, pattern, where, removed, values)
        return out
    if isinstance(obj, list):
        return [_drop(v, pattern, f"{path}[{i}]", removed, values) for i, v in enumerate(obj)]
    return obj


def scrub_inventory(inventory: Any) -> tuple[Any, list[str], list[str]]:
    """(a copy without keys, key paths, host keys, passwords, tokens or certificates;
    the removed fields' paths; the removed values)."""
    removed: list[str] = []
    values: list[str] = []
    return _drop(copy.deepcopy(inventory), _INVENTORY_SECRET, "", removed, values), removed, values


def scrub_json(obj: Any) -> tuple[Any, list[str], list[str]]:
    """Any JSON of the run without the fields only a secret is named like."""
    removed: list[str] = []
    values: list[str] = []
    return _drop(obj, _ANY_SECRET, "", removed, values), removed, values


def scrub_manifest(manifest: dict) -> tuple[dict, list[str], list[str]]:
    """manifest.json: its inventory scrubbed as an inventory, the rest as any JSON."""
    rest = {k: v for k, v in manifest.items() if k != "inventory"}
    out, removed, values = scrub_json(rest)
    if "inventory" in manifest:
        inv, r2, v2 = scrub_inventory(manifest["inventory"])
        out = {k: (inv if k == "inventory" else out[k]) for k in manifest}
        removed += [f"inventory.{p}" for p in r2]
        values += v2
    return out, removed, values


def scrub_file(rel: str, data: bytes, scrubbed: Scrubbed) -> bytes:
    """A JSON file of the run without its secret fields; any other file as it is.
    Only a file that loses something is rewritten (the others stay byte for byte)."""
    if not rel.endswith(".json"):
        return data
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    if rel == "manifest.json" and isinstance(obj, dict):
        out, removed, values = scrub_manifest(obj)
    else:
        out, removed, values = scrub_json(obj)
    if not removed:
        return data
    scrubbed.note(rel, removed, values)
    return (json.dumps(out, indent=1, default=str) + "\n").encode()


def check_leaks(rel: str, data: bytes, scrubbed: Scrubbed) -> bytes:
    """The file with every removed value replaced (text), or a SecretInCrate error naming
    it (key material anywhere; a removed value in a binary file)."""
    if _KEY_MATERIAL.search(data):
        raise SecretInCrate(
            f"{rel} holds private key material (a private key block): it must not leave this machine",
            fix=f"leave it out with `--exclude '{rel}'`, or remove the key from it first",
        )
    hits = [v for v in scrubbed.values if v.encode() in data]
    if not hits:
        return data
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise SecretInCrate(
            f"{rel} (a binary file) holds a value removed from the inventory (a key's path, a password, "
            "a token): it cannot be scrubbed",
            fix=f"leave it out with `--exclude '{rel}'`",
        ) from None
    n = 0
    for v in sorted(hits, key=len, reverse=True):
        n += text.count(v)
        text = text.replace(v, REMOVED)
    scrubbed.replaced[rel] = scrubbed.replaced.get(rel, 0) + n
    return text.encode()
