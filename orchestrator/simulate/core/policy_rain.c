/* SPDX-License-Identifier: Apache-2.0
 *
 * Rain (CoNEXT 2026), sections 3.2 and 5.4: per slice a bidirectional queue of tasks
 * and tokens. Its signed balance is > 0 when tokens wait, < 0 when tasks wait; only
 * one side is ever non-empty, both FIFO. A task that meets a token goes to that
 * token's worker; otherwise it waits if the slice's queue has room, else it is
 * rejected. A large task that has to wait is pre-written (RDMA WRITE multicast to
 * every worker of its slice) and waits as a descriptor; one that meets a token is
 * forwarded with its payload. Workers keep tokens in the switch + tasks held at their
 * quota, as rain-worker's rain_topup.
 *
 * params[0], large_cap: a large task may wait only while fewer than this many tasks
 * wait in its slice (else it is rejected), as the P4 program's neg_large_cap: its
 * descriptor takes a slot of the workers' RDMA rings, which must not wrap onto a task
 * still waiting or held (ring slots - what a worker may hold). 0: no bound but the
 * queue capacity.
 */
#include <stdlib.h>
#include <string.h>

#include "policy.h"

struct rain {
	struct rs_u32q tasks[RS_MAX_SLICES];  /* request ids */
	struct rs_u32q tokens[RS_MAX_SLICES]; /* worker ids */
};

static int rain_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rain *r = calloc(1, sizeof *r);
	if (!r) {
		if (errlen)
			strncpy(err, "out of memory", errlen - 1);
		return -1;
	}
	rs_view(s)->pol = r;
	return 0;
}

static void rain_fini(struct rs_sim *s)
{
	struct rain *r = rs_view(s)->pol;
	if (!r)
		return;
	for (int i = 0; i < RS_MAX_SLICES; i++) {
		free(r->tasks[i].v);
		free(r->tokens[i].v);
	}
	free(r);
}

static int64_t rain_cap(const struct rs_sim_view *v, int large)
{
	int64_t cap = v->queue_capacity, lc = (int64_t)v->params[0];
	return large && lc > 0 && lc < cap ? lc : cap;
}

static void rain_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct rain *r = v->pol;
	int32_t sl = rs_req_slice(s, req);
	if (r->tokens[sl].len) {
		v->cnt.dispatch_direct++;
		rs_dispatch(s, req, (int32_t)rs_u32q_pop(&r->tokens[sl]), 1, 0, 0);
	} else if ((int64_t)r->tasks[sl].len < rain_cap(v, rs_req_large(s, req))) {
		if (rs_u32q_push(&r->tasks[sl], req) < 0) {
			rs_fail(s, "out of memory (switch task queue)");
			return;
		}
		v->cnt.task_queued++;
		if (rs_req_large(s, req))
			rs_prewrite(s, req, sl);
	} else {
		rs_reject(s, req);
	}
}

static void rain_token(struct rs_sim *s, int32_t w, int32_t sl)
{
	struct rs_sim_view *v = rs_view(s);
	struct rain *r = v->pol;
	if (r->tasks[sl].len) {
		uint32_t req = rs_u32q_pop(&r->tasks[sl]);
		v->cnt.dispatch_queued++;
		/* INT: the task's time in the queue, and the tasks still waiting behind it */
		rs_dispatch(s, req, w, 0, v->now - rs_req_at_switch(s, req), r->tasks[sl].len);
	} else {
		if (rs_u32q_push(&r->tokens[sl], (uint32_t)w) < 0) {
			rs_fail(s, "out of memory (switch token queue)");
			return;
		}
		v->cnt.token_queued++;
		if ((int64_t)r->tokens[sl].len > v->cnt.max_tokens_waiting)
			v->cnt.max_tokens_waiting = r->tokens[sl].len;
	}
}

/* rain_topup: outstanding = tokens in the switch + tasks held <= quota. Tokens in the
 * switch = sent - forgotten - consumed by DISPATCHes received; tasks held = received -
 * finished. A worker moved to another slice forgets the tokens it left in the old one
 * (rs_set_worker), as rain-worker does when it is enabled again; a DISPATCH for one of
 * them still reaches it and re-bases the count, as there. */
static void rain_topup(struct rs_sim *s, int32_t w)
{
	struct rs_worker *k = &rs_view(s)->workers[w];
	if (k->received + k->forgotten > k->tokens_sent)
		k->forgotten = k->tokens_sent > k->received ? k->tokens_sent - k->received : 0;
	if (!k->enabled)
		return;
	int64_t out = (k->tokens_sent - k->forgotten - k->received) + (k->received - k->finished);
	while (out < k->quota) {
		rs_send_token(s, w);
		out++;
	}
}

static int64_t rain_balance(const struct rs_sim *s, int32_t sl)
{
	const struct rain *r = rs_cview(s)->pol;
	return (int64_t)r->tokens[sl].len - (int64_t)r->tasks[sl].len;
}

const struct rs_policy rs_policy_rain = {
	.name = "rain",
	.init = rain_init,
	.fini = rain_fini,
	.task_arrive = rain_task,
	.token_arrive = rain_token,
	.worker_start = rain_topup,
	.worker_done = rain_topup,
	.worker_knobs = rain_topup,
	.balance = rain_balance,
};
