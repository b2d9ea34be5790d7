"""`rainmaker run SPEC --cluster ADDRESS` / `--testbeds N`: a sweep's points measured on
a Dask cluster of emulated testbeds, one per worker, gathered into one run folder.

    run_dir = run_on_cluster(spec_path, pool, ...)   # pool: connect.Pool

The coordinator plans the points, registers a station (station.py) on every worker
that offers a testbed (the Dask resource `testbed`), has each prepare its testbed
(up, provisioned, calibrated at its own k), compares their calibrations
(agreement.py) and hands the points to the testbeds that agree. Dask's scheduler places
them, one at a time per testbed, and gives a point whose worker was lost to another
testbed; the coordinator records the lost attempt with its reason, takes a lost local
testbed down, and writes each point's folder into the run folder as it arrives
(shard.py). The folder is a local run's (experiment/layout.py), plus which testbed
measured each point (point.json and sweep.json `testbed`), each testbed's calibration
(manifest.json `testbeds`) and files (testbeds/<id>/).

Ctrl-C stops every testbed (their agents, then the testbeds themselves) and leaves a
run that `--resume RUN_DIR --cluster ADDRESS` continues on whatever testbeds are there
then (each calibrates anew; done points are kept).
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from dataclasses import asdict
from pathlib import Path

from ..errors import RainmakerError, one_line
from ..experiment.layout import TESTBEDS, RunDir, atomic_replace
from ..experiment.plan import Point
from ..experiment.sweep import DONE, FAILED, RUNNING, Sweep
from . import agreement, shard, stacks
from . import station as st
from .connect import RESOURCE, Pool

WAIT_S = 1.0  # the coordinator's loop: events drained and finished points gathered this often
# Ctrl-C: the longest the stations get to stop their agents (10 s of grace each), and
# then to go down (a point being measured ends first, 120 s at most): a wedged worker
# does not hold the coordinator, whose own machine's testbeds go down here then.
STOP_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 180.0
# A testbed still preparing is said this often, with where its worker's task is; one
# not prepared after PREPARE_MAX_S (a fresh machine's provisioning and build take about
# ten minutes) is left out, and the run goes on with the testbeds that are ready.
PREPARE_SAY_S = 60.0
PREPARE_MAX_S = 3600.0


class Coordinator:
    def __init__(
        self, pool: Pool, rd: RunDir, spec, spec_path: Path, points: list[Point], sweep: Sweep, order, log, bar
    ):
        self.pool, self.client = pool, pool.client
        self.spec, self.spec_path = spec, spec_path
        self.rd, self.points, self.sweep, self.order = rd, {p.id: p for p in points}, sweep, order
        self.log, self.bar = log, bar
        self.events: queue.Queue = queue.Queue()
        self.prepared: dict[str, st.Prepared] = {}  # testbed id -> what it is
        self.kept: list[str] = []  # testbed ids that measure points
        self.lost: dict[str, str] = {}  # testbed id -> why it is gone
        self.downed: set[str] = set()  # lost testbeds of this machine, taken down here
        self.futures: dict = {}  # future -> point id
        self.lost_attempts: dict[str, list[dict]] = {}  # point id -> attempts a lost testbed ended
        self.on: dict[str, str] = {}  # point id -> the testbed measuring it now
        self.unprepared: dict[str, str] = {}  # worker -> why its testbed measures nothing
        self.said: dict[str, tuple[float, str]] = {}  # testbed id -> when it last said what
        self.at: dict[str, dict] = {}  # worker -> where its station is: testbed, host, slot, pid, stacks
        self.t0 = time.monotonic()

    # -- events (Dask calls these on its own thread: they only queue) ------------------
    def listen(self) -> None:
        self.client.subscribe_topic(st.EVENTS_PREFIX + self.order.key, lambda e: self.events.put(("line", e[1])))
        self.client.subscribe_topic("all", lambda e: self.events.put(("all", e[1])))

    def drain(self) -> None:
        while True:
            try:
                kind, msg = self.events.get_nowait()
            except queue.Empty:
                return
            if not isinstance(msg, dict):
                continue
            if kind == "line":
                self._line(msg)
            elif msg.get("action") == "remove-worker":
                self._worker_lost(str(msg.get("worker")), {str(k) for k in msg.get("processing-tasks") or ()})

    def _line(self, msg: dict) -> None:
        tb, line = msg.get("testbed"), str(msg.get("line", ""))
        self.said[str(tb)] = (time.monotonic(), line)
        if msg.get("worker"):
            self.at[str(msg["worker"])] = {k: msg.get(k) for k in ("testbed", "host", "slot", "pid", "stacks")}
        self.log(f"[{tb}] {line}")
        pid = msg.get("point")
        if msg.get("started") and pid in self.points and self.sweep.state[pid].status != DONE:
            self.sweep.start(pid, testbed=str(tb))
            self.on[pid] = str(tb)
            self.bar.update(label=f"{pid} on {tb}", doing="")

    def _testbed_of(self, worker: str) -> str | None:
        return next((t for t, p in self.prepared.items() if p.worker == worker), None)

    def _worker_lost(self, worker: str, keys: set[str]) -> None:
        tb = self._testbed_of(worker)
        if tb is None or tb in self.lost:
            return
        self.lost[tb] = f"its Dask worker {worker} left the cluster"
        self.log(f"testbed {tb} lost: {self.lost[tb]}")
        for f, pid in self.futures.items():
            if self.on.get(pid) == tb and self.sweep.state[pid].status == RUNNING:  # an attempt under way
                why = f"testbed {tb} was lost while measuring it (Dask worker {worker} left); Dask gives it to another"
                self.sweep.attempt_failed(pid, why)
                s = self.sweep.state[pid]
                self.lost_attempts.setdefault(pid, []).append(
                    {"attempt": s.attempts, "started": s.started, "reason": why}
                )
                self.log(f"{pid}: {why}")
                self.on.pop(pid, None)
            elif f.key in keys:  # assigned to it, not started: no attempt to record
                self.log(f"{pid}: was waiting for testbed {tb}, now lost; Dask gives it to another")
        self._down_if_here(tb)
        if not [t for t in self.kept if t not in self.lost]:
            self.log("no testbed is left to measure on")

    def _down_if_here(self, tb: str) -> None:
        """A lost testbed on this machine goes down here: its worker cannot take it down.
        A prepared one's slot is in what it returned, one that never was prepared in what
        its station said (`at`)."""
        p = self.prepared.get(tb)
        host, slot = (p.host, p.slot) if p else next(((a["host"], a["slot"]) for a in self.at.values()
                                                       if a.get("testbed") == tb), (None, None))  # fmt: skip
        if host != socket.gethostname() or not isinstance(slot, int) or tb in self.downed:
            return
        self.downed.add(tb)
        from ..testbed.emulated import EmulatedTestbed

        try:
            EmulatedTestbed(slot).down(log=lambda m: None)
            self.log(f"testbed {tb} (slot {slot} of this machine) taken down")
        except RainmakerError as e:
            self.log(f"taking lost testbed {tb} down: {one_line(e)}")

    # -- prepare ------------------------------------------------------------------------
    def prepare(self, workers: list[str], max_s: float = PREPARE_MAX_S) -> None:
        """Every worker's testbed up and calibrated; the ones that agree are kept. One
        that takes longer than max_s is left out (where it was stuck, in the log)."""
        self.log(f"preparing {len(workers)} testbed(s): up, provisioned, calibrated, each on its own worker")
        futs = {
            self.client.submit(
                st.prepare,
                self.order.key,
                key=f"prepare-{w}-{self.order.key}",
                workers=[w],
                allow_other_workers=False,
                resources={RESOURCE: 1},
                pure=False,
            ): w
            for w in workers
        }
        pending = set(futs)
        t0 = said = time.monotonic()
        while pending:
            self.drain()
            done, pending = _wait(pending)
            alive = self.pool.workers()
            for f in list(pending):
                if futs[f] not in alive:  # its one worker is gone: it would wait for ever
                    f.cancel()
                    pending.discard(f)
                    self._unprepared(futs[f], "the worker left the cluster")
            for f in done:
                self._prepared(f, futs[f])
            now = time.monotonic()
            if pending and (now - said >= PREPARE_SAY_S or now - t0 > max_s):
                said = now
                where = self._where({f.key: futs[f] for f in pending})
                for f in sorted(pending, key=lambda f: futs[f]):
                    self.log(f"still preparing the testbed of worker {futs[f]} after {now - t0:.0f} s: {where(f.key)}")
                    if now - t0 > max_s:
                        # Dask cannot stop a running task: close() takes its testbed down
                        # (its station, or here if its worker of this machine is wedged)
                        f.cancel()
                        pending.discard(f)
                        self._unprepared(futs[f], f"not prepared in {max_s:.0f} s; {where(f.key)}")
        self.drain()
        if not self.prepared:
            raise RainmakerError(
                "no testbed could be prepared (see the lines above)",
                fix="check one worker's machine by hand: `rainmaker testbed up` and `rainmaker provision` there",
            )
        self._agree()

    def _unprepared(self, worker: str, why: str) -> None:
        self.unprepared[worker] = why
        self.log(f"the testbed of worker {worker} was not prepared: {why}")

    def _where(self, workers: dict[str, str]):
        """key -> where that task is now: rainmaker's innermost frames of its call stack
        (Dask's; of every thread, by faulthandler, from a worker of this machine too
        wedged to answer), and what its testbed last said."""
        try:
            got = _bounded(lambda: self.client.call_stack(keys=list(workers)), 30.0) or {}
        except Exception as e:  # noqa: BLE001 - the worker may be too wedged to answer
            got = {}
            self.log(f"asking the workers where they are: {one_line(e)}")
        found = {k: frames for per in got.values() if isinstance(per, dict) for k, frames in per.items()}
        dumped = {k: self._dumped(w) for k, w in workers.items() if not _our_frames(found.get(k) or [])}
        now = time.monotonic()
        words = "; ".join(
            f"{tb} said {now - t:.0f} s ago: {line[:160]!r}"
            for tb, (t, line) in sorted(self.said.items())
            if tb not in self.prepared
        )

        def where(key: str) -> str:
            stack = _our_frames(found.get(key) or [])
            said = f"in {stack}" if stack else dumped.get(key) or "its call stack not known"
            return said + (f"; {words}" if words else "")

        return where

    def _dumped(self, worker: str) -> str | None:
        """A local worker's every thread, by faulthandler (stacks.py), kept in the run
        folder (testbeds/<id>/stacks.txt); what to say of it."""
        a = self.at.get(worker) or {}
        if a.get("host") != socket.gethostname() or not a.get("pid") or not a.get("stacks"):
            return None
        text = stacks.dump(int(a["pid"]), str(a["stacks"]))
        if not text:
            return None
        d = self.rd.path / TESTBEDS / str(a.get("testbed") or worker.replace("/", "_").replace(":", "_"))
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "stacks.txt", "a") as f:
            f.write(f"# {time.strftime('%H:%M:%S')}, {time.monotonic() - self.t0:.0f} s into the run\n{text}\n")
        ours = stacks.frames(text)
        rel = (d / "stacks.txt").relative_to(self.rd.path)
        return f"every thread's stack in {rel} (faulthandler), rainmaker's: " + (
            " | ".join(ours) if ours else "none (the threads are all in Dask's or the libraries' code)"
        )

    def _prepared(self, f, worker: str) -> None:
        if f.status != "finished":
            self._unprepared(worker, _why(f))
            return
        p: st.Prepared = f.result()
        self.prepared[p.testbed] = p
        shard.unpack(p.files, self.rd.path / TESTBEDS / p.testbed, *shard.STATION_FILES)
        self.log(f"testbed {p.testbed} ready on {worker}: k = {p.k:g}, prepared in {p.prepare_s:.0f} s")

    def _agree(self) -> None:
        tolerance = self.spec.validity.model_tolerance
        a = agreement.compare({t: p.calibration for t, p in self.prepared.items()}, tolerance)
        self.agreement = a
        self.kept = a.kept
        self.log(a.note)
        for t, why in a.left_out.items():
            self.log(f"testbed {t} measures no point: {why}")
        self.write_manifest()

    # -- measure --------------------------------------------------------------------------
    def measure(self) -> None:
        pending = self.sweep.pending()
        workers = [self.prepared[t].worker for t in self.kept]
        self.bar.start(len(self.points), len(self.points) - len(pending))
        length = self._lengths()
        for p in sorted(pending, key=lambda p: (-length(p), p.index)):
            f = self.client.submit(
                st.measure,
                self.order.key,
                p.id,
                key=f"point-{p.id}-{self.order.key}",
                workers=workers,
                allow_other_workers=False,
                resources={RESOURCE: 1},
                priority=round(length(p) * 1000),  # the longest first: no testbed left with one at the end
                pure=False,
            )
            self.futures[f] = p.id
        started = time.monotonic()
        while self.futures:
            self.drain()
            done, _ = _wait(set(self.futures))
            for f in done:
                self._gathered(f, self.futures.pop(f))
                f.release()
            if done:
                self._eta(started)
            if self.futures and not [t for t in self.kept if t not in self.lost]:
                for f, pid in list(self.futures.items()):
                    f.cancel()
                    self.sweep.finish(pid, FAILED, "every testbed of the run was lost before it was measured")
                self.futures.clear()
        self.drain()

    def _lengths(self):
        """A point's expected seconds on a testbed: its warm-up and window, as the first
        kept testbed sized it (`windows`: measure_max_s grows a point's window to what
        its p99 interval needs, 20 to 400 s for the demo's points)."""
        first = self.prepared[self.kept[0]] if self.kept else None
        windows = (first.windows if first is not None else None) or {}

        def length(p: Point) -> float:
            w = windows.get(p.id)
            measure_s = w.get("measure_s", p.measure_s) if isinstance(w, dict) else p.measure_s
            return float(p.warmup_s) + float(measure_s)

        return length

    def _eta(self, started: float) -> None:
        c = self.sweep.counts()
        finished = c["done"] + c["failed"]
        left = len(self.points) - finished
        measured_here = finished - (len(self.points) - len(self.futures) - left)  # (this session's)
        if measured_here > 0 and left:
            self.bar.eta_in((time.monotonic() - started) / max(1, measured_here) * left, note=" (rough)")

    def _gathered(self, f, pid: str) -> None:
        self.on.pop(pid, None)
        if f.status != "finished":
            why = _why(f)
            if isinstance(f.exception(), st.Stopped):
                self.sweep.requeue(pid, "interrupted")
                return
            self.sweep.finish(pid, FAILED, why)
            self.log(f"{pid}: failed: {why}")
            self.bar.advance()
            return
        m: st.Measured = f.result()
        shard.unpack(m.files, self.rd.path, f"points/{pid}", f"stalled/{pid}")
        pf = self.rd.point(pid).point_file
        if pf.exists():
            atomic_replace(pf, json.dumps({**json.loads(pf.read_text()), "testbed": m.testbed}, indent=1))
        self.sweep.adopt(pid, m.state, testbed=m.testbed, before=self.lost_attempts.get(pid, []))
        s = self.sweep.state[pid]
        verdict = "valid" if s.valid else f"not valid: {s.reason}" if s.status == DONE else f"failed: {s.reason}"
        self.log(f"{pid}: measured on testbed {m.testbed} in {m.wall_s:.0f} s, {verdict}")
        self.bar.advance()

    # -- stop -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ctrl-C: every station stops its agents and measures nothing more; the points
        being measured go back to todo."""
        self.log("stopping every testbed: their agents first, then the testbeds")
        try:
            _bounded(lambda: self.client.run(st.stop, self.order.key, wait=True, on_error="return"), STOP_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the testbeds go down in close() whatever this says
            self.log(f"stopping the stations: {one_line(e)}")
        for f, pid in list(self.futures.items()):
            f.cancel()
            if self.sweep.state[pid].status == RUNNING:
                self.sweep.requeue(pid, "interrupted")
        self.futures.clear()

    def close(self) -> None:
        """Every station takes its testbed down and hands its log over; lost local
        testbeds go down here."""
        try:
            out = _bounded(
                lambda: self.client.run(st.close, self.order.key, wait=True, on_error="return"), CLOSE_TIMEOUT_S
            )
        except Exception as e:  # noqa: BLE001 - the plugin's teardown is the last resort
            self.log(f"closing the stations: {one_line(e)}")
            out = {}
        answered = set()
        for res in out.values():
            if isinstance(res, dict) and res.get("testbed"):
                answered.add(str(res["testbed"]))
                d = self.rd.path / TESTBEDS / str(res["testbed"])
                d.mkdir(parents=True, exist_ok=True)
                (d / "run.log").write_text(str(res.get("log") or ""))
        for tb in self.prepared:
            if tb in self.lost or tb not in answered:  # a testbed whose worker is gone or wedged
                self._down_if_here(tb)
        for w in self.unprepared:  # left out while preparing: its worker may be wedged (CI saw one)
            tb = (self.at.get(w) or {}).get("testbed")
            if tb and tb not in answered:
                self._down_if_here(str(tb))
        try:  # bounded: a wedged worker never answers
            _bounded(lambda: self.client.unregister_worker_plugin(st.PLUGIN_PREFIX + self.order.key), STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a worker that left has nothing to unregister
            pass
        for topic in (st.EVENTS_PREFIX + self.order.key, "all"):  # else the scheduler writes to a closed client
            try:
                self.client.unsubscribe_topic(topic)
            except Exception:  # noqa: BLE001 - a scheduler already gone has no subscription
                pass

    # -- the manifest ---------------------------------------------------------------------
    def write_manifest(self) -> None:
        m = self.rd.read_manifest() if self.rd.manifest.exists() else {}
        first = next(iter(self.prepared.values()))
        base = {k: v for k, v in first.manifest.items() if k not in STATION_ONLY}
        testbeds = dict(m.get("testbeds") or {})
        for t, p in self.prepared.items():
            testbeds[t] = {k: v for k, v in asdict(p).items() if k not in ("files", "manifest")}
        m = {**base, **{k: v for k, v in m.items() if k in KEEP_ON_RESUME}} | {
            "spec_file": str(self.spec_path),
            "spec": self.spec.model_dump(mode="json"),
            "points": [asdict(p) for p in self.points.values()],
            "testbeds": testbeds,
            "cluster": {
                "scheduler": self.pool.where,
                "agreement": self.agreement.as_dict(),
                "unprepared": dict(self.unprepared),
                "coordinator": socket.gethostname(),
            },
        }
        self.rd.write_manifest(m)


# A station's manifest entries that describe its testbed alone (in `testbeds` instead).
STATION_ONLY = ("calibration", "dilation", "windows", "service", "inventory", "inventory_file", "spec_file")
KEEP_ON_RESUME = ("created_unix", "git")


def _bounded(call, timeout_s: float):
    """call()'s result, from a thread of its own: TimeoutError after timeout_s (Dask's
    Client.run waits for every worker, and one that is wedged never answers)."""
    out: dict = {}

    def go() -> None:
        try:
            out["result"] = call()
        except Exception as e:  # noqa: BLE001 - handed to the caller below
            out["error"] = e

    t = threading.Thread(target=go, name="rainmaker-cluster-call", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"a worker did not answer in {timeout_s:.0f} s")
    if "error" in out:
        raise out["error"]
    return out["result"]


def _wait(futures: set) -> tuple[set, set]:
    """(done, not done) of the futures, after at most WAIT_S."""
    from distributed import wait

    try:
        done, pending = wait(futures, timeout=WAIT_S, return_when="FIRST_COMPLETED")
    except TimeoutError:
        return set(), futures
    return set(done), set(pending)


def _our_frames(frames: list[str], most: int = 5) -> str:
    """The innermost of rainmaker's frames of a Dask call stack (profile.repr_frame's
    lines), as module.func:line, outermost first."""
    names = [n for fr in frames if (n := stacks.frame_name(str(fr).strip().split("\n", 1)[0]))]
    return " > ".join(names[-most:])


def _why(f) -> str:
    try:
        e = f.exception()
    except Exception as x:  # noqa: BLE001 - a cancelled future has no exception to give
        return one_line(x) or type(x).__name__
    if e is None:
        return f.status
    if type(e).__name__ == "KilledWorker":
        return f"the Dask workers measuring it were lost, time after time ({e})"
    return one_line(e) if isinstance(e, RainmakerError) else f"{type(e).__name__}: {e}"


def run_on_cluster(
    spec_path: str | Path,
    pool: Pool,
    *,
    at_most: int | None = None,
    inv=None,
    resume: Path | None = None,
    results_root: Path = Path("results"),
    retries: int = 2,
    retry_wait: float = 120.0,
    console=None,
    progress: bool = True,
    analyze_after: bool = True,
    calibrate: bool = True,
    provision: bool = True,
    preflight: bool = True,
    slots: list[int] | None = None,
    station_root: str | None = None,
    prepare_max_s: float = PREPARE_MAX_S,
) -> Path:
    """Run the spec's points on the pool's testbeds (the module's docstring). `inv`: an
    emulated inventory whose shape (clients, workers, link delay) every testbed takes;
    without one, 1 client and 2 workers. `at_most`: testbeds to use (default: every
    worker that offers one). `slots`: the testbeds' slots, in the workers' order (else
    each takes a free one). `prepare_max_s`: how long a testbed may take to be
    prepared before it is left out. The rest as experiment/run.py's run()."""
    from ..experiment.plan import TestbedShape, plan
    from ..experiment.progress import Progress, RunLog
    from ..experiment.run import auto_k_calibrates, supported_or_explain, systems_fit_network
    from ..experiment.spec import load as load_spec

    spec_path = Path(spec_path)
    spec = load_spec(spec_path)
    em = inv.emulation if inv is not None else None
    clients, workers = (len(inv.clients), len(inv.workers)) if inv is not None else (1, 2)
    shape = TestbedShape(worker_hosts=workers, client_hosts=clients, emulated=True)
    supported_or_explain(spec)
    auto_k_calibrates(spec, spec.dilation.emulated == "auto")
    if inv is not None:
        systems_fit_network(spec, inv)
    points = plan(spec, shape)
    if resume is not None:
        rd = RunDir.to_resume(resume)
        sweep = Sweep(rd.path, points, resume=True)
    else:
        rd = RunDir.new(results_root, spec.name, time.strftime("%Y%m%d-%H%M%S"))
        sweep = Sweep(rd.path, points, resume=False)
    log = RunLog(rd, console)
    chosen = pool.testbed_workers(at_most)
    log(
        f"{'resuming' if resume else 'run'} {spec.name}: {len(points)} points, {sweep.counts()['done']} done, on "
        f"{len(chosen)} testbed(s) of {pool.where}; results in {rd.path}"
    )
    order = st.Order(
        key=f"{spec.name}/{rd.name}/{int(time.time())}",
        spec_name=spec_path.name,
        spec_text=spec_path.read_text(),
        clients=clients,
        workers=workers,
        link_delay_us=em.link_delay_us if em is not None else 0.0,
        calibrate=calibrate,
        provision=provision,
        preflight=preflight,
        retries=retries,
        retry_wait=retry_wait,
        root=station_root,
        cpus={w: c for w, c in pool.cpus.items() if w in chosen},
        slots=dict(zip(chosen, slots, strict=False)) if slots else {},
    )
    pool.client.register_plugin(st.TestbedPlugin(order), name=st.PLUGIN_PREFIX + order.key)
    with Progress(log.console, enabled=progress) as bar:
        co = Coordinator(pool, rd, spec, spec_path, points, sweep, order, log, bar)
        co.listen()
        try:
            co.prepare(chosen, prepare_max_s)
            co.measure()
        except KeyboardInterrupt:
            co.stop()
            log(
                f"interrupted: done points are kept; continue with `rainmaker run {spec_path} --resume {rd.path} "
                f"{pool.option}`"
            )
            raise
        finally:
            co.close()
    log(sweep.summary())
    if analyze_after and sweep.counts()["done"]:
        from ..experiment.report import finish

        finish(rd.path, spec.plots, log)
    log(f"took {time.monotonic() - co.t0:.0f} s on {len(co.kept)} testbed(s)")
    log.close()
    return rd.path
