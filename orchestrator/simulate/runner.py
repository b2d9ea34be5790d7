"""Running a spec on the simulated testbed: the same run folder as `rainmaker run`.

    run_dir = simulate("experiments/fig6a.yaml")                 # paper's testbed: 2 x 16 threads
    run_dir = simulate(spec, ideal=True)                         # no network: the queueing model
    run_dir = simulate(spec, like="results/demo/20260101-...")   # what a measured run should have seen
    run_dir = simulate(spec, cluster="tcp://10.0.0.1:8786")      # points on a Dask cluster

Plan the points as for a hardware testbed of `worker_hosts` hosts (dilation 1, the
spec's durations and per_host_threads), record the sweep (sweep.json) and the
provenance (manifest.json: testbed kind `simulated`, the network model, the run's seed
and every point's), simulate the points in parallel, and write each point's folder
(writer.py) as it completes; then analyse, plot and report (report.finish), as `run`.

Where the points run: local processes (`jobs`, default the number of cores) or the
workers of a Dask cluster (`cluster`). Either way a worker simulates one point and
renders its files (writer.render: a few hundred kB, where the raw result holds ~30
bytes per request, 80 MB at paper scale); the orchestrating process writes them and
checks the point's validity. So remote workers need no shared file system, and a
point's folder is written whole or not at all.

On a terminal a progress bar (orchestrator/progress.py) shows the points done and an
ETA paced by the points' own wall times, each weighed by the requests it simulates
(the simulator has no estimate of its own); `simulate(..., bar=)` moves a bar its
caller holds, one over several specs.

Ctrl-C stops the workers, puts the unfinished points back to todo and keeps the done
ones: `rainmaker simulate SPEC --resume RUN_DIR` continues (exit status 130).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import RainmakerError, UsageError
from ..experiment import layout
from ..experiment.layout import RunDir
from ..experiment.plan import TestbedShape, plan
from ..experiment.progress import RunLog
from ..experiment.provenance import git_state
from ..experiment.spec import Dilation, Spec
from ..experiment.spec import load as load_spec
from ..experiment.sweep import DONE, FAILED, Sweep
from ..progress import Bar
from ..systems import get as get_system
from .engine import core_hash
from .model import Plan

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PAPER_WORKER_HOSTS = 2  # Rain (CoNEXT 2026), section 5: 1 client and 2 worker servers


@dataclass
class Options:
    """What defines a simulated run besides its spec (kept in the manifest, so that
    --resume plans the same points)."""

    worker_hosts: int = PAPER_WORKER_HOSTS
    threads: int | None = None  # per host; None: the spec's per_host_threads
    ideal: bool = False
    seed: int = 1
    like: str | None = None
    systems: list[str] | None = None  # only these of the spec's systems; None: all
    warmup_s: float | None = None  # paper time; None: the spec's
    measure_s: float | None = None
    repetitions: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def supported_or_explain(spec: Spec) -> None:
    """Refuse what the simulator cannot model yet, naming each system and what adds it."""
    from .policies import POLICIES

    missing = [s for s in spec.systems if s not in POLICIES]
    modelled = [s for s in spec.systems if s in POLICIES]
    if missing:
        lines = [f"{spec.name}: the simulated testbed cannot model {', '.join(missing)} yet"]
        lines += [f"  - {s}: its declaration (orchestrator/systems) has no simulator policy" for s in missing]
        lines.append(f"  (modelled now: {', '.join(sorted(POLICIES))})")
        raise UsageError(
            "\n".join(lines),
            fix=(
                "simulate the systems that exist: " + " ".join(f"--system {s}" for s in modelled)
                if modelled
                else "none of its systems is modelled yet; simulate a spec of `systems: [rain]`"
            ),
        )


def only_systems(spec: Spec, systems: list[str] | None) -> Spec:
    """The spec with only `systems` of its systems (--system), in the spec's order."""
    if not systems:
        return spec
    unknown = [s for s in systems if s not in spec.systems]
    if unknown:
        raise UsageError(
            f"--system {', '.join(unknown)}: {spec.name} has no such system (it has {', '.join(spec.systems)})",
            fix="name systems the spec lists",
        )
    out = spec.model_copy(update={"systems": [s for s in spec.systems if s in systems]})
    out._path = spec._path
    return out


