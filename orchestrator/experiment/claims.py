"""A paper's claims as data, checked against a run's summary with its intervals.

A spec lists the claims of the paper about its figure (`claims:`) and the numbers the
paper printed (`references:`). A claim's `check` is a declarative statement, never
Python: a metric of one curve at named loads, related to a number or to another curve.

    claims:
      - id: obs1-tail
        text: "Rain achieves the best performance in tail-latency."
        source: "Rain, 5.2.1, Observation 1, Fig. 6(a)"
        check: {metric: p99_us, curve: rain, relation: "<", than: r2p2, at: [{fraction: 0.8}]}

Verdicts use the intervals the analysis wrote beside each value (summary.parquet):
a claim **holds** when the intervals support it at every load it names, **does not
hold** when at one load they contradict it, and is **inconclusive** otherwise (they
overlap, a point is invalid or missing), always with the reason and the numbers.

Intervals. Latency quantiles: the order-statistics interval of each quantile (the p99's
widened by the model's draw-to-draw spread, points.p99_interval); over repetitions, the
union of the valid ones. Throughput under an SLO: the knee lies between the highest
load that met the SLO and the first that broke it ([met, broke)); a sweep that never
broke it gives [met, inf), and an invalid point before a breach leaves the upper end
open too, since nothing is known past it. Ratios of two intervals: [a_lo / b_hi,
a_hi / b_lo].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .claim_spec import FAILS, HOLDS, INCONCLUSIVE, LATENCY, LOAD_TOL, NOT_CHECKABLE, At, Check, Claim, Reference

__all__ = ["FAILS", "HOLDS", "INCONCLUSIVE", "NOT_CHECKABLE", "Claim", "Reference", "evaluate", "references"]


# -- evaluation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    est: float

    def fmt(self, unit: str = "") -> str:
        hi = "inf" if math.isinf(self.hi) else f"{self.hi:,.3g}"
        return f"{self.est:,.3g}{unit} [{self.lo:,.3g}, {hi}]"


@dataclass(frozen=True)
class Verdict:
    id: str
    verdict: str
    evidence: str
    text: str = ""
    source: str = ""

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "verdict": self.verdict,
            "evidence": self.evidence,
            "text": self.text,
            "source": self.source,
        }


class Missing(Exception):
    """A value the summary cannot give (no such point, or it is invalid): inconclusive."""


def _rows(df, curve: str, cls: str, at: At):
    sub = df[(df["curve"] == curve) & (df["class"] == cls)]
    if at.fraction is not None:
        sub = sub[(sub["capacity_fraction"] - at.fraction).abs() <= 1e-6]
    else:
        sub = sub[(sub["load_krps"] - at.krps).abs() <= LOAD_TOL * at.krps]
    if sub.empty:
        raise Missing(f"no point of {curve} at {at.label()}")
    valid = sub[sub["valid"].astype(bool)]
    if valid.empty:
        failed = ", ".join(sorted({str(f) for f in sub["failed_checks"] if f})) or "invalid"
        raise Missing(f"{curve} at {at.label()} is not valid ({failed})")
    return valid


def value_at(df, metric: str, curve: str, cls: str, at: At) -> Interval:
    """The metric of `curve` at load `at`, with its interval over the valid repetitions."""
    rows = _rows(df, curve, cls, at)
    if metric in LATENCY:
        col, lo, hi, _ = LATENCY[metric]
        if lo not in rows.columns:
            raise Missing(f"the summary has no interval of {metric} (analysed before claims: `rainmaker analyze`)")
        los, his = rows[lo].astype(float), rows[hi].astype(float)
        if los.isna().any() or his.isna().any():
            raise Missing(f"{curve} at {at.label()} has no interval of {metric} (no samples)")
        return Interval(float(los.min()), float(his.max()), float(rows[col].astype(float).mean()))
    if metric in ("achieved_krps", "queuing_ratio", "mean_quota"):
        v = rows[metric].astype(float) if metric in rows.columns else None
        if v is None or v.isna().any():
            raise Missing(f"{curve} at {at.label()} has no {metric}")
        return Interval(float(v.min()), float(v.max()), float(v.mean()))
    if metric == "rejects":
        f = rows["rejected"].astype(float) / rows["sent"].astype(float).where(rows["sent"] > 0)
        return Interval(float(f.min()), float(f.max()), float(f.mean()))
    raise Missing(f"{metric} is not read at a load")


def knee(df, curve: str, cls: str, slo: dict[str, float]) -> tuple[Interval, str]:
    """Where `curve`'s p99 leaves the SLO, in paper kRPS (achieved): [the highest load
    that met it, the first that broke it), from analyze.throughput_under_slo's walk; and
    how the walk ended."""
    from .analyze import throughput_under_slo

    t = throughput_under_slo(df[df["curve"] == curve], slo, cls=cls)
    if t.empty:
        raise Missing(f"no point of {curve}")
    r = t.iloc[0]
    lo = 0.0 if math.isnan(r["throughput_krps"]) else float(r["throughput_krps"])
    at = r["first_violation_krps"]
    if r["stopped_by"] == "slo":
        return Interval(lo, float(at), lo), f"broke the SLO at {at:,.4g} kRPS"
    if r["stopped_by"] == "invalid":
        return Interval(lo, math.inf, lo), f"invalid at {at:,.4g} kRPS: nothing is known past it"
    return Interval(lo, math.inf, lo), "met the SLO at every load of the sweep"


def _compare(rel: str, a: Interval, b: Interval) -> str:
    """a REL b over intervals: holds, does not hold, or inconclusive (they overlap)."""
    if rel in ("<", "<="):
        if a.hi < b.lo or (rel == "<=" and a.hi <= b.lo):
            return HOLDS
        if a.lo > b.hi or (rel == "<" and a.lo >= b.hi):
            return FAILS
        return INCONCLUSIVE
    if rel in (">", ">="):
        return _compare("<" if rel == ">" else "<=", b, a)
    raise ValueError(rel)


def _ratio(a: Interval, b: Interval) -> Interval:
    lo = a.lo / b.hi if b.hi > 0 and not math.isinf(b.hi) else 0.0
    hi = a.hi / b.lo if b.lo > 0 else math.inf
    return Interval(lo, hi, a.est / b.est if b.est > 0 else math.inf)


def _slo_of(check: Check, spec) -> dict[str, float]:
    from .analyze import slo_limits

    return slo_limits(check.slo if check.slo is not None else getattr(spec, "slo", None))


def _one(df, check: Check, spec, at: At | None) -> tuple[str, str]:
    """The verdict and evidence at one load (or over the sweep for the knee metrics)."""
    unit = LATENCY.get(check.metric, ("", "", "", ""))[3] or (" kRPS" if "krps" in check.metric else "")
    unit = " us" if unit == "us" else ("x" if unit == "x" else unit)
    where = f" at {at.label()}" if at is not None else ""
    if check.metric == "throughput_under_slo" or check.relation == "collapses_before":
        slo = _slo_of(check, spec)
        if not slo:
            return INCONCLUSIVE, "no SLO: give check.slo or the spec's slo"
        a, why_a = knee(df, check.curve, check.cls, slo)
        if check.relation == "collapses_before":
            b, why_b = knee(df, str(check.than), check.cls, slo)
            ev = f"{check.curve} knee {a.fmt(' kRPS')} ({why_a}); {check.than} {b.fmt(' kRPS')} ({why_b})"
            if a.hi <= b.lo:
                return HOLDS, ev
            if b.hi <= a.lo:
                return FAILS, ev
            return INCONCLUSIVE, ev + ": the knees' intervals overlap"
        b = knee(df, str(check.than), check.cls, slo)[0] if check.than else Interval(*(3 * [float(check.value)]))
        ev = f"{check.curve} under the SLO: {a.fmt(' kRPS')} ({why_a})"
        if check.than:
            ev += f"; {check.than}: {b.fmt(' kRPS')}"
        return _relate(check, a, b, ev)
    a = value_at(df, check.metric, check.curve, check.cls, at)
    ev = f"{check.curve}{where}: {a.fmt(unit)}"
    if check.than_at is not None:
        other = check.than or check.curve
        b = value_at(df, check.metric, other, check.cls, check.than_at)
        ev += f"; {other} at {check.than_at.label()}: {b.fmt(unit)}"
    elif check.than:
        b = value_at(df, check.metric, check.than, check.cls, at)
        ev += f"; {check.than}: {b.fmt(unit)}"
    else:
        b = Interval(*(3 * [float(check.value)]))
    return _relate(check, a, b, ev)


def _relate(check: Check, a: Interval, b: Interval, ev: str) -> tuple[str, str]:
    rel = check.relation
    if rel in ("<", "<=", ">", ">="):
        target = f"{check.value:g}" if check.value is not None else (check.than or "the other load")
        v = _compare(rel, a, b)
        return v, ev + ("" if v != INCONCLUSIVE else f": the intervals overlap {rel} {target}")
    r = _ratio(a, b)
    if rel == "within":
        t = float(check.tolerance_pct) / 100
        ev += f"; ratio {r.fmt()} vs 1 +- {t:.0%}"
        if r.lo >= 1 - t and r.hi <= 1 + t:
            return HOLDS, ev
        if r.hi < 1 - t or r.lo > 1 + t:
            return FAILS, ev
        return INCONCLUSIVE, ev + ": the ratio's interval straddles the tolerance"
    want = float(check.value)
    ev += f"; ratio {r.fmt()} vs {want:g}"
    if rel == "ratio>=":
        return (HOLDS if r.lo >= want else FAILS if r.hi < want else INCONCLUSIVE), ev
    return (HOLDS if r.hi <= want else FAILS if r.lo > want else INCONCLUSIVE), ev


def evaluate(claim: Claim, df, spec=None) -> Verdict:
    """One claim over one run's summary (analyze.read_summary)."""
    if claim.check is None:
        return Verdict(claim.id, NOT_CHECKABLE, str(claim.not_checkable), claim.text, claim.source)
    c = claim.check
    parts: list[tuple[str, str]] = []
    for at in c.at or [None]:
        try:
            parts.append(_one(df, c, spec, at))
        except Missing as e:
            parts.append((INCONCLUSIVE, str(e)))
    verdicts = {v for v, _ in parts}
    verdict = FAILS if FAILS in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else HOLDS
    # the evidence that decided it first, then the rest
    parts.sort(key=lambda p: p[0] != verdict)
    return Verdict(claim.id, verdict, "; ".join(e for _, e in parts), claim.text, claim.source)


