"""Typed experiment specs (experiments/*.yaml): what to run, at which loads, how often,
and what a good result is. Same validation standard as the inventory: unknown keys
are errors, every problem names its file, line and field, with a fix.

A spec is testbed-independent: loads may be fractions of the testbed's capacity,
which `plan` turns into request rates from the worker count and the mean service
time; service times are in paper time (microseconds) and the emulated testbed
dilates them by `dilation.emulated` (docs/emulation.md, time dilation).

Every number has a range a testbed can run, wide enough for the paper's experiments
at paper scale and for large simulated testbeds (32 workers, millions of requests/s);
NaN and infinity are refused everywhere. In paper time:

    service times (us, each value)   0.1 .. 100,000    the paper's tasks: 10 to 550 us
    keys x us_per_key                    the same range    keys 1 .. 100,000
    loads: krps                         0 < x <= 100,000  100 M requests/s
    loads: capacity_fraction            0 < x <= 1.5      past 1.5 is only overload
    warmup_s                             0 .. 3,600
    measure_s, measure_max_s, segment_s 0.1 .. 3,600
    phases: at_s                         0 .. 3,600     (seconds of the testbed's clock, as warmup_s;
                                                        emulated.phases_at_s overrides them there)
    weights                             0 < x <= 1,000,000
    dilation                             1 .. 10,000, or auto (emulated: chosen by the calibration)
    payload bytes                        8 .. 1,400        one packet (large_bytes from 32)
    quotas (initial_quota, n_max)        1 .. 64
    validity.model_tolerance            0 < x <= 1        |measured p99 / model p99 - 1|
`plan` then checks what this testbed makes of them (plan.py): dilated tasks shorter
than the measurement, and an offered rate its clients can send.

One module of about 700 lines: the schema is one tree of pydantic models, and the
whole spec's cross-field checks (Spec's validators) read every branch of it; the
ranges above are kept beside the fields they bound, so one file is the schema.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Literal, NamedTuple, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .. import yamlfile
from ..errors import InputFileError, Problem
from ..systems import NAMES
from ..systems import get as get_system
from . import kv_costs
from .claim_spec import Claim, Reference

M = TypeVar("M", bound=BaseModel)
SYSTEMS = NAMES  # orchestrator/systems: one declaration each
PLOTS = (
    "p99_vs_load",
    "p99_vs_load_by_variant",
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


def ranged(lo: float, hi: float, unit: str, why: str, *, lo_open: bool = False, example: str | None = None):
    """A float in [lo, hi] (or (lo, hi]), finite; out of it, an error that says the
    range, why it is the range, and what to write instead."""
    rng = f"{'(' if lo_open else '['}{lo:,g}, {hi:,g}]{unit}"

    def check(v: float) -> float:
        if not math.isfinite(v):
            raise bad(
                f"{v} is not a finite number", f"give a number in {rng}" + (f", like {example}" if example else "")
            )
        if v < lo or (lo_open and v == lo) or v > hi:
            raise bad(
                f"{v:,g}{unit} is outside {rng}: {why}",
                f"give a number in {rng}" + (f", like {example}" if example else ""),
            )
        return v

    return Annotated[float, AfterValidator(check)]


SERVICE_US = (0.1, 100_000.0)
ServiceUs = ranged(
    *SERVICE_US,
    " us",
    "tasks shorter than 100 ns are below a worker's per-packet cost, longer than 100 ms "
    "are not microsecond-scale scheduling (the paper's tasks take 10 to 550 us)",
    example="10",
)
Weight = ranged(0, 1e6, "", "weights are relative shares", lo_open=True, example="1")
Seconds = ranged(0, 3600, " s", "one point runs at most an hour", example="1")
MeasureSeconds = ranged(
    0.1, 3600, " s", "a point measures for at least 0.1 s (too few samples below) and at most an hour", example="10"
)
KRPS_MAX = 100_000.0
Krps = ranged(
    0,
    KRPS_MAX,
    " kRPS",
    "100 M requests/s is far past any testbed (32 workers at 10 us serve 3.2 M/s)",
    lo_open=True,
    example="1000",
)
Fraction = ranged(
    0, 1.5, "", "a load is a fraction of the capacity, past 1.5 only overload", lo_open=True, example="0.9"
)


# -- service-time distributions (paper time, microseconds) --------------------------


class Constant(Strict):
    dist: Literal["constant"]
    us: ServiceUs

    @property
    def mean_us(self) -> float:
        return self.us

    def client_arg(self, k: float) -> str:
        return f"const:{round(self.us * 1000 * k)}"


class Exponential(Strict):
    dist: Literal["exponential"]
    mean_us: ServiceUs

    def client_arg(self, k: float) -> str:
        return f"exp:{round(self.mean_us * 1000 * k)}"


class Mode(Strict):
    us: ServiceUs
    weight: Weight


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
    """RocksDB-style requests: a key count (constant or exponential) times a per-key cost.
    With the RocksDB handler the worker runs them and answers their service time; the
    per-key cost is then the model's (capacity, the simulated testbed), best taken from
    a measurement (database.costs)."""

    dist: Literal["keys"]
    op: Literal["get", "scan"]
    keys: ranged(1, 100_000, "", "a request touches 1 to 100,000 keys (the paper: 10 and 500)", example="10") = Field(
        description="key count, or its mean when keys_dist is exponential"
    )
    keys_dist: Literal["constant", "exponential"] = "constant"
    us_per_key: ranged(0.001, 10_000, " us", "a key costs 1 ns to 10 ms", example="0.8") = Field(
        description="service time per key (paper: GET 10 keys ~ 8 us); left out, database.costs gives it"
    )

    @model_validator(mode="after")
    def _mean(self) -> Keys:
        lo, hi = SERVICE_US
        if not lo <= self.mean_us <= hi:
            raise bad(
                f"keys x us_per_key = {self.mean_us:,g} us is outside [{lo:g}, {hi:,g}] us, the service times a "
                "testbed runs",
                "lower keys or us_per_key",
            )
        return self

    @property
    def mean_us(self) -> float:
        return self.keys * self.us_per_key

    def client_arg(self, k: float, database: Database | None = None) -> str:
        """rain-client's SERVICE: a request for the RocksDB handler when `database` is
        given (the worker measures its service time), else a synthetic service time."""
        if database is not None:
            kind = f"kv-{self.op}" + ("-exp" if self.keys_dist == "exponential" else "")
            return f"{kind}:{self.keys:g}:{database.keys}"
        ns = round(self.us_per_key * 1000 * k)
        if self.keys_dist == "constant":
            return f"const:{round(self.keys * ns)}"
        return f"keys-exp:{self.keys}:{ns}"


class Memcached(Strict):
    """A real memcached does the work: rpc-client sends its binary protocol's GETs and
    SETs (hosts/rpc/client.c --protocol memcached) to Debian's memcached on the server
    host, which serves them with its own threads. memcached decides its service time,
    so no model is computed beside the point (nothing says what it draws), loads are
    absolute (load.krps) and dilation is 1: a real server is not slowed down."""

    dist: Literal["memcached"]
    get_fraction: float = Field(0.9, ge=0, le=1, description="the share of requests that are GETs (the rest SETs)")
    keys: int = Field(10_000, ge=1, le=10_000_000, description="how many keys, drawn uniformly")
    value_bytes: int = Field(64, ge=1, le=8192, description="each SET's value, and so each GET hit's answer")
    expect_us: ServiceUs = Field(
        5.0,
        description="what one request is expected to cost memcached, paper time: it sizes the plan (the "
        "client's time-out, the shortest window), never a result",
    )

    @property
    def mean_us(self) -> float:
        return self.expect_us

    def client_options(self) -> dict:
        """rpc-client's options for this workload (agent_config.rpc_client)."""
        return {
            "protocol": "memcached",
            "get_fraction": self.get_fraction,
            "keys": self.keys,
            "payload": self.value_bytes,
        }


