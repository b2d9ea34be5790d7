/* SPDX-License-Identifier: Apache-2.0
 *
 * rain-client: an open-loop load generator for Rain and its baselines.
 *
 * Each load lcore runs its own arrival schedule (TSC-driven, never reply-driven),
 * owns its client_id (host << 8 | lcore index), its TX/RX queue, its table of
 * outstanding requests and its histograms; nothing is shared on the hot path except
 * the hand-off rings that bring a reply to the lcore that owns its client_id (RSS or
 * af_packet fan-out may deliver it to another queue). The main lcore merges at the end.
 */
#ifndef RAIN_CLIENT_H
#define RAIN_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <rte_ring.h>

#include "hdr.h"
#include "rain_pkt.h"
#include "rain_port.h"
#include "workload.h"

#define RC_MAX_CLASSES  16
#define RC_MAX_LCORES   64
#define RC_MAX_SEGMENTS 64
#define RC_NAME_LEN     32
#define RC_TXB          64   /* per-lcore TX buffer (mbufs not yet accepted by the PMD) */
#define RC_BURST        32
/* Largest large-task payload: header + payload + iCRC trailer within a 1500-byte MTU. */
#define RC_MAX_PAYLOAD  (1500u - 20u - 8u - RAIN_HDR_LEN - ROCE_ICRC_LEN)
/* A request_id is the point's epoch (--epoch, its top 8 bits) and a sequence number
 * per lcore (the low 24): an answer that arrives from another point (one the switch or
 * a worker still held when that point ended) carries another epoch, and is counted and
 * dropped instead of passing for this point's request of the same sequence number. */
#define RC_EPOCH_SHIFT  24
#define RC_SEQ_MASK     ((1u << RC_EPOCH_SHIFT) - 1)

/* One request class of the mix (--class). */
struct rc_class {
	char name[RC_NAME_LEN];
	double weight;
	uint8_t task_type;
	struct service svc;
	uint32_t payload;        /* 8: inline; else bytes of a large task (slot header included) */
};

/* A piece of the rate schedule: from `t_s` seconds after start, `rps` in total, drawn
 * from the classes in `cls_mask` (bit c = class c; all of them when the piece names
 * none) with their --class weights. */
struct rc_segment {
	double t_s;
	double rps;
	uint32_t cls_mask;
	char cls_names[RC_MAX_CLASSES * RC_NAME_LEN]; /* as given, resolved once every --class is read */
};

struct rc_config {
	uint16_t port_id;
	uint8_t client_host;
	struct rain_addr src, dst;
	const struct arrival_ops *arrival;
	struct rc_segment seg[RC_MAX_SEGMENTS];
	unsigned nseg;
	struct rc_class cls[RC_MAX_CLASSES];
	unsigned ncls;
	double large_fraction;
	uint32_t large_bytes;
	double dilation;
	double warmup_s, duration_s;
	uint32_t max_outstanding;  /* whole client; 0 = only the table size bounds it */
	uint64_t timeout_us;
	bool resubmit;
	bool tx_only;              /* generator benchmarks: never read replies */
	bool wait_start;           /* after "ready", wait for SIGUSR1 before the schedule starts */
	uint8_t epoch;             /* the point's identity, in every request_id (RC_EPOCH_SHIFT) */
	int realtime;              /* SCHED_FIFO priority of the load lcores while the load runs (0: none) */
	uint64_t seed;
	struct rain_idle idle;
	const char *out_dir;       /* NULL: summary on stdout, no histogram logs */
	const char *trace;         /* CSV of every first send: intended and actual times */
};

