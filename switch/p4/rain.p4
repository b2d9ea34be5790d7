/* Rain (CoNEXT 2026) for Tofino 1 (TNA): the top file only includes and wires.
 *
 * Ingress:  Telemetry clock -> SliceMap -> BidirQueue -> RdmaEngine -> QueueEntries
 *           -> Dispatch -> Telemetry stamps -> Events; other traffic -> Forward.
 * Egress:   RdmaWriter (multicast replicas of pre-written tasks become RoCEv2 WRITEs).
 *
 * Registers exist once per pipe and a task must meet the tokens of its slice, so
 * every Rain port must sit in one pipe (the controller checks the dev_ports), as
 * in the paper's one-rack testbed. Stages (Tofino 1 has 12; the compiler's placement,
 * docs/p4-program.md): 0 checks and slice map, 1 config_slice, 2 balance, 3 head
 * and tail, 4 ring offset and owner, 5..10 the other entry arrays with the dispatch
 * and INT tables between them, events in 10: 11 stages, as Rain (CoNEXT 2026),
 * section 4. Every condition is one a gateway can take (at most 4 bytes + 12 bits
 * of PHV) and every action one stage's ALUs can do: what the compiler rejects, the
 * hardware cannot do. The emulator (switch/emulator) runs this pipeline with the same
 * table, action and register names; tests/unit/test_p4_contract.py checks them, and
 * tests/switch/test_p4_compile.py compiles this file when a Tofino compiler is at hand. */
#include <core.p4>
#include <tna.p4>

#include "sizes.p4"
#include "types.p4"
#include "headers.p4"
#include "parsers.p4"
#include "forward.p4"
#include "slice_map.p4"
#include "bidir_queue.p4"
#include "rdma_engine.p4"
#include "queue_entries.p4"
#include "dispatch.p4"
#include "telemetry.p4"
#include "events.p4"
#include "rdma_writer.p4"

control SwitchIngress(inout headers_t hdr,
                      inout ingress_md_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Forward() forward;
    SliceMap() slice_map;
    BidirQueue() bidir_queue;
    RdmaEngine() rdma_engine;
    QueueEntries() queue_entries;
    Dispatch() dispatch;
    Telemetry() telemetry;
    Events() events;

    apply {
        hdr.bridged.setValid();
        hdr.bridged.prewrite = 0;
        if (ig_prsr_md.parser_err != 0) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_PARSER_ERROR;
        } else if (hdr.rain.isValid() && (hdr.rain.kind == KIND_TASK || hdr.rain.kind == KIND_TOKEN)) {
            /* A token's slice indexes the registers: out of range it would alias
             * another slice's cells. A large task's length becomes a descriptor
             * and a WRITE length: out of range it would wrap or overrun a slot. */
            if (hdr.rain.version != RAIN_VERSION) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (hdr.rain.kind == KIND_TOKEN && hdr.rain.slice[15:SLICE_BITS] != 0) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else if (ig_md.bad_length == 1) {   /* the parser's length test */
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else {
                if (hdr.rain.kind == KIND_TASK) {
                    slice_map.apply(hdr, ig_md);
                } else {
                    ig_md.slice = hdr.rain.slice;
                }
                bidir_queue.apply(hdr, ig_md);
                rdma_engine.apply(hdr, ig_md, ig_tm_md);
                queue_entries.apply(hdr, ig_md, ig_prsr_md.global_tstamp[31:0]);
                dispatch.apply(hdr, ig_md, ig_intr_md, ig_dprsr_md, ig_tm_md);
                telemetry.apply(hdr, ig_md, ig_prsr_md.global_tstamp[31:0]);
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
    RdmaWriter() rdma_writer;

    apply {
        rdma_writer.apply(hdr, eg_md, eg_intr_md, eg_dprsr_md);
    }
}

Pipeline(SwitchIngressParser(),
         SwitchIngress(),
         SwitchIngressDeparser(),
         SwitchEgressParser(),
         SwitchEgress(),
         SwitchEgressDeparser()) pipe;

Switch(pipe) main;
