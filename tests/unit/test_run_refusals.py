"""What `rainmaker run` refuses before it touches a machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.errors import UsageError
from orchestrator.experiment.run import run
from orchestrator.inventory import load

REPO = Path(__file__).resolve().parents[2]


def test_hosts_that_do_not_log_in_as_root_are_refused_with_the_fix(tmp_path):
    data = yaml.safe_load((REPO / "orchestrator/inventory/examples/rack1.yaml").read_text())
    data["ssh"] = {}
    for h in data["hosts"][1:]:
        h["mgmt"]["user"] = "alice"  # CloudLab logs people in as themselves
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(data))
    inv = load(tmp_path / "inv.yaml")
    with pytest.raises(UsageError) as ei:
        run(REPO / "experiments/demo.yaml", inv, results_root=tmp_path / "results", progress=False)
    text = ei.value.render()
    assert "worker0, worker1 log in as 'alice'" in text and "mgmt.user: root" in text
    assert not (tmp_path / "results").exists()  # refused before anything was made
