/* SPDX-License-Identifier: Apache-2.0
 *
 * rain-worker: the server side of Rain (paper 3.2, 3.3) and of its baselines.
 *
 * Threads (data-plane loops), each on an EAL lcore when there are enough of them,
 * otherwise on a pthread registered with EAL that shares the main lcore's CPUs:
 *   - one RX/TX loop: receives frames, applies emulated RoCEv2 WRITEs to the ring,
 *     hands DISPATCHes to the FIFO (rte_ring, SP/SC) of the thread named by
 *     rain_hdr.worker_id, and drains the shared TX ring (MP/SC) onto the port;
 *   - N worker threads ("workers" in the paper's sense): run their FIFO's tasks to
 *     completion and queue responses and tokens on the TX ring.
 * With --dispatcher (RackSched's second layer) the RX loop is the server's dispatcher:
 * every DISPATCH goes to one shared FIFO (SP/MC) that idle threads take from, one task
 * at a time, so the server serves its tasks first come, first served.
 * The main thread only waits for signals and writes the statistics.
 *
 * Three variants are chosen at parse time through function-pointer tables:
 *   rw_mode_ops    scheduling behaviour (rain tokens, push, report, pull)
 *   rw_handler_ops what running a task means (spin, sleep, echo)
 *   rw_rdma_ops    how the RDMA ring is filled (emulated RoCEv2, or the NIC via ibverbs)
 */
#ifndef RAIN_WORKER_H
#define RAIN_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_atomic.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "rain_ctl.h"
#include "rain_pkt.h"
#include "rain_port.h"
#include "rain_kv.h"
#include "rain_proto.h"

#define RW_MAX_THREADS  RAIN_CTL_MAX_WORKERS
#define RW_RX_BURST     32
#define RW_TASK_BURST   8
#define RW_RESULT_MAX   1024 /* bytes a handler may return after the response header */
#define RW_KV_BENCH_OPTS   8   /* --kv-bench options */
#define RW_KV_BENCH_POINTS 128 /* (op, count) points over all of them */

/* Counters with one writer and concurrent readers (stats, agent): relaxed atomics
 * keep them tear-free without a locked instruction. */
#define RW_LOAD(x)     __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define RW_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define RW_ADD(x, v)   RW_STORE(x, (x) + (v))
#define RW_INC(x)      RW_ADD(x, 1)

struct rw_ctx;
struct rw_thread;

/* A task as a handler sees it. */
struct rw_task {
	const struct rain_hdr *rh;
	uint64_t service_ns;    /* synthetic workloads: inline data, or the slot header's arg */
	const uint8_t *payload; /* large tasks: bytes after the rain_slot_hdr (frame or ring) */
	uint32_t payload_len;
	uint8_t task_type;
};

/* Where a handler may put a result; copied after the response header. */
struct rw_result {
	uint8_t *buf;
	uint32_t cap;
	uint32_t len;
};

struct rw_handler_ops {
	const char *name;
	int (*init)(struct rw_ctx *w); /* optional, at start-up; < 0 fails start-up */
	/* 0: done; otherwise the task failed (answered RAIN_F_FAILED). Never aborts. */
	int (*run)(struct rw_thread *t, const struct rw_task *task, struct rw_result *out);
};

struct rw_mode_ops {
	const char *name;
	uint32_t rx_kinds;                     /* (1u << kind) the RX loop hands to threads */
	/* a header-only RAIN_F_LARGE DISPATCH (the payload stayed with the client, Draconis)
	 * is run after FETCHing its payload; without this the RX loop drops it as truncated */
	bool fetch;
	void (*start)(struct rw_thread *t);    /* once, when the thread starts */
	void (*poll)(struct rw_thread *t);     /* every loop iteration, before polling the FIFO */
	void (*done)(struct rw_thread *t);     /* after a task was answered */
	/* a non-DISPATCH message routed to this thread (e.g. RAIN_EMPTY); consumes m */
	void (*msg)(struct rw_thread *t, struct rte_mbuf *m, const struct rain_hdr *rh);
};

