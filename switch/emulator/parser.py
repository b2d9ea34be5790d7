"""Parsers (switch/p4/parsers.p4): SwitchIngressParser and SwitchEgressParser.

Ethernet -> IPv4 (only with ihl 5, no fragment offset, protocol UDP, the parse goes on)
-> UDP -> rain (only to RAIN_UDP_PORT). A header that runs past the end of the frame
is a parser error (`parser_err`), which ingress counts as EV_PARSER_ERROR and drops.
Fields go into a reused `Headers` (see there for which); `payload_off` is where the
unparsed bytes start. Headers sit at fixed offsets: ethernet 0, ipv4 14, udp 34, rain 42.
"""

from __future__ import annotations

import struct

from .headers import (
    ETH_BYTES,
    ETHERTYPE_IPV4,
    EV_NO_ROUTE,
    FLAG_LARGE,
    IP_PROTO_UDP,
    IPV4_BYTES,
    LARGE_UDP_MAX,
    LARGE_UDP_MIN,
    PARSER_ERR_NONE,
    PARSER_ERR_TRUNCATED,
    RAIN_HDR_BYTES,
    RAIN_UDP_PORT,
    UDP_HDR_BYTES,
    Headers,
    IngressMd,
)

ETH = struct.Struct("!6s6sH")
IPV4 = struct.Struct("!BBHHHBBHII")
ETH_IPV4 = struct.Struct("!6s6sHBBHHHBBHII")  # both in one call when the frame is long enough
UDP = struct.Struct("!HHHH")
RAIN = struct.Struct("!BBBBHHIHH8sII")

_eth = ETH.unpack_from
_eth_ipv4 = ETH_IPV4.unpack_from
_udp = UDP.unpack_from
_rain = RAIN.unpack_from
_UDP_OFF = ETH_BYTES + IPV4_BYTES
_RAIN_OFF = _UDP_OFF + UDP_HDR_BYTES


def _extract(buf, n: int, hdr: Headers, full_udp: bool) -> int:
    """The parse states from parse_ethernet on (shared by both parsers); returns parser_err.

    Ingress reads a UDP header's fields only on the Rain path (rdma_engine reads its
    length), never writes them, and egress parses the frame again: so on the forwarding
    path the ingress parser takes only the destination port (its select) and leaves the
    other fields in the frame (`full_udp` False), which no one can tell from extracting them."""
    hdr.ipv4_valid = hdr.udp_valid = hdr.rain_valid = False  # (bth and reth: egress builds them; see below)
    # state parse_ethernet
    if n < ETH_BYTES:
        hdr.eth_valid = False
        hdr.payload_off = 0
        return PARSER_ERR_TRUNCATED
    if n < _UDP_OFF:  # too short for an IPv4 header behind the Ethernet one
        hdr.eth_dst, hdr.eth_src, ether_type = _eth(buf, 0)
        hdr.ether_type = ether_type
        hdr.eth_valid = True
        hdr.payload_off = ETH_BYTES
        return PARSER_ERR_TRUNCATED if ether_type == ETHERTYPE_IPV4 else PARSER_ERR_NONE
    hdr.ipv4 = t = _eth_ipv4(buf, 0)
    (
        hdr.eth_dst,
        hdr.eth_src,
        ether_type,
        vihl,
        tos,
        total_len,
        _ident,
        flags_frag,
        ttl,
        protocol,
        _csum,
        src,
        dst,
    ) = t
    hdr.ether_type = ether_type
    hdr.eth_valid = True
    if ether_type != ETHERTYPE_IPV4:
        hdr.payload_off = ETH_BYTES
        return PARSER_ERR_NONE
    # state parse_ipv4
    hdr.ip_tos, hdr.ip_total_len, hdr.ip_ttl, hdr.ip_src, hdr.ip_dst = tos, total_len, ttl, src, dst
    hdr.ipv4_valid = True
    # select(ihl, frag_offset, protocol): (5, 0, IP_PROTO_UDP) -> parse_udp
    if vihl & 0x0F != 5 or flags_frag & 0x1FFF or protocol != IP_PROTO_UDP:
        hdr.payload_off = _UDP_OFF
        return PARSER_ERR_NONE
    # state parse_udp
    if n < _RAIN_OFF:
        hdr.payload_off = _UDP_OFF
        return PARSER_ERR_TRUNCATED
    hdr.udp_valid = True
    if full_udp:
        hdr.udp_src_port, dport, hdr.udp_length, hdr.udp_checksum = _udp(buf, _UDP_OFF)
    else:
        dport = buf[_UDP_OFF + 2] << 8 | buf[_UDP_OFF + 3]
    hdr.udp_dst_port = dport
    if dport != RAIN_UDP_PORT:
        hdr.payload_off = _RAIN_OFF
        return PARSER_ERR_NONE
    if not full_udp:
        hdr.udp_src_port, _dport, hdr.udp_length, hdr.udp_checksum = _udp(buf, _UDP_OFF)
    # state parse_rain
    if n < _RAIN_OFF + RAIN_HDR_BYTES:
        hdr.payload_off = _RAIN_OFF
        return PARSER_ERR_TRUNCATED
    (
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
    ) = _rain(buf, _RAIN_OFF)
    hdr.rain_valid = True
    hdr.payload_off = _RAIN_OFF + RAIN_HDR_BYTES
    return PARSER_ERR_NONE


def _bad_large_length(hdr: Headers) -> int:
    """parse_rain's select(flags[0:0], udp.length): a large task whose UDP length is
    outside [LARGE_UDP_MIN, LARGE_UDP_MAX] goes through state bad_large_length."""
    return int(bool(hdr.flags & FLAG_LARGE) and not LARGE_UDP_MIN <= hdr.udp_length <= LARGE_UDP_MAX)


def switch_ingress_parser(buf, n: int, hdr: Headers, ig_md: IngressMd, ingress_port: int) -> None:
    """SwitchIngressParser: the frame's first `n` bytes of `buf` into `hdr`; intrinsics into `ig_md`."""
    # state start: ig_intr_md, then the fields the program reads before writing
    ig_md.ingress_port = ingress_port
    ig_md.drop_ctl = 0
    ig_md.ucast_egress_port = None
    ig_md.mcast_grp_a = 0
    ig_md.event = EV_NO_ROUTE
    ig_md.parser_err = _extract(buf, n, hdr, False)
    if hdr.rain_valid:
        ig_md.reset_rain()
        ig_md.bad_length = _bad_large_length(hdr)


def switch_egress_parser(buf, n: int, hdr: Headers, prewrite: int, slot: int, desc_len: int) -> int:
    """SwitchEgressParser: the bridged header (handed over beside the frame) then the
    frame's headers; returns parser_err (always none for a frame ingress deparsed)."""
    hdr.bth_valid = hdr.reth_valid = False
    hdr.bridged_valid = True
    hdr.bridged_prewrite = prewrite
    hdr.bridged_slot = slot
    hdr.bridged_desc_len = desc_len
    return _extract(buf, n, hdr, True)
