"""A run shared and opened again (orchestrator/crate): `rainmaker export` packs a run
folder as a Workflow Run RO-Crate, `rainmaker import` lays it out in another results
tree, and `rainmaker report` there writes the very same report. Canary secrets put in
the inventory, the preflight and the run's log never reach the zip; key material, a
zip-slip member, a crate of someone else, a tampered file and an existing run folder
are refused, each with nothing written."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.crate.export import export_run
from orchestrator.crate.importer import import_crate
from orchestrator.crate.scrub import REMOVED, SecretInCrate, scrub_inventory
from orchestrator.errors import UsageError
from orchestrator.experiment.report import report

from .results_fixture import synthetic_run

CANARY = "CANARY7f3a"  # every secret below carries it: none may be found in a crate
STAMP = "20260101-000000"
KEY_PATH = f"/home/alice/.ssh/{CANARY}-id_ed25519"
INVENTORY = {
    "name": "rack1",
    "switch": {
        "name": "tofino1",
        "kind": "tofino",
        "mgmt": {"address": "192.0.2.10", "user": "root", "port": 22, "key": f"/keys/{CANARY}-switch"},
        "bfrt": "192.0.2.10:50052",
        "ports": [{"port": "1/0", "dev_port": 132, "speed": "100G", "fec": "rs"}],
    },
    "hosts": [
        {
            "name": "client0",
            "role": "client",
            "mgmt": {"address": "192.0.2.21", "user": "root", "port": 22, "key": None},
            "nic": {"pci": "0000:3b:00.0", "mac": "0c:42:a1:dd:5f:3a", "ip": "10.10.1.1", "switch_port": "1/0"},
            "cores": [2, 3],
        },
        {
            "name": "worker0",
            "role": "worker",
            "mgmt": {"address": "192.0.2.22", "user": "root", "port": 22, "key": f"/keys/{CANARY}-worker0"},
            "nic": {"pci": "0000:3b:00.1", "mac": "0c:42:a1:dd:5f:3b", "ip": "10.10.1.2", "switch_port": "2/0"},
            "cores": [2, 3, 4, 5],
        },
    ],
    "ssh": {
        "key": KEY_PATH,
        "known_hosts": f"/home/alice/.ssh/{CANARY}-known_hosts",
        "jump": {"host": "gw.example.org", "key": f"/keys/{CANARY}-jump", "known_hosts": f"/gw/{CANARY}-kh"},
        "connect_timeout_s": 10.0,
    },
    "cloudlab": {"password": f"{CANARY}-pw", "certificate": f"/home/alice/{CANARY}-cloudlab.pem"},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A small finished run: analysed, two figures, a report; canaries where secrets go."""
    r = synthetic_run(tmp_path_factory.mktemp("crate"), loads=(1000.0, 2000.0), reps=1, n=4000)
    m = json.loads((r / "manifest.json").read_text())
    m["inventory"] = INVENTORY
    m["inventory_file"] = "inventories/rack1.yaml"
    m["spec"]["plots"] = ["p99_vs_load", "queue_depth"]
    (r / "manifest.json").write_text(json.dumps(m, indent=1) + "\n")
    (r / "preflight.json").write_text(
        json.dumps({"format": 1, "inventory": "rack1", "ok": True, "probes": {"sw": {"portal_passphrase": CANARY}}})
    )
    (r / "run.log").write_text(f"00:00:01 run demo\n00:00:02 ssh -i {KEY_PATH} root@192.0.2.21\n")
    report(r)
    return r


@pytest.fixture(scope="module")
def crate(run, tmp_path_factory) -> Path:
    return export_run(
        run, tmp_path_factory.mktemp("out") / "demo.crate.zip", authors=["Ada Lovelace <0000-0002-1825-0097>"]
    ).path