class Database(Strict):
    """The RocksDB handler's database: one per worker server, built at the first point
    that needs it and reused while these parameters stay the same (its folder names them)."""

    keys: int = Field(100_000, ge=1000, le=100_000_000, description="items, numbered 0 .. keys-1")
    key_bytes: int = Field(64, ge=16, le=1024, description="the paper: 64-byte keys")
    item_bytes: int = Field(1024, ge=1, le=65536, description="value size (the paper's SCAN: 1,024 bytes)")
    seed: int = Field(1, ge=0, le=2**63 - 1, description="the values' generator (docs/rocksdb.md)")
    costs: str | None = Field(
        None,
        description="a costs.json measured by a handler run (experiments/fig2.yaml), relative to the spec: "
        "every keys class without us_per_key takes its mean service time from it",
    )


Service = Annotated[Constant | Exponential | Bimodal | Keys | Memcached, Field(discriminator="dist")]


class Payload(Strict):
    bytes: int = Field(8, ge=8, le=1400, description="8 = inline (fits a switch queue entry)")
    large_fraction: float = Field(0.0, ge=0, le=1, description="share of tasks that carry large_bytes instead")
    large_bytes: int = Field(64, ge=32, le=1400)


class RequestClass(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,15}$")
    weight: Weight = 1.0
    task_type: int = Field(0, ge=0, le=255)
    service: Service
    payload: Payload = Payload()


