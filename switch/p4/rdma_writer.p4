/* RdmaWriter (egress half of the RDMA engine): each multicast replica of a
 * pre-written task becomes one RoCEv2 RDMA WRITE ONLY to one worker. The PRE gives
 * every replica the rid of its node (= the worker id); tables keyed on it hold the
 * worker's MAC/IP, QPN, rkey and ring base, and a register its next PSN (returned
 * then incremented; the BTH keeps its low 24 bits). Build state and PSN are per
 * worker because each worker thread has its own QP and ring region (rain-worker
 * registers one QPN per worker id; the controller refuses shared QPNs): a worker's
 * PSN cell is its QP's. Rain (CoNEXT 2026) shares one QP per server among its
 * workers; that would need the PSN indexed by a QP id from build_write instead,
 * since all WRITEs on one QP take consecutive PSNs.
 * VA = ring base + slot << RDMA_SLOT_SHIFT; only the low 32 bits are added, so a
 * worker's ring must not cross a 4 GiB boundary (the controller checks).
 *
 * The iCRC is not computed: the client's 4 zero bytes stand in for it and the NICs
 * must not check it (Rain (CoNEXT 2026), section 3.2.2). It is a CRC32 over the
 * whole packet from IP on (TOS, TTL, checksums and BTH resv8 masked to ones) up to
 * the last payload byte, and it differs per replica (addresses, QPN, PSN and VA are
 * rewritten here). Tofino's Hash extern computes CRC32 only over fields in the PHV,
 * from one stage's input crossbar; a payload of up to 2 KB is never in the PHV (the
 * parser extracts headers; the PHV holds a few hundred bytes for everything) and the
 * deparser only sums 16-bit ones' complements. So it is feasible for a payload of a
 * few tens of bytes parsed into headers, at the cost of the stages the crossbar
 * needs; for the slot-sized payloads here it is not (docs/p4-program.md, iCRC). */
#ifndef _RDMA_WRITER_P4_
#define _RDMA_WRITER_P4_

control RdmaWriter(inout headers_t hdr,
                   inout egress_md_t eg_md,
                   in egress_intrinsic_metadata_t eg_intr_md,
                   inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Counter<bit<32>, worker_id_t>(MAX_WORKERS, CounterType_t.PACKETS_AND_BYTES) writes;

    Register<bit<32>, worker_id_t>(MAX_WORKERS, 0) psn;
    RegisterAction<bit<32>, worker_id_t, bit<32>>(psn) next_psn = {
        void apply(inout bit<32> value, out bit<32> rv) {
            rv = value;
            value = value + 1;
        }
    };

    /* tos: the DSCP the workers' NICs treat as lossless (PFC) RoCE, in the top six
     * bits; ECN Not-ECT (0): the switch is no DCQCN reaction point, so a CE mark would
     * only send CNPs to the switch's address (docs/p4-program.md, DSCP and ECN). */
    action make_write(mac_addr_t smac, mac_addr_t dmac, ipv4_addr_t sip, ipv4_addr_t dip, bit<8> tos,
                      bit<8> opcode, bit<24> qpn, bit<32> rkey, bit<32> va_hi, bit<32> va_lo) {
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.src_addr = sip;
        hdr.ipv4.dst_addr = dip;
        hdr.ipv4.diffserv = tos;
        hdr.ipv4.total_len = hdr.ipv4.total_len - (RAIN_HDR_BYTES - ROCE_HDR_BYTES);
        hdr.udp.length = hdr.udp.length - (RAIN_HDR_BYTES - ROCE_HDR_BYTES);
        hdr.udp.src_port = ROCE_SRC_PORT;
        hdr.udp.dst_port = ROCE_UDP_PORT;
        hdr.udp.checksum = 0;
        hdr.rain.setInvalid();
        hdr.bth.setValid();
        hdr.bth.opcode = opcode;
        hdr.bth.se = 0;
        hdr.bth.migreq = 1;
        hdr.bth.pad_count = 0;
        hdr.bth.tver = 0;
        hdr.bth.pkey = 0xffff;
        hdr.bth.resv8 = 0;
        hdr.bth.dst_qp = qpn;
        hdr.bth.ack_req = 0;
        hdr.bth.resv7 = 0;
        hdr.reth.setValid();
        hdr.reth.va_hi = va_hi;
        hdr.reth.va_lo = va_lo + eg_md.offset;   /* one add: action data + PHV */
        hdr.reth.rkey = rkey;
        hdr.reth.dma_len = hdr.bridged.desc_len;
    }
    /* A replica for a worker without RDMA state: drop it. */
    action skip_replica() {
        eg_dprsr_md.drop_ctl = 1;
    }
    table build_write {
        key = { eg_intr_md.egress_rid : exact; }
        actions = { make_write; skip_replica; }
        default_action = skip_replica();
        size = MAX_WORKERS;
    }

    apply {
        if (hdr.bridged.prewrite == 1) {
            eg_md.offset = hdr.bridged.slot << RDMA_SLOT_SHIFT;
            if (build_write.apply().hit) {
                hdr.bth.psn = (bit<24>)next_psn.execute(eg_intr_md.egress_rid);
                writes.count(eg_intr_md.egress_rid);
            }
        }
    }
}

#endif
