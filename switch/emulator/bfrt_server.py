"""The emulator's BFRuntime gRPC server: bf_switchd's API over a `TableStore`.

Behaves as bf_switchd does (docs/bfruntime.md), so that the SDE's own Python client
(bfrt_grpc) and rainmaker's client drive the emulator unchanged:

- StreamChannel: a `subscribe` is echoed back with status code 0 (a client id already
  subscribed on another live stream gets ALREADY_EXISTS; a stream carries one client
  id); the session ends when the client half-closes, when its connection dies or its
  process freezes (keepalive pings go unanswered), or when it stops reading, and the
  client's id and binding are released then. The server also speaks unasked on it:
  warm init progress. Streams are coroutines of one event loop, so an idle session
  holds no thread; past `Limits.sessions` a new stream is refused RESOURCE_EXHAUSTED.
- GetForwardingPipelineConfig: config[0] = {p4_name, bfruntime_info (bf-rt.json)} and
  non_p4_config.bfruntime_info (the fixed tables); both are JSON with "tables".
- SetForwardingPipelineConfig: BIND (only subscribed clients, else UNAVAILABLE; one
  binder per program, bound once, else ALREADY_EXISTS),
  VERIFY, and the warm init actions with the running program (every table back to its
  initial state; WARM_INIT_STARTED / FINISHED to every subscriber): what the SDE
  client's clear_all_tables() sends.
- Write and Read address a program as bf_switchd decides: the client's bound one when
  p4_name is empty (none bound: the call fails UNKNOWN, without details), else the
  named one (not this one: NOT_FOUND).
- Write: INSERT / MODIFY / DELETE / INSERT_OR_MODIFY (and MODIFY_INC on $pre.mgid);
  the default entry via is_default_entry; DELETE without a key clears the table;
  table operations ("Sync") and attributes arrive as INSERT. CONTINUE_ON_ERROR tries
  every update; ROLLBACK_ON_ERROR stops at the first failure, undoes the updates before
  it and reports that failure only; DATAPLANE_ATOMIC is UNIMPLEMENTED. An operation a
  table's driver lacks (a register cell's DELETE, a $PORT_STAT INSERT, a PRE table
  clear) is UNIMPLEMENTED.
- Read: one entry, all entries, the default entry (flagged), only the data fields named
  if any are; a register cell once per pipe (the same field id repeated); the port
  lookups refuse from_hw; table attributes (EntryScope, port_status_notif_cb,
  poll_intvl_ms) as last written or as initially set.
- Errors: gRPC UNKNOWN with trailer `grpc-status-details-bin` = google.rpc.Status whose
  details hold one packed bfrt_proto.Error per update up to the last that failed (OK
  ones pad the gaps), at most `Limits.details_bytes` of them (the status message then
  says how many were left out); an index outside a register or counter, or an unknown
  update type, is INVALID_ARGUMENT, as the driver answers it.

Nothing a client sends can stop the server: every failure of a request becomes an
error answer (unexpected ones are logged with their traceback and answered INTERNAL),
and what a request may make the server allocate is bounded (`Limits`: its size, its
updates or entities, a repeated field's values, the error details).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc
from google.protobuf import text_format
from google.rpc import status_pb2
from grpc_status import rpc_status

from switch.bfrt import bfruntime_pb2 as pb
from switch.bfrt import bfruntime_pb2_grpc as pb_grpc
from switch.errors import SwitchError

from . import fixed_tables
from .schema import (
    MATCH_PRIORITY_ID,
    PORT_METADATA_DATA_ID,
    PORT_STAT_FIELDS,
    FieldSpec,
    Kind,
    Match,
    Program,
    TableSpec,
)
from .tables import (
    PORT_SETTING_DEFAULTS,
    AlreadyExists,
    Code,
    InvalidArgument,
    NotFound,
    TableError,
    TableStore,
    Unsupported,
)

log = logging.getLogger(__name__)

DEFAULT_PORT = 50052
ALL_PIPES = 0xFFFF
READ_CHUNK = 512  # entities per ReadResponse
STAT_POLL_MS = 2000  # $PORT_STAT's poll_intvl_ms until a client sets it (the emulator's counters are live)

_ONEOF_OF_MATCH = {
    Match.EXACT: "exact",
    Match.TERNARY: "ternary",
    Match.LPM: "lpm",
    Match.RANGE: "range",
    Match.OPTIONAL: "optional",
}

Undo = Callable[[], None]


class BfrtServerError(SwitchError):
    """The server could not start (e.g. the address is taken)."""


@dataclass(frozen=True)
class Limits:
    """What the server holds for its clients, and for how long (docs/bfruntime.md,
    "Limits, and when a session ends").

    bf_switchd runs one gRPC thread per open StreamChannel and one driver session per
    client; its driver has 20 sessions in all (PIPE_MGR_MAX_SESSIONS), some its own.
    The emulator serves streams on one event loop instead, so an idle session costs no
    thread: `sessions` bounds them, well above what rainmaker opens (a run, a start and
    a few readers), and a stream beyond it is refused RESOURCE_EXHAUSTED.
    """

    sessions: int = 128  # open StreamChannels, one client id each
    threads: int = 8  # Write, Read and pipeline-config calls served at once (the others wait)
    keepalive_s: float = 10.0  # ping every client this often ...
    keepalive_timeout_s: float = 10.0  # ... and end its sessions when no answer comes within this
    send_timeout_s: float = 10.0  # a session that takes no message for this long is ended
    outbox: int = 1024  # messages waiting for a session; one more ends it (it does not read)
    message_bytes: int = 4 << 20  # largest request gRPC accepts (its default; rainmaker's are KBs)
    updates: int = 65536  # updates in one Write
    entities: int = 65536  # entities in one Read
    repeated: int = 65536  # values of one repeated data field
    details_bytes: int = 1 << 20  # per-update errors in one answer (gRPC's trailer): 7,000 or so
    message_chars: int = 1024  # one error's message


class _Failure(NamedTuple):
    """A refused update or read entity; a bfrt_proto.Error only if it goes in the answer
    (a message of its own for each of tens of thousands would hold megabytes)."""

    code: int  # google.rpc.Code
    message: str

    def error(self) -> Any:
        return pb.Error(canonical_code=self.code, message=self.message, code=_BF_STATUS.get(self.code, 0))


class _Outbox:
    """What one StreamChannel sends, in order. Filled from any thread; read on the event
    loop. A session that lets `limit` messages pile up is not reading: it is closed."""

    _END = object()

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int):
        self._loop = loop
        self._limit = limit
        self._queue: asyncio.Queue = asyncio.Queue()
        self.closed = False
        self.why: str | None = None  # why the server ended the session, if it did

    def put(self, message: Any) -> None:
        """From any thread."""
        try:
            self._loop.call_soon_threadsafe(self.put_here, message)
        except RuntimeError:  # the loop is gone: the server stopped
            pass

    def put_here(self, message: Any) -> None:
        """On the event loop."""
        if self.closed:
            return
        if self._queue.qsize() >= self._limit:
            self.close(f"{self._limit} messages waited for it (it does not read its stream)")
            return
        self._queue.put_nowait(message)

    def close(self, why: str | None = None) -> None:
        """On the event loop."""
        if not self.closed:
            self.closed = True
            self.why = why
            self._queue.put_nowait(self._END)

    async def get(self) -> Any:
        """The next message; None once closed, at once if the server ended the session."""
        message = await self._queue.get()
        return None if message is self._END or self.why else message


@dataclass
class _Subscriber:
    client_id: int
    stream: _Outbox  # the StreamChannel that subscribed it
    notifications: Any = None


def _brief(msg: Any, limit: int = 400) -> str:
    text = text_format.MessageToString(msg, as_one_line=True)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class BfrtServicer(pb_grpc.BfRuntimeServicer):
    """Serves one program (a `TableStore`) as device 0."""

    def __init__(self, store: TableStore, limits: Limits = Limits()):
        self.store = store
        self.limits = limits
        self.layout = store.layout
        self.program = store.program
        self._p4_info = json.dumps(self.layout.p4_json(), indent=1).encode()
        self._non_p4_info = json.dumps(self.layout.non_p4_json(), indent=1).encode()
        self._objects = {t.name: (t, self._object_of(t)) for t in (*self.layout.p4, *self.layout.fixed)}
        self._lock = threading.Lock()  # subscribers and the binding
        self._subscribers: dict[int, _Subscriber] = {}
        self._binder: int | None = None
        self._streams = 0  # open StreamChannels
        self._attributes: dict[tuple[int, str], Any] = {}  # (table id, attribute) -> TableAttribute written

    def _object_of(self, spec: TableSpec) -> Any:
        if spec.kind is Kind.MATCH:
            return self.store.tables[spec.name]
        if spec.kind is Kind.REGISTER:
            return self.store.registers[spec.name]
        if spec.kind is Kind.COUNTER:
            return self.store.counters[spec.name]
        if spec.kind in (Kind.PRE_MGID, Kind.PRE_NODE):
            return self.store.pre
        if spec.kind is Kind.SNAPSHOT:
            return None
        if spec.kind is Kind.FIXED:
            return self.store.fixed[spec.name]
        return self.store.ports

    # ------------------------------------------------------------ stream and binding

    async def StreamChannel(self, request_iterator: AsyncIterator, context: Any) -> None:
        # A coroutine on the server's event loop, not a thread: idle sessions cost
        # nothing but their slot. Replies and server-initiated messages (warm init
        # progress) share one outbox; a task reads the client's requests, so the server
        # can speak unasked. The session ends when the client half-closes, when its
        # connection dies (gone, or frozen: keepalive pings go unanswered), or when it
        # stops taking messages.
        with self._lock:
            full = self._streams >= self.limits.sessions
            if not full:
                self._streams += 1
        if full:
            log.warning("refused a BFRuntime stream: %d sessions are open", self.limits.sessions)
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the switch serves at most {self.limits.sessions} BFRuntime sessions at once, and all are open",
            )
        stream = _Outbox(asyncio.get_running_loop(), self.limits.outbox)
        mine: set[int] = set()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    log.debug("StreamChannel <- %s", _brief(request))
                    if request.WhichOneof("update") != "subscribe":
                        continue  # digest acks: no digests are ever sent
                    reply = pb.Subscribe()
                    reply.CopyFrom(request.subscribe)
                    reply.status.CopyFrom(self._subscribe(request.client_id, request.subscribe, stream, mine))
                    stream.put_here(pb.StreamMessageResponse(subscribe=reply))
            except Exception as e:  # noqa: BLE001 - the peer went away; nothing to answer
                log.debug("StreamChannel ended: %s", e)
            finally:
                stream.close()

        reader = asyncio.create_task(read())
        try:
            while (message := await stream.get()) is not None:
                try:
                    await asyncio.wait_for(context.write(message), self.limits.send_timeout_s)
                except TimeoutError:  # the write stays pending in gRPC: no other may follow it
                    stream.close(f"it took no message for {self.limits.send_timeout_s:g} s")
                    break
        finally:
            reader.cancel()
            self._end_session(stream, mine)

    def _end_session(self, stream: _Outbox, mine: set[int]) -> None:
        """Free the stream's slot, client ids and binding."""
        with self._lock:
            self._streams -= 1
            for cid in mine:
                if self._subscribers.get(cid) and self._subscribers[cid].stream is stream:
                    del self._subscribers[cid]
                    if self._binder == cid:
                        self._binder = None
                        log.info("client %d disconnected; %s is unbound", cid, self.program.name)
        if stream.why:
            log.warning("ended the session of client(s) %s: %s", sorted(mine) or "-", stream.why)
        log.debug("StreamChannel closed for clients %s", sorted(mine))

    def _subscribe(self, client_id: int, sub: Any, stream: _Outbox, mine: set[int]) -> status_pb2.Status:
        if sub.device_id != 0:
            return status_pb2.Status(
                code=Code.NOT_FOUND, message=f"no device {sub.device_id} (the emulator is device 0)"
            )
        with self._lock:
            current = self._subscribers.get(client_id)
            if current is not None and current.stream is not stream:
                return status_pb2.Status(
                    code=Code.ALREADY_EXISTS, message=f"client id {client_id} is already subscribed on another stream"
                )
            if mine - {client_id}:  # bf_switchd keeps the first id a stream subscribed
                return status_pb2.Status(
                    code=Code.ALREADY_EXISTS,
                    message=f"this stream already carries client {min(mine)}'s session (one client id per stream)",
                )
            self._subscribers[client_id] = _Subscriber(client_id, stream, sub.notifications)
            mine.add(client_id)
        log.info("client %d subscribed", client_id)
        return status_pb2.Status(code=Code.OK)

    def SetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        log.debug("SetForwardingPipelineConfig <- %s", _brief(request))
        Action = pb.SetForwardingPipelineConfigRequest
        names = [c.p4_name for c in request.config]
        if request.action == Action.BIND:
            self._bind(request, names, context)
            return pb.SetForwardingPipelineConfigResponse()
        if request.device_id != 0:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id} (the emulator is device 0)")
        if request.action == Action.WARM_INIT_END:  # ends a VERIFY_AND_WARM_INIT_BEGIN; carries no config
            if names:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "WARM_INIT_END cannot carry a config")
            self._broadcast(pb.SetForwardingPipelineConfigResponseType.WARM_INIT_FINISHED)
            return pb.SetForwardingPipelineConfigResponse()
        if len(names) != 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"expected one config with a p4_name, got {names}")
        if names[0] != self.program.name:
            context.abort(
                grpc.StatusCode.NOT_FOUND, f"no program {names[0]!r} on device 0 (it runs {self.program.name!r})"
            )
        if request.action == Action.VERIFY:
            return pb.SetForwardingPipelineConfigResponse()
        if request.action in (Action.VERIFY_AND_WARM_INIT_BEGIN, Action.VERIFY_AND_WARM_INIT_BEGIN_AND_END):
            self._warm_init(request, context, finish=request.action == Action.VERIFY_AND_WARM_INIT_BEGIN_AND_END)
            return pb.SetForwardingPipelineConfigResponse()
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "the emulator cannot load a pipeline: start it with the program instead"
        )

    def _bind(self, request: Any, names: list[str], context: grpc.ServicerContext) -> None:
        """BIND, checked in bf_switchd's order (forwardingConfigBind): a subscribed client
        (else UNAVAILABLE), one config, a program no client holds, the caller included
        (else ALREADY_EXISTS), then one the device runs (else NOT_FOUND)."""
        with self._lock:
            if request.client_id not in self._subscribers:
                context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"Unknown client. Client_id:{request.client_id} (send a subscribe on StreamChannel first)",
                )
            if len(names) != 1:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Exactly one config message required, got {names}")
            if self._binder is not None and names[0] == self.program.name:
                context.abort(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"Client ID {request.client_id} trying to bind but Client ID {self._binder} already owns this P4",
                )
            if request.device_id != 0 or names[0] != self.program.name:
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    f"Failed to find BfRtInfo for program {names[0]} on device {request.device_id} "
                    f"(device 0 runs {self.program.name!r})",
                )
            self._binder = request.client_id
        log.info("client %d bound to %s", request.client_id, self.program.name)

    def _warm_init(self, request: Any, context: grpc.ServicerContext, *, finish: bool) -> None:
        """A warm init with the running program: bf_switchd reloads it, so every table
        is back to its initial state (the SDE client's clear_all_tables). Subscribed
        clients hear WARM_INIT_STARTED, then WARM_INIT_FINISHED, on their streams;
        bindings survive, the program being the same."""
        with self._lock:
            if request.client_id not in self._subscribers:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"unknown client {request.client_id} (not subscribed)")
        self.store.reset()
        with self._lock:
            self._attributes.clear()  # the reloaded tables have their initial attributes
        log.info("client %d: warm init of %s (all tables reset)", request.client_id, self.program.name)
        Type = pb.SetForwardingPipelineConfigResponseType
        self._broadcast(Type.WARM_INIT_STARTED)
        if finish:
            self._broadcast(Type.WARM_INIT_FINISHED)

    def _broadcast(self, response_type: int) -> None:
        message = pb.StreamMessageResponse(
            set_forwarding_pipeline_config_response=pb.SetForwardingPipelineConfigResponse(
                set_forwarding_pipeline_config_response_type=response_type
            )
        )
        with self._lock:
            for sub in self._subscribers.values():
                sub.stream.put(message)

    def GetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        log.debug("GetForwardingPipelineConfig <- %s", _brief(request))
        if request.device_id != 0:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.device_id} (the emulator is device 0)")
        reply = pb.GetForwardingPipelineConfigResponse()
        config = reply.config.add(p4_name=self.program.name, bfruntime_info=self._p4_info)
        config.profiles.add(profile_name="pipe", pipe_scope=range(self.store.pipes))
        reply.non_p4_config.bfruntime_info = self._non_p4_info
        return reply

    # ------------------------------------------------------------ Write

    def Write(self, request: Any, context: grpc.ServicerContext) -> Any:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Write <- %s", _brief(request))
        self._check_program(request, context)
        n = len(request.updates)
        if n > self.limits.updates:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"a Write carries at most {self.limits.updates} updates, not {n}: send them in several",
            )
        if request.atomicity == pb.WriteRequest.DATAPLANE_ATOMIC:  # bf_switchd: before any update
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "DATAPLANE_ATOMIC isn't implemented")
        errors: list[_Failure | None] = [None] * n
        stop_at_first = request.atomicity == pb.WriteRequest.ROLLBACK_ON_ERROR
        with self.store.lock:
            undo: list[Undo] = []
            for i, update in enumerate(request.updates):
                try:
                    step = self._write(update, request.target)
                    if step is not None:
                        undo.append(step)
                except Exception as e:  # noqa: BLE001 - a request must never take the server down
                    errors[i] = self._error(e, f"update {i}")
                if errors[i] is not None and stop_at_first:
                    # bf_switchd aborts the transaction: the updates before are undone,
                    # those after never tried, and only the failure is reported.
                    for step in reversed(undo):
                        step()
                    break
        if any(errors):
            self._abort(context, errors, "update", n)
        return pb.WriteResponse()

    def _check_program(self, request: Any, context: grpc.ServicerContext) -> None:
        """Which program a Write or Read addresses, as bf_switchd decides it: a subscribed
        client that names none uses the one it bound (none bound: UNKNOWN, with no
        per-update details); a request naming a program, or from a client that has not
        subscribed, must name the device's program (otherwise NOT_FOUND). These refuse
        the whole call, not single updates."""
        device_id, p4_name = request.target.device_id, request.p4_name
        with self._lock:
            subscribed, bound = request.client_id in self._subscribers, self._binder == request.client_id
        if subscribed and not p4_name:
            if not bound:
                context.abort(
                    grpc.StatusCode.UNKNOWN,
                    f"Unable to get bound_program: client {request.client_id} has not bound a program "
                    "(bind first, or name the program in p4_name)",
                )
            if device_id != 0:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the client is bound on device 0, not device {device_id}",
                )
            return
        if device_id != 0 or p4_name != self.program.name:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Unable to obtain BF_RT info for ({p4_name}) on device {device_id}: "
                f"device 0 runs {self.program.name!r}"
                + ("" if subscribed else f" (client {request.client_id} has not subscribed: name the program)"),
            )

    def _error(self, e: Exception, where: str) -> _Failure:
        if isinstance(e, TableError):
            log.debug("%s refused: %s", where, e.message)
            return _Failure(e.code, self._clip(e.message))
        log.exception("%s: unexpected failure", where)
        return _Failure(Code.INTERNAL, self._clip(f"internal error: {type(e).__name__}: {e}"))

    def _clip(self, message: str) -> str:
        # A message may quote what the client sent: a giant value must not make a giant answer.
        n = self.limits.message_chars
        return message if len(message) <= n else f"{message[:n]}... ({len(message)} characters)"

    def _abort(self, context: grpc.ServicerContext, errors: list, what: str, n: int) -> None:
        """Fail the call as bf_switchd does: UNKNOWN, and a google.rpc.Status in the
        `grpc-status-details-bin` trailer with one Error per update up to the last that
        failed, OK ones padding the others. bf_switchd sends them all (the SDE client
        accepts 1 GiB of metadata); the emulator stops at `details_bytes` and says in the
        status message how many failures it left out, so an answer always fits a client
        that accepts that much (rainmaker's client does)."""
        failed = [(i, e) for i, e in enumerate(errors) if e is not None and e.code != Code.ABORTED]
        failed = failed or [(i, e) for i, e in enumerate(errors) if e is not None]
        first_i, first = failed[0]
        last = max(i for i, e in enumerate(errors) if e is not None)
        status = status_pb2.Status(code=grpc.StatusCode.UNKNOWN.value[0])
        ok = pb.Error(canonical_code=Code.OK)
        budget, used, detailed = self.limits.details_bytes, 0, 0
        for e in errors[: last + 1]:
            detail = e.error() if e is not None else ok
            used += detail.ByteSize() + _ANY_OVERHEAD
            if used > budget:
                break
            status.details.add().Pack(detail)
            detailed += 1
        message = f"{len(failed)} of {n} failed; {what} {first_i}: {Code(first.code).name}: {first.message}"
        left_out = sum(1 for e in errors[detailed:] if e is not None)
        if left_out:
            message += (
                f" (details cover {what}s 0 to {detailed - 1}; {left_out} failed {what}(s) after those are "
                f"left out: the answer carries at most {budget} bytes of details)"
            )
            log.warning("%s: %d failed %s(s) left out of the details", what, left_out, what)
        status.message = message
        grpc_status = rpc_status.to_status(status)
        # The call's context offers no abort_with_status when it runs in a thread of the
        # event-loop server: the same status line and trailer through abort().
        context.abort(grpc_status.code, grpc_status.details, grpc_status.trailing_metadata)

    def _table(self, table_id: int) -> tuple[TableSpec, Any]:
        spec = self.layout.by_id.get(table_id)
        if spec is None:
            raise NotFound(f"no table with id {table_id} (0x{table_id:x})")
        return self._objects[spec.name]

    def _write(self, update: Any, target: Any) -> Undo | None:
        kind = update.entity.WhichOneof("entity")
        U = pb.Update
        if update.type == U.UNSPECIFIED:
            raise InvalidArgument("update type is not set")
        if update.type not in U.Type.values():  # an enum is open on the wire
            raise InvalidArgument(f"unknown update type {update.type}; the types are {', '.join(U.Type.keys()[1:])}")
        if kind == "table_operation":
            op = update.entity.table_operation
            spec, _ = self._table(op.table_id)
            if op.table_operations_type not in spec.operations:
                raise InvalidArgument(
                    f"operation {op.table_operations_type!r} is not supported; supported: {list(spec.operations)}",
                    table=spec.name,
                )
            return None  # the emulator's state is always in sync
        if kind == "table_attribute":
            return self._write_attribute(update.entity.table_attribute)
        if kind != "table_entry":
            raise (InvalidArgument("empty entity") if kind is None else Unsupported(f"{kind} writes are not supported"))
        entry = update.entity.table_entry
        spec, obj = self._table(entry.table_id)
        if entry.WhichOneof("value") == "handle_id":
            raise Unsupported("entry handles are not supported", table=spec.name)
        has_key = entry.HasField("key") and len(entry.key.fields) > 0
        if spec.kind is Kind.FIXED:
            return self._write_fixed(update.type, spec, obj, entry, has_key)
        if entry.is_default_entry and spec.kind is not Kind.MATCH:
            raise InvalidArgument("this table has no default entry", table=spec.name)
        if not has_key and not entry.is_default_entry:
            if update.type != U.DELETE:
                raise InvalidArgument(f"{U.Type.Name(update.type)} needs a key", table=spec.name)
            return self._clear(spec, obj, target)
        handler = getattr(self, f"_write_{spec.kind.value}")
        return handler(update.type, spec, obj, entry, target)

    # -- match-action tables

    def _write_match(self, utype: int, spec: TableSpec, table: Any, entry: Any, target: Any) -> Undo | None:
        U = pb.Update
        if entry.is_default_entry:
            if entry.HasField("key") and entry.key.fields:
                raise InvalidArgument("the default entry has no key", table=spec.name)
            if utype in (U.MODIFY, U.INSERT_OR_MODIFY):
                action, params = self._action_data(spec, entry)
                old = table.set_default(action, params)
            elif utype in (U.DELETE, U.RESET):
                old = table.reset_default()
            elif utype == U.INSERT:
                raise InvalidArgument(
                    "INSERT on the default entry: use MODIFY to set it, DELETE to reset it", table=spec.name
                )
            else:
                raise Unsupported(f"{U.Type.Name(utype)} on the default entry", table=spec.name)
            return lambda: table.restore_default(*old)
        key, priority = self._match_key(spec, entry.key)
        if utype == U.INSERT_OR_MODIFY:
            try:
                table.get(key, priority=priority)
                utype = U.MODIFY
            except NotFound:
                utype = U.INSERT
        if utype == U.INSERT:
            action, params = self._action_data(spec, entry)
            new = table.add(key, action, params, priority=priority)
            return lambda: table.delete(new.key, priority=priority)
        if utype == U.MODIFY:
            action, params = self._action_data(spec, entry)
            old = table.modify(key, action, params, priority=priority)
            return lambda: table.modify(old.key, old.action, old.params, priority=priority)
        if utype == U.DELETE:
            old = table.delete(key, priority=priority)
            return lambda: table.add(old.key, old.action, old.params, priority=priority)
        raise Unsupported(f"{U.Type.Name(utype)} on a match-action table", table=spec.name)

    def _match_key(self, spec: TableSpec, key: Any) -> tuple[tuple, int | None]:
        values = self._key(spec, key)
        items = []
        for f in spec.keys:
            if f.id == MATCH_PRIORITY_ID:
                continue
            if f.id not in values and f.match is Match.EXACT:
                # Not `mandatory` in bf-rt.json (bf-p4c's flag), but a key left out is
                # most likely a mistake: refused rather than matched as zero.
                raise InvalidArgument(f"key field {f.name} is missing", table=spec.name)
            items.append(values.get(f.id))
        return tuple(items), values.get(MATCH_PRIORITY_ID)

    def _action_data(self, spec: TableSpec, entry: Any) -> tuple[str, dict[str, int]]:
        action_id = entry.data.action_id
        if action_id == 0:
            raise InvalidArgument("no action_id: the entry needs an action", table=spec.name)
        action = spec.action_by_id.get(action_id)
        if action is None:
            raise InvalidArgument(f"action id {action_id} is not an action of this table", table=spec.name)
        values = self._data(spec, action.param_by_id, entry.data.fields, f"action {action.name}")
        return action.name, {action.param_by_id[i].name: v for i, v in values.items()}

    # -- registers and counters

    def _pipe(self, target: Any, entry: Any) -> int | None:
        pipe = entry.entry_tgt.pipe_id if entry.HasField("entry_tgt") else target.pipe_id
        return None if pipe == ALL_PIPES else pipe

    def _index(self, spec: TableSpec, entry: Any) -> int:
        (index,) = self._key(spec, entry.key, all_mandatory=True).values()
        return index

    def _write_register(self, utype: int, spec: TableSpec, reg: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        index, pipe = self._index(spec, entry), self._pipe(target, entry)
        if utype in (U.INSERT, U.MODIFY):
            values = self._data(spec, spec.data_by_id, entry.data.fields, "register data")
            if 1 not in values:
                raise InvalidArgument(f"data field {spec.data[0].name} is missing", table=spec.name)
            value = values[1]
        else:  # the driver's register table has no entry delete or add-or-modify
            raise Unsupported(f"{U.Type.Name(utype)} on a register (DELETE without a key clears it)", table=spec.name)
        cells = reg.cells_of(pipe)
        old = reg.write(index, value, pipe)

        def undo() -> None:
            for c, v in zip(cells, old):
                c[index] = v

        return undo

    def _write_counter(self, utype: int, spec: TableSpec, ctr: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        index = self._index(spec, entry)
        if utype in (U.INSERT, U.MODIFY):
            values = self._data(spec, spec.data_by_id, entry.data.fields, "counter data")
        else:  # the driver's counter table has no entry delete or add-or-modify
            raise Unsupported(f"{U.Type.Name(utype)} on a counter (DELETE without a key clears it)", table=spec.name)
        by_name = {spec.data_by_id[i].name: v for i, v in values.items()}
        old = ctr.write(index, by_name.get("$COUNTER_SPEC_PKTS", 0), by_name.get("$COUNTER_SPEC_BYTES", 0))
        return lambda: ctr.write(index, *old)

    # -- PRE

    def _write_pre_mgid(self, utype: int, spec: TableSpec, pre: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        (mgid,) = self._key(spec, entry.key, all_mandatory=True).values()
        d = self._named_data(spec, entry)
        if any(d.get(n) for n in ("$MULTICAST_ECMP_ID", "$MULTICAST_ECMP_L1_XID_VALID", "$MULTICAST_ECMP_L1_XID")):
            raise Unsupported("ECMP members are not supported by the emulator", table=spec.name)
        members = (
            d.get("$MULTICAST_NODE_ID", []),
            d.get("$MULTICAST_NODE_L1_XID_VALID"),
            d.get("$MULTICAST_NODE_L1_XID"),
        )
        old = pre.groups.get(mgid)
        if utype == U.INSERT_OR_MODIFY:
            utype = U.MODIFY if old is not None else U.INSERT
        if utype == U.INSERT:
            pre.add_group(mgid, *members)
        elif utype == U.MODIFY:
            pre.modify_group(mgid, *members)
        elif utype == U.MODIFY_INC:
            if entry.table_flags.mod_del:
                pre.remove_members(mgid, members[0])
            else:
                pre.add_members(mgid, *members)
        elif utype == U.DELETE:
            pre.delete_group(mgid)
        else:
            raise Unsupported(f"{U.Type.Name(utype)} on $pre.mgid", table=spec.name)
        return lambda: pre.restore_group(mgid, old)

    def _write_pre_node(self, utype: int, spec: TableSpec, pre: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        (node_id,) = self._key(spec, entry.key, all_mandatory=True).values()
        d = self._named_data(spec, entry)
        old = pre.nodes.get(node_id)
        if utype == U.INSERT_OR_MODIFY:
            utype = U.MODIFY if old is not None else U.INSERT
        if utype == U.INSERT:
            if "$MULTICAST_RID" not in d:
                raise InvalidArgument("data field $MULTICAST_RID is missing", table=spec.name)
            pre.add_node(node_id, d["$MULTICAST_RID"], d.get("$DEV_PORT", ()), d.get("$MULTICAST_LAG_ID", ()))
        elif utype == U.MODIFY:
            pre.modify_node(node_id, d.get("$MULTICAST_RID"), d.get("$DEV_PORT"), d.get("$MULTICAST_LAG_ID"))
        elif utype == U.DELETE:
            pre.delete_node(node_id)
        else:
            raise Unsupported(f"{U.Type.Name(utype)} on $pre.node", table=spec.name)
        return lambda: pre.restore_node(node_id, old)

    # -- ports

    _PORT_ARGS = {
        "$SPEED": "speed",
        "$FEC": "fec",
        "$N_LANES": "n_lanes",
        "$PORT_ENABLE": "enable",
        "$AUTO_NEGOTIATION": "autoneg",
    }

    def _write_port(self, utype: int, spec: TableSpec, ports: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        (dev_port,) = self._key(spec, entry.key, all_mandatory=True).values()
        named = self._named_data(spec, entry)
        args = {self._PORT_ARGS[n]: v for n, v in named.items() if n in self._PORT_ARGS}
        settings = {n: v for n, v in named.items() if n not in self._PORT_ARGS}
        if settings:
            args["settings"] = settings
        old = ports.get(dev_port)
        if utype == U.INSERT_OR_MODIFY:
            utype = U.MODIFY if old is not None else U.INSERT
        if utype == U.INSERT:
            missing = [n for n in ("$SPEED", "$FEC") if self._PORT_ARGS[n] not in args]
            if missing:
                raise InvalidArgument(f"data field(s) {', '.join(missing)} missing", table=spec.name)
            if old is None:
                ports.add(dev_port, args.pop("speed"), args.pop("fec"), **args)
            else:
                # The driver's port add succeeds on an added port and changes nothing;
                # the rest of the entry is then applied as a modify.
                ports.check_speed_fec(args.pop("speed"), args.pop("fec"))
                args.pop("n_lanes", None)
                ports.modify(dev_port, **args)
        elif utype == U.MODIFY:
            ports.modify(dev_port, **args)
        elif utype == U.DELETE:
            ports.delete(dev_port)
        else:
            raise Unsupported(f"{U.Type.Name(utype)} on $PORT", table=spec.name)
        return lambda: ports.restore(dev_port, old)

    def _write_port_stat(self, utype: int, spec: TableSpec, ports: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        (dev_port,) = self._key(spec, entry.key, all_mandatory=True).values()
        if utype != U.MODIFY:  # the driver's $PORT_STAT has only modify (to clear) and table clear
            raise Unsupported(
                f"{U.Type.Name(utype)} on $PORT_STAT: MODIFY with zeros clears counters, "
                "DELETE without a key clears every port's",
                table=spec.name,
            )
        values = self._named_data(spec, entry)
        nonzero = sorted(n for n, v in values.items() if v)
        if nonzero:
            raise InvalidArgument(f"$PORT_STAT counters can only be cleared (written 0): {nonzero}", table=spec.name)
        old = ports.set_stats(dev_port, values or dict.fromkeys(PORT_STAT_FIELDS, 0))
        return lambda: ports.set_stats(dev_port, old)

    # -- the other fixed tables (fixed_tables.py)

    _FIXED_OPS = {
        pb.Update.INSERT: fixed_tables.ADD,
        pb.Update.MODIFY: fixed_tables.MOD,
        pb.Update.DELETE: fixed_tables.DEL,
        pb.Update.MODIFY_INC: fixed_tables.MOD_INC,
    }

    def _write_fixed(self, utype: int, spec: TableSpec, table: Any, entry: Any, has_key: bool) -> Undo:
        U = pb.Update
        if entry.is_default_entry or not spec.keys:  # a keyless table is its default entry
            if has_key:
                raise InvalidArgument("Non-empty key for default entry", table=spec.name)
            if utype in (U.DELETE, U.RESET):
                return table.reset_default()
            if utype != U.MODIFY:
                raise Unsupported(f"{U.Type.Name(utype)} of the default entry: MODIFY sets it", table=spec.name)
            return table.write(fixed_tables.DEFAULT, (), None, self._named_data(spec, entry))
        if not has_key:
            if utype != U.DELETE:
                raise InvalidArgument(f"{U.Type.Name(utype)} needs a key", table=spec.name)
            return table.clear()
        values = self._key(spec, entry.key, all_mandatory=True)
        key = tuple(values[f.id] for f in spec.keys)
        op = self._FIXED_OPS.get(utype)
        if op is None:  # (no fixed table's driver implements add-or-modify)
            raise Unsupported(f"{U.Type.Name(utype)} on {spec.name}", table=spec.name)
        action = None
        if entry.data.action_id:
            a = spec.action_by_id.get(entry.data.action_id)
            if a is None:
                raise InvalidArgument(
                    f"action id {entry.data.action_id} is not an action of this table", table=spec.name
                )
            action = a.name
        fields = dict(spec.data_by_id)
        if action is not None:
            fields.update(spec.action_by_name[action].param_by_id)
        decoded = self._data(spec, fields, entry.data.fields, "data")
        named = {fields[i].name: v for i, v in decoded.items()}
        return table.write(op, key, action, named, bool(entry.table_flags.mod_del))

    # -- table attributes

    # The Entity.table_attribute field of each attribute name bf-rt.json lists.
    _ATTRIBUTE_FIELDS = {
        "EntryScope": "entry_scope",
        "IdleTimeout": "idle_table",
        "DynamicKeyMask": "dyn_key_mask",
        "DynamicHashing": "dyn_hashing",
        "MeterByteCountAdjust": "byte_count_adj",
        "port_status_notif_cb": "port_status_notify",
        "poll_intvl_ms": "intvl_ms",
        "pre_device_config": "pre_device_config",
        "selector_update_cb": "selector_update_notify",
    }

    def _attribute(self, attr: Any) -> tuple[TableSpec, str]:
        spec, _ = self._table(attr.table_id)
        which = attr.WhichOneof("attribute")
        if which is None:
            raise InvalidArgument("the table attribute names no attribute", table=spec.name)
        listed = {self._ATTRIBUTE_FIELDS.get(a) for a in spec.attributes}
        if which not in listed:
            raise Unsupported(
                f"attribute {which} is not supported; this table has {list(spec.attributes) or 'none'}",
                table=spec.name,
            )
        return spec, which

    def _write_attribute(self, attr: Any) -> Undo:
        spec, which = self._attribute(attr)
        if which == "entry_scope":
            scope = attr.entry_scope
            symmetric = (
                scope.pipe_scope.WhichOneof("scope") != "user_defined" and scope.pipe_scope.predef == pb.Mode.ALL
            )
            table = self._objects[spec.name][1]
            # bf_switchd changes a table's scope while it is empty. The emulator keeps
            # the scope it was given, but its pipes still share the table's entries.
            if not symmetric and spec.kind is Kind.MATCH and len(table):
                raise Unsupported(
                    "the pipe scope of a table that holds entries cannot change: clear it first", table=spec.name
                )
        key = (spec.id, which)
        with self._lock:
            old = self._attributes.get(key)
            value = pb.TableAttribute()
            value.CopyFrom(attr)
            self._attributes[key] = value

        def undo() -> None:
            with self._lock:
                if old is None:
                    self._attributes.pop(key, None)
                else:
                    self._attributes[key] = old

        return undo

    def _read_attribute(self, attr: Any) -> Any:
        """The attribute as last written, or the table's initial setting: entries in
        every pipe (scope ALL, args = the pipes), notifications off, stats polled every
        `STAT_POLL_MS`."""
        spec, which = self._attribute(attr)
        with self._lock:
            stored = self._attributes.get((spec.id, which))
        out = pb.TableAttribute(table_id=spec.id)
        if stored is not None:
            out.CopyFrom(stored)
        elif which == "entry_scope":
            out.entry_scope.gress_scope.predef = pb.Mode.ALL
            out.entry_scope.pipe_scope.predef = pb.Mode.ALL
            out.entry_scope.pipe_scope.args = (1 << self.store.pipes) - 1
            out.entry_scope.prsr_scope.predef = pb.Mode.ALL
        elif which == "port_status_notify":
            out.port_status_notify.enable = False
        elif which == "intvl_ms":
            out.intvl_ms.intvl_val = STAT_POLL_MS
        else:
            getattr(out, which).SetInParent()
        out.table_id = spec.id
        return out

    # -- the other port tables

    def _write_port_metadata(self, utype: int, spec: TableSpec, ports: Any, entry: Any, target: Any) -> Undo:
        U = pb.Update
        (dev_port,) = self._key(spec, entry.key, all_mandatory=True).values()
        old = ports.metadata.get(dev_port)
        if utype == U.INSERT_OR_MODIFY:
            utype = U.MODIFY if old is not None else U.INSERT
        if utype in (U.INSERT, U.MODIFY):
            if utype == U.INSERT and old is not None:
                raise AlreadyExists(f"port {dev_port} already has port metadata", table=spec.name)
            if utype == U.MODIFY and old is None:
                raise NotFound(f"port {dev_port} has no port metadata", table=spec.name)
            ports.metadata[dev_port] = self._data(spec, spec.data_by_id, entry.data.fields, "data").get(
                PORT_METADATA_DATA_ID, 0
            )
        elif utype == U.DELETE:
            if old is None:
                raise NotFound(f"port {dev_port} has no port metadata", table=spec.name)
            del ports.metadata[dev_port]
        else:
            raise Unsupported(f"{U.Type.Name(utype)} on {spec.name}", table=spec.name)

        def undo() -> None:
            if old is None:
                ports.metadata.pop(dev_port, None)
            else:
                ports.metadata[dev_port] = old

        return undo

    def _read_only(self, utype: int, spec: TableSpec, obj: Any, entry: Any, target: Any) -> Undo:
        why = "it captures nothing in the emulator" if spec.kind is Kind.SNAPSHOT else "it is read-only"
        raise Unsupported(f"{pb.Update.Type.Name(utype)} on {spec.name}: {why}", table=spec.name)

    _write_port_str_info = _write_port_hdl_info = _write_port_fp_idx_info = _write_snapshot = _read_only

    # -- DELETE without a key

    def _clear(self, spec: TableSpec, obj: Any, target: Any) -> Undo:
        if spec.kind is Kind.MATCH:
            old = obj.clear()
            prio = obj.has_priority
            return lambda: [obj.add(e.key, e.action, e.params, priority=e.priority if prio else None) for e in old]
        if spec.kind is Kind.REGISTER:
            pipe = None if target.pipe_id == ALL_PIPES else target.pipe_id
            snapshot = [list(c) for c in obj.cells_of(pipe)]
            cells = obj.cells_of(pipe)
            obj.clear(pipe)

            def undo() -> None:
                for c, saved in zip(cells, snapshot):
                    c[:] = saved

            return undo
        if spec.kind is Kind.COUNTER:
            saved = list(obj.packets), list(obj.bytes)
            obj.clear()

            def undo_counter() -> None:
                obj.packets[:], obj.bytes[:] = saved

            return undo_counter
        if spec.kind is Kind.PORT_STAT:  # tna_ports does this: every added port's counters zero
            saved = {c.dev_port: obj.set_stats(c.dev_port, dict.fromkeys(PORT_STAT_FIELDS, 0)) for c in obj.all()}
            return lambda: [obj.set_stats(p, old) for p, old in saved.items()]
        if spec.kind is Kind.PORT:
            old = obj.clear()
            return lambda: [obj.restore(c.dev_port, c) for c in old]
        if spec.kind is Kind.PORT_METADATA:
            saved = dict(obj.metadata)
            obj.metadata.clear()
            return lambda: obj.metadata.update(saved)
        raise Unsupported("DELETE without a key", table=spec.name)

    # ------------------------------------------------------------ decoding

    def _key(self, spec: TableSpec, key: Any, *, all_mandatory: bool = False) -> dict[int, Any]:
        """Key fields by id, as ints or (a, b) pairs, checked against the schema."""
        out: dict[int, Any] = {}
        for kf in key.fields:
            f = spec.key_by_id.get(kf.field_id)
            if f is None:
                raise InvalidArgument(f"no key field with id {kf.field_id}", table=spec.name)
            if kf.field_id in out:
                raise InvalidArgument(f"key field {f.name} appears twice", table=spec.name)
            sent, wanted = kf.WhichOneof("match_type"), _ONEOF_OF_MATCH[f.match]
            if sent != wanted:
                raise InvalidArgument(
                    f"key field {f.name} is {f.match.value}; the request sent {sent or 'no match value'}",
                    table=spec.name,
                )
            m = getattr(kf, sent)
            if f.type == "string":  # the name's bytes, as the SDE client sends a str key
                try:
                    out[f.id] = m.value.decode()
                except UnicodeDecodeError:
                    raise InvalidArgument(f"key field {f.name}: not UTF-8 text", table=spec.name) from None
            elif sent == "exact":
                out[f.id] = _uint(spec, f, m.value)
            elif sent == "ternary":
                out[f.id] = (_uint(spec, f, m.value), _uint(spec, f, m.mask, "mask"))
            elif sent == "lpm":
                out[f.id] = (_uint(spec, f, m.value), m.prefix_len)
            elif sent == "range":
                out[f.id] = (_uint(spec, f, m.low, "low"), _uint(spec, f, m.high, "high"))
            else:
                out[f.id] = (_uint(spec, f, m.value), m.is_valid)
        if all_mandatory:
            missing = [f.name for f in spec.keys if f.id not in out]
            if missing:
                raise InvalidArgument(f"key field(s) {', '.join(missing)} missing", table=spec.name)
        return out

    def _data(self, spec: TableSpec, fields: dict[int, FieldSpec], data: Iterable, what: str) -> dict[int, Any]:
        """Data fields by id, decoded by their declared type."""
        out: dict[int, Any] = {}
        for df in data:
            f = fields.get(df.field_id)
            if f is None:
                raise InvalidArgument(f"{what}: no data field with id {df.field_id}", table=spec.name)
            if df.field_id in out:
                raise InvalidArgument(f"{what}: data field {f.name} appears twice", table=spec.name)
            if f.read_only:
                raise InvalidArgument(f"{what}: data field {f.name} is read-only", table=spec.name)
            out[f.id] = _data_value(spec, f, df, what, self.limits.repeated)
        return out

    def _named_data(self, spec: TableSpec, entry: Any) -> dict[str, Any]:
        return {
            spec.data_by_id[i].name: v for i, v in self._data(spec, spec.data_by_id, entry.data.fields, "data").items()
        }

    # ------------------------------------------------------------ Read

    def Read(self, request: Any, context: grpc.ServicerContext) -> Iterator:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Read <- %s", _brief(request))
        self._check_program(request, context)
        n = len(request.entities)
        if n > self.limits.entities:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"a Read asks for at most {self.limits.entities} entities, not {n}: send several",
            )
        errors: list[_Failure | None] = [None] * n
        plans: list[Iterable] = []
        for i, entity in enumerate(request.entities):
            try:
                plans.append(self._read(entity, request.target))
            except Exception as e:  # noqa: BLE001
                errors[i] = self._error(e, f"read {i}")
        if any(errors):
            self._abort(context, errors, "entity", n)
        chunk: list = []
        try:
            for plan in plans:
                for entity in plan:
                    chunk.append(entity)
                    if len(chunk) >= READ_CHUNK:
                        yield pb.ReadResponse(entities=chunk)
                        chunk = []
        except Exception as e:  # noqa: BLE001 - answered, never raised into gRPC
            log.exception("read: unexpected failure while answering")
            context.abort(grpc.StatusCode.INTERNAL, f"internal error while answering the read: {type(e).__name__}")
        if chunk or not plans:
            yield pb.ReadResponse(entities=chunk)

    def _read(self, entity: Any, target: Any) -> Iterable:
        """Validate one read request entity now; return a (lazy) iterable of answer entities."""
        kind = entity.WhichOneof("entity")
        if kind == "table_usage":
            spec, obj = self._table(entity.table_usage.table_id)
            usage = {
                Kind.MATCH: lambda: len(obj),
                Kind.PRE_MGID: lambda: len(obj.groups),
                Kind.PRE_NODE: lambda: len(obj.nodes),
                Kind.PORT: lambda: len(obj.all()),
                Kind.PORT_STR_INFO: lambda: len(obj.names),
                Kind.PORT_HDL_INFO: lambda: len(obj.names),
                Kind.PORT_FP_IDX_INFO: lambda: len(obj.names),
                Kind.FIXED: lambda: len(obj.keys()),
                Kind.PORT_METADATA: lambda: len(obj.metadata),
                Kind.SNAPSHOT: lambda: 0,
            }.get(spec.kind, lambda: spec.size)()
            return [pb.Entity(table_usage=pb.TableUsage(table_id=spec.id, usage=usage))]
        if kind == "table_attribute":
            return [pb.Entity(table_attribute=self._read_attribute(entity.table_attribute))]
        if kind != "table_entry":
            raise (InvalidArgument("empty entity") if kind is None else Unsupported(f"reading {kind} is not supported"))
        req = entity.table_entry
        spec, obj = self._table(req.table_id)
        if req.WhichOneof("value") == "handle_id":
            raise Unsupported("entry handles are not supported", table=spec.name)
        tgt = req.entry_tgt if req.HasField("entry_tgt") else None
        has_key = req.HasField("key") and len(req.key.fields) > 0
        wanted = {f.field_id for f in req.data.fields}
        if spec.kind is Kind.MATCH:
            return self._read_match(spec, obj, req, has_key, tgt, wanted)
        if spec.kind is Kind.FIXED:
            return self._read_fixed(spec, obj, req, has_key, tgt, wanted)
        if req.table_flags.from_hw and spec.kind in _NO_HW_READ:
            raise Unsupported(f"{spec.name} is a software lookup: read it without from_hw", table=spec.name)
        if req.is_default_entry:
            raise InvalidArgument("this table has no default entry", table=spec.name)
        keys = [self._single_key(spec, req)] if has_key else None
        reader = getattr(self, f"_read_{spec.kind.value}")
        return reader(spec, obj, keys, self._pipe(target, req), wanted, tgt)

    def _single_key(self, spec: TableSpec, req: Any) -> Any:
        """The key's value (a tuple in declared order if the key has several fields)."""
        values = self._key(spec, req.key, all_mandatory=True)
        items = tuple(values[f.id] for f in spec.keys)
        return items[0] if len(items) == 1 else items

    def _answer(
        self,
        spec: TableSpec,
        key_items: Iterable[tuple[FieldSpec, Any]],
        fields: list,
        *,
        action_id: int = 0,
        default: bool = False,
        tgt: Any = None,
        wanted: set[int] = frozenset(),
    ) -> Any:
        e = pb.TableEntry(table_id=spec.id, is_default_entry=default)
        if tgt is not None:
            e.entry_tgt.CopyFrom(tgt)
        for f, value in key_items:
            _encode_key(e.key.fields.add(field_id=f.id), f, value)
        e.data.action_id = action_id
        e.data.fields.extend(df for df in fields if not wanted or df.field_id in wanted)
        return pb.Entity(table_entry=e)

    def _read_match(self, spec: TableSpec, table: Any, req: Any, has_key: bool, tgt: Any, wanted: set) -> Iterable:
        def data(action: str, params: dict) -> tuple[int, list]:
            a = spec.action_by_name[action]
            return a.id, [_data_field(p, params[p.name]) for p in a.params]

        if req.is_default_entry:
            action_id, fields = data(*table.default_entry())
            return [self._answer(spec, (), fields, action_id=action_id, default=True, tgt=tgt, wanted=wanted)]
        key_fields = [f for f in spec.keys if f.id != MATCH_PRIORITY_ID]
        prio_field = spec.key_by_id.get(MATCH_PRIORITY_ID)

        def answer(e: Any) -> Any:
            items = list(zip(key_fields, e.key))
            if prio_field is not None:
                items.append((prio_field, e.priority))
            action_id, fields = data(e.action, e.params)
            return self._answer(spec, items, fields, action_id=action_id, tgt=tgt, wanted=wanted)

        if has_key:
            key, priority = self._match_key(spec, req.key)
            return [answer(table.get(key, priority=priority))]
        return (answer(e) for e in table.entries())

    def _read_register(self, spec, reg, keys, pipe, wanted, tgt) -> Iterable:
        reg.cells_of(pipe)  # validates the pipe now
        f, index_field = spec.data[0], spec.keys[0]

        def answer(i: int) -> Any:
            fields = [_data_field(f, reg.unsigned(v)) for v in reg.read(i, pipe)]
            return self._answer(spec, [(index_field, i)], fields, tgt=tgt, wanted=wanted)

        if keys is not None:
            reg.read(keys[0], pipe)  # raises OutOfRange now, not mid-stream
            return [answer(keys[0])]
        return (answer(i) for i in range(reg.size))

    def _read_counter(self, spec, ctr, keys, pipe, wanted, tgt) -> Iterable:
        by_name = {f.name: f for f in spec.data}

        def answer(i: int) -> Any:
            packets, nbytes = ctr.read(i)
            fields = [
                _data_field(by_name["$COUNTER_SPEC_BYTES"], nbytes & (2**64 - 1)),
                _data_field(by_name["$COUNTER_SPEC_PKTS"], packets & (2**64 - 1)),
            ]
            return self._answer(spec, [(spec.keys[0], i)], fields, tgt=tgt, wanted=wanted)

        if keys is not None:
            ctr.read(keys[0])
            return [answer(keys[0])]
        return (answer(i) for i in range(ctr.size))

    def _read_pre_mgid(self, spec, pre, keys, pipe, wanted, tgt) -> Iterable:
        f = spec.data_by_name
        with self.store.lock:
            groups = {m: pre.group_entry(m) for m in keys} if keys is not None else dict(sorted(pre.groups.items()))
        return [
            self._answer(
                spec,
                [(spec.keys[0], m)],
                [
                    _data_field(f["$MULTICAST_NODE_ID"], list(g.node_ids)),
                    _data_field(f["$MULTICAST_NODE_L1_XID_VALID"], list(g.l1_xid_valid)),
                    _data_field(f["$MULTICAST_NODE_L1_XID"], list(g.l1_xids)),
                    _data_field(f["$MULTICAST_ECMP_ID"], list(g.ecmp_ids)),
                    _data_field(f["$MULTICAST_ECMP_L1_XID_VALID"], list(g.ecmp_xid_valid)),
                    _data_field(f["$MULTICAST_ECMP_L1_XID"], list(g.ecmp_xids)),
                ],
                tgt=tgt,
                wanted=wanted,
            )
            for m, g in groups.items()
        ]

    def _read_pre_node(self, spec, pre, keys, pipe, wanted, tgt) -> Iterable:
        f = spec.data_by_name
        with self.store.lock:
            nodes = {n: pre.node(n) for n in keys} if keys is not None else dict(sorted(pre.nodes.items()))
        return [
            self._answer(
                spec,
                [(spec.keys[0], n)],
                [
                    _data_field(f["$MULTICAST_RID"], x.rid),
                    _data_field(f["$MULTICAST_LAG_ID"], list(x.lag_ids)),
                    _data_field(f["$DEV_PORT"], list(x.dev_ports)),
                ],
                tgt=tgt,
                wanted=wanted,
            )
            for n, x in nodes.items()
        ]

    def _read_port(self, spec, ports, keys, pipe, wanted, tgt) -> Iterable:
        f = spec.data_by_name
        configs = [ports.config(p) for p in keys] if keys is not None else ports.all()

        def fields(c: Any) -> list:
            live = {
                "$SPEED": c.speed,
                "$FEC": c.fec,
                "$N_LANES": c.n_lanes,
                "$PORT_ENABLE": c.enable,
                "$AUTO_NEGOTIATION": c.autoneg,
                **{n: ports.setting(c, n) for n in PORT_SETTING_DEFAULTS},
                # veth interfaces: no media, no PTP timestamps captured
                "$MEDIA_TYPE": "BF_MEDIA_TYPE_UNKNOWN",
                "$IS_VALID": True,
                "$IS_INTERNAL": False,
                "$PORT_UP": ports.is_up(c.dev_port),
                "$TIMESTAMP_1588_VALID": False,
                "$TIMESTAMP_1588_VALUE": 0,
                "$TIMESTAMP_1588_ID": 0,
            }
            out = [_data_field(f[n], v) for n, v in live.items()]
            return out + self._port_name_fields(f, ports, c.dev_port)

        return [self._answer(spec, [(spec.keys[0], c.dev_port)], fields(c), tgt=tgt, wanted=wanted) for c in configs]

    @staticmethod
    def _port_name_fields(f: dict, ports: Any, dev_port: int) -> list:
        name = ports.names.get(dev_port)
        if name is None:
            return []
        conn, chnl = ports.handle(name)
        return [_data_field(f["$CONN_ID"], conn), _data_field(f["$CHNL_ID"], chnl), _data_field(f["$PORT_NAME"], name)]

    def _read_port_str_info(self, spec, ports, keys, pipe, wanted, tgt) -> Iterable:
        names = keys if keys is not None else sorted(ports.names.values(), key=ports.handle)
        found = [(n, ports.by_name(n)) for n in names]
        f = spec.data[0]
        return [self._answer(spec, [(spec.keys[0], n)], [_data_field(f, d)], tgt=tgt, wanted=wanted) for n, d in found]

    def _read_port_hdl_info(self, spec, ports, keys, pipe, wanted, tgt) -> Iterable:
        handles = keys if keys is not None else sorted(ports.handle(n) for n in ports.names.values())
        found = [(h, ports.by_handle(*h)) for h in handles]
        conn, chnl = spec.keys
        f = spec.data[0]
        return [
            self._answer(spec, [(conn, h[0]), (chnl, h[1])], [_data_field(f, d)], tgt=tgt, wanted=wanted)
            for h, d in found
        ]

    def _read_port_fp_idx_info(self, spec, ports, keys, pipe, wanted, tgt) -> Iterable:
        order = ports.front_panel_order()  # fp index -> dev_port
        indexes = keys if keys is not None else range(len(order))
        for i in indexes:
            if i >= len(order):
                raise NotFound(f"no front-panel port with index {i} ({len(order)} are named)", table=spec.name)
        f = spec.data[0]
        return [
            self._answer(spec, [(spec.keys[0], i)], [_data_field(f, order[i])], tgt=tgt, wanted=wanted) for i in indexes
        ]

    def _read_fixed(self, spec: TableSpec, table: Any, req: Any, has_key: bool, tgt: Any, wanted: set) -> Iterable:
        def answer(key: tuple, default: bool = False) -> Any:
            action, values = table.read(key)
            action_id = spec.action_by_name[action].id if action else 0
            fields = [_data_field(f, v) for f, v in values]
            return self._answer(
                spec, list(zip(spec.keys, key)), fields, action_id=action_id, default=default, tgt=tgt, wanted=wanted
            )

        if req.is_default_entry or not spec.keys:
            # bf_switchd answers nothing for a table without a default entry
            return [answer((), default=True)] if fixed_tables.DEFAULT in table.b.ops else []
        if has_key:
            values = self._key(spec, req.key, all_mandatory=True)
            return [answer(tuple(values[f.id] for f in spec.keys))]
        return (answer(k) for k in table.keys())

    def _read_port_metadata(self, spec, ports, keys, pipe, wanted, tgt) -> Iterable:
        if keys is not None:
            for p in keys:
                if p not in ports.metadata:
                    raise NotFound(f"port {p} has no port metadata", table=spec.name)
        items = [(p, ports.metadata[p]) for p in keys] if keys is not None else sorted(ports.metadata.items())
        f = spec.data[0]
        return [self._answer(spec, [(spec.keys[0], p)], [_data_field(f, v)], tgt=tgt, wanted=wanted) for p, v in items]

    def _read_snapshot(self, spec, obj, keys, pipe, wanted, tgt) -> Iterable:
        if keys is not None:
            raise NotFound("no snapshot is configured (the emulator captures none)", table=spec.name)
        return []

    def _read_port_stat(self, spec, ports, keys, pipe, wanted, tgt) -> Iterable:
        dev_ports = keys if keys is not None else [c.dev_port for c in ports.all()]
        stats = [(p, ports.stats(p)) for p in dev_ports]
        return [
            self._answer(
                spec,
                [(spec.keys[0], p)],
                [_data_field(f, s[f.name] & (2**64 - 1)) for f in spec.data],
                tgt=tgt,
                wanted=wanted,
            )
            for p, s in stats
        ]


# Lookup tables the port manager answers from its own maps: bf_switchd refuses to read
# them from hardware (the SDE client's default read flag), BF_NOT_SUPPORTED.
_NO_HW_READ = frozenset({Kind.PORT_STR_INFO, Kind.PORT_HDL_INFO, Kind.PORT_FP_IDX_INFO})

# What packing an Error into an Any adds: its type URL and the field framing.
_ANY_OVERHEAD = len("type.googleapis.com/bfrt_proto.Error") + 8

# BF status codes (bf_status_t) reported in Error.code next to the canonical code.
_BF_STATUS = {
    Code.INVALID_ARGUMENT: 3,
    Code.ALREADY_EXISTS: 4,
    Code.NOT_FOUND: 6,
    Code.RESOURCE_EXHAUSTED: 9,
    Code.OUT_OF_RANGE: 3,
    Code.FAILED_PRECONDITION: 24,
    Code.UNIMPLEMENTED: 17,
}


def _uint(spec: TableSpec, f: FieldSpec, data: bytes, part: str = "value") -> int:
    if len(data) != f.nbytes:
        raise InvalidArgument(
            f"field {f.name} {part}: {len(data)} bytes, expected {f.nbytes} (width {f.width} bits)", table=spec.name
        )
    value = int.from_bytes(data, "big")
    if value >> f.width:
        raise InvalidArgument(f"field {f.name} {part}: {value:#x} does not fit in {f.width} bits", table=spec.name)
    return value


def _data_value(spec: TableSpec, f: FieldSpec, df: Any, what: str, limit: int) -> Any:
    sent = df.WhichOneof("value")
    if f.type == "bytes" or (f.is_int and not f.repeated):
        wanted = "stream"
    elif f.is_int:
        wanted = "int_arr_val"
    elif f.type == "bool":
        wanted = "bool_arr_val" if f.repeated else "bool_val"
    elif f.type == "string":
        wanted = "str_arr_val" if f.repeated else "str_val"
    else:
        wanted = "float_val"
    if sent != wanted:
        raise InvalidArgument(
            f"{what}: data field {f.name} ({f.type}) must be sent as {wanted}, not {sent or 'nothing'}", table=spec.name
        )
    if wanted.endswith("_arr_val") and len(getattr(df, wanted).val) > limit:
        raise InvalidArgument(
            f"{what}: data field {f.name} has {len(getattr(df, wanted).val)} values; at most {limit}", table=spec.name
        )
    if wanted == "stream":
        if df.ByteSize() > f.nbytes + 16:  # refused before the value is copied out
            raise InvalidArgument(
                f"{what}: field {f.name}: more than {f.nbytes + 16} bytes, expected {f.nbytes}", table=spec.name
            )
        return _uint(spec, f, df.stream)
    if wanted == "int_arr_val":
        values = list(df.int_arr_val.val)
        for v in values:
            if v >> f.width:
                raise InvalidArgument(f"{what}: {f.name} value {v} does not fit in {f.width} bits", table=spec.name)
        return values
    if wanted == "bool_arr_val":
        return list(df.bool_arr_val.val)
    if wanted == "str_arr_val":
        return list(df.str_arr_val.val)
    return getattr(df, wanted)


def _data_field(f: FieldSpec, value: Any) -> Any:
    df = pb.DataField(field_id=f.id)
    if f.type == "bool":
        if f.repeated:
            df.bool_arr_val.val.extend(value)
        else:
            df.bool_val = bool(value)
    elif f.type == "string":
        if f.repeated:
            df.str_arr_val.val.extend(value)
        else:
            df.str_val = value
    elif f.type == "float":
        df.float_val = value
    elif f.repeated and f.type != "bytes":
        df.int_arr_val.val.extend(value)
    else:
        df.stream = value.to_bytes(f.nbytes, "big")
    return df


def _encode_key(kf: Any, f: FieldSpec, value: Any) -> None:
    n = f.nbytes
    if f.type == "string":
        kf.exact.value = value.encode()
    elif f.match is Match.EXACT:
        kf.exact.value = value.to_bytes(n, "big")
    elif f.match is Match.TERNARY:
        kf.ternary.value, kf.ternary.mask = value[0].to_bytes(n, "big"), value[1].to_bytes(n, "big")
    elif f.match is Match.LPM:
        kf.lpm.value, kf.lpm.prefix_len = value[0].to_bytes(n, "big"), value[1]
    elif f.match is Match.RANGE:
        kf.range.low, kf.range.high = value[0].to_bytes(n, "big"), value[1].to_bytes(n, "big")
    else:
        kf.optional.value, kf.optional.is_valid = value[0].to_bytes(n, "big"), bool(value[1])


class _QuietEndedStreams(logging.Filter):
    """gRPC logs an error with a traceback when a StreamChannel the server ended ends
    with its last write still pending (a client that does not read): the server has
    already said why it ended that session."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not ("ExecuteBatchError" in text and "/bfrt_proto.BfRuntime/StreamChannel" in text)


logging.getLogger("grpc._cython.cygrpc").addFilter(_QuietEndedStreams())


class BfrtServer:
    """A running BFRuntime server: its `port`, its `store`, and `stop()`.

    gRPC's asyncio server on an event loop of its own thread: StreamChannel is a
    coroutine there, and the other calls (plain functions over the table store) run in
    a pool of `limits.threads` threads.
    """

    def __init__(self, store: TableStore, host: str, port: int, limits: Limits):
        self.store = store
        self.limits = limits
        self.servicer = BfrtServicer(store, limits)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="bfrt-server", daemon=True)
        self._stopped = threading.Event()
        self._stopping = False
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._start(host, port), self._loop).result()
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
            # gRPC's own tasks of the calls it cancelled end on the next turns of the loop.
            pending = asyncio.all_tasks(self._loop)
            if pending:
                self._loop.run_until_complete(asyncio.wait(pending, timeout=2))
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
        finally:
            self._loop.close()
            self._stopped.set()

    async def _start(self, host: str, port: int) -> int:
        lim = self.limits
        keepalive_ms = int(lim.keepalive_s * 1000)
        self._server = grpc.aio.server(
            migration_thread_pool=ThreadPoolExecutor(max_workers=lim.threads, thread_name_prefix="bfrt"),
            # Unary calls beyond the open sessions and a queue of them are refused
            # RESOURCE_EXHAUSTED by gRPC itself, before they are read.
            maximum_concurrent_rpcs=lim.sessions + 8 * lim.threads,
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", lim.message_bytes),
                ("grpc.max_send_message_length", 64 << 20),
                # A client whose process is gone or frozen answers no ping: its
                # connection, and with it its session and client id, ends.
                ("grpc.keepalive_time_ms", keepalive_ms),
                ("grpc.keepalive_timeout_ms", int(lim.keepalive_timeout_s * 1000)),
                ("grpc.http2.ping_timeout_ms", int(lim.keepalive_timeout_s * 1000)),
                # Idle sessions carry no data: keep pinging them all the same.
                ("grpc.http2.max_pings_without_data", 0),
                ("grpc.http2.min_time_between_pings_ms", keepalive_ms),
                ("grpc.keepalive_permit_without_calls", 1),
            ],
        )
        pb_grpc.add_BfRuntimeServicer_to_server(self.servicer, self._server)
        try:
            bound = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as e:
            raise BfrtServerError(
                f"cannot listen on {host}:{port}: {e}", fix="is another switch (or emulator) using that port?"
            ) from None
        if not bound:
            raise BfrtServerError(
                f"cannot listen on {host}:{port}", fix="is another switch (or emulator) using that port?"
            )
        await self._server.start()
        return bound

    def stop(self, grace: float | None = None) -> threading.Event:
        """Stop serving: open streams end (after `grace` seconds, None: at once). Returns
        an event set once the server is gone and its port free."""
        if not self._stopping and self._loop.is_running():
            self._stopping = True

            async def shut() -> None:
                try:
                    await self._server.stop(grace)
                finally:
                    self._loop.stop()

            asyncio.run_coroutine_threadsafe(shut(), self._loop)
        return self._stopped


def serve(
    program: Program | TableStore,
    address: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    pipes: int = 1,
    limits: Limits = Limits(),
) -> BfrtServer:
    """Start a BFRuntime server for `program` on address:port only; returns it running.

    Pass a `TableStore` instead of a program to share it with a data plane. Port 0 picks
    a free port; the server's `.port` is the bound one, `.store` its tables.
    """
    store = program if isinstance(program, TableStore) else TableStore(program, pipes=pipes)
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    server = BfrtServer(store, host, port, limits)
    log.info("BFRuntime server for %s on %s:%d", store.program.name, host, server.port)
    return server
