"""A client of CloudLab's portal API: the XML-RPC server the portal's own command-line
tools (portal-tools: startExperiment, experimentStatus, ...) talk to.

The wire, as the portal's server and its tools have it:
- HTTPS to https://boss.emulab.net:3069/usr/testbed (CloudLab's experiments are run by
  the Emulab portal at Utah). The client authenticates with the user's portal
  certificate: the PEM file the portal's "Download Credentials" gives (client
  certificate and its private key, the key encrypted with a passphrase).
- A call is `portal.<method>(0.1, {argument: value, ...})`: the API version, then one
  struct of arguments. The answer is a struct {code, value, output}: code 0 is
  success; otherwise `value` is the exit status of the portal's back-end script (a
  GENI response code, e.g. 12 no such experiment, 17 already exists, 26 insufficient
  nodes) when it gave one, and `output` is the portal's own text, which is shown to
  the user as it is.
- experimentStatus (asjson) and experimentManifests answer in `output` with JSON: a
  status object ({"status": "provisioning"|"ready"|"failed"|..., "expires":
  "2025-02-25T03:25:59Z", "uuid": ...}), or {aggregate URN: manifest XML}.

The certificate's passphrase is a Secret: it reaches ssl's key loader and nothing
else (never a message, a log, a repr). The portal's server certificate is verified:
against the system's CAs, or against the CA file given (`--portal-ca`); verification
is never turned off.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import xmlrpc.client
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import RainmakerError, UsageError

DEFAULT_PORTAL = "https://boss.emulab.net:3069/usr/testbed"
API_VERSION = 0.1  # the server refuses any other (RESPONSE_BADVERSION)
TIMEOUT_S = 120.0  # one call; the server itself sleeps a few seconds in experimentStatus


class Code(IntEnum):
    """The `code` of a portal answer (the Emulab XML-RPC server's RESPONSE_* values)."""

    SUCCESS = 0
    BADARGS = 1
    ERROR = 2
    FORBIDDEN = 3
    BADVERSION = 4
    SERVERERROR = 5
    TOOBIG = 6
    REFUSED = 7  # the portal is down or refuses logins; for an extension: needs an administrator
    TIMEDOUT = 8
    SEARCHFAILED = 12
    ALREADYEXISTS = 17


# The `value` of a failed answer: the back-end script's exit status, a GENI response code.
GENI = {
    1: "bad arguments",
    2: "error",
    3: "forbidden",
    7: "refused",
    8: "timed out",
    11: "unavailable",
    12: "no such experiment",
    14: "busy",
    15: "expired",
    16: "in progress",
    17: "already exists",
    23: "over quota",
    24: "VLAN unavailable",
    25: "insufficient bandwidth",
    26: "insufficient nodes",
    27: "insufficient memory",
    28: "no mapping possible",
    30: "mapping impossible",
}

_EXPERIMENT_RE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_]{0,47},[A-Za-z][-A-Za-z0-9]{0,31}$")
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class Secret:
    """A passphrase: its value is read by the key loader only; it prints as ***."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __reduce__(self):  # never pickled, never copied into a child's state
        raise TypeError("a Secret is not picklable")


class PortalError(RainmakerError):
    """The portal answered a call with a failure, in its own words (`output`).

    `kind` says what it means for the user: quota, resources, profile, exists,
    unknown, expired, refused, forbidden, version, args, error."""

    def __init__(self, method: str, target: str, code: int, value: Any, output: str):
        self.method, self.target, self.code, self.value, self.output = method, target, code, value, output
        self.kind, why, fix = classify(method, code, value, output)
        said = output.strip() or "(no text)"
        super().__init__(
            f"CloudLab portal: {method} {target}: {why}\n  the portal says: " + said.replace("\n", "\n    "),
            fix=fix,
        )


class PortalUnreachable(RainmakerError):
    """No answer from the portal: name resolution, connection, time-out, or an HTTP error."""


class CertificateError(UsageError):
    """The portal certificate (or its passphrase, or the portal's CA) cannot be used."""


def classify(method: str, code: int, value: Any, output: str) -> tuple[str, str, str]:
    """(kind, why, fix) of a failed answer, from its code, its value and the portal's text."""
    text = output.lower()
    v = value if isinstance(value, int) and not isinstance(value, bool) else None
    if code == Code.BADVERSION:
        return "version", "the portal refused this client's API version", "report it: rainmaker speaks version 0.1"
    if code == Code.FORBIDDEN or v == 3:
        return (
            "forbidden",
            "not allowed",
            "check that you are a member of the project, that the profile is shared with you, "
            "and that the certificate is yours",
        )
    if v == 23 or "quota" in text:
        return (
            "quota",
            "over quota",
            "your project's allocation or quota is used up: terminate experiments you no longer need, "
            "or ask the project leader (or CloudLab) for more",
        )
    if v in (24, 25, 26, 27, 28, 30) or re.search(
        r"insufficient|not enough|no free|resources? (are )?(not )?avail", text
    ):
        return (
            "resources",
            "the cluster has not enough free resources (" + GENI.get(v or 26, "insufficient nodes") + ")",
            "try later, another cluster, or fewer/other hardware types (the portal's Resource Availability "
            "page shows free nodes); a reservation guarantees them",
        )
    if v == 17 or code == Code.ALREADYEXISTS or "already exists" in text or "in use" in text and "name" in text:
        return (
            "exists",
            "an experiment of that name already exists",
            "pick another --name, or use it: `rainmaker cloudlab start ... --attach` waits for it and imports it",
        )
    if v == 12 or code == Code.SEARCHFAILED or re.search(r"no such (experiment|instance)|does not exist", text):
        if "profile" in text:
            return "profile", "no such profile", "give the profile as PROJECT,NAME (or its UUID) as the portal lists it"
        return (
            "unknown",
            "no such experiment (terminated, expired, or another name)",
            "check the name: `rainmaker cloudlab status PROJECT,NAME`; the portal's Experiments list shows yours",
        )
    if v == 15 or "expired" in text:
        return "expired", "the experiment has expired", "start a new one (`rainmaker cloudlab start`)"
    if "profile" in text or "geni-lib" in text or "rspec" in text or "parameter" in text:
        return (
            "profile",
            "the profile was refused",
            "fix the profile as the portal's words say (`rainmaker cloudlab profile` writes one; check its "
            "parameters), and update it in the portal",
        )
    if code == Code.REFUSED or v == 7:
        if method == "extendExperiment":
            return (
                "refused",
                "the extension was not granted automatically",
                "an administrator must approve it (the portal has the request); "
                "`rainmaker cloudlab status` shows the expiration",
            )
        return "refused", "the portal refuses requests now (maintenance?)", "try again later"
    if code == Code.BADARGS or v == 1:
        return "args", "the portal refused the arguments", "check the names given (project, profile, experiment)"
    if code == Code.TIMEDOUT or v == 8:
        return "error", "the portal timed out", "try again; `rainmaker cloudlab status` says whether it happened"
    return (
        "error",
        f"failed (code {code}{f', value {value}' if value not in (None, 0, '') else ''})",
        ("read the portal's words above; the experiment's page in the portal has the details"),
    )


def check_experiment(ref: str, what: str = "EXPERIMENT") -> str:
    """An experiment (or profile) reference as the portal takes it: PROJECT,NAME or a UUID."""
    if _EXPERIMENT_RE.match(ref) or _UUID_RE.match(ref):
        return ref
    raise UsageError(
        f"{what} '{ref}' is neither PROJECT,NAME nor a UUID",
        fix="write it as the portal does, e.g. rainproj,rain-1 (project, a comma, the name)",
    )


@dataclass
class Status:
    """An experiment's state as experimentStatus reports it."""

    status: str  # provisioning, provisioned, ready, failed, ... (the portal's word)
    expires: datetime | None
    uuid: str | None
    raw: dict = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "terminating", "terminated", "canceled", "cancelled")

    def remaining_s(self, now: datetime | None = None) -> float | None:
        if self.expires is None:
            return None
        return (self.expires - (now or datetime.now(UTC))).total_seconds()

    def details(self) -> str:
        """The portal's other words about a failure, if its status object has any."""
        keys = [k for k in self.raw if re.search(r"fail|error|message|reason", k, re.IGNORECASE)]
        return "; ".join(f"{k}: {self.raw[k]}" for k in keys if self.raw[k])


