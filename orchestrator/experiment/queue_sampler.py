"""The switch's queues, sampled while a point's load runs."""

from __future__ import annotations

import threading
import time

from ..errors import one_line
from .layout import PointDir


class QueueSampler:
    """Samples the switch's queues while the load runs: each configured slice's signed
    token balance (negative: tasks queued in the switch, positive: tokens), read from a
    thread through the controller's BFRuntime session; stop() writes switch/queue.jsonl.

    One Read of one small register per sample, at most MAX_HZ and at most MAX_SAMPLES
    per point: bf_switchd answers from its own CPU, but the emulator shares this
    machine's two cores with the load, and a read there takes milliseconds. The main
    thread only waits on the hosts meanwhile, so the session has no other user.

    Sampling starts before the start signals; time 0 is the load's start, which the
    runner marks when the client's signal has been delivered (its pkill returned):
    opening an SSH command takes long on a busy machine, so the signals' start is not it."""

    MAX_HZ = 10.0
    MAX_SAMPLES = 200

    def __init__(self, ctl, expected_s: float, lock: threading.Lock | None = None):
        self.ctl = ctl
        self.lock = lock or threading.Lock()  # shared with the coordinator, the session's other user
        # Rain's signed balance per slice; a baseline's program has no such register
        self.enabled = hasattr(ctl, "balances")
        self.period_s = max(1.0 / self.MAX_HZ, expected_s / self.MAX_SAMPLES)
        self.samples: list[tuple[float, dict[int, int]]] = []  # (monotonic time, balance per slice)
        self.reads_s: list[float] = []
        self.error: str | None = None
        self.load_start: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switch-queue-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if not self.enabled:
            return
        try:
            while not self._stop.is_set():
                t = time.monotonic()
                with self.lock:
                    balance = self.ctl.balances()
                self.reads_s.append(time.monotonic() - t)
                self.samples.append((t, balance))
                # a period from this read's start, never less: a slow read is not caught up
                self._stop.wait(max(0.0, t + self.period_s - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - the point goes on without the series; timing.json says why
            self.error = one_line(e)

    def load_started(self, when: float) -> None:
        """The load's start (time.monotonic()): time 0 of the series."""
        self.load_start = when

    def stop(self, pd: PointDir) -> dict:
        """Stop sampling, write the series (times from the load's start, or from the
        first sample if it was never marked); what it cost, for timing.json."""
        self._stop.set()
        self._thread.join(timeout=10)
        t0 = self.load_start if self.load_start is not None else (self.samples[0][0] if self.samples else 0.0)
        if self.enabled:
            pd.write_switch_queue([(t - t0, b) for t, b in self.samples])
        r = sorted(self.reads_s)
        return {
            "samples": len(self.samples),
            "period_s": round(self.period_s, 4),
            "read_ms_median": round(1000 * r[len(r) // 2], 2) if r else None,
            "read_ms_max": round(1000 * r[-1], 2) if r else None,
            "load_start_marked": self.load_start is not None,
            "error": self.error,
        }
