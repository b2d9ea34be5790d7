"""Run the software switch: `python -m switch.emulator --program rain --port 132=swp1:1/0
--port 140=swp2:2/0 --grpc 10.79.0.250:50052 [--log FILE] [--stats FILE] [--link-delay-us N]`.

A port is DEV_PORT=INTERFACE, optionally :CONN/CHNL, its front-panel name (what
$PORT_STR_INFO and $PORT_HDL_INFO resolve on a Tofino; the board decides it there).

Starts the BFRuntime gRPC server bound only to the given address (the switch's
management address; port 50052 unless given), opens the ports (run it inside the
switch's network namespace), prints `rain emulator ready` once both are up, and runs
until SIGTERM or SIGINT, then stops cleanly (exit status 0). Drops outside the P4's
own counters are logged when they change and, with --stats, written as JSON to FILE
every second and at exit. `--link-delay-us N` makes every frame the switch sends leave
N microseconds after the pipeline emitted it: longer links, or a slower switch.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import time

from switch.errors import SwitchError

from .bfrt_server import DEFAULT_PORT, serve
from .ports import LINK_DELAY_US_MAX, PortSet, PortSpec, write_atomically
from .programs import NAMES as PROGRAMS
from .programs import load as load_program
from .realtime import Realtime

log = logging.getLogger("switch.emulator")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m switch.emulator", description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", default="rain", choices=PROGRAMS, help="the P4 program to run (default rain)")
    ap.add_argument(
        "--port",
        action="append",
        default=[],
        metavar="DEV=IFACE[:C/L]",
        help="a switch port: dev_port=interface[:conn/chnl] (repeat for each port)",
    )
    ap.add_argument(
        "--grpc",
        default=f"127.0.0.1:{DEFAULT_PORT}",
        metavar="ADDR[:PORT]",
        help=f"BFRuntime address to listen on, only there (default 127.0.0.1:{DEFAULT_PORT})",
    )
    ap.add_argument("--log", metavar="FILE", help="log to FILE instead of stderr")
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--stats", metavar="FILE", help="write drop and port counters as JSON to FILE every second")
    ap.add_argument(
        "--realtime",
        type=int,
        default=0,
        metavar="PRIO",
        help="run the data plane thread (only it) at SCHED_FIFO priority PRIO (1-99; 0: no) while frames flow, "
        "and never more than 10 ms without a 2.5 ms sleep: on cores it shares, a woken data plane then runs at "
        "once instead of behind the other processes, and never holds a core (switch/emulator/realtime.py)",
    )
    ap.add_argument(
        "--link-delay-us",
        type=_link_delay,
        default=0.0,
        metavar="US",
        help="hold every frame the switch sends this many microseconds before it leaves, as a longer link "
        f"would (0..{LINK_DELAY_US_MAX:.0f}; default 0: none)",
    )
    ap.add_argument(
        "--recirc-delay-us",
        type=_link_delay,
        default=0.0,
        metavar="US",
        help="a program that recirculates (r2p2): each pass takes this many microseconds to come back "
        "(Tofino's pass time times the testbed's dilation; default 0: the next round of the loop)",
    )
    return ap.parse_args(argv)


def _link_delay(text: str) -> float:
    try:
        us = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of microseconds") from None
    if not 0 <= us <= LINK_DELAY_US_MAX:  # (also refuses nan)
        raise argparse.ArgumentTypeError(f"{text} is not 0..{LINK_DELAY_US_MAX:.0f} microseconds")
    return us


def _address(text: str) -> tuple[str, int]:
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, int(port)
    return text, DEFAULT_PORT


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        filename=args.log, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stopping = []

    def stop(signum, _frame):
        log.info("signal %d: stopping", signum)
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        specs = [PortSpec.parse(p) for p in args.port]
        host, port = _address(args.grpc)
        program = load_program(args.program)
        store = program.make_store()
        for spec in specs:
            if spec.name is not None:
                store.ports.set_name(spec.dev_port, spec.name)
        server = serve(store, host, port)
    except (SwitchError, ValueError) as e:
        print(f"error: {e.render() if isinstance(e, SwitchError) else e}", file=sys.stderr)
        return 2
    try:
        ports = PortSet(store, specs, link_delay_us=args.link_delay_us)
    except SwitchError as e:
        server.stop(None)
        print(f"error: {e.render()}", file=sys.stderr)
        return 2
    pipeline = program.pipeline(store, on_drop=ports.drops.add)
    if hasattr(pipeline, "recirc_delay"):
        pipeline.recirc_delay = args.recirc_delay_us / 1e6
    elif args.recirc_delay_us:
        log.warning("--recirc-delay-us: the %s program does not recirculate; ignored", args.program)
    # The store's registers are big lists (1.5 M cells): keep the cyclic GC from walking
    # them on every full collection (a pause of the data plane), and let the data plane
    # take the GIL back from a busy BFRuntime thread within 0.5 ms rather than 5.
    gc.freeze()
    sys.setswitchinterval(0.0005)

    next_report = [0.0]

    def chores(final: bool = False) -> None:  # every housekeeping round (0.25 s); reports once a second
        now = time.monotonic()
        if now < next_report[0] and not final:
            return
        next_report[0] = now + 1.0
        changed = ports.drops.changes()
        if changed:
            log.warning("drops outside the P4 counters (since last report): %s", changed)
        if args.stats:
            write_atomically(args.stats, ports.stats_json())

    log.info(
        "%s on %s:%d, ports %s%s",
        args.program,
        host,
        server.port,
        ", ".join(f"{s.dev_port}={s.iface}" for s in specs),
        f", link delay {args.link_delay_us:g} us" if args.link_delay_us else "",
    )
    realtime = Realtime(args.realtime) if args.realtime else None
    if realtime is not None:
        log.info("data plane thread at SCHED_FIFO %d while frames flow", args.realtime)
    print(f"{args.program} emulator ready", flush=True)
    status = 0
    try:
        ports.run(
            pipeline.process,
            lambda: bool(stopping),
            on_housekeeping=chores,
            recirculation=pipeline if hasattr(pipeline, "recirculate") else None,
            realtime=realtime,
        )
    except Exception:  # noqa: BLE001 - the loop itself failed (frames never get here)
        log.exception("the data plane stopped")
        print("error: the data plane stopped (see the log)", file=sys.stderr)
        status = 1
    finally:
        chores(final=True)
        log.info("drops outside the P4 counters (total): %s", ports.drops.counts)
        ports.close()
        server.stop(grace=0.5).wait(5)
    return status


if __name__ == "__main__":
    sys.exit(main())
