"""The load generators' agents' CPU wake-up latency request (hosts/agent/common.py,
WakeLatency; rain-client's agent and rpc-client's hold it): held from the load's start
to the client's end, so that a VM's idle CPUs poll instead of halting; the request is
the open file itself."""

from __future__ import annotations

import os
import struct

from hosts.agent import common as client


def test_the_request_is_written_and_lasts_while_the_file_is_open(tmp_path, monkeypatch):
    dev = tmp_path / "cpu_dma_latency"
    dev.write_bytes(b"")
    monkeypatch.setattr(client, "CPU_LATENCY", str(dev))
    wake = client.WakeLatency()
    assert wake.hold(0) == "held at 0 us"
    assert struct.unpack("i", dev.read_bytes()) == (0,)  # the kernel's format: a 32-bit integer
    fd = wake.fd
    assert wake.hold(0) == "held"  # one request, not two
    wake.release()
    assert wake.fd is None
    try:
        os.fstat(fd)
    except OSError:
        pass  # closed: the kernel drops the request with the file
    else:
        raise AssertionError("the request's file is still open")


def test_a_machine_without_the_device_says_why_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(client, "CPU_LATENCY", str(tmp_path / "missing"))
    wake = client.WakeLatency()
    said = wake.hold(0)
    assert said.startswith("not held:") and "missing" in said and wake.fd is None
    wake.release()  # nothing to release: no error