class Phase(Strict):
    """A piece of a time-varying workload (paper 5.3.2): from `at_s` on, this load."""

    at_s: Seconds = Field(
        description="seconds from the start of the warm-up, on the clock of warmup_s and measure_s "
        "(emulated.phases_at_s replaces them on the emulated testbed)"
    )
    capacity_fraction: Fraction = Field(description="load, as a fraction of the capacity for this phase's classes")
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
    krps: list[Krps] | None = Field(None, description="absolute loads, in paper time (kilo requests/s)")
    capacity_fraction: list[Fraction] | None = Field(None, description="fractions of the testbed's capacity")

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
    workers: int | None = Field(
        None, ge=1, le=4096, description="worker threads in this slice (default: an even split)"
    )


class Rain(Strict):
    initial_quota: int = Field(2, ge=1, le=64)
    adaptive: bool = False
    r_th: float = Field(0.5, gt=0, lt=1)
    s_th: ranged(1, 1e6, "", "a slowdown threshold", lo_open=True, example="10") = 10
    n_max: int = Field(8, ge=1, le=64)
    sample_interval_us: ranged(0.1, 1e6, " us", "the paper samples every 10 us", example="10") = 10
    k_samples: int = Field(1000, ge=10, le=10_000_000)
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


class Rpc(Strict):
    """One-server RPC scheduling (Rakaia): the clients' connections to the server."""

    connections: int = Field(20, ge=1, le=1_000_000, description="client connections (the paper: 20, 80, 5,000)")
    spread: Literal["uniform", "zipf"] = Field(
        "uniform", description="how requests spread over connections: uniform, or Zipf (inter-connection imbalance)"
    )
    zipf_s: float = Field(1.0, gt=0, le=10, description="the Zipf exponent, with spread: zipf")


class Slo(Strict):
    p99_us: ranged(0, 1e8, " us", "an SLO up to 100 s", lo_open=True, example="200") | None = None
    p99_slowdown: ranged(1, 1e6, "", "a slowdown SLO above 1", lo_open=True, example="10") | None = None

    @model_validator(mode="after")
    def _one(self) -> Slo:
        if self.p99_us is None and self.p99_slowdown is None:
            raise bad("an SLO needs p99_us or p99_slowdown", "e.g. slo: {p99_slowdown: 10}")
        return self


_MEASURE_MAX = (
    "the longest a point may measure: a point whose p99 the model predicts too uncertain at measure_s "
    "(wider than validity.max_p99_ci_width) measures longer, up to this; none: every point measures measure_s"
)
_SEGMENT = (
    "measure a window longer than this in segments, each a client run of its own with its own warm-up and "
    "checked alone (a segment the host stalled is measured again), merged into the point; none: one run"
)