/* Counters of one class, for the requests scheduled inside the measurement window. */
struct rc_counters {
	uint64_t offered;          /* scheduled in the window */
	uint64_t sent;             /* of those, sent at least once */
	uint64_t sent_in_window;   /* first sends whose actual send time fell in the window */
	uint64_t received;         /* answered by a RESPONSE (before their timeout) */
	uint64_t failed;           /* RESPONSE with RAIN_F_FAILED (worker refused it) */
	uint64_t timed_out;        /* no reply within the timeout (after the resubmission, if any) */
	uint64_t rejected;         /* REJECT events from the switch */
	uint64_t resubmitted;
	uint64_t late_reply;       /* a reply that came after its request timed out */
	uint64_t lost;             /* still outstanding when the run ended */
	uint64_t not_sent;         /* still waiting for admission when the run ended, or backlog full */
	uint64_t waited;           /* had to wait for admission (--max-outstanding) */
	uint64_t late_sends;       /* sent later than the lateness threshold (not counting admission waits) */
	uint64_t max_lag_tsc;      /* largest send - intended among those (reported in ns) */
	uint64_t large;            /* sent as large tasks */
	uint64_t service_ns_sum;   /* sum of the service times offered (kv classes: answered) */
	uint64_t service_n;        /* how many service times the sum holds (mean = sum / n) */
	uint64_t keys_sum;         /* keys-exp classes: sum of key counts offered */
};

/* Whole-run counters of one lcore (all phases, all classes). */
struct rc_run {
	uint64_t tx_frames;        /* every frame accepted by the PMD, warm-up and resubmissions included */
	uint64_t rx_frames;
	uint64_t tx_retries;       /* bursts the PMD did not take at once */
	uint64_t mbuf_failed;      /* no mbuf: the send is retried later */
	uint64_t handoff_out;      /* replies handed to the lcore owning their client_id */
	uint64_t handoff_full;
	uint64_t unknown_reply;    /* no such request: its table entry reused by a later one (stale) */
	uint64_t dup_reply;        /* a second answer to a request already answered */
	uint64_t warmup_late_reply; /* an answer after its warm-up request timed out (not measured) */
	uint64_t other_point;      /* answers (and FETCHes) for another point's request: another epoch */
	uint64_t kv_no_result;     /* a kv request answered without its result (counted failed) */
	uint64_t foreign;          /* replies for another client host, or an lcore that does not exist */
	uint64_t unexpected_kind;  /* valid Rain frames that are not RESPONSE/REJECT/FETCH */
	uint64_t fetches;          /* FETCHes answered with the request's payload (FETCH_REPLY) */
	uint64_t fetch_unknown;    /* FETCHes for no outstanding large request: ignored */
	uint64_t fetch_dropped;    /* FETCHes not answered: no mbuf or TX room */
	uint64_t max_outstanding_seen;
	uint64_t drops[RAIN_DROP_MAX];
};

/* An outstanding request, indexed by request_id & mask. */
enum rc_state { RQ_FREE = 0, RQ_SENT, RQ_RESENT, RQ_DONE, RQ_TIMEDOUT };
#define RQ_F_MEASURED    0x01
#define RQ_F_LARGE       0x02
#define RQ_F_RESUBMITTED 0x04

struct rc_req {
	uint32_t id;
	uint8_t cls;
	uint8_t state;
	uint8_t flags;
	uint8_t pad;
	uint64_t intended;   /* TSC */
	uint64_t sent;       /* TSC of the last (re)send: the timeout runs from it */
	uint64_t service_ns;
};

/* A request that waits for admission: what it will be, and when it should have left. */
struct rc_wait {
	uint64_t intended;
	uint64_t service_ns;
	uint8_t cls;
	uint8_t large;
	uint8_t measured;
};

/* One first send, for --trace (TSC values), and what came of it: the trace is the
 * request's whole story, so a model can replay the very same draws. */
struct rc_trace {
	uint32_t id;
	uint8_t cls;
	uint8_t large; /* sent large (a payload beyond the inline bytes) */
	uint64_t intended;
	uint64_t sent;
	uint64_t service_ns; /* what the request asked the worker for (kv classes: what the worker
			      * said it took; 0 until answered) */
	int64_t latency_ns;  /* intended send to answer; -1: no answer (yet), failed or rejected */
};

