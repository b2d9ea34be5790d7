"""A run's report: report.md and report.html in the run directory, from
summary.parquet, the points' validity.json, the figures and manifest.json.

Sections: the experiment and its spec, the results table (repetitions combined,
paper time), per-class tables, throughput under the SLO, each measured point against
the model beside it (model_beside.py), the validity verdict of every point (what
failed and why), the figures, and the provenance (git revision
and dirty state, versions, hashes) recorded when the run started.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import RainmakerError, interruptible
from ..systems import get as get_system
from . import points
from .analyze import aggregate, phase_rows, read_summary, throughput_under_slo
from .layout import PLOTS, RunDir, atomic_replace
from .points import ALL, experiment_name, load_point, spec_of, testbed_kind


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        if math.isinf(x):
            return "inf"
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.3g}"
        return f"{x:,.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def _cell(x: Any) -> str:
    return _fmt(x).replace("|", "\\|").replace("\n", " ")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def _spec_section(spec, manifest: dict, df) -> list[str]:
    lines = ["## Setup", ""]
    kind = testbed_kind(manifest)
    ks = sorted(df["dilation"].unique()) if not df.empty else []
    lines.append(
        f"- testbed: **{kind}**; time dilation k = {', '.join(f'{k:g}' for k in ks) or '?'} "
        f"(tables and figures are in paper time: loads x k, latencies / k)"
    )
    cal = manifest.get("calibration") if isinstance(manifest.get("calibration"), dict) else {}
    if isinstance(cal.get("schedule_lag_warning"), str):
        lines.append(f"- the client's schedule: {cal['schedule_lag_warning']}")
    if spec is None:
        lines += ["- (no spec recorded in manifest.json)", ""]
        return lines
    if spec.figure:
        lines.append(f"- paper figure: {spec.figure}")
    lines.append(f"- systems: {', '.join(spec.systems)}")
    lines += _systems_lines(spec.systems)
    if spec.variants:
        lines.append(
            "- variants: "
            + "; ".join(
                f"{v.name} ({v.label or v.name}): rain {v.rain or {}}, baseline {v.baseline or {}}"
                for v in spec.variants
            )
        )
    wl = spec.workload
    cls = "; ".join(
        f"{c.name} (weight {c.weight:g}, service {c.service.model_dump(exclude_none=True)}, "
        f"{c.payload.bytes} B, {c.payload.large_fraction:.0%} large)"
        for c in wl.classes
    )
    lines.append(f"- workload: {wl.arrival} arrivals; classes: {cls}; mean service {wl.mean_service_us:g} us")
    if wl.phases:
        lines.append(
            "- phases: "
            + "; ".join(
                f"from {p.at_s:g} s: {p.capacity_fraction:g} of capacity"
                + (f" ({', '.join(p.classes)})" if p.classes else "")
                for p in wl.phases
            )
        )
    load = spec.load.krps or spec.load.capacity_fraction
    unit = "kRPS" if spec.load.krps else "x capacity"
    lines.append(f"- loads ({unit}): {', '.join(f'{x:g}' for x in load or [])}; repetitions: {spec.repetitions}")
    lines.append(
        f"- durations: warm-up {spec.warmup_s:g} s, measurement {spec.measure_s:g} s"
        + (f" (emulated: {spec.emulated.warmup_s:g} s + {spec.emulated.measure_s:g} s)" if spec.emulated else "")
    )
    handlers = sorted(df["handler"].dropna().unique()) if "handler" in df else []
    lines.append(
        f"- workers: {spec.workers.per_host_threads} threads per host; handler {', '.join(handlers) or spec.handler}"
    )
    if "rocksdb" in handlers:
        db = spec.database
        lines.append(
            f"- RocksDB: {db.keys:,} items of {db.key_bytes} + {db.item_bytes} bytes (seed {db.seed}) on each "
            "worker server; a request's service time is what its operation took on the worker"
            + (
                ", and on a dilated testbed the worker holds it until k times that has passed (arrivals and "
                "service keep their ratio; the operation itself runs at full speed)"
                if any(k > 1 for k in ks)
                else ""
            )
        )
    if "rain" in spec.systems:
        lines.append(f"- rain: {spec.rain.model_dump(exclude_none=True)}")
    if spec.slo:
        lines.append(f"- SLO: {spec.slo.model_dump(exclude_none=True)}")
    lines.append(f"- validity thresholds: {spec.validity.model_dump()}")
    lines.append("")
    return lines


def _results_section(df, spec) -> list[str]:
    lines = ["## Results", ""]
    if df.empty:
        return lines + ["No analysed points.", ""]
    agg = aggregate(df)
    allc = agg[agg["class"] == ALL]
    hdr = [
        "curve",
        "load (kRPS)",
        "achieved (kRPS)",
        "p50 (us)",
        "p99 (us) mean",
        "p99 min",
        "p99 max",
        "p99.9 (us)",
        "p99 slowdown",
        "valid reps",
    ]

    def rows(a):
        return [
            [
                r["curve"],
                r["load_krps"],
                r["achieved_krps"],
                r["p50_us_paper_mean"],
                r["p99_us_paper_mean"],
                r["p99_us_paper_min"],
                r["p99_us_paper_max"],
                r["p999_us_paper_mean"],
                r["p99_slowdown_mean"],
                f"{int(r['valid_reps'])}/{int(r['reps'])}",
            ]
            for _, r in a.sort_values(["curve", "load_krps"]).iterrows()
        ]

    lines += ["All requests (paper time; mean over repetitions):", "", table(hdr, rows(allc)), ""]
    for cls in [c for c in agg["class"].unique() if c != ALL]:
        lines += [f"### Class `{cls}`", "", table(hdr, rows(agg[agg["class"] == cls])), ""]
    return lines


def _slo_section(df, spec) -> list[str]:
    if spec is None or spec.slo is None or df.empty:
        return []
    tput = throughput_under_slo(df, spec.slo)
    lines = [
        "## Throughput under SLO",
        "",
        f"The highest load (mean achieved, paper kRPS) before the first load that breaks "
        f"{tput['slo'].iloc[0] if len(tput) else 'the SLO'} or has invalid repetitions.",
        "",
    ]
    lines.append(
        table(
            ["curve", "throughput (kRPS)", "at load (kRPS)", "p99 (us)", "p99 slowdown", "first violation (kRPS)"],
            [
                [
                    r["curve"],
                    r["throughput_krps"],
                    r["load_krps"],
                    r["p99_us_paper"],
                    r["p99_slowdown"],
                    r["first_violation_krps"],
                ]
                for _, r in tput.iterrows()
            ],
        )
    )
    return lines + [""]


def _claims_section(run_dir: Path, df) -> list[str]:
    """The paper's claims judged on this run, and its printed numbers beside ours."""
    from .claims import run_claims, tally

    if df.empty:
        return []
    try:
        verdicts, besides, origin = run_claims(run_dir, df=df)
    except RainmakerError:
        return []
    if not (verdicts or besides):
        return []
    n = tally(verdicts)
    lines = [
        "## Claims",
        "",
        f"The paper's claims about this figure ({origin}), judged with the run's confidence intervals: "
        + ", ".join(f"{c} {k}" for k, c in n.items() if c)
        + ". `rainmaker claims RUN_DIR` prints the same.",
        "",
    ]
    if verdicts:
        lines += [
            table(
                ["claim", "the paper says", "source", "verdict", "evidence"],
                [[v.id, v.text, v.source, f"**{v.verdict}**", v.evidence] for v in verdicts],
            ),
            "",
        ]
    if besides:
        lines += [
            "The numbers the paper printed, beside this run's (`~`: the paper says about, or reads off a plot):",
            "",
            table(
                ["reference", "source", "paper", "ours", "ours / paper", "note"],
                [
                    [
                        b.ref.id,
                        b.ref.source,
                        ("~" if b.ref.approx else "") + f"{b.ref.value:,.4g}",
                        b.ours,
                        b.ratio,
                        b.note,
                    ]
                    for b in besides
                ],
            ),
            "",
        ]
    return lines


