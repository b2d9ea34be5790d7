"""A preflight's result: one Check per machine and subject, and the Report of them all
(preflight.json in a run folder, `rainmaker preflight -o FILE`, the table it prints).

A check's status is ok, warn, fail or n/a (with why in `detail`); `needed` says whether
the run asked about needs it. Only a needed fail blocks `rainmaker run`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import RainmakerError

OK, WARN, FAIL, NA = "ok", "warn", "fail", "n/a"
STATUSES = (OK, WARN, FAIL, NA)
FORMAT = 1  # preflight.json's "format": raised when a field changes meaning


@dataclass(frozen=True)
class Check:
    machine: str
    role: str  # switch, client or worker
    name: str  # what is checked: kernel, kernel.kcm, hugepages, dpdk, nic, roce, ...
    status: str
    needed: bool
    detail: str  # what was found (or, for n/a, why it does not apply)
    fix: str | None = None  # a command, an inventory field, or `rainmaker provision ...`

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    @property
    def blocks(self) -> bool:
        return self.needed and self.status == FAIL

    def line(self) -> str:
        text = f"{self.machine}: {self.name}: {self.detail}"
        return text + (f"\n      fix: {self.fix}" if self.fix else "")


@dataclass
class Report:
    inventory: str
    needs: dict
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    probes: dict = field(default_factory=dict)  # machine -> what its probe returned (raw)

    @property
    def blocking(self) -> list[Check]:
        return [c for c in self.checks if c.blocks]

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def as_dict(self) -> dict:
        return {
            "format": FORMAT,
            "inventory": self.inventory,
            "needs": self.needs,
            "seconds": round(self.seconds, 3),
            "ok": not self.blocking,
            "counts": self.counts(),
            "blocking": [f"{c.machine}: {c.name}" for c in self.blocking],
            "checks": [asdict(c) for c in self.checks],
            "probes": self.probes,
        }

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.as_dict(), indent=1, sort_keys=False) + "\n")
        return path

    def summary(self) -> str:
        n = self.counts()
        return (
            f"preflight of {self.inventory} ({self.needs.get('source')}): {n[OK]} ok, {n[WARN]} warn, "
            f"{n[FAIL]} fail ({len(self.blocking)} needed), {n[NA]} n/a in {self.seconds:.1f} s"
        )


class PreflightFailed(RainmakerError):
    """Needed checks failed: the run would fail on them, so it does not start. Carries the report."""

    def __init__(self, report: Report, what: str = "the run"):
        self.report = report
        bad = report.blocking
        lines = [f"{what}: {len(bad)} needed check{'s' if len(bad) != 1 else ''} of the preflight failed:"]
        lines += ["  " + c.line().replace("\n", "\n  ") for c in bad]
        super().__init__(
            "\n".join(lines),
            fix="fix these (each says how) and run again; `rainmaker preflight` checks again; "
            "`rainmaker run --no-preflight` skips the preflight (the run then meets them itself)",
        )