/* A prebuilt frame head (Ethernet/IPv4/UDP + rain_hdr) for one class and size. */
struct rc_tmpl {
	uint8_t bytes[RAIN_FRAME_MIN];
	uint32_t l4_len;
	uint32_t payload;    /* bytes after the rain_hdr (large: slot payload + iCRC trailer) */
};

struct rc_lcore {
	/* identity */
	unsigned idx;
	unsigned lcore_id;
	uint16_t queue;
	uint16_t client_id;
	struct rte_mempool *mp;
	struct rte_ring *handoff;   /* replies for this lcore received by others */
	struct rng rng;
	struct rain_idle idle;
	struct rain_rt rt;

	/* the schedule (doubles: TSC cycles since t0) */
	double next_rel;                       /* the next arrival */
	double seg_start, seg_off;             /* the current piece's start, next_rel's offset in it */
	uint64_t k;                            /* arrivals drawn in the current piece */
	double phase;                          /* idx / nlcores: staggers constant arrivals */
	unsigned seg;
	bool gen_done;
	double seg_end[RC_MAX_SEGMENTS];       /* cycles since t0; INFINITY for the last */
	double seg_lim[RC_MAX_SEGMENTS];       /* min(seg_end, end of generation), a hair early */
	double end_rel;                        /* end of generation (te), cycles since t0 */
	double mean_gap[RC_MAX_SEGMENTS];      /* cycles between this lcore's arrivals; 0: rate 0 */
	uint64_t late_thresh[RC_MAX_SEGMENTS]; /* cycles */

	/* outstanding requests */
	struct rc_req *tab;
	uint32_t mask;
	uint32_t next_id, tmo_id;
	uint32_t outstanding, cap;
	uint32_t *rs;               /* resubmitted ids in resend order (their deadlines are monotonic) */
	uint32_t rs_head, rs_tail;

	/* admission FIFO */
	struct rc_wait *wq;
	uint32_t wq_mask, wq_head, wq_tail;

	struct rte_mbuf *txb[RC_TXB];
	unsigned ntx;
	struct rte_mbuf *stash[RC_BURST]; /* allocated in bulk: one mempool call per burst */
	unsigned nstash;

	struct rc_tmpl tmpl_inline[RC_MAX_CLASSES];
	struct rc_tmpl tmpl_large[RC_MAX_CLASSES];

	struct rc_counters cnt[RC_MAX_CLASSES];
	struct rc_run run;
	struct rc_trace *trace;
	uint32_t ntrace, trace_cap;
	uint64_t trace_dropped;
	/* [class][interval]: latency (ns) and slowdown (x1000) of measured requests,
	 * by the second of the window in which they were scheduled */
	struct hdr_hist *lat[RC_MAX_CLASSES];
	struct hdr_hist *sd[RC_MAX_CLASSES];
} __rte_cache_aligned;

/* What every lcore shares, read-only once launched (except `quit`). */
struct rc_shared {
	const struct rc_config *cfg;
	unsigned nlcores;
	uint64_t hz;
	uint64_t t0, tw, te, tdrain;   /* start, window start, window end, drain deadline (TSC) */
	uint64_t timeout_tsc;
	unsigned nint;                 /* intervals in the window */
	double cls_cdf[RC_MAX_SEGMENTS][RC_MAX_CLASSES]; /* per schedule piece */
	struct rc_lcore *lc[RC_MAX_LCORES];
	unsigned nfinished;            /* lcores done with their own requests (atomic) */
	volatile int quit;
};

extern struct rc_shared rc;

/* args.c */
int rc_parse_args(int argc, char **argv, struct rc_config *cfg); /* 0, or exit status 2 after a message */
void rc_usage(FILE *f, const char *prog);

/* lcore.c */
void rc_lcore_setup(struct rc_lcore *lc, unsigned idx, unsigned lcore_id, struct rte_mempool *mp);
int rc_lcore_main(void *arg);

/* report.c */
int rc_write_results(const struct rc_config *cfg, bool partial, uint64_t start_unix_ns, uint64_t window_unix_ns,
		     double elapsed_s);

#endif /* RAIN_CLIENT_H */
