"""BFRuntime: the gRPC API of the Tofino SDE (bf_switchd) and of the emulator.

- `proto/bfruntime.proto`: the wire declaration; its stubs are generated (see _stubs.py)
  and exposed here as `bfruntime_pb2` and `bfruntime_pb2_grpc`.
- `client.py`: rainmaker's client (by name, integers in and out), runs against bf_switchd.
- `info.py`: bf-rt.json parsed, names resolved (unique dot-suffixes too).
- `errors.py`: `BfrtError`, decoded per update from the switch's error trailer.
"""

from ._stubs import load as _load

bfruntime_pb2, bfruntime_pb2_grpc = _load()

from .client import Client  # noqa: E402  (needs the stubs above)
from .errors import BfrtError  # noqa: E402

__all__ = ["bfruntime_pb2", "bfruntime_pb2_grpc", "Client", "BfrtError"]
