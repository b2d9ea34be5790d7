"""Running a spec on a testbed: the entry point of `rainmaker run`.

    run_dir = run(spec_path, inventory)                   # a new run
    run_dir = run(spec_path, inventory, resume=run_dir)   # continue an interrupted one

It plans the points (or reads them back on resume), opens the run's folder and log,
holds the testbed (bench.py), chooses the dilation and sizes the windows before the
first point (dilation.py), runs the sweep (sweeper.py, each point through point.py's
pipeline) and, at the end, analyses the results and writes the report (report.py).
Ctrl-C leaves a run that `--resume` continues (failed points included)."""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import UsageError
from ..inventory import Inventory
from ..systems import get as get_system
from .bench import Bench
from .dilation import choose_dilation, probe_service, size_windows, start_at, with_service, with_windows
from .history import Settled, append_history, history_path, read_history, settled_k
from .layout import PREFLIGHT, RunDir
from .machines import host_facts, shape_of
from .plan import Point, TestbedShape, plan
from .progress import Progress, RunLog
from .provenance import manifest
from .retry import DEFAULT_BUDGET_S, Backoff
from .spec import Spec
from .spec import load as load_spec
from .sweep import Sweep
from .sweeper import Sweeper
from .switch_side import PointFailed

SUPPORTED = {"adaptive", "baselines", "time_varying", "rocksdb", "rpc"}
NOT_YET: dict[str, str] = {}


def supported_or_explain(spec: Spec) -> None:
    missing = sorted(spec.needs() - SUPPORTED)
    if missing:
        lines = [f"{spec.name} needs what this version of rainmaker cannot run yet:"]
        lines += [f"  - {m}: {NOT_YET.get(m, 'not supported')}" for m in missing]
        raise UsageError("\n".join(lines), fix="`rainmaker plan` shows its points; trim the spec to run part of it now")


def auto_k_calibrates(spec: Spec, auto: bool) -> None:
    """An automatic dilation is chosen from a calibration point, and a spec of a real
    memcached has none (calibrate.calibrates): it must give its k."""
    from .calibrate import calibrates

    if auto and not calibrates(spec):
        raise UsageError(
            f"{spec.name}: an automatic dilation is chosen from a calibration point of constant tasks, and a real "
            "memcached decides its own service times",
            fix="give the spec's dilation.emulated a number (its k), as experiments/memcached.yaml does",
        )


def agents_can_run(inv: Inventory) -> None:
    """rain-worker and rain-client need root (huge pages, the NIC, real-time priority),
    and the agents run as the SSH login: provisioning can become root, a run cannot."""
    not_root = [h.name for h in inv.hosts if h.mgmt.user != "root"]
    if not_root:
        raise UsageError(
            f"{', '.join(not_root)} log in as {inv.host(not_root[0]).mgmt.user!r}, but the agents must run "
            "as root (DPDK needs huge pages and the NIC)",
            fix="let the orchestrator's key log in as root (e.g. `sudo cp ~/.ssh/authorized_keys "
            "/root/.ssh/` on each host; key-only root login is sshd's default) and set mgmt.user: root",
        )


def systems_fit_network(spec: Spec, inv: Inventory) -> None:
    """A plain LAN (switch.kind: lan) runs no switch program: only the systems that
    schedule inside the server can run over it."""
    if inv.switch.programmable:
        return
    in_switch = [s for s in spec.systems if not get_system(s).server_side]
    if in_switch:
        raise UsageError(
            f"{spec.name} runs {', '.join(in_switch)}, which schedule in the switch, but {inv.switch.name} is a "
            "plain LAN (switch.kind: lan): nothing runs their P4 program",
            fix="run a server-side spec (experiments/rakaia-*.yaml, memcached.yaml) on it, or use an inventory "
            "with a tofino or emulated switch",
        )


def resumed(rd: RunDir, spec: Spec, shape: TestbedShape, auto: bool) -> tuple[Spec, list[Point]]:
    """A resumed run's points as it planned them: at the k its calibration chose, with
    the service times its probe measured and the windows it sized."""
    m = rd.read_manifest() if rd.manifest.exists() else {}
    chosen = m.get("dilation") if auto else None
    service = m.get("service")
    if isinstance(service, dict) and isinstance(service.get("measured_us"), dict):
        spec = with_service(spec, service["measured_us"])
    points = plan(spec, shape, k=chosen.get("k") if isinstance(chosen, dict) else None)
    return spec, with_windows(points, m) if m else points