def _model_section(run_dir: Path, df, spec, manifest: dict) -> list[str]:
    """Each measured point's p99 beside the model's (model_beside.py): the ratio, whether
    it is within the spec's tolerance, and the network the model used."""
    from . import model_beside

    if df.empty or not points.is_measured(manifest):
        return []
    tol = spec.validity.model_tolerance if spec is not None else None
    lines = ["## Measured against the model", ""]
    rd = RunDir(run_dir)
    infos = {d.id: points.read_model_info(d) for d in rd.points()}
    if not any(infos.values()):
        return lines + [
            "No model beside the points (`points/<id>/model/`): `rainmaker analyze --model RUN_DIR` simulates them.",
            "",
        ]
    lines += [
        "Each point simulated in paper time with the network below (`points/<id>/model/`), p99 of all "
        "requests, paper time; ratio = measured / model"
        + (f", within tolerance: |ratio - 1| <= {tol:g} (`validity.model_tolerance`)." if tol is not None else "."),
        "",
    ]
    allc = df[df["class"] == ALL].sort_values(["curve", "load_krps", "repetition"])
    rows = []
    for _, r in allc.iterrows():
        ratio = float(r.get("model_ratio", math.nan))
        ok = None if tol is None or math.isnan(ratio) else bool(abs(ratio - 1.0) <= tol)
        info = infos.get(r["point_id"]) or {}
        rows.append(
            [
                r["point_id"],
                r["load_krps"],
                r["p99_us_paper"],
                float(r.get("model_p99_us_paper", math.nan)),
                ratio,
                ok if ok is not None else ("model failed" if info.get("error") else "-"),
            ]
        )
    lines += [
        table(["point", "load (kRPS)", "measured p99 (us)", "model p99 (us)", "ratio", "within tolerance"], rows),
        "",
    ]
    nets: dict[str, list[str]] = {}
    for pid, info in infos.items():
        if info and not info.get("error"):
            nets.setdefault(model_beside.network_text(info), []).append(pid)
    for text, pids in nets.items():
        which = "every point" if len(pids) == len(infos) else ", ".join(pids)
        lines.append(f"- the model's network ({which}): {text}")
    replayed = [pid for pid, i in infos.items() if i and not i.get("error") and i.get("replayed")]
    if replayed:
        which = "every point" if len(replayed) == len(infos) else ", ".join(replayed)
        lines.append(
            f"- the model's requests ({which}): the ones the clients drew (their trace.csv), over the measured "
            "window: measured and model meet the same arrivals and service times"
        )
    for pid, i in infos.items():
        if i and not i.get("error") and not i.get("replayed") and i.get("requests_from"):
            lines.append(f"- {pid}: the model's requests are {i['requests_from']}")
    cals = {model_beside.calibration_text(i) for i in infos.values() if i and not i.get("error")} - {""}
    for text in sorted(cals):
        lines.append(f"- the testbed's calibration (manifest.json): {text}")
    for pid, info in infos.items():
        if info and info.get("error"):
            lines.append(f"- {pid}: the model could not be computed: {info['error']}")
    return lines + [""]


