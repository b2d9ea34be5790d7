"""rainmaker's orchestrator: runs on the researcher's machine and drives a testbed."""

import switch  # noqa: F401 - first: it keeps gRPC's fork handlers off (see switch/__init__.py)
