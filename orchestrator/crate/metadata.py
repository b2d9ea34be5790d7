"""A run described as a Workflow Run RO-Crate: ro-crate-metadata.json.

The profiles (https://www.researchobject.org/workflow-run-crate/) and how a run maps
onto them:

    root Dataset ./         conformsTo Process Run Crate 0.5, Workflow Run Crate 0.5,
                            Workflow RO-Crate 1.0; name, description, license, author,
                            datePublished; mainEntity: the spec; mentions: the run
    crate/spec.yaml         the instrument: the experiment spec as the run recorded it,
                            a File, SoftwareSourceCode and ComputationalWorkflow whose
                            language is rainmaker's spec and whose softwareRequirements
                            are the versions manifest.json recorded
    #run-<timestamp>        the CreateAction: started when the run started, ended with
                            its last point; agent: the author; object: the spec, the
                            scrubbed inventory, the git revision and the testbed (as
                            PropertyValues); result: every file and folder the run wrote
    crate/inventory.yaml    the testbed, keys and secrets removed (the fields are named)
    crate/export.json       each file's size and SHA-256, what was scrubbed

Only the rocrate library writes the JSON-LD; this module says what goes in it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from ..errors import UsageError

RO_CRATE = "https://w3id.org/ro/crate/1.1"
PROCESS_RUN = "https://w3id.org/ro/wfrun/process/0.5"
WORKFLOW_RUN = "https://w3id.org/ro/wfrun/workflow/0.5"
WORKFLOW_RO_CRATE = "https://w3id.org/workflowhub/workflow-ro-crate/1.0"
BIOSCHEMAS_WORKFLOW = "https://bioschemas.org/profiles/ComputationalWorkflow/1.0-RELEASE"
SPEC_LANGUAGE = "#rainmaker-spec"  # the ComputerLanguage of the instrument: how import knows a crate is ours
PLACEHOLDER_AUTHOR = "Unknown author (set it with `rainmaker export --author`)"

_FORMATS = {
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".parquet": "application/vnd.apache.parquet",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".md": "text/markdown",
    ".html": "text/html",
    ".log": "text/plain",
    ".yaml": "application/yaml",
    ".csv": "text/csv",
    ".hlog": "text/plain",
}

# What each run-level file or folder is (docs/results.md says more).
_ABOUT = {
    "manifest.json": "Provenance of the run: the spec, the testbed (inventory scrubbed), git revision, "
    "host facts, tool versions, hashes of the programs, calibration",
    "sweep.json": "Each point's state: status, attempts, reasons, validity, times",
    "run.log": "The run's log lines",
    "preflight.json": "What every machine was found to have before the sweep (preflight checks and probes)",
    "summary.parquet": "One row per point and class: loads, latency percentiles and intervals, validity",
    "timeseries.parquet": "Per point, class and second: samples, p50, p99",
    "report.md": "The run's report (Markdown): setup, results, claims, validity, figures, provenance",
    "report.html": "The run's report (HTML)",
    "points/": "One folder per point: its parameters, raw latency histograms, switch and worker files, verdict",
    "calibration/": "The calibration point: what the testbed measured of itself before the first point",
    "service-probe/": "The service probe: the real handler's service times on this testbed",
    "stalled/": "Measurements discarded because the host stalled the client (each measured again)",
    "plots/": "The run's figures (PNG and SVG)",
}


@dataclass(frozen=True)
class Author:
    """An author as --author gives one: "Name" or "Name <https://orcid.org/...>"."""

    name: str
    id: str | None = None

    @classmethod
    def parse(cls, text: str) -> Author:
        m = re.fullmatch(r"\s*([^<>]+?)\s*(?:<\s*([^<>\s]+)\s*>)?\s*", text)
        if not m or not m.group(1):
            raise UsageError(f"--author {text!r}: not a name", fix='give "Name" or "Name <https://orcid.org/...>"')
        ident = m.group(2)
        if ident and re.fullmatch(r"\d{4}-\d{4}-\d{4}-\d{3}[\dX]", ident):
            ident = f"https://orcid.org/{ident}"
        if ident and not re.match(r"https?://", ident):
            raise UsageError(
                f"--author {text!r}: {ident!r} is not a URL", fix="give an ORCID (0000-0002-...) or a URL in <>"
            )
        return cls(m.group(1), ident)


def license_entity(text: str) -> tuple[str, str]:
    """(@id, name) of a license given as an SPDX id (CC-BY-4.0) or a URL."""
    text = text.strip()
    if re.match(r"https?://", text):
        return text, text.rstrip("/").rsplit("/", 1)[-1]
    if not re.fullmatch(r"[A-Za-z0-9.+-]+", text):
        raise UsageError(f"--license {text!r}: not an SPDX identifier or a URL", fix="e.g. --license CC-BY-4.0")
    return f"https://spdx.org/licenses/{text}", text


def iso(unix: float | None) -> str | None:
    """A Unix time as ISO 8601 in UTC with seconds (the profiles' pattern), or None."""
    if not isinstance(unix, (int, float)) or isinstance(unix, bool):
        return None
    try:
        return datetime.datetime.fromtimestamp(int(unix), datetime.UTC).isoformat()
    except (OverflowError, ValueError, OSError):
        return None


def _format(rel: str) -> str | None:
    return _FORMATS.get(PurePosixPath(rel).suffix)


@dataclass(frozen=True)
class RunFacts:
    """What the metadata says of a run, read from its files by the exporter."""

    experiment: str
    run: str  # the run folder's name, its timestamp
    manifest: dict
    sweep: dict[str, dict]  # point id -> state
    files: Sequence[str]  # every file of the run in the crate, relative posix paths
    removed: dict[str, list[str]]  # file -> the fields removed from it


def _new_crate():
    from rocrate.rocrate import ROCrate

    try:
        return ROCrate(version="1.1")  # the profiles are written against RO-Crate 1.1
    except TypeError:  # rocrate < 0.15 writes 1.1 without being asked
        return ROCrate()


def _get(m: dict, key: str) -> dict:
    return m[key] if isinstance(m.get(key), dict) else {}


def build(facts: RunFacts, *, authors: Sequence[Author], license: str) -> dict:
    """The crate's JSON-LD (ro-crate-metadata.json) for the run."""
    from rocrate.model import ContextEntity, Person

    crate = _new_crate()
    people = [
        crate.add(Person(crate, a.id or f"#author-{i + 1}", properties={"name": a.name}))
        for i, a in enumerate(authors or [Author(PLACEHOLDER_AUTHOR)])
    ]
    lic_id, lic_name = license_entity(license)
    lic = crate.add(ContextEntity(crate, lic_id, properties={"@type": "CreativeWork", "name": lic_name}))
    for pid, name, version in (
        (PROCESS_RUN, "Process Run Crate", "0.5"),
        (WORKFLOW_RUN, "Workflow Run Crate", "0.5"),
        (WORKFLOW_RO_CRATE, "Workflow RO-Crate", "1.0"),
    ):
        crate.add(ContextEntity(crate, pid, properties={"@type": "CreativeWork", "name": name, "version": version}))
    workflow = _workflow(crate, facts)
    action = _action(crate, facts, workflow, people)
    crate.add_file(
        None,
        "crate/export.json",
        properties={
            "name": "What rainmaker export put in this crate",
            "encodingFormat": "application/json",
            "description": "Every run file with its size and SHA-256 (rainmaker import checks them), "
            "the fields scrubbed, the files left out",
        },
    )
    crate.add_file(
        None,
        "README.md",
        properties={
            "name": "README",
            "encodingFormat": "text/markdown",
            "about": crate.root_dataset,
            "description": "What this crate is and how to open it",
        },
    )
    root = crate.root_dataset
    root["name"] = f"{facts.experiment}: rainmaker run {facts.run}"
    root["description"] = _description(facts, _get(facts.manifest, "spec"))
    root["license"] = lic
    root["author"] = people if len(people) > 1 else people[0]
    root["datePublished"] = datetime.datetime.now(datetime.UTC).date().isoformat()
    root["conformsTo"] = [{"@id": PROCESS_RUN}, {"@id": WORKFLOW_RUN}, {"@id": WORKFLOW_RO_CRATE}]
    root["mentions"] = action
    root["keywords"] = ["rainmaker", "in-network scheduling", "RO-Crate", "Workflow Run Crate", facts.experiment]
    crate.metadata["conformsTo"] = [{"@id": RO_CRATE}, {"@id": WORKFLOW_RO_CRATE}]
    return crate.metadata.generate()


def _workflow(crate, facts: RunFacts):
    """The instrument: the spec, in rainmaker's spec language, with the tools that ran it."""
    from rocrate.model import ComputerLanguage, SoftwareApplication

    spec = _get(facts.manifest, "spec")
    versions = _get(facts.manifest, "versions")
    lang = crate.add(
        ComputerLanguage(
            crate,
            SPEC_LANGUAGE,
            properties={
                "name": "rainmaker experiment spec",
                "alternateName": "rainmaker spec (YAML)",
                "description": "A rainmaker experiment: systems, workload, loads, repetitions, validity, "
                "claims; `rainmaker run SPEC` runs it on a testbed",
            },
        )
    )
    tools = [_tool(crate, SoftwareApplication, name, str(v)) for name, v in versions.items() if name != "platform"]
    return crate.add_workflow(
        None,
        "crate/spec.yaml",
        main=True,
        lang=lang,
        properties={
            "name": f"{facts.experiment} (rainmaker experiment spec)",
            "description": str(spec.get("description") or "").strip()
            or f"The experiment spec of {facts.experiment}, as the run recorded it (manifest.json: spec)",
            "encodingFormat": "application/yaml",
            "version": str(_get(facts.manifest, "git").get("revision") or "unknown"),
            "conformsTo": {"@id": BIOSCHEMAS_WORKFLOW},
            "softwareRequirements": tools,
        },
    )


def _action(crate, facts: RunFacts, workflow, people: list):
    """The run as a CreateAction: its inputs (object), what it wrote (result), when, by whom."""
    from rocrate.model import ContextEntity

    m = facts.manifest
    git, testbed, versions = _get(m, "git"), _get(m, "testbed"), _get(m, "versions")
    inventory = crate.add_file(
        None,
        "crate/inventory.yaml",
        properties={
            "name": "The testbed inventory, keys and secrets removed",
            "encodingFormat": "application/yaml",
            "description": _inventory_description(facts),
        },
    )
    params = [
        crate.add(
            ContextEntity(crate, f"#{key}", properties={"@type": "PropertyValue", "name": name, "value": str(value)})
        )
        for key, name, value in (
            ("git-revision", "rainmaker git revision", git.get("revision") or "unknown"),
            ("git-dirty", "uncommitted changes in the checkout", git.get("dirty", "unknown")),
            ("testbed-kind", "testbed kind", testbed.get("kind", "unknown")),
            ("inventory-name", "testbed", _get(m, "inventory").get("name", "unknown")),
            ("platform", "the machine that ran rainmaker", versions.get("platform", "unknown")),
        )
    ]
    status, error = _status(facts)
    started = iso(m.get("created_unix"))
    ended = _ended(facts) or started
    props: dict[str, Any] = {
        "name": f"rainmaker run {facts.experiment} ({facts.run})",
        "description": f"`rainmaker run` of the experiment {facts.experiment} (testbed kind: "
        f"{testbed.get('kind', 'unknown')}): {len(facts.sweep)} point(s), {_done(facts)} done",
        "actionStatus": f"http://schema.org/{status}",  # a string, as the profile's examples (and validator) have it
        "agent": people[0] if len(people) == 1 else people,
    }
    props.update({k: v for k, v in (("startTime", started), ("endTime", ended), ("error", error)) if v})
    return crate.add_action(
        workflow,
        identifier=f"#run-{facts.run}",
        object=[workflow, inventory, *params],
        result=_results(crate, facts),
        properties=props,
    )


# Where a tool the manifest names is found: an absolute @id and url, as Process Run Crate
# recommends; a Python package's is its PyPI page at the version that ran.
_HOMES = {
    "python": "https://www.python.org/",
    "dpdk": "https://www.dpdk.org/",
    "rainmaker": None,  # no public home known to the manifest: a local id
}


def _tool(crate, cls, name: str, version: str):
    """A SoftwareApplication for a tool manifest.json's `versions` records."""
    home = _HOMES.get(name, f"https://pypi.org/project/{name}/{version}/")
    ident = home or f"#software-{re.sub(r'[^A-Za-z0-9._-]', '-', name)}"
    props = {"name": name, "softwareVersion": version}
    if home:
        props["url"] = home
    return crate.add(cls(crate, ident, properties=props))


def _results(crate, facts: RunFacts) -> list:
    """The entities of what the run wrote: its files at the top level, its figures, its
    folders (each point a Dataset of its own, with its verdict)."""
    out = []
    files = sorted(facts.files)
    top = [f for f in files if "/" not in f]
    for f in top:
        props = {"name": f, "description": _ABOUT.get(f, "A file of the run")}
        if _format(f):
            props["encodingFormat"] = _format(f)
        out.append(crate.add_file(None, f, properties=props))
    folders = sorted({f.split("/", 1)[0] + "/" for f in files if "/" in f})
    for d in folders:
        ds = crate.add_dataset(None, d, properties={"name": d, "description": _ABOUT.get(d, "A folder of the run")})
        out.append(ds)
        if d == "plots/":
            for f in files:
                if f.startswith("plots/"):
                    fig = crate.add_file(
                        None,
                        f,
                        properties={
                            "name": f"figure {PurePosixPath(f).stem.replace('_', ' ')}",
                            "encodingFormat": _format(f) or "application/octet-stream",
                        },
                    )
                    ds.append_to("hasPart", fig)
        if d == "points/":
            for pid, parts in _point_folders(files).items():
                st = facts.sweep.get(pid, {})
                p = crate.add_dataset(
                    None,
                    f"points/{pid}/",
                    properties={
                        "name": f"point {pid}",
                        "description": f"status {st.get('status', 'unknown')}, valid {st.get('valid', 'unknown')}",
                    },
                )
                ds.append_to("hasPart", p)
                if "validity.json" in parts:
                    v = crate.add_file(
                        None,
                        f"points/{pid}/validity.json",
                        properties={
                            "name": f"verdict of {pid}",
                            "encodingFormat": "application/json",
                            "description": "the point's validity checks: each with its value, threshold and message",
                        },
                    )
                    p["hasPart"] = v
                    out.append(v)
    return out


def _point_folders(files: Sequence[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in files:
        parts = f.split("/")
        if parts[0] == "points" and len(parts) >= 3:
            out.setdefault(parts[1], set()).add("/".join(parts[2:]))
    return out


def _done(facts: RunFacts) -> int:
    return sum(1 for s in facts.sweep.values() if s.get("status") == "done")


def _status(facts: RunFacts) -> tuple[str, str | None]:
    todo = [pid for pid, s in facts.sweep.items() if s.get("status") != "done"]
    if not todo:
        return "CompletedActionStatus", None
    return "FailedActionStatus", f"{len(todo)} of {len(facts.sweep)} point(s) not done: {', '.join(todo[:10])}"


def _ended(facts: RunFacts) -> str | None:
    ends = [s.get("finished") for s in facts.sweep.values() if isinstance(s.get("finished"), (int, float))]
    return iso(max(ends)) if ends else None


def _description(facts: RunFacts, spec: dict) -> str:
    what = str(spec.get("description") or "").strip()
    kind = (facts.manifest.get("testbed") or {}).get("kind", "unknown")
    head = (
        f"A run of the rainmaker experiment {facts.experiment} (testbed kind: {kind}; {len(facts.sweep)} points, "
        f"{_done(facts)} done), with its raw measurements, analysis, figures and report. "
        "`rainmaker import` lays it out as a run folder again."
    )
    return f"{head}\n\n{what}" if what else head


def _inventory_description(facts: RunFacts) -> str:
    removed = facts.removed.get("crate/inventory.yaml", [])
    what = "The testbed the run used (manifest.json: inventory): hosts, roles, NICs, switch ports."
    if not removed:
        return what + " No field held a key, a key's path, a password, a token or a certificate."
    return what + " Removed (keys, key paths, pinned host keys, passwords, tokens, certificates): " + ", ".join(removed)