def _phases_section(run_dir: Path) -> list[str]:
    """A time-varying workload: each point's p99 per phase, and where the agents adapt,
    each slice's workers and mean token quota at the phase's end."""
    blocks = []
    for pd in RunDir(run_dir).points():
        point = pd.read_point() or {}
        if not point.get("phase_at_s"):
            continue
        rows = []
        for r in phase_rows(load_point(pd), pd):
            slices = "; ".join(f"slice {s}: {n} x {q:.2g}" for s, (n, q) in r["slices"].items()) or "-"
            rows.append(
                [
                    r["phase"],
                    f"{r['from_ms_paper']:,.0f}-{r['to_ms_paper']:,.0f}",
                    r["samples"],
                    r["p50_us_paper"],
                    r["p99_us_paper"],
                    r["p99_slowdown"],
                    slices,
                ]
            )
        if rows:
            hdr = ["phase", "ms (paper)", "requests", "p50 (us)", "p99 (us)", "p99 slowdown", "workers x mean quota"]
            blocks += [f"### `{pd.id}`", "", table(hdr, rows), ""]
    if not blocks:
        return []
    return [
        "## Per phase",
        "",
        "The workload changes during the window: each phase's requests on their own "
        "(paper time; phases as the spec's `workload.phases`).",
        "",
        *blocks,
    ]