def evaluate_all(spec, df) -> list[Verdict]:
    return [evaluate(c, df, spec) for c in getattr(spec, "claims", [])]


@dataclass(frozen=True)
class Beside:
    """A printed number beside ours."""

    ref: Reference
    ours: float | None
    note: str

    @property
    def ratio(self) -> float | None:
        return self.ours / self.ref.value if self.ours is not None and self.ref.value else None


def references(spec, df) -> list[Beside]:
    """Every reference of the spec with the run's value at the same curve and load."""
    out = []
    for ref in getattr(spec, "references", []):
        try:
            if ref.metric == "throughput_under_slo":
                from .analyze import slo_limits

                slo = slo_limits(getattr(spec, "slo", None))
                if not slo:
                    raise Missing("the spec has no slo")
                iv, why = knee(df, ref.curve, ref.cls, slo)
                out.append(Beside(ref, iv.lo, why))
            else:
                iv = value_at(df, ref.metric, ref.curve, ref.cls, ref.at)
                out.append(Beside(ref, iv.est, f"interval [{iv.lo:,.3g}, {iv.hi:,.3g}]"))
        except Missing as e:
            out.append(Beside(ref, None, str(e)))
    return out


# -- a run's claims ------------------------------------------------------------------------


def spec_with_claims(run_dir, spec_file=None):
    """The spec whose claims judge run_dir: `spec_file` if given, else the spec the run
    recorded, else (a run made before its spec had claims) the recorded spec file, if
    it still exists and is the same experiment. (spec, where it came from)."""
    from pathlib import Path

    from ..errors import UsageError
    from .layout import RunDir
    from .points import spec_of
    from .spec import load

    if spec_file is not None:
        return load(spec_file), str(spec_file)
    m = RunDir(run_dir).read_manifest()
    spec = spec_of(m)
    if spec is None:
        raise UsageError(f"{run_dir}: its manifest.json records no readable spec", fix="give --spec SPEC.yaml")
    if spec.claims or spec.references:
        return spec, "the run's own spec"
    f = m.get("spec_file")
    if isinstance(f, str) and Path(f).is_file():
        now = load(f)
        if now.name == spec.name:
            return now, f"{f} (the run's spec had no claims yet)"
    return spec, "the run's own spec"


def run_claims(run_dir, spec_file=None, df=None) -> tuple[list[Verdict], list[Beside], str]:
    """Every claim's verdict and every reference beside the run's value; `df`: the
    run's summary, when the caller has it (read, or analysed again when it predates the
    intervals, otherwise)."""
    from .analyze import analyze, read_summary

    spec, origin = spec_with_claims(run_dir, spec_file)
    if df is None:
        df = read_summary(run_dir)
        if not df.empty and "p50_ci_lo_us_paper" not in df.columns:  # analysed before the intervals were written
            df = analyze(run_dir)
    return evaluate_all(spec, df), references(spec, df), origin


def tally(verdicts: list[Verdict]) -> dict[str, int]:
    out = {HOLDS: 0, FAILS: 0, INCONCLUSIVE: 0, NOT_CHECKABLE: 0}
    for v in verdicts:
        out[v.verdict] += 1
    return out
