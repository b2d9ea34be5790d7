"""The simulated testbed's verbs of the CLI: simulate, compare."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import interrupted_status, interruptible
from .app import cli, console


@cli.command("simulate")
@click.argument("specs", nargs=-1, required=True, metavar="SPEC...")  # the loader explains a folder, with a fix
@click.option("--results", "results", default="results", show_default=True, help="where new runs go")
@click.option("--ideal", is_flag=True, help="no network delay and no per-packet cost: the pure queueing model")
@click.option(
    "--like",
    "like",
    metavar="RUN_DIR",
    help="simulate exactly the points of a measured run (its hosts, threads, loads and durations in "
    "paper time) with its testbed's delays: what it should have measured",
)
@click.option(
    "--workers",
    "workers",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="worker hosts (the paper's testbed: 2)",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 64),
    default=None,
    help="worker threads per host [default: the spec's workers.per_host_threads]",
)
@click.option(
    "--system",
    "systems",
    multiple=True,
    metavar="NAME",
    help="simulate only this system of the spec's (repeatable), e.g. --system rain",
)
@click.option(
    "--warmup",
    "warmup_s",
    type=click.FloatRange(0, 3600),
    default=None,
    metavar="SECONDS",
    help="warm-up of every point, paper time [default: the spec's warmup_s]",
)
@click.option(
    "--measure",
    "measure_s",
    type=click.FloatRange(0.1, 3600),
    default=None,
    metavar="SECONDS",
    help="measurement window of every point, paper time [default: the spec's measure_s]",
)
@click.option(
    "--repetitions",
    type=click.IntRange(1, 100),
    default=None,
    help="repetitions of every point, each with its own seed [default: the spec's]",
)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=1, show_default=True, help="the run's seed")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1, 1024),
    default=None,
    help="points simulated at once on this machine [default: its cores]",
)
@click.option(
    "--cluster",
    metavar="ADDRESS",
    help="simulate the points on a Dask cluster (its scheduler, e.g. tcp://10.0.0.1:8786); "
    "needs `pip install 'rainmaker[cluster]'`",
)
@click.option(
    "--resume",
    metavar="RUN_DIR",
    help="continue the simulated run in RUN_DIR with its own options: its todo and interrupted points",
)
@click.option("--no-analysis", is_flag=True, help="skip analysis, plots and report at the end")
def simulate_cmd(
    specs: tuple[str, ...],
    results: str,
    ideal: bool,
    like: str | None,
    workers: int,
    threads: int | None,
    systems: tuple[str, ...],
    warmup_s: float | None,
    measure_s: float | None,
    repetitions: int | None,
    seed: int,
    jobs: int | None,
    cluster: str | None,
    resume: str | None,
    no_analysis: bool,
) -> None:
    """Run SPEC on the simulated testbed: the same run folder as `rainmaker run`;
    several SPECs one after the other, with the same options and one progress bar.

    \b
    The simulated testbed is a discrete-event model of the scheduling system in
    paper time (no dilation): open-loop clients with the spec's arrivals and
    classes, the switch's per-slice queue of tasks and tokens with each worker's
    token quota, worker threads that run tasks to completion in FIFO order, the
    network's delays and per-packet costs (the paper's 100 Gbps testbed), and
    Algorithm 1 through the worker agent's own code. By default it is the paper's
    testbed: 1 client, 2 worker hosts, the spec's per_host_threads each.
    Measurements are exact; every point's seed is in manifest.json, and the same
    seed gives the same files.

    \b
    Results go to RESULTS/<experiment>/<timestamp>/ (manifest.json, sweep.json,
    points/<id>/, summary.parquet, plots/, report.md), so `rainmaker analyze`,
    `plot` and `report` read it as a measured run:
      rainmaker simulate experiments/fig6a.yaml --system rain
      rainmaker simulate experiments/fig9.yaml --measure 1 --repetitions 1
      rainmaker simulate experiments/demo.yaml --ideal --threads 16
      rainmaker simulate experiments/demo.yaml --like results/demo/20260101-120000
      rainmaker compare results/demo/20260101-120000 results/demo/<simulated run>
      rainmaker simulate experiments/fig6a.yaml experiments/fig6b.yaml --measure 1
    On a terminal a bar shows the points done and a rough ETA. Ctrl-C keeps the done
    points:
      rainmaker simulate experiments/fig6a.yaml --resume results/fig6a/<timestamp>"""
    from ..errors import UsageError
    from ..simulate.runner import simulate
    from .experiment import check_results_folder

    check_results_folder(results, resume)
    if like and ideal:
        raise UsageError(
            "--like and --ideal ask for two different networks (the measured run's, and none)",
            fix="give one of them",
        )
    if len(specs) > 1 and (like or resume):
        raise UsageError(
            f"--{'like' if like else 'resume'} names the run of one spec, and {len(specs)} specs were given",
            fix="give one SPEC with it",
        )
    kw = dict(
        results_root=Path(results),
        ideal=ideal,
        like=like,
        worker_hosts=workers,
        threads=threads,
        systems=list(systems) or None,
        warmup_s=warmup_s,
        measure_s=measure_s,
        repetitions=repetitions,
        seed=seed,
        jobs=jobs,
        cluster=cluster,
        resume=Path(resume) if resume else None,
        console=console,
        analyze_after=not no_analysis,
    )
    if len(specs) > 1:
        _simulate_each(specs, kw)
        return
    try:
        run_dir = simulate(specs[0], **kw)
    except KeyboardInterrupt:
        sys.exit(interrupted_status())
    console.print(f"results: [bold]{run_dir}[/]")


def _simulate_each(specs: tuple[str, ...], kw: dict) -> None:
    """Each spec in turn under one bar: all their points, an ETA over all of them. Every
    spec is planned first, so that one the simulator refuses stops the batch before any runs."""
    from ..progress import Bar
    from ..simulate.runner import Options, planned_work, simulate

    keys = ("worker_hosts", "threads", "ideal", "seed", "systems", "warmup_s", "measure_s", "repetitions")
    opts = Options(**{k: kw[k] for k in keys})
    planned = [planned_work(s, opts) for s in specs]
    with Bar(console) as bar:
        bar.start(sum(n for n, _ in planned), work=sum(w for _, w in planned))
        for i, spec in enumerate(specs):
            bar.update(label=f"{Path(spec).stem} ({i + 1} of {len(specs)})")
            try:
                run_dir = simulate(spec, **kw, bar=bar)
            except KeyboardInterrupt:
                if specs[i + 1 :]:
                    console.print(f"not begun: {' '.join(specs[i + 1 :])}")
                sys.exit(interrupted_status())
            console.print(f"results: [bold]{run_dir}[/]")


@cli.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option(
    "--out",
    "out",
    metavar="DIR",
    help="where the figures go [default: RESULTS/compare/<experiment>/<timestamp>, RESULTS holding the first run]",
)
@click.option("--force", is_flag=True, help="overlay runs of different experiments all the same")
def compare_cmd(run_dirs: tuple[str, ...], out: str | None, force: bool) -> None:
    """Overlay runs of one spec (simulated, emulated, hardware) in one figure per
    plot type, each curve labelled with its testbed.

    \b
    Axes are in paper time; a filled marker is a valid point, a hollow one not.
      rainmaker compare results/fig6a/20260101-120000 results/fig6a/20260102-090000"""
    from ..simulate.compare import compare

    with interruptible(
        "drawing the comparison",
        "the runs are untouched; the figures drawn so far are whole",
        "rainmaker compare " + " ".join(run_dirs),
    ):
        files = compare([Path(d) for d in run_dirs], out=Path(out) if out else None, force=force)
    for f in files:
        console.print(str(f))