def _validity_section(run_dir: Path) -> list[str]:
    verdicts = [(d.id, d.read_verdict()) for d in RunDir(run_dir).points()]
    n_valid = sum(1 for _, v in verdicts if v and v.get("valid"))
    lines = ["## Validity", "", f"{n_valid} of {len(verdicts)} points passed every check that ran.", ""]
    rows = []
    for name, v in verdicts:
        if v is None:
            rows.append([name, "unknown", "-", "no validity.json"])
            continue
        failed = [c for c in v.get("checks", []) if c.get("passed") is False]
        rows.append(
            [
                name,
                bool(v.get("valid")),
                ", ".join(c["name"] for c in failed) or "-",
                "; ".join(f"{c['name']}: {c.get('message', '')}" for c in failed) or "-",
            ]
        )
    lines += [table(["point", "valid", "failed checks", "why"], rows), ""]
    lines += _stalled_lines(RunDir(run_dir), [name for name, _ in verdicts])
    not_run: dict[str, set[str]] = {}
    for _, v in verdicts:
        for c in (v or {}).get("checks", []):
            if c.get("passed") is None:
                not_run.setdefault(c["name"], set()).add(str(c.get("message", "")).removeprefix("not run: "))
    for name, msgs in sorted(not_run.items()):
        lines.append(f"- check `{name}` not run on some points: {'; '.join(sorted(msgs))}")
    return lines + [""]


def _stalled_lines(rd: RunDir, ids: list[str]) -> list[str]:
    """The measurements discarded because the host stalled the client (sweeper.py measured
    those points again): how many, and what each stall was, so none is hidden."""
    out = []
    for pid in ids:
        for d in rd.stalled(pid):
            v = d.read_verdict() or {}
            failed = [c for c in v.get("checks", []) if c.get("passed") is False]
            steal = (d.read_cpu() or {}).get("steal_share")
            took = f"; steal {100 * steal:.3g}% of the cores" if isinstance(steal, (int, float)) else ""
            what = "; ".join(f"{c['name']} {_fmt(c.get('value'), 3)}" for c in failed) or "no verdict"
            seg, _, n = d.id.removeprefix("s").partition("-")
            which = f"segment {seg}, attempt {n}," if d.id.startswith("s") else f"attempt {d.id}"
            out.append(
                f"- `{pid}` {which} discarded and measured again, the host stalled its client ({what}{took}): `stalled/{pid}/{d.id}/`"
            )
    if out:
        out = (
            [
                f"{len(out)} measurement(s) discarded because the client could not keep its schedule "
                "(the spec's `validity.remeasure_stalled`); the table above is of the measurements kept:",
                "",
            ]
            + out
            + [""]
        )
    return out


