"""The tofino_sde role's templates, its tags, the bringup CLI, and the mock SDE's checks.

Templates are rendered by Ansible's own template lookup (as the role renders them), with
the variables the inventory export gives the switch plus the role's defaults, so the conf
file bf_switchd reads, the systemd units and the "missing" report are checked as written.
The bringup CLI runs against the emulator's BFRuntime server on loopback. The end-to-end
role (converge, verify, idempotence, switch start/stop) is tests/integration/test_tofino_sde.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.inventory import load
from orchestrator.inventory.ansible import export
from switch.control import bringup
from switch.emulator.bfrt_server import serve
from switch.emulator.rain import PROGRAM, make_store
from switch.emulator.schema import layout
from tests.mock_sde import PROGRAMS as MOCK_PROGRAMS
from tests.mock_sde import TREE as MOCK_TREE
from tests.mock_sde import install as install_mock

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "playbooks/roles/tofino_sde"
BDF = "0000:05:00.0"
SYSFS = "/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0"


# -- rendering the role's templates the way the role does ------------------------------


def _trusted(obj):
    from ansible.template import trust_as_template

    if isinstance(obj, str):
        return trust_as_template(obj)
    if isinstance(obj, dict):
        return {k: _trusted(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_trusted(v) for v in obj]
    return obj


def inventory(tmp_path: Path, **switch) -> dict:
    data = {
        "name": "rack1",
        "switch": {
            "name": "tofino1",
            "kind": "tofino",
            "mgmt": {"address": "192.0.2.10"},
            "bfrt": "192.0.2.10:50052",
            "sde": "/opt/bf-sde-9.13.0",
            "sde_version": "9.13.0",
            "ports": [{"port": "1/0", "dev_port": 132, "fec": "rs"}, {"port": "2/0", "dev_port": 140, "fec": "rs"}],
        },
        "hosts": [
            {
                "name": n,
                "role": r,
                "mgmt": {"address": f"192.0.2.{20 + i}"},
                "cores": [2],
                "nic": {
                    "pci": "0000:3b:00.0",
                    "mac": f"0c:42:a1:dd:5f:0{i}",
                    "ip": f"10.10.1.{i}",
                    "switch_port": f"{i}/0",
                },
            }
            for i, (n, r) in enumerate([("client0", "client"), ("worker0", "worker")], start=1)
        ],
    }
    data["switch"].update(switch)
    if data["switch"].get("target") == "model":
        for i, p in enumerate(data["switch"]["ports"], start=1):
            p["iface"] = f"veth{2 * i}"
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return export(load(path))["all"]


def found(**over) -> dict:
    """What the role's inspect command reports on a switch that has everything."""
    f = {
        "sde": "yes",
        "install": "yes",
        "switchd": "yes",
        "model": "yes",
        "compiler": "/opt/bf-sde-9.13.0/install/bin/bf-p4c",
        "version": "9.13.0",
        "version_from": "/opt/bf-sde-9.13.0/bf-sde-9.13.0.manifest",
        "module_loaded": "yes",
        "module_ko": "yes",
        "module_loader": "yes",
        "agent": "yes",
        "sds_fw": "yes",
        "systemd": "yes",
    }
    f.update(over)
    return f


def render(template: str, tmp_path: Path, *, switch: dict | None = None, facts: dict | None = None, **extra):
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template

    init_plugin_loader()
    exported = inventory(tmp_path, **(switch or {}))
    variables = dict(exported["vars"])
    variables.update(exported["children"]["switch"]["hosts"]["tofino1"])
    variables.update(_trusted(yaml.safe_load((ROLE / "defaults/main.yml").read_text())))
    variables.update(
        inventory_hostname="tofino1",
        playbook_dir=str(REPO / "playbooks"),
        role_path=str(ROLE),
        tofino_sde_asic_bdf=BDF,
        tofino_sde_asic_sysfs=SYSFS,
        tofino_sde_asics=[f"{BDF} {SYSFS}"],
        tofino_sde_ifaces_missing=[],
        tofino_sde_found=found(),
        tofino_sde_bin_name="tofino.bin",
    )
    variables.update(facts or {})
    variables.update(extra)
    loader = DataLoader()
    loader.set_basedir(str(ROLE))
    return Templar(loader=loader, variables=variables).template(
        trust_as_template(f"{{{{ lookup('ansible.builtin.template', '{template}') }}}}")
    )


