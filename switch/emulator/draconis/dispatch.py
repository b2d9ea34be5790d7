"""Dispatch (switch/p4/draconis/dispatch.p4, control DraconisDispatch): the queue's
outcome applied to the packet: a PULL becomes the DISPATCH of the task it took, or
EMPTY, back to the worker; a queued task is dropped; a task that found the queue full
goes back to its client as REJECT."""

from __future__ import annotations

from ..headers import (
    EV_DISPATCH_QUEUED,
    EV_TASK_QUEUED,
    EV_TASK_REJECTED,
    KIND_DISPATCH,
    KIND_EMPTY,
    KIND_REJECT,
    MAX_CLIENT_HOSTS,
    QOP_FULL,
    QOP_TASK_QUEUED,
    QOP_TOKEN_MATCHED,
)
from ..schema import Action, Key, Param, Table
from .consts import EV_PULL_EMPTY, QOP_PULL_EMPTY

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

TABLES = (CLIENT_ADDR,)
REGISTERS = ()
COUNTERS = ()


class Dispatch:
    """control DraconisDispatch."""

    def __init__(self, store):
        self._client_addr_table = store.table(CLIENT_ADDR.name)
        self._find_client = self._client_addr_table.finder

    def client_addr(self, hdr) -> None:
        entry = self._find_client((hdr.client_id >> 8,))  # key: client_id[15:8] (client_host)
        call = self._client_addr_table.default if entry is None else entry.call
        if call.action == "set_client":
            hdr.ip_src = call.params["ip"]

    @staticmethod
    def to_sender(hdr, ig_md) -> None:
        """Back to the sender: addresses and UDP ports swapped, UDP checksum zero (none)."""
        hdr.eth_dst, hdr.eth_src = hdr.eth_src, hdr.eth_dst
        hdr.ip_dst, hdr.ip_src = hdr.ip_src, hdr.ip_dst
        hdr.udp_dst_port, hdr.udp_src_port = hdr.udp_src_port, hdr.udp_dst_port
        hdr.udp_checksum = 0
        ig_md.ucast_egress_port = ig_md.ingress_port

    def apply(self, hdr, ig_md) -> None:
        op = ig_md.queue_op
        if op == QOP_TOKEN_MATCHED:  # a pull took the head
            self.to_sender(hdr, ig_md)
            hdr.kind = KIND_DISPATCH
            hdr.task_type = ig_md.entry_meta >> 8
            hdr.flags = ig_md.entry_meta & 0xFF
            hdr.report = 0
            ig_md.event = EV_DISPATCH_QUEUED
            self.client_addr(hdr)
        elif op == QOP_PULL_EMPTY:
            self.to_sender(hdr, ig_md)
            hdr.kind = KIND_EMPTY
            ig_md.event = EV_PULL_EMPTY
        elif op == QOP_TASK_QUEUED:
            ig_md.drop_ctl = 1
            ig_md.event = EV_TASK_QUEUED
        elif op == QOP_FULL:
            self.to_sender(hdr, ig_md)
            hdr.kind = KIND_REJECT
            ig_md.event = EV_TASK_REJECTED
