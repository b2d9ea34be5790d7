"""DPDK's EAL makes a runtime folder per --file-prefix (/var/run/dpdk/<prefix>, about
1 MB) and leaves it behind. rain-client and rain-worker remove theirs when they end
(hosts/dpdk/common/rain_eal.c); when one is killed or dies in rte_exit(), its agent
removes it. rain-client runs here on net_null: no port, no namespace, no testbed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hosts.agent.common import runtime_dir
from tests.poll import until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DPDK = REPO / "hosts/dpdk"
CLIENT = DPDK / "build/rain-client"
EAL = {"lcores": "0", "no_huge": True, "devices": ["--no-pci", "--vdev=net_null0"]}
LOAD = {
    "src_ip": "10.99.0.1",
    "dst_mac": "02:00:00:00:00:02",
    "dst_ip": "10.99.0.2",
    "warmup_s": 0.1,
    "measure_s": 0.2,
    "rate": 1000,
    "classes": ["task:1:0:exp:10000:8"],
    "timeout_us": 1000,
    "idle": "sleep:100000",
}


@pytest.fixture(scope="module")
def client_bin() -> Path:
    subprocess.run(["make", "-s", "-C", str(DPDK), "build/rain-client"], check=True, capture_output=True)
    return CLIENT


def test_rain_client_removes_its_runtime_folder(client_bin, tmp_path):
    prefix = f"rmrt{os.getpid()}c"
    rt = runtime_dir({"file_prefix": prefix})
    argv = [str(client_bin), "-l", "0", "--no-huge", "--no-pci", "--no-telemetry", f"--file-prefix={prefix}"]
    argv += ["--log-level=lib.eal:error", "--vdev=net_null0", "--"]
    argv += ["--src-ip", LOAD["src_ip"], "--dst-mac", LOAD["dst_mac"], "--dst-ip", LOAD["dst_ip"]]
    argv += ["--rate", "1000", "--warmup", "0.1", "--duration", "0.2", "--timeout-us", "1000", "--out", str(tmp_path)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "rain-client done" in r.stdout
        assert not rt.exists(), f"rain-client left {rt}: {sorted(p.name for p in rt.iterdir())}"
    finally:
        subprocess.run(["rm", "-rf", str(rt)], check=False)


def test_the_client_agent_removes_the_folder_of_a_killed_rain_client(client_bin, tmp_path):
    """rain-client killed (SIGKILL, as the OOM killer does) while it waits to start:
    the EAL's folder stays behind it, and the agent removes it as it ends."""
    prefix = f"rmrt{os.getpid()}k"
    rt = runtime_dir({"file_prefix": prefix})
    cfg = {
        "binary": str(client_bin),
        "eal": {**EAL, "file_prefix": prefix},
        "out_dir": str(tmp_path / "out"),
        "client": {**LOAD, "wait_start": True},
    }
    (tmp_path / "agent.json").write_text(json.dumps(cfg))
    agent = subprocess.Popen(
        [sys.executable, "-m", "hosts.agent", "client", "--config", str(tmp_path / "agent.json")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout.readline().strip() == "rain-agent ready"
        assert rt.is_dir()  # the EAL made it
        pid = int(Path(f"/proc/{agent.pid}/task/{agent.pid}/children").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        agent.communicate(timeout=30)
        assert agent.returncode == 1  # the agent reports rain-client's death
        outcome = json.loads((tmp_path / "out" / "agent.json").read_text())
        assert outcome["client_exit"] == -signal.SIGKILL
        assert until(lambda: not rt.exists(), 5), f"{rt} is left behind"
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        subprocess.run(["rm", "-rf", str(rt)], check=False)
