"""Remote execution over SSH: commands, file transfer and background processes.

Everything rainmaker does to a machine goes through here (with the agents), on real
hardware and on the emulated testbed alike. Three rules shape the module:

* Host keys are verified. Only the inventory's pinned known_hosts file is consulted,
  unknown or changed keys are refused, and neither ~/.ssh (its config included) nor an
  SSH agent is used, so a run depends on the inventory alone. The one way around a
  direct connection is the inventory's own: a gateway (ssh.jump), itself a connection
  with the same pinned-key policy, which every connection of a Group shares (`Gateway`);
  commands and SFTP ride the connection through it alike.
* Commands are argv lists, quoted element by element, so arguments arrive literally.
  A shell string is accepted only where a person wrote one (`run_shell`).
* Every remote command runs under `timeout` on the remote side, so a deadline here
  also ends the process there; background processes live in their own process group,
  recorded in a pidfile, and are stopped by group, never by name.

Remote scripts are POSIX sh and need only coreutils, grep, awk, util-linux `setsid`
(2.31 or later, for -f) and /proc, which every Linux host we target has (servers, the
Tofino switch's OS, namespaces).

It is one module of about 1000 lines on purpose: each rule above is kept by a few
pieces that must agree (the host-key policy and the connection, the gateway's too;
`compose` and the sh scripts whose arguments it quotes; the pidfiles the scripts write
and the methods that stop by group), and a reader checking a rule finds all of it here.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import shlex
import socket
import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import fabric
import paramiko
from invoke.exceptions import CommandTimedOut

from orchestrator.errors import GroupError, HostResult, RemoteError, UsageError
from orchestrator.inventory.model import Inventory, Mgmt

Role = Literal["switch", "client", "worker"]
ROLES: tuple[str, ...] = ("switch", "client", "worker")

# After `timeout` sends TERM, the command gets this long to exit before KILL.
KILL_AFTER_S = 2
# Exit statuses GNU timeout uses when it ended the command (TERM, then KILL).
_TIMEOUT_STATUSES = (124, 128 + 9)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STOP_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2")
_BG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# -- targets -----------------------------------------------------------------------------
@dataclass(frozen=True)
class JumpHost:
    """The gateway (bastion) a target is reached through: the inventory's ssh.jump."""

    address: str
    port: int
    user: str
    key: Path | None
    known_hosts: Path | None
    connect_timeout_s: float = 10.0
    dead_peer_s: float = 10.0

    def __str__(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


def jump_host(inv: Inventory) -> JumpHost | None:
    """The inventory's gateway, with its key and known_hosts defaulted to ssh.key and
    ssh.known_hosts; None when the machines are reached directly."""
    j = inv.ssh.jump
    if j is None:
        return None
    return JumpHost(
        j.address,
        j.port,
        j.user,
        inv.jump_key,
        inv.jump_known_hosts,
        connect_timeout_s=inv.ssh.connect_timeout_s,
        dead_peer_s=inv.ssh.dead_peer_s,
    )


@dataclass(frozen=True)
class Target:
    """One machine to reach: where, as whom, with which key, pinned to which host key."""

    name: str
    address: str
    port: int
    user: str
    key: Path | None
    known_hosts: Path | None
    role: Role
    deploy_root: Path
    connect_timeout_s: float = 10.0  # inventory ssh.connect_timeout_s
    dead_peer_s: float = 10.0  # inventory ssh.dead_peer_s: a silent host is lost after this long
    jump: JumpHost | None = None  # inventory ssh.jump: the gateway it is reached through

    @property
    def run_dir(self) -> PurePosixPath:
        """Where background processes keep their pidfiles and logs."""
        return PurePosixPath(self.deploy_root) / "run"


def _target(inv: Inventory, name: str, role: Role, mgmt: Mgmt, deploy_root: Path) -> Target:
    return Target(
        name=name,
        address=mgmt.address,
        port=mgmt.port,
        user=mgmt.user,
        key=inv.key_for(mgmt),
        known_hosts=inv.ssh.known_hosts,
        role=role,
        deploy_root=deploy_root,
        connect_timeout_s=inv.ssh.connect_timeout_s,
        dead_peer_s=inv.ssh.dead_peer_s,
        jump=jump_host(inv),
    )


def targets(
    inv: Inventory,
    *,
    hosts: list[str] | None = None,
    role: str | None = None,
    include_switch: bool = True,
) -> list[Target]:
    """The machines of `inv` to act on, switch first, then hosts in inventory order.

    With neither `hosts` nor `role`, every host (and the switch if `include_switch`).
    `role` keeps one role ("switch" selects the switch); `hosts` keeps the named
    machines (the switch too, if named). Both together must both match.
    """
    sw = inv.switch  # a lan has no machine of its own to act on
    every = [_target(inv, sw.name, "switch", sw.mgmt, sw.deploy_root)] if sw.mgmt is not None else []
    every += [_target(inv, h.name, h.role, h.mgmt, h.deploy_root) for h in inv.hosts]
    if role is not None and role not in ROLES:
        raise UsageError(f"unknown role '{role}'", fix=f"use one of: {', '.join(ROLES)}")
    if hosts is not None:
        names = [t.name for t in every]
        unknown = [h for h in hosts if h not in names]
        if unknown:
            raise UsageError(
                f"unknown host{'s' if len(unknown) > 1 else ''} {', '.join(repr(u) for u in unknown)} "
                f"in inventory '{inv.name}'",
                fix=f"use one of: {', '.join(names)}",
            )
    if hosts is None and role is None:
        return every if include_switch else [t for t in every if t.role != "switch"]
    chosen = [t for t in every if (role is None or t.role == role) and (hosts is None or t.name in hosts)]
    if not chosen:
        asked = " and ".join(([f"named {', '.join(hosts)}"] if hosts else []) + ([f"of role '{role}'"] if role else []))
        raise UsageError(f"no machine in inventory '{inv.name}' is {asked or 'selected'}")
    return chosen


# -- command composition (pure, unit-tested) ---------------------------------------------
def _seconds(t: float) -> str:
    """A duration as GNU `timeout` and `sleep` accept it ("1.5", never "1e-05")."""
    if t <= 0:
        raise ValueError(f"timeout must be positive, got {t}")
    return f"{t:.3f}".rstrip("0").rstrip(".")


def compose(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> str:
    """The shell line that runs `argv` literally, in `cwd`, with `env`, under `timeout`.

    `cd DIR && timeout -k 2 T env K=V prog args...`: every piece is quoted, so the
    remote shell only splits words and nothing in the arguments is expanded.
    """
    if not argv:
        raise ValueError("empty command")
    words: list[str] = []
    if timeout is not None:
        words += ["timeout", "-k", str(KILL_AFTER_S), _seconds(timeout)]
    if env:
        bad = [k for k in env if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"not an environment variable name: {bad[0]!r}")
        words += ["env", *(f"{k}={v}" for k, v in env.items())]
    line = shlex.join([*words, *argv])
    if cwd is not None:
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


# -- connection --------------------------------------------------------------------------
class _Unreachable(Exception):
    """Could not open or keep an SSH session; the text says why and how to fix it."""


class _UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(f"{hostname} not found in known_hosts")
        self.hostname = hostname
        self.key = key


class _RefuseUnknown(paramiko.RejectPolicy):
    """Reject like paramiko's RejectPolicy, but keep the offered key for the message."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise _UnknownHostKey(hostname, key)


def make_connection(
    target: Target | JumpHost, *, connect_timeout: float = 10.0, gateway: fabric.Connection | None = None
) -> fabric.Connection:
    """An unopened Fabric connection that trusts only `target.known_hosts`, through
    `gateway` (an opened connection to the jump host, made here too) when given.

    Fabric's defaults would read ~/.ssh/config and /etc/ssh/ssh_config, try the agent and
    ~/.ssh/id_*, and accept any host key (AutoAddPolicy): all of that is switched off.
    """
    which = "ssh.jump.key (or ssh.key)" if isinstance(target, JumpHost) else "ssh.key (or mgmt.key)"
    if target.key is None:
        raise _Unreachable(f"no SSH private key configured; fix: set {which} in the inventory")
    if target.known_hosts is None:
        where = "ssh.jump.known_hosts (or ssh.known_hosts)" if isinstance(target, JumpHost) else "ssh.known_hosts"
        raise _Unreachable(
            "no known_hosts configured, and host keys are always verified; "
            f"fix: set {where} in the inventory to a file holding this host's key"
        )
    config = fabric.Config(ssh_config=paramiko.SSHConfig(), lazy=True)  # no ssh/fabric config files
    conn = fabric.Connection(
        host=target.address,
        user=target.user,
        port=target.port,
        config=config,
        gateway=gateway,
        connect_timeout=max(1, round(connect_timeout)),
        connect_kwargs={
            "key_filename": str(target.key),
            "look_for_keys": False,
            "allow_agent": False,
            "banner_timeout": connect_timeout,
            "auth_timeout": connect_timeout,
        },
    )
    conn.client.set_missing_host_key_policy(_RefuseUnknown())
    try:
        # HostKeys.load, not SSHClient.load_host_keys: the latter remembers the file and
        # would write to it if anything ever added a key.
        conn.client.get_host_keys().load(str(target.known_hosts))
    except OSError as e:
        raise _Unreachable(f"cannot read known_hosts file {target.known_hosts}: {e.strerror or e}") from None
    return conn


def _explain(target: Target | JumpHost, e: BaseException) -> str:
    """A connection failure in words a person can act on."""
    where = f"{target.address}:{target.port}"
    if isinstance(e, paramiko.ChannelException):  # the gateway could not reach the target
        return (
            f"unreachable: the gateway {target.jump} could not connect to {where} ({e.text}); "
            f"fix: check the machine's mgmt address as the gateway sees it, and that it is up"
            if isinstance(target, Target) and target.jump is not None
            else f"unreachable: {where}: {e.text}"
        )
    pattern = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
    kh = target.known_hosts
    if isinstance(e, paramiko.BadHostKeyException):
        return (
            f"host key mismatch: {where} offered {e.key.get_name()} {fingerprint(e.key)} but {kh} pins "
            f"{e.expected_key.get_name()} {fingerprint(e.expected_key)}; refusing to connect (a reinstalled "
            f"machine, or someone in the middle); fix: check the new key out of band, then "
            f"`ssh-keygen -R '{pattern}' -f {kh}` and add the new key"
        )
    if isinstance(e, _UnknownHostKey):
        gw = target.jump if isinstance(target, Target) else None
        return (
            f"unknown host key: {where} is not in {kh} (it offered {e.key.get_name()} {fingerprint(e.key)}); "
            f"refusing to connect; fix: verify that fingerprint, then `ssh-keyscan -p {target.port} "
            f"{target.address} >> {kh}`"
            + (f" (run ssh-keyscan on the gateway {gw.address}: only it reaches the machine)" if gw else "")
            + " (or let `rainmaker testbed up` write it)"
        )
    if isinstance(e, paramiko.AuthenticationException):
        return (
            f"authentication failed as {target.user}@{where} with key {target.key}: {e}; "
            f"fix: install the matching public key in the remote authorized_keys"
        )
    if isinstance(e, (socket.timeout, TimeoutError)):
        return f"unreachable: no answer from {where} (connect timed out)"
    if isinstance(e, OSError):
        return f"unreachable: {where}: {e.strerror or e}"
    if isinstance(e, paramiko.SSHException):
        return f"SSH error with {where}: {e}"
    return f"{type(e).__name__}: {e}"


# -- background processes --------------------------------------------------------------
@dataclass(frozen=True)
class Background:
    """A detached process (group) started by `Remote.start`."""

    host: str
    name: str
    pgid: int  # the group leader's pid; signals go to the whole group
    log: str  # remote path: stdout and stderr
    pidfile: str  # remote path
    command: str


@dataclass(frozen=True)
class Stopped:
    """A background process group that `kill_leftovers` ended."""

    name: str
    pgid: int
    how: Literal["terminated", "killed"]


# Shared remote shell functions. Values always arrive as positional arguments, never
# pasted into the script text. Liveness comes from /proc and ignores zombies: a killed
# orphan may stay a zombie for a while when PID 1 is slow to reap (containers, VMs).
# A group counts as ours only if one of its processes carries RAINMAKER_TAG=<run dir>/<name>
# in its environment, so a pidfile whose number was reused by an unrelated group is
# never acted on.
_SH_LIB = r"""
_now() { read -r _u _x < /proc/uptime; _s=${_u%.*}; _f=${_u#*.}; echo $(( _s * 100 + ${_f#0} )); }
_valid() { case $1 in ''|*[!0-9]*) return 1;; esac; [ "$1" -gt 1 ]; }
_alive() {
  for _p in /proc/[0-9]*/stat; do
    { read -r _l < "$_p"; } 2>/dev/null || continue
    set -- "$1" ${_l##*") "}
    [ "$2" != Z ] && [ "$4" = "$1" ] && return 0
  done
  return 1
}
_ours() {
  _valid "$1" || return 1
  for _p in /proc/[0-9]*/stat; do
    { read -r _l < "$_p"; } 2>/dev/null || continue
    set -- "$1" "$2" ${_l##*") "}
    [ "$3" != Z ] && [ "$5" = "$1" ] || continue
    grep -qzxF "RAINMAKER_TAG=$2" "${_p%/stat}/environ" 2>/dev/null && return 0
  done
  return 1
}
# _stop_all RUN_DIR GRACE_CS SIGNAL NAME:PGID...: send SIGNAL to every group that is ours,
# wait for all of them together up to the grace, KILL what is left. Prints "name pgid how".
_stop_all() {
  _run=$1 _grace=$2 _signal=$3; shift 3; _sig=""
  for _e in "$@"; do
    _pg=${_e##*:}
    if _ours "$_pg" "$_run/${_e%:*}"; then kill -"$_signal" "-$_pg" 2>/dev/null; _sig="$_sig $_e"; fi
  done
  _end=$(( $(_now) + _grace ))
  for _e in $_sig; do
    _pg=${_e##*:}
    while _alive "$_pg" && [ "$(_now)" -lt "$_end" ]; do sleep 0.02; done
    if _alive "$_pg"; then
      kill -KILL "-$_pg" 2>/dev/null; _how=killed
      _k=$(( $(_now) + 500 )); while _alive "$_pg" && [ "$(_now)" -lt "$_k" ]; do sleep 0.02; done
    else _how=terminated; fi
    echo "${_e%:*} $_pg $_how"
  done
}
"""

# start RUN NAME CWD TAG ARGV...: detach ARGV in a new session, log to RUN/NAME.log.
# `setsid -f` rather than `setsid ... &`: a non-interactive shell starts `&` jobs with
# SIGINT and SIGQUIT ignored, and the program would inherit that (no Ctrl-C, no SIGINT
# stop for testpmd). The wrapper sh records its own pid (= session and process group
# id) and appends the exit status to the log, for fail-fast messages.
_SH_START = r"""
run=$1 name=$2 cwd=$3 tag=$4; shift 4
pf=$run/$name.pid log=$run/$name.log
mkdir -p "$run" || exit 2
if [ -s "$pf" ] && _ours "$(cat "$pf")" "$tag"; then
  echo "$name is already running as process group $(cat "$pf"); stop it first (or kill_leftovers)" >&2; exit 3
fi
rm -f "$pf"
cd "$cwd" || exit 2
RAINMAKER_TAG=$tag setsid -f sh -c 'echo $$ > "$0"; "$@"; rc=$?; echo "[rainmaker] exited with status $rc" >&2' \
  "$pf" "$@" > "$log" 2>&1 < /dev/null
_end=$(( $(_now) + 500 ))
until [ -s "$pf" ]; do
  [ "$(_now)" -lt "$_end" ] || { echo "no pidfile after 5 s; log:" >&2; tail -n 20 "$log" >&2; exit 4; }
  sleep 0.01
done
cat "$pf"
"""

# wait_ready PGID LOG REGEX PORT LIMIT_CS QUIET_CS: poll until every given condition
# holds, every 50 ms, but only once a second during the first QUIET_CS: a poll walks
# /proc and forks grep, and while a measurement runs on shared cores that is load.
# Liveness is sampled *before* the conditions, so a process that printed its ready
# line and then exited still counts as ready, and one that died silently fails at once.
_SH_WAIT = r"""
pg=$1 log=$2 re=$3 port=$4
_end=$(( $(_now) + $5 )) _quiet=$(( $(_now) + ${6:-0} ))
[ -z "$port" ] || hex=$(printf ':%04X' "$port")
while :; do
  _alive "$pg"; up=$?
  ok=1
  if [ -n "$re" ] && ! grep -qE -e "$re" "$log" 2>/dev/null; then ok=0; fi
  if [ $ok = 1 ] && [ -n "$port" ] && ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
      awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'; then ok=0; fi
  [ $ok = 1 ] && { echo ready; exit 0; }
  [ $up = 0 ] || { echo died; exit 3; }
  _t=$(_now)
  [ "$_t" -lt "$_end" ] || { echo "not ready"; exit 4; }
  # quiet: once a second, and never past the quiet time's end by more than 50 ms
  if [ $(( _quiet - _t )) -ge 100 ]; then sleep 1
  elif [ "$_t" -lt "$_quiet" ]; then sleep "$(( (_quiet - _t) / 100 )).$(printf %02d $(( (_quiet - _t) % 100 )))"
  else sleep 0.05; fi
done
"""

# stop RUN GRACE_CS SIGNAL PIDFILE NAME:PGID
_SH_STOP = r"""
run=$1 grace=$2 signal=$3 pf=$4; shift 4
out=$(_stop_all "$run" "$grace" "$signal" "$1")
[ "$(cat "$pf" 2>/dev/null)" = "${1##*:}" ] && rm -f "$pf"
echo "${out:-gone}"
"""

# find PIDFILE TAG: the process group the pidfile names, if it is alive and ours.
_SH_FIND = r"""
pg=$(cat "$1" 2>/dev/null)
if _ours "$pg" "$2"; then echo "$pg"; else echo none; fi
"""

# kill_leftovers RUN GRACE_CS DIR...: every pidfile under RUN, ours or stale, is
# removed; then each DIR that no process holds a file open in is removed (a program's
# runtime folder that outlived it). Open files show in /proc/*/fd as links to their path.
_SH_LEFTOVERS = r"""
run=$1 grace=$2; shift 2; groups=""
for pf in "$run"/*.pid; do
  [ -f "$pf" ] || continue
  name=${pf##*/}; name=${name%.pid}; pg=$(cat "$pf" 2>/dev/null)
  rm -f "$pf"
  case $name in *[!A-Za-z0-9_.-]*) continue;; esac
  _valid "$pg" && groups="$groups $name:$pg"
done
[ -z "$groups" ] || _stop_all "$run" "$grace" TERM $groups
for d in "$@"; do
  [ -d "$d" ] || continue
  real=$(readlink -f -- "$d") || continue
  ls -l /proc/[0-9]*/fd/ 2>/dev/null |
    awk -v r=" -> $real" 'index($0, r "/") || substr($0, length($0) - length(r) + 1) == r { f = 1 } END { exit !f }' ||
    rm -rf -- "$real"
done
"""


def _cs(seconds: float) -> str:
    """Seconds as whole centiseconds, the unit of the remote clock (_now)."""
    return str(max(0, round(seconds * 100)))


# -- one host ----------------------------------------------------------------------------
def _bound_dead_peers(conn: Any, dead_peer_s: float) -> None:
    """A host that drops off the network must not hang us: paramiko waits up to an hour
    to open a channel on a silent connection. SSH keepalives keep data in flight, and
    TCP_USER_TIMEOUT makes the kernel drop the connection once that data goes
    unacknowledged for `dead_peer_s` (the inventory's ssh.dead_peer_s); the transport
    then dies and every wait on it ends."""
    import socket

    transport = conn.client.get_transport()
    if transport is None:
        return
    transport.set_keepalive(max(1, int(dead_peer_s // 3)))
    transport.channel_timeout = 3 * dead_peer_s
    sock = transport.sock
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(dead_peer_s * 1000))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except (OSError, AttributeError):  # not a TCP socket (a proxy command): keepalives still bound it
        pass


class Gateway:
    """One SSH connection to a jump host, shared by the Remotes that go through it (a
    Group's: one gateway connection, not one per machine). Opened on first use, and
    again if it died; thread-safe, since a Group's threads open their connections at
    once (each connection through it is a direct-tcpip channel of its transport)."""

    def __init__(self, jump: JumpHost, *, connect_timeout: float | None = None):
        self.jump = jump
        self.connect_timeout = jump.connect_timeout_s if connect_timeout is None else connect_timeout
        self._lock = threading.Lock()
        self._conn: Any = None

    def __repr__(self) -> str:
        return f"Gateway({self.jump})"

    def connection(self) -> fabric.Connection:
        """The open connection to the gateway; raises _Unreachable naming it otherwise."""
        with self._lock:
            if self._conn is not None and self._conn.is_connected:
                return self._conn
            self._close()
            named = f"gateway {self.jump} (ssh.jump)"
            try:
                conn = make_connection(self.jump, connect_timeout=self.connect_timeout)
            except _Unreachable as e:
                raise _Unreachable(f"{named}: {e}") from None
            try:
                conn.open()
            except Exception as e:  # paramiko raises many unrelated types here
                conn.close()
                raise _Unreachable(f"{named}: {_explain(self.jump, e)}") from None
            _bound_dead_peers(conn, self.jump.dead_peer_s)
            self._conn = conn
            return conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - a connection that is already gone
                pass
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._close()


class _OpenFailureLogged(logging.Filter):
    """paramiko logs every refused channel as an ERROR; open_forward reports it itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "open FAILED" not in record.getMessage()


logging.getLogger("paramiko.transport").addFilter(_OpenFailureLogged())


def _keep_open_failure_reasons(transport: paramiko.Transport) -> None:
    """Keep the far end's reason for refusing a channel ("Connection refused", "No route
    to host") in `transport.rm_open_failure`: paramiko's ChannelException keeps only the
    code's name ("Connect failed"), and a refused port (nothing listens: the switch's
    software is down) is not an unreachable one."""
    if getattr(transport, "rm_open_failure_kept", False):
        return
    original = transport._handler_table[paramiko.common.MSG_CHANNEL_OPEN_FAILURE]

    def parse(m: paramiko.Message) -> None:
        peek = paramiko.Message(m.asbytes())
        peek.get_int(), peek.get_int()  # channel, code
        transport.rm_open_failure = peek.get_text()
        original(m)

    transport._handler_table[paramiko.common.MSG_CHANNEL_OPEN_FAILURE] = parse
    transport.rm_open_failure_kept = True


class Remote:
    """One machine over one SSH connection, opened on first use and reused; through the
    target's gateway when it has one (`gateway`: a shared one, else its own).

    Not thread-safe: use one Remote per thread (Group does).
    """

    def __init__(
        self,
        target: Target,
        *,
        connect_timeout: float | None = None,
        connection: Any = None,
        gateway: Gateway | None = None,
    ):
        """`connect_timeout`: the target's (the inventory's ssh.connect_timeout_s) unless
        given; `connection`: an already made connection-like object (tests inject fakes);
        `gateway`: the connection to target.jump to share (a Group's), else one of its own."""
        self.target = target
        self.connect_timeout = target.connect_timeout_s if connect_timeout is None else connect_timeout
        self._conn: Any = connection
        if gateway is not None and gateway.jump != target.jump:
            raise ValueError(f"{target.name} is reached through {target.jump}, not {gateway.jump}")
        self._own_gateway = gateway is None and target.jump is not None
        self.gateway = Gateway(target.jump, connect_timeout=connect_timeout) if self._own_gateway else gateway

    def __repr__(self) -> str:
        t = self.target
        return f"Remote({t.name}: {t.user}@{t.address}:{t.port})"

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None
        finally:
            if self._own_gateway and self.gateway is not None:
                self.gateway.close()

    def _connection(self) -> Any:
        """The open connection; raises _Unreachable with an explanation otherwise."""
        if self._conn is None:
            gw = self.gateway.connection() if self.gateway is not None else None
            conn = make_connection(self.target, connect_timeout=self.connect_timeout, gateway=gw)
            try:
                conn.open()
            except Exception as e:  # paramiko raises many unrelated types here
                conn.close()
                through = f" (through the gateway {self.target.jump})" if gw is not None else ""
                raise _Unreachable(_explain(self.target, e) + through) from None
            _bound_dead_peers(conn, self.target.dead_peer_s)
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        """Forget a connection that failed mid-use; the next call reconnects (a shared
        gateway stays: the Gateway reopens it if it died)."""
        try:
            if self._conn is not None:
                self._conn.close()
        except Exception:  # noqa: BLE001 - a connection that is already gone
            pass
        self._conn = None

    def open_forward(self, host: str, port: int, *, timeout: float) -> paramiko.Channel:
        """A direct-tcpip channel from this machine to host:port (as `ssh -L` opens one
        per connection): the far end is dialled by the machine's sshd, so `host` is as
        the machine sees it. A connection found dead is opened again once. Raises
        RemoteError: the machine unreachable, or its sshd could not connect (the text
        says which, e.g. "Connection refused")."""
        what = f"forward to {host}:{port}"
        for attempt in (1, 2):
            t0 = time.monotonic()
            transport = None
            try:
                transport = self._connection().client.get_transport()
                if transport is None or not transport.is_active():
                    raise EOFError("the SSH connection is closed")
                _keep_open_failure_reasons(transport)
                transport.rm_open_failure = None
                return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
            except _Unreachable as e:
                error = str(e)
            except paramiko.ChannelException as e:  # the machine's sshd refused or failed the forward
                reason = getattr(transport, "rm_open_failure", None)  # e.g. "Connection refused"
                error = f"{self.target.name} could not connect to {host}:{port}: {reason or e.text}"
            except (paramiko.SSHException, OSError, EOFError) as e:
                self._drop()
                error = f"connection lost: {e or type(e).__name__}"
                if attempt == 1:
                    continue
            raise RemoteError(HostResult(self.target.name, what, None, error=error, duration_s=time.monotonic() - t0))
        raise AssertionError("unreachable")  # the loop returns or raises

    # -- commands ------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> HostResult:
        """Run a program with literal arguments; the remote side enforces `timeout` too."""
        shown = compose(argv, env=env, cwd=cwd)
        line = compose(argv, env=env, cwd=cwd, timeout=timeout)
        return self._exec(line, shown=shown, timeout=timeout, check=check)

    def run_shell(
        self,
        cmd: str,
        *,
        timeout: float,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> HostResult:
        """Run a shell command line a person wrote (`sh -c CMD`)."""
        return self.run(["sh", "-c", cmd], timeout=timeout, check=check, env=env, cwd=cwd)

    def _exec(self, line: str, *, shown: str, timeout: float, check: bool) -> HostResult:
        host = self.target.name
        t0 = time.monotonic()
        try:
            conn = self._connection()
            # The local timeout is only a backstop for a hung network: the remote
            # `timeout` normally ends the command first, KILL_AFTER_S after TERM.
            r = conn.run(
                line,
                hide=True,
                warn=True,
                pty=False,
                in_stream=False,
                echo=False,
                encoding="utf-8",
                timeout=timeout + KILL_AFTER_S + 10,
            )
            elapsed = time.monotonic() - t0
            result = HostResult(host, shown, r.exited, r.stdout, r.stderr, duration_s=elapsed)
            if r.exited in _TIMEOUT_STATUSES and elapsed >= timeout:
                result.exit_code = None
                result.error = f"timed out after {_seconds(timeout)}s"
        except _Unreachable as e:
            result = HostResult(host, shown, None, error=str(e), duration_s=time.monotonic() - t0)
        except CommandTimedOut as e:
            self._drop()
            result = HostResult(
                host,
                shown,
                None,
                e.result.stdout,
                e.result.stderr,
                error=f"timed out after {_seconds(timeout)}s (no answer from the host)",
                duration_s=time.monotonic() - t0,
            )
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            result = HostResult(host, shown, None, error=f"connection lost: {e}", duration_s=time.monotonic() - t0)
        if check and not result.ok:
            raise RemoteError(result)
        return result

    def _script(self, body: str, args: Sequence[str], *, what: str, timeout: float) -> HostResult:
        """Run one of the module's sh scripts with positional arguments (never pasted in)."""
        line = compose(["sh", "-c", _SH_LIB + body, "rainmaker", *args], timeout=timeout)
        return self._exec(line, shown=what, timeout=timeout, check=False)

    # -- files -----------------------------------------------------------------------
    def _sftp_op(self, what: str, op: Callable[[paramiko.SFTPClient], str], check: bool) -> HostResult:
        host = self.target.name
        t0 = time.monotonic()
        try:
            out = op(self._connection().sftp())
            result = HostResult(host, what, 0, out, duration_s=time.monotonic() - t0)
        except _Unreachable as e:
            result = HostResult(host, what, None, error=str(e), duration_s=time.monotonic() - t0)
        except (paramiko.SSHException, EOFError) as e:
            self._drop()
            result = HostResult(host, what, None, error=f"connection lost: {e}", duration_s=time.monotonic() - t0)
        except OSError as e:  # a local or remote file problem (missing, permission), or a dead socket
            if self._conn is not None and not getattr(self._conn, "is_connected", True):
                self._drop()
            name = f" {e.filename}" if getattr(e, "filename", None) else ""
            result = HostResult(host, what, None, error=f"{e.strerror or e}{name}", duration_s=time.monotonic() - t0)
        if check and not result.ok:
            raise RemoteError(result)
        return result

    def remote_path(self, path: str | PurePosixPath) -> str:
        """Relative remote paths are relative to the host's deploy root (its own folder on
        an emulated testbed, where all hosts share one file system)."""
        p = PurePosixPath(path)
        out = str(p if p.is_absolute() else PurePosixPath(self.target.deploy_root) / p)
        return out + "/" if str(path).endswith("/") and not out.endswith("/") else out

    def put(self, local: str | Path, remote_path: str, *, mode: int | None = None, check: bool = True) -> HostResult:
        """Copy a file to the host, creating parent folders. `mode=None` keeps the local mode bits."""
        local = Path(local)
        remote_path = self.remote_path(remote_path)

        def op(sftp: paramiko.SFTPClient) -> str:
            dest = remote_path + local.name if remote_path.endswith("/") else remote_path
            _sftp_makedirs(sftp, str(PurePosixPath(dest).parent))
            _sftp_put(sftp, local, dest, mode)
            return dest

        return self._sftp_op(f"put {local} -> {remote_path}", op, check)

    def get(self, remote_path: str, local: str | Path, *, check: bool = True) -> HostResult:
        """Copy a file from the host, creating local parent folders."""
        local = Path(local)
        remote_path = self.remote_path(remote_path)

        def op(sftp: paramiko.SFTPClient) -> str:
            local.parent.mkdir(parents=True, exist_ok=True)
            sftp.get(remote_path, str(local))
            return str(local)

        return self._sftp_op(f"get {remote_path} -> {local}", op, check)

    def put_tree(self, local_dir: str | Path, remote_dir: str, *, check: bool = True) -> HostResult:
        """Copy a folder recursively (files keep their mode bits). stdout: the file count."""
        local_dir = Path(local_dir)
        remote_dir = self.remote_path(remote_dir)

        def op(sftp: paramiko.SFTPClient) -> str:
            if not local_dir.is_dir():
                raise FileNotFoundError(2, "not a folder", str(local_dir))
            n = 0
            for here, _dirs, files in os.walk(local_dir):
                rel = Path(here).relative_to(local_dir)
                dest = PurePosixPath(remote_dir, *rel.parts)
                _sftp_makedirs(sftp, str(dest))
                for f in sorted(files):
                    _sftp_put(sftp, Path(here, f), str(dest / f), None)
                    n += 1
            return f"{n} files"

        return self._sftp_op(f"put_tree {local_dir} -> {remote_dir}", op, check)

    def get_tree(self, remote_dir: str, local_dir: str | Path, *, check: bool = True) -> HostResult:
        """Copy a remote folder recursively (symlinks to folders are skipped). stdout: the file count."""
        local_dir = Path(local_dir)
        remote_dir = self.remote_path(remote_dir)

        def op(sftp: paramiko.SFTPClient) -> str:
            def walk(src: str, dst: Path) -> int:
                dst.mkdir(parents=True, exist_ok=True)
                n = 0
                for a in sftp.listdir_attr(src):
                    path = f"{src.rstrip('/')}/{a.filename}"
                    m = a.st_mode or 0
                    if stat.S_ISLNK(m):
                        m = sftp.stat(path).st_mode or 0
                        if stat.S_ISDIR(m):
                            continue  # could loop
                    if stat.S_ISDIR(m):
                        n += walk(path, dst / a.filename)
                    elif stat.S_ISREG(m):
                        sftp.get(path, str(dst / a.filename))
                        os.chmod(dst / a.filename, stat.S_IMODE(m))
                        n += 1
                return n

            return f"{walk(remote_dir, local_dir)} files"

        return self._sftp_op(f"get_tree {remote_dir} -> {local_dir}", op, check)

    # -- background processes ------------------------------------------------------
    def _tag(self, name: str) -> str:
        return f"{self.target.run_dir}/{name}"

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str] | None = None,
    ) -> Background:
        """Start `argv` detached (own session and process group), logging to run/<name>.log.

        Refuses (RemoteError) if a process of the same name from this deploy root is
        still running. Returns at once: use `wait_ready` to know it is up.
        """
        if not _BG_NAME.match(name):
            raise ValueError(f"background name {name!r}: use letters, digits, '.', '_' and '-'")
        run_dir = str(self.target.run_dir)
        shown = f"start {name}: " + compose(argv, env=env, cwd=cwd)  # also validates argv and env
        words = list(argv) if not env else ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        r = self._script(_SH_START, [run_dir, name, cwd, self._tag(name), *words], what=shown, timeout=15)
        try:
            pgid = int(r.stdout.strip().splitlines()[-1]) if r.ok else 0
        except (ValueError, IndexError):
            pgid = 0
        if pgid <= 1:
            if r.ok:
                r.error = f"no process group id in the answer: {r.stdout!r}"
            raise RemoteError(r)
        return Background(self.target.name, name, pgid, f"{run_dir}/{name}.log", f"{run_dir}/{name}.pid", shown)

    def _own(self, bg: Background) -> None:
        if bg.host != self.target.name:
            raise ValueError(f"{bg.name} runs on {bg.host}, not on {self.target.name}")

    def log_tail(self, bg: Background, lines: int = 20) -> str:
        """The last lines of a background process's log ("" if unreadable)."""
        self._own(bg)
        r = self.run(["tail", "-n", str(lines), bg.log], timeout=10, check=False)
        return r.stdout if r.ok else ""

    def find(self, name: str) -> Background | None:
        """The background process `name` a `start` from this deploy root left running
        (say, in an earlier invocation of the CLI), or None if its pidfile is missing or
        names a group that has exited or is not ours. Use it to `stop` that process."""
        if not _BG_NAME.match(name):
            raise ValueError(f"background name {name!r}: use letters, digits, '.', '_' and '-'")
        run_dir = str(self.target.run_dir)
        pidfile, log = f"{run_dir}/{name}.pid", f"{run_dir}/{name}.log"
        r = self._script(_SH_FIND, [pidfile, self._tag(name)], what=f"find {name}", timeout=15)
        if not r.ok:
            raise RemoteError(r)
        word = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "none"
        if not word.isdigit() or int(word) <= 1:
            return None
        return Background(self.target.name, name, int(word), log, pidfile, f"{name} (found by its pidfile)")

    def wait_ready(
        self,
        bg: Background,
        *,
        log_regex: str | None = None,
        port: int | None = None,
        timeout: float,
        quiet_s: float = 0.0,
    ) -> float:
        """Block until the log has a line matching `log_regex` (POSIX ERE, as `grep -E`)
        and/or a TCP `port` is listening on the host (every given condition must hold).

        Polls on the remote side every 50 ms, once a second during the first `quiet_s`
        (a wait that is known to last, such as a measurement: polling is load). Raises
        RemoteError with the log tail as soon as the process group has died (within a
        second while quiet), or when `timeout` passes. Returns the seconds waited.
        """
        self._own(bg)
        if log_regex is None and port is None:
            raise ValueError("wait_ready needs log_regex, port or both")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
        want = " and ".join(
            ([f"a log line matching /{log_regex}/"] if log_regex is not None else [])
            + ([f"TCP port {port} listening"] if port is not None else [])
        )
        args = [str(bg.pgid), bg.log, log_regex or "", "" if port is None else str(port), _cs(timeout), _cs(quiet_s)]
        r = self._script(_SH_WAIT, args, what=f"wait_ready {bg.name} ({want})", timeout=timeout + 10)
        if r.ok:
            return r.duration_s
        if r.error is not None:  # the connection, not the process
            raise RemoteError(r)
        if r.exit_code == 3:
            why = f"{bg.name} (process group {bg.pgid}) exited before it was ready (waited for {want})"
        elif r.exit_code == 4:
            why = f"{bg.name} (process group {bg.pgid}) not ready after {_seconds(timeout)}s (waited for {want})"
        else:
            why = f"waiting for {bg.name} failed with status {r.exit_code}: {r.stderr.strip()}"
        tail = self.log_tail(bg).rstrip()
        message = f"{self.target.name}: {why}\n  log {bg.log}:" + (
            "\n    " + tail.replace("\n", "\n    ") if tail else " (empty)"
        )
        r.error = why
        raise RemoteError(r, message)

    def stop(
        self, bg: Background, *, grace: float = 5.0, signal: str = "TERM"
    ) -> Literal["terminated", "killed", "not running"]:
        """Send `signal` (TERM; INT for programs such as testpmd) to the process group,
        wait up to `grace` seconds, then KILL it; remove the pidfile.

        Returns how it ended: "terminated" (exited after the first signal), "killed"
        (needed KILL) or "not running" (it had already exited).
        """
        self._own(bg)
        if signal not in _STOP_SIGNALS:
            raise ValueError(f"stop signal {signal!r}: use one of {', '.join(_STOP_SIGNALS)}")
        args = [str(self.target.run_dir), _cs(grace), signal, bg.pidfile, f"{bg.name}:{bg.pgid}"]
        r = self._script(_SH_STOP, args, what=f"stop {bg.name} (process group {bg.pgid})", timeout=grace + 15)
        if not r.ok:
            raise RemoteError(r)
        how = r.stdout.split()[-1] if r.stdout.split() else "gone"
        return "not running" if how == "gone" else how  # type: ignore[return-value]

    def kill_leftovers(self, *, grace: float = 2.0, stale_dirs: Sequence[str] = ()) -> list[Stopped]:
        """Stop every process group recorded under <deploy_root>/run/ (from earlier runs,
        crashed or interrupted) and remove all pidfiles there. Returns what it stopped.

        A pidfile whose group no longer exists, or whose number now belongs to a group
        rainmaker did not start, is only removed. Then each of `stale_dirs` (absolute
        folders, such as a DPDK program's runtime folder) that no process has a file open
        in any more is removed: what a killed program could not clean up itself.
        """
        for d in stale_dirs:
            parts = PurePosixPath(d).parts
            if not PurePosixPath(d).is_absolute() or len(parts) < 3 or ".." in parts:
                raise ValueError(f"stale_dirs: {d!r} is not an absolute folder below the top two levels")
        r = self._script(
            _SH_LEFTOVERS,
            [str(self.target.run_dir), _cs(grace), *stale_dirs],
            what=f"kill_leftovers {self.target.run_dir}",
            timeout=grace + 20,
        )
        if not r.ok:
            raise RemoteError(r)
        stopped = []
        for line in r.stdout.splitlines():
            name, pgid, how = line.rsplit(" ", 2)
            stopped.append(Stopped(name, int(pgid), how))  # type: ignore[arg-type]
        return stopped


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """mkdir -p over SFTP."""
    if path in ("", "/", "."):
        return
    try:
        if stat.S_ISDIR(sftp.stat(path).st_mode or 0):
            return
        raise NotADirectoryError(20, "exists and is not a folder", path)
    except FileNotFoundError:
        pass
    _sftp_makedirs(sftp, str(PurePosixPath(path).parent))
    try:
        sftp.mkdir(path)
    except OSError:
        if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):  # lost a race: fine if it is a folder now
            raise


def _sftp_put(sftp: paramiko.SFTPClient, local: Path, dest: str, mode: int | None) -> None:
    sftp.put(str(local), dest)
    sftp.chmod(dest, stat.S_IMODE(local.stat().st_mode) if mode is None else mode)


# -- many hosts --------------------------------------------------------------------------
class Group:
    """The same operation on many targets at once, one thread and one Remote per target.

    Results come back as {name: HostResult} in target order. With check=True, any
    failure raises GroupError carrying every host's result (the good ones too).
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        connect_timeout: float | None = None,
        max_workers: int = 32,
        remote_factory: Callable[[Target], Remote] | None = None,
    ):
        names = [t.name for t in targets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"target {dup[0]!r} listed twice")
        # one connection to each gateway, shared by the targets behind it
        self.gateways: dict[JumpHost, Gateway] = {
            j: Gateway(j, connect_timeout=connect_timeout) for j in dict.fromkeys(t.jump for t in targets) if j
        }
        make = remote_factory or (
            lambda t: Remote(t, connect_timeout=connect_timeout, gateway=self.gateways.get(t.jump))
        )
        self.targets = list(targets)
        self.remotes: dict[str, Remote] = {t.name: make(t) for t in self.targets}
        self.max_workers = max(1, min(max_workers, len(self.targets) or 1))

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            for r in self.remotes.values():
                r.close()
        finally:
            for g in self.gateways.values():
                g.close()

    def _fan(self, what: str, op: Callable[[Remote], HostResult], check: bool) -> dict[str, HostResult]:
        def one(name: str) -> HostResult:
            try:
                return op(self.remotes[name])
            except Exception as e:  # a bug or bad input must still leave a per-host result
                return HostResult(name, what, None, error=f"{type(e).__name__}: {e}")

        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="rm-group") as pool:
            futures = {t.name: pool.submit(one, t.name) for t in self.targets}
            results = {name: f.result() for name, f in futures.items()}
        if check and not all(r.ok for r in results.values()):
            raise GroupError(results)
        return results

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> dict[str, HostResult]:
        return self._fan(
            shlex.join(argv),
            lambda r: r.run(argv, timeout=timeout, check=False, env=env, cwd=cwd),
            check,
        )

    def run_shell(
        self,
        cmd: str,
        *,
        timeout: float,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> dict[str, HostResult]:
        return self._fan(cmd, lambda r: r.run_shell(cmd, timeout=timeout, check=False, env=env, cwd=cwd), check)

    def put(
        self, local: str | Path, remote_path: str, *, mode: int | None = None, check: bool = True
    ) -> dict[str, HostResult]:
        return self._fan(
            f"put {local} -> {remote_path}",
            lambda r: r.put(local, remote_path, mode=mode, check=False),
            check,
        )
