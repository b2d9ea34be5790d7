"""The experiment verbs of the CLI: plan, run, analyze, plot, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import interrupted_status, interruptible
from .app import INVENTORY_HELP, cli, console


def check_results_folder(results: str, resume: str | None) -> None:
    """--results must be a folder (or not exist yet): new runs go there."""
    from ..errors import UsageError

    root = Path(results)
    there = next((d for d in (root, *root.parents) if d.exists()), None)
    if resume is None and there is not None and not there.is_dir():
        raise UsageError(
            f"--results {results}: {there} is a file, not a folder",
            fix="give the folder new runs go to (it is created if missing)",
        )


@cli.command("plan")
@click.argument("spec")  # the loader explains a folder or a binary, with a fix
@click.option(
    "-i",
    "--inventory",
    "inv_path",
    help=INVENTORY_HELP + "; without one, a nominal emulated testbed of 2 workers and 1 client is assumed",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def plan_cmd(spec: str, inv_path: str | None, as_json: bool) -> None:
    """Print the points SPEC expands into on a testbed (pure: touches nothing).

    Loads given as capacity fractions become request rates from the testbed's
    worker threads and the workload's mean service time; on an emulated testbed
    times are dilated (see the spec's `dilation`). The wall time `run` will take
    is estimated from the testbed's last run (its calibration and orchestration
    times, kept in the state root's history/); with none it is a lower bound."""
    from ..experiment import handler_alone
    from ..experiment.machines import shape_of
    from ..experiment.plan import TestbedShape, plan
    from ..experiment.run import NOT_YET, SUPPORTED
    from ..experiment.spec import load

    if handler_alone.is_handler_spec(spec):
        hs = handler_alone.load(spec)
        h = hs.handler_alone
        click.echo(f"{hs.name}: the RocksDB handler alone on one worker host, no switch or client")
        for item in h.item_bytes:
            for o in h.ops:
                click.echo(f"  {item:>6} B items  {o.op:<4} of {', '.join(f'{k:,}' for k in o.keys)} keys")
        click.echo(
            f"  {h.requests:,} requests per key count; held {h.dilation:g} x each run time"
            if h.dilation > 1
            else f"  {h.requests:,} requests per key count, back to back"
        )
        return
    s = load(spec)
    shape = TestbedShape(2, 1, True)
    where = "a nominal emulated testbed (2 worker hosts, 1 client host)"
    from ..errors import UsageError
    from ..inventory import AmbiguousInventory, resolve_path
    from ..inventory import load as load_inv

    try:
        path = resolve_path(inv_path)
    except AmbiguousInventory:
        raise  # several testbeds up: which one is the user's to say, as for every command
    except UsageError:
        path = None  # none named and none up: plan on the nominal testbed
    if path is not None:
        inv = load_inv(path)
        shape, where = shape_of(inv), f"testbed {inv.name}"
    points = plan(s, shape)
    if as_json:
        from dataclasses import asdict

        click.echo(json.dumps([asdict(p) for p in points], indent=1))
        return
    t = Table(title=f"{s.name}: {len(points)} points on {where}")
    for col in (
        "#",
        "id",
        "system",
        "load (paper kRPS)",
        "capacity",
        "offered (testbed rps)",
        "warm-up + measure",
        "handler",
    ):
        t.add_column(col, justify="right" if col[0] in "#lco" else "left", no_wrap=col == "id")
    for p in points:
        t.add_row(
            str(p.index),
            p.id,
            p.curve,
            f"{p.load_krps:,.1f}",
            f"{p.capacity_fraction:.2f}",
            f"{p.offered_rps:,.1f}",
            f"{p.warmup_s:g} + {p.measure_s:g} s",
            p.handler,
        )
    console.print(t)
    if not points:
        console.print("no points")
    else:
        from ..experiment import estimate
        from ..experiment.history import history_path, read_history

        history = read_history(history_path(inv if path is not None else None))
        est = estimate.estimate(s, shape, history, where=where)
        console.print(f"wall time of `rainmaker run`: {est.text()} (dilation x{est.k:g})")
        for line in est.basis:
            console.print(Text(f"  {line}", style="dim"))
        past = estimate.accuracy(history)[-3:]
        if past:
            console.print(Text("  the last estimates here against the runs' wall time:", style="dim"))
            for line in past:
                console.print(Text(f"    {line}", style="dim"))
    missing = sorted(s.needs() - SUPPORTED)
    for m in missing:
        console.print(Text(f"not runnable yet: {m}: {NOT_YET.get(m, 'not supported')}", style="yellow"))


@cli.command("run")
@click.argument("spec")  # the loader explains a folder or a binary, with a fix
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option(
    "--resume",
    "resume",
    metavar="RUN_DIR",  # run() says what is wrong with a folder that is not a run, with a fix
    help="continue the run in RUN_DIR: measure its todo, interrupted and failed points (done ones are kept)",
)
@click.option("--results", "results", default="results", show_default=True, help="where new runs go")
@click.option(
    "--retries",
    type=click.IntRange(0, 10),
    default=2,
    show_default=True,
    help="attempts after an infrastructure failure before a point is marked failed",
)
@click.option(
    "--retry-wait",
    type=click.FloatRange(0, 3600),
    default=120.0,
    show_default=True,
    metavar="SECONDS",
    help="before a retry, wait (growing pauses) until every host answers SSH and the switch BFRuntime; "
    "at most this long in all per point",
)
@click.option("--no-analysis", is_flag=True, help="skip analysis, plots and report at the end")
@click.option(
    "--no-calibrate",
    is_flag=True,
    help="on an emulated testbed, skip measuring the testbed before the first point (the model "
    "beside each point then uses the testbed kind's default delays)",
)
@click.option(
    "--no-preflight",
    is_flag=True,
    help="skip checking every machine for what SPEC needs before the sweep (rainmaker preflight; "
    "a needed check that fails otherwise stops the run before it starts)",
)
@click.option(
    "--cluster",
    "cluster",
    metavar="tcp://HOST:PORT",
    help="measure the points on a Dask cluster of emulated testbeds: each worker started with "
    "`--resources testbed=1` brings up, provisions and calibrates its own testbed (docs/cluster.md)",
)
@click.option(
    "--testbed",
    "testbed_kind",
    metavar="emulated[:N]",
    help="with --cluster: the testbeds the workers build (emulated, the only kind a cluster holds), and "
    "how many of them to use (default: every worker that offers one)",
)
@click.option(
    "--testbeds",
    "testbeds",
    type=click.IntRange(1, 16),
    metavar="N",
    help="N emulated testbeds on this machine at once (at most 16, its slots), each on its own share of "
    "the cores (a local Dask cluster; -i names an emulated inventory whose shape they take)",
)
def run_cmd(
    spec: str,
    inv_path: str | None,
    resume: str | None,
    results: str,
    retries: int,
    retry_wait: float,
    no_analysis: bool,
    no_calibrate: bool,
    no_preflight: bool,
    cluster: str | None,
    testbed_kind: str | None,
    testbeds: int | None,
) -> None:
    """Run SPEC on the testbed as a resumable sweep, then analyze, plot and report.

    \b
    Results go to RESULTS/<experiment>/<timestamp>/: manifest.json (provenance),
    sweep.json (each point todo/running/done/failed, valid or why not), points/<id>/
    (every file of the point), summary.parquet, plots/, report.md (docs/results.md
    lists them all). On an emulated testbed one light point first measures the
    testbed (round trip, the handler's error: calibration/, manifest.json), and the
    model beside each point takes them. Ctrl-C keeps the done points:
      rainmaker run experiments/demo.yaml --resume results/demo/<timestamp>

    \b
    Points in parallel, one testbed per Dask worker (docs/cluster.md):
      rainmaker run experiments/demo.yaml --testbeds 2     # two testbeds here
      rainmaker run experiments/demo.yaml --cluster tcp://10.0.0.1:8786 --testbed emulated:4"""
    if cluster or testbeds or testbed_kind:
        from .cluster_run import run_on_cluster_cmd

        check_results_folder(results, resume)
        run_on_cluster_cmd(
            spec,
            inv_path,
            resume=resume,
            results=results,
            retries=retries,
            retry_wait=retry_wait,
            analyze=not no_analysis,
            calibrate=not no_calibrate,
            preflight=not no_preflight,
            cluster=cluster,
            testbed_kind=testbed_kind,
            testbeds=testbeds,
        )
        return
    from ..experiment import handler_alone
    from ..experiment.run import run
    from ..inventory import load as load_inv
    from ..inventory import resolve_path

    check_results_folder(results, resume)
    p = resolve_path(inv_path)
    inv = load_inv(p)
    if handler_alone.is_handler_spec(spec):  # a worker's handler measured alone (Figure 2)
        from ..errors import UsageError

        if resume:
            raise UsageError("a handler-alone run is not resumable", fix="run it again without --resume")
        try:
            run_dir = handler_alone.run(
                spec, inv, p, results_root=Path(results), console=console, preflight=not no_preflight
            )
        except KeyboardInterrupt:
            sys.exit(interrupted_status())
        console.print(f"results: [bold]{run_dir}[/] (report.md, costs.json)")
        return
    try:
        run_dir = run(
            spec,
            inv,
            p,
            resume=Path(resume) if resume else None,
            results_root=Path(results),
            retries=retries,
            retry_wait=retry_wait,
            console=console,
            progress=sys.stdout.isatty(),
            analyze_after=not no_analysis,
            calibrate=not no_calibrate,
            preflight=not no_preflight,
        )
    except KeyboardInterrupt:
        sys.exit(interrupted_status())
    console.print(f"results: [bold]{run_dir}[/]")


@cli.command("calibrate")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option("-i", "--inventory", "inv_path", help=INVENTORY_HELP)
@click.option("--results", "results", default="results", show_default=True, help="where the run goes")
def calibrate_cmd(spec: str, inv_path: str | None, results: str) -> None:
    """Measure the testbed itself, as `run` does before a spec's first point, and
    print it: the round trip through the switch, the workers' timing error, the
    client's lag, the idle testbed's CPU and the CPU a request costs, at the spec's
    dilation and mean service time, in testbed and paper time, with the delays the
    model takes from them. With `dilation: {emulated: auto}` it also chooses k, as
    `run` would, and says why. The calibrations go into the testbed's history, where
    `plan` reads them: before a long run, calibrate, then plan.

    \b
    It leaves a run of SPEC whose points are all todo, with the calibration in its
    manifest: measure them with
      rainmaker run SPEC --resume RESULTS/<experiment>/<timestamp>"""
    import json

    from ..experiment.calibrate import describe
    from ..experiment.layout import RunDir
    from ..experiment.run import run
    from ..inventory import load as load_inv
    from ..inventory import resolve_path

    p = resolve_path(inv_path)
    inv = load_inv(p)
    try:
        run_dir = run(
            spec,
            inv,
            p,
            results_root=Path(results),
            retries=0,
            console=console,
            progress=False,
            analyze_after=False,
            calibrate_only=True,
        )
    except KeyboardInterrupt:
        sys.exit(interrupted_status())
    cal = RunDir(run_dir).read_manifest()["calibration"]
    console.print(describe(cal))
    click.echo(json.dumps({k: v for k, v in cal.items() if k != "point"}, indent=1))
    console.print(f"run (points todo): [bold]{run_dir}[/]; measure them with `rainmaker run {spec} --resume {run_dir}`")


# RUN_DIR is checked by the analysis (RunDir.check), which names what is wrong with a fix.
@cli.command("analyze")
@click.argument("run_dir")
@click.option("--recheck", is_flag=True, help="run the validity checks again and rewrite each validity.json")
@click.option("--model", is_flag=True, help="simulate the model beside each measured point that has none")
def analyze_cmd(run_dir: str, recheck: bool, model: bool) -> None:
    """Merge RUN_DIR's histograms into summary.parquet (one row per point and class)."""
    from ..experiment import handler_alone
    from ..experiment.analyze import analyze
    from ..experiment.layout import RunDir

    if handler_alone.is_run(run_dir):  # the handler alone (fig2): its table, plots and report
        for f in handler_alone.redraw(run_dir):
            console.print(str(f))
        return

    with interruptible(
        f"the analysis of {run_dir}",
        "the points' measurements are untouched; summary.parquet is the previous one, if any",
        f"rainmaker analyze {run_dir}" + (" --recheck" if recheck else "") + (" --model" if model else ""),
    ):
        df = analyze(Path(run_dir), recheck=recheck, model=model)
    console.print(f"{RunDir(run_dir).summary}: {len(df)} rows")


@cli.command("plot")
@click.argument("run_dir")
@click.option("--kind", "kinds", multiple=True, help="which figures (default: the spec's plots)")
def plot_cmd(run_dir: str, kinds: tuple[str, ...]) -> None:
    """Draw RUN_DIR's figures (PNG and SVG in RUN_DIR/plots)."""
    from ..experiment import handler_alone
    from ..experiment.plots import plot

    if handler_alone.is_run(run_dir):  # the handler alone (fig2): its table, plots and report
        for f in handler_alone.redraw(run_dir):
            console.print(str(f))
        return

    skipped: dict = {}
    with interruptible(
        f"drawing the figures of {run_dir}",
        "the points' measurements and the tables are untouched; the figures drawn so far are whole",
        f"rainmaker plot {run_dir}" + "".join(f" --kind {k}" for k in kinds),
    ):
        files = plot(Path(run_dir), list(kinds) or None, skipped=skipped)
    for f in files:
        console.print(str(f))
    for kind, why in skipped.items():
        console.print(Text(f"skipped {kind}: {why}", style="yellow"))


@cli.command("report")
@click.argument("run_dir")
def report_cmd(run_dir: str) -> None:
    """Write RUN_DIR/report.md (and .html): figures, table, validity, provenance."""
    from ..experiment import handler_alone
    from ..experiment.report import report

    if handler_alone.is_run(run_dir):  # the handler alone (fig2): its table, plots and report
        for f in handler_alone.redraw(run_dir):
            console.print(str(f))
        return

    with interruptible(
        f"the report of {run_dir}",
        "the points' measurements are untouched; the tables, figures and report written so far are whole",
        f"rainmaker report {run_dir}",
    ):
        md = report(Path(run_dir))
    console.print(str(md))


_VERDICT_STYLE = {"holds": "green", "does not hold": "red", "inconclusive": "yellow", "not checkable": "dim"}


@cli.command("claims")
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option(
    "--spec",
    "spec_file",
    metavar="SPEC",
    help="judge with this spec's claims [default: the run's own spec, or its spec file if the run predates its claims]",
)
@click.option("--json", "as_json", is_flag=True, help="print the verdicts as JSON")
@click.option(
    "--page",
    "page_file",
    metavar="FILE",
    help="also write one Markdown page of every run's claims and verdicts (make figures-sim ends with it)",
)
def claims_cmd(run_dirs: tuple[str, ...], spec_file: str | None, as_json: bool, page_file: str | None) -> None:
    """Whether the paper's claims hold on RUN_DIR: each claim of the spec (claims:) judged
    with the run's confidence intervals: holds, does not hold, or inconclusive (the
    intervals overlap, or a point is invalid or missing), with the evidence in numbers.
    The numbers the paper printed (references:) are tabled beside the run's.

    Several runs of one spec (simulated, emulated, hardware) are judged side by side."""
    from ..experiment.claims import run_claims, tally
    from ..experiment.layout import RunDir
    from ..experiment.points import experiment_name, testbed_kind

    judged = []
    for d in run_dirs:
        verdicts, besides, origin = run_claims(Path(d), spec_file)
        kind = testbed_kind(RunDir(d).read_manifest())
        judged.append((d, kind, verdicts, besides, origin))
    if page_file is not None:
        from ..experiment.layout import atomic_replace
        from ..experiment.report import claims_page

        rows = [(experiment_name(Path(d), RunDir(d).read_manifest()), d, k, v, b) for d, k, v, b, _ in judged]
        out = Path(page_file)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_replace(out, claims_page(rows))
        console.print(f"claims page: {out}")
    if as_json:
        out = [
            {
                "run": d,
                "testbed": kind,
                "claims_from": origin,
                "claims": [v.as_dict() for v in verdicts],
                "references": [
                    {"id": b.ref.id, "paper": b.ref.value, "approx": b.ref.approx, "ours": b.ours, "note": b.note}
                    for b in besides
                ],
            }
            for d, kind, verdicts, besides, origin in judged
        ]
        click.echo(json.dumps(out, indent=2))
        return
    names = {experiment_name(Path(d), RunDir(d).read_manifest()) for d, *_ in judged}
    if len(judged) > 1 and len(names) == 1:  # runs of one spec: each claim across them
        t = Table(title="claims, side by side")
        t.add_column("claim")
        for d, kind, *_ in judged:
            t.add_column(f"{kind}\n{Path(d).name}")
        ids = [v.id for v in judged[0][2]]
        for i in ids:
            row = [i]
            for _, _, verdicts, _, _ in judged:
                v = next((x.verdict for x in verdicts if x.id == i), "-")
                row.append(Text(v, style=_VERDICT_STYLE.get(v, "")))
            t.add_row(*row)
        console.print(t)
    for d, kind, verdicts, besides, origin in judged:
        if not verdicts and not besides:
            console.print(Text(f"{d}: its spec states no claims ({origin}); give --spec SPEC", style="yellow"))
            continue
        t = Table(title=f"{d} ({kind}); claims from {origin}", show_lines=True)
        for col in ("claim", "verdict", "evidence"):
            t.add_column(col, overflow="fold")
        for v in verdicts:
            t.add_row(f"{v.id}\n[dim]{v.text}[/]", Text(v.verdict, style=_VERDICT_STYLE[v.verdict]), v.evidence)
        console.print(t)
        n = tally(verdicts)
        console.print(", ".join(f"{k}: {c}" for k, c in n.items() if c))
        if besides:
            r = Table(title="the paper's numbers beside the run's")
            for col in ("reference", "paper", "ours", "ours / paper", "note"):
                r.add_column(col, overflow="fold")
            for b in besides:
                paper = ("~" if b.ref.approx else "") + f"{b.ref.value:,.4g}"
                ours = "-" if b.ours is None else f"{b.ours:,.4g}"
                ratio = "-" if b.ratio is None else f"{b.ratio:.2f}"
                r.add_row(f"{b.ref.id}\n[dim]{b.ref.source}[/]", paper, ours, ratio, b.note)
            console.print(r)
