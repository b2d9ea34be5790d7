"""The software switch: the same pipeline as switch/p4, served over the same BFRuntime API.

It imports nothing from orchestrator or switch/control: it is reached only the way a
real switch is, through its ports and BFRuntime (bfrt_server.py). schema.py declares a
program's tables as data, tables.py holds their runtime state (the table store the
data plane looks up).
"""
