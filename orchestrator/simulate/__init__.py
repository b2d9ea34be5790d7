"""The simulated testbed: a discrete-event model of the scheduling system, driven by
the same experiment specs and writing the same results as a measured run.

One client host sends an open-loop load through the switch to the worker threads;
the switch runs a scheduling policy (Rain's per-slice bidirectional queue of tasks and
tokens, or a baseline), the workers run tasks to completion in FIFO order and, under
Rain, issue tokens within their quota; Algorithm 1 adapts quotas and slices through
the same code the worker agent runs (hosts/agent/adaptive.py). Everything is in paper
time (nanoseconds); a compiled core (core/, a C library) does the event loop.

    model.py     the model's parameters: Network, SimPoint, build() from a spec's point
    engine.py    run(SimPoint) -> SimResult, through the C core
    policies.py  the scheduling policies the core has (one C file each; each system's
                 declared in orchestrator/systems)
    writer.py    a SimResult as the files of a measured point
    runner.py    `rainmaker simulate`: a spec's points in parallel, then analyse and plot
"""
