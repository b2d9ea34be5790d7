"""A worker's handler measured alone (the paper's Figure 2: SCAN's service time against
item size and key count): a spec with a `handler_alone` section runs `rain-worker
--kv-bench` on one worker host of the testbed, once per item size, with no switch, no
client and no network. The run writes what every run writes where it can (manifest,
run.log, report.md, plots/) and, in place of points, one row per (item size, op, key
count): handler.csv and handler.parquet. It also writes costs.json, the measured costs
a spec's keys classes can take their service times from (database.costs, kv_costs.py).

    name: fig2
    handler_alone:
      ops: [{op: scan, keys: [100, 200, 300]}, {op: get, keys: [10]}]
      item_bytes: [32, 64, 128, 256, 512, 1024]
      requests: 1000
      dilation: 1        # k > 1: each request held k x its run time, as a dilated testbed holds it
    database: {keys: 100000, key_bytes: 64, seed: 1}
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .. import yamlfile
from ..errors import RainmakerError, UsageError
from ..inventory import Inventory
from . import kv_costs
from .spec import Database, Strict, bad, load_model

SECTION = "handler_alone"
MAX_COUNT = 10_000  # RAIN_KV_MAX_COUNT


class OpKeys(Strict):
    op: Literal["get", "scan"]
    keys: list[int] = Field(min_length=1, max_length=32, description="key counts per request, 1 .. 10,000")

    @model_validator(mode="after")
    def _counts(self) -> OpKeys:
        out = [k for k in self.keys if not 1 <= k <= MAX_COUNT]
        if out:
            raise bad(f"{self.op}: key count {out[0]} is outside 1 .. {MAX_COUNT:,}", "use counts a request may carry")
        return self


class HandlerAlone(Strict):
    ops: list[OpKeys] = Field(min_length=1, max_length=8)
    item_bytes: list[int] = Field(min_length=1, max_length=16, description="one database per item size")
    requests: int = Field(1000, ge=10, le=1_000_000, description="measured requests per key count")
    rounds: int = Field(
        3,
        ge=1,
        le=20,
        description="the item sizes are measured in turn this many times, requests/rounds each: a slow spell "
        "of a shared machine then spreads over every size instead of bending one",
    )
    dilation: float = Field(1.0, ge=1, le=10_000, description="hold each request k x its run time (1: back to back)")
    host: str | None = Field(None, description="the worker host to measure on (default: the first)")

    @model_validator(mode="after")
    def _items(self) -> HandlerAlone:
        out = [b for b in self.item_bytes if not 1 <= b <= 65536]
        if out:
            raise bad(f"item size {out[0]} is outside 1 .. 65,536 bytes", "use item sizes RocksDB values may have")
        if len(set(self.item_bytes)) != len(self.item_bytes):
            raise bad("an item size is listed twice", "list each item size once")
        return self


class HandlerSpec(Strict):
    """A spec that measures the handler alone (no systems, no load)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""
    figure: str | None = None
    handler_alone: HandlerAlone
    database: Database = Database()

    @field_validator("figure", mode="before")
    @classmethod
    def _figure(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v

    @model_validator(mode="after")
    def _fits(self) -> HandlerSpec:
        top = max(k for o in self.handler_alone.ops for k in o.keys)
        if top > self.database.keys:
            raise bad(
                f"a request of {top:,} keys does not fit a database of {self.database.keys:,}",
                "raise database.keys or lower the key counts",
            )
        return self


def is_handler_spec(path: str | os.PathLike) -> bool:
    """Whether the YAML file at `path` is a handler-alone spec (a top-level handler_alone)."""
    located = yamlfile.load(Path(path), [])
    return located is not None and isinstance(located.data, dict) and SECTION in located.data


def load(path: str | os.PathLike) -> HandlerSpec:
    return load_model(path, HandlerSpec)


class HandlerFailed(RainmakerError):
    """rain-worker --kv-bench failed on the host."""


def argv(spec: HandlerSpec, binary: str, db_path: str, item_bytes: int, prefix: str) -> list[str]:
    """rain-worker's command line for one item size: no port, so no huge pages or PCI."""
    h, db = spec.handler_alone, spec.database
    out = [
        binary,
        "-l",
        "0",
        "--no-huge",
        "--no-pci",
        "--no-telemetry",
        f"--file-prefix={prefix}",
        "--log-level=lib.eal:error",
        "--",
        "--handler",
        "rocksdb",
        "--kv-path",
        db_path,
        "--kv-keys",
        str(db.keys),
        "--kv-key-bytes",
        str(db.key_bytes),
        "--kv-item-bytes",
        str(item_bytes),
        "--kv-seed",
        str(db.seed),
        "--kv-bench-requests",
        str(per_round(h)),
        "--kv-dilation",
        f"{h.dilation:g}",
    ]
    for o in h.ops:
        out += ["--kv-bench", f"{o.op}:{','.join(str(k) for k in o.keys)}"]
    return out


def per_round(h: HandlerAlone) -> int:
    return max(10, -(-h.requests // h.rounds))


def budget_s(spec: HandlerSpec, item_bytes: int) -> float:
    """A generous bound on one item size's run: the build, then every request at a
    pessimistic 3 us per key and KB (10x this machine's), held k times."""
    h, db = spec.handler_alone, spec.database
    build = db.keys * (db.key_bytes + item_bytes) / 5e6
    per_key = 3e-6 * max(1.0, item_bytes / 1024)
    work = sum(1.1 * per_round(h) * (5e-6 + k * per_key) for o in h.ops for k in o.keys)
    return 60 + 2 * build + work * h.dilation


def rows_of(out: dict, item_bytes: int) -> list[dict]:
    """The bench's JSON as table rows (microseconds)."""
    rows = []
    for r in out["results"]:
        rows.append(
            {
                "op": r["op"],
                "count": int(r["count"]),
                "item_bytes": item_bytes,
                "requests": int(r["requests"]),
                "mean_us": r["mean_ns"] / 1e3,
                "p50_us": r["p50_ns"] / 1e3,
                "p99_us": r["p99_ns"] / 1e3,
                "min_us": r["min_ns"] / 1e3,
                "max_us": r["max_ns"] / 1e3,
                "cpu_mean_us": r["cpu_mean_ns"] / 1e3,
                "dilation": float(out.get("dilation", 1)),
            }
        )
    return rows


def combine(rounds: list[list[dict]]) -> list[dict]:
    """Rows of several rounds as one per (op, count, item size): the mean over all
    requests (rounds are the same size), min and max over all, and for p50 and p99 the
    median of the rounds' (an estimate: the rounds' samples are not kept)."""
    import statistics

    by: dict[tuple, list[dict]] = {}
    for rows in rounds:
        for r in rows:
            by.setdefault((r["op"], r["count"], r["item_bytes"]), []).append(r)
    out = []
    for (op, count, item), rs in by.items():
        out.append(
            {
                "op": op,
                "count": count,
                "item_bytes": item,
                "requests": sum(r["requests"] for r in rs),
                "rounds": len(rs),
                "mean_us": statistics.fmean(r["mean_us"] for r in rs),
                "p50_us": statistics.median(r["p50_us"] for r in rs),
                "p99_us": statistics.median(r["p99_us"] for r in rs),
                "min_us": min(r["min_us"] for r in rs),
                "max_us": max(r["max_us"] for r in rs),
                "cpu_mean_us": statistics.fmean(r["cpu_mean_us"] for r in rs),
                "round_means_us": [round(r["mean_us"], 3) for r in rs],
                "dilation": rs[0]["dilation"],
            }
        )
    return sorted(out, key=lambda r: (r["op"], r["count"], r["item_bytes"]))


def checked_machines(inv: Inventory, name: str):
    """The preflight's report for what this run needs (every machine answers), or
    PreflightFailed before the run folder is made."""
    from ..preflight import PreflightFailed
    from ..preflight import preflight as check
    from ..preflight.needs import HANDLER_ALONE

    report = check(inv, needs=HANDLER_ALONE)
    if report.blocking:
        raise PreflightFailed(report, what=f"rainmaker run {name}")
    return report


def run(
    spec_path: str | Path,
    inv: Inventory,
    inv_path: Path | None = None,
    *,
    results_root: Path = Path("results"),
    console=None,
    preflight: bool = True,
) -> Path:
    """Measure the handler on one worker host; the run folder it wrote. `preflight`:
    check the machines first (every machine answers; nothing more is needed)."""
    from rich.console import Console

    from .layout import PREFLIGHT, RunDir
    from .machines import Testbed, deploy, host_facts

    spec_path = Path(spec_path)
    spec = load(spec_path)
    h = spec.handler_alone
    names = [w.name for w in inv.workers]
    host = h.host or (names[0] if names else None)
    if host not in names:
        raise UsageError(
            f"{spec_path}: handler_alone.host {host!r} is not a worker of testbed {inv.name}"
            if host
            else f"testbed {inv.name} has no worker host to measure the handler on",
            fix=f"use one of {', '.join(names)}" if names else "add a worker host to the inventory",
        )
    console = console or Console(highlight=False, soft_wrap=True)
    checked = checked_machines(inv, spec.name) if preflight else None
    rd = RunDir.new(results_root, spec.name, time.strftime("%Y%m%d-%H%M%S"))
    logf = open(rd.log, "a")

    def log(msg: str) -> None:
        logf.write(time.strftime("%H:%M:%S ") + msg + "\n")
        logf.flush()
        console.print(f"[dim]·[/] {msg}", markup=True, highlight=False)

    n = sum(len(o.keys) for o in h.ops)
    log(
        f"run {spec.name}: the RocksDB handler alone on {host}: {len(h.item_bytes)} item sizes x {n} key counts, "
        f"{h.requests:,} requests each{f', each held {h.dilation:g} x its run time' if h.dilation > 1 else ''}; "
        f"results in {rd.path}"
    )
    if checked is not None:
        log(f"{checked.summary()} ({checked.write(rd.path / PREFLIGHT).name})")
    tb = Testbed(inv)
    rows: list[dict] = []
    raw: dict[str, list[dict]] = {}
    try:
        deploy(tb, log)
        facts = host_facts(tb).get(host, {})
        r = tb.remotes[host]
        root = PurePosixPath(r.target.deploy_root)
        binary = str(root / "bin" / "rain-worker")
        db = spec.database
        r.run(["mkdir", "-p", "--", str(root / "kv")], timeout=20)
        rounds: list[list[dict]] = []
        steps = [(rnd, item) for rnd in range(1, h.rounds + 1) for item in h.item_bytes]
        for i, (rnd, item) in enumerate(steps, 1):
            path = str(root / "kv" / f"k{db.keys}-kb{db.key_bytes}-ib{item}-s{db.seed}")
            t0 = time.monotonic()
            res = r.run(
                argv(spec, binary, path, item, f"rm-kvbench-{os.getpid()}"), timeout=budget_s(spec, item), check=False
            )
            if not res.ok:
                tail = "\n".join((res.stderr or res.error or "").strip().splitlines()[-5:])
                raise HandlerFailed(
                    f"{host}: rain-worker --kv-bench for {item}-byte items failed ({res.error or res.exit_code}):\n{tail}",
                    fix="check the host with `rainmaker provision --verify`; the whole output is in its stderr above",
                )
            try:
                out = json.loads(res.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise HandlerFailed(
                    f"{host}: rain-worker --kv-bench printed no result for {item}-byte items",
                    fix="run its command by hand on the host to see why",
                ) from None
            raw.setdefault(str(item), []).append(out)
            if rnd > len(rounds):
                rounds.append([])
            rounds[rnd - 1] += rows_of(out, item)
            built = f"built in {out['build_s']:.1f} s, " if out.get("built") else ""
            top = max(rows_of(out, item), key=lambda x: x["mean_us"])
            log(
                f"[{i}/{len(steps)}] round {rnd}, {item}-byte items: {built}{len(out['results'])} key counts in "
                f"{time.monotonic() - t0:.0f} s (the slowest: {top['op']} of {top['count']} keys, "
                f"{top['mean_us']:,.1f} us)"
            )
        rows = combine(rounds)
    finally:
        tb.close()
        logf.close()
    write(rd.path, spec, spec_path, inv, inv_path, host, facts, rows, raw)
    return rd.path


def write(
    run_dir: Path,
    spec: HandlerSpec,
    spec_path: Path,
    inv: Inventory,
    inv_path: Path | None,
    host: str,
    facts: dict,
    rows: list[dict],
    raw: dict,
) -> None:
    import pandas as pd

    from .layout import RunDir

    rd = RunDir(run_dir)
    rd.write_manifest(
        {
            "kind": "handler_alone",
            "spec_path": str(spec_path),
            "spec": spec.model_dump(mode="json"),
            "inventory": inv.name,
            "inventory_path": str(inv_path) if inv_path else None,
            "host": host,
            "host_facts": facts,
            "emulated": inv.shared_system,
            "bench": raw,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    )
    df = pd.DataFrame(rows)
    df["round_means_us"] = df["round_means_us"].map(lambda v: " ".join(f"{x:g}" for x in v))
    df.to_csv(run_dir / "handler.csv", index=False)
    df.to_parquet(run_dir / "handler.parquet", index=False)
    kv_costs.write(
        run_dir / "costs.json",
        [{k: r[k] for k in ("op", "count", "item_bytes", "requests", "mean_us", "p50_us", "p99_us")} for r in rows],
        database=spec.database.model_dump(exclude={"costs", "item_bytes"}) | {"dilation": spec.handler_alone.dilation},
        source={
            "run": str(run_dir),
            "spec": str(spec_path),
            "host": host,
            "testbed": inv.name,
            "cpu": facts.get("model"),
            "emulated": inv.shared_system,
        },
    )
    plot(df, run_dir / "plots", spec)
    (run_dir / "report.md").write_text(report(df, spec, host, facts, inv, run_dir))


def is_run(run_dir: str | os.PathLike) -> bool:
    """Whether run_dir holds a handler-alone run (its manifest says so)."""
    try:
        return json.loads((Path(run_dir) / "manifest.json").read_text()).get("kind") == "handler_alone"
    except (OSError, ValueError, AttributeError):
        return False


def redraw(run_dir: str | os.PathLike) -> list[Path]:
    """The plots and report of a handler-alone run again, from its table and manifest
    (what `rainmaker analyze|plot|report` do for such a run)."""
    import pandas as pd

    run_dir = Path(run_dir)
    m = json.loads((run_dir / "manifest.json").read_text())
    spec = HandlerSpec.model_validate(m["spec"])
    df = pd.read_parquet(run_dir / "handler.parquet")
    files = plot(df, run_dir / "plots", spec)
    facts = m.get("host_facts") or {}
    name, emulated = m.get("inventory", "?"), bool(m.get("emulated"))
    (run_dir / "report.md").write_text(_report(df, spec, m.get("host", "?"), facts, name, emulated, run_dir))
    return [*files, run_dir / "report.md"]


def plot(df, out: Path, spec: HandlerSpec) -> list[Path]:
    """Per op, the mean service time against the item size, a line per key count (Figure 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made = []
    for op in [o.op for o in spec.handler_alone.ops]:
        d = df[df["op"] == op]
        fig, ax = plt.subplots(figsize=(6, 4))
        for count, g in d.groupby("count"):
            g = g.sort_values("item_bytes")
            ax.plot(g["item_bytes"], g["mean_us"], marker="o", label=f"{count:,} keys")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(d["item_bytes"].unique()), [str(b) for b in sorted(d["item_bytes"].unique())])
        ax.set_xlabel("item size (bytes)")
        ax.set_ylabel("mean service time (us)")
        k = spec.handler_alone.dilation
        held = f", each held {k:g}x" if k > 1 else ""
        ax.set_title(f"RocksDB {op.upper()} alone on a worker{held}")
        ax.grid(alpha=0.3)
        ax.legend(title=f"keys per {op.upper()}", fontsize=8)
        fig.tight_layout()
        for ext in ("png", "svg"):
            p = out / f"{op}_service_vs_item_size.{ext}"
            fig.savefig(p, dpi=120)
            made.append(p)
        plt.close(fig)
    return made


def report(df, spec: HandlerSpec, host: str, facts: dict, inv: Inventory, run_dir: Path) -> str:
    return _report(df, spec, host, facts, inv.name, inv.shared_system, run_dir)


def _report(df, spec: HandlerSpec, host: str, facts: dict, testbed: str, emulated: bool, run_dir: Path) -> str:
    h, db = spec.handler_alone, spec.database
    lines = [f"# {spec.name}: the RocksDB handler alone", ""]
    if spec.description:
        lines += [spec.description.strip(), ""]
    lines += [
        "## Setup",
        "",
        f"- host: {host} of testbed {testbed} ({'emulated: it shares its cores' if emulated else 'hardware'}); "
        f"CPU {str(facts.get('model', '?')).strip()}",
        f"- database: {db.keys:,} items, {db.key_bytes}-byte keys, seed {db.seed}; one database per item size, "
        "built once, compacted, and read whole into the block cache before the first request",
        f"- requests: {per_round(h) * h.rounds:,} per key count, in {h.rounds} round(s) over the item sizes, each after "
        f"{max(1, per_round(h) // 10):,} warm-up ones, from uniform random start keys; each timed alone (no network, "
        "no queue)",
        (
            f"- each request held {h.dilation:g} x its run time, asleep, as a worker of a testbed dilated by k = "
            f"{h.dilation:g} holds it: the costs that testbed's workers see (timed by the thread's CPU time)"
            if h.dilation > 1
            else "- back to back: the costs of a worker busy with requests (wall time)"
        ),
        "",
        "## Mean service time (us)",
        "",
    ]
    for op in [o.op for o in h.ops]:
        d = df[df["op"] == op]
        sizes = sorted(d["item_bytes"].unique())
        lines.append(f"{op.upper()}, by key count (rows) and item size in bytes (columns):")
        lines.append("")
        lines.append("| keys | " + " | ".join(str(b) for b in sizes) + " |")
        lines.append("|---:|" + "---:|" * len(sizes))
        for count, g in d.groupby("count"):
            by = dict(zip(g["item_bytes"], g["mean_us"]))
            lines.append(f"| {count:,} | " + " | ".join(f"{by[b]:,.1f}" if b in by else "" for b in sizes) + " |")
        lines.append("")
    lines += [
        "p50, p99, min, max and the CPU time per point are in handler.csv. costs.json holds the means "
        "as a spec's `database.costs` reads them (docs/rocksdb.md).",
        "",
        "## Plots",
        "",
    ]
    lines += [f"![{p.stem}](plots/{p.name})" for p in sorted((run_dir / "plots").glob("*.png"))]
    return "\n".join(lines) + "\n"
