"""Draconis-SW end to end: rain-client and a pulling rain-worker on the two ports of the
emulated Draconis switch (switch/p4/draconis.p4), programmed through BFRuntime. Large
tasks wait in the switch as their header only; the worker FETCHes each payload from
the client through the switch and runs it. Every wait is bounded."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.switch.draconis_setup import SWITCH, Draconis
from tests.switch.harness import SwitchUnderTest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DPDK = REPO / "hosts/dpdk"
WORKER_PORT, CLIENT_PORT, CLIENT_HOST = 1, 2, 3
EAL = ["-l", "0", "--no-huge", "--no-pci", "--no-telemetry", "--log-level=lib.eal:error"]


@pytest.fixture(scope="module")
def dr():
    r = subprocess.run(["make", "-C", str(DPDK)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    with SwitchUnderTest(ports=2, program="draconis", tag="rmdh") as sw:
        d = Draconis(sw)
        d.reset()
        d.route(WORKER_PORT, CLIENT_PORT)
        d.capacity(64)
        d.client_host(CLIENT_HOST, CLIENT_PORT)
        yield d


def dpdk(sw: SwitchUnderTest, binary: str, port: int, prefix: str, args: list[str]) -> list[str]:
    side = sw.side(port)
    return [
        "ip",
        "netns",
        "exec",
        side.netns,
        str(DPDK / "build" / binary),
        *EAL,
        f"--file-prefix={prefix}",
        f"--vdev=net_af_packet0,iface={side.iface}",
        "--",
        *args,
    ]


def wait_line(proc: subprocess.Popen, text: str, timeout: float) -> None:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0 and sel.select(left):
            line = proc.stdout.readline()
            if not line or text in line:
                if text in line:
                    return
                break
    proc.kill()
    raise AssertionError(f"no {text!r}: {proc.communicate(timeout=5)}")


def test_large_tasks_are_fetched_through_the_switch(dr, tmp_path):
    sw = dr.sw
    wprefix, cprefix = f"rmdh-w-{os.getpid()}", f"rmdh-c-{os.getpid()}"
    stats = tmp_path / "worker.stats.json"
    worker = subprocess.Popen(
        dpdk(
            sw,
            "rain-worker",
            WORKER_PORT,
            wprefix,
            ["--switch-mac", SWITCH.mac, "--switch-ip", SWITCH.ip, "--src-ip", sw.side(WORKER_PORT).ip]
            + ["--threads", "1", "--mode", "pull", "--handler", "digest", "--fetch-timeout", "300000000"]
            + ["--stats", str(stats), "--stats-period", "0.1"],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_line(worker, "rain-worker ready", 20)
        out = tmp_path / "client"
        client = subprocess.run(
            dpdk(
                sw,
                "rain-client",
                CLIENT_PORT,
                cprefix,
                ["--src-ip", sw.side(CLIENT_PORT).ip, "--dst-mac", SWITCH.mac, "--dst-ip", SWITCH.ip]
                + ["--client-id", str(CLIENT_HOST), "--out", str(out), "--warmup", "0", "--timeout-us", "3000000"]
                + ["--rate", "100", "--duration", "1", "--large-fraction", "0.5", "--large-bytes", "400"],
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert client.returncode == 0, client.stderr
        s = json.loads((out / "summary.json").read_text())
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=15)
        for p in (wprefix, cprefix):
            shutil.rmtree(f"/var/run/dpdk/{p}", ignore_errors=True)
    t, run = s["totals"], s["run"]
    assert t["sent"] > 50 and t["large"] > 10
    assert t["received"] == t["sent"] and t["failed"] == t["timed_out"] == t["lost"] == 0, (t, run, stats.read_text())
    # every large task was fetched once, through the switch, and ran from its payload
    assert (run["fetches"], run["fetch_unknown"], run["fetch_dropped"]) == (t["large"], 0, 0)
    w = json.loads(stats.read_text())
    assert w["final"] is True and w["drops_total"] == 0
    ws = w["workers"][0]
    assert ws["tasks_done"] == t["sent"] and ws["failed"] == 0
    assert ws["fetches"] == ws["fetch_replies"] == t["large"]
    assert ws["fetch_timeouts"] == ws["fetch_stale"] == ws["fetch_bad"] == 0
    assert dr.event("DISPATCH_QUEUED") == t["sent"]
    # forwarded by IP: each large task's FETCH and FETCH_REPLY, and every RESPONSE
    assert dr.event("FORWARDED") == 2 * t["large"] + t["sent"]
    assert dr.event("BAD_RAIN") == dr.event("PARSER_ERROR") == 0