/* The RDMA ring: one allocation per server, thread i owns region i (rdma.c). */
struct rw_ring {
	uint8_t *base;
	uint64_t size;        /* threads * region_size */
	uint64_t map_size;    /* size rounded up to pages */
	uint64_t region_size; /* slots * slot_size */
	uint32_t slots;
	uint32_t slot_size;   /* a power of two */
	uint32_t rkey;        /* emulated: --rkey; ibverbs: the MR's */
	uint32_t qpn_base;    /* emulated: QPN of thread 0 */
	uint32_t qpn[RW_MAX_THREADS]; /* QP of thread i (emulated: qpn_base + i; ibverbs: the NIC's) */
	uint32_t psn;         /* initial PSN of every QP */
	/* ibverbs: where the QPs live, for the registration (device[0] == 0: emulated) */
	char device[64];
	uint8_t port;
	int gid_index;
	char gid[48];
	uint32_t mtu;         /* path MTU in bytes */
	/* ibverbs: the NIC's count of RoCE packets it dropped for a bad iCRC when the
	 * worker started (hw_counters/rx_icrc_encapsulated), if the driver exposes it */
	bool nic_icrc_counter;
	uint64_t nic_icrc_base;
};

/* Emulated QP receive state (RX loop); reset_req is bumped by the owning thread. */
struct rw_qp {
	uint32_t expected_psn;
	uint32_t reset_seen;
	uint32_t reset_req;
} __rte_cache_aligned;

struct rw_rdma_ops {
	const char *name;
	int (*init)(struct rw_ctx *w); /* allocate/register the ring, set up QPs */
	/* Apply one RoCEv2 datagram received on the port (emulation); NULL when the
	 * NIC applies WRITEs itself (ibverbs), then RoCE frames never reach us. */
	enum rain_drop (*rx)(struct rw_ctx *w, const struct rain_view *v);
	/* Re-registration (enabled 0 -> 1, paper 6.1): the QP starts again at --psn.
	 * Called by the owning thread; < 0: the QP is unusable (the thread stops its tokens). */
	int (*reset_qp)(struct rw_ctx *w, uint32_t thread);
	void (*fini)(struct rw_ctx *w);
};

enum rw_qp_type { RW_QP_UC, RW_QP_RC };

struct rw_thread {
	/* read-mostly */
	struct rw_ctx *w;
	uint32_t idx;
	uint16_t worker_id;
	struct rte_ring *fifo;          /* RX loop -> this thread, SP/SC */
	struct rain_ctl_worker *ctl;    /* knobs, stats, samples in the control block */
	uint8_t *region;                /* this thread's slice of the RDMA ring */
	uint32_t qpn;
	char where[32];                 /* "lcore 2" or "pthread (lcore 5)", for logs */

	/* written by the RX loop (and parked by this thread) */
	uint64_t rx_dispatched __rte_cache_aligned; /* DISPATCHes put in the FIFO */
	uint32_t parked;                            /* futex: 1 while this thread sleeps for work */
	uint64_t wakeups;                           /* futex wakes the RX loop issued */
	uint64_t rx_lost;                           /* DISPATCHes that found the FIFO full */
	uint64_t rx_other_slice;                    /* DISPATCHes (kept) of a slice the thread has left */