def _figures_section(run_dir: Path) -> list[str]:
    from .spec import PLOTS as KINDS

    rank = {k: i for i, k in enumerate(KINDS)}
    pngs = sorted(RunDir(run_dir).plots.glob("*.png"), key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    if not pngs:
        return []
    lines = ["## Figures", ""]
    for p in pngs:
        lines += [
            f"### {p.stem.replace('_', ' ')}",
            "",
            f"![{p.stem}]({PLOTS}/{p.name}) ([SVG]({PLOTS}/{p.stem}.svg))",
            "",
        ]
    return lines


def _provenance_section(manifest: dict) -> list[str]:
    import datetime

    lines = ["## Provenance", ""]
    if not manifest:
        return lines + ["No manifest.json.", ""]
    git = manifest.get("git") if isinstance(manifest.get("git"), dict) else {}
    rev = git.get("revision")
    dirty = git.get("dirty")
    lines.append(
        f"- git revision: `{rev or 'unknown'}`"
        + ("" if dirty is None else f" ({'DIRTY: uncommitted changes' if dirty else 'clean'})")
    )
    if dirty and git.get("dirty_files"):
        files = [str(f).strip() for f in git["dirty_files"]]
        lines.append(
            f"- uncommitted: {', '.join(f'`{f}`' for f in files[:20])}"
            + (f" and {len(files) - 20} more" if len(files) > 20 else "")
        )
    if isinstance(manifest.get("created_unix"), (int, float)):
        try:
            when = datetime.datetime.fromtimestamp(manifest["created_unix"], datetime.UTC)
            lines.append(f"- started: {when:%Y-%m-%d %H:%M:%S} UTC")
        except (OverflowError, ValueError, OSError):  # a damaged manifest: say what it holds
            lines.append(f"- started: {manifest['created_unix']!r} (not a time)")
    for key in ("spec_file", "inventory_file"):
        if manifest.get(key):
            lines.append(f"- {key.replace('_', ' ')}: `{manifest[key]}`")
    tb = manifest.get("testbed")
    if isinstance(tb, dict):
        lines.append(f"- testbed: {', '.join(f'{k}={v}' for k, v in tb.items() if not isinstance(v, (dict, list)))}")
    for key, col in (("versions", "version"), ("hashes", "hash")):
        val = manifest.get(key)
        if isinstance(val, dict) and val:
            rows = [[k, f"`{v}`"] for k, v in val.items()]
            lines += ["", f"{key.capitalize()}:", "", table(["component", col], rows)]
    facts = manifest.get("host_facts")
    if isinstance(facts, dict) and facts:
        cols = sorted({k for f in facts.values() if isinstance(f, dict) for k in f})
        rows = [[h] + [(f or {}).get(c, "-") if isinstance(f, dict) else "-" for c in cols] for h, f in facts.items()]
        lines += ["", "Hosts:", "", table(["host"] + cols, rows)]
    shown = {
        "git",
        "versions",
        "hashes",
        "spec",
        "testbed",
        "experiment",
        "created_unix",
        "spec_file",
        "inventory_file",
        "host_facts",
        "points",
        "inventory",
    }  # points: the tables above; inventory: in manifest.json
    rest = {k: v for k, v in manifest.items() if k not in shown}
    if rest:
        lines += ["", "Other manifest entries:", ""]
        for k, v in rest.items():
            text = json.dumps(v, sort_keys=True, default=str)
            lines.append(f"- {k}: `{text[:300] + ('...' if len(text) > 300 else '')}`")
    return lines + [""]


def render_markdown(run_dir: str | Path) -> str:
    run_dir = Path(run_dir)
    manifest = RunDir(run_dir).read_manifest()
    spec = spec_of(manifest)
    df = read_summary(run_dir)
    name = experiment_name(run_dir, manifest)
    lines = [f"# {name}: run {run_dir.name}", ""]
    if spec is not None and spec.description:
        lines += [spec.description.strip(), ""]
    lines += _spec_section(spec, manifest, df)
    lines += _results_section(df, spec)
    lines += _phases_section(run_dir)
    lines += _slo_section(df, spec)
    lines += _claims_section(run_dir, df)
    lines += _model_section(run_dir, df, spec, manifest)
    lines += _validity_section(run_dir)
    lines += _figures_section(run_dir)
    lines += _provenance_section(manifest)
    return "\n".join(lines).rstrip() + "\n"


def _html(md: str, title: str) -> str:
    try:
        from markdown_it import MarkdownIt

        body = MarkdownIt("commonmark").enable("table").render(md)
    except ImportError:  # markdown-it-py comes with rich; without it, the text as is
        body = f"<pre>{html.escape(md)}</pre>"
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.4}"
        "table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}code{font-size:0.9em}"
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body>\n{body}</body></html>\n"
    )


