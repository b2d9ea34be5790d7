"""A small program with a table of each match kind, a register and a counter: what the
BFRuntime tests (client, server, table store) run against."""

from __future__ import annotations

from switch.emulator.schema import Action, Counter, Key, Match, Param, Program, Register, Table

FORWARD = Table(
    "pipe.SwitchIngress.forward.forward",
    keys=[Key("hdr.ethernet.dst_addr", 48)],
    actions=[Action("SwitchIngress.forward.set_egress", [Param("port", 9)]), Action("SwitchIngress.forward.drop")],
    size=4,
    default_action="drop",
)

ROUTE = Table(  # LPM with an exact field in front (a VRF)
    "pipe.SwitchIngress.route.route",
    keys=[Key("ig_md.vrf", 8), Key("hdr.ipv4.dst_addr", 32, Match.LPM)],
    actions=[Action("SwitchIngress.route.set_nexthop", [Param("nexthop", 16)])],
    size=64,
)  # default: NoAction

ACL = Table(  # TCAM: ternary, range and optional fields, so $MATCH_PRIORITY
    "pipe.SwitchIngress.acl.acl",
    keys=[
        Key("hdr.ipv4.src_addr", 32, Match.TERNARY),
        Key("ig_md.l4_dst_port", 16, Match.RANGE),
        Key("ig_intr_md.ingress_port", 9, Match.OPTIONAL),
    ],
    actions=[
        Action("SwitchIngress.acl.deny"),
        Action("SwitchIngress.acl.permit"),
        Action("SwitchIngress.acl.mark", [Param("dscp", 6)], scope="TableOnly"),
    ],
    size=16,
    default_action="permit",
)

EGRESS_ACL = Table(  # same last two name parts as ACL: `acl` and `acl.acl` are ambiguous
    "pipe.SwitchEgress.acl.acl",
    keys=[Key("eg_intr_md.egress_port", 9)],
    actions=[Action("SwitchEgress.acl.deny")],
    size=8,
    default_action="deny",
    const_default=True,
)

BALANCE = Register("pipe.SwitchIngress.bidir_queue.balance", width=32, size=16, signed=True)
EVENTS = Counter("pipe.SwitchIngress.events.events", size=8)

PROGRAM = Program("bfrt_test", tables=[FORWARD, ROUTE, ACL, EGRESS_ACL], registers=[BALANCE], counters=[EVENTS])
