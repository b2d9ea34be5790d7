"""Dispatch (switch/p4/dispatch.p4): what the queue's outcome means for the packet
(dispatch to a worker, restore the client's address, reject, drop)."""

from __future__ import annotations

from .headers import (
    EV_DISPATCH_DIRECT,
    EV_DISPATCH_QUEUED,
    EV_LARGE_REJECTED,
    EV_NO_WORKER,
    EV_TASK_QUEUED,
    EV_TASK_REJECTED,
    EV_TOKEN_DROPPED,
    EV_TOKEN_QUEUED,
    FLAG_LARGE,
    KIND_DISPATCH,
    KIND_REJECT,
    KIND_TASK,
    MAX_CLIENT_HOSTS,
    MAX_WORKERS,
    QOP_FULL,
    QOP_TASK_MATCHED,
    QOP_TASK_QUEUED,
    QOP_TOKEN_MATCHED,
    QOP_TOKEN_QUEUED,
)
from .schema import Action, Key, Param, Table

SELECT_WORKER = Table(
    "pipe.SwitchIngress.dispatch.select_worker",
    keys=[Key("hdr.rain.worker_id", 16)],
    actions=[
        Action("SwitchIngress.dispatch.to_worker", [Param("port", 9), Param("dmac", 48), Param("dip", 32)]),
        Action("SwitchIngress.dispatch.no_worker"),
    ],
    size=MAX_WORKERS,
    default_action="no_worker",
)

CLIENT_ADDR = Table(  # key hdr.rain.client_id[15:8] @name("client_host")
    "pipe.SwitchIngress.dispatch.client_addr",
    keys=[Key("client_host", 8)],
    actions=[
        Action("SwitchIngress.dispatch.set_client", [Param("ip", 32)]),
        Action("NoAction"),
    ],  # listed in the table's actions: TableAndDefault, as bf-p4c does
    size=MAX_CLIENT_HOSTS,
    default_action="NoAction",
)

TABLES = (SELECT_WORKER, CLIENT_ADDR)
REGISTERS = ()
COUNTERS = ()


class Dispatch:
    """control Dispatch: the queue's outcome applied to the packet."""

    def __init__(self, store):
        self._select_worker_table = store.table(SELECT_WORKER.name)
        self._client_addr_table = store.table(CLIENT_ADDR.name)
        self._find_worker = self._select_worker_table.finder
        self._find_client = self._client_addr_table.finder

    def select_worker(self, hdr, ig_md) -> None:
        entry = self._find_worker((hdr.worker_id,))
        call = self._select_worker_table.default if entry is None else entry.call
        if call.action == "to_worker":
            p = call.params
            ig_md.ucast_egress_port = p["port"]
            hdr.eth_dst = p["dmac"].to_bytes(6, "big")
            hdr.ip_dst = p["dip"]
        else:  # no_worker
            ig_md.drop_ctl = 1
            ig_md.event = EV_NO_WORKER

    def client_addr(self, hdr) -> None:
        entry = self._find_client((hdr.client_id >> 8,))  # key: client_id[15:8] (client_host)
        call = self._client_addr_table.default if entry is None else entry.call
        if call.action == "set_client":
            hdr.ip_src = call.params["ip"]

    @staticmethod
    def reject(hdr, ig_md) -> None:
        hdr.eth_dst, hdr.eth_src = hdr.eth_src, hdr.eth_dst
        hdr.ip_dst, hdr.ip_src = hdr.ip_src, hdr.ip_dst
        hdr.udp_dst_port, hdr.udp_src_port = hdr.udp_src_port, hdr.udp_dst_port
        hdr.kind = KIND_REJECT
        ig_md.ucast_egress_port = ig_md.ingress_port

    def apply(self, hdr, ig_md) -> None:
        op = ig_md.queue_op
        if op == QOP_TASK_MATCHED:
            hdr.kind = KIND_DISPATCH
            hdr.slice = ig_md.slice
            hdr.worker_id = ig_md.peer_worker
            ig_md.event = EV_DISPATCH_DIRECT
            self.select_worker(hdr, ig_md)
        elif op == QOP_TOKEN_MATCHED:
            hdr.kind = KIND_DISPATCH
            hdr.slice = ig_md.slice
            hdr.task_type = ig_md.entry_meta >> 8
            hdr.flags = ig_md.entry_meta & 0xFF
            ig_md.event = EV_DISPATCH_QUEUED
            self.client_addr(hdr)
            self.select_worker(hdr, ig_md)
        elif op == QOP_TASK_QUEUED:
            if hdr.bridged_prewrite == 0:
                ig_md.drop_ctl = 1
                ig_md.event = EV_TASK_QUEUED
        elif op == QOP_TOKEN_QUEUED:
            ig_md.drop_ctl = 1
            ig_md.event = EV_TOKEN_QUEUED
        elif op == QOP_FULL:
            if hdr.kind == KIND_TASK:
                self.reject(hdr, ig_md)
                ig_md.event = EV_LARGE_REJECTED if hdr.flags & FLAG_LARGE else EV_TASK_REJECTED
            else:
                ig_md.drop_ctl = 1
                ig_md.event = EV_TOKEN_DROPPED
