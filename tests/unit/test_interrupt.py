"""Ctrl-C during the analysis (`analyze`, `plot`, `report`, and the analysis at the end
of `run`) exits 130 with a line saying what stopped, what is kept and how to redo it.

Each command is caught while it is busy reading a point: one of the point's files is a
named pipe, which blocks its reader until the test, having seen the reader open it,
sends SIGINT. Nothing is timed: the pipe says when the command is inside."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.errors import Interrupted

from .results_fixture import synthetic_run

REPO = Path(__file__).resolve().parents[2]
RAINMAKER = [sys.executable, "-X", "faulthandler", "-c", "from orchestrator.cli import main; main()"]  # this checkout's
POINT = "points/rain-k1000-r1"


def _writer(fifo: Path, alive, timeout: float = 60.0) -> int:
    """Open the pipe for writing as soon as a reader holds it (ENXIO until then); the
    reader then blocks reading it until we close it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and alive():
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
        time.sleep(0.02)
    raise AssertionError(f"nothing opened {fifo}")


def _interrupt_main_thread(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """SIGINT (or sig) to the process's main thread (tgkill). A process-directed SIGINT goes to any
    thread that does not block it, here one of numpy's or pyarrow's: Python then raises
    KeyboardInterrupt in the main thread at its next bytecode, but the main thread sits in
    the pipe's read(2), which only a signal to that thread interrupts. (A real Ctrl-C
    meets a read that ends.) Seen once in a few runs under load: the plot hung 60 s."""
    if platform.machine() != "x86_64":
        proc.send_signal(sig)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(234, proc.pid, proc.pid, sig) != 0:  # SYS_tgkill on x86_64
        raise OSError(ctypes.get_errno(), "tgkill")


def _run(tmp_path: Path, fifo_in_point: str, analysed: bool) -> tuple[Path, Path]:
    from orchestrator.experiment.analyze import analyze

    run = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0,), reps=1, n=400, with_optional=False)
    if analysed:
        analyze(run)
        (run / "plots").mkdir()
        (run / "plots" / "p99_vs_load.png").write_bytes(b"")  # as if drawn: `report` does not draw again
    fifo = run / POINT / fifo_in_point
    fifo.parent.mkdir(parents=True, exist_ok=True)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    return run, fifo


# command, the point's file that is a pipe, whether the run was analysed, what the message says
CASES = {
    "analyze": (["analyze"], "clients/client0/summary.json", False, "the analysis of"),
    "plot": (["plot", "--kind", "queue_depth"], "switch/queue.jsonl", True, "drawing the figures of"),
    "report": (["report"], "validity.json", True, "the report of"),  # figures drawn: report reads verdicts
}


@pytest.mark.parametrize(
    "case,sig",
    [(c, signal.SIGINT) for c in CASES] + [("analyze", signal.SIGTERM), ("report", signal.SIGHUP)],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else v,
)
def test_ctrl_c_during_the_analysis_says_what_is_kept(case, sig, tmp_path):
    """SIGTERM (kill, a job's time limit) and SIGHUP (the terminal closed) stop a command
    as Ctrl-C does; the exit status is the shell's for that signal (128 + its number)."""
    verb, pipe, analysed, what = CASES[case]
    run, fifo = _run(tmp_path, pipe, analysed)
    summary_before = (run / "summary.parquet").read_bytes() if analysed else None
    proc = subprocess.Popen(
        [*RAINMAKER, verb[0], str(run), *verb[1:]],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background jobs ignore SIGINT, nohup SIGHUP, and Python keeps an
        # ignored signal ignored (as a command run under nohup should)
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )
    fd = None
    try:
        fd = _writer(fifo, lambda: proc.poll() is None)
        _interrupt_main_thread(proc, sig)
        try:
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                # Should the signal come between the open and the read(2), Python notes
                # it but runs no handler, and the read blocks for good. A real file's
                # read ends; so does the pipe's once closed, and the handler runs then.
                os.close(fd)
                fd = None
                out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # where it hangs: faulthandler (-X faulthandler) prints every thread's stack on SIGABRT
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=20)
            raise AssertionError(f"no exit 60 s after Ctrl-C; its stacks:\n{err[-6000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
        if fd is not None:
            os.close(fd)
    assert proc.returncode == 128 + sig, out + err
    assert "Traceback" not in out + err
    assert f"interrupted: {what} {run} stopped" in err
    assert f"redo it with `rainmaker {verb[0]} {run}" in err
    if analysed:  # the table the figures read is the one before, whole
        assert (run / "summary.parquet").read_bytes() == summary_before
    else:
        assert not (run / "summary.parquet").exists()
    assert not list(run.rglob(".*.tmp"))  # no torn table or figure left behind


def test_ctrl_c_during_the_analysis_at_the_end_of_a_run(tmp_path):
    """run.py ends with report.finish(); Ctrl-C there keeps every point, says so in the
    run's log and in the error, and names the commands that redo the rest."""
    from orchestrator.experiment.report import finish

    run, fifo = _run(tmp_path, "clients/client0/summary.json", False)
    logged: list[str] = []
    main = threading.main_thread().ident
    fds: list[int] = []

    def interrupt() -> None:
        fds.append(_writer(fifo, lambda: True))
        signal.pthread_kill(main, signal.SIGINT)  # to the thread blocked on the pipe, as Ctrl-C would

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    try:
        with pytest.raises(Interrupted) as e:
            finish(run, ["p99_vs_load"], logged.append)
    finally:
        signal.signal(signal.SIGINT, old)
        t.join(10)
        for fd in fds:
            os.close(fd)
    assert e.value.exit_code == 130
    assert "the analysis at the end of the run" in e.value.message and "every measured point is kept" in e.value.message
    assert f"rainmaker report {run}" in e.value.fix
    assert logged == ["interrupted during the analysis: every measured point is kept"]
    assert (run / POINT / "point.json").exists() and not (run / "summary.parquet").exists()


def test_the_analysis_at_the_end_of_a_run_logs_what_it_wrote(tmp_path):
    """Uninterrupted, report.finish() analyses, draws the spec's figures and writes the
    report, and says each in the run's log (run.py's closing lines)."""
    from orchestrator.experiment.report import finish

    run = synthetic_run(tmp_path, systems=("rain",), loads=(1000.0,), reps=1, n=400, with_optional=False)
    logged: list[str] = []
    rep = finish(run, ["p99_vs_load", "queue_depth"], logged.append)
    assert rep == run / "report.md" and (run / "report.html").exists() and (run / "summary.parquet").exists()
    assert logged[0] == f"figure: {run / 'plots' / 'p99_vs_load.png'}"
    assert logged[1].startswith("figure queue_depth not drawn: no switch queue samples")
    assert logged[2] == f"report: {rep} (and report.html)"