def report(run_dir: str | Path, *, make_plots: bool = True) -> Path:
    """Write run_dir/report.md and report.html (figures embedded by relative path);
    analyses the run and draws its figures first if that was not done. Returns the
    Markdown file."""
    rd = RunDir(run_dir).check()
    read_summary(rd.path)  # analyses the run if that was not done; refuses a damaged summary
    if make_plots and not any(rd.plots.glob("*.png")):
        from .plots import plot

        plot(rd.path)
    md = render_markdown(rd.path)
    atomic_replace(rd.report_md, md)
    atomic_replace(rd.report_html, _html(md, f"{experiment_name(rd.path, rd.read_manifest())} {rd.name}"))
    return rd.report_md


def finish(run_dir: str | Path, kinds: Sequence[str], log) -> Path:
    """The end of a run: analyse it, draw the spec's figures, write the report, each
    said through `log`. Ctrl-C here keeps every measured point: an Interrupted error
    says so and how to redo the rest."""
    from .analyze import analyze
    from .plots import plot

    rd = RunDir(run_dir)
    with interruptible(
        f"the analysis at the end of the run {rd.path}",
        "every measured point is kept",
        f"rainmaker analyze {rd.path} && rainmaker plot {rd.path} && rainmaker report {rd.path}",
    ):
        try:
            analyze(rd.path)
            skipped: dict = {}
            for f in plot(rd.path, list(kinds), skipped=skipped):
                if f.suffix == ".png":
                    log(f"figure: {f}")
            for kind, why in skipped.items():
                log(f"figure {kind} not drawn: {why}")
            rep = report(rd.path)
        except KeyboardInterrupt:
            log("interrupted during the analysis: every measured point is kept")
            raise
    log(f"report: {rep} (and {rep.with_suffix('.html').name})")
    return rep


def _systems_lines(names: Sequence[str]) -> list[str]:
    """Each system as the paper names it, and the switch counters read from its points
    (their declaration, orchestrator/systems/)."""
    lines = []
    for name in names:
        system = get_system(name)
        lines.append(f"  - `{name}`: {system.title}")
        lines += [f"    - counter `{c}`: {meaning}" for c, meaning in system.counters.items()]
    return lines


def claims_page(judged: list) -> str:
    """One Markdown page over several runs (experiment, run folder, testbed kind, its
    verdicts, its references): every figure, every claim, its verdict."""
    from .claims import tally

    total = tally([v for *_, vs, _ in judged for v in vs])
    lines = [
        "# The papers' claims, judged",
        "",
        "Every claim the specs state, judged on each run with its confidence intervals "
        "(`rainmaker claims RUN_DIR`): " + ", ".join(f"{c} {k}" for k, c in total.items() if c) + ".",
        "",
    ]
    for name, run, kind, verdicts, besides in judged:
        lines += [f"## {name} ({kind})", "", f"`{run}`", ""]
        if not verdicts and not besides:
            lines += ["No claims stated.", ""]
            continue
        lines += [
            table(
                ["claim", "the paper says", "verdict", "evidence"],
                [[v.id, v.text, f"**{v.verdict}**", v.evidence] for v in verdicts],
            ),
            "",
        ]
        if besides:
            rows = [
                [b.ref.id, ("~" if b.ref.approx else "") + f"{b.ref.value:,.4g}", b.ours, b.ratio, b.note]
                for b in besides
            ]
            lines += [table(["reference", "paper", "ours", "ours / paper", "note"], rows), ""]
    return "\n".join(lines).rstrip() + "\n"
