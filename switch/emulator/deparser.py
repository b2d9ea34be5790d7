"""Deparsers (switch/p4/parsers.p4): SwitchIngressDeparser and SwitchEgressDeparser.

Both update the IPv4 header checksum incrementally, as the P4 does (a residual of
the fields no control changes, options included, plus the new values: see
ipv4_checksum), and emit the valid headers in order, then the unparsed payload.

Ingress never changes a header's size, so its deparser writes in place: ethernet and
ipv4, and rain when the packet took the Rain path (queue_op set). No ingress action
writes udp, nor rain on the forwarding path, so their bytes already are what emit()
would write.
Egress may swap the rain header for BTH+RETH (a pre-written task becoming a RoCEv2
WRITE), so its deparser builds new bytes.
"""

from __future__ import annotations

import struct

from .headers import ETH_BYTES, IPV4_BYTES, QOP_NONE, UDP_HDR_BYTES, Headers, IngressMd
from .parser import RAIN, UDP

ETH_IPV4 = struct.Struct("!6s6sHBBHHHBBHII")
ETH = struct.Struct("!6s6sH")
IPV4 = struct.Struct("!BBHHHBBHII")
BTH = struct.Struct("!BBHII")
RETH = struct.Struct("!IIII")

_UDP_OFF = ETH_BYTES + IPV4_BYTES
_RAIN_OFF = _UDP_OFF + UDP_HDR_BYTES
_eth_ipv4 = ETH_IPV4.pack_into
_eth = ETH.pack_into
_rain = RAIN.pack_into
_udp_pack = UDP.pack_into


def ipv4_checksum(hdr: Headers) -> int:
    """The parsers' residual and the deparsers' update(), as parsers.p4 does them: the
    old checksum and the old values of the fields a control may change (version/ihl/
    diffserv, total_len, ttl/protocol, addresses) subtracted, which leaves the sum of
    the rest (identification, flags/fragment offset, options), then the new values
    added. `hdr.ipv4` keeps the values the parser read; the controls write `ip_*`."""
    _d, _s, _t, vihl, tos0, tl0, _ident, _ff, ttl0, proto, cs, src0, dst0 = hdr.ipv4
    vt = vihl << 8
    tp = proto
    src, dst = hdr.ip_src, hdr.ip_dst
    s = (
        (cs ^ 0xFFFF)
        + ((vt | tos0) ^ 0xFFFF)
        + (tl0 ^ 0xFFFF)
        + (((ttl0 << 8) | tp) ^ 0xFFFF)
        + ((src0 >> 16) ^ 0xFFFF)
        + ((src0 & 0xFFFF) ^ 0xFFFF)
        + ((dst0 >> 16) ^ 0xFFFF)
        + ((dst0 & 0xFFFF) ^ 0xFFFF)
        + (vt | hdr.ip_tos)
        + hdr.ip_total_len
        + ((hdr.ip_ttl << 8) | tp)
        + (src >> 16)
        + (src & 0xFFFF)
        + (dst >> 16)
        + (dst & 0xFFFF)
    )
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _ipv4_fields(hdr: Headers) -> tuple:
    """IPv4's ten fields, the checksum updated (ipv4_checksum)."""
    _d, _s, _t, vihl, _tos, _tl, ident, flags_frag, _ttl, proto, _cs, _src, _dst = hdr.ipv4
    return (
        vihl,
        hdr.ip_tos,
        hdr.ip_total_len,
        ident,
        flags_frag,
        hdr.ip_ttl,
        proto,
        ipv4_checksum(hdr),
        hdr.ip_src,
        hdr.ip_dst,
    )


def emit_udp_rain(buf, hdr: Headers, *, udp: bool = True) -> None:
    """A task's UDP (unless `udp` is False) and rain headers back into the frame at their
    offsets: what a baseline program rewrites on its own task path (a reject's swapped
    ports, a dispatch's kind and worker), which switch_ingress_deparser leaves alone."""
    if udp:
        _udp_pack(buf, _UDP_OFF, hdr.udp_src_port, hdr.udp_dst_port, hdr.udp_length, hdr.udp_checksum)
    _emit_rain(buf, _RAIN_OFF, hdr)


def _emit_rain(buf, off: int, hdr: Headers) -> None:
    _rain(
        buf,
        off,
        hdr.version,
        hdr.kind,
        hdr.flags,
        hdr.task_type,
        hdr.slice,
        hdr.client_id,
        hdr.request_id,
        hdr.worker_id,
        hdr.report,
        hdr.data,
        hdr.int_qdelay_ns,
        hdr.int_qlen,
    )


def switch_ingress_deparser(buf, hdr: Headers, ig_md: IngressMd) -> None:
    """Write the headers ingress may have changed back into `buf`, in place. The
    bridged header is not written into the frame: it goes to egress beside it
    (pipeline.py)."""
    if not hdr.eth_valid:
        return
    if not hdr.ipv4_valid:
        _eth(buf, 0, hdr.eth_dst, hdr.eth_src, hdr.ether_type)
        return
    _eth_ipv4(buf, 0, hdr.eth_dst, hdr.eth_src, hdr.ether_type, *_ipv4_fields(hdr))
    if hdr.rain_valid and ig_md.queue_op != QOP_NONE:
        # the Rain path parsed UDP whole; reject swaps its ports
        _udp_pack(buf, _UDP_OFF, hdr.udp_src_port, hdr.udp_dst_port, hdr.udp_length, hdr.udp_checksum)
        _emit_rain(buf, _RAIN_OFF, hdr)


def switch_egress_deparser(buf, n: int, hdr: Headers) -> bytearray:
    """A new frame: ethernet, ipv4, udp, rain, bth, reth (the valid ones), then the
    payload `buf[hdr.payload_off:n]`. The bridged header is dropped here."""
    out = bytearray()
    if hdr.eth_valid:
        out += ETH.pack(hdr.eth_dst, hdr.eth_src, hdr.ether_type)
    if hdr.ipv4_valid:
        out += IPV4.pack(*_ipv4_fields(hdr))
    if hdr.udp_valid:
        out += UDP.pack(hdr.udp_src_port, hdr.udp_dst_port, hdr.udp_length, hdr.udp_checksum)
    if hdr.rain_valid:
        rain = bytearray(RAIN.size)
        _emit_rain(rain, 0, hdr)
        out += rain
    if hdr.bth_valid:
        out += BTH.pack(
            hdr.bth_opcode,
            (hdr.bth_se << 7) | (hdr.bth_migreq << 6) | (hdr.bth_pad_count << 4) | hdr.bth_tver,
            hdr.bth_pkey,
            (hdr.bth_resv8 << 24) | hdr.bth_dst_qp,
            (hdr.bth_ack_req << 31) | (hdr.bth_resv7 << 24) | hdr.bth_psn,
        )
    if hdr.reth_valid:
        out += RETH.pack(hdr.reth_va_hi, hdr.reth_va_lo, hdr.reth_rkey, hdr.reth_dma_len)
    out += buf[hdr.payload_off : n]
    return out
