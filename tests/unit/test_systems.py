"""The systems' registry (orchestrator/systems) agrees with every place a system lives:
its P4 program, the emulator and the controller for it, the simulator's C policy, the
worker's mode and its packet test (docs/adding-a-system.md). And what the run, the
planner and the simulator read from a declaration is what they did before it existed."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from hosts.agent.rpc import APPLICATIONS
from orchestrator.errors import UsageError
from orchestrator.experiment.spec import SYSTEMS as SPEC_SYSTEMS
from orchestrator.experiment.spec import Spec
from orchestrator.simulate.policies import POLICIES
from orchestrator.systems import BASELINE_QUEUE, SYSTEMS, get
from switch.control.registry import controller_class
from switch.emulator.programs import NAMES as EMULATED

REPO = Path(__file__).resolve().parents[2]
WORKER_MODES = set(re.findall(r'\.name = "([a-z]+)"', (REPO / "hosts/dpdk/worker/modes.c").read_text()))
SERVER_MODES = set(
    re.findall(r'"([a-z-]+)"', re.search(r"mode_names\[\] = \{([^}]*)\}", (REPO / "hosts/rpc/server.c").read_text())[1])
)


def _spec(systems: list[str]) -> Spec:
    return Spec.model_validate(
        {
            "name": "registry",
            "systems": systems,
            "workload": {"classes": [{"name": "t", "service": {"dist": "exponential", "mean_us": 10}}]},
            "load": {"capacity_fraction": [0.5]},
        }
    )


INV = SimpleNamespace(switch=SimpleNamespace(service_mac="02:00:00:00:00:fe", service_ip="10.0.0.254"))


SWITCH = [n for n, s in SYSTEMS.items() if not s.server_side]
# rpc-server's modes; memcached is a real server in rpc-server's place (hosts/agent/rpc.py)
SERVER = [n for n, s in SYSTEMS.items() if s.server_side and s.server_mode not in APPLICATIONS]


@pytest.mark.parametrize("name", SWITCH)
def test_every_system_has_its_program_controller_policy_mode_and_packet_test(name):
    s = SYSTEMS[name]
    p4 = REPO / "switch" / "p4" / f"{s.program}.p4"
    assert p4.exists() and re.search(r"^\s*Switch\s*\(", p4.read_text(), re.M), f"{p4}: a TNA program"
    assert s.program in EMULATED, "the emulator serves it (switch/emulator/programs.py)"
    assert controller_class(s.program).PROGRAM == s.program
    assert s.policy.name in POLICIES
    from orchestrator.simulate.engine import core_policies

    assert s.policy.name in core_policies(), "the C core registers its policy (simulate/core/sim.c)"
    assert s.worker_mode in WORKER_MODES, f"rain-worker --mode {s.worker_mode} (hosts/dpdk/worker/modes.c)"
    assert (REPO / "tests" / "switch" / f"test_{s.program}.py").exists(), "its packet tests"
    assert s.params_block in ("rain", "baseline")
    settings = s.settings(_spec([name]), {}, INV)
    assert type(settings).__name__ == ("Settings" if s.params_block == "rain" else "BaselineSettings")


@pytest.mark.parametrize("name", SERVER)
def test_every_server_side_system_has_its_c_policy_and_reads_the_rpc_block(name):
    """Rakaia's family: no switch program, controller or worker mode; a C policy of the
    core (in rpc.h's family of files) whose numbers come from the spec's `rpc:` block."""
    from orchestrator.simulate.engine import core_policies

    s = SYSTEMS[name]
    assert s.program is None and s.worker_mode is None and s.settings is None
    assert s.policy.name in POLICIES and s.policy.name in core_policies()
    sources = (REPO / "orchestrator/simulate/core").glob("policy_*.c")
    assert any(f'.name = "{name}"' in f.read_text() and '#include "rpc.h"' in f.read_text() for f in sources)
    assert s.params_block == "rpc" and s.paper == "Rakaia"
    assert s.server_mode in SERVER_MODES, f"rpc-server --mode {s.server_mode} (hosts/rpc/server.c)"
    assert s.policy.params({"connections": 80, "spread": "zipf", "zipf_s": 1.2}) == [80.0, 1.2]
    assert s.policy.params({"connections": 5000, "spread": "uniform"}) == [5000.0, 0.0]


def test_memcached_is_served_by_the_application_and_claims_no_model():
    """memcached's own threads serve it: the agent runs Debian's memcached in rpc-server's
    place, and no model stands beside its points (its service time is its own)."""
    s = get("memcached")
    assert s.server_side and s.server_mode == "memcached" and s.server_mode in APPLICATIONS
    assert s.server_mode not in SERVER_MODES, "not one of rpc-server's modes"
    assert "own service time" in s.not_applicable["model_agreement"]
    assert s.params_block == "rpc" and s.paper == "Rakaia"


def test_a_spec_runs_one_kind_of_system(tmp_path):
    from orchestrator.experiment.spec import load

    f = tmp_path / "mixed.yaml"
    f.write_text(
        "name: mixed\nsystems: [rain, ms]\nload: {capacity_fraction: [0.5]}\n"
        "workload: {classes: [{name: t, service: {dist: exponential, mean_us: 10}}]}\n"
    )
    with pytest.raises(UsageError) as e:
        load(f)
    text = e.value.render()
    assert "rain schedules in the switch, ms inside one server" in text and "mixed.yaml" in text
    assert _spec(["ms", "rakaia"]).needs() == {"rpc"}


def test_the_spec_accepts_exactly_the_registered_systems():
    assert tuple(SPEC_SYSTEMS) == tuple(SYSTEMS)
    with pytest.raises(UsageError) as e:
        get("shinjuku")
    assert "no system 'shinjuku'" in e.value.render() and "use one of rain, r2p2" in e.value.render()


def test_the_admission_caps_are_the_papers():
    # Rain (section 4): its own switch queue and each worker thread's quota; a baseline: a
    # switch queue of BASELINE_QUEUE and its bound per worker thread (JBSQ(n) for R2P2-SW).
    assert get("rain").admission_cap(300, 8, {"initial_quota": 3}) == 300 + 24
    assert get("r2p2").admission_cap(300, 8, {"jbsq_n": 2}) == BASELINE_QUEUE + 16
    for name in ("racksched", "draconis", "pallas"):
        assert get(name).admission_cap(300, 8, {}) == BASELINE_QUEUE + 8
    assert get("draconis").queue_capacity == BASELINE_QUEUE and get("rain").queue_capacity is None


def test_what_a_run_reads_of_each_system():
    assert {n: s.worker_mode for n, s in SYSTEMS.items() if not s.server_side} == {
        "rain": "rain", "r2p2": "report", "racksched": "report", "draconis": "pull", "pallas": "push",
    }  # fmt: skip
    assert [n for n, s in SYSTEMS.items() if s.fetches_payloads] == ["rain", "draconis"]
    assert [n for n, s in SYSTEMS.items() if s.tokens_first] == ["rain"]
    assert get("r2p2").emulator_args(100.0) == ["--recirc-delay-us", "100"]
    assert all(not s.emulator_args(100.0) for n, s in SYSTEMS.items() if n != "r2p2")
    r2p2 = get("r2p2").settings(_spec(["r2p2"]), {"jbsq_n": 3}, INV)
    assert r2p2.jbsq_n == 3
    pallas = get("pallas").settings(_spec(["pallas"]), {}, INV)
    assert [list(p.task_types) for p in pallas.pools.values()] == [[0]]


def test_a_check_a_system_declares_not_applicable_is_not_run_and_says_why(tmp_path, monkeypatch):
    from dataclasses import replace

    from orchestrator import systems
    from orchestrator.experiment.layout import RunDir
    from orchestrator.experiment.validity import check_point
    from tests.unit.results_fixture import synthetic_run

    pd = next(iter(RunDir(synthetic_run(tmp_path)).points()))
    point = pd.read_point() | {"status": "done"}
    before = {c.name: c for c in check_point(pd.path, point, write=False).checks}
    ran = next(n for n, c in before.items() if c.passed is not None)
    monkeypatch.setitem(
        systems.SYSTEMS, point["system"], replace(SYSTEMS[point["system"]], not_applicable={ran: "why"})
    )
    after = {c.name: c for c in check_point(pd.path, point, write=False).checks}
    assert after[ran].passed is None and after[ran].message == "not run: why"
    assert {n: c for n, c in after.items() if n != ran} == {n: c for n, c in before.items() if n != ran}