def test_conf_for_an_asic_names_its_pci_device_firmware_and_platform_agent(tmp_path):
    conf = json.loads(render("bf_switchd.conf.j2", tmp_path))
    (chip,) = conf["chip_list"]
    assert chip == {
        "chip_family": "tofino",
        "instance": 0,
        "sds_fw_path": "share/tofino_sds_fw/avago/firmware",
        "pcie_sysfs_prefix": SYSFS,
        "pcie_domain": 0,
        "pcie_bus": 5,
        "pcie_dev": 0,
        "pcie_fn": 0,
        "pcie_int_mode": 1,
    }
    (dev,) = conf["p4_devices"]
    assert dev["device-id"] == 0 and dev["agent0"] == "lib/libpltfm_mgr.so"
    (prog,) = dev["p4_programs"]
    assert prog["program-name"] == "rain" and prog["bfrt-config"] == "share/tofinopd/rain/bf-rt.json"
    assert prog["p4_pipelines"] == [
        {
            "p4_pipeline_name": "pipe",
            "context": "share/tofinopd/rain/pipe/context.json",
            "config": "share/tofinopd/rain/pipe/tofino.bin",
            "pipe_scope": [0, 1, 2, 3],
            "path": "share/tofinopd/rain",
        }
    ]


def test_conf_pci_fields_come_from_the_address_in_hex(tmp_path):
    conf = json.loads(render("bf_switchd.conf.j2", tmp_path, tofino_sde_asic_bdf="0001:af:1f.3"))
    chip = conf["chip_list"][0]
    assert (chip["pcie_domain"], chip["pcie_bus"], chip["pcie_dev"], chip["pcie_fn"]) == (1, 0xAF, 0x1F, 3)


def test_conf_for_tofino_model_has_no_pci_firmware_or_agent(tmp_path):
    conf = json.loads(render("bf_switchd.conf.j2", tmp_path, switch={"target": "model"}))
    assert conf["chip_list"] == [{"chip_family": "tofino", "instance": 0}]
    assert "agent0" not in conf["p4_devices"][0]


def test_conf_for_tofino2_and_another_program(tmp_path):
    conf = json.loads(render("bf_switchd.conf.j2", tmp_path, switch={"chip": "tofino2"}, tofino_sde_program="r2p2"))
    assert conf["chip_list"][0]["chip_family"] == "tofino2"
    prog = conf["p4_devices"][0]["p4_programs"][0]
    assert prog["program-name"] == "r2p2" and prog["bfrt-config"] == "share/tofino2pd/r2p2/bf-rt.json"
    assert prog["p4_pipelines"][0]["config"] == "share/tofino2pd/r2p2/pipe/tofino2.bin"


def test_conf_bsp_less_has_no_agent(tmp_path):
    conf = json.loads(render("bf_switchd.conf.j2", tmp_path, tofino_sde_platform_agent=""))
    assert "agent0" not in conf["p4_devices"][0] and "pcie_sysfs_prefix" in conf["chip_list"][0]


def test_model_port_file_maps_dev_ports_to_the_inventory_interfaces(tmp_path):
    ports = json.loads(render("model_ports.json.j2", tmp_path, switch={"target": "model"}))
    assert ports == {"PortToIf": [{"device_port": 132, "if": "veth2"}, {"device_port": 140, "if": "veth4"}]}