class Durations(Strict):
    warmup_s: Seconds
    measure_s: MeasureSeconds
    measure_max_s: MeasureSeconds | None = Field(None, description=_MEASURE_MAX)
    segment_s: MeasureSeconds | None = Field(None, description=_SEGMENT)
    phases_at_s: list[Seconds] | None = Field(
        None,
        description="when each of workload.phases starts on this testbed, in its own seconds from the start of "
        "the warm-up (an emulated testbed runs k times slower: give it phases long enough for several control "
        "intervals); none: the phases' own at_s",
    )

    @model_validator(mode="after")
    def _max(self) -> Durations:
        if self.measure_max_s is not None and self.measure_max_s < self.measure_s:
            raise bad(
                f"measure_max_s ({self.measure_max_s:g}) is below measure_s ({self.measure_s:g})",
                "give measure_max_s at least measure_s, or leave it out",
            )
        return self


DilationFactor = ranged(
    1, 10_000, "", "times are stretched, never shrunk, and 10,000x turns 10 us into 0.1 s", example="100"
)


AUTO_K = 100  # what `auto` plans with before a calibration chooses (and without one)


class Dilation(Strict):
    emulated: DilationFactor | Literal["auto"] = Field(
        "auto",
        description="emulated testbeds: x service and inter-arrival times; auto: the smallest k at which the "
        "testbed's calibrated overheads stay below 5% of a mean service time (calibrate.py)",
    )
    hardware: DilationFactor = 1

    def planned(self, emulated: bool) -> float:
        """The k a plan uses before any calibration: auto plans with AUTO_K."""
        if not emulated:
            return self.hardware
        return AUTO_K if self.emulated == "auto" else self.emulated


class Validity(Strict):
    load_tolerance: float = Field(0.05, gt=0, lt=1, description="|achieved - offered| / offered")
    max_lag_us: ranged(0, 1e9, " us", "a lag up to 1000 s", lo_open=True, example="10") = Field(
        10,
        description="largest client schedule lag, in paper time (the testbed's lag / k): the requests behind a "
        "stall reach the system that much late, in the system's own time",
    )
    max_lost_fraction: float = Field(0.001, ge=0, lt=1)
    min_samples_p99: int = Field(1000, ge=100, description="samples needed for a p99 worth reporting")
    gof_alpha: float = Field(0.001, gt=0, lt=1, description="inter-arrival goodness-of-fit: reject below this p-value")
    max_late_fraction: float = Field(
        0.01, ge=0, le=1, description="share of sends later than the client's lateness threshold (1 us of paper time)"
    )
    max_p99_ci_width: ranged(0, 100, "", "a relative width", lo_open=True, example="0.25") = Field(
        0.25, description="relative width of the p99's 95% confidence interval"
    )
    remeasure_stalled: int = Field(
        2,
        ge=0,
        le=5,
        description="measure a point again, up to this many times, when its client could not keep its schedule "
        "(schedule_lag or late_sends failed): a stall of the host, not of the system under test; every "
        "discarded attempt is kept under stalled/ and named in the report",
    )
    model_tolerance: ranged(
        0, 1, "", "a relative difference (1 already accepts a p99 twice the model's)", lo_open=True, example="0.15"
    ) = Field(0.15, description="|measured p99 / the model's p99 - 1|, paper time (the model_agreement check)")


