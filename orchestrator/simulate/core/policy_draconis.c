/* SPDX-License-Identifier: Apache-2.0
 *
 * Draconis-SW (Draconis, EuroSys 2024, as the Rain paper evaluates it in section 5.2),
 * as switch/p4/draconis.p4 implements it: one FIFO of tasks in the switch (no slices),
 * pulled by idle workers, JBSQ(1). A worker thread sends one PULL (the engine's token)
 * at start and after each task; the PULL takes the queue's head (a DISPATCH) or, with
 * none waiting, is answered EMPTY, and the worker pulls again when the EMPTY arrives.
 * A task waits if the queue has room (queue_capacity), else it is rejected. The queue
 * stores a task's header only: a large task's worker FETCHes its payload from the
 * client, one more round trip through the switch, before it can run.
 */
#include <stdio.h>
#include <stdlib.h>

#include "policy.h"

static int dr_init(struct rs_sim *s, char *err, size_t errlen)
{
	rs_view(s)->pol = calloc(1, sizeof(struct rs_u32q));
	if (!rs_view(s)->pol) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

static void dr_fini(struct rs_sim *s)
{
	struct rs_u32q *q = rs_view(s)->pol;
	if (q)
		free(q->v);
	free(q);
}

static void dr_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct rs_u32q *q = v->pol;
	if ((int64_t)q->len >= v->queue_capacity) {
		rs_reject(s, req);
		return;
	}
	if (rs_u32q_push(q, req) < 0) {
		rs_fail(s, "out of memory (switch task queue)");
		return;
	}
	v->cnt.task_queued++;
}

static void dr_pull(struct rs_sim *s, int32_t w, int32_t slice)
{
	struct rs_sim_view *v = rs_view(s);
	struct rs_u32q *q = v->pol;
	if (!q->len) {
		rs_empty(s, w);
		return;
	}
	uint32_t req = rs_u32q_pop(q);
	v->cnt.dispatch_queued++;
	rs_dispatch_fetch(s, req, w, v->now - rs_req_at_switch(s, req), q->len);
}

static void dr_worker_pull(struct rs_sim *s, int32_t w)
{
	if (rs_view(s)->workers[w].fifo_len == 0)
		rs_send_token(s, w);
}

static int64_t dr_balance(const struct rs_sim *s, int32_t slice)
{
	const struct rs_u32q *q = rs_cview(s)->pol;
	return slice == 0 ? -(int64_t)q->len : 0;
}

const struct rs_policy rs_policy_draconis = {
	.name = "draconis",
	.init = dr_init,
	.fini = dr_fini,
	.task_arrive = dr_task,
	.token_arrive = dr_pull,
	.worker_start = dr_worker_pull,
	.worker_done = dr_worker_pull,
	.worker_empty = dr_worker_pull,
	.balance = dr_balance,
};
