"""Whether a run's testbeds measure alike: their calibrations compared, before any of
their points is merged into one curve.

Each station calibrates its own testbed (experiment/calibrate.py): the round trip and
the handler's error, in paper time a share of a mean service time
(`paper_time.overhead_share_of_service`). A request on a testbed takes about a service
time plus those overheads, so two testbeds whose overheads are a and b (shares) put
(1 + a) / (1 + b) between the same point's latencies at a light load, before any
queueing: where that ratio is off 1 by more than the spec's model tolerance
(validity.model_tolerance, the model_agreement check's), their points are not points of
one curve. The run then measures on the testbeds that agree with the one of least
overhead (a disturbed testbed adds overhead, it never removes it), reports the others
with their numbers, and gives them no point.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Agreement:
    reference: str | None  # the testbed the others are held against (least overhead)
    kept: list[str]  # testbeds that measure the run's points
    left_out: dict[str, str]  # testbed -> why it measures none
    overheads: dict[str, float | None]  # testbed -> its overhead share (None: not calibrated)
    tolerance: float
    note: str  # one line for the log and the report

    def as_dict(self) -> dict:
        return {
            "reference": self.reference,
            "kept": self.kept,
            "left_out": self.left_out,
            "overhead_share_of_service": self.overheads,
            "tolerance": self.tolerance,
            "note": self.note,
        }


def overhead(calibration: dict | None) -> float | None:
    pt = (calibration or {}).get("paper_time")
    v = pt.get("overhead_share_of_service") if isinstance(pt, dict) else None
    return float(v) if isinstance(v, (int, float)) and v >= 0 else None


def compare(calibrations: dict[str, dict | None], tolerance: float) -> Agreement:
    """The testbeds (id -> calibration, None when it was not calibrated) that agree."""
    shares = {t: overhead(c) for t, c in calibrations.items()}
    known = {t: v for t, v in shares.items() if v is not None}
    if len(known) < len(shares):
        missing = sorted(set(shares) - set(known))
        return Agreement(
            None,
            sorted(shares),
            {},
            shares,
            tolerance,
            f"not compared: {', '.join(missing)} not calibrated (--no-calibrate, a failed calibration, or a "
            "real memcached's spec): their points are merged unchecked",
        )
    ref = min(known, key=lambda t: (known[t], t))
    kept, out = [], {}
    for t, v in sorted(known.items()):
        off = (1 + v) / (1 + known[ref]) - 1
        if off > tolerance:
            out[t] = (
                f"its overheads are {100 * v:.1f}% of a mean service time against {100 * known[ref]:.1f}% on {ref}: "
                f"a light point would read {100 * off:.0f}% slower there, beyond the model tolerance "
                f"({100 * tolerance:.0f}%)"
            )
        else:
            kept.append(t)
    spread = ", ".join(f"{t} {100 * v:.1f}%" for t, v in sorted(known.items()))
    note = f"testbeds' overheads (share of a mean service time): {spread}; " + (
        f"{len(out)} left out ({', '.join(out)}): their calibrations differ from {ref}'s beyond the model "
        f"tolerance ({100 * tolerance:.0f}%)"
        if out
        else f"all within the model tolerance ({100 * tolerance:.0f}%) of {ref}"
    )
    return Agreement(ref, kept, out, shares, tolerance, note)
