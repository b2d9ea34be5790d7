"""rainmaker's orchestrator: runs on the researcher's machine and drives a testbed."""
