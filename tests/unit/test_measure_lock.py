"""One load at a time on this machine's cores (orchestrator/testbed/measure_lock.py):
a second testbed's runner waits for the first's load and says for whom; the kernel
frees the lock when its holder dies, however it dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from orchestrator.testbed.measure_lock import MeasureLockError, measuring
from tests.poll import until

HOLDER = """
import sys, time
from pathlib import Path
from orchestrator.testbed.measure_lock import measuring
with measuring(12, "rain-f0.9-r1", print, directory=Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "holding"
        yield p
    finally:
        p.kill()
        p.wait(5)
        p.stdout.close()


def test_a_second_load_waits_says_for_whom_and_gives_up_on_a_stuck_holder(tmp_path, holder):
    said: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(MeasureLockError) as e:
        with measuring(9, "rain-f0.3-r1", said.append, wait_max_s=0.5, directory=tmp_path):
            pytest.fail("entered while another testbed measured")
    assert 0.5 <= time.monotonic() - t0 < 5
    assert said and said[0].startswith("rain-f0.3-r1: waiting for this machine's cores: slot 12's testbed")
    assert f"(point rain-f0.9-r1, pid {holder.pid})" in said[0]
    assert f"slot 12's testbed (point rain-f0.9-r1, pid {holder.pid})" in e.value.message
    assert "rainmaker-measure-cpu0.lock" in e.value.fix  # one lock per CPU, the first it waits for


def test_the_lock_is_free_the_moment_its_holder_dies(tmp_path, holder):
    said: list[str] = []
    entered: list[float] = []

    def kill_soon() -> None:
        time.sleep(0.3)
        holder.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel's

    threading.Thread(target=kill_soon, daemon=True).start()
    with measuring(9, "rain-f0.3-r1", said.append, wait_max_s=30, directory=tmp_path) as waited:
        entered.append(waited)
    assert 0.2 < entered[0] < 5
    assert len(said) == 1  # said once, at once; not again within 10 s


def test_one_runner_measures_again_and_again(tmp_path):
    for _ in range(3):
        with measuring(None, "p", pytest.fail, directory=tmp_path) as waited:
            assert waited < 1
    assert until(lambda: (tmp_path / "rainmaker-measure-cpu0.json").exists(), timeout=1)