def members(zip_path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(zip_path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def graph(zip_path: Path) -> dict[str, dict]:
    return {e["@id"]: e for e in json.loads(members(zip_path)["ro-crate-metadata.json"])["@graph"]}


def ids(value) -> list[str]:
    return [v["@id"] for v in (value if isinstance(value, list) else [value])]


# -- the round trip ---------------------------------------------------------------------------


def test_an_imported_run_reports_byte_for_byte_as_the_original(run, crate, tmp_path):
    res = CliRunner().invoke(cli, ["import", str(crate), "--results", str(tmp_path / "elsewhere")])
    assert res.exit_code == 0, res.output
    there = tmp_path / "elsewhere" / "demo" / STAMP
    assert str(there) in res.output
    before_md, before_html = (run / "report.md").read_bytes(), (run / "report.html").read_bytes()
    (there / "report.md").unlink()
    (there / "report.html").unlink()
    res = CliRunner().invoke(cli, ["report", str(there)])
    assert res.exit_code == 0, res.output
    assert (there / "report.md").read_bytes() == before_md
    assert (there / "report.html").read_bytes() == before_html
    # every file of the run is there as it was, but the manifest (its inventory scrubbed)
    for p in run.rglob("*"):
        rel = p.relative_to(run).as_posix()
        if p.is_file() and rel not in ("manifest.json", "preflight.json", "run.log"):
            assert (there / rel).read_bytes() == p.read_bytes(), rel
    assert (there / "ro-crate-metadata.json").is_file() and (there / "crate" / "spec.yaml").is_file()


def test_a_second_export_of_an_imported_run_holds_the_same_files(crate, tmp_path):
    there = import_crate(crate, tmp_path / "results").path
    again = export_run(there, tmp_path / "again.crate.zip").path
    first = json.loads(members(crate)["crate/export.json"])["files"]
    second = json.loads(members(again)["crate/export.json"])["files"]
    assert second == first


# -- what is in the crate ---------------------------------------------------------------------


def test_the_crate_is_a_workflow_run_crate_of_the_spec(run, crate):
    g = graph(crate)
    root, meta = g["./"], g["ro-crate-metadata.json"]
    assert set(ids(meta["conformsTo"])) == {
        "https://w3id.org/ro/crate/1.1",
        "https://w3id.org/workflowhub/workflow-ro-crate/1.0",
    }
    assert set(ids(root["conformsTo"])) == {
        "https://w3id.org/ro/wfrun/process/0.5",
        "https://w3id.org/ro/wfrun/workflow/0.5",
        "https://w3id.org/workflowhub/workflow-ro-crate/1.0",
    }
    assert all(g[p]["@type"] == "CreativeWork" for p in ids(root["conformsTo"]))
    assert root["name"] == f"demo: rainmaker run {STAMP}" and root["description"]
    assert ids(root["license"]) == ["https://spdx.org/licenses/CC-BY-4.0"]
    assert ids(root["author"]) == ["https://orcid.org/0000-0002-1825-0097"]
    assert g["https://orcid.org/0000-0002-1825-0097"]["name"] == "Ada Lovelace"
    assert len(root["datePublished"]) == 10  # YYYY-MM-DD
    spec = g[ids(root["mainEntity"])[0]]
    assert spec["@id"] == "crate/spec.yaml"
    assert set(spec["@type"]) == {"File", "SoftwareSourceCode", "ComputationalWorkflow"}
    assert g[ids(spec["programmingLanguage"])[0]]["@type"] == "ComputerLanguage"
    assert spec["version"] == "0123456789abcdef"  # the run's git revision
    action = g[ids(root["mentions"])[0]]
    assert action["@type"] == "CreateAction" and ids(action["instrument"]) == ["crate/spec.yaml"]
    assert action["actionStatus"] == "http://schema.org/CompletedActionStatus"
    assert action["startTime"] == "2026-01-01T00:00:00+00:00"
    assert {"crate/spec.yaml", "crate/inventory.yaml", "#git-revision"} <= set(ids(action["object"]))
    result = set(ids(action["result"]))
    assert {"summary.parquet", "report.md", "report.html", "manifest.json", "sweep.json", "plots/", "points/"} <= result
    assert {"preflight.json", "run.log", "timeseries.parquet", "points/rain-k1000-r1/"} <= set(
        ids(g["points/"]["hasPart"])
    ) | result
    assert {"plots/p99_vs_load.png", "plots/queue_depth.svg"} <= set(ids(g["plots/"]["hasPart"]))
    # every described file is in the zip
    names = set(members(crate))
    described = [i for i, e in g.items() if "File" in (e["@type"] if isinstance(e["@type"], list) else [e["@type"]])]
    assert all(i in names for i in described if i != "ro-crate-metadata.json")
    # the spec in the crate is the one the run recorded
    recorded = json.loads((run / "manifest.json").read_text())["spec"]
    assert yaml.safe_load(members(crate)["crate/spec.yaml"]) == recorded


def test_export_lists_every_file_with_its_hash(run, crate):
    m = members(crate)
    listing = json.loads(m["crate/export.json"])
    assert listing["tool"] == "rainmaker export" and listing["experiment"] == "demo" and listing["run"] == STAMP
    on_disk = {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}
    assert set(listing["files"]) == on_disk
    for name, entry in listing["files"].items():
        assert hashlib.sha256(m[name]).hexdigest() == entry["sha256"]


# -- secrets ------------------------------------------------------------------------------------


def test_no_canary_anywhere_in_the_zip(crate):
    raw = crate.read_bytes()
    assert CANARY.encode() not in raw
    for name, data in members(crate).items():
        assert CANARY.encode() not in data, name
        assert CANARY not in name


def test_the_inventory_keeps_its_shape_and_names_what_was_removed(crate):
    m = members(crate)
    inv = yaml.safe_load(m["crate/inventory.yaml"])
    assert [h["name"] for h in inv["hosts"]] == ["client0", "worker0"]
    assert inv["hosts"][1]["nic"]["mac"] == "0c:42:a1:dd:5f:3b" and inv["hosts"][1]["role"] == "worker"
    assert inv["switch"]["ports"] == INVENTORY["switch"]["ports"]
    assert "key" not in inv["ssh"] and "known_hosts" not in inv["ssh"] and "key" not in inv["ssh"]["jump"]
    assert inv["ssh"]["connect_timeout_s"] == 10.0 and inv["ssh"]["jump"]["host"] == "gw.example.org"
    assert inv["hosts"][0]["mgmt"]["key"] is None  # held nothing: kept
    listing = json.loads(m["crate/export.json"])["scrubbed"]
    assert set(listing["fields"]["crate/inventory.yaml"]) == {
        "ssh.key",
        "ssh.known_hosts",
        "ssh.jump.key",
        "ssh.jump.known_hosts",
        "switch.mgmt.key",
        "hosts[1].mgmt.key",
        "cloudlab.password",
        "cloudlab.certificate",
    }
    assert "inventory.ssh.key" in listing["fields"]["manifest.json"]
    assert listing["fields"]["preflight.json"] == ["probes.sw.portal_passphrase"]
    assert listing["values_replaced"] == {"run.log": 1}
    assert REMOVED.encode() in m["run.log"]
    desc = graph(crate)["crate/inventory.yaml"]["description"]
    assert "ssh.known_hosts" in desc and "hosts[1].mgmt.key" in desc
    assert "ssh.key" in m["README.md"].decode()


def test_rain_data_that_looks_like_a_secret_stays():
    inv, removed, _ = scrub_inventory({"hosts": [{"name": "w", "nic": {"rdma_device": "mlx5_0", "gid_index": 3}}]})
    assert removed == [] and inv["hosts"][0]["nic"]["gid_index"] == 3


def test_key_material_refuses_the_export(run, tmp_path):
    r = shutil.copytree(run, tmp_path / "run" / STAMP)
    log = r / "points" / "rain-k1000-r1" / "workers" / "worker0" / "worker.log"
    log.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
    out = tmp_path / "x.crate.zip"
    with pytest.raises(SecretInCrate, match="worker0/worker.log holds private key material"):
        export_run(r, out)
    assert list(tmp_path.glob("*.zip*")) == [] and not list(tmp_path.glob(".x.crate.zip*"))
    done = export_run(r, out, exclude=["points/*/workers/*/worker.log"])
    assert done.left_out == [{"path": str(log.relative_to(r)), "why": "--exclude"}]


def test_a_symbolic_link_in_the_run_is_left_out(run, tmp_path):
    secret = tmp_path / "id_rsa"
    secret.write_text(f"{CANARY} not a real key\n")
    r = shutil.copytree(run, tmp_path / "run" / STAMP)
    (r / "points" / "key").symlink_to(secret)
    done = export_run(r, tmp_path / "y.crate.zip")
    assert done.left_out[0]["path"] == "points/key" and "symbolic link" in done.left_out[0]["why"]
    assert CANARY.encode() not in b"".join(members(done.path).values())


# -- import refuses -------------------------------------------------------------------------------


def rewrite(src: Path, dest: Path, change) -> Path:
    """A copy of the zip whose members `change(name, data)` maps (None drops one), plus
    the extra members change.extra (name -> data)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info))
            if data is not None:
                zout.writestr(info, data)
        for name, data in getattr(change, "extra", {}).items():
            zout.writestr(name, data)
    return dest


@pytest.mark.parametrize(
    "evil", ["../../evil.txt", "/tmp/evil.txt", "points/../../evil.txt", "C:/evil.txt", "a\\..\\evil"]
)
def test_a_zip_slip_member_is_refused_before_anything_is_written(crate, tmp_path, evil):
    def same(name, data):
        return data

    same.extra = {evil: b"owned"}
    bad = rewrite(crate, tmp_path / "bad.zip", same)
    with pytest.raises(UsageError, match="zip-slip"):
        import_crate(bad, tmp_path / "results")
    assert not (tmp_path / "results").exists() and not (tmp_path / "evil.txt").exists()


def test_a_symlink_member_is_refused(crate, tmp_path):
    bad = tmp_path / "link.zip"
    shutil.copy(crate, bad)
    with zipfile.ZipFile(bad, "a") as zf:
        info = zipfile.ZipInfo("points/link")
        info.external_attr = (0o120777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(UsageError, match="link"):
        import_crate(bad, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_crates_that_are_not_ours_are_refused(tmp_path):
    other = tmp_path / "other.zip"
    meta = {
        "@context": "https://w3id.org/ro/crate/1.1/context",
        "@graph": [
            {"@id": "ro-crate-metadata.json", "@type": "CreativeWork", "about": {"@id": "./"}},
            {"@id": "./", "@type": "Dataset", "name": "someone's data"},
        ],
    }
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("ro-crate-metadata.json", json.dumps(meta))
    with pytest.raises(UsageError, match="not a run `rainmaker export` wrote"):
        import_crate(other, tmp_path / "results")
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as zf:
        zf.writestr("data.csv", "a,b\n")
    with pytest.raises(UsageError, match="not an RO-Crate"):
        import_crate(plain, tmp_path / "results")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(UsageError, match="not a zip"):
        import_crate(text, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_a_tampered_file_is_refused(crate, tmp_path):
    def flip(name, data):
        return data.replace(b"0", b"1", 1) if name == "sweep.json" else data

    bad = rewrite(crate, tmp_path / "tampered.zip", flip)
    with pytest.raises(UsageError, match="sweep.json does not match its SHA-256"):
        import_crate(bad, tmp_path / "results")
    assert list((tmp_path / "results" / "demo").iterdir()) == []  # the temporary folder went too

    def extra(name, data):
        return data

    extra.extra = {"points/new.json": b"{}"}
    with pytest.raises(UsageError, match="not listed"):
        import_crate(rewrite(crate, tmp_path / "extra.zip", extra), tmp_path / "results")


def test_an_existing_run_folder_is_replaced_only_with_force(crate, tmp_path):
    first = import_crate(crate, tmp_path / "results")
    (first.path / "note.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists"):
        import_crate(crate, tmp_path / "results")
    assert (first.path / "note.txt").read_text() == "mine"
    again = import_crate(crate, tmp_path / "results", force=True)
    assert again.replaced and again.path == first.path and not (first.path / "note.txt").exists()
    assert sorted(p.name for p in (tmp_path / "results" / "demo").iterdir()) == [STAMP]


def test_an_unpacked_crate_imports_too(crate, tmp_path):
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(crate) as zf:
        zf.extractall(unpacked)
    there = import_crate(unpacked, tmp_path / "results").path
    assert (there / "summary.parquet").read_bytes() == (unpacked / "summary.parquet").read_bytes()


def test_export_refuses_to_overwrite_or_write_into_the_run(run, crate):
    with pytest.raises(UsageError, match="exists"):
        export_run(run, crate)
    with pytest.raises(UsageError, match="inside the run folder"):
        export_run(run, run / "x.crate.zip")
    with pytest.raises(UsageError, match="--license"):
        export_run(run, crate.with_name("z.zip"), license="not a licence!")


# -- the RO-Crate validator -----------------------------------------------------------------------


def _served_offline(monkeypatch) -> list[str]:
    """The RO-Crate 1.1 JSON-LD context, which the validator fetches from w3id.org, served
    from the copy the rocrate library ships, so that the check runs on a machine without
    internet access; any other address fails as offline. That copy is version 1.1.0; the
    one w3id.org serves (1.1.3) maps four Bioschemas terms elsewhere, and the validator
    checks the 1.1.3 ones: they are set as 1.1.3 has them. Returns the addresses asked."""
    import importlib.resources

    import requests
    import urllib3
    from requests.adapters import HTTPAdapter

    doc = json.loads(importlib.resources.files("rocrate").joinpath("data/ro-crate.jsonld").read_bytes())
    bioschemas = "https://bioschemas.org/"
    doc["@context"].update(
        {
            "ComputationalWorkflow": f"{bioschemas}ComputationalWorkflow",
            "input": f"{bioschemas}ComputationalWorkflow#input",
            "output": f"{bioschemas}ComputationalWorkflow#output",
            "FormalParameter": f"{bioschemas}FormalParameter",
        }
    )
    context = json.dumps(doc).encode()
    asked: list[str] = []

    def send(self, request, **kwargs):
        asked.append(request.url)
        if request.url.rstrip("/") != "https://w3id.org/ro/crate/1.1/context":
            raise requests.ConnectionError(f"offline: {request.url}")
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(context),
            headers={"Content-Type": "application/ld+json"},
            status=200,
            preload_content=False,
            request_url=request.url,
        )
        return self.build_response(request, raw)

    monkeypatch.setattr(HTTPAdapter, "send", send)
    return asked


@pytest.mark.parametrize("profile", ["ro-crate-1.1", "workflow-run-crate"])
def test_the_validator_finds_no_required_issue(crate, tmp_path, monkeypatch, profile):
    pytest.importorskip("rocrate_validator")
    from rocrate_validator import models, services

    unpacked = tmp_path / "crate"
    with zipfile.ZipFile(crate) as zf:
        zf.extractall(unpacked)
    asked = _served_offline(monkeypatch)
    settings = services.ValidationSettings(
        rocrate_uri=str(unpacked),
        profile_identifier=profile,
        requirement_severity=models.Severity.REQUIRED,
        cache_path=tmp_path / "http-cache",  # not the user's cache: this context is not w3id.org's
    )
    try:
        result = services.validate(settings)
    except Exception as e:  # the validator could not load what it needs (offline, no cache)
        if any(w in str(e).lower() for w in ("offline", "connect", "network", "resolve", "urlopen", "http")):
            pytest.skip(f"the RO-Crate validator cannot run offline here: {e}")
        raise
    issues = [f"{i.severity.name} {i.check.identifier}: {i.message}" for i in result.get_issues()]
    offline = [i for i in issues if "offline: " in i]
    if offline:
        pytest.skip(f"the RO-Crate validator needs more than the RO-Crate context offline: {offline[0]}")
    assert issues == [], asked


def test_export_output_by_default_names_the_run(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["export", str(run)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / f"demo-{STAMP}.crate.zip").is_file()
    assert "placeholder" in res.output and "removed from manifest.json" in res.output
    assert b"Unknown author" in members(tmp_path / f"demo-{STAMP}.crate.zip")["ro-crate-metadata.json"]
    assert os.listdir(tmp_path) == [f"demo-{STAMP}.crate.zip"]


# -- a run of the demo, opened in a clean copy of the repository --------------------------------

REPO = Path(__file__).resolve().parents[2]
BOOT = "import sys; sys.path.insert(0, '.'); sys.argv[0] = 'rainmaker'; from orchestrator.cli import main; main()"


def rainmaker(cwd: Path, *args: str) -> str:
    """`rainmaker ARGS` run from the sources in cwd, in a process of its own."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", BOOT, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def clean_copy(dest: Path) -> Path:
    """The repository's sources as a fresh clone has them (tracked and new files, no
    results/, no caches), at another path."""
    import subprocess

    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in names)):
        src = REPO / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_a_demo_run_reports_the_same_in_a_clean_copy(tmp_path):
    # The demo spec on the simulated testbed (a few seconds): the same run folder as an
    # emulated run's, written by the same analysis, plots and report.
    here = tmp_path / "here"
    here.mkdir()
    (here / "experiments").mkdir()
    shutil.copy(REPO / "experiments" / "demo.yaml", here / "experiments" / "demo.yaml")
    sim = ["simulate", "experiments/demo.yaml", "--measure", "0.1", "--warmup", "0.01", "--repetitions", "1"]
    rainmaker(REPO, *sim, "-j", "1", "--results", str(here / "results"))
    (run,) = (here / "results" / "demo").iterdir()
    zip_path = tmp_path / "demo.crate.zip"
    rainmaker(REPO, "export", str(run), "-o", str(zip_path), "--author", "Ada Lovelace")
    clone = clean_copy(tmp_path / "clone")
    assert not (clone / "results").exists()
    out = rainmaker(clone, "import", str(zip_path))
    there = clone / "results" / "demo" / run.name
    assert f"results/demo/{run.name}" in out
    for name in ("report.md", "report.html"):
        (there / name).unlink()
    rainmaker(clone, "report", f"results/demo/{run.name}")
    assert (there / "report.md").read_bytes() == (run / "report.md").read_bytes()
    assert (there / "report.html").read_bytes() == (run / "report.html").read_bytes()


