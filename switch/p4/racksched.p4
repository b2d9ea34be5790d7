/* RackSched-SW for Tofino 1 (TNA): the switch half of RackSched ("RackSched: A
 * Microsecond-Scale Scheduler for Rack-Scale Computers", OSDI 2020) as Rain (CoNEXT
 * 2026) evaluates it: power-of-2 choices over the loads workers report, tasks pushed
 * to the less loaded choice with no bound on worker queues. The top file only includes
 * and wires.
 *
 * Ingress:  a TASK's first pass: Choose (two distinct workers at random) -> Loads (read
 *           both, resubmit to the less loaded); its second pass: Choose (the winner) ->
 *           Dispatch (DISPATCH to it) -> Loads (+1); a REPORT: Choose -> Dispatch (is the
 *           worker known?) -> Loads (set); other traffic -> Forward; Events counts each
 *           pass of each packet once.
 * Egress:   nothing (the shared egress parser and deparser pass packets through).
 *
 * Registers exist once per pipe, so every worker and client port must sit in one pipe,
 * as for Rain. Only k = 2 choices: a pass reads each load copy once, so k choices
 * would need k copies, and the winner's +1 already takes a second (resubmitted) pass.
 * Stages (the compiler's placement): 0 checks and the draw, 1-2 pick (4096 ranges in
 * TCAM), 3-4 select_worker, 5 load_a and load_b, 6 the difference, 7 the resubmit and
 * events: 8 of Tofino 1's 12. */
#include <core.p4>
#include <tna.p4>

#define PARSE_RESUBMIT

#include "sizes.p4"
#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "forward.p4"
#include "events.p4"
#include "racksched/constants.p4"
#include "racksched/choose.p4"
#include "racksched/dispatch.p4"
#include "racksched/loads.p4"

control SwitchIngress(inout headers_t hdr,
                      inout ingress_md_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Forward() forward;
    Choose() choose;
    RackschedDispatch() dispatch;
    Loads() loads;
    Events() events;

    apply {
        hdr.bridged.setValid();
        hdr.bridged.prewrite = 0;
        ig_md.rs_op = RS_NONE;
        if (ig_prsr_md.parser_err != 0) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_PARSER_ERROR;
        } else if (hdr.rain.isValid() && (hdr.rain.kind == KIND_TASK || hdr.rain.kind == KIND_REPORT)) {
            /* A REPORT's worker id indexes the loads: out of range it would alias
             * another worker's cells. */
            if (hdr.rain.version != RAIN_VERSION) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (hdr.rain.kind == KIND_REPORT && hdr.rain.worker_id[15:10] != 0) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else {
                choose.apply(hdr, ig_md, ig_intr_md, ig_dprsr_md);
                dispatch.apply(hdr, ig_md, ig_dprsr_md, ig_tm_md);
                loads.apply(hdr, ig_md, ig_dprsr_md);
            }
        } else if (hdr.ipv4.isValid()) {
            forward.apply(hdr, ig_md, ig_dprsr_md, ig_tm_md);
            /* no kind of the protocol: dropped, whatever its address */
            if (hdr.rain.isValid() && (hdr.rain.kind == 0 || hdr.rain.kind > KIND_MAX)) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            }
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
