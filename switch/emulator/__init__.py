"""The software switch: the same pipeline as switch/p4, served over the same BFRuntime API.

It imports nothing from orchestrator or switch/control: it is reached only the way a
real switch is, through its ports and BFRuntime (bfrt_server.py). schema.py declares a
program's tables as data, tables.py holds their runtime state (the table store the
data plane looks up).

The Rain program, one module per P4 file or control, read side by side with it:
headers.py (headers.p4, types.p4, sizes.p4), parser.py and deparser.py (parsers.p4),
forward.py, slice_map.py, bidir_queue.py, rdma_engine.py, queue_entries.py,
dispatch.py, telemetry.py, events.py, rdma_writer.py (each declares its tables,
registers and counters as bf-p4c names them, and implements the control's apply),
traffic_manager.py (TM and PRE), pipeline.py (rain.p4's wiring), rain.py (PROGRAM,
make_store()). ports.py runs AF_PACKET ports and the hot loop; __main__.py is
`python -m switch.emulator`; bench.py measures it.
"""
