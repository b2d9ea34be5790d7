"""Keys classes on RocksDB in specs: the handler choice, the database section, and
service times taken from a measured costs file (orchestrator/experiment/kv_costs.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from hosts.agent.common import AgentError
from hosts.agent.worker import kv_argv
from orchestrator.experiment import kv_costs
from orchestrator.experiment.spec import SpecError, load


def write_spec(tmp_path, classes, **extra):
    d = {"name": "kv", "systems": ["rain"], "workload": {"classes": classes}, "load": {"capacity_fraction": [0.5]}}
    d.update(extra)
    p = tmp_path / "kv.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


GET = {"name": "get", "service": {"dist": "keys", "op": "get", "keys": 10, "us_per_key": 0.8}}
SCAN = {"name": "scan", "service": {"dist": "keys", "op": "scan", "keys": 500, "us_per_key": 0.2}}
CONST = {"name": "c", "service": {"dist": "constant", "us": 10}}


def costs_file(tmp_path, rows):
    p = tmp_path / "costs.json"
    kv_costs.write(p, rows, database={"keys": 100000}, source={"run": "test"})
    return p


def row(op, count, item, mean):
    return {"op": op, "count": count, "item_bytes": item, "mean_us": mean}


def test_auto_runs_rocksdb_only_when_every_class_is_a_keys_class(tmp_path):
    assert load(write_spec(tmp_path, [GET, SCAN])).worker_handler(True) == "rocksdb"
    mixed = load(write_spec(tmp_path, [GET, CONST]))
    assert mixed.worker_handler(True) == "sleep" and mixed.worker_handler(False) == "spin"
    with pytest.raises(SpecError, match="handler rocksdb serves keys classes only, and class 'c'"):
        load(write_spec(tmp_path, [GET, CONST], handler="rocksdb"))


def test_a_class_reading_more_keys_than_the_database_holds_is_refused(tmp_path):
    big = {"name": "scan", "service": {"dist": "keys", "op": "scan", "keys": 2000, "us_per_key": 0.2}}
    with pytest.raises(SpecError, match=r"reads 2000 keys, more than database.keys \(1000\)"):
        load(write_spec(tmp_path, [big], database={"keys": 1000}))
    with pytest.raises(SpecError, match="database.key_bytes"):
        load(write_spec(tmp_path, [SCAN], database={"key_bytes": 8}))


def test_client_args_ask_the_worker_or_draw_a_synthetic_time(tmp_path):
    spec = load(write_spec(tmp_path, [GET, {**SCAN, "service": {**SCAN["service"], "keys_dist": "exponential"}}]))
    g, s = (c.service for c in spec.workload.classes)
    assert g.client_arg(100, spec.database) == "kv-get:10:100000"
    assert s.client_arg(100, spec.database) == "kv-scan-exp:500:100000"
    assert g.client_arg(100) == "const:800000"  # 10 keys x 0.8 us x k


def test_costs_give_a_class_its_mean_interpolated_in_the_key_count(tmp_path):
    costs_file(
        tmp_path,
        [
            row("scan", 100, 1024, 70.0),
            row("scan", 500, 1024, 310.0),
            row("scan", 500, 256, 140.0),
            row("get", 10, 1024, 22.0),
        ],
    )
    scan = {"name": "scan", "service": {"dist": "keys", "op": "scan", "keys": 300}}
    get = {"name": "get", "service": {"dist": "keys", "op": "get", "keys": 20}}
    spec = load(write_spec(tmp_path, [scan, get], database={"costs": "costs.json"}))
    s, g = (c.service for c in spec.workload.classes)
    assert s.mean_us == pytest.approx(190.0)  # halfway from 100 keys (70 us) to 500 (310 us)
    assert g.mean_us == pytest.approx(44.0)  # one count measured: proportional
    # the item size chooses the rows
    spec = load(write_spec(tmp_path, [scan], database={"costs": "costs.json", "item_bytes": 256}))
    assert spec.workload.classes[0].service.mean_us == pytest.approx(84.0)
    # a class that gives us_per_key keeps it
    spec = load(write_spec(tmp_path, [GET], database={"costs": "costs.json"}))
    assert spec.workload.classes[0].service.us_per_key == 0.8


def test_costs_that_cannot_answer_name_the_file_and_the_fix(tmp_path):
    scan = {"name": "scan", "service": {"dist": "keys", "op": "scan", "keys": 300}}
    with pytest.raises(SpecError, match="without us_per_key, and no database.costs"):
        load(write_spec(tmp_path, [scan]))
    with pytest.raises(SpecError, match="cannot read it"):
        load(write_spec(tmp_path, [scan], database={"costs": "nowhere.json"}))
    costs_file(tmp_path, [row("get", 10, 1024, 22.0)])
    with pytest.raises(SpecError, match=r"no scan rows for 1024-byte items \(it has get at 1024 B\)"):
        load(write_spec(tmp_path, [scan], database={"costs": "costs.json"}))
    (tmp_path / "costs.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(SpecError, match="not a costs file"):
        load(write_spec(tmp_path, [scan], database={"costs": "costs.json"}))


def test_the_agent_passes_the_database_and_refuses_a_bad_one():
    kv = {"path": "/srv/kv/x", "keys": 5000, "key_bytes": 64, "item_bytes": 256, "seed": 3, "dilation": 20}
    argv = kv_argv(kv, "rocksdb")
    assert argv == [
        "--kv-keys",
        "5000",
        "--kv-key-bytes",
        "64",
        "--kv-item-bytes",
        "256",
        "--kv-seed",
        "3",
        "--kv-path",
        "/srv/kv/x",
        "--kv-dilation",
        "20",
    ]
    with pytest.raises(AgentError, match="worker.kv is for handler rocksdb"):
        kv_argv(kv, "sleep")
    with pytest.raises(AgentError, match="worker.kv.keys"):
        kv_argv({**kv, "keys": "many"}, "rocksdb")
    with pytest.raises(AgentError, match="worker.kv.path"):
        kv_argv({**kv, "path": "relative"}, "rocksdb")