	/* written by this thread only */
	uint64_t tokens_sent __rte_cache_aligned;
	uint64_t tokens_forgotten; /* tokens dropped by a re-registration (enable 0 -> 1) */
	uint64_t desc_fetches;     /* descriptors of a slot never received, fetched from their client */
	uint64_t kv_bad;           /* --handler rocksdb: malformed requests, answered failed */
	uint64_t qp_resets;        /* re-registrations that reset this thread's QP */
	uint32_t qp_failed;        /* the last reset left the QP unusable: no tokens (6.1) */
	uint64_t finished;         /* DISPATCHes answered (ok or failed) */
	uint64_t reports_sent;
	uint64_t pulls_sent;
	uint64_t tx_dropped;
	uint64_t loop_busy_cycles; /* time in loop iterations that ran tasks (overhead included) */
	uint64_t cpu_ns;           /* thread CPU time, at exit */
	uint32_t last_enabled;
	uint32_t pull_pending;
	int32_t txq;               /* >= 0: transmit on this port queue directly; -1: TX ring */
	uint64_t polls, empty_polls;
	struct rain_idle idle;
	uint64_t last_start, last_end; /* TSC around the last handler run */
	/* a header-only large DISPATCH waiting for its FETCH_REPLY (one at a time) */
	struct rte_mbuf *fetch_m;
	uint64_t fetch_deadline;   /* TSC */
	uint64_t fetches_sent;
	uint64_t fetch_replies;    /* replies that ran their task */
	uint64_t fetch_timeouts;   /* no reply in time: the task answered RAIN_F_FAILED */
	uint64_t fetch_stale;      /* replies for no pending fetch (late, duplicate) */
	uint64_t fetch_bad;        /* replies whose slot header did not name the task: refused */
	uint64_t fetch_refused;    /* a second header-only task while one was fetching: refused */
	uint16_t report_id;        /* worker_id of REPORTs: the server's (worker_base) with --dispatcher */
	uint64_t batch_start;
	uint8_t ctl_frame[RAIN_FRAME_MIN]; /* TOKEN/REPORT/PULL template: only rain_hdr fields vary */
	uint16_t ntx;
	struct rte_mbuf *txb[2 * RW_TASK_BURST + 4];
	uint8_t result[RW_RESULT_MAX];
} __rte_cache_aligned;

/* RX loop counters (single writer: the RX loop). */
struct rw_rx_stats {
	uint64_t rx_packets;
	uint64_t rx_bursts;
	uint64_t polls;
	uint64_t empty_polls;
	uint64_t tx_packets;
	uint64_t tx_dropped;
	uint64_t drops[RAIN_DROP_MAX];
	uint64_t roce_applied;
	uint64_t roce_bytes;
	uint64_t roce_psn_gaps;   /* WRITEs that arrived after a PSN gap (resynchronised) */
	uint64_t roce_psn_skipped;/* PSNs skipped over by those gaps (lost WRITEs) */
	uint64_t bench_responses; /* --bench: RESPONSEs that came back through the loop */
	uint64_t bench_dispatches;/* --bench: TOKENs turned into DISPATCHes */
	uint64_t busy_cycles;     /* iterations that moved packets */
	uint64_t cpu_ns;
} __rte_cache_aligned;

