/* Parsers and deparsers. Only IPv4/UDP to RAIN_UDP_PORT carries a rain header;
 * everything else is forwarded by address. Truncated frames raise a parser error,
 * which ingress counts and drops (EV_PARSER_ERROR).
 *
 * The IPv4 checksum is updated incrementally: each parser subtracts the old checksum
 * and the fields a control may change (version/ihl/diffserv, total_len, ttl/protocol,
 * the addresses) and keeps the residual, the sum of everything else, options
 * included, which the parser never extracts; each deparser adds the fields back. A
 * header with options so keeps a valid checksum (a sum over the 20 fixed bytes only
 * would not). */
#ifndef _PARSERS_P4_
#define _PARSERS_P4_

parser SwitchIngressParser(packet_in pkt,
                           out headers_t hdr,
                           out ingress_md_t ig_md,
                           out ingress_intrinsic_metadata_t ig_intr_md) {
    Checksum() ipv4_checksum;
    state start {
        pkt.extract(ig_intr_md);
#ifndef PARSE_RESUBMIT
        pkt.advance(PORT_METADATA_SIZE);
#endif
        /* Fields read before any control writes them start defined. */
        ig_md.event = EV_NO_ROUTE;
        ig_md.queue_op = QOP_NONE;
        ig_md.bad_length = 0;
        ig_md.ipv4_residual = 0;
        ig_md.stamp_int = false;
        ig_md.mgid = 0;
#ifdef PARSE_RESUBMIT
        transition select(ig_intr_md.resubmit_flag) {
            1: parse_resubmit;
            default: parse_port_metadata;
        }
    }
    /* A resubmitted packet brings its resubmit header where port metadata would be
     * (only programs that resubmit define PARSE_RESUBMIT: Rain's parser stays as it was). */
    state parse_resubmit {
        pkt.extract(ig_md.resubmit);
        transition parse_ethernet;
    }
    state parse_port_metadata {
        pkt.advance(PORT_METADATA_SIZE);
        transition parse_ethernet;
    }
#else
        transition parse_ethernet;
    }
#endif
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        ipv4_checksum.subtract({hdr.ipv4.hdr_checksum, hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
                                hdr.ipv4.total_len, hdr.ipv4.ttl, hdr.ipv4.protocol,
                                hdr.ipv4.src_addr, hdr.ipv4.dst_addr});
        ipv4_checksum.subtract_all_and_deposit(ig_md.ipv4_residual);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            RAIN_UDP_PORT: parse_rain;
            default: accept;
        }
    }
    /* A large task's UDP length must lie in [LARGE_UDP_MIN, LARGE_UDP_MAX]: tested
     * here, in the parser's TCAM, as a range (the match-action pipeline would need
     * a subtraction and a gateway stage for it). */
    state parse_rain {
        pkt.extract(hdr.rain);
        transition select(hdr.rain.flags[0:0], hdr.udp.length) {
            (0, _): accept;
            (1, LARGE_UDP_MIN .. LARGE_UDP_MAX): accept;
            default: bad_large_length;
        }
    }
    state bad_large_length {
        ig_md.bad_length = 1;
        transition accept;
    }
}

control SwitchIngressDeparser(packet_out pkt,
                              inout headers_t hdr,
                              in ingress_md_t ig_md,
                              in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_checksum;
#ifdef PARSE_RESUBMIT
    Resubmit() resubmit;
#endif
    apply {
#ifdef PARSE_RESUBMIT
        if (ig_dprsr_md.resubmit_type == 1) {
            resubmit.emit(ig_md.resubmit);
        }
#endif
        hdr.ipv4.hdr_checksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
            hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr,
            ig_md.ipv4_residual});
        pkt.emit(hdr.bridged);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.rain);
    }
}

parser SwitchEgressParser(packet_in pkt,
                          out headers_t hdr,
                          out egress_md_t eg_md,
                          out egress_intrinsic_metadata_t eg_intr_md) {
    Checksum() ipv4_checksum;
    state start {
        pkt.extract(eg_intr_md);
        eg_md.offset = 0;
        eg_md.ipv4_residual = 0;
        pkt.extract(hdr.bridged);
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        ipv4_checksum.subtract({hdr.ipv4.hdr_checksum, hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
                                hdr.ipv4.total_len, hdr.ipv4.ttl, hdr.ipv4.protocol,
                                hdr.ipv4.src_addr, hdr.ipv4.dst_addr});
        ipv4_checksum.subtract_all_and_deposit(eg_md.ipv4_residual);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            RAIN_UDP_PORT: parse_rain;
            default: accept;
        }
    }
    state parse_rain {
        pkt.extract(hdr.rain);
        transition accept;
    }
}

control SwitchEgressDeparser(packet_out pkt,
                             inout headers_t hdr,
                             in egress_md_t eg_md,
                             in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        hdr.ipv4.hdr_checksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
            hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr,
            eg_md.ipv4_residual});
        /* The bridged header is not emitted: it lives only between the pipes. A
         * pre-written task leaves as Ethernet/IPv4/UDP/BTH/RETH/payload (rain_h is
         * invalid by then), the payload's last 4 bytes standing as the iCRC. */
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.rain);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.reth);
    }
}

#endif
