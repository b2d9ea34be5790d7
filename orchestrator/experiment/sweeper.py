"""The sweep: every pending point measured in turn (point.py's pipeline), each wrapped
once by each of three rules:

- **retries**: an infrastructure failure (a host, the switch, an agent) is retried a
  bounded number of times, each retry after waiting (bounded) until the testbed answers
  again (retry.py); then the point is failed with each attempt's reason, and the sweep
  goes on;
- **stall re-measurement** (`remeasured`, the one rule for points and segments): a
  measurement whose host stalled the client (its schedule checks failed) is set aside
  under stalled/ and measured again, up to validity.remeasure_stalled times;
- **segments**: a long window is measured as segments (segments.py), each its own
  measurement, merged and judged whole.

Ctrl-C stops the remote processes and puts the point back to todo, its reason kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from ..errors import RainmakerError, one_line
from ..systems import get as get_system
from . import segments
from .bench import Bench
from .layout import RunDir
from .machines import shape_of
from .plan import Point
from .point import measure_point
from .retry import Backoff, Waiter, testbed_answers
from .rpc_point import measure_rpc_point
from .sweep import DONE, FAILED, Sweep

if TYPE_CHECKING:
    from .validity import Verdict


def remeasured(measure: Callable[[int], Verdict], set_aside: Callable[[int, Verdict], None], limit: int) -> Verdict:
    """The stall rule: measure(again) with again = 0, 1, ...; a verdict whose host
    stalled the client is set aside (set_aside(again, verdict), again counting from 1)
    and measured again, at most `limit` times; the last verdict stands."""
    again = 0
    while True:
        v = measure(again)
        if not (v.stalled and again < limit):
            return v
        again += 1
        set_aside(again, v)


class _GaveUp(Exception):
    def __init__(self, last: str | None):
        self.last = last


def measure_any(b: Bench, p: Point, attempt: int = 1, **where):
    """A point through its system's pipeline: point.py's, or rpc_point.py's for a
    server-side system (kernel TCP RPCs to one server)."""
    measure = measure_rpc_point if get_system(p.system).server_side else measure_point
    return measure(b, p, attempt, **where)


class Sweeper:
    def __init__(
        self,
        bench: Bench,
        points: list[Point],
        sweep: Sweep,
        *,
        retries: int,
        backoff: Backoff | None = None,
        measure=None,
    ):
        self.bench, self.points, self.sweep = bench, points, sweep
        self.retries = retries
        self.backoff = backoff or Backoff()  # the waits between attempts (retry.py)
        self.measure = measure or measure_any  # (bench, point, attempt, **where) -> Verdict | None
        self.log, self.progress = bench.log, bench.progress
        self.failed_before = False  # the last attempt failed: the next one waits for the testbed
        self.calibrations = 0  # run for this run, and what each measured (estimate.py's history keeps them)
        self.calibrated: list[dict] = []
        self.eta = None  # estimate.Eta: each point's line says the elapsed time and the ETA

    @property
    def spec(self):
        return self.bench.spec

    @spec.setter
    def spec(self, spec) -> None:
        self.bench.spec = spec

    def attempt(self, p: Point, attempt: int = 1, **where) -> Verdict | None:
        return self.measure(self.bench, p, attempt, **where)

    def stop_all(self) -> None:
        self.bench.stop_all()

    # -- the sweep -------------------------------------------------------------------
    def sweep_all(self) -> None:
        pending = self.sweep.pending()
        done = len(self.points) - len(pending)
        self.progress.start(len(self.points), done)
        for i, p in enumerate(pending):
            line = self.eta.line(p, pending[i:], done + i, len(self.points)) if self.eta is not None else ""
            if line:
                self.log(line)
            if self.eta is not None:  # the bar counts the ETA down until the next point's
                self.progress.point(p, self.eta.left_s, " (at least)" if self.eta.at_least else "")
            else:
                self.progress.point(p)
            self.sweep_one(p)
            self.progress.advance()
        try:
            self.bench.clear_leftovers(None, 0)  # the last point's DPDK runtime folders
        except RainmakerError as e:
            self.log(f"clean-up after the sweep: {one_line(e)}")

    def sweep_one(self, p: Point) -> None:
        """Measure p through the three rules and record its end in sweep.json (done,
        valid or not, or failed once its retries are spent)."""
        try:
            verdict = self._measured(p)
        except _GaveUp as e:
            self.sweep.finish(p.id, FAILED, e.last)
            return
        from .validity import invalid_reason

        if not verdict.valid:
            self.log(f"{p.id}: measured, but not valid: {', '.join(verdict.failed)}")
        self.sweep.finish(p.id, DONE, None if verdict.valid else invalid_reason(verdict), valid=verdict.valid)

    def _measured(self, p: Point) -> Verdict:
        """p's verdict, through the three rules; _GaveUp when its retries are spent."""
        from .validity import invalid_reason

        cuts = self.segments_of(p)
        failures = [0]  # attempts an outage ended, over the point's stall re-measures too
        waiter = self._waiter()  # one budget of waiting per point

        def set_aside(again: int, v: Verdict) -> None:
            # The host, not the system, broke the schedule: measure again, and keep
            # this attempt where the analysis does not read it (stalled/).
            self.sweep.attempt_failed(p.id, f"the host stalled the client, measured again: {invalid_reason(v)}")
            RunDir(self.bench.run_dir).set_aside(p.id, self.sweep.state[p.id].attempts)
            self.log(
                f"{p.id}: the host stalled the client ({', '.join(v.failed)}); "
                f"measuring it again ({again} of at most {self.spec.validity.remeasure_stalled})"
            )

        # a point in segments re-measures the stalled segment, not itself
        limit = self.spec.validity.remeasure_stalled if len(cuts) == 1 else 0
        return remeasured(lambda stalls: self._with_retries(p, cuts, waiter, failures, stalls), set_aside, limit)

    def _with_retries(self, p: Point, cuts: list[float], waiter: Waiter, failures: list[int], stalls: int) -> Verdict:
        last: str | None = None
        while failures[0] <= self.retries:
            attempt = failures[0] + stalls + 1
            if self.failed_before:
                try:
                    waiter.until_answering(self._answers, lambda m, pid=p.id: self.log(f"{pid}: {m}"))
                    self._recover()
                except KeyboardInterrupt:  # Ctrl-C while waiting: the point is todo, its reason kept
                    self.sweep.requeue(p.id, self.sweep.state[p.id].reason or "interrupted")
                    raise
            self.sweep.start(p.id)
            try:
                verdict = self.attempt(p, attempt) if len(cuts) == 1 else self.run_segments(p, cuts, attempt)
            except KeyboardInterrupt:
                self.stop_all()
                self.sweep.requeue(p.id, "interrupted")
                raise
            except (RainmakerError, OSError, TimeoutError) as e:  # a switch's errors included
                last = one_line(e)
                self.sweep.attempt_failed(p.id, last)
                self.stop_all()
                self.log(f"{p.id}: attempt {attempt} failed: {last}")
                self.failed_before = True
                failures[0] += 1
                continue
            self.failed_before = False
            return verdict
        raise _GaveUp(last)

    def segments_of(self, p: Point) -> list[float]:
        """The lengths of the segments p's window is measured in (segments.cuts_of)."""
        return segments.cuts_of(self.spec, shape_of(self.bench.inv).emulated, p)

    def run_segments(self, p: Point, cuts: list[float], attempt: int = 1) -> Verdict:
        """Measure p as segments of `cuts` seconds, each its own measurement checked
        alone and re-measured by the stall rule; then the segments merge into p's
        folder, the model is computed beside the whole window, and the point is checked
        whole. A window whose latencies the independence check finds correlated is
        measured longer once, by the segments segments.replications_for adds, and
        checked whole again."""
        pd = RunDir(self.bench.run_dir).point(p.id).fresh()
        done: list[float] = []
        extended = False
        while True:
            # the point as planned, before its first segment: an interrupted point has its record
            pd.write_point(asdict(replace(p, measure_s=round(sum(cuts), 3))) | {"segments": cuts})
            for seconds in cuts[len(done) :]:
                self._segment(p, pd, len(done) + 1, seconds, len(cuts), attempt)
                done.append(seconds)
            verdict = self._judge_whole(pd, replace(p, measure_s=round(sum(done), 3)), done)
            failed = not extended and "independence" in verdict.failed
            more = segments.replications_for(verdict, done, self._longest()) if failed else []
            if not more:
                return verdict
            self.log(
                f"{p.id}: its latencies are not independent over its {sum(done):g} s window (validity.json: "
                f"independence); measuring {len(more)} more segments, to {sum(done) + sum(more):g} s: "
                "independent runs, over which the p99's interval can hold"
            )
            cuts, extended = [*done, *more], True

    def _longest(self) -> float | None:
        return self.spec.durations(shape_of(self.bench.inv).emulated).measure_max_s

    def _segment(self, p: Point, pd, i: int, seconds: float, of: int, attempt: int) -> None:
        """Segment i of p, re-measured by the stall rule; kept, valid or not."""
        rd = RunDir(self.bench.run_dir)

        def one(again: int) -> Verdict:
            self.log(f"{p.id}: segment {i} of {of} ({seconds:g} s)" + (f", again ({again})" if again else ""))
            return self.attempt(replace(p, measure_s=seconds), attempt + again, segment=i)

        def set_aside(again: int, v: Verdict) -> None:
            rd.set_aside_segment(p.id, i, again)
            self.log(f"{p.id}: segment {i}: the host stalled the client ({', '.join(v.failed)}); measuring it again")

        v = remeasured(one, set_aside, self.spec.validity.remeasure_stalled)
        if not v.valid:
            self.log(f"{p.id}: segment {i} kept, not valid: {', '.join(v.failed)}")

    def _judge_whole(self, pd, p: Point, cuts: list[float]) -> Verdict:
        """The segments merged into p's folder, the model beside the whole window, and
        the whole window's checks."""
        from .model_beside import write as write_model
        from .validity import check_point

        rd = RunDir(self.bench.run_dir)
        pd.write_point(asdict(p) | {"segments": cuts})
        self.bench.phase("merge segments")
        for problem in segments.merge(pd):
            self.log(f"{p.id}: merging the segments: {problem}")
        self.bench.phase("validity")
        write_model(pd, asdict(p), rd.read_manifest(), self.spec)
        verdict = check_point(pd.path, asdict(p), self.spec.validity)
        self.bench.phase("done")
        return verdict

    # -- before the sweep ------------------------------------------------------------
    def calibrate(self) -> dict | None:
        """Measure the testbed itself before the first point (calibrate.py) and record it
        in the manifest, where the model beside every point takes its overheads from.
        A calibration that fails is logged; the run goes on with the default model."""
        from . import calibrate as cal

        if not self.points:
            return None
        point = cal.calibration_point(self.points[0], self.spec.workload.mean_service_us)
        spec = self.spec
        self.spec = cal.calibration_spec(spec)
        self.log("calibrating the testbed: one light point of constant tasks")
        self.calibrations += 1
        try:
            self.attempt(point, calibration=True)
            result = cal.summarise(RunDir(self.bench.run_dir).calibration, point, spec.workload.mean_service_us)
        except (RainmakerError, OSError, TimeoutError, ValueError, KeyError) as e:
            self.stop_all()
            self.log(f"calibration failed: {one_line(e)}; the model uses the testbed kind's defaults")
            return None
        finally:
            self.spec = spec
        rd = RunDir(self.bench.run_dir)
        rd.write_manifest(cal.record(rd.path, rd.read_manifest(), result, point))
        self.log(cal.describe(result))
        self.calibrated.append(result)
        return result

    # -- between attempts (seams the tests replace) ----------------------------------
    def _waiter(self) -> Waiter:
        return Waiter(self.backoff)

    def _answers(self) -> dict[str, str]:
        return testbed_answers(self.bench.inv)

    def _recover(self) -> None:
        """Between attempts: drop connections and reconnect the switch. Leftovers are
        cleared at the start of every attempt (point.prepare_hosts)."""
        try:
            self.bench.reconnect(self.points)
        except Exception as e:  # noqa: BLE001 - the next attempt reports it
            self.log(f"recovery: {one_line(e)}")