def refuse_what_cannot_run(spec: Spec, inv: Inventory, auto: bool) -> None:
    """Refuse, before anything starts, a spec this testbed cannot run (pure checks)."""
    supported_or_explain(spec)
    agents_can_run(inv)
    systems_fit_network(spec, inv)
    auto_k_calibrates(spec, auto)


def checked_machines(spec: Spec, inv: Inventory):
    """The preflight's report, or PreflightFailed listing the needed checks that failed:
    the run then stops before its folder is made (`--no-preflight` skips it)."""
    from ..preflight import PreflightFailed
    from ..preflight import preflight as check

    report = check(inv, spec)
    if report.blocking:
        raise PreflightFailed(report, what=f"rainmaker run {spec.name}")
    return report


def before_sweep(
    s: Sweeper,
    rd: RunDir,
    shape: TestbedShape,
    *,
    auto: bool,
    calibrate: bool,
    fresh: bool,
    start: Settled | None = None,
) -> None:
    """On a shared-core testbed, calibrate (and choose k when it is automatic, from
    `start`, where the testbed's last run of the spec settled, if any); on a new run,
    measure the handler's service times when they are the testbed's own (RocksDB) and
    size the windows for the p99 interval."""
    from .calibrate import calibrates

    if not calibrates(s.spec):
        calibrate = False  # a real memcached's service is its own: no point of constant tasks
    if s.bench.inv.shared_system and calibrate and fresh:  # a resumed run keeps its own
        held = auto and start is not None
        if held:
            start_at(s, rd, s.spec, shape, start, s.log)
        cal = s.calibrate()
        if auto and cal is not None:
            choose_dilation(s, rd, s.spec, shape, _with_cpu(cal, start), s.log, held=held)
        warn_stalls(s, rd)
    if fresh and s.points and s.points[0].handler == "rocksdb":
        probe_service(s, rd, s.spec, shape, s.log)
    if fresh:
        size_windows(s, rd, s.spec, shape, s.log)


def _with_cpu(cal: dict, start: Settled | None) -> dict:
    """The calibration the k is chosen on: started where the last run settled, with the
    CPU per request of the testbed's calibration at its smallest k (Settled.cpu)."""
    return {**cal, "cpu": start.cpu} if start is not None and start.cpu else cal


def calibration_run(s: Sweeper, rd: RunDir, shape: TestbedShape, auto: bool, start: Settled | None = None) -> None:
    """`rainmaker calibrate`: the testbed's numbers, and a run whose points are todo."""
    if auto and start is not None:
        start_at(s, rd, s.spec, shape, start, s.log)
    cal = s.calibrate()
    if cal is None:
        raise PointFailed(
            "the calibration point failed (see the log above)",
            fix="check the testbed with `rainmaker provision --verify` and `rainmaker switch status`",
        )
    if auto:
        choose_dilation(s, rd, s.spec, shape, _with_cpu(cal, start), s.log, held=start is not None)
    warn_stalls(s, rd)


def warn_stalls(s: Sweeper, rd: RunDir) -> None:
    """Before the sweep: whether the client's stalls in the last calibration are over
    schedule_lag's limit at the run's k (calibrate.stall_warning), in the log and the
    manifest's calibration, which the report shows. The points would find out one by one."""
    from .calibrate import stall_warning

    if not s.calibrated or not s.points:
        return
    text = stall_warning({**s.calibrated[-1], "k": s.points[0].dilation}, s.spec)
    if text is None:
        return
    s.log(f"warning: {text}")
    m = rd.read_manifest()
    if isinstance(m.get("calibration"), dict):
        m["calibration"]["schedule_lag_warning"] = text
        rd.write_manifest(m)


def _into_history(history_file: Path, rec: dict, log) -> None:
    """A run's or a calibration's record, into the testbed's history (history.py)."""
    try:
        append_history(history_file, rec)
    except OSError as e:
        log(f"the testbed's history ({history_file}) was not written: {e}")


