"""The traffic manager between ingress and egress (TNA's TM and PRE), as the Rain
program uses it.

- `drop_ctl` set: no copy at all.
- unicast: one copy to `ucast_egress_port` (when ingress set it), egress_rid 0;
- multicast: for `mcast_grp_a` != 0, one copy per node of the `$pre.mgid` group and
  per dev_port of that node (`$pre.node`), each with egress_rid = the node's rid.
  An unknown group makes no copies (as on the ASIC). L1/L2 exclusion ids are not used
  by the program (it sets neither), so there is no pruning.

Whether a copy's egress port exists and is enabled is the ports' business (ports.py):
a copy to a port that is not is dropped and counted there.
"""

from __future__ import annotations

from collections.abc import Callable

from .headers import IngressMd
from .tables import TableStore

# egress(dev_port, rid): build and send one copy
Egress = Callable[[int, int], None]


class TrafficManager:
    def __init__(self, store: TableStore):
        self._group = store.pre.group  # mgid -> ((rid, dev_ports), ...), swapped on every control change

    def replicate(self, ig_md: IngressMd, egress: Egress) -> int:
        """Call `egress(dev_port, rid)` once per copy; returns the number of copies."""
        if ig_md.drop_ctl:
            return 0
        copies = 0
        port = ig_md.ucast_egress_port
        if port is not None:
            egress(port, 0)
            copies = 1
        mgid = ig_md.mcast_grp_a
        if mgid:
            for rid, ports in self._group(mgid):
                for p in ports:
                    egress(p, rid)
                    copies += 1
        return copies
