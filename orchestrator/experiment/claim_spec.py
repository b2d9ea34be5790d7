"""The claims and references a spec states (claims.py judges them): the models alone,
so that the spec can hold them without importing what reads results."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

HOLDS, FAILS, INCONCLUSIVE, NOT_CHECKABLE = "holds", "does not hold", "inconclusive", "not checkable"

# metric -> (summary column of its value, its interval's columns, unit); paper time
LATENCY = {
    "p50_us": ("p50_us_paper", "p50_ci_lo_us_paper", "p50_ci_hi_us_paper", "us"),
    "p99_us": ("p99_us_paper", "p99_ci_lo_us_paper", "p99_ci_hi_us_paper", "us"),
    "p999_us": ("p999_us_paper", "p999_ci_lo_us_paper", "p999_ci_hi_us_paper", "us"),
    "p99_slowdown": ("p99_slowdown", "p99_slowdown_ci_lo", "p99_slowdown_ci_hi", "x"),
}
# one number per point (an interval only over repetitions): the switch's queuing ratio
# (Fig. 11's alpha) and the workers' mean token quota (their queue depth)
PER_POINT = ("achieved_krps", "rejects", "queuing_ratio", "mean_quota")
METRICS = (*LATENCY, *PER_POINT, "throughput_under_slo")
RELATIONS = ("<", "<=", ">", ">=", "within", "ratio>=", "ratio<=", "collapses_before")
LOAD_TOL = 0.005  # a named load matches a point's nominal load within 0.5%


def _bad(message: str, fix: str) -> PydanticCustomError:
    return PydanticCustomError("rainmaker", "{message}", {"message": message, "fix": fix})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class At(_Strict):
    """A named load: the paper's kRPS (the point's nominal load) or a fraction of capacity."""

    krps: float | None = Field(None, gt=0)
    fraction: float | None = Field(None, gt=0, le=2)

    @model_validator(mode="after")
    def _one(self) -> At:
        if (self.krps is None) == (self.fraction is None):
            raise _bad("a load names exactly one of krps and fraction", "write at: {fraction: 0.8} or {krps: 2800}")
        return self

    def label(self) -> str:
        return f"{self.krps:g} kRPS" if self.krps is not None else f"load {self.fraction:g}"


class SloLimit(_Strict):
    p99_us: float | None = Field(None, gt=0)
    p99_slowdown: float | None = Field(None, gt=1)


class Check(_Strict):
    """`metric` of `curve` (class `cls`) at each load of `at`, related by `relation` to
    `value` or to the same metric of curve `than`. `within` takes `tolerance_pct`;
    ratio relations compare metric(curve) / metric(than) with `value`; throughput under
    an SLO and `collapses_before` use `slo`, or the spec's."""

    metric: Literal[METRICS]  # type: ignore[valid-type]
    curve: str
    cls: str = Field("all", alias="class")
    relation: Literal[RELATIONS]  # type: ignore[valid-type]
    than: str | None = None
    value: float | None = None
    tolerance_pct: float | None = Field(None, gt=0, le=100)
    at: list[At] = Field(default_factory=list)
    than_at: At | None = None  # the other side read at this load (of `than`, or of `curve` itself)
    slo: SloLimit | None = None

    @model_validator(mode="after")
    def _shape(self) -> Check:
        knee = self.metric == "throughput_under_slo" or self.relation == "collapses_before"
        if self.relation == "collapses_before":
            if self.than is None or self.value is not None:
                raise _bad("collapses_before compares two curves", "give than: OTHER_CURVE and no value")
        elif self.relation.startswith("ratio"):
            if self.than is None or self.value is None:
                raise _bad(
                    f"{self.relation} needs than (a curve) and value (the ratio)", "e.g. than: pallas, value: 1.5"
                )
        elif self.relation == "within":
            if self.tolerance_pct is None or (self.than is None) == (self.value is None):
                raise _bad("within needs tolerance_pct and one of than and value", "e.g. than: ms, tolerance_pct: 10")
        elif self.than_at is None and (self.than is None) == (self.value is None):
            raise _bad(f"'{self.relation}' needs exactly one of than (a curve) and value", "e.g. value: 20")
        if self.than_at is not None and (self.value is not None or knee):
            raise _bad("than_at compares with the metric at another load, not with a value", "remove value")
        if knee and self.at:
            raise _bad("throughput under an SLO is one number per curve, not a value at a load", "remove at")
        if not knee and not self.at:
            raise _bad(f"{self.metric} is read at named loads", "add at: [{fraction: 0.8}] (or {krps: ...})")
        return self

    def curves(self) -> list[str]:
        return [self.curve] + ([self.than] if self.than else [])


class Claim(_Strict):
    """One checkable part of a paper's claim. `check` states it; a part that cannot be
    stated so gives `not_checkable` (why) instead."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    text: str = Field(min_length=1)
    source: str = Field(min_length=1)
    check: Check | None = None
    not_checkable: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Claim:
        if (self.check is None) == (self.not_checkable is None):
            raise _bad(
                f"claim {self.id} needs exactly one of check and not_checkable",
                "state it as a check, or say in not_checkable why it cannot be",
            )
        return self


class Reference(_Strict):
    """A number the paper printed, drawn beside the curve and tabled with ours."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    curve: str
    cls: str = Field("all", alias="class")
    metric: Literal[METRICS]  # type: ignore[valid-type]
    at: At | None = None  # none for throughput under the SLO
    value: float = Field(gt=0)
    approx: bool = False  # the paper says "about" or reads off a plot
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _at(self) -> Reference:
        if (self.at is None) != (self.metric == "throughput_under_slo"):
            raise _bad(f"reference {self.id}: {self.metric} needs at (a load)", "add at: {krps: 2800}")
        return self
