"""`python3 -m hosts.agent worker|client|rpc-server|rpc-client --config FILE` or `enable --ctl FILE`."""

from __future__ import annotations

import argparse

from .common import main_guard


def main() -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hosts.agent", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("worker", "client"):
        p = sub.add_parser(name, help=f"run rain-{name} for one sweep point")
        p.add_argument("--config", required=True, help="the agent's JSON configuration")
    for name in ("rpc-server", "rpc-client"):
        p = sub.add_parser(name, help=f"run {name} over kernel TCP for one point (Rakaia's measured layer)")
        p.add_argument("--config", required=True, help="the agent's JSON configuration")
    e = sub.add_parser("enable", help="turn a worker's tokens on (after the switch knows it)")
    e.add_argument("--ctl", required=True, help="the worker's control block")
    e.add_argument("--quota", type=int)
    e.add_argument("--slice", type=int)
    e.add_argument("--disable", action="store_true", help="turn tokens off instead (deregistration)")
    e.add_argument("--worker", type=int, help="only this worker (index in the control block; default: all)")
    a = ap.parse_args()
    if a.cmd == "worker":
        from .worker import run

        return run(a.config)
    if a.cmd == "client":
        from .client import run

        return run(a.config)
    if a.cmd in ("rpc-server", "rpc-client"):
        from .rpc import run_client, run_server

        return (run_server if a.cmd == "rpc-server" else run_client)(a.config)
    from .worker import enable

    return enable(a.ctl, a.quota, a.slice, a.disable, a.worker)


if __name__ == "__main__":
    main_guard(main)
