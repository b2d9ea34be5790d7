"""A MOCK of CloudLab's portal XML-RPC server, for tests: not CloudLab, and not its code.

It serves, on 127.0.0.1 only, the five calls `rainmaker cloudlab start/status/extend/
terminate` make, the way the portal's server (Emulab's `emulabserver.py`, class
`portal`) and its command-line tools (portal-tools) have them:

- HTTPS, path /usr/testbed, the client authenticated by its certificate (the server
  requires one signed by its CA, as the portal requires the user's portal certificate);
- `portal.<method>(0.1, {args})` -> {code, value, output}: code 0 success, 1 bad
  arguments ("Must supply 'proj'"), 4 a version other than 0.1; a failure of the
  back-end is code 2 with `value` its exit status, a GENI response code (12 no such
  experiment, 15 expired, 17 already exists, 26 insufficient nodes), and `output` the
  back-end's text;
- startExperiment {profile, proj, name, duration, [aggregate]} (every value a string,
  as the server shell-quotes them); experimentStatus {experiment, [asjson]} answering
  JSON {status, uuid, expires} in `output` (or 'Status: ...' text); experimentManifests
  {experiment} answering JSON {aggregate URN: manifest XML}; extendExperiment
  {experiment, wanted, reason}; terminateExperiment {experiment}.

The portal's words for quota, missing nodes and profile errors are this mock's own
(the real texts vary); tests assert that whatever the portal says reaches the user.
An experiment goes provisioning -> provisioned -> ready over `ready_after` status
calls, or to failed when told to.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socketserver
import ssl
import threading
import uuid as uuidlib
import xmlrpc.server
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VERSION = 0.1
AGGREGATE = "urn:publicid:IDN+utah.cloudlab.us+authority+cm"


# -- a throwaway PKI --------------------------------------------------------------------


@dataclass
class Pki:
    ca: Path  # the CA of the mock portal (server and client certificates)
    server: Path  # server certificate + key (PEM)
    client: Path  # the user's "portal certificate": certificate + encrypted key, one PEM
    stranger: Path  # a client certificate + key from another CA (the portal refuses it)
    other_ca: Path  # a CA that did not sign the server (verification fails)
    passphrase: str
    key_pem: str  # the client key's PEM text (to check it never leaks)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, key, issuer, issuer_key, *, ca=False, server=False):
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, passphrase: str | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(passphrase.encode()) if passphrase else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(folder: Path, passphrase: str) -> Pki:
    """CA, server and client certificates for one test; the client key encrypted."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(_name("mock portal CA"), ca_key, _name("mock portal CA"), ca_key, ca=True)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = _cert(_name("localhost"), srv_key, ca.subject, ca_key, server=True)
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = _cert(_name("alice"), cli_key, ca.subject, ca_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert(_name("another CA"), other_key, _name("another CA"), other_key, ca=True)
    str_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _cert(_name("mallory"), str_key, other.subject, other_key)

    p = Pki(
        ca=folder / "ca.pem",
        server=folder / "server.pem",
        client=folder / "cloudlab.pem",
        stranger=folder / "stranger.pem",
        other_ca=folder / "other-ca.pem",
        passphrase=passphrase,
        key_pem="",
    )
    p.ca.write_bytes(_pem(ca))
    p.other_ca.write_bytes(_pem(other))
    p.server.write_bytes(_pem(srv) + _key_pem(srv_key))
    key = _key_pem(cli_key, passphrase)
    p.key_pem = key.decode()
    p.client.write_bytes(key + _pem(cli))  # as the portal's download: key, then certificate
    p.stranger.write_bytes(_key_pem(str_key, passphrase) + _pem(stranger))
    return p


# -- the portal's state -----------------------------------------------------------------


@dataclass
class Experiment:
    project: str
    name: str
    profile: str
    expires: dt.datetime
    uuid: str = field(default_factory=lambda: str(uuidlib.uuid4()))
    polls: int = 0
    status: str = "provisioning"

    @property
    def ref(self) -> str:
        return f"{self.project},{self.name}"


def _ok(output: str = "", value=0) -> dict:
    return {"code": 0, "value": value, "output": output}


def _fail(value: int, output: str, code: int = 2) -> dict:
    return {"code": code, "value": value, "output": output}


class Portal:
    """The calls, their checks and the experiments (thread-safe)."""

    def __init__(self, profiles: dict[str, str]):
        self.profiles = profiles  # "project,name" -> the manifest an experiment of it gets
        self.experiments: dict[str, Experiment] = {}
        self.ready_after = 3  # status calls until ready
        self.fail_next_start: str | None = None  # quota, resources, profile
        self.fail_provisioning = False
        self.refuse_extensions = False
        self.calls: list[tuple[str, dict, str | None]] = []  # (method, args, client certificate CN)
        self.now = lambda: dt.datetime.now(dt.UTC)
        self.lock = threading.Lock()

    def _find(self, ref: str) -> Experiment | dict:
        e = self.experiments.get(ref) or next((x for x in self.experiments.values() if x.uuid == ref), None)
        if e is None:
            return _fail(12, f"No such instance: {ref}")
        if self.now() >= e.expires:
            del self.experiments[e.ref]
            return _fail(15, f"Instance {e.ref} has expired and was terminated")
        return e

    @staticmethod
    def _required(args: dict, *names: str) -> dict | None:
        for n in names:
            if n not in args:
                return _fail(0, f"Must supply '{n}'", code=1)
        return None

    def call(self, method: str, version, args: dict, cn: str | None) -> dict:
        with self.lock:
            self.calls.append((method, dict(args), cn))
            if version != VERSION:
                return _fail(0, "Client version mismatch!", code=4)
            if not isinstance(args, dict) or any(not isinstance(v, str | int) for v in args.values()):
                return _fail(0, "Arguments must be a struct of strings", code=1)
            handler = getattr(self, "_" + method, None)
            if handler is None:
                raise xmlrpc.server.Fault(1, f"unknown method 'portal.{method}'")  # as the dispatcher answers
            return handler(args)

    def _startExperiment(self, a: dict) -> dict:
        bad = self._required(a, "proj", "profile")
        if bad:
            return bad
        for k, v in a.items():
            if not isinstance(v, str):  # the server shell-quotes each value: it must be a string
                return _fail(0, f"Improper argument '{k}'", code=1)
        fail, self.fail_next_start = self.fail_next_start, None
        if fail == "quota":
            return _fail(2, f"Project {a['proj']} is over its node-hour quota; cannot start a new experiment")
        if fail == "resources":
            return _fail(26, "Insufficient resources: 3 nodes of type d6515 requested, 1 free on Cloudlab Utah")
        if a["profile"] not in self.profiles:
            return _fail(12, f"No such profile: {a['profile']}")
        if fail == "profile":
            return _fail(
                2,
                "Error running geni-lib script for profile " + a["profile"] + ":\n"
                "  ParameterError: A Tofino has at most 64 ports for the hosts.",
            )
        name = a.get("name") or "exp-" + uuidlib.uuid4().hex[:6]
        ref = f"{a['proj']},{name}"
        if ref in self.experiments:
            return _fail(17, f"Experiment {name} already exists in project {a['proj']}")
        hours = int(a.get("duration", "16"))
        e = Experiment(a["proj"], name, a["profile"], self.now() + dt.timedelta(hours=hours))
        self.experiments[ref] = e
        return _ok(f"Experiment {ref} has been created\nUUID: {e.uuid}\n")

    def _experimentStatus(self, a: dict) -> dict:
        bad = self._required(a, "experiment")
        if bad:
            return bad
        e = self._find(a["experiment"])
        if isinstance(e, dict):
            return e
        e.polls += 1
        if e.status not in ("ready", "failed"):
            if self.fail_provisioning and e.polls >= 2:
                e.status = "failed"
            elif e.polls >= self.ready_after:
                e.status = "ready"
            elif e.polls == self.ready_after - 1:
                e.status = "provisioned"
        expires = e.expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        if a.get("asjson"):
            return _ok(json.dumps({"status": e.status, "uuid": e.uuid, "expires": expires, "name": e.name}))
        return _ok(f"Status: {e.status}\nUUID: {e.uuid}\nexpires: {expires}\n")

    def _experimentManifests(self, a: dict) -> dict:
        bad = self._required(a, "experiment")
        if bad:
            return bad
        e = self._find(a["experiment"])
        if isinstance(e, dict):
            return e
        if e.status != "ready":
            return _fail(2, f"Instance {e.ref} is not ready ({e.status}): no manifests yet")
        return _ok(json.dumps({AGGREGATE: self.profiles[e.profile]}))

    def _extendExperiment(self, a: dict) -> dict:
        bad = self._required(a, "experiment", "wanted", "reason")
        if bad:
            return bad
        e = self._find(a["experiment"])
        if isinstance(e, dict):
            return e
        if not str(a["reason"]).strip():
            return _fail(0, "Must supply a reason", code=1)
        if self.refuse_extensions:
            return _fail(7, "Your request has been sent to the testbed administrators for approval")
        e.expires += dt.timedelta(hours=int(a["wanted"]))
        return _ok(f"Experiment {e.ref} extended until {e.expires:%Y-%m-%dT%H:%M:%SZ}")

    def _terminateExperiment(self, a: dict) -> dict:
        bad = self._required(a, "experiment")
        if bad:
            return bad
        e = self._find(a["experiment"])
        if isinstance(e, dict):
            return e
        del self.experiments[e.ref]
        return _ok(f"Experiment {e.ref} is terminating")


# -- the server -------------------------------------------------------------------------


class _Handler(xmlrpc.server.SimpleXMLRPCRequestHandler):
    rpc_paths = ("/usr/testbed",)

    def handle(self):
        peer = self.request.getpeercert() or {}
        cn = next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), None)
        self.server.local.cn = cn
        super().handle()

    def log_message(self, *_args):  # quiet
        pass


class _Server(socketserver.ThreadingMixIn, xmlrpc.server.SimpleXMLRPCServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tls: ssl.SSLContext, portal: Portal):
        super().__init__(("127.0.0.1", 0), requestHandler=_Handler, logRequests=False, allow_none=False)
        self.tls = tls
        self.portal = portal
        self.local = threading.local()
        self.handshake_errors: list[str] = []

    def finish_request(self, request, client_address):
        try:
            conn = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            self.handshake_errors.append(str(e))
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()

    def _dispatch(self, method, params):
        module, _, name = method.partition(".")
        if module != "portal" or len(params) != 2:
            raise xmlrpc.server.Fault(1, f"unknown method '{method}'")
        return self.portal.call(name, params[0], params[1], getattr(self.local, "cn", None))


class MockPortal:
    """The mock portal running in a thread: `url`, `portal` (its state), `stop()`."""

    def __init__(self, pki: Pki, profiles: dict[str, str]):
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(pki.server))
        tls.load_verify_locations(cafile=str(pki.ca))
        tls.verify_mode = ssl.CERT_REQUIRED  # the user's portal certificate, or nothing
        self.portal = Portal(profiles)
        self.server = _Server(tls, self.portal)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/usr/testbed"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
