/* SPDX-License-Identifier: Apache-2.0
 *
 * A scheduling policy is a table of hooks (one C file per policy, one line in
 * sim.c's registry). The engine (sim.c) owns time, events, the network, the client
 * and the worker threads; a policy decides what the switch does with tasks and
 * tokens, and what a worker thread sends back to the switch. It acts only through
 * the engine's rs_* services below, which put the packets on the network.
 */
#ifndef RS_POLICY_H
#define RS_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "rainsim.h"
#include "rng.h"

struct rs_worker;

struct rs_policy {
	const char *name;
	/* Allocate the policy's state (s->pol); 0 or -1 with a message in err. */
	int (*init)(struct rs_sim *s, char *err, size_t errlen);
	void (*fini)(struct rs_sim *s);
	/* Switch: a task (request id) reached the switch at s->now. */
	void (*task_arrive)(struct rs_sim *s, uint32_t req);
	/* Switch: a token of worker w, stamped with slice, reached the switch. */
	void (*token_arrive)(struct rs_sim *s, int32_t w, int32_t slice);
	/* Worker thread w: at start, after each finished task (its reply is sent), and
	 * when its knobs change while it is idle. */
	void (*worker_start)(struct rs_sim *s, int32_t w);
	void (*worker_done)(struct rs_sim *s, int32_t w);
	void (*worker_knobs)(struct rs_sim *s, int32_t w);
	/* Switch: a REPORT (value: the worker's queue depth) of worker w arrived. */
	void (*report_arrive)(struct rs_sim *s, int32_t w, int64_t value);
	/* Worker thread w received an EMPTY (its pull found no task); it is idle. */
	void (*worker_empty)(struct rs_sim *s, int32_t w);
	/* The slice's signed balance: > 0 tokens waiting, < 0 tasks waiting. */
	int64_t (*balance)(const struct rs_sim *s, int32_t slice);
};

/* What the engine keeps per worker thread; policies read it (and the rain policy its
 * token counters). */
struct rs_worker {
	int32_t quota, slice, enabled, host;
	int64_t tokens_sent;   /* ever */
	int64_t finished;      /* tasks run to completion */
	int64_t received;      /* DISPATCHes received */
	int64_t empties;       /* EMPTYs received: tokens (pulls) the switch answered with no task */
	int64_t forgotten;     /* tokens left in an old slice's queue by a move (rain-worker's tokens_forgotten) */
	int64_t busy_ns;
	int64_t tx_t;          /* when the thread's next send leaves (during a hook) */
	int64_t free_at;       /* the thread is busy until then */
	int32_t running;       /* a task is in service (a DONE event is pending) */
	int32_t pad_;
	/* FIFO of dispatched tasks: ring of entries, grows */
	struct rs_fifo_entry *fifo;
	uint32_t fifo_cap, fifo_head, fifo_len;
	uint64_t nsamples;         /* written since the last take; slot = nsamples % RS_SAMPLES */
	struct rs_sample *samples; /* RS_SAMPLES, a ring */
};

struct rs_fifo_entry {
	uint32_t req;
	uint32_t qlen;    /* Q_sw */
	uint32_t qdelay;  /* L_sw */
	uint32_t pad_;
	int64_t arrive;   /* at the worker */
	int64_t ready;    /* pre-written payload in the ring */
	int64_t start;    /* service start (set when it starts) */
};

/* Engine state a policy may read. */
struct rs_sim_view {
	int64_t now;
	int32_t n_workers;
	int32_t n_slices_used;
	int64_t queue_capacity;
	double params[RS_MAX_PARAMS];
	struct rs_rng prng;           /* the policy's stream */
	struct rs_worker *workers;
	struct rs_counters cnt;
	void *pol;                    /* the policy's state */
};

/* The engine's services to policies. */
/* Send the task to worker w; with_payload: a large task carries its payload (else only
 * its descriptor); qdelay/qlen: the INT the worker gets. */
void rs_dispatch(struct rs_sim *s, uint32_t req, int32_t w, int with_payload, int64_t qdelay, uint32_t qlen);
/* As rs_dispatch with only the descriptor; a large task's payload is then fetched by the
 * worker from the client (FETCH, FETCH_REPLY through the switch) before it can run. */
void rs_dispatch_fetch(struct rs_sim *s, uint32_t req, int32_t w, int64_t qdelay, uint32_t qlen);
void rs_reject(struct rs_sim *s, uint32_t req);
/* Send the task round the switch again: out of the recirculation port (a link_gbps FIFO,
 * serialising the task's frame), then task_arrive sees it delay_ns later (one more pass). */
void rs_recirculate(struct rs_sim *s, uint32_t req, int64_t delay_ns);
/* Answer worker w's token (a pull) with an EMPTY: worker_empty runs when it arrives. */
void rs_empty(struct rs_sim *s, int32_t w);
/* Worker w sends a REPORT of value (from inside a worker hook): report_arrive at the switch. */
void rs_send_report(struct rs_sim *s, int32_t w, int64_t value);
/* Pre-write a large task's payload into every worker of slice (RDMA WRITE multicast). */
void rs_prewrite(struct rs_sim *s, uint32_t req, int32_t slice);
/* Worker w sends one token stamped with its slice (from inside a worker hook). */
void rs_send_token(struct rs_sim *s, int32_t w);
/* A request's slice, large flag, and the time it reached the switch. */
int32_t rs_req_slice(const struct rs_sim *s, uint32_t req);
int rs_req_large(const struct rs_sim *s, uint32_t req);
int64_t rs_req_at_switch(const struct rs_sim *s, uint32_t req);
int32_t rs_req_passes(const struct rs_sim *s, uint32_t req); /* recirculations so far */
struct rs_sim_view *rs_view(struct rs_sim *s);
const struct rs_sim_view *rs_cview(const struct rs_sim *s);

/* A growable FIFO of u32 for policies' queues. */
struct rs_u32q {
	uint32_t *v;
	uint32_t cap, head, len;
};
int rs_u32q_push(struct rs_u32q *q, uint32_t x); /* -1: out of memory */
static inline uint32_t rs_u32q_pop(struct rs_u32q *q)
{
	uint32_t x = q->v[q->head];
	q->head = (q->head + 1) & (q->cap - 1);
	q->len--;
	return x;
}
void rs_fail(struct rs_sim *s, const char *msg); /* record an error: the run stops */

extern const struct rs_policy rs_policy_rain;
extern const struct rs_policy rs_policy_random;
extern const struct rs_policy rs_policy_r2p2;
extern const struct rs_policy rs_policy_racksched;
extern const struct rs_policy rs_policy_draconis;
extern const struct rs_policy rs_policy_pallas;
/* one-server RPC scheduling (Rakaia): rpc.h */
extern const struct rs_policy rs_policy_ms;
extern const struct rs_policy rs_policy_cp;
extern const struct rs_policy rs_policy_kcm;
extern const struct rs_policy rs_policy_cs;
extern const struct rs_policy rs_policy_rakaia;

#endif /* RS_POLICY_H */