struct rw_conf {
	uint16_t port_id;
	uint32_t threads;
	uint32_t worker_base;
	const struct rw_mode_ops *mode;
	const struct rw_handler_ops *handler;
	const struct rw_rdma_ops *rdma;
	struct rte_ether_addr switch_mac;
	rte_be32_t switch_ip;
	rte_be32_t src_ip;
	uint32_t quota;
	uint32_t slice;
	bool start_disabled;
	uint32_t ring_slots;
	uint32_t slot_size;
	uint32_t rkey;
	uint32_t qpn_base;
	bool rkey_given, qpn_base_given; /* emulated only: ibverbs reports the NIC's */
	uint32_t psn;
	enum rw_qp_type qp_type; /* --qp-type: what the switch sends (UC or RC WRITE ONLY) */
	bool icrc_check;         /* --icrc-check: the NIC checks the iCRC (emulated: the RX loop does) */
	const char *rdma_dev;    /* ibverbs: --rdma-dev, else the DPDK port's PCI function */
	int gid_index;           /* ibverbs: --gid-index, -1: the RoCE v2 GID of --src-ip */
	uint8_t rdma_port;       /* ibverbs: port of the RDMA device (1) */
	uint32_t rdma_mtu;       /* ibverbs: path MTU, bytes (1024, 2048, 4096) */
	uint8_t dscp;            /* ibverbs: DSCP of what the QP sends (RC ACKs) */
	uint32_t remote_qpn;     /* ibverbs: the QPN the QP is "connected" to (none exists) */
	uint32_t fifo_size;
	uint32_t nb_mbufs;
	uint64_t max_service_ns;
	const char *ctl_path;
	const char *reg_path;
	const char *stats_path;
	double stats_period_s;
	struct rain_idle idle;
	bool inline_rx;        /* one thread polls the port itself (run to completion) */
	bool dispatcher;       /* one shared FIFO for all threads (RackSched's second layer) */
	uint64_t fetch_timeout_ns; /* how long a thread waits for a FETCH_REPLY */
	double bench_s;        /* > 0: built-in benchmark on a loopback port (net_ring) */
	/* --handler rocksdb (kv.c): the database folder and how its items are made */
	const char *kv_path;
	uint32_t kv_keys;
	uint32_t kv_key_bytes;
	uint32_t kv_item_bytes;
	uint64_t kv_seed;
	double kv_dilation;    /* wait until k x the operation's run time has passed */
	/* --kv-bench (kv.c): the handler alone, no network; its (op, count) points in order */
	struct rw_kv_point {
		uint8_t op;    /* RAIN_KV_GET or RAIN_KV_SCAN */
		uint16_t count;
	} kv_bench[RW_KV_BENCH_POINTS];
	uint32_t kv_bench_points;
	uint32_t kv_bench_opts;     /* --kv-bench options given */
	uint32_t kv_bench_requests; /* measured requests per point */
	double bench_warmup_s;
};

struct rw_ctx {
	struct rw_conf c;
	struct rte_mempool *mp;
	struct rain_addr self;   /* our MAC/IP/port */
	struct rain_addr sw;     /* the switch */
	struct rain_ctl *ctl;
	uint64_t ctl_size;
	uint64_t tsc_hz;
	uint64_t start_tsc;
	uint32_t quota_cap;      /* quotas above this are clamped (FIFO and ring capacity) */
	struct rte_ring *tx_ring;/* worker threads -> RX/TX loop */
	struct rw_ring ring;
	struct rw_qp *qps;       /* emulated: one per thread */
	void *rdma_priv;         /* the variant's own state (ibverbs: device, PD, MR, CQ, QPs) */
	struct rw_thread *th;    /* threads[] */
	struct rw_rx_stats rx;
	/* --dispatcher: the shared FIFO and its counters (single writer: the RX loop) */
	struct rte_ring *shared_fifo;
	uint64_t disp_dispatched __rte_cache_aligned;
	uint64_t disp_lost;
	volatile int quit;
	uint32_t started;        /* data-plane loops started (RX loop included) */
	uint32_t running;        /* worker threads still running */
	uint32_t rx_as_thread;   /* 1 when the RX loop runs as a pthread */
	char rx_where[48];
	int arrival_off;         /* mbuf dynfield: struct rw_meta */
};

/* Per-mbuf metadata the RX loop leaves for the worker thread. */
struct rw_meta {
	uint64_t arrival_tsc;
	uint16_t udp_off; /* from the frame start */
	uint16_t rh_off;
};

static inline struct rw_meta *rw_meta(const struct rw_ctx *w, struct rte_mbuf *m)
{
	return RTE_MBUF_DYNFIELD(m, w->arrival_off, struct rw_meta *);
}

static inline uint64_t rw_cycles_to_ns(const struct rw_ctx *w, uint64_t cyc)
{
	return (uint64_t)((double)cyc * 1e9 / (double)w->tsc_hz);
}