def test_unit_quotes_words_for_systemd(tmp_path):
    unit = {
        "description": "bf_switchd (rainmaker)",
        "argv": ["/opt/sde/install/bin/bf_switchd", "--x=$HOME", "50%"],
        "log": "/opt/rainmaker/log/bf_switchd.log",
        "after": ["rainmaker-tofino-model.service"],
        "requires": ["rainmaker-tofino-model.service"],
        "pre": [
            [
                "/bin/sh",
                "-c",
                "[ -d /sys/module/bf_kdrv ] || exec /opt/sde/install/bin/bf_kdrv_mod_load /opt/sde/install",
            ]
        ],
    }
    text = render(
        "unit.service.j2",
        tmp_path,
        tofino_sde_unit=unit,
        tofino_sde_env={"SDE": "/opt/sde", "SDE_INSTALL": "/opt/sde/install"},
    )
    lines = text.splitlines()
    assert 'ExecStart="/opt/sde/install/bin/bf_switchd" "--x=$$HOME" "50%%"' in lines
    assert (
        'ExecStartPre="/bin/sh" "-c" "[ -d /sys/module/bf_kdrv ] || exec /opt/sde/install/bin/bf_kdrv_mod_load '
        '/opt/sde/install"'
    ) in lines
    assert "After=network-online.target rainmaker-tofino-model.service" in lines
    assert "Requires=rainmaker-tofino-model.service" in lines
    assert 'Environment="SDE=/opt/sde"' in lines and 'Environment="SDE_INSTALL=/opt/sde/install"' in lines
    assert "StandardOutput=append:/opt/rainmaker/log/bf_switchd.log" in lines
    assert "WorkingDirectory=/opt/rainmaker/run" in lines and "WantedBy=multi-user.target" in lines
    # every line is a section, a key=value, a comment or blank: nothing ran together
    assert all(not ln or ln.startswith(("[", "#")) or "=" in ln for ln in lines)


# -- what a switch lacks -----------------------------------------------------------------


def missing(tmp_path, switch=None, **facts) -> list[str]:
    return json.loads(render("missing.j2", tmp_path, switch=switch, facts=facts))


def test_nothing_missing_on_a_complete_switch(tmp_path):
    assert missing(tmp_path) == []
    assert missing(tmp_path, switch={"target": "model"}) == []


def test_no_sde_no_asic_no_module(tmp_path):
    items = missing(
        tmp_path,
        tofino_sde_found=found(
            sde="no", install="no", switchd="no", compiler="none", version="unknown", module_loaded="no", module_ko="no"
        ),
        tofino_sde_asics=[],
    )
    assert len(items) == 4, items
    sde, inst, asic, module = items
    assert sde.startswith("the SDE folder /opt/bf-sde-9.13.0 on tofino1") and "p4studio" in sde
    assert inst.startswith("the SDE install folder /opt/bf-sde-9.13.0/install")
    assert asic.startswith("a Tofino ASIC on PCI (no device of vendor 0x1d1c") and "switch.target: model" in asic
    assert module.startswith("the kernel module bf_kdrv (not loaded")
    assert all("; fix: " in i for i in items)


def test_sde_without_driver_compiler_bsp_and_module(tmp_path):
    items = missing(
        tmp_path,
        tofino_sde_found=found(
            switchd="no", compiler="none", agent="no", module_loaded="no", module_ko="no", sds_fw="no"
        ),
    )
    text = "\n".join(items)
    assert "bf_switchd (/opt/bf-sde-9.13.0/install/bin/bf_switchd)" in text
    assert "a Tofino P4 compiler (/opt/bf-sde-9.13.0/install/bin/bf-p4c or p4c)" in text
    assert "lib/modules/bf_kdrv.ko with bin/bf_kdrv_mod_load" in text
    assert "libpltfm_mgr.so (the board's BSP" in text and 'tofino_sde_platform_agent: ""' in text
    assert "serdes firmware" in text
    assert len(items) == 5


def test_a_module_that_is_loaded_or_none_is_not_missing(tmp_path):
    assert missing(tmp_path, tofino_sde_found=found(module_ko="no", module_loader="no")) == []
    assert (
        missing(
            tmp_path,
            switch={"kernel_module": "none"},
            tofino_sde_found={k: v for k, v in found(module_loaded="no").items() if not k.startswith("module")},
        )
        == []
    )


def test_sde_version_mismatch_and_unknown(tmp_path):
    (item,) = missing(tmp_path, tofino_sde_found=found(version="9.11.1"))
    assert item.startswith("SDE 9.13.0 (switch.sde_version): tofino1 has SDE 9.11.1")
    assert 'set switch.sde_version: "9.11.1"' in item
    (item,) = missing(
        tmp_path, tofino_sde_found=found(version="unknown", version_from="nothing (no manifest, no compiler)")
    )
    assert "cannot be told from nothing (no manifest, no compiler)" in item
    assert missing(tmp_path, switch={"sde_version": None}, tofino_sde_found=found(version="9.11.1")) == []


