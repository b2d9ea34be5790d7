"""Which inventory a command uses when none is named: the one emulated testbed that is
up, and never a guess among several (a demo once ran on another slot's machines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.inventory import AmbiguousInventory, resolve_path
from orchestrator.testbed import emulated, state
from tests.cli import rainmaker


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAINMAKER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RAINMAKER_INVENTORY", raising=False)
    return tmp_path / "state"


def fake_up(slot: int, *, complete: bool = True) -> Path:
    """What `testbed up --slot SLOT` leaves in the state folder (its inventory, written
    the way `up` writes it), without the namespaces: resolution reads only files."""
    tb = emulated.EmulatedTestbed(slot)
    tb.dir.mkdir(parents=True)
    tb.plan_path.write_text(json.dumps({"clients": 1, "workers": 1, "complete": complete}))
    if complete:
        tb._write_inventory(emulated.Plan(slot, 1, 1))
    return tb.inventory_path


def test_no_testbed_up_asks_for_one(state_dir):
    with pytest.raises(Exception, match="no emulated testbed is up") as ei:
        resolve_path(None)
    assert "-i FILE" in ei.value.fix


def test_the_only_testbed_up_is_the_default(state_dir):
    inv = fake_up(3)
    fake_up(5, complete=False)  # a half-built `up` wrote no inventory: not a candidate
    assert resolve_path(None) == inv


def test_two_testbeds_up_refuse_and_list_both(state_dir, monkeypatch, capsys):
    a, b = fake_up(0), fake_up(9)
    with pytest.raises(AmbiguousInventory) as ei:
        resolve_path(None)
    assert [(t.slot, t.name, t.inventory) for t in ei.value.testbeds] == [(0, "emulated0", a), (9, "emulated9", b)]
    # Through the command line: exit 2, each testbed by slot, name and inventory, the fix.
    code, out, err = rainmaker(monkeypatch, capsys, "inventory", "export")
    assert code == 2 and out == ""
    assert f"slot 0: emulated0, inventory {a}" in err
    assert f"slot 9: emulated9, inventory {b}" in err
    assert "-i FILE" in err and "RAINMAKER_INVENTORY" in err
    # Naming one (either way) is all it takes.
    code, out, _ = rainmaker(monkeypatch, capsys, "inventory", "export", "-i", str(b))
    assert code == 0 and "10.79.9." in out and "10.79.0." not in out
    monkeypatch.setenv("RAINMAKER_INVENTORY", str(a))
    assert resolve_path(None) == a


def test_testbed_down_takes_the_slot_from_the_inventory(state_dir, monkeypatch, capsys, tmp_path):
    inv = fake_up(7)
    seen = []
    monkeypatch.setattr(emulated.EmulatedTestbed, "down", lambda self, log: seen.append(self.slot))
    assert rainmaker(monkeypatch, capsys, "testbed", "down", "-i", str(inv))[0] == 0
    assert seen == [7]
    # Another slot named as well, or a file no testbed wrote, is refused before anything is touched.
    code, _, err = rainmaker(monkeypatch, capsys, "testbed", "down", "-i", str(inv), "--slot", "0")
    assert code == 2 and "name two testbeds" in err
    hw = tmp_path / "hw.yaml"
    d = yaml.safe_load(inv.read_text())
    del d["emulation"]
    hw.write_text(yaml.safe_dump(d))
    code, _, err = rainmaker(monkeypatch, capsys, "testbed", "down", "-i", str(hw))
    assert code == 2 and "not an emulated testbed's inventory" in err
    assert seen == [7]


def test_free_slot_skips_slots_any_testbed_holds(state_dir, monkeypatch):
    """A slot is taken by state here, or by namespaces or a bridge of a testbed another
    state folder owns; a slot lost to a race moves on to the next."""
    fake_up(0)
    monkeypatch.setattr(emulated, "_netns_list", lambda: ["rm1-sw0", "rm10-worker0"])
    monkeypatch.setattr(emulated, "_links", lambda: ["lo", "rm2br"])
    tried = []

    def up(self, clients, workers, log, link_delay_us=0.0, bastion=False):
        tried.append(self.slot)
        if self.slot == 3:
            raise emulated.SlotTaken("raced")
        return self.inventory_path

    monkeypatch.setattr(emulated.EmulatedTestbed, "up", up)
    assert emulated.up_in_free_slot(1, 2, log=None) == state.slot_dir(4) / "inventory.yaml"
    assert tried == [3, 4]
    # Slot 10's namespaces (rm10-*) are not slot 1's (rm1-*).
    monkeypatch.setattr(emulated, "_netns_list", lambda: ["rm10-worker0"])
    assert emulated.slot_in_use(10) and not emulated.slot_in_use(1)


REPO = Path(__file__).resolve().parents[2]


def fake_rainmaker(tmp_path: Path, fail: str = "") -> Path:
    """A `rainmaker` that records its arguments; `testbed up` prints an inventory path
    the way the real one does (progress on stderr); the verb named by `fail` fails."""
    script = tmp_path / "rainmaker"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/calls\n'
        + (f'case "$*" in "{fail}"*) exit 3;; esac\n' if fail else "")
        + 'if [ "$1 $2" = "testbed up" ]; then\n'
        "  echo '· building' >&2\n"
        f"  touch '{tmp_path}/slot 5 inventory.yaml'; echo 'inventory: {tmp_path}/slot 5 inventory.yaml'\n"
        "fi\n"
    )
    script.chmod(0o755)
    return script


def make_demo(tmp_path: Path, fail: str = "") -> tuple[int, list[str]]:
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(
        ["make", "-s", "-o", "setup", "demo", f"RM_CLI={fake_rainmaker(tmp_path, fail)}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return r.returncode, calls


def test_make_demo_builds_its_own_testbed_and_names_it_everywhere(tmp_path):
    """`make demo` builds in a free slot and passes the inventory `testbed up` printed to
    every later command, so another testbed (slot 0 or any) is never used or stopped."""
    inv = f"{tmp_path}/slot 5 inventory.yaml"
    code, calls = make_demo(tmp_path)
    assert code == 0
    assert calls == [
        "testbed up --clients 1 --workers 2 --slot free",
        f"provision -i {inv}",
        f"run experiments/demo.yaml -i {inv} --results results",
        f"switch stop -i {inv}",
        f"testbed down -i {inv}",
    ]
    # A failed run still stops and removes the demo's own testbed, and fails.
    (tmp_path / "calls").unlink()
    code, calls = make_demo(tmp_path, fail="run experiments/demo.yaml")
    assert code != 0 and calls[-2:] == [f"switch stop -i {inv}", f"testbed down -i {inv}"]
    # A failed `up` touches nothing else.
    (tmp_path / "calls").unlink()
    code, calls = make_demo(tmp_path, fail="testbed up")
    assert code != 0 and calls == ["testbed up --clients 1 --workers 2 --slot free"]


def test_plan_refuses_to_guess_too(state_dir, monkeypatch, capsys):
    """`rainmaker plan` may plan on a nominal testbed when none is up, never on a guess."""
    spec = str(Path(__file__).resolve().parents[2] / "experiments" / "demo.yaml")
    code, out, err = rainmaker(monkeypatch, capsys, "plan", spec)
    assert code == 0 and "nominal emulated testbed" in out
    fake_up(0)
    code, out, err = rainmaker(monkeypatch, capsys, "plan", spec)
    assert code == 0 and "testbed emulated0" in out
    fake_up(9)
    code, out, err = rainmaker(monkeypatch, capsys, "plan", spec)
    assert code == 2 and out == "" and "slot 9: emulated9" in err and "-i FILE" in err
