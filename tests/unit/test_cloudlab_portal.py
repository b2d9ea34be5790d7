"""`rainmaker cloudlab start/status/extend/terminate` against a local mock of the
portal's XML-RPC server (tests/mock_cloudlab_portal.py): TLS on 127.0.0.1 with a
throwaway CA, the client authenticated by a certificate whose key is encrypted with
a passphrase, as the portal's are.

The lifecycle test runs the commands as a person types them, start to terminate,
then searches everything they printed and wrote for the passphrase and the key.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.cloudlab import lifecycle
from orchestrator.cloudlab.portal import (
    CertificateError,
    Portal,
    PortalError,
    PortalUnreachable,
    Secret,
    parse_status,
)
from orchestrator.inventory import load as load_inventory
from tests.cli import rainmaker
from tests.mock_cloudlab_portal import MockPortal, make_pki

FIX = Path(__file__).resolve().parents[1] / "fixtures/cloudlab"
PROFILE = "rainproj,rain-tofino"
EXP = "rainproj,rain-1"


@pytest.fixture
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), "pp-" + secrets.token_hex(12))


@pytest.fixture
def mock(pki):
    m = MockPortal(pki, {PROFILE: (FIX / "p2p.xml").read_text()})
    yield m
    m.stop()


@pytest.fixture
def work(tmp_path, monkeypatch, pki, mock):
    """A folder with the p2p map and its files, and the environment that names the
    certificate, its passphrase, the mock portal and its CA."""
    shutil.copy(FIX / "p2p.map.yaml", tmp_path / "map.yaml")
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys/id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAINMAKER_CLOUDLAB_CERT", str(pki.client))
    monkeypatch.setenv("RAINMAKER_CLOUDLAB_PASSPHRASE", pki.passphrase)
    monkeypatch.setenv("RAINMAKER_CLOUDLAB_PORTAL", mock.url)
    monkeypatch.setenv("RAINMAKER_CLOUDLAB_PORTAL_CA", str(pki.ca))
    return tmp_path


def start_args(*extra: str) -> list[str]:
    return ["cloudlab", "start", PROFILE, "--project", "rainproj", "--name", "rain-1", "--hours", "8",
            "--map", "map.yaml", "-o", "cloudlab.yaml", "--poll-seconds", "0.01", *extra]  # fmt: skip


def secret_material(pki) -> list[str]:
    """What must never be printed or written: the passphrase and the key's lines."""
    body = [ln for ln in pki.key_pem.splitlines() if ln and not ln.startswith("-----")]
    return [pki.passphrase, *body]


def assert_no_secret(texts: list[str], pki) -> None:
    for t in texts:
        for s in secret_material(pki):
            assert s not in t, "a secret leaked"


