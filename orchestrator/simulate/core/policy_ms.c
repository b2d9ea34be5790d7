/* SPDX-License-Identifier: Apache-2.0
 *
 * MS, message-shared FIFO (Rakaia's yardstick): one queue of messages in front of every
 * core; an idle core takes the oldest. With Poisson arrivals, M/G/c FCFS.
 * params[0] connections, params[1] their Zipf exponent (rpc.h): drawn, and ignored.
 */
#include "rpc.h"

struct ms {
	struct rpc_conns conns;
	struct rpc_idle idle;
	struct rs_u32q q;
};

static int ms_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	struct ms *m = calloc(1, sizeof *m);
	v->pol = m;
	if (!m || rpc_idle_init(&m->idle, v->n_workers) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return rpc_conns_init(&m->conns, v, err, errlen);
}

static void ms_fini(struct rs_sim *s)
{
	struct ms *m = rs_view(s)->pol;
	if (!m)
		return;
	rpc_conns_fini(&m->conns);
	rpc_idle_fini(&m->idle);
	free(m->q.v);
	free(m);
}

static void ms_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct ms *m = v->pol;
	(void)rpc_conn_draw(&m->conns, &v->prng);
	int32_t w = rpc_idle_pop(&m->idle);
	if (w >= 0) {
		v->cnt.dispatch_direct++;
		rs_dispatch(s, req, w, 1, 0, (uint32_t)m->q.len);
		return;
	}
	v->cnt.task_queued++;
	if (rs_u32q_push(&m->q, req) < 0)
		rs_fail(s, "out of memory (MS queue)");
}

/* Core w asks for work. */
static void ms_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	struct rs_sim_view *v = rs_view(s);
	struct ms *m = v->pol;
	if (m->q.len) {
		v->cnt.dispatch_queued++;
		rs_dispatch(s, rs_u32q_pop(&m->q), w, 1, 0, (uint32_t)m->q.len);
	} else {
		rpc_idle_push(&m->idle, w);
	}
}

static void ms_ask(struct rs_sim *s, int32_t w) { rs_send_token(s, w); }

static int64_t ms_balance(const struct rs_sim *s, int32_t slice)
{
	const struct ms *m = rs_cview(s)->pol;
	return slice == 0 ? (m->q.len ? -(int64_t)m->q.len : m->idle.len) : 0;
}

const struct rs_policy rs_policy_ms = {
	.name = "ms",
	.init = ms_init,
	.fini = ms_fini,
	.task_arrive = ms_task,
	.token_arrive = ms_token,
	.worker_start = ms_ask,
	.worker_done = ms_ask,
	.balance = ms_balance,
};