class Variant(Strict):
    """A named set of overrides of the system parameters: one curve per variant
    (Fig. 1: quota 1 vs 2; Fig. 9: R_th 0.2 / 0.5 / 0.8 / not adaptive)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,15}$")
    label: str | None = None
    rain: dict = Field(default_factory=dict)
    baseline: dict = Field(default_factory=dict)
    rpc: dict = Field(default_factory=dict)


class VariantParams(NamedTuple):
    """One variant's parameters: each system reads the block its declaration names."""

    name: str | None
    label: str | None
    rain: Rain
    baseline: Baseline
    rpc: Rpc

    def block(self, params_block: str) -> Strict:
        return getattr(self, params_block)


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
    warmup_s: Seconds = 1
    measure_s: MeasureSeconds = 10
    measure_max_s: MeasureSeconds | None = Field(None, description=_MEASURE_MAX)
    segment_s: MeasureSeconds | None = Field(None, description=_SEGMENT)
    emulated: Durations | None = Field(None, description="shorter durations on the emulated testbed")
    repetitions: int = Field(1, ge=1, le=100)
    dilation: Dilation = Dilation()
    handler: Literal["auto", "spin", "sleep", "rocksdb"] = Field(
        "auto",
        description="what workers run: auto = rocksdb when every class is a keys class, else sleep on the "
        "emulated testbed and spin on hardware",
    )
    database: Database = Database()
    rain: Rain = Rain()
    baseline: Baseline = Baseline()
    rpc: Rpc = Rpc()
    variants: list[Variant] | None = None
    slo: Slo | None = None
    plots: list[Literal[PLOTS]] = Field(default_factory=lambda: ["p99_vs_load"])  # type: ignore[valid-type]
    validity: Validity = Validity()
    requires: list[Literal["rocksdb", "adaptive", "baselines", "time_varying", "rpc"]] = Field(
        default_factory=list, description="features beyond the static Rain path (checked by `run`)"
    )
    claims: list[Claim] = Field(default_factory=list, description="the paper's claims about this figure (claims.py)")
    references: list[Reference] = Field(default_factory=list, description="numbers the paper printed")
    _path: str | None = PrivateAttr(None)  # the file it came from, for errors found by `plan`

    @property
    def path(self) -> str:
        return self._path or f"spec {self.name}"

    @model_validator(mode="before")
    @classmethod
    def _costs(cls, data: object, info: ValidationInfo) -> object:
        """Keys classes without us_per_key take it from database.costs (a measurement)."""
        if not isinstance(data, dict):
            return data
        classes = (data.get("workload") or {}).get("classes") if isinstance(data.get("workload"), dict) else None
        if not isinstance(classes, list):
            return data
        need = [
            i
            for i, c in enumerate(classes)
            if isinstance(c, dict)
            and isinstance(c.get("service"), dict)
            and c["service"].get("dist") == "keys"
            and "us_per_key" not in c["service"]
        ]
        if not need:
            return data
        db = data.get("database") if isinstance(data.get("database"), dict) else {}
        if not db.get("costs"):
            raise bad(
                f"workload.classes[{need[0]}]: a keys class without us_per_key, and no database.costs",
                "give its us_per_key, or database.costs: the costs.json of a handler run (experiments/fig2.yaml)",
            )
        base = Path((info.context or {}).get("spec_dir", "."))
        path = base / str(db["costs"])
        item_bytes = db.get("item_bytes", Database.model_fields["item_bytes"].default)
        try:
            rows = kv_costs.read(path)
            data = dict(data, workload=dict(data["workload"], classes=list(classes)))
            for i in need:
                svc = classes[i]["service"]
                keys = svc.get("keys")
                if not isinstance(keys, (int, float)) or isinstance(keys, bool) or keys <= 0:
                    continue  # the class's own validation names it
                m = kv_costs.mean_us(rows, str(svc.get("op")), int(item_bytes), float(keys), path=path)
                data["workload"]["classes"][i] = dict(classes[i], service=dict(svc, us_per_key=m / keys))
        except kv_costs.CostsError as e:
            raise bad(f"database.costs: {e}", e.fix) from None
        return data

    @model_validator(mode="after")
    def _rocksdb(self) -> Spec:
        keys = [c for c in self.workload.classes if isinstance(c.service, Keys)]
        if self.handler == "rocksdb" and len(keys) != len(self.workload.classes):
            other = next(c.name for c in self.workload.classes if not isinstance(c.service, Keys))
            raise bad(
                f"handler rocksdb serves keys classes only, and class '{other}' is not one",
                "give every class service: {dist: keys, ...}, or choose handler sleep or spin",
            )
        for c in keys:
            if c.service.keys_dist == "constant" and c.service.keys > self.database.keys:
                raise bad(
                    f"class '{c.name}' reads {c.service.keys:g} keys, more than database.keys ({self.database.keys})",
                    "raise database.keys or lower the class's keys",
                )
        return self

    def worker_handler(self, emulated: bool) -> str:
        """What rain-worker runs: the spec's handler, or for auto rocksdb when every class
        is a keys class (the real application), else sleep emulated and spin on hardware."""
        if self.handler != "auto":
            return self.handler
        if all(isinstance(c.service, Keys) for c in self.workload.classes):
            return "rocksdb"
        return "sleep" if emulated else "spin"

    @field_validator("systems")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise bad("a system is listed twice", "list each system once")
        server = [x for x in v if x in SYSTEMS and get_system(x).server_side]
        if server and len(server) != len(v):
            other = next(x for x in v if x not in server)
            raise bad(
                f"{other} schedules in the switch, {server[0]} inside one server: one spec runs one kind",
                "put the server-side systems ("
                + ", ".join(n for n in NAMES if get_system(n).server_side)
                + ") in a spec of their own",
            )
        return v

    @model_validator(mode="after")
    def _memcached(self) -> Spec:
        """A real memcached's workload and its system go together, with absolute loads
        and real time (Memcached's doc says why)."""
        mc = [c.name for c in self.workload.classes if isinstance(c.service, Memcached)]
        if not mc and "memcached" not in self.systems:
            return self
        if mc and self.systems != ["memcached"]:
            raise bad(
                f"class '{mc[0]}' is served by a real memcached, and systems lists {', '.join(self.systems)}",
                "give systems: [memcached] (the synthetic RPC systems draw their own service times)",
            )
        if len(mc) != len(self.workload.classes) or len(mc) != 1:
            raise bad(
                "systems: [memcached] needs one workload class, of service {dist: memcached}",
                "e.g. classes: [{name: kv, service: {dist: memcached, get_fraction: 0.9}}]",
            )
        if self.load.krps is None:
            raise bad(
                "memcached's capacity is not known before it is measured: loads cannot be fractions of it",
                "give load.krps, e.g. load: {krps: [10, 20, 40]}",
            )
        if self.dilation.emulated != 1 or self.dilation.hardware != 1:
            raise bad(
                "a real memcached runs in real time: dilating the clients' schedule would divide its latency by k",
                "give dilation: {emulated: 1, hardware: 1}",
            )
        return self

    @model_validator(mode="after")
    def _measure_max(self) -> Spec:
        if self.measure_max_s is not None and self.measure_max_s < self.measure_s:
            raise bad(
                f"measure_max_s ({self.measure_max_s:g}) is below measure_s ({self.measure_s:g})",
                "give measure_max_s at least measure_s, or leave it out",
            )
        return self

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

    def curves(self) -> list[str]:
        """Every curve a run of this spec draws (plan.Point.curve)."""
        labels = [v.label or v.name for v in self.variants] if self.variants else [None]
        return [s if lab is None else f"{s} ({lab})" for s in self.systems for lab in labels]

    @model_validator(mode="after")
    def _claims_name_curves(self) -> Spec:
        curves, classes = self.curves(), {"all", *(c.name for c in self.workload.classes)}
        named = [(f"claim {c.id}", c.check.curves(), c.check.cls) for c in self.claims if c.check is not None]
        named += [(f"reference {r.id}", [r.curve], r.cls) for r in self.references]
        for what, names, cls in named:
            for n in names:
                if n not in curves:
                    raise bad(
                        f"{what} names curve '{n}', which this spec does not draw",
                        f"use one of: {', '.join(curves)} (a narrowed spec keeps only the claims about its curves)",
                    )
            if cls not in classes:
                raise bad(f"{what} names class '{cls}'", f"use one of: {', '.join(sorted(classes))}")
        ids = [c.id for c in self.claims] + [r.id for r in self.references]
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup is not None:
            raise bad(f"the id '{dup}' is given twice", "give every claim and reference its own id")
        return self

    def variant_params(self) -> list[VariantParams]:
        """Each variant's parameters; one (None, None, ...) without variants."""
        if not self.variants:
            return [VariantParams(None, None, self.rain, self.baseline, self.rpc)]
        return [
            VariantParams(
                v.name,
                v.label or v.name,
                Rain.model_validate(self.rain.model_dump() | v.rain),
                Baseline.model_validate(self.baseline.model_dump() | v.baseline),
                Rpc.model_validate(self.rpc.model_dump() | v.rpc),
            )
            for v in self.variants
        ]

    @model_validator(mode="after")
    def _phase_times(self) -> Spec:
        at = self.emulated.phases_at_s if self.emulated is not None else None
        if at is None:
            return self
        n = len(self.workload.phases or [])
        if len(at) != n:
            raise bad(
                f"emulated.phases_at_s has {len(at)} times for {n} workload phase(s)",
                "give one start time per phase, or leave emulated.phases_at_s out",
            )
        if at[0] != 0 or any(b <= a for a, b in zip(at, at[1:])):
            raise bad("emulated.phases_at_s must start at 0 and increase", "sort the times, the first one 0")
        end = self.emulated.warmup_s + self.emulated.measure_s
        if at[-1] >= end:
            raise bad(
                f"emulated.phases_at_s: the last phase starts at {at[-1]:g} s, after the run ends ({end:g} s)",
                "start every phase before emulated.warmup_s + emulated.measure_s",
            )
        return self

    def phase_times(self, emulated: bool) -> list[float]:
        """When each workload phase starts, in the testbed's seconds from the start of the
        warm-up (the emulated section's phases_at_s there, else each phase's at_s)."""
        if not self.workload.phases:
            return []
        d = self.durations(emulated)
        if d.phases_at_s is not None:
            return list(d.phases_at_s)
        return [p.at_s for p in self.workload.phases]

    def durations(self, emulated: bool) -> Durations:
        if emulated and self.emulated is not None:
            return self.emulated
        return Durations(
            warmup_s=self.warmup_s,
            measure_s=self.measure_s,
            measure_max_s=self.measure_max_s,
            segment_s=self.segment_s,
        )

    def needs(self) -> set[str]:
        """Features this spec uses, whether declared or implied."""
        out = set(self.requires)
        if any(isinstance(c.service, Keys) for c in self.workload.classes):
            out.add("rocksdb")
        if "rain" in self.systems and any(v.rain.adaptive for v in self.variant_params()):
            out.add("adaptive")
        if any(get_system(s).params_block == "baseline" for s in self.systems):
            out.add("baselines")
        if any(get_system(s).server_side for s in self.systems):
            out.add("rpc")
        if self.workload.phases:
            out.add("time_varying")
        return out