def test_model_without_tofino_model_or_interfaces(tmp_path):
    items = missing(
        tmp_path, switch={"target": "model"}, tofino_sde_found=found(model="no"), tofino_sde_ifaces_missing=["veth4"]
    )
    assert len(items) == 2
    assert items[0].startswith("tofino-model (/opt/bf-sde-9.13.0/install/bin/tofino-model)")
    assert items[1].startswith("the interface veth4 on tofino1") and "veth_setup.sh" in items[1]


# -- the role's layout and tags -----------------------------------------------------------


def test_role_layout_and_defaults():
    for part in ("defaults/main.yml", "meta/main.yml", "tasks/main.yml", "tasks/verify.yml"):
        assert (ROLE / part).is_file(), part
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert all(k.startswith("tofino_sde_") for k in defaults)
    assert defaults["tofino_sde_state"] == "started"
    assert yaml.safe_load((ROLE / "meta/main.yml").read_text())["galaxy_info"]["role_name"] == "tofino_sde"


def _ansible_playbook(tmp_path, *args: str) -> subprocess.CompletedProcess:
    from orchestrator.provision import ansible_env

    work = tmp_path / "work"
    for sub in ("home", "tmp", "cp"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    (work / "ansible.cfg").write_text("[defaults]\n")
    exe = str(Path(sys.executable).parent / "ansible-playbook")
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, env={**os.environ, **ansible_env(work)}, timeout=100
    )


def test_switchd_tag_selects_the_service_tasks_only(tmp_path):
    """`rainmaker switch stop` runs `--tags switchd`: inspect, start/stop, readiness; no build.
    A Tofino's tasks are an include (tasks/tofino.yml), which --list-tasks does not open:
    the include must carry the tag, and the file's own tasks are listed through a play
    that imports it as the role's."""
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": inventory(tmp_path)}))
    r = _ansible_playbook(
        tmp_path, "-i", str(path), "--list-tasks", "--tags", "switchd", str(REPO / "playbooks/switch.yml")
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tofino_sde : Install and run a Tofino's software" in r.stdout
    assert "Install the base packages" not in r.stdout and "Raise the huge page pool" not in r.stdout
    play = tmp_path / "tofino.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "A Tofino's tasks",
                    "hosts": "switch",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "The role's include",
                            "ansible.builtin.import_role": {"name": "tofino_sde", "tasks_from": "tofino"},
                        }
                    ],
                }
            ]
        )
    )
    r = _ansible_playbook(tmp_path, "-i", str(path), "--list-tasks", "--tags", "switchd", str(play))
    assert r.returncode == 0, r.stdout + r.stderr
    tasks = r.stdout
    for task in (
        "Inspect the SDE, the compiler",
        "Stop bf_switchd",
        "Start tofino-model",
        "Start bf_switchd",
        "Wait until bf_switchd answers on BFRuntime",
        "Check the program and bring the ports up",
    ):
        assert task in tasks, task
    for task in (
        "Compile the program",
        "Install the program",
        "Copy the P4 sources",
    ):
        assert task not in tasks, task
    r = _ansible_playbook(tmp_path, "-i", str(path), "--list-tags", str(REPO / "playbooks/switch.yml"))
    assert "switchd" in r.stdout and "tofino_sde" in r.stdout and "hugepages" in r.stdout


# -- the bringup CLI: arguments ---------------------------------------------------------------

PORTS = [{"port": "1/0", "dev_port": 132, "speed": "100G", "fec": "rs"}, {"port": "2/0", "dev_port": 140}]


def bringup_args(**over) -> list[str]:
    args = {"--bfrt": "127.0.0.1:50052", "--program": "rain", "--ports": json.dumps(PORTS)}
    args.update(over)
    return [x for k, v in args.items() if v is not None for x in (k, v)]


def test_bringup_parses_the_inventory_ports():
    args = bringup.parse_args(bringup_args())
    assert [(p.name, p.dev_port, p.speed, p.fec, p.autoneg) for p in args.ports] == [
        ("1/0", 132, "100G", "rs", "default"),
        ("2/0", 140, "100G", "none", "default"),
    ]
    assert args.timeout == 60 and not args.verify
    # the export's port dicts (with iface and autoneg) are taken as they are
    full = [{"port": "3/0", "dev_port": 148, "speed": "25G", "fec": "fc", "autoneg": "disable", "iface": None}]
    (p,) = bringup.parse_args(bringup_args(**{"--ports": json.dumps(full)})).ports
    assert (p.speed, p.fec, p.autoneg) == ("25G", "fc", "disable")


