/* Headers and metadata. rain_h is hosts/dpdk/include/rain_proto.h's struct rain_hdr
 * field for field (32 bytes); the 8 inline bytes are separate fields because each is
 * stored in its own register array (one byte per stage, paper section 4). */
#ifndef _HEADERS_P4_
#define _HEADERS_P4_

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header ipv4_h {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      diffserv;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

header rain_h {
    bit<8>      version;
    bit<8>      kind;
    bit<8>      flags;
    bit<8>      task_type;
    slice_t     slice;
    client_id_t client_id;
    bit<32>     request_id;
    worker_id_t worker_id;
    bit<16>     report;
    bit<8>      data0;   /* inline data, or with FLAG_DESC: slot (data0..3), length (data4..7) */
    bit<8>      data1;
    bit<8>      data2;
    bit<8>      data3;
    bit<8>      data4;
    bit<8>      data5;
    bit<8>      data6;
    bit<8>      data7;
    bit<32>     int_qdelay_ns;
    bit<32>     int_qlen;
}

/* RoCEv2 Base Transport Header and RDMA Extended Transport Header (IBTA; the
 * RoCEv2 WRITE test vector of docs/tofino.md decodes with these). */
header bth_h {
    bit<8>  opcode;
    bit<1>  se;
    bit<1>  migreq;
    bit<2>  pad_count;
    bit<4>  tver;
    bit<16> pkey;
    bit<8>  resv8;
    bit<24> dst_qp;
    bit<1>  ack_req;
    bit<7>  resv7;
    bit<24> psn;
}

header reth_h {
    bit<32> va_hi;   /* 64-bit VA split: Tofino adds 32-bit halves */
    bit<32> va_lo;
    bit<32> rkey;
    bit<32> dma_len;
}

/* Carried from ingress to egress in front of the packet (the egress parser takes it
 * off first): what the RDMA engine needs for each multicast replica. */
header bridged_md_h {
    bit<32> slot;       /* ring slot chosen for it (first: the stateful ALU that returns
                         * it writes a whole, aligned 32-bit container) */
    bit<32> desc_len;   /* payload bytes written into the slot */
    bit<7>  pad;
    bit<1>  prewrite;   /* this packet is a large task being pre-written */
}

/* What a resubmitted packet carries into its second ingress pass (TNA Resubmit: 64 bits
 * on Tofino 1, where port metadata would be); racksched.p4 resubmits a task to its winner. */
header resubmit_h {
    worker_id_t worker;
    bit<48>     pad;
}

struct headers_t {
    bridged_md_h bridged;
    ethernet_h   ethernet;
    ipv4_h       ipv4;
    udp_h        udp;
    rain_h       rain;
    bth_h        bth;
    reth_h       reth;
}

struct ingress_md_t {
    bit<5>      event;         /* EV_*: what happened to this packet (counted once) */
    bit<1>      bad_length;    /* a large task whose UDP length is out of range (parser) */
    bit<16>     ipv4_residual; /* IPv4 checksum: sum of what no control changes (parsers.p4) */
    slice_t     slice;
    bit<3>      queue_op;      /* QOP_* */
    int<32>     balance;       /* what the balance action returned (bidir_queue.p4) */
    int<32>     neg_cap;       /* -(capacity): a task finds room while balance > neg_cap,
                                * a token while balance + neg_cap < 0 */
    int<32>     neg_large_cap; /* a large task finds room while balance > neg_large_cap */
    bit<32>     region_first;  /* this slice's ring of entries: [first, last] */
    bit<32>     region_last;
    bit<32>     qidx;          /* entry touched by this packet */
    bit<32>     now;           /* global_tstamp[31:0], ns */
    bit<32>     entry_tstamp;  /* enqueue time of a dequeued task */
    bit<16>     entry_meta;    /* task_type ++ flags of a dequeued task */
    bit<16>     owner;         /* stored with an entry: a task's client_id, a token's worker_id */
    worker_id_t peer_worker;   /* a dequeued token's worker */
    bit<32>     last_slot;     /* slots per slice ring - 1 */
    bit<16>     mgid;          /* multicast group of the slice's workers; 0: no RDMA ring */
    bool        stamp_int;
    /* RackSched-SW (racksched.p4; Rain leaves these unused) */
    bit<2>      rs_op;         /* RS_*: what the packet does to the loads */
    bit<16>     rs_rand;       /* the draw that picks the two choices */
    worker_id_t rs_a;          /* first choice; the worker a REPORT or dispatch updates */
    worker_id_t rs_b;          /* second choice */
    bit<32>     rs_load_a;
    bit<32>     rs_load_b;
    bit<32>     rs_diff;       /* rs_load_b - rs_load_a: its sign bit picks the winner */
    resubmit_h  resubmit;
}

struct egress_md_t {
    bit<32> offset;   /* slot << RDMA_SLOT_SHIFT */
    bit<16> ipv4_residual;
}

#endif
