"""`rainmaker switch ...`: what can be checked without SSH.

A Tofino inventory whose BFRuntime address is an emulator server on loopback stands
in for a switch that runs: status, tables and registers read it like any switch. On a
Tofino, start and stop run the tofino_sde role through `provision`; here provision is
replaced by a recorder (no SSH in unit tests) to check what the role is asked to do and
how its failures are reported. The real runs are tests/integration/test_tofino_sde.py
(the role with a mock SDE) and tests/integration/test_switch_cli.py (emulated).
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import switchd
from orchestrator.inventory import load
from switch.bfrt.client import Client
from switch.control import RainController, Settings
from switch.emulator.bfrt_server import serve
from switch.emulator.rain import make_store
from tests.cli import rainmaker as run

pytestmark = pytest.mark.timeout(60)


def write_inventory(tmp_path: Path, bfrt: str, kind: str = "tofino") -> Path:
    emulated = kind == "emulated"
    inv = {
        "name": "unit",
        "switch": {
            "name": "sw0",
            "kind": kind,
            "mgmt": {"address": "192.0.2.10"},
            "bfrt": bfrt,
            **({} if emulated else {"sde": "/opt/bf-sde-9.13.0"}),
            "ports": [
                {
                    "port": f"{i}/0",
                    "dev_port": 124 + 8 * i,
                    "speed": "100G",
                    "fec": "rs",
                    **({"iface": f"swp{i}"} if emulated else {}),
                }
                for i in (1, 2)
            ],
        },
        "hosts": [
            {
                "name": n,
                "role": r,
                "mgmt": {"address": f"192.0.2.{20 + i}"},
                "cores": [1],
                "nic": {
                    **({"vdev": "net_af_packet0,iface=data0"} if emulated else {"pci": "0000:3b:00.0"}),
                    "mac": f"0c:42:a1:dd:5f:0{i}",
                    "ip": f"10.10.1.{i}",
                    "switch_port": f"{i}/0",
                },
            }
            for i, (n, r) in enumerate([("client0", "client"), ("worker0", "worker")], start=1)
        ],
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


@pytest.fixture
def switch():
    srv = serve(make_store(), "127.0.0.1", 0)
    yield srv
    srv.stop(None)


@pytest.fixture
def inv_path(tmp_path, switch):
    return write_inventory(tmp_path, f"127.0.0.1:{switch.port}")


@pytest.fixture
def programmed(inv_path, switch):
    inv = load(inv_path)
    with Client(inv.switch.bfrt, "rain") as c:
        ctl = RainController(c, inv, Settings())
        ctl.bring_up_ports()
        ctl.program()
    return inv_path


def test_status_of_a_switch_that_answers(monkeypatch, capsys, programmed):
    code, out, _ = run(monkeypatch, capsys, "switch", "status", "-i", str(programmed))
    assert code == 0
    assert "bf_switchd, a service of the tofino_sde role" in out and "program rain" in out and "2 of 2 up" in out
    assert "1/0 dev_port 132" in out
    code, out, _ = run(monkeypatch, capsys, "switch", "status", "-i", str(programmed), "--json")
    st = json.loads(out)
    assert st["answers"] and st["program"] == "rain" and st["ports"]["140"]["up"] is True


def test_status_of_a_switch_that_does_not_answer(monkeypatch, capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = write_inventory(tmp_path, f"127.0.0.1:{port}")
    code, out, _ = run(monkeypatch, capsys, "switch", "status", "-i", str(path))
    assert code == 1 and "no answer" in out and "did not answer" in out
    # a reader that cannot connect: a SwitchError, reported by main() with its fix
    code, _, err = run(monkeypatch, capsys, "switch", "tables", "-i", str(path))
    assert code == 1 and "error:" in err and "did not answer" in err and "fix:" in err


def test_tables_lists_every_table_with_entries(monkeypatch, capsys, programmed):
    code, out, _ = run(monkeypatch, capsys, "switch", "tables", "-i", str(programmed))
    assert code == 0, out
    assert "program rain" in out
    for t in (
        "pipe.SwitchIngress.forward.forward",
        "pipe.SwitchIngress.dispatch.select_worker",
        "$PORT",
        "$pre.mgid",
        "pipe.SwitchIngress.telemetry.config_int",
    ):
        assert t in out
    assert "10.10.1.2" in out and "0c:42:a1:dd:5f:02" in out  # forward entry in address notation
    assert "default stamp()" in out and "100G" in out and "$FEC" in out
    assert "neg_cap=-131072" in out
    assert "pipe.SwitchIngress.bidir_queue.balance" not in out  # registers are `registers`' job
    # the device's other fixed tables (TM, mirror, ...) and $PORT's other fields: with --all
    assert "tf1.tm.queue.sched_shaping" not in out and "$LOOPBACK_MODE" not in out
    code, out_all, _ = run(monkeypatch, capsys, "switch", "tables", "-i", str(programmed), "--all", "--json")
    every = {t["name"]: t for t in json.loads(out_all)}
    assert code == 0 and {"tf1.tm.queue.sched_shaping", "$mirror.cfg", "$pre.lag"} <= set(every)
    assert "$LOOPBACK_MODE" in every["$PORT"]["entries"][0]["data"]
    code, out, _ = run(monkeypatch, capsys, "switch", "tables", "-i", str(programmed), "--json")
    names = {t["name"] for t in json.loads(out)}
    assert "pipe.SwitchEgress.rdma_writer.build_write" in names


def test_registers_small_fully_big_summarised(monkeypatch, capsys, programmed):
    inv = load(programmed)
    with Client(inv.switch.bfrt, "rain", client_id=3, bind=False) as c:
        c.register("bidir_queue.balance", signed=True).write(0, -2)
        c.counter("events.events").write(4, 2, 128)
    code, out, _ = run(monkeypatch, capsys, "switch", "registers", "-i", str(programmed))
    assert code == 0, out
    assert "pipe.SwitchIngress.bidir_queue.balance [16 x 32 bit]: 0=-2 (others 0)" in out
    assert "pipe.SwitchIngress.queue_entries.data0 [131072 x 8 bit]: not read (queues occupy 2 entries: 0..1)" in out
    assert "EV_TASK_QUEUED=2 pkts/128 B" in out
    assert "queue of slice 0: entries 0..131071 (131072), balance -2 (2 tasks, 0 tokens waiting)" in out
    code, out, _ = run(monkeypatch, capsys, "switch", "registers", "-i", str(programmed), "--json")
    snap = json.loads(out)
    assert snap["queues"]["0"]["tasks"] == 2


class RecordedProvision:
    """Stands in for orchestrator.provision.provision: records each call, returns a report."""

    def __init__(self, changed=(), notes=(), error=None):
        self.calls, self.changed, self.notes, self.error = [], list(changed), list(notes), error

    def __call__(self, inv, **kw):
        from orchestrator.provision import HostCounts, ProvisionReport, TaskChange

        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        return ProvisionReport(
            inv.name,
            False,
            {inv.switch.name: HostCounts(ok=5, changed=len(self.changed))},
            [TaskChange(inv.switch.name, t, "tofino_sde") for t in self.changed],
            [],
            1.0,
            notes={n: [inv.switch.name] for n in self.notes},
        )


def test_start_on_a_tofino_runs_the_role_then_reports_status(monkeypatch, capsys, programmed):
    rec = RecordedProvision(changed=["Start bf_switchd"], notes=["tofino1: bf_switchd serves rain"])
    monkeypatch.setattr("orchestrator.provision.provision", rec)
    code, out, err = run(
        monkeypatch,
        capsys,
        "switch",
        "start",
        "-i",
        str(programmed),
        "--program",
        "rain",
        "--timeout",
        "120",
        "--port-timeout",
        "20",
    )
    assert code == 0, err
    (call,) = rec.calls
    assert call["tags"] == ["tofino_sde"] and call["limit"] == "sw0"
    assert call["extra_vars"] == {
        "tofino_sde_state": "started",
        "tofino_sde_program": "rain",
        "tofino_sde_ready_timeout": 120,
        "tofino_sde_port_timeout": 20,
    }
    assert "· Start bf_switchd" in out and "bf_switchd serves rain" in out
    assert "bf_switchd, a service of the tofino_sde role" in out and "2 of 2 up" in out  # status, over BFRuntime

    rec.calls.clear()
    run(monkeypatch, capsys, "switch", "start", "-i", str(programmed), "--restart")
    assert rec.calls[0]["extra_vars"]["tofino_sde_state"] == "restarted"
    assert "tofino_sde_ready_timeout" not in rec.calls[0]["extra_vars"]  # the role's own default (300 s)


def test_stop_on_a_tofino_runs_only_the_switchd_tasks(monkeypatch, capsys, inv_path):
    rec = RecordedProvision(changed=["Stop bf_switchd", "Stop tofino-model"])
    monkeypatch.setattr("orchestrator.provision.provision", rec)
    code, out, _ = run(monkeypatch, capsys, "switch", "stop", "-i", str(inv_path), "--grace", "7")
    assert code == 0 and "switch sw0: stopped" in out
    assert rec.calls[0]["tags"] == ["switchd"]
    assert rec.calls[0]["extra_vars"] == {
        "tofino_sde_state": "stopped",
        "tofino_sde_program": "rain",
        "tofino_sde_stop_timeout": 7,
    }
    monkeypatch.setattr("orchestrator.provision.provision", RecordedProvision())
    code, out, _ = run(monkeypatch, capsys, "switch", "stop", "-i", str(inv_path))
    assert code == 0 and "switch sw0: not running" in out


def test_a_failed_role_is_reported_with_what_the_switch_lacks(monkeypatch, capsys, inv_path):
    from orchestrator.errors import ProvisionError, TaskFailure
    from orchestrator.provision import ProvisionReport

    why = "missing: the SDE folder /opt/bf-sde-9.13.0 on sw0 ($SDE, switch.sde); fix: install Intel P4 Studio"
    err = ProvisionError(
        "provisioning unit failed on 1 host (sw0)",
        [TaskFailure("sw0", "common : Stop, naming what this host lacks", why)],
    )
    err.report = ProvisionReport(
        "unit", False, {}, [], err.failures, 1.0, missing={"sw0": [why[len("missing: ") :]]}, run_dir=Path("/x")
    )
    monkeypatch.setattr("orchestrator.provision.provision", RecordedProvision(error=err))
    code, _, out_err = run(monkeypatch, capsys, "switch", "start", "-i", str(inv_path))
    assert code == 1
    assert "switch sw0: the tofino_sde role could not start bf_switchd" in out_err
    assert "the SDE folder /opt/bf-sde-9.13.0 on sw0" in out_err and "provide what is missing" in out_err


def test_switch_help_says_what_each_kind_runs(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "switch", "start", "--help")
    assert code == 0
    assert "emulated  run the emulator" in out and "tofino    run the tofino_sde role" in out and "--restart" in out


def test_emulator_command(tmp_path):
    inv = load(write_inventory(tmp_path, "10.79.6.250:50052", kind="emulated"))
    argv = switchd.emulator_argv(inv, "rain", "/srv/run/emulator.log")
    assert argv == [
        sys.executable,
        "-m",
        "switch.emulator",
        "--program",
        "rain",
        "--port",
        "132=swp1:1/0",
        "--port",
        "140=swp2:2/0",
        "--grpc",
        "10.79.6.250:50052",
        "--log",
        "/srv/run/emulator.log",
        "--realtime",
        "20",
    ]


def test_start_refuses_an_unknown_program_naming_the_known_ones(monkeypatch, capsys, tmp_path):
    from switch.emulator.programs import NAMES

    rec = RecordedProvision()
    monkeypatch.setattr("orchestrator.provision.provision", rec)
    for kind in ("tofino", "emulated"):
        path = write_inventory(tmp_path, "127.0.0.1:50052", kind=kind)
        code, _, err = run(monkeypatch, capsys, "switch", "start", "-i", str(path), "--program", "rian")
        assert code == 1, err
        assert "there is no P4 program 'rian'" in err and ", ".join(NAMES) in err and "fix:" in err
    assert rec.calls == []  # refused before the role (or the emulator) ran
    code, out, _ = run(monkeypatch, capsys, "switch", "start", "--help")
    assert all(n in out for n in NAMES)


@pytest.mark.parametrize("program", ["r2p2", "racksched", "draconis", "pallas"])
def test_tables_shows_a_baseline_programs_tables(monkeypatch, capsys, tmp_path, program):
    from switch.control import WorkerRegistration, controller_class
    from switch.emulator.programs import load as load_program

    srv = serve(load_program(program).make_store(), "127.0.0.1", 0)
    try:
        path = write_inventory(tmp_path, f"127.0.0.1:{srv.port}")
        inv = load(path)
        worker = WorkerRegistration("worker0", (0,), "0c:42:a1:dd:5f:02", "10.10.1.2", {0: 0})
        with Client(inv.switch.bfrt, program) as c:
            ctl = controller_class(program)(c, inv)
            ctl.program([worker])
            names = [*ctl.TABLES, "pipe.SwitchIngress.forward.forward"]
        code, out, _ = run(monkeypatch, capsys, "switch", "tables", "-i", str(path), "--json")
        assert code == 0
        shown = {t["name"]: t for t in json.loads(out)}
        assert set(names) <= set(shown) and "$PORT" in shown
        assert any(
            e["data"].get("dmac") == 0x0C42A1DD5F02 for e in shown["pipe.SwitchIngress.forward.forward"]["entries"]
        )
        code, out, _ = run(monkeypatch, capsys, "switch", "tables", "-i", str(path))
        assert code == 0 and f"program {program}" in out and "10.10.1.2" in out
        assert all(n in out for n in names)
    finally:
        srv.stop(None)