@pytest.mark.parametrize(
    "over, message",
    [
        ({"--bfrt": "switch"}, "--bfrt 'switch' is not HOST:PORT"),
        ({"--bfrt": "h:99999"}, "is not HOST:PORT"),
        ({"--program": "Rain!"}, "is not a P4 program name"),
        ({"--ports": "[{"}, "--ports is not JSON"),
        ({"--ports": "[]"}, "non-empty JSON list"),
        ({"--ports": '{"port": "1/0"}'}, "non-empty JSON list"),
        ({"--ports": "[3]"}, "--ports[0] is int"),
        ({"--ports": '[{"port": "1/0", "dev_port": 1, "sped": "100G"}]'}, "unknown key(s) sped"),
        ({"--ports": '[{"port": "1/0"}]'}, "--ports[0] has no 'dev_port'"),
        ({"--ports": '[{"port": "1-0", "dev_port": 1}]'}, "is not a front-panel port name"),
        ({"--ports": '[{"port": "1/0", "dev_port": 512}]'}, "dev_port 512 is not an integer from 0 to 511"),
        ({"--ports": '[{"port": "1/0", "dev_port": true}]'}, "dev_port True is not an integer"),
        ({"--ports": '[{"port": "1/0", "dev_port": 1, "speed": "100g"}]'}, "speed '100g' is not one of"),
        ({"--ports": '[{"port": "1/0", "dev_port": 1, "fec": "reed"}]'}, "fec 'reed' is not one of none, fc, rs"),
        ({"--ports": '[{"port": "1/0", "dev_port": 1, "autoneg": "on"}]'}, "autoneg 'on' is not one of"),
        (
            {"--ports": '[{"port": "1/0", "dev_port": 1}, {"port": "2/0", "dev_port": 1}]'},
            "(port 2/0): dev_port 1 is also port 1/0",
        ),
        ({"--timeout": "0"}, "--timeout 0 must be more than 0"),
        ({"--connect-timeout": "-1"}, "--connect-timeout -1 must be more than 0"),
        ({"--program": None}, "the following arguments are required: --program"),
    ],
)
def test_bringup_refuses_bad_arguments(capsys, over, message):
    with pytest.raises(SystemExit) as e:
        bringup.parse_args(bringup_args(**over))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert "usage: python -m switch.control.bringup" in err


# -- the bringup CLI against a BFRuntime server ----------------------------------------------


@pytest.fixture
def bfrt_server():
    srv = serve(make_store(), "127.0.0.1", 0)
    yield f"127.0.0.1:{srv.port}"
    srv.stop(None)


def run_bringup(capsys, *args: str) -> tuple[int, dict, str]:
    code = bringup.main(list(args))
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_bringup_brings_ports_up_then_changes_nothing(capsys, bfrt_server):
    args = bringup_args(**{"--bfrt": bfrt_server, "--timeout": "5"})
    code, report, _ = run_bringup(capsys, *args)
    assert code == 0 and report["ok"] and report["program"] == "rain" and report["bound"] and report["changed"]
    assert report["ports"]["132"] == {
        "name": "1/0",
        "speed": "BF_SPEED_100G",
        "fec": "BF_FEC_TYP_REED_SOLOMON",
        "enabled": True,
        "up": True,
    }
    assert report["ports"]["140"]["fec"] == "BF_FEC_TYP_NONE" and report["ports"]["140"]["up"]
    code, report, _ = run_bringup(capsys, *args)
    assert code == 0 and report["changed"] is False  # already as asked: nothing written
    # a changed FEC is written again
    ports = [dict(PORTS[0], fec="none"), PORTS[1]]
    code, report, _ = run_bringup(capsys, *bringup_args(**{"--bfrt": bfrt_server, "--ports": json.dumps(ports)}))
    assert code == 0 and report["changed"] and report["ports"]["132"]["fec"] == "BF_FEC_TYP_NONE"
    code, report, _ = run_bringup(capsys, *args, "--verify")
    assert code == 0 and report["ok"] and not report["bound"]