def run(
    spec_path: str | Path,
    inv: Inventory,
    inv_path: Path | None = None,
    *,
    resume: Path | None = None,
    results_root: Path = Path("results"),
    retries: int = 2,
    retry_wait: float = DEFAULT_BUDGET_S,
    console=None,
    progress: bool = True,
    analyze_after: bool = True,
    calibrate: bool = True,
    calibrate_only: bool = False,
    preflight: bool = True,
) -> Path:
    """`retries`: attempts after the first for a point that meets an infrastructure
    failure; `retry_wait`: the most seconds a point waits, in all, for the testbed to
    answer again between its attempts (retry.py). On `resume`, failed points are
    measured again, interrupted ones too; done points are kept. `calibrate`: on a
    shared-core testbed, measure the testbed before the first point (calibrate.py).
    `preflight`: check the machines first (orchestrator/preflight, checked_machines)."""
    from . import estimate

    clock = estimate.Clock()
    spec_path = Path(spec_path)
    spec = load_spec(spec_path)
    shape = shape_of(inv)
    auto = shape.emulated and spec.dilation.emulated == "auto"
    refuse_what_cannot_run(spec, inv, auto)
    if resume is not None:  # (a folder that is no run is bad input, before the machines are asked)
        rd = RunDir.to_resume(resume)
        spec, points = resumed(rd, spec, shape, auto)
        sweep = Sweep(rd.path, points, resume=True)
    checked = checked_machines(spec, inv) if preflight else None
    if resume is None:
        points = plan(spec, shape)
        rd = RunDir.new(results_root, spec.name, time.strftime("%Y%m%d-%H%M%S"))
        sweep = Sweep(rd.path, points, resume=False)
    log = RunLog(rd, console)
    log(
        f"{'resuming' if resume else 'run'} {spec.name}: {len(points)} points, {sweep.counts()['done']} done; "
        f"results in {rd.path}"
    )
    if checked is not None:
        log(f"{checked.summary()} ({checked.write(rd.path / PREFLIGHT).name})")
    if sweep.retried:
        log(f"resume measures failed points again: {', '.join(sweep.retried)}")
    history_file = history_path(inv)
    history = read_history(history_file)
    planned = None
    if resume is None and not calibrate_only:
        planned = estimate.estimate(spec, shape, history, where=f"testbed {inv.name}")
        log(f"estimate: {planned.text()} ({'; '.join(planned.basis)})")
    with Progress(log.console, enabled=progress) as prog:
        bench = Bench(spec, inv, rd.path, log=log, progress=prog)
        s = Sweeper(bench, points, sweep, retries=retries, backoff=Backoff(budget_s=retry_wait))
        try:
            bench.prepare(points[0] if points else None)
            if resume is None or not rd.manifest.exists():
                facts = host_facts(bench.tb)
                m = manifest(spec_path, spec, inv, inv_path, points, facts, bench.switch.bfrt_sha())
                rd.write_manifest(m | ({"estimate": planned.as_dict()} if planned else {}))
            start = settled_k(history, spec) if auto and resume is None else None
            if calibrate_only:
                calibration_run(s, rd, shape, auto, start)
                _into_history(history_file, estimate.calibration_record(rd, s.spec, s.calibrated), log)
                return rd.path
            before_sweep(s, rd, shape, auto=auto, calibrate=calibrate, fresh=resume is None, start=start)
            s.eta = estimate.Eta(rd, s.spec, shape.emulated, clock, history)
            clock.sweep_started()
            s.sweep_all()
            clock.sweep_ended()
        except KeyboardInterrupt:
            log(f"interrupted: done points are kept; continue with `rainmaker run {spec_path} --resume {rd.path}`")
            raise
        finally:
            bench.close()
    if bench.overheads:
        ov = sorted(bench.overheads)
        log(
            f"orchestration overhead per point (beyond warm-up + measurement): median {ov[len(ov) // 2]:.2f} s, "
            f"max {ov[-1]:.2f} s"
        )
    log(s.sweep.summary())  # auto dilation may have planned the sweep again
    if analyze_after and s.sweep.counts()["done"]:
        from .report import finish

        finish(rd.path, s.spec.plots, log)
    if planned is not None and s.sweep.counts()["done"] == len(s.points):
        # a whole run, start to end, is what the next estimate goes by
        clock.calibrations, clock.calibrated = s.calibrations, s.calibrated
        rec = estimate.record(rd, s.spec, clock, planned.as_dict())
        _into_history(history_file, rec, log)
        log(f"took {estimate.fmt(rec['wall_s'])}; estimated {planned.text()} (history: {history_file})")
    log.close()
    return rd.path
