/* Forward: plain IPv4 delivery by destination address. Responses (worker ->
 * client), rejects and any non-Rain traffic take this path. */
#ifndef _FORWARD_P4_
#define _FORWARD_P4_

control Forward(inout headers_t hdr,
                inout ingress_md_t ig_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    /* The event is set in the actions: a condition on the table's hit would cost a
     * gateway and a stage after the table. */
    action set_egress(PortId_t port, mac_addr_t dmac) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        ig_md.event = EV_FORWARDED;
    }
    action drop() {
        ig_dprsr_md.drop_ctl = 1;
        ig_md.event = EV_NO_ROUTE;
    }
    table forward {
        key = { hdr.ipv4.dst_addr : exact; }
        actions = { set_egress; drop; }
        default_action = drop();
        size = FORWARD_ENTRIES;
    }
    apply {
        forward.apply();
    }
}

#endif