static inline bool rw_quitting(const struct rw_ctx *w)
{
	return __atomic_load_n(&w->quit, __ATOMIC_RELAXED) != 0;
}

/* modes.c, handlers.c */
const struct rw_mode_ops *rw_mode_find(const char *name);
const struct rw_handler_ops *rw_handler_find(const char *name);
extern const struct rw_handler_ops rw_kv_handler; /* kv.c */
/* kv.c, --kv-bench: open or build the database, time each point's requests, print one
 * JSON line; < 0 after saying why on stderr. */
int rw_kv_bench(struct rw_ctx *w);
const char *rw_mode_names(void);
const char *rw_handler_names(void);

/* rdma.c (the table and the ring), rdma_emu.c, rdma_verbs.c */
#define RW_NIC_ICRC_COUNTER "rx_icrc_encapsulated" /* mlx5: RoCE packets dropped for a bad iCRC */
extern const struct rw_rdma_ops rw_rdma_emulated;
#ifdef RAIN_HAVE_IBVERBS
extern const struct rw_rdma_ops rw_rdma_ibverbs;
#endif
const struct rw_rdma_ops *rw_rdma_find(const char *name); /* NULL: unknown or not built */
const char *rw_rdma_names(void);
int rw_ring_map(struct rw_ctx *w);   /* geometry from the conf, aligned mapping; -1 + errno */
void rw_ring_unmap(struct rw_ctx *w);
static inline const char *rw_qp_type_name(enum rw_qp_type t) { return t == RW_QP_RC ? "rc" : "uc"; }

/* RX/TX loop state (rx.c). */
struct rw_rx_state {
	uint32_t npend;
	uint32_t stuck;
	struct rte_mbuf *pend[4 * RW_RX_BURST];
};

/* thread.c */
int rw_thread_main(void *arg);
uint32_t rw_thread_iter(struct rw_thread *t); /* one FIFO poll; returns messages handled */
int rw_inline_main(void *arg);                /* --inline-rx: RX/TX and thread 0 in one loop */
void rw_tx_add(struct rw_thread *t, struct rte_mbuf *m);
void rw_tx_flush(struct rw_thread *t);
/* Build a header-only message from this thread to the switch (TOKEN, REPORT, PULL);
 * returns 0 if queued, -1 if no mbuf. */
int rw_send_ctl(struct rw_thread *t, uint8_t kind, uint16_t report);
uint64_t rw_held(const struct rw_thread *t);
/* What REPORTs carry: the thread's held tasks, or with --dispatcher the server's
 * (taken from the shared FIFO by no thread yet, plus running). */
uint64_t rw_report_load(const struct rw_thread *t);
uint64_t rw_server_held(const struct rw_ctx *w);

#define RW_PARK_NS 1000000 /* a parked thread looks at its knobs at least this often */
#define RW_PARK_LONG_NS RAIN_IDLE_LONG_NAP_NS /* ... and this often once idle for RAIN_IDLE_LONG_NS */

/* RX loop side of parking: after handing work to a thread, wake it if it sleeps. The
 * fence orders the FIFO enqueue before the `parked` load (the thread does the mirror:
 * store parked, fence, look at the FIFO), so a wake-up is never lost. */
void rw_wake(struct rw_thread *t);
void rw_wake_idle(struct rw_ctx *w, uint32_t n); /* --dispatcher: wake up to n parked threads */

/* rx.c */
int rw_rx_main(void *arg);
uint32_t rw_rx_iter(struct rw_ctx *w, struct rw_rx_state *st); /* one poll; returns frames moved */
uint64_t rw_thread_cpu_ns(void);

/* ctl.c */
void rw_ctl_create(struct rw_ctx *w);
void rw_ctl_ready(struct rw_ctx *w);

/* report.c */
int rw_write_registration(const struct rw_ctx *w);
int rw_write_stats(const struct rw_ctx *w, bool final);

#endif /* RAIN_WORKER_H */
