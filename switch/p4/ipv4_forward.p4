/* IPv4 forwarding for Tofino 1 (TNA): the switch of the server-side systems (Rakaia's
 * measured layer), where scheduling is inside the server and the network only carries
 * kernel TCP between the hosts. The top file only includes and wires.
 *
 * Ingress:  Forward (destination address -> port and MAC, TTL - 1) -> Events;
 *           a frame that is not IPv4, or that the parser rejects, is dropped and counted.
 * Egress:   nothing.
 *
 * It shares Rain's parsers, Forward and Events (the same table and counter names), so
 * the controller programs its routes as it does Rain's, and a Rain frame sent to it is
 * only forwarded. The emulator (switch/emulator/ipv4_forward.py) runs this pipeline. */
#include <core.p4>
#include <tna.p4>

#include "sizes.p4"
#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "forward.p4"
#include "events.p4"

control SwitchIngress(inout headers_t hdr,
                      inout ingress_md_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Forward() forward;
    Events() events;

    apply {
        hdr.bridged.setValid();   /* the shared egress parser takes it off first */
        hdr.bridged.prewrite = 0;
        if (ig_prsr_md.parser_err != 0) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_PARSER_ERROR;
        } else if (hdr.ipv4.isValid()) {
            forward.apply(hdr, ig_md, ig_dprsr_md, ig_tm_md);
        } else {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_NO_ROUTE;
        }
        events.apply(ig_md);
    }
}

control SwitchEgress(inout headers_t hdr,
                     inout egress_md_t eg_md,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                     inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                     inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    apply {
    }
}

Pipeline(SwitchIngressParser(),
         SwitchIngress(),
         SwitchIngressDeparser(),
         SwitchEgressParser(),
         SwitchEgress(),
         SwitchEgressDeparser()) pipe;

Switch(pipe) main;