def fake_run(inventory: str, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """A process that looks like `rainmaker run spec.yaml -i INVENTORY` in the process table."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "rainmaker", "run", "spec.yaml"]
    argv += ["-i", inventory] if inventory else []
    return subprocess.Popen(argv, cwd=cwd, env={**os.environ, **(env or {})})


# -- the lifecycle ------------------------------------------------------------------------


def test_lifecycle_from_start_to_terminate(work, mock, pki, monkeypatch, capsys):
    printed: list[str] = []

    def run(*args: str) -> tuple[int, str, str]:
        code, out, err = rainmaker(monkeypatch, capsys, *args)
        printed.extend([out, err])
        return code, out, err

    # start: startExperiment, status provisioning -> provisioned -> ready, manifests, import
    code, out, err = run(*start_args())
    assert code == 0, err
    flat = " ".join(err.split())
    assert f"{EXP}: started from profile {PROFILE} for 8 h" in flat
    assert flat.index("provisioning") < flat.index("provisioned") < flat.index(": ready")
    assert "Experiment rainproj,rain-1 has been created" in err  # the portal's words, shown
    inv = load_inventory(work / "cloudlab.yaml")  # the inventory validator
    assert [h.name for h in inv.hosts] == ["client0", "worker0", "worker1"] and inv.switch.name == "tofino"
    man = work / "cloudlab.manifest.xml"
    assert man.read_text() == (FIX / "p2p.xml").read_text() and (man.stat().st_mode & 0o777) == 0o600
    assert "rainmaker cloudlab import cloudlab.manifest.xml" in (work / "cloudlab.yaml").read_text()
    method, args, cn = mock.portal.calls[0]
    assert method == "startExperiment" and cn == "alice"  # the client certificate reached the portal
    assert args == {"profile": PROFILE, "proj": "rainproj", "name": "rain-1", "duration": "8"}
    assert [c[0] for c in mock.portal.calls].count("experimentManifests") == 1

    # status
    code, out, _ = run("cloudlab", "status", EXP)
    assert code == 0 and f"{EXP}: ready, expires" in out
    e = mock.portal.experiments[EXP]

    # extend by hand
    before = e.expires
    code, out, err = run("cloudlab", "extend", EXP, "--hours", "4", "--reason", "fig. 6 sweep")
    assert code == 0, err
    assert e.expires - before == dt.timedelta(hours=4)
    assert mock.portal.calls[-2][1] == {"experiment": EXP, "wanted": "4", "reason": "fig. 6 sweep"}

    # keep-alive, bounded: 30 minutes left, margin 1 h -> one extension of 2 h, then no more
    e.expires = mock.portal.now() + dt.timedelta(minutes=30)
    code, out, err = run(
        "cloudlab", "extend", EXP, "--keep-alive", "--hours", "2", "--margin-hours", "1",
        "--interval-seconds", "0.01", "--checks", "3", "--reason", "fig. 6 sweep",
    )  # fmt: skip
    assert code == 0, err
    assert "1 extension(s)" in out and "extended by 2 h" in err
    left = e.expires - mock.portal.now()
    assert dt.timedelta(hours=2) < left < dt.timedelta(hours=2, minutes=31)

    # keep-alive while a run holds the inventory: it ends when the run ends
    proc = fake_run("cloudlab.yaml", work)
    try:
        deadline = time.monotonic() + 10
        while not lifecycle.runs_on(work / "cloudlab.yaml") and time.monotonic() < deadline:
            time.sleep(0.05)
        threading.Timer(1.0, proc.terminate).start()
        t0 = time.monotonic()
        code, out, err = run(
            "cloudlab", "extend", EXP, "--keep-alive", "--inventory", "cloudlab.yaml",
            "--interval-seconds", "0.1", "--checks", "200", "--reason", "fig. 6 sweep",
        )  # fmt: skip
        assert code == 0, err
        assert "the run has ended" in err and time.monotonic() - t0 < 15
    finally:
        proc.kill()
        proc.wait()

    # terminate
    code, out, err = run("cloudlab", "terminate", EXP, "--yes")
    assert code == 0 and f"{EXP}: terminated" in out
    code, _, err = run("cloudlab", "status", EXP)
    assert code == 1 and "no such experiment" in err and "No such instance: rainproj,rain-1" in err

    # nothing printed or written holds the passphrase or the key
    written = [p.read_text(errors="replace") for p in work.rglob("*") if p.is_file()]
    assert_no_secret(printed + written, pki)


def test_attach_waits_for_an_experiment_already_started(work, mock, monkeypatch, capsys):
    Portal(Path(os.environ["RAINMAKER_CLOUDLAB_CERT"]), Secret(os.environ["RAINMAKER_CLOUDLAB_PASSPHRASE"]),
           url=mock.url, ca=Path(os.environ["RAINMAKER_CLOUDLAB_PORTAL_CA"])).start(PROFILE, "rainproj", "rain-1", 4)  # fmt: skip
    code, _, err = rainmaker(monkeypatch, capsys, *start_args())
    assert code == 1 and "already exists" in err and "--attach" in err
    code, _, err = rainmaker(monkeypatch, capsys, *start_args("--attach"))
    assert code == 0, err
    assert [c[0] for c in mock.portal.calls].count("startExperiment") == 2  # the refused one, none more
    load_inventory(work / "cloudlab.yaml")


# -- failures, in the portal's words --------------------------------------------------------


@pytest.mark.parametrize(
    "fail,profile,why,said",
    [
        ("quota", PROFILE, "over quota", "over its node-hour quota"),
        ("resources", PROFILE, "not enough free resources", "Insufficient resources: 3 nodes of type d6515"),
        ("profile", PROFILE, "the profile was refused", "ParameterError: A Tofino has at most 64 ports"),
        (None, "rainproj,nope", "no such profile", "No such profile: rainproj,nope"),
    ],
)
def test_start_failures_say_why_in_the_portals_words(work, mock, monkeypatch, capsys, fail, profile, why, said):
    mock.portal.fail_next_start = fail
    args = start_args()
    args[2] = profile
    code, out, err = rainmaker(monkeypatch, capsys, *args)
    assert code == 1
    flat = " ".join(err.split())
    assert why in flat and said in flat and "fix:" in err
    assert not (work / "cloudlab.yaml").exists() and not mock.portal.experiments


def test_a_failed_experiment_and_a_wait_past_its_deadline(work, mock, monkeypatch, capsys):
    mock.portal.fail_provisioning = True
    code, _, err = rainmaker(monkeypatch, capsys, *start_args())
    assert code == 1 and f"{EXP}: the portal reports it failed" in err and f"cloudlab terminate {EXP}" in err
    mock.portal.experiments.clear()
    mock.portal.fail_provisioning = False
    mock.portal.ready_after = 10_000
    t0 = time.monotonic()
    code, _, err = rainmaker(monkeypatch, capsys, *start_args("--wait-minutes", "0.01", "--force"))
    assert code == 1 and "still provisioning after" in err and "--attach" in err
    assert time.monotonic() - t0 < 10


def test_unknown_and_expired_experiments(work, mock, monkeypatch, capsys):
    code, _, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "extend", "rainproj,ghost", "--hours", "1", "--reason", "x"
    )
    assert code == 1 and "no such experiment" in err and "No such instance: rainproj,ghost" in err
    assert rainmaker(monkeypatch, capsys, *start_args())[0] == 0
    mock.portal.experiments[EXP].expires = mock.portal.now() - dt.timedelta(minutes=1)
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "extend", EXP, "--hours", "1", "--reason", "x")
    assert code == 1 and "has expired" in err and "start a new one" in err


def test_a_refused_extension_is_said_and_keep_alive_goes_on(work, mock, pki):
    portal = Portal(pki.client, Secret(pki.passphrase), url=mock.url, ca=pki.ca)
    portal.start(PROFILE, "rainproj", "rain-1", 1)
    mock.portal.refuse_extensions = True
    with pytest.raises(PortalError) as ei:
        portal.extend(EXP, 48, "long sweep")
    assert ei.value.kind == "refused" and "administrator" in ei.value.fix
    said: list[str] = []
    keeper = lifecycle.KeepAlive(portal, EXP, 4, "long sweep", margin_s=2 * 3600, interval_s=0, running=lambda: True,
                                 say=said.append, sleep=lambda _s: None)  # fmt: skip
    assert keeper.loop(max_checks=2) == 0
    assert sum("extension not granted (refused)" in s and "administrators for approval" in s for s in said) == 2
    mock.portal.refuse_extensions = False
    assert keeper.loop(max_checks=1) == 1


def test_keep_alive_stops_when_the_run_ends_and_extends_only_below_the_margin(work, mock, pki):
    portal = Portal(pki.client, Secret(pki.passphrase), url=mock.url, ca=pki.ca)
    portal.start(PROFILE, "rainproj", "rain-1", 10)
    runs = iter([True, True, False])
    said: list[str] = []
    keeper = lifecycle.KeepAlive(portal, EXP, 4, "r", margin_s=3600, interval_s=0, running=lambda: next(runs),
                                 say=said.append, sleep=lambda _s: None)  # fmt: skip
    assert keeper.loop() == 0  # 10 h left: nothing to extend
    assert len([c for c in mock.portal.calls if c[0] == "experimentStatus"]) == 3
    assert "the run has ended" in said[-1]


# -- certificates and TLS ----------------------------------------------------------------------


def test_certificate_and_tls_failures_are_named(work, mock, pki, monkeypatch, capsys):
    texts = []

    def status(**env) -> tuple[int, str]:
        for k, v in env.items():
            if v is None:
                monkeypatch.delenv(k, raising=False)
            else:
                monkeypatch.setenv(k, v)
        code, out, err = rainmaker(monkeypatch, capsys, "cloudlab", "status", EXP)
        texts.extend([out, err])
        return code, " ".join(err.split())

    code, err = status(RAINMAKER_CLOUDLAB_PASSPHRASE="not-" + pki.passphrase)
    assert code == 2 and "wrong passphrase" in err and "SSL error" in err
    code, err = status(RAINMAKER_CLOUDLAB_PASSPHRASE=None)  # no terminal to ask in
    assert code == 2 and "no passphrase was given" in err and "RAINMAKER_CLOUDLAB_PASSPHRASE" in err
    code, err = status(RAINMAKER_CLOUDLAB_PASSPHRASE=pki.passphrase, RAINMAKER_CLOUDLAB_CERT=str(pki.stranger))
    # (an alert, or under TLS 1.3 as often a closed socket: both name the certificate)
    assert code == 2 and ("refuses the client certificate" in err or "refused the client certificate" in err), err
    code, err = status(RAINMAKER_CLOUDLAB_CERT=str(pki.client), RAINMAKER_CLOUDLAB_PORTAL_CA=str(pki.other_ca))
    assert code == 2 and "server certificate was not verified" in err and "--portal-ca" in err
    code, err = status(RAINMAKER_CLOUDLAB_PORTAL_CA=None)  # the system's CAs do not know the mock's
    assert code == 2 and "server certificate was not verified" in err
    code, err = status(RAINMAKER_CLOUDLAB_PORTAL_CA=str(pki.ca), RAINMAKER_CLOUDLAB_CERT=str(work / "none.pem"))
    assert code == 2 and "none.pem: no such file" in err and "Download Credentials" in err
    code, err = status(RAINMAKER_CLOUDLAB_CERT=str(pki.client), RAINMAKER_CLOUDLAB_PORTAL="http://127.0.0.1:1/x")
    assert code == 2 and "not an https URL" in err
    code, err = status(RAINMAKER_CLOUDLAB_PORTAL="https://127.0.0.1:1/usr/testbed")
    assert code == 1 and "unreachable" in err
    code, err = status(RAINMAKER_CLOUDLAB_PORTAL=mock.url.replace("/usr/testbed", "/elsewhere"))
    assert code == 1 and "HTTP 404" in err
    assert mock.server.handshake_errors  # the mock did refuse the stranger and the unverified clients
    assert_no_secret(texts, pki)


def test_a_secret_never_shows_in_a_repr_an_error_or_a_pickle(pki, mock):
    s = Secret(pki.passphrase)
    assert pki.passphrase not in repr(s) + str(s) + f"{s}"
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(s)
    with pytest.raises(CertificateError) as ei:
        Portal(pki.client, Secret(pki.passphrase + "x"), url=mock.url, ca=pki.ca)
    assert_no_secret([ei.value.render(), repr(ei.value.args), str(ei.value.__cause__ or "")], pki)
    p = Portal(pki.client, s, url=mock.url, ca=pki.ca)
    assert_no_secret([repr(p), repr(vars(p))], pki)


def test_unreachable_portal_is_said(pki):
    p = Portal(pki.client, Secret(pki.passphrase), url="https://127.0.0.1:1/usr/testbed", ca=pki.ca, timeout=5)
    with pytest.raises(PortalUnreachable, match="unreachable"):
        p.status(EXP)


# -- the command line's own checks ---------------------------------------------------------------


def test_terminate_asks_unless_yes(work, mock, monkeypatch, capsys):
    assert rainmaker(monkeypatch, capsys, *start_args())[0] == 0
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "terminate", EXP)
    assert code == 2 and "--yes" in err and EXP in mock.portal.experiments


@pytest.mark.parametrize(
    "args,words",
    [
        (["cloudlab", "start", "not a profile", "--project", "p", "--name", "n"], "neither PROJECT,NAME nor a UUID"),
        (
            ["cloudlab", "start", PROFILE, "--project", "p", "--name", "a-name-far-too-long"],
            "cannot name an experiment",
        ),
        (["cloudlab", "extend", EXP, "--hours", "2"], "needs a reason"),
        (["cloudlab", "extend", EXP, "--reason", "x"], "how many hours"),
        (["cloudlab", "extend", EXP, "--reason", "x", "--hours", "1", "--checks", "2"], "goes with --keep-alive"),
        (["cloudlab", "extend", EXP, "--keep-alive", "--reason", "x", "--inventory", "cloudlab.yaml"], "no such file"),
        (["cloudlab", "status", "rainproj"], "neither PROJECT,NAME nor a UUID"),
    ],
)
def test_bad_input_is_refused_before_the_portal_is_called(work, mock, monkeypatch, capsys, args, words):
    code, _, err = rainmaker(monkeypatch, capsys, *args)
    assert code == 2 and words in err and "fix:" in err
    assert not mock.portal.calls


def test_keep_alive_on_an_inventory_no_run_holds_is_refused(work, mock, monkeypatch, capsys):
    (work / "cloudlab.yaml").write_text("name: x\n")
    code, _, err = rainmaker(
        monkeypatch, capsys, "cloudlab", "extend", EXP, "--keep-alive", "--reason", "x", "--inventory", "cloudlab.yaml"
    )
    assert code == 2 and "no `rainmaker run` (or calibrate) on cloudlab.yaml is running" in err
    assert not mock.portal.calls


def test_an_existing_inventory_or_bad_map_stops_start_before_the_portal(work, mock, monkeypatch, capsys):
    (work / "cloudlab.yaml").write_text("")
    code, _, err = rainmaker(monkeypatch, capsys, *start_args())
    assert code == 2 and "cloudlab.yaml exists" in err
    (work / "cloudlab.yaml").unlink()
    (work / "map.yaml").write_text("switch: {nonsense: 1}\n")
    code, _, err = rainmaker(monkeypatch, capsys, *start_args())
    assert code == 2 and "map.yaml" in err
    assert not mock.portal.calls


def test_the_help_teaches_the_lifecycle(monkeypatch, capsys):
    code, out, _ = rainmaker(monkeypatch, capsys, "cloudlab", "start", "--help")
    assert code == 0 and "--attach" in out and "RAINMAKER_CLOUDLAB_PASSPHRASE" in out and "--portal-ca" in out
    code, out, _ = rainmaker(monkeypatch, capsys, "cloudlab", "extend", "--help")
    assert code == 0 and "--keep-alive" in out and "--margin-hours" in out


# -- pieces --------------------------------------------------------------------------------------


def test_runs_on_finds_a_run_by_its_inventory_option_or_environment(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("")
    assert lifecycle.runs_on(inv) == []
    procs = [fake_run("inv.yaml", tmp_path), fake_run("", tmp_path, {"RAINMAKER_INVENTORY": str(inv)})]
    try:
        deadline = time.monotonic() + 10
        while len(lifecycle.runs_on(inv)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lifecycle.runs_on(inv) == sorted(p.pid for p in procs)
        assert lifecycle.runs_on(tmp_path / "other.yaml") == []
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert lifecycle.runs_on(inv) == []


def test_backoff_grows_to_its_cap():
    d = lifecycle.Backoff(first=10, factor=1.5, cap=30).delays()
    assert [next(d) for _ in range(5)] == [10, 15, 22.5, 30, 30]


def test_status_is_read_in_json_and_in_text():
    st = parse_status('{"status": "ready", "expires": "2031-05-02T16:00:00Z", "uuid": "u-1"}')
    assert st.ready and st.expires == dt.datetime(2031, 5, 2, 16, tzinfo=dt.UTC) and st.uuid == "u-1"
    st = parse_status("Status: provisioning\nUUID: u-2\n")
    assert st.status == "provisioning" and not st.ready and not st.failed and st.uuid == "u-2"
    with pytest.raises(PortalUnreachable, match="no status"):
        parse_status("<html>")


def test_ctrl_c_while_waiting_keeps_the_experiment_and_says_how_to_attach(work, mock, monkeypatch, capsys):
    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle, "wait_ready", interrupted)
    code, _, err = rainmaker(monkeypatch, capsys, *start_args())
    assert code == 130 and "keeps starting on CloudLab" in err and "--attach" in err
    assert EXP in mock.portal.experiments and not (work / "cloudlab.yaml").exists()


def test_a_portal_that_closes_the_handshake_is_named_as_refusing_the_certificate(work, monkeypatch, capsys):
    # Under TLS 1.3 a portal that refuses the client certificate often just closes the
    # socket: the client meets EOF, not an alert. A listener that reads the client's
    # hello and hangs up does the same, every time.
    import socket

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def hang_up() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)

    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    monkeypatch.setenv("RAINMAKER_CLOUDLAB_PORTAL", f"https://127.0.0.1:{port}/usr/testbed")
    code, _, err = rainmaker(monkeypatch, capsys, "cloudlab", "status", EXP)
    t.join(timeout=10)
    srv.close()
    err = " ".join(err.split())
    assert code == 2 and "closed during the TLS handshake" in err and "client certificate" in err, err
    assert "--cert" in err