def parse_expires(text: Any) -> datetime | None:
    if not text:
        return None
    s = str(text).strip()
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S"):
        try:
            d = datetime.strptime(s, fmt)
            return d.replace(tzinfo=UTC) if d.tzinfo is None else d.astimezone(UTC)
        except ValueError:
            continue
    return None


def parse_status(text: str) -> Status:
    """experimentStatus's output: JSON (asjson), else the text form ('Status: ready')."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "status" in data:
        return Status(str(data["status"]), parse_expires(data.get("expires")), data.get("uuid"), data)
    fields = dict(
        (k.strip().lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in text.splitlines()) if v.strip()
    )
    if "status" not in fields:
        raise PortalUnreachable(
            f"CloudLab portal: experimentStatus answered something that is no status: {text.strip()[:200]!r}",
            fix="check --portal: it must be the portal's XML-RPC address",
        )
    return Status(fields["status"], parse_expires(fields.get("expires")), fields.get("uuid"), fields)


class _Transport(xmlrpc.client.SafeTransport):
    """HTTPS with our TLS context and a time-out on every call."""

    def __init__(self, context: ssl.SSLContext, timeout: float):
        super().__init__(context=context)
        self.timeout = timeout

    def make_connection(self, host):
        conn = super().make_connection(host)
        conn.timeout = self.timeout
        return conn


def tls_context(cert: Path, passphrase: Secret | None, ca: Path | None) -> ssl.SSLContext:
    """The client's TLS context: the portal certificate as client certificate, the
    server verified (system CAs, or `ca` alone), its host name checked."""
    if not cert.is_file():
        raise CertificateError(
            f"portal certificate {cert}: no such file",
            fix="download it from the portal (your name, top right > Download Credentials) and pass --cert "
            "(or set RAINMAKER_CLOUDLAB_CERT)",
        )
    if ca is not None and not ca.is_file():
        raise CertificateError(f"--portal-ca {ca}: no such file", fix="give the CA certificate (PEM) of the portal")
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca) if ca else None)
    except ssl.SSLError as e:
        raise CertificateError(
            f"--portal-ca {ca}: not a CA certificate in PEM ({e.reason or 'unreadable'})",
            fix="give the PEM file of the CA that signed the portal's server certificate",
        ) from None
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED

    def password() -> str:
        if passphrase is None:
            raise CertificateError(
                f"portal certificate {cert}: its key is encrypted and no passphrase was given",
                fix="set RAINMAKER_CLOUDLAB_PASSPHRASE, or run in a terminal to be asked",
            )
        return passphrase.reveal()

    try:
        try:
            ctx.load_cert_chain(str(cert), password=password)
        except ssl.SSLError as e:
            if e.reason not in ("EE_KEY_TOO_SMALL", "CA_MD_TOO_WEAK"):
                raise
            # An older portal certificate (a small key, an old digest) that OpenSSL's
            # default security level refuses: the level portal-tools use takes it.
            ctx.set_ciphers("DEFAULT:@SECLEVEL=1")
            ctx.load_cert_chain(str(cert), password=password)
    except CertificateError:
        raise
    except ssl.SSLError:
        # ssl says only "PEM lib": read the file again to say which part is wrong.
        why, fix = diagnose(cert, passphrase)
        raise CertificateError(f"portal certificate {cert}: {why} (SSL error loading it)", fix=fix) from None
    except (OSError, ValueError) as e:
        raise CertificateError(
            f"portal certificate {cert}: cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})",
            fix="check the file and its permissions",
        ) from None
    return ctx


def diagnose(cert: Path, passphrase: Secret | None) -> tuple[str, str]:
    """(why, fix) when ssl refuses the certificate file: no certificate, no key, a
    wrong passphrase, or a key of another certificate. Never says the key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    data = cert.read_bytes()
    download = "pass the file the portal's Download Credentials gives: certificate and key in one PEM"
    blocks = re.findall(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", data, re.DOTALL)
    key_m = re.search(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?-----END \1-----", data, re.DOTALL)
    if b"CERTIFICATE" not in blocks:
        return "no certificate in it (a PEM 'BEGIN CERTIFICATE' block)", download
    if key_m is None:
        return "no private key in it (a PEM 'BEGIN ... PRIVATE KEY' block)", download
    try:
        key = serialization.load_pem_private_key(key_m.group(0), passphrase.reveal().encode() if passphrase else None)
    except (TypeError, ValueError) as e:
        if "password" in str(e).lower() or "decrypt" in str(e).lower():
            return "wrong passphrase: its key could not be decrypted", (
                "give the passphrase you chose when you downloaded it (RAINMAKER_CLOUDLAB_PASSPHRASE or the prompt)"
            )
        return "its private key cannot be read", download
    try:
        crt = x509.load_pem_x509_certificate(
            re.search(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", data, re.DOTALL).group(0)
        )
    except ValueError:
        return "its certificate cannot be read", download
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if crt.public_key().public_bytes(serialization.Encoding.DER, pub) != key.public_key().public_bytes(
        serialization.Encoding.DER, pub
    ):
        return "its key is not the certificate's", download
    return "the certificate and key were refused", download


def key_is_encrypted(cert: Path) -> bool:
    """Whether the PEM's private key needs a passphrase (read as text, never kept)."""
    try:
        text = cert.read_text(errors="replace")
    except OSError:
        return False
    return "ENCRYPTED" in text and "PRIVATE KEY" in text


class Portal:
    """One portal, one user (the certificate's)."""

    def __init__(
        self,
        cert: Path,
        passphrase: Secret | None,
        *,
        url: str = DEFAULT_PORTAL,
        ca: Path | None = None,
        timeout: float = TIMEOUT_S,
    ):
        u = urlsplit(url)
        if u.scheme != "https" or not u.hostname:
            raise UsageError(
                f"--portal '{url}' is not an https URL",
                fix=f"give the portal's XML-RPC address, e.g. {DEFAULT_PORTAL} (the portal is reached over TLS only)",
            )
        self.url = url
        self.cert = Path(cert)
        self.ca = ca
        self._proxy = xmlrpc.client.ServerProxy(
            url, transport=_Transport(tls_context(self.cert, passphrase, ca), timeout), allow_none=False
        )

    # -- one call ---------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any], target: str = "") -> dict[str, Any]:
        """Call portal.<method>(0.1, params); the answer's struct, or a PortalError in
        the portal's words, or PortalUnreachable / CertificateError for the transport."""
        where = urlsplit(self.url).netloc
        try:
            answer = getattr(self._proxy, f"portal.{method}")(API_VERSION, params)
        except xmlrpc.client.Fault as f:
            raise PortalError(method, target, Code.ERROR, None, f"(fault {f.faultCode}) {f.faultString}") from None
        except xmlrpc.client.ProtocolError as e:
            raise PortalUnreachable(
                f"CloudLab portal {where}: HTTP {e.errcode} {e.errmsg} for {method}",
                fix="check --portal (the XML-RPC address, e.g. " + DEFAULT_PORTAL + ")",
            ) from None
        except ssl.SSLCertVerificationError as e:
            raise CertificateError(
                f"CloudLab portal {where}: its server certificate was not verified (SSL error: "
                f"{e.verify_message or e.reason})",
                fix="give the CA that signed the portal's certificate with --portal-ca FILE (verification is "
                "never turned off)",
            ) from None
        except (ssl.SSLEOFError, ConnectionResetError) as e:
            # Under TLS 1.3 the client's certificate is judged after the client's side of
            # the handshake is done: a refusal may arrive as an alert or as a closed socket.
            raise CertificateError(
                f"CloudLab portal {where}: the connection closed during the TLS handshake ({e}); the portal "
                "does that when it refuses the client certificate",
                fix="download a fresh certificate from the portal (Download Credentials) and pass it with --cert; "
                "if it is fresh, check --portal",
            ) from None
        except ssl.SSLError as e:
            why = e.reason or str(e)
            theirs = re.search(r"alert|certificate (required|unknown|revoked|expired)|unknown ca", why.lower())
            raise CertificateError(
                f"CloudLab portal {where}: the TLS handshake failed (SSL error: {why})"
                + ("; the portal refused the client certificate" if theirs else ""),
                fix="download a fresh certificate from the portal (Download Credentials) and pass it with --cert"
                if theirs
                else "check --portal and --portal-ca",
            ) from None
        except TimeoutError:
            raise PortalUnreachable(
                f"CloudLab portal {where}: no answer to {method} in time",
                fix="check the network; the portal may be busy: try again",
            ) from None
        except socket.gaierror as e:
            raise PortalUnreachable(
                f"CloudLab portal {where}: the name does not resolve ({e.strerror})",
                fix="check --portal and this machine's DNS",
            ) from None
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            raise PortalUnreachable(
                f"CloudLab portal {where}: unreachable ({getattr(e, 'strerror', None) or type(e).__name__})",
                fix="check the network and --portal; the portal listens on port 3069",
            ) from None
        if not isinstance(answer, dict) or "code" not in answer:
            raise PortalUnreachable(
                f"CloudLab portal {where}: {method} answered no portal response ({type(answer).__name__})",
                fix="check --portal: it must be the portal's XML-RPC address",
            )
        code = int(answer["code"])
        if code != Code.SUCCESS:
            raise PortalError(method, target, code, answer.get("value"), str(answer.get("output") or ""))
        return answer

    @staticmethod
    def _text(answer: dict[str, Any]) -> str:
        """A successful answer's payload: output (the server's), else a string value."""
        out = answer.get("output")
        if isinstance(out, str) and out.strip():
            return out
        v = answer.get("value")
        return v if isinstance(v, str) else ""

    # -- the calls --------------------------------------------------------------------

    def start(self, profile: str, project: str, name: str, hours: int, aggregate: str | None = None) -> str:
        params: dict[str, Any] = {"profile": profile, "proj": project, "name": name, "duration": str(hours)}
        if aggregate:
            params["aggregate"] = aggregate
        return self._text(self.call("startExperiment", params, f"{project},{name}"))

    def status(self, experiment: str) -> Status:
        return parse_status(
            self._text(self.call("experimentStatus", {"experiment": experiment, "asjson": 1}, experiment))
        )

    def manifests(self, experiment: str) -> dict[str, str]:
        text = self._text(self.call("experimentManifests", {"experiment": experiment}, experiment))
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise PortalUnreachable(
                f"CloudLab portal: experimentManifests {experiment} answered no manifests: {text.strip()[:200]!r}",
                fix="the experiment may not be ready: `rainmaker cloudlab status " + experiment + "`",
            )
        return data

    def extend(self, experiment: str, hours: int, reason: str) -> str:
        params = {"experiment": experiment, "wanted": str(hours), "reason": reason}
        return self._text(self.call("extendExperiment", params, experiment))

    def terminate(self, experiment: str) -> str:
        return self._text(self.call("terminateExperiment", {"experiment": experiment}, experiment))
