/* R2P2-SW for Tofino 1 (TNA): the Rain paper's R2P2 baseline (R2P2, USENIX ATC 2019),
 * JBSQ(n) in the switch by recirculation. The top file only includes and wires.
 *
 * Ingress:  TASK:   Config -> RoundRobin (the worker this pass looks at) -> Workers
 *                   -> Jbsq (depth < n: DISPATCH; else recirculate, or REJECT at the
 *                   pass bound) [-> Forward for a REJECT] -> Events
 *           REPORT: Config -> Workers -> Jbsq (set the worker's depth) -> Events
 *           other traffic -> Forward -> Events
 * Egress:   nothing (a recirculated task passes the recirculation port's egress).
 *
 * Workers run in report mode: a REPORT (report = queue depth) at start and after each
 * task. A task pass reads and advances the round-robin cursor, looks up that worker and
 * takes a slot of its depth if it is below n. Registers exist once per pipe, so tasks
 * recirculate through their own pipe's port and the controller puts every worker and
 * client port in one pipe, as Rain does. Each pass is one event (events.p4), so the
 * controller reads dispatches, recirculations, reports and rejects there. */
#include <core.p4>
#include <tna.p4>

#include "sizes.p4"
#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "forward.p4"
#include "events.p4"
#include "r2p2/types.p4"
#include "r2p2/config.p4"
#include "r2p2/round_robin.p4"
#include "r2p2/workers.p4"
#include "r2p2/jbsq.p4"

control SwitchIngress(inout headers_t hdr,
                      inout ingress_md_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Forward() forward;
    Config() config;
    RoundRobin() round_robin;
    Workers() workers;
    Jbsq() jbsq;
    Events() events;
    r2p2_md_t r2;

    apply {
        hdr.bridged.setValid();   /* the shared egress parser takes it off first */
        hdr.bridged.prewrite = 0;
        r2.forward = 0;
        r2.reject = 0;
        r2.known = 0;
        if (ig_prsr_md.parser_err != 0) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_PARSER_ERROR;
        } else if (hdr.rain.isValid() && (hdr.rain.kind == 0 || hdr.rain.kind > R2P2_KIND_MAX)) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_BAD_RAIN;
        } else if (hdr.rain.isValid() && (hdr.rain.kind == KIND_TASK || hdr.rain.kind == R2P2_KIND_REPORT)) {
            /* A REPORT's worker_id indexes the depth register: out of range it would
             * alias another worker's cell. Hosts never set RECIRC: a task that
             * arrives with it (not from recirculation) would count false passes. */
            if (hdr.rain.version != RAIN_VERSION) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (hdr.rain.kind == R2P2_KIND_REPORT && hdr.rain.worker_id[15:R2P2_WORKER_BITS] != 0) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (ig_md.bad_length == 1) {   /* the parser's length test */
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (ig_intr_md.ingress_port[6:0] != R2P2_RECIRC_PORT && hdr.rain.flags[5:5] == 1) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else {
                if (hdr.rain.kind == KIND_TASK && ig_intr_md.ingress_port[6:0] != R2P2_RECIRC_PORT) {
                    hdr.rain.report = 0;   /* passes taken: none yet */
                }
                config.apply(hdr, r2);
                if (hdr.rain.kind == KIND_TASK) {
                    round_robin.apply(hdr, r2);
                }
                workers.apply(hdr, r2);
                jbsq.apply(hdr, ig_md, r2, ig_intr_md, ig_dprsr_md, ig_tm_md);
            }
        } else if (hdr.ipv4.isValid()) {
            r2.forward = 1;
        } else {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_NO_ROUTE;
        }
        if (r2.forward == 1) {
            forward.apply(hdr, ig_md, ig_dprsr_md, ig_tm_md);   /* its actions set the event */
            if (r2.reject == 1 && ig_md.event == EV_FORWARDED) {
                ig_md.event = EV_R2P2_REJECTED;
            }
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
