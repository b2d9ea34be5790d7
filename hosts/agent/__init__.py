"""Host agents: the only programs the orchestrator starts on testbed hosts.

Deployed alone to each host's deploy root (with hosts/proto.py and hosts/ctl.py), run
by the host's own python3, standard library only; they import nothing from
orchestrator or switch. A worker agent runs rain-worker and its scheduler-agent duties
(control block, statistics, adaptive scheduling); a client agent runs rain-client.
Both log to files in the point's output folder, which the orchestrator collects.
"""
