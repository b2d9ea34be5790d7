/* Pallas-SW for Tofino 1 (TNA): the switch side of Pallas ("Towards Optimal
 * Rack-Scale us-Level CPU Scheduling through In-Network Workload Shaping", USENIX ATC
 * 2025) as Rain (CoNEXT 2026), section 5.2, builds it as a baseline: tasks isolated
 * by type onto dedicated worker pools, a weighted round robin inside each pool, each
 * task pushed at once with no queue in the switch and no bound on a worker's queue.
 * The top file only includes and wires.
 *
 * Ingress:  PoolMap -> Wrr -> Push -> Events (tasks); other traffic -> Forward.
 * Egress:   nothing (every packet is a unicast that leaves as ingress made it).
 *
 * A pool's cursor is a register, so a pool's tasks must enter through one pipe: every
 * port that carries tasks sits in one pipe, as for Rain. Workers run in push mode and
 * send nothing to the switch but responses, which are forwarded by address like any
 * other traffic. Stages (the compiler's placement; Tofino 1 has 12): 0 checks and
 * map_pool, 1 config_pool, 2 the cursor, 3 the schedule, 4 select_worker or the
 * reject with the per-pool dispatch count, 5 events: 6 in all, each step needing the
 * one before. */
#include <core.p4>
#include <tna.p4>

#include "sizes.p4"
#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "forward.p4"
#include "events.p4"
#include "pallas/defs.p4"
#include "pallas/pool_map.p4"
#include "pallas/wrr.p4"
#include "pallas/push.p4"

control SwitchIngress(inout headers_t hdr,
                      inout ingress_md_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Forward() forward;
    PoolMap() pool_map;
    Wrr() wrr;
    Push() push;
    Events() events;

    apply {
        /* the shared parsers put a bridged header in front of every packet */
        hdr.bridged.setValid();
        hdr.bridged.prewrite = 0;
        if (ig_prsr_md.parser_err != 0) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_PARSER_ERROR;
        } else if (hdr.rain.isValid() && hdr.rain.kind == KIND_TASK) {
            /* The same tasks as Rain accepts: its version, and a large task's length
             * within the parser's range (tested there). */
            if (hdr.rain.version != RAIN_VERSION) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (ig_md.bad_length == 1) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else {
                pool_map.apply(hdr, ig_md);
                if (ig_md.event == EV_DISPATCH_DIRECT) {
                    wrr.apply(hdr, ig_md);
                }
                push.apply(hdr, ig_md, ig_intr_md, ig_tm_md);
            }
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
    apply { }
}

Pipeline(SwitchIngressParser(),
         SwitchIngress(),
         SwitchIngressDeparser(),
         SwitchEgressParser(),
         SwitchEgress(),
         SwitchEgressDeparser()) pipe;

Switch(pipe) main;
