/* Draconis-SW for Tofino 1 (TNA): the top file only includes and wires.
 *
 * Draconis (EuroSys 2024) as Rain (CoNEXT 2026) evaluates it, section 5.2: tasks wait
 * in one FIFO in the switch and idle workers pull them, JBSQ(1). Workers run
 * `rain-worker --mode pull`: one PULL at a time while idle.
 *
 * Ingress:  TASK -> TaskQueue (enqueue, or REJECT when full) -> QueueEntries (store);
 *           PULL -> TaskQueue (dequeue) -> QueueEntries (read) -> Dispatch: the PULL
 *           becomes the task's DISPATCH to the puller, or EMPTY;
 *           RESPONSE, FETCH, FETCH_REPLY and non-Rain traffic -> Forward (by IP);
 *           every other kind (the switch's own, Rain's TOKEN, REPORT, unknown) is
 *           dropped; every packet counts once in Events.
 * Egress:   nothing (the bridged header only keeps the shared parsers' layout).
 *
 * Stages (the compiler's placement): 0 checks, config_queue, forward; 1 waiting; 2 head
 * and tail; 3 owner, meta and the replies' address swaps; 4 client_addr, tstamp,
 * data7; 5 request, data6; 6..9 data5..data0, events in 9: 10 of Tofino 1's 12. The
 * twelve entry arrays are Rain's (queue_entries.p4, 128K entries) and take 7 stages,
 * as in Rain; the queue's state before them takes 3 (Rain's: 4, with its slice map).
 *
 * A large task (FLAG_LARGE) waits as its header only; the worker FETCHes the payload
 * from the client (FETCH_REPLY), one round trip more: forwarded by IP here. The
 * shared parser's length test of large tasks (bad_length) is Rain's ring-slot bound
 * and does not apply: no payload is stored or written here. */
#include <core.p4>
#include <tna.p4>

#include "sizes.p4"
#include "types.p4"
#include "draconis/consts.p4"
#include "headers.p4"
#include "parsers.p4"
#include "forward.p4"
#include "draconis/task_queue.p4"
#include "queue_entries.p4"
#include "draconis/dispatch.p4"
#include "events.p4"

control SwitchIngress(inout headers_t hdr,
                      inout ingress_md_t ig_md,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Forward() forward;
    TaskQueue() task_queue;
    QueueEntries() queue_entries;
    DraconisDispatch() dispatch;
    Events() events;

    apply {
        hdr.bridged.setValid();
        hdr.bridged.prewrite = 0;
        if (ig_prsr_md.parser_err != 0) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_PARSER_ERROR;
        } else if (hdr.rain.isValid() && (hdr.rain.kind == KIND_TASK || hdr.rain.kind == KIND_PULL)) {
            if (hdr.rain.version != RAIN_VERSION) {
                ig_dprsr_md.drop_ctl = 1;
                ig_md.event = EV_BAD_RAIN;
            } else {
                task_queue.apply(hdr, ig_md);
                queue_entries.apply(hdr, ig_md, ig_prsr_md.global_tstamp[31:0]);
                dispatch.apply(hdr, ig_md, ig_intr_md, ig_dprsr_md, ig_tm_md);
            }
        } else if (hdr.rain.isValid() && hdr.rain.kind != KIND_RESPONSE && hdr.rain.kind != KIND_FETCH
                   && hdr.rain.kind != KIND_FETCH_REPLY) {
            ig_dprsr_md.drop_ctl = 1;
            ig_md.event = EV_BAD_RAIN;
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