def simulated_spec(spec: Spec, opts: Options) -> Spec:
    """The spec as the simulated testbed runs it: paper time (dilation 1 on a
    'hardware' shape) and the options' thread count, durations and repetitions."""
    update: dict = {"dilation": Dilation(emulated=spec.dilation.emulated, hardware=1)}
    if opts.threads is not None:
        update["workers"] = spec.workers.model_copy(update={"per_host_threads": opts.threads})
    for key in ("warmup_s", "measure_s", "repetitions"):
        if getattr(opts, key) is not None:
            update[key] = getattr(opts, key)
    out = spec.model_copy(update=update)
    out._path = spec._path
    return out


def plan_points(spec: Spec, opts: Options) -> Plan:
    """The run's points: the spec's own (paper durations and loads), or with `like`
    those of a measured run (like.py)."""
    from .model import Network

    if opts.like:
        from .like import plan_like

        p = plan_like(spec, Path(opts.like), ideal=opts.ideal)
        if opts.systems:
            p.spec = only_systems(p.spec, opts.systems)
            p.points = [x for x in p.points if x.system in opts.systems]
        return p
    s = simulated_spec(spec, opts)
    # A server-side system (Rakaia's family) is one server whose cores are its worker
    # threads, with zero system overheads: the paper's simulation.
    server = bool(s.systems) and all(get_system(x).server_side for x in s.systems)
    hosts = 1 if server else opts.worker_hosts
    points = plan(s, TestbedShape(worker_hosts=hosts, client_hosts=1, emulated=False))
    return Plan(
        spec=s,
        points=points,
        worker_hosts=hosts,
        threads_per_host=s.workers.per_host_threads,
        network=Network.ideal() if opts.ideal or server else Network.paper(),
    )


# -- provenance ----------------------------------------------------------------------------


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("rainmaker", "numpy", "pandas", "hdrhistogram", "dask", "distributed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def manifest(spec_path: Path, p: Plan, opts: Options, seeds: dict[str, int], cluster: str | None) -> dict:
    return {
        "experiment": p.spec.name,
        "created_unix": time.time(),
        "git": git_state(),
        "spec_file": str(spec_path),
        "spec": p.spec.model_dump(mode="json"),
        "testbed": {
            "kind": "simulated",
            "workers": p.worker_hosts,
            "clients": 1,
            "threads_per_host": p.threads_per_host,
            "network": asdict(p.network),
            "ideal": opts.ideal,
            "like": opts.like,
        },
        "simulate": opts.as_dict() | {"cluster": cluster},
        "seed": opts.seed,
        "seeds": seeds,
        "like": p.like,
        "points": [asdict(x) for x in p.points],
        "versions": _versions(),
        "hashes": {"simulator": core_hash()},
    }


# -- one point, where it runs ------------------------------------------------------------


FAILED_KEY = "error"  # simulate_point's answer for a point the model refused: {FAILED_KEY: why}


def simulate_point(sp, point: dict) -> dict[str, bytes]:
    """Simulate one SimPoint and render its folder's files (runs in a worker process or
    on a cluster worker; importable by name for both). A point the model refuses (a
    SimError: the same every time for the same point) comes back as its reason, so the
    sweep marks it failed and goes on."""
    from . import engine, writer

    t0 = time.perf_counter()
    try:
        result = engine.run(sp)
    except RainmakerError as e:
        return {FAILED_KEY: e.render().encode()}
    return writer.render(result, point, wall_s=time.perf_counter() - t0)


def _quiet_sigint() -> None:
    # Ctrl-C reaches the whole foreground process group: the parent handles it and
    # stops the workers; a worker dying of it first would only break the pool. The
    # pool's own terminate() must kill a worker, never become a KeyboardInterrupt
    # inside a point, whatever handlers the worker's process started with.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


Result = tuple[str, dict[str, bytes]]  # a point's id and its rendered files


class LocalPool:
    """Points on this machine's cores, one process each (concurrent.futures)."""

    def __init__(self, jobs: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Workers come from a fork server, never forked from this process: a fork copies
        # locks that this process's other threads (gRPC's, an import under way) hold at
        # that instant, and the worker would wait on them forever.
        ctx = multiprocessing.get_context("forkserver")
        # The server imports the simulator once; each worker is then a fork of it, not a
        # fresh interpreter importing numpy and the model again (seconds per pool).
        ctx.set_forkserver_preload(["orchestrator.simulate.runner", "orchestrator.simulate.writer"])
        self.jobs = self.parallel = jobs
        self.ex = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_quiet_sigint)
        self.where = f"{jobs} local process(es)"

    def run(self, tasks: list[tuple[str, Any, dict]], started: Callable[[str], None]) -> Iterator[Result]:
        """Each point's (id, files) as it completes. Only `jobs` points are handed out at
        a time, each `started` then: sweep.json's running points are those running."""
        from concurrent.futures import FIRST_COMPLETED, wait

        todo, running = list(tasks), {}
        while todo or running:
            while todo and len(running) < self.jobs:
                pid, sp, pt = todo.pop(0)
                started(pid)
                running[self.ex.submit(simulate_point, sp, pt)] = pid
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                yield running.pop(f), f.result()

    def stop(self) -> None:
        procs = list((getattr(self.ex, "_processes", None) or {}).values())
        self.ex.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # only the pool's own workers: they were simulating unfinished points
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)

    def close(self) -> None:
        self.ex.shutdown(wait=True)


