/* SPDX-License-Identifier: Apache-2.0
 *
 * CP, connection-partitioned FIFO: each connection is bound to one core (connection k
 * to core k mod cores, the accept loop's round-robin), which serves its messages in
 * order; no other core takes them. Each core is then a FIFO fed by its connections'
 * share of the arrivals: with as many uniformly loaded connections as cores and
 * Poisson arrivals, c independent M/G/1 queues.
 *
 * KCM-like: messages detached from their connection, but each stays on the core its
 * connection is bound to (KCM's scheduling is local only; the paper explains KCM's
 * result so). With one worker per core and zero overheads this is CP's queue, and the
 * two policies give the same numbers: what KCM adds is cost, which the measured layer
 * has and this model does not.
 *
 * params[0] connections, params[1] their Zipf exponent (rpc.h).
 */
#include "rpc.h"

static int cp_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	struct rpc_conns *c = calloc(1, sizeof *c);
	v->pol = c;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return rpc_conns_init(c, v, err, errlen);
}

static void cp_fini(struct rs_sim *s)
{
	struct rpc_conns *c = rs_view(s)->pol;
	if (c)
		rpc_conns_fini(c);
	free(c);
}

static void cp_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	int32_t conn = rpc_conn_draw(v->pol, &v->prng);
	int32_t w = conn % v->n_workers;
	if (v->workers[w].running || v->workers[w].fifo_len)
		v->cnt.task_queued++;
	else
		v->cnt.dispatch_direct++;
	rs_dispatch(s, req, w, 1, 0, v->workers[w].fifo_len);
}

static void cp_token(struct rs_sim *s, int32_t w, int32_t slice) { (void)s, (void)w, (void)slice; }

const struct rs_policy rs_policy_cp = {
	.name = "cp",
	.init = cp_init,
	.fini = cp_fini,
	.task_arrive = cp_task,
	.token_arrive = cp_token,
};

const struct rs_policy rs_policy_kcm = {
	.name = "kcm",
	.init = cp_init,
	.fini = cp_fini,
	.task_arrive = cp_task,
	.token_arrive = cp_token,
};
