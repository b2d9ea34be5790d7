"""Errors of the BFRuntime client, decoded from what the switch answered.

A failed Write (or Read) comes back as gRPC UNKNOWN with a `grpc-status-details-bin`
trailer: a google.rpc.Status whose details hold one bfrt_proto.Error per update, OK
ones padding the gaps. `BfrtError.errors` holds the failed ones, each naming its
update index, its table and its canonical code, so a caller can tell which entry of a
batch was refused and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.rpc import code_pb2
from grpc_status import rpc_status

from switch.errors import SwitchError


def code_name(code: int) -> str:
    try:
        return code_pb2.Code.Name(code)
    except ValueError:
        return f"CODE_{code}"


@dataclass(frozen=True)
class UpdateError:
    """One refused update (or read entity) of a request."""

    index: int
    table: str | None
    code: int  # google.rpc.Code
    message: str
    bf_code: int = 0  # the driver's own status code, if it gave one

    @property
    def code_name(self) -> str:
        return code_name(self.code)

    def __str__(self) -> str:
        where = f"update {self.index}" + (f" ({self.table})" if self.table else "")
        return f"{where}: {self.code_name}: {self.message}"


class BfrtError(SwitchError):
    """A BFRuntime call failed. `errors` lists each refused update; `grpc_code` is the RPC's status."""

    def __init__(
        self,
        message: str,
        *,
        errors: Sequence[UpdateError] = (),
        grpc_code: grpc.StatusCode | None = None,
        fix: str | None = None,
    ):
        self.errors = list(errors)
        self.grpc_code = grpc_code
        super().__init__(message, fix=fix)

    @property
    def codes(self) -> list[str]:
        """The code name of each refused update, in order (handy in tests and logs)."""
        return [e.code_name for e in self.errors]


class BfrtConnectError(BfrtError):
    """The switch could not be reached, or refused the subscription or the binding."""


class BfrtClientIdTaken(BfrtConnectError):
    """The client id is held by another session on the switch."""


class BfrtNameError(BfrtError):
    """A table, field or action name is not in the switch's bf-rt.json."""


class BfrtValueError(BfrtError):
    """A value cannot be encoded for its field (width, type, match kind)."""


MAX_LINES = 20  # refused updates spelled out in an error's text


def from_rpc_error(e: grpc.RpcError, operation: str, tables: Sequence[str | None] = ()) -> BfrtError:
    """A BfrtError for a failed call; `tables[i]` names the table of update i."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    try:
        status = rpc_status.from_call(e) if hasattr(e, "trailing_metadata") else None
    except ValueError:  # a trailer that disagrees with the status line
        status = None
    errors: list[UpdateError] = []
    if status is not None:
        from switch.bfrt import bfruntime_pb2 as pb

        for i, detail in enumerate(status.details):
            if not detail.Is(pb.Error.DESCRIPTOR):
                continue
            err = pb.Error()
            detail.Unpack(err)
            if err.canonical_code != code_pb2.OK:
                table = tables[i] if i < len(tables) else None
                message = err.message
                if table and message.startswith(f"{table}: "):
                    message = message[len(table) + 2 :]  # the switch named the table too
                errors.append(UpdateError(i, table, err.canonical_code, message, err.code))
    if errors:
        primary = [x for x in errors if x.code != code_pb2.ABORTED] or errors
        # The details stop at the last failed update (bf_switchd's way), so the batch's
        # size is the caller's count when it gave one.
        size = max(len(tables), len(status.details))
        capped = re.match(r"(\d+) of \d+ failed", status.message) if "left out" in status.message else None
        refused = (
            f"{capped.group(1)} of {size} refused, {len(primary)} detailed"
            if capped
            else f"{len(primary)} of {size} refused"
        )
        lines = [f"{operation} failed: {refused}"]
        lines += [f"  {x}" for x in primary[:MAX_LINES]]
        if len(primary) > MAX_LINES:
            lines.append(f"  ... and {len(primary) - MAX_LINES} more (BfrtError.errors lists them)")
        rolled = len(errors) - len(primary)
        if rolled:
            lines.append(f"  ({rolled} other update(s) rolled back or not applied)")
        if "left out" in status.message:  # the switch capped its details
            lines.append(f"  the switch says: {status.message}")
        return BfrtError("\n".join(lines), errors=errors, grpc_code=code)
    name = code.name if code is not None else "error"
    fix = None
    if code == grpc.StatusCode.UNAVAILABLE:
        fix = "is bf_switchd (or the emulator) running and reachable?"
    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        fix = "the request is beyond what the switch accepts at once: send smaller batches, or fewer calls at a time"
    return BfrtError(f"{operation} failed: {name}: {details}", grpc_code=code, fix=fix)
