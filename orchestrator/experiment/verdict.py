"""A point's verdict: the checks validity.py ran on it, each passed, failed or not run
with its value, threshold and a message a person can act on; written to
points/<id>/validity.json (layout.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layout import PointDir

# The checks that fail when the client could not keep its schedule: the host stalled it
# (a busy machine, a hypervisor's steal), which says nothing of the system under test.
# sweeper.py measures such a point again (the spec's validity.remeasure_stalled).
STALL_CHECKS = ("schedule_lag", "late_sends")


@dataclass
class Check:
    name: str
    passed: bool | None  # None: not run
    value: Any
    threshold: Any
    message: str
    detail: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.passed is not None:
            self.passed = bool(self.passed)  # not numpy's bool

    @property
    def status(self) -> str:
        return "not run" if self.passed is None else ("passed" if self.passed else "failed")


@dataclass
class Verdict:
    point_id: str
    checks: list[Check]
    thresholds: dict = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    @property
    def stalled(self) -> bool:
        """The client was stalled: a measurement of the host, worth taking again."""
        return any(name in STALL_CHECKS for name in self.failed)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.passed is False]

    @property
    def not_run(self) -> list[str]:
        return [c.name for c in self.checks if c.passed is None]

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict:
        return _finite(
            {
                "point_id": self.point_id,
                "valid": self.valid,
                "failed": self.failed,
                "not_run": self.not_run,
                "checks": [
                    {
                        "name": c.name,
                        "passed": c.passed,
                        "status": c.status,
                        "value": c.value,
                        "threshold": c.threshold,
                        "message": c.message,
                        "detail": c.detail,
                    }
                    for c in self.checks
                ],
                "thresholds": self.thresholds,
            }
        )

    def write(self, point_dir: str | Path, as_dict: dict | None = None) -> Path:
        return PointDir(Path(point_dir)).write_verdict(as_dict or self.to_dict())


def _finite(x: Any) -> Any:
    """Plain JSON: numpy scalars become Python numbers, NaN/Infinity become null."""
    if hasattr(x, "item") and not isinstance(x, (list, dict)):  # numpy scalars
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def pct(x: float) -> str:
    return f"{100 * x:.3g}%"
