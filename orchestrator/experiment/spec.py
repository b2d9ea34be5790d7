"""Typed experiment specs (experiments/*.yaml): what to run, at which loads, how often,
and what a good result is. Same validation standard as the inventory: unknown keys
are errors, every problem names its file, line and field, with a fix.

A spec is testbed-independent: loads may be fractions of the testbed's capacity,
which `plan` turns into request rates from the worker count and the mean service
time; service times are in paper time (microseconds) and the emulated testbed
dilates them by `dilation.emulated` (DESIGN.md, "Time dilation").
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .. import yamlfile
from ..errors import InputFileError, Problem

SYSTEMS = ("rain", "r2p2", "racksched", "draconis", "pallas")
PLOTS = (
    "p99_vs_load",
    "p99_per_class",
    "p99_slowdown_vs_load",
    "queue_depth",
    "p99_over_time",
    "queuing_ratio",
    "quota_vs_load",
)


class SpecError(InputFileError):
    kind = "experiment spec"


def bad(message: str, fix: str) -> PydanticCustomError:
    return PydanticCustomError("rainmaker", "{message}", {"message": message, "fix": fix})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- service-time distributions (paper time, microseconds) --------------------------


class Constant(Strict):
    dist: Literal["constant"]
    us: float = Field(gt=0)

    @property
    def mean_us(self) -> float:
        return self.us

    def client_arg(self, k: float) -> str:
        return f"const:{round(self.us * 1000 * k)}"


class Exponential(Strict):
    dist: Literal["exponential"]
    mean_us: float = Field(gt=0)

    def client_arg(self, k: float) -> str:
        return f"exp:{round(self.mean_us * 1000 * k)}"


class Mode(Strict):
    us: float = Field(gt=0)
    weight: float = Field(gt=0)


class Bimodal(Strict):
    dist: Literal["bimodal"]
    modes: list[Mode] = Field(min_length=2, max_length=2)

    @property
    def mean_us(self) -> float:
        w = sum(m.weight for m in self.modes)
        return sum(m.us * m.weight for m in self.modes) / w

    def client_arg(self, k: float) -> str:
        a, b = self.modes
        p = a.weight / (a.weight + b.weight)
        return f"bimodal:{round(a.us * 1000 * k)}:{round(b.us * 1000 * k)}:{p:.6f}"


class Keys(Strict):
    """RocksDB-style requests: a key count (constant or exponential) times a per-key cost."""

    dist: Literal["keys"]
    op: Literal["get", "scan"]
    keys: float = Field(gt=0, description="key count, or its mean when keys_dist is exponential")
    keys_dist: Literal["constant", "exponential"] = "constant"
    us_per_key: float = Field(gt=0, description="measured service time per key (paper: GET 10 keys ~ 8 us)")

    @property
    def mean_us(self) -> float:
        return self.keys * self.us_per_key

    def client_arg(self, k: float) -> str:
        ns = round(self.us_per_key * 1000 * k)
        if self.keys_dist == "constant":
            return f"const:{round(self.keys * ns)}"
        return f"keys-exp:{self.keys}:{ns}"


Service = Annotated[Constant | Exponential | Bimodal | Keys, Field(discriminator="dist")]


class Payload(Strict):
    bytes: int = Field(8, ge=8, le=1400, description="8 = inline (fits a switch queue entry)")
    large_fraction: float = Field(0.0, ge=0, le=1, description="share of tasks that carry large_bytes instead")
    large_bytes: int = Field(64, ge=32, le=1400)


class RequestClass(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,15}$")
    weight: float = Field(1.0, gt=0)
    task_type: int = Field(0, ge=0, le=255)
    service: Service
    payload: Payload = Payload()


class Phase(Strict):
    """A piece of a time-varying workload (paper 5.3.2): from `at_s` on, this load."""

    at_s: float = Field(ge=0)
    capacity_fraction: float = Field(
        gt=0, le=1.5, description="load, as a fraction of the capacity for this phase's classes"
    )
    classes: list[str] | None = Field(None, description="which classes run in this phase (default: all)")


class Workload(Strict):
    classes: list[RequestClass] = Field(min_length=1)
    arrival: Literal["poisson", "constant"] = "poisson"
    phases: list[Phase] | None = None

    @model_validator(mode="after")
    def _names(self) -> Workload:
        names = [c.name for c in self.classes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise bad(f"class name '{sorted(dup)[0]}' is used twice", "give every request class its own name")
        if self.phases:
            if self.phases[0].at_s != 0:
                raise bad("the first phase must start at at_s: 0", "add a phase at 0 s")
            if any(b.at_s <= a.at_s for a, b in zip(self.phases, self.phases[1:])):
                raise bad("phases must be in increasing at_s order", "sort the phases by at_s")
            for p in self.phases:
                for n in p.classes or []:
                    if n not in names:
                        raise bad(
                            f"phase at {p.at_s} s names class '{n}', which is not defined",
                            f"use one of {', '.join(names)}",
                        )
        return self

    @property
    def mean_service_us(self) -> float:
        w = sum(c.weight for c in self.classes)
        return sum(c.weight * c.service.mean_us for c in self.classes) / w


class Load(Strict):
    krps: list[float] | None = Field(None, description="absolute loads, in paper time (kilo requests/s)")
    capacity_fraction: list[float] | None = Field(None, description="fractions of the testbed's capacity")

    @model_validator(mode="after")
    def _one(self) -> Load:
        if (self.krps is None) == (self.capacity_fraction is None):
            raise bad(
                "give exactly one of krps and capacity_fraction",
                "capacity_fraction fits any testbed: e.g. capacity_fraction: [0.5, 0.7, 0.9]",
            )
        vals = self.krps or self.capacity_fraction or []
        if not vals:
            raise bad("the list of loads is empty", "list at least one load")
        if any(v <= 0 for v in vals):
            raise bad("loads must be positive", "remove zero or negative loads")
        if self.capacity_fraction and any(v > 1.5 for v in self.capacity_fraction):
            raise bad("a capacity fraction above 1.5 is far past saturation", "use fractions like 0.5 to 1.1")
        return self


class Workers(Strict):
    per_host_threads: int = Field(2, ge=1, le=64)
    emulated_per_host_threads: int | None = Field(
        None,
        ge=1,
        le=16,
        description="fewer threads on the emulated testbed (its 2 cores); loads given as "
        "capacity fractions keep the curves' shape",
    )

    def threads(self, emulated: bool) -> int:
        return self.emulated_per_host_threads or self.per_host_threads if emulated else self.per_host_threads


class Slice(Strict):
    id: int = Field(ge=0, le=15)
    task_types: list[int] = Field(default_factory=list)
    workers: int | None = Field(None, ge=1, description="worker threads in this slice (default: an even split)")


class Rain(Strict):
    initial_quota: int = Field(2, ge=1, le=64)
    adaptive: bool = False
    r_th: float = Field(0.5, gt=0, lt=1)
    s_th: float = Field(10, gt=1)
    n_max: int = Field(8, ge=1, le=64)
    sample_interval_us: float = Field(10, gt=0)
    k_samples: int = Field(1000, ge=10)
    slices: list[Slice] | None = None
    int_enabled: bool = True

    @model_validator(mode="after")
    def _quota(self) -> Rain:
        if self.initial_quota > self.n_max:
            raise bad(
                f"initial_quota {self.initial_quota} is above n_max {self.n_max}", "lower initial_quota or raise n_max"
            )
        return self


class Baseline(Strict):
    jbsq_n: int = Field(1, ge=1, le=16, description="R2P2/Draconis: bound on worker queues")
    k: int = Field(2, ge=2, le=8, description="RackSched: power-of-k choices")


class Slo(Strict):
    p99_us: float | None = Field(None, gt=0)
    p99_slowdown: float | None = Field(None, gt=1)

    @model_validator(mode="after")
    def _one(self) -> Slo:
        if self.p99_us is None and self.p99_slowdown is None:
            raise bad("an SLO needs p99_us or p99_slowdown", "e.g. slo: {p99_slowdown: 10}")
        return self


class Durations(Strict):
    warmup_s: float = Field(ge=0)
    measure_s: float = Field(gt=0)


class Dilation(Strict):
    emulated: float = Field(100, ge=1, le=10000, description="emulated testbeds: x service and inter-arrival times")
    hardware: float = Field(1, ge=1)


class Validity(Strict):
    load_tolerance: float = Field(0.05, gt=0, lt=1, description="|achieved - offered| / offered")
    max_lag_us: float = Field(1000, gt=0, description="largest client schedule lag, in emulated time")
    max_lost_fraction: float = Field(0.001, ge=0, lt=1)
    min_samples_p99: int = Field(1000, ge=100, description="samples needed for a p99 worth reporting")
    gof_alpha: float = Field(0.001, gt=0, lt=1, description="inter-arrival goodness-of-fit: reject below this p-value")
    max_late_fraction: float = Field(
        0.01, ge=0, le=1, description="share of sends later than the client's lateness threshold (1 us of paper time)"
    )
    max_p99_ci_width: float = Field(0.25, gt=0, description="relative width of the p99's 95% confidence interval")


class Variant(Strict):
    """A named set of overrides of the system parameters: one curve per variant
    (Fig. 1: quota 1 vs 2; Fig. 9: R_th 0.2 / 0.5 / 0.8 / not adaptive)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,15}$")
    label: str | None = None
    rain: dict = Field(default_factory=dict)
    baseline: dict = Field(default_factory=dict)


