"""The checks of a point's data path, read from what the hosts and the switch counted:
tasks the workers' rings lost (tasks_intact), links that went down (links_up), and a
client that read none of the frames the switch sent it (frames_delivered)."""

from __future__ import annotations

from . import layout
from .layout import PointDir
from .verdict import Check


def check_tasks_intact(pd: PointDir) -> Check:
    """Large tasks are pre-written into the workers' rings: a WRITE a NIC dropped (a
    zero iCRC to a NIC that checks it) or a slot overwritten before its descriptor came
    (desc_mismatch) loses tasks silently at the worker. Any of them fails the point."""
    hosts = pd.worker_hosts()
    stats = {h: pd.read_worker_stats(h) for h in hosts}
    missing = sorted(h for h, s in stats.items() if s is None)
    if not hosts or len(missing) == len(hosts):
        return Check("tasks_intact", None, None, 0, "not run: no worker stats (workers/<host>/stats.json)")
    per: dict[str, dict[str, int]] = {}
    for h, s in stats.items():
        if s is None:
            continue
        roce = s.get("roce") or {}
        per[h] = {
            "icrc_drops": int((s.get("drops") or {}).get("roce_icrc") or 0) + int(roce.get("nic_icrc_drops") or 0),
            "desc_mismatch": sum(int(w.get("desc_mismatch") or 0) for w in s.get("workers") or []),
        }
    icrc = sum(v["icrc_drops"] for v in per.values())
    mismatch = sum(v["desc_mismatch"] for v in per.values())
    bad = icrc + mismatch
    if not bad:
        msg = f"no WRITE dropped for its iCRC, no descriptor refused on {len(per)} worker host(s)"
        if missing:
            msg += f" (no stats from {', '.join(missing)})"
        return Check("tasks_intact", True, 0, 0, msg, {"hosts": per})
    parts = []
    if icrc:
        parts.append(
            f"{icrc} RoCEv2 WRITEs dropped for a bad iCRC (the switch sends a zero iCRC: turn the NICs' "
            "check off, roce.icrc_disable_command, or set roce.icrc_check to what they do)"
        )
    if mismatch:
        parts.append(
            f"{mismatch} dispatched descriptors refused because their ring slot held another task "
            "(a pre-written slot was reused before its task ran)"
        )
    return Check("tasks_intact", False, bad, 0, "; ".join(parts), {"hosts": per})


def check_links_up(pd: PointDir) -> Check:
    """A link that went down during the load took its host off the testbed for a while:
    what the point measured is not what the plan asked, whatever the clients saw."""
    links = pd.read_links()
    if links is None:
        return Check("links_up", None, None, 0, "not run: no switch/links.json")
    bad, per, uncounted = [], {}, False
    for row in links["ports"]:
        if not isinstance(row, dict):
            continue
        hosts = [str(h) for h in row.get("hosts") or []]
        events, dropped = row.get("link_down_events"), row.get("frames_dropped_port_down")
        if not hosts and not dropped:
            continue  # a spare port: whatever its link did, nothing of the point went through it
        uncounted |= hosts != [] and events is None
        what = []
        if hosts and row.get("up_before") is False:
            what.append("was down when the load started")
        if events:
            what.append(f"went down {events} time(s)")
        if hosts and row.get("up_after") is False:
            what.append("was down when the load ended")
        if dropped:
            what.append(f"dropped {dropped} frame(s) because it was down")
        if what:
            name = f"{', '.join(hosts)}'s link" if hosts else "a port with no host"
            bad.append(f"{name} (port {row.get('port')}, dev_port {row.get('dev_port')}) " + " and ".join(what))
            per[str(row.get("port"))] = row
    n = sum(1 for r in links["ports"] if isinstance(r, dict) and r.get("hosts"))
    if bad:
        return Check("links_up", False, len(bad), 0, "; ".join(bad) + " during the load", {"ports": per})
    msg = f"the links of {n} host port(s) stayed up through the load"
    if uncounted:
        msg += " ($PORT_UP at both ends only: the switch counts no link losses)"
    return Check("links_up", True, 0, 0, msg)


def check_frames_delivered(pd: PointDir) -> Check:
    """A client whose program read no frame while the switch sent its port some: every
    answer was lost between the switch and the client's load loop. The message counts
    them at every hop (the switch's port, the kernel's interface, the DPDK port,
    rain-client's loop), so it says where they went. (Seen once, in a suite run: a client
    that read nothing while the switch forwarded 506 answers to it.)"""
    links = pd.read_links()
    if links is None:
        return Check("frames_delivered", None, None, 0, "not run: no switch/links.json")
    sent = {}
    for row in links["ports"]:
        if isinstance(row, dict) and isinstance(row.get("frames_to_host"), int):
            for h in row.get("hosts") or []:
                sent[str(h)] = (row["frames_to_host"], row.get("port"))
    bad, per = [], {}
    for h in pd.client_hosts():
        if h not in sent:
            continue
        summary = layout.read_json(pd.client(h) / layout.CLIENT_SUMMARY) or {}
        agent = layout.read_json(pd.client(h) / layout.AGENT_OUTCOME) or {}
        n, port = sent[h]
        hops = {
            "switch_port_tx": n,
            "interface_rx": (agent.get("nic") or {}).get("rx_packets"),
            "dpdk_port_rx": (summary.get("port") or {}).get("ipackets"),
            "client_rx": (summary.get("run") or {}).get("rx_frames"),
        }
        per[h] = hops
        if n > 0 and hops["client_rx"] == 0:
            bad.append(
                f"{h} read no frame while the switch sent {n} to its port {port} (its interface took "
                f"{hops['interface_rx']}, its DPDK port {hops['dpdk_port_rx']})"
            )
    if bad:
        return Check("frames_delivered", False, len(bad), 0, "; ".join(bad), {"hosts": per})
    if not per:
        return Check("frames_delivered", None, None, 0, "not run: the switch counts no frames per port")
    return Check(
        "frames_delivered", True, 0, 0, f"{len(per)} client(s) read the frames the switch sent them", {"hosts": per}
    )