def load(path: str | os.PathLike) -> Spec:
    located = yamlfile.load(Path(path), [])
    if located is not None and isinstance(located.data, dict) and "handler_alone" in located.data:
        line = located.line_of("handler_alone") or 1
        raise SpecError(
            str(path),
            [
                Problem(
                    "handler_alone",
                    "this spec measures a worker's handler alone (no systems, loads or points)",
                    "`rainmaker run` measures it and `rainmaker plan` lists it (orchestrator/experiment/handler_alone.py)",
                    line,
                )
            ],
        )
    spec = load_model(path, Spec)
    spec._path = str(path)
    return spec


def load_model(path: str | os.PathLike, model: type[M]) -> M:
    """A spec file validated as `model` (Spec, or handler_alone.HandlerSpec); every
    problem names the file, line and field. Relative paths inside it (database.costs)
    are relative to the file."""
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
        return model.model_validate(located.data, context={"spec_dir": str(path.parent)})
    except ValidationError as e:
        raise SpecError(str(path), yamlfile.pydantic_problems(e, located, model)) from None


def capacity_krps(spec: Spec, worker_threads: int) -> float:
    """What the workers can serve, in paper time: threads / mean service time."""
    return worker_threads / spec.workload.mean_service_us * 1000.0


def fmt_load(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") if not math.isclose(x, round(x)) else str(int(round(x)))