def test_ctrl_c_leaves_neither_half_a_zip_nor_half_a_run(run, crate, tmp_path, monkeypatch):
    from orchestrator.crate import export as export_module
    from orchestrator.crate import importer as importer_module

    def interrupting(real, after: int):
        calls = []

        def wrapper(*args, **kwargs):
            calls.append(1)
            if len(calls) > after:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        return wrapper

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(export_module, "_put", interrupting(export_module._put, 5))
    with pytest.raises(KeyboardInterrupt):
        export_run(run, out / "x.crate.zip")
    assert list(out.iterdir()) == []
    monkeypatch.setattr(importer_module, "_copy", interrupting(importer_module._copy, 5))
    with pytest.raises(KeyboardInterrupt):
        import_crate(crate, tmp_path / "results")
    assert list((tmp_path / "results" / "demo").iterdir()) == []
    # an existing run folder is kept whole when its replacement is interrupted
    monkeypatch.undo()
    first = import_crate(crate, tmp_path / "results").path
    monkeypatch.setattr(importer_module, "_copy", interrupting(importer_module._copy, 5))
    with pytest.raises(KeyboardInterrupt):
        import_crate(crate, tmp_path / "results", force=True)
    assert sorted(p.name for p in first.parent.iterdir()) == [STAMP]
    assert (first / "report.md").read_bytes() == (run / "report.md").read_bytes()
