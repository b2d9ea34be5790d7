"""A testbed's history: one record per finished run (estimate.record) and per
`rainmaker calibrate` (estimate.calibration_record), in a JSON-lines file of the state
root, not of the testbed's slot folder (which `testbed down` removes). The estimate of
the next run's wall time reads it (estimate.py), and an automatic dilation starts where
the last run of the same spec settled (settled_k)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .spec import Spec

HISTORY = "history.jsonl"
KEEP = 50  # records per testbed: the newest ones count


def history_path(inv) -> Path:
    """The testbed's history file. An emulated testbed is one shape on this machine,
    whatever slot it is up in (None: the nominal one, 1 client and 2 workers); a hardware
    testbed is its inventory's name."""
    if inv is None or inv.emulation is not None:
        clients, workers = (1, 2) if inv is None else (len(inv.clients), len(inv.workers))
        key = f"emulated-{clients}c{workers}w"
    else:
        key = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in inv.name)
    return _root() / "history" / key / HISTORY


def _root() -> Path:
    from ..testbed import state

    return state.root()


def read_history(path: Path) -> list[dict]:
    """The records, oldest first; a line that is not a record is skipped (a run cut off
    while writing it)."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and r.get("kind") in ("run", "calibration"):
            out.append(r)
    return out


def runs(history: list[dict]) -> list[dict]:
    return [r for r in history if r.get("kind", "run") == "run"]  # a calibration has no costs


def append_history(path: Path, record: dict) -> None:
    """Add one record, keeping the newest KEEP (written whole, then renamed)."""
    kept = read_history(path)[-(KEEP - 1) :] + [record]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    tmp.replace(path)


def family(spec: Spec) -> str:
    """The kind of run a spec makes, whose costs and calibrations an estimate takes:
    "rpc" (kernel TCP RPCs to one server, rpc_point.py) or "rain" (everything rain-client
    loads)."""
    return "rpc" if "rpc" in spec.needs() else "rain"


def family_of(rec: dict) -> str | None:
    # a record from before `family` was kept: only the Rain family calibrated then
    return rec.get("family") or ("rain" if rec.get("calibration") or rec.get("calibrated") else None)


@dataclass(frozen=True)
class Settled:
    """Where the testbed's last automatic dilation of a spec settled (settled_k)."""

    k: float
    whence: str  # for the log: which record, and when
    # the CPU a request costs as the testbed's calibration at its smallest k read it: the
    # highest rate, where the CPU per request stands out best, as a run's own first
    # calibration reads it (dilation.choose_dilation; a larger k's reads more)
    cpu: dict | None


def settled_k(history: list[dict], spec: Spec) -> Settled | None:
    """The k at which this testbed's last automatic dilation of this spec (a run's or
    `rainmaker calibrate`'s) settled, and whence: an automatic run starts there and holds
    it (dilation.start_at), so that its runs measure at one k."""
    for r in reversed(history):
        k = r.get("k")
        if r.get("spec") == spec.name and r.get("auto") and isinstance(k, (int, float)) and k > 0:
            what = "run" if r.get("kind") == "run" else "`rainmaker calibrate`"
            return Settled(
                float(k),
                f"where this testbed's last {what} of {spec.name} settled ({r.get('at')})",
                _cpu(history, family(spec)),
            )
    return None


def _cpu(history: list[dict], fam: str) -> dict | None:
    with_cpu = [
        c
        for r in reversed(history)  # the newest first: min keeps it at a tie, as estimate.calibrations_by_k does
        if family_of(r) == fam  # a request of the other family costs another CPU
        for c in [r.get("calibration"), *reversed(r.get("calibrated") or [])]
        if isinstance(c, dict) and isinstance(c.get("k"), (int, float)) and isinstance(c.get("cpu"), dict)
    ]
    return min(with_cpu, key=lambda c: c["k"])["cpu"] if with_cpu else None
