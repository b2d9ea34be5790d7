"""`rainmaker simulate --cluster`: the points on a Dask cluster this test starts itself
(a LocalCluster of worker processes on 127.0.0.1) give the same files as on the local
cores for the same seed."""

from __future__ import annotations

import pytest

from orchestrator.experiment import layout
from orchestrator.experiment.layout import RunDir
from tests.unit.test_sim_run import TINY

distributed = pytest.importorskip(
    "dask.distributed", reason="Dask is not installed: pip install 'rainmaker[cluster]' to test --cluster"
)


def test_a_dask_cluster_simulates_the_same_points_as_the_local_cores(tmp_path):
    from orchestrator.simulate.runner import simulate

    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    kw = {"progress": False, "analyze_after": False, "seed": 11}
    local = simulate(spec, results_root=tmp_path / "local", jobs=1, **kw)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        remote = simulate(spec, results_root=tmp_path / "cluster", cluster=cluster.scheduler_address, **kw)
    assert RunDir(remote).read_manifest()["simulate"]["cluster"] == cluster.scheduler_address
    for pid in ("rain-f0.3-r1", "rain-f0.6-r1"):
        a, b = RunDir(local).point(pid), RunDir(remote).point(pid)
        for rel in (layout.LATENCY_HLOG, layout.SLOWDOWN_HLOG, layout.CLIENT_SUMMARY):
            assert (a.client("client0") / rel).read_bytes() == (b.client("client0") / rel).read_bytes()
        assert b.read_verdict()["valid"] is True


def test_an_address_without_a_scheduler_is_refused_with_a_fix(tmp_path, monkeypatch, capsys):
    from tests.cli import rainmaker

    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    code, out, err = rainmaker(
        monkeypatch, capsys, "simulate", str(spec), "--cluster", "tcp://127.0.0.1:9", "--results", str(tmp_path / "r")
    )
    assert code == 2 and "no Dask scheduler answers" in err and "fix:" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # refused before the run's folder is made