class Spec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""
    figure: str | None = Field(None, description="the paper figure this reproduces, e.g. 6b")

    @field_validator("figure", mode="before")
    @classmethod
    def _figure(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v

    systems: list[Literal[SYSTEMS]] = Field(min_length=1)  # type: ignore[valid-type]
    workers: Workers = Workers()
    workload: Workload
    load: Load
    warmup_s: float = Field(1, ge=0)
    measure_s: float = Field(10, gt=0)
    emulated: Durations | None = Field(None, description="shorter durations on the emulated testbed")
    repetitions: int = Field(1, ge=1, le=100)
    dilation: Dilation = Dilation()
    handler: Literal["auto", "spin", "sleep"] = "auto"
    rain: Rain = Rain()
    baseline: Baseline = Baseline()
    variants: list[Variant] | None = None
    slo: Slo | None = None
    plots: list[Literal[PLOTS]] = Field(default_factory=lambda: ["p99_vs_load"])  # type: ignore[valid-type]
    validity: Validity = Validity()
    requires: list[Literal["rocksdb", "adaptive", "baselines", "time_varying"]] = Field(
        default_factory=list, description="features beyond the static Rain path (checked by `run`)"
    )

    @field_validator("systems")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise bad("a system is listed twice", "list each system once")
        return v

    @model_validator(mode="after")
    def _variants(self) -> Spec:
        names = [v.name for v in self.variants or []]
        if len(set(names)) != len(names):
            raise bad("a variant name is used twice", "give every variant its own name")
        for v in self.variants or []:
            try:
                Rain.model_validate(self.rain.model_dump() | v.rain)
                Baseline.model_validate(self.baseline.model_dump() | v.baseline)
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                raise bad(
                    f"variant '{v.name}': {where}: {first['msg']}",
                    "use the fields and ranges of the rain/baseline sections",
                ) from None
        return self

    def variant_params(self) -> list[tuple[str | None, str | None, Rain, Baseline]]:
        """(variant name, label, rain parameters, baseline parameters); one (None...) without variants."""
        if not self.variants:
            return [(None, None, self.rain, self.baseline)]
        return [
            (
                v.name,
                v.label or v.name,
                Rain.model_validate(self.rain.model_dump() | v.rain),
                Baseline.model_validate(self.baseline.model_dump() | v.baseline),
            )
            for v in self.variants
        ]

    def durations(self, emulated: bool) -> Durations:
        if emulated and self.emulated is not None:
            return self.emulated
        return Durations(warmup_s=self.warmup_s, measure_s=self.measure_s)

    def needs(self) -> set[str]:
        """Features this spec uses, whether declared or implied."""
        out = set(self.requires)
        if any(isinstance(c.service, Keys) for c in self.workload.classes):
            out.add("rocksdb")
        if "rain" in self.systems and any(r.adaptive for _, _, r, _ in self.variant_params()):
            out.add("adaptive")
        if set(self.systems) - {"rain"}:
            out.add("baselines")
        if self.workload.phases:
            out.add("time_varying")
        return out


def load(path: str | os.PathLike) -> Spec:
    path = Path(path)
    problems: list[Problem] = []
    located = yamlfile.load(path, problems)
    if located is None:
        raise SpecError(str(path), problems)
    if not isinstance(located.data, dict):
        raise SpecError(
            str(path),
            [
                Problem(
                    "",
                    "a spec is a mapping (name, systems, workload, load, ...)",
                    "start from experiments/demo.yaml",
                    1,
                )
            ],
        )
    try:
        spec = Spec.model_validate(located.data)
    except ValidationError as e:
        raise SpecError(str(path), yamlfile.pydantic_problems(e, located, Spec)) from None
    return spec


def capacity_krps(spec: Spec, worker_threads: int) -> float:
    """What the workers can serve, in paper time: threads / mean service time."""
    return worker_threads / spec.workload.mean_service_us * 1000.0


def fmt_load(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") if not math.isclose(x, round(x)) else str(int(round(x)))
