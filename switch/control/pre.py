"""The packet replication engine: one multicast group per slice (mgid = slice + 1;
mgid 0 means "no group" to config_slice), one node per worker (node id = worker id
+ 1) whose rid is the worker id, so the egress RdmaWriter knows whose replica it
builds, on the dev_port of the worker's host."""

from __future__ import annotations

from collections.abc import Mapping

from switch.bfrt.client import Client


def mgid_of(slice_id: int) -> int:
    return slice_id + 1


def node_of(worker: int) -> int:
    return worker + 1


class Pre:
    def __init__(self, client: Client):
        self.pre = client.pre

    def program(self, groups: Mapping[int, Mapping[int, int]]) -> None:
        """Exactly these groups: slice -> {worker id: dev_port}."""
        self.clear()
        for members in groups.values():
            for wid, port in sorted(members.items()):
                self.pre.add_node(node_of(wid), rid=wid, dev_ports=[port])
        for s, members in sorted(groups.items()):
            self.pre.add_group(mgid_of(s), [node_of(w) for w in sorted(members)])

    def set_group(self, slice_id: int, workers: list[int]) -> None:
        """A slice's group holds exactly these workers' nodes (created if missing)."""
        nodes = [node_of(w) for w in sorted(workers)]
        if mgid_of(slice_id) in self.pre.groups():
            self.pre.modify_group(mgid_of(slice_id), nodes)
        else:
            self.pre.add_group(mgid_of(slice_id), nodes)

    def add_node(self, worker: int, dev_port: int) -> None:
        if node_of(worker) in self.pre.nodes():
            self.pre.modify_node(node_of(worker), rid=worker, dev_ports=[dev_port])
        else:
            self.pre.add_node(node_of(worker), rid=worker, dev_ports=[dev_port])

    def remove_node(self, worker: int) -> None:
        """Delete a worker's node (take it out of its group first)."""
        if node_of(worker) in self.pre.nodes():
            self.pre.delete_node(node_of(worker))

    def groups(self) -> dict[int, dict[int, list[int]]]:
        """slice -> {worker id (rid): dev_ports} as the switch holds them."""
        nodes = self.pre.nodes()
        out = {}
        for mgid, members in self.pre.groups().items():
            out[mgid - 1] = {nodes[n]["rid"]: list(nodes[n]["dev_ports"]) for n in members if n in nodes}
        return out

    def clear(self) -> None:
        self.pre.clear()