def test_bringup_names_a_program_the_switch_does_not_serve(capsys, bfrt_server):
    code, report, err = run_bringup(capsys, *bringup_args(**{"--bfrt": bfrt_server, "--program": "r2p2"}))
    assert code == 1 and not report["ok"]
    assert "does not run 'r2p2'" in report["error"] and "['rain']" in report["error"]
    assert err.startswith("error: ")


def test_bringup_verify_names_the_ports_that_are_not_up(capsys, bfrt_server):
    run_bringup(capsys, *bringup_args(**{"--bfrt": bfrt_server, "--ports": json.dumps(PORTS[:1])}))
    code, report, err = run_bringup(capsys, *bringup_args(**{"--bfrt": bfrt_server}), "--verify")
    assert code == 1 and report["down"] == [140]
    assert "1 port(s) not up now: 2/0 (dev_port 140, 100G fec none autoneg default: not added)" in report["error"]
    assert "speed and fec" in report["fix"] and "autoneg" in report["fix"] and "fix:" in err


def test_bringup_when_nothing_answers(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, report, _ = run_bringup(capsys, *bringup_args(**{"--bfrt": f"127.0.0.1:{port}", "--connect-timeout": "0.5"}))
    assert code == 1 and "did not answer within 0.5 s" in report["error"]


# -- the mock SDE (tests only) ----------------------------------------------------------------


def test_every_mock_file_says_it_is_a_mock():
    files = [p for p in MOCK_TREE.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {*MOCK_PROGRAMS, "bf-sde-9.13.0.manifest"}
    for p in files:
        head = "".join(p.read_text().splitlines(keepends=True)[:3])
        assert "MOCK" in head, p


@pytest.fixture(scope="module")
def mock_sde(tmp_path_factory):
    root = tmp_path_factory.mktemp("mock")
    return install_mock(root, grpc="127.0.0.1:1")


def mock_compile(mock_sde: Path, src: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(mock_sde / "install/bin/bf-p4c"), *args], cwd=src, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def p4_copy(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in (REPO / "switch/p4").glob("*.p4"):
        (src / f.name).write_text(f.read_text())
    return src


def test_mock_compiler_writes_the_emulators_schema(mock_sde, p4_copy, tmp_path):
    out = tmp_path / "out"
    r = mock_compile(
        mock_sde,
        p4_copy,
        "--std",
        "p4-16",
        "--target",
        "tofino",
        "--arch",
        "tna",
        "--bf-rt-schema",
        str(out / "bf-rt.json"),
        "-o",
        str(out),
        "-g",
        "rain.p4",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "bf-rt.json").read_text()) == layout(PROGRAM).p4_json()
    context = json.loads((out / "pipe/context.json").read_text())
    assert context["program_name"] == "rain" and "MOCK" in context["mock"] and context["compiler_version"] == "9.13.0"
    assert (out / "pipe/tofino.bin").read_bytes().startswith(b"MOCK")
    assert "9.13.0" in mock_compile(mock_sde, p4_copy, "--version").stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target", "tofino", "--arch", "t2na", "rain.p4"], "--arch 't2na' does not fit --target tofino"),
        (["--target", "tofino3", "--arch", "tna", "rain.p4"], "--target 'tofino3'"),
        (["--target", "tofino", "--arch", "tna", "--std", "p4-14", "rain.p4"], "P4-16 only"),
        (["--target", "tofino", "--arch", "tna", "nosuch.p4"], "nosuch.p4: No such file"),
        (["--target", "tofino", "--arch", "tna", "--frobnicate", "rain.p4"], "unrecognized option '--frobnicate'"),
        (["--target", "tofino", "--arch", "tna", "headers.p4"], "there is none called 'headers'"),
    ],
)
def test_mock_compiler_refuses_what_bf_p4c_would(mock_sde, p4_copy, args, message):
    r = mock_compile(mock_sde, p4_copy, *args)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_mock_compiler_follows_includes(mock_sde, p4_copy):
    text = (p4_copy / "rain.p4").read_text().replace('#include "slice_map.p4"', '#include "slice_mapp.p4"')
    (p4_copy / "rain.p4").write_text(text)
    r = mock_compile(mock_sde, p4_copy, "--target", "tofino", "--arch", "tna", "rain.p4")
    line = text[: text.index("slice_mapp")].count("\n") + 1
    assert r.returncode == 1 and f"rain.p4:{line}: fatal error: slice_mapp.p4: No such file or directory" in r.stderr


