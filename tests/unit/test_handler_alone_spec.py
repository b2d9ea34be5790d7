"""Handler-alone specs (orchestrator/experiment/handler_alone.py): what they accept and
how they tell bad input, and the rain-worker command line they become."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.experiment import handler_alone
from orchestrator.experiment.spec import SpecError

REPO_SPEC = "experiments/fig2.yaml"


def write(tmp_path, section, **extra):
    p = tmp_path / "h.yaml"
    p.write_text(yaml.safe_dump({"name": "h", "handler_alone": section, **extra}))
    return p


def test_the_figure_2_spec_loads_and_becomes_a_bench_command():
    assert handler_alone.is_handler_spec(REPO_SPEC)
    spec = handler_alone.load(REPO_SPEC)
    argv = handler_alone.argv(spec, "/r/bin/rain-worker", "/r/kv/x", 1024, "p")
    assert argv[:2] == ["/r/bin/rain-worker", "-l"] and "--no-huge" in argv
    i = argv.index("--")
    tail = argv[i + 1 :]
    assert tail[tail.index("--kv-item-bytes") + 1] == "1024" and tail[tail.index("--handler") + 1] == "rocksdb"
    assert ["--kv-bench", "scan:100,200,300,400,500,600"] == tail[
        tail.index("--kv-bench") : tail.index("--kv-bench") + 2
    ]
    assert not handler_alone.is_handler_spec("experiments/fig7.yaml")


@pytest.mark.parametrize(
    "section, extra, message",
    [
        ({"ops": [{"op": "scan", "keys": [0]}], "item_bytes": [64]}, {}, "key count 0 is outside 1 .. 10,000"),
        ({"ops": [{"op": "put", "keys": [1]}], "item_bytes": [64]}, {}, "op"),
        ({"ops": [{"op": "get", "keys": [1]}], "item_bytes": [64, 64]}, {}, "an item size is listed twice"),
        ({"ops": [{"op": "get", "keys": [1]}], "item_bytes": [70000]}, {}, "outside 1 .. 65,536 bytes"),
        ({"ops": [{"op": "scan", "keys": [5000]}], "item_bytes": [64]}, {"database": {"keys": 1000}}, "does not fit"),
        ({"ops": [{"op": "get", "keys": [1]}], "item_bytes": [64], "speed": 1}, {}, "speed"),
    ],
)
def test_bad_handler_specs_name_the_field(tmp_path, section, extra, message):
    with pytest.raises(SpecError, match=message):
        handler_alone.load(write(tmp_path, section, **extra))


def test_the_budget_grows_with_the_work_and_the_hold():
    spec = handler_alone.load(REPO_SPEC)
    b = handler_alone.budget_s(spec, 1024)
    assert 60 < b < 3600
    held = spec.model_copy(update={"handler_alone": spec.handler_alone.model_copy(update={"dilation": 100})})
    assert handler_alone.budget_s(held, 1024) > 5 * b