def _probe(address: str) -> None:
    """Refuse at once an address where nothing listens (Dask's own connect retries for
    its whole timeout)."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(address if "://" in address else f"tcp://{address}")
    if u.scheme not in ("tcp", "tls") or not u.hostname or not u.port:
        raise UsageError(
            f"--cluster {address}: not a Dask scheduler address",
            fix="give it as `dask scheduler` prints it, e.g. tcp://10.0.0.1:8786",
        )
    try:
        socket.create_connection((u.hostname, u.port), timeout=5).close()
    except OSError as e:
        raise UsageError(
            f"--cluster {address}: no Dask scheduler answers there ({e.strerror or e})",
            fix="start one (`dask scheduler`, then `dask worker ADDRESS` on each machine) or give its address "
            "as `dask scheduler` prints it, e.g. tcp://10.0.0.1:8786",
        ) from None


class DaskPool:
    """Points on an existing Dask distributed cluster (`--cluster ADDRESS`)."""

    def __init__(self, address: str):
        try:
            from dask.distributed import Client
        except ImportError:
            raise UsageError(
                "--cluster needs Dask's distributed scheduler, which is not installed",
                fix="pip install 'rainmaker[cluster]' (or: pip install 'dask[distributed]>=2024')",
            ) from None
        _probe(address)
        try:
            self.client = Client(address, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise UsageError(
                f"--cluster {address}: no Dask scheduler answers there ({e})",
                fix="give the scheduler's address as `dask scheduler` prints it, e.g. tcp://10.0.0.1:8786",
            ) from None
        workers = self.client.scheduler_info().get("workers", {})
        n, self.parallel = len(workers), max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
        self.where = f"Dask cluster {address} ({n} worker(s))"
        self.futures: list = []

    def run(self, tasks: list[tuple[str, Any, dict]], started: Callable[[str], None]) -> Iterator[Result]:
        """As LocalPool.run, with as many points handed out at a time as the cluster's
        workers have threads, twice over (none of them waits for the next point)."""
        from dask.distributed import as_completed

        workers = self.client.scheduler_info().get("workers", {}).values()
        slots = 2 * max(1, sum(int(w.get("nthreads", 1)) for w in workers))
        todo, pids, ac = list(tasks), {}, as_completed()

        def submit() -> None:
            pid, sp, pt = todo.pop(0)
            started(pid)
            f = self.client.submit(simulate_point, sp, pt, key=f"rainmaker-sim-{pid}-{time.time_ns()}", pure=False)
            pids[f.key] = pid
            self.futures.append(f)
            ac.add(f)

        while todo and len(pids) < slots:
            submit()
        for f in ac:
            yield pids[f.key], f.result()
            if todo:
                submit()

    def stop(self) -> None:
        try:
            self.client.cancel(self.futures)
        finally:
            self.client.close()

    def close(self) -> None:
        self.client.close()


# -- the run -------------------------------------------------------------------------------


def _options_of(manifest: dict, run_dir: Path) -> Options:
    raw = manifest.get("simulate")
    if not isinstance(raw, dict):
        raise UsageError(
            f"cannot resume {run_dir}: its manifest.json does not say how it was simulated",
            fix="resume only a run `rainmaker simulate` started (a measured run resumes with `rainmaker run`)",
        )
    known = {k: raw[k] for k in Options.__dataclass_fields__ if k in raw}
    return Options(**known)


def simulate(
    spec_path: str | Path,
    *,
    results_root: Path = Path("results"),
    ideal: bool = False,
    like: str | Path | None = None,
    worker_hosts: int = PAPER_WORKER_HOSTS,
    threads: int | None = None,
    seed: int = 1,
    systems: list[str] | None = None,
    warmup_s: float | None = None,
    measure_s: float | None = None,
    repetitions: int | None = None,
    jobs: int | None = None,
    cluster: str | None = None,
    resume: Path | None = None,
    console=None,
    progress: bool = True,
    analyze_after: bool = True,
    bar: Bar | None = None,
) -> Path:
    """Simulate every point of the spec at `spec_path`; return the run folder. On
    `resume`, the run's own options (manifest.json) plan the same points and only the
    points not done are simulated. `bar`: a started bar its caller holds (its total
    counts these points), else the run shows its own."""
    spec_path = Path(spec_path)
    _not_a_handler_spec(spec_path)
    opts = Options(
        worker_hosts,
        threads,
        ideal,
        seed,
        str(like) if like else None,
        list(systems) if systems else None,
        warmup_s,
        measure_s,
        repetitions,
    )
    if resume is not None:
        rd = RunDir.to_resume(resume)
        opts = _options_of(rd.read_manifest(), rd.path)
    if opts.like and (opts.warmup_s is not None or opts.measure_s is not None or opts.repetitions is not None):
        raise UsageError(
            "--like simulates the measured run's own points: its durations and repetitions",
            fix="drop --warmup, --measure and --repetitions, or simulate the spec without --like",
        )
    # Everything that can refuse the run does so before its folder exists.
    p, seeds, sims = _prepared(load_spec(spec_path), opts)
    remote = DaskPool(cluster) if cluster else None
    if resume is None:
        rd = RunDir.new(results_root, p.spec.name, time.strftime("%Y%m%d-%H%M%S"))
    sweep = Sweep(rd.path, p.points, resume=resume is not None)
    if resume is None or not rd.manifest.exists():
        rd.write_manifest(manifest(spec_path, p, opts, seeds, cluster))
    log = RunLog(rd, console, echo=progress)
    log(
        f"{'resuming' if resume else 'simulating'} {p.spec.name} on a simulated testbed ({_shape(p, opts)}): "
        f"{len(p.points)} points, {sweep.counts()['done']} done; results in {rd.path}"
    )
    tasks = [(x.id, sims[x.id], asdict(x)) for x in sweep.pending()]
    own = bar is None
    if bar is None:
        bar = Bar(log.console, enabled=progress)
        bar.start(len(p.points), len(p.points) - len(tasks), p.spec.name, work=sum(work_of(t[2]) for t in tasks))
    with bar if own else nullcontext():
        try:
            _run_tasks(tasks, remote, jobs, rd, sweep, p.spec, log, bar)
        except KeyboardInterrupt:
            log(f"interrupted: done points are kept; continue with `rainmaker simulate {spec_path} --resume {rd.path}`")
            log.close()
            raise
        log(sweep.summary())
        if analyze_after and sweep.counts()["done"]:
            from ..experiment.report import finish

            bar.update(doing="analysis, plots, report")
            finish(rd.path, p.spec.plots, log)
    log.close()
    return rd.path


def work_of(point: dict) -> float:
    """A point's share of the simulation's work, which paces the ETA: the requests it
    simulates (its load over its warm-up and measurement), at least one."""
    return max(1.0, point["offered_rps"] * (point["warmup_s"] + point["measure_s"]))


def planned_work(spec_path: str | Path, opts: Options) -> tuple[int, float]:
    """The points a new simulate() of `spec_path` plans and their work, for a bar over
    several specs; it refuses what simulate() would, before any of them runs."""
    spec_path = Path(spec_path)
    _not_a_handler_spec(spec_path)
    spec = only_systems(load_spec(spec_path), opts.systems)
    supported_or_explain(spec)
    points = plan_points(spec, opts).points
    return len(points), sum(work_of(asdict(x)) for x in points)


def _shape(p: Plan, opts: Options) -> str:
    """The simulated testbed, as the log names it."""
    if p.spec.systems and all(get_system(x).server_side for x in p.spec.systems):
        return f"one server of {p.threads_per_host} cores, zero overheads: --workers and --ideal do not apply"
    kind = "ideal (no network)" if opts.ideal else ("like " + str(opts.like) if opts.like else "the paper's testbed")
    return f"{kind}: {p.worker_hosts} worker hosts x {p.threads_per_host} threads, 1 client"


def _not_a_handler_spec(spec_path: Path) -> None:
    from ..experiment.handler_alone import is_handler_spec

    if is_handler_spec(spec_path):
        raise UsageError(
            f"{spec_path} measures a worker's handler alone on a testbed: there is nothing to simulate",
            fix=f"run it with `rainmaker run {spec_path}`; its costs.json gives the simulator measured service "
            "times (a spec's database.costs)",
        )


def _prepared(spec: Spec, opts: Options) -> tuple[Plan, dict[str, int], dict]:
    """The run's points, each point's seed, and each point's model (SimPoint): built
    before anything is written, so that whatever the model refuses stops the run first."""
    from .model import build, seed_of

    spec = only_systems(spec, opts.systems)
    supported_or_explain(spec)
    p = plan_points(spec, opts)
    supported_or_explain(p.spec)  # --like: the measured run's own spec
    seeds = {x.id: seed_of(opts.seed, x.id) for x in p.points}
    k = float((p.like or {}).get("dilation") or 1.0)  # --like: the measured testbed's (its timeout)
    sims = {
        x.id: build(p.spec, x, worker_hosts=p.worker_hosts, network=p.network, seed=seeds[x.id], dilation=k)
        for x in p.points
    }
    return p, seeds, sims


def _run_tasks(tasks: list, remote, jobs: int | None, rd: RunDir, sweep: Sweep, spec: Spec, log, bar: Bar) -> None:
    """The pending points on the cluster or this machine's cores. On Ctrl-C or an error
    the pool is stopped and the points it was running go back to todo."""
    pool = remote
    try:
        if tasks:
            pool = remote or LocalPool(max(1, min(jobs or os.cpu_count() or 1, len(tasks))))
            log(f"{len(tasks)} point(s) on {pool.where}")
            _collect(pool, tasks, rd, sweep, spec, log, bar)
    except BaseException as e:
        if pool is not None:
            pool.stop()
            pool = None
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else "the run stopped on an error"
        for pid, _, _ in tasks:
            if sweep.state[pid].status == "running":
                sweep.requeue(pid, why)
        raise
    finally:
        if pool is not None:
            pool.close()


def _collect(pool, tasks, rd: RunDir, sweep: Sweep, spec: Spec, log: Callable[[str], None], bar: Bar) -> None:
    """Write each point as its result arrives, then its verdict and its sweep state."""
    from ..experiment.validity import check_point, invalid_reason
    from . import writer

    def started(pid: str) -> None:
        sweep.start(pid)
        bar.update(doing=pid)

    n, done, work = len(tasks), 0, {pid: work_of(pt) for pid, _, pt in tasks}
    for pid, files in pool.run(tasks, started):
        done += 1
        if FAILED_KEY in files:
            bar.did(work=work[pid], spent_s=None)  # refused at once: nothing to pace by
            why = " | ".join(line.strip() for line in files[FAILED_KEY].decode().splitlines() if line.strip())
            sweep.finish(pid, FAILED, why[:1000])
            log(f"[{done}/{n}] {pid}: failed: {why}")
            continue
        point = writer.write(rd.point(pid), files)
        verdict = check_point(rd.point(pid).path, point | {"status": "done"}, spec.validity)
        timing = json.loads(files[layout.TIMING])
        sweep.finish(pid, DONE, None if verdict.valid else invalid_reason(verdict), valid=verdict.valid)
        p99, wall = timing.get("p99_us"), timing.get("point_wall_s", timing.get("core_wall_s", 0))
        bar.did(work=work[pid], spent_s=wall / pool.parallel)  # its wall, shared with the points beside it
        log(
            f"[{done}/{n}] {pid}: {timing.get('answered', 0):,} tasks, p99 "
            + (f"{p99:,.1f} us" if isinstance(p99, (int, float)) else "-")
            + f", {wall:.1f} s"
            + ("" if verdict.valid else f" (not valid: {', '.join(verdict.failed)})")
        )