def test_mock_compiler_refuses_p4_the_emulator_does_not_implement(mock_sde, p4_copy):
    text = (p4_copy / "forward.p4").read_text()
    (p4_copy / "forward.p4").write_text(
        text.replace("table forward {", "table forward_extra { key = {} actions = {} }\n    table forward {", 1)
    )
    r = mock_compile(mock_sde, p4_copy, "--target", "tofino", "--arch", "tna", "rain.p4")
    assert r.returncode == 1 and "only in the P4: ['pipe.SwitchIngress.forward.forward_extra']" in r.stderr


def test_mock_switchd_checks_its_conf(mock_sde, tmp_path):
    inst = mock_sde / "install"
    conf = tmp_path / "rain.conf"
    base = {
        "chip_list": [{"chip_family": "tofino", "instance": 0}],
        "p4_devices": [
            {
                "device-id": 0,
                "p4_programs": [
                    {
                        "program-name": "rain",
                        "bfrt-config": "share/tofinopd/rain/bf-rt.json",
                        "p4_pipelines": [
                            {
                                "p4_pipeline_name": "pipe",
                                "context": "share/tofinopd/rain/pipe/context.json",
                                "config": "share/tofinopd/rain/pipe/tofino.bin",
                                "pipe_scope": [0, 1, 2, 3],
                                "path": "share/tofinopd/rain",
                            }
                        ],
                    }
                ],
            }
        ],
    }
    conf.write_text(json.dumps(base))
    switchd = [str(inst / "bin/bf_switchd"), "--background", "--install-dir", str(inst), "--conf-file", str(conf)]
    r = subprocess.run(switchd, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "MOCK" in r.stdout
    assert f"p4_programs[0].bfrt-config: {inst}/share/tofinopd/rain/bf-rt.json does not exist" in r.stderr
    conf.write_text(json.dumps({**base, "chip_list": [{"chip_family": "tofino9", "instance": 0}]}))
    r = subprocess.run(switchd, capture_output=True, text=True, timeout=30)
    assert "chip_family 'tofino9' is not tofino or tofino2" in r.stderr
    r = subprocess.run(switchd[:1] + ["--conf-file", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--install-dir" in r.stderr


@pytest.mark.skipif(not Path("/usr/bin/systemd-analyze").exists(), reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze_verify(tmp_path):
    """systemd itself parses the units the role writes (offline: no systemd needs to run)."""
    env = {
        "SDE": "/opt/sde",
        "SDE_INSTALL": "/opt/sde/install",
        "LD_LIBRARY_PATH": "/opt/sde/install/lib:/usr/local/lib",
    }
    model = {
        "description": "tofino-model for bf_switchd (rainmaker)",
        "argv": ["/bin/sleep", "infinity"],
        "log": str(tmp_path / "tofino-model.log"),
        "after": [],
        "requires": [],
        "pre": [],
    }
    switchd = {
        "description": "bf_switchd serving the P4 program rain (rainmaker)",
        "argv": ["/bin/sleep", "--conf-file=/opt/$x/rain.conf", "100%"],
        "log": str(tmp_path / "bf_switchd.log"),
        "after": ["rainmaker-tofino-model.service"],
        "requires": ["rainmaker-tofino-model.service"],
        "pre": [["/bin/sh", "-c", "[ -d /sys/module/bf_kdrv ] || exec /bin/true /opt/sde/install"]],
    }
    for name, unit in (("rainmaker-tofino-model", model), ("rainmaker-switchd", switchd)):
        text = render(
            "unit.service.j2", tmp_path, tofino_sde_unit=unit, tofino_sde_env=env, tofino_sde_run_dir=str(tmp_path)
        )
        (tmp_path / f"{name}.service").write_text(text + "\n")
    # a relative path: systemd-analyze then dumps the units it loaded, with their command lines
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "./rainmaker-switchd.service"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    dump = r.stdout + r.stderr
    assert 'Command Line: /bin/sleep "--conf-file=/opt/\\$\\$x/rain.conf" 100%' in dump  # $ and % kept literal
    assert 'Command Line: /bin/sh -c "[ -d /sys/module/bf_kdrv ] || exec /bin/true /opt/sde/install"' in dump
