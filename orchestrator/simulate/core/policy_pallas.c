/* SPDX-License-Identifier: Apache-2.0
 *
 * Pallas-SW ("Towards Optimal Rack-Scale us-Level CPU Scheduling through In-Network
 * Workload Shaping", USENIX ATC 2025, as the Rain paper evaluates it in section 5.2),
 * as switch/p4/pallas.p4 implements it: a task type's pool is its slice's worker
 * threads (the spec's slices; all threads without slices); inside a pool a weighted
 * round robin, each task pushed at once with its payload, no queue in the switch and
 * no bound on a worker's queue. The schedule lists each thread as many times as its
 * weight, in thread order, as the controller writes it; every thread weighs 1 (the
 * threads are alike). A task whose pool has no thread is rejected, as the program's
 * empty pool.
 */
#include <stdio.h>
#include <stdlib.h>

#include "policy.h"

struct pallas {
	int32_t *members;              /* every pool's schedule, pool after pool */
	int32_t start[RS_MAX_SLICES];  /* a pool's first entry in members */
	int32_t len[RS_MAX_SLICES];
	int32_t cursor[RS_MAX_SLICES];
};

static int pa_init(struct rs_sim *s, char *err, size_t errlen)
{
	struct rs_sim_view *v = rs_view(s);
	struct pallas *p = calloc(1, sizeof *p);
	if (p)
		p->members = calloc((size_t)v->n_workers, sizeof *p->members);
	if (!p || !p->members) {
		free(p);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int32_t at = 0;
	for (int32_t sl = 0; sl < RS_MAX_SLICES; sl++) {
		p->start[sl] = at;
		for (int32_t w = 0; w < v->n_workers; w++)
			if (v->workers[w].slice == sl)
				p->members[at++] = w;
		p->len[sl] = at - p->start[sl];
	}
	v->pol = p;
	return 0;
}

static void pa_fini(struct rs_sim *s)
{
	struct pallas *p = rs_view(s)->pol;
	if (p)
		free(p->members);
	free(p);
}

static void pa_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	struct pallas *p = v->pol;
	int32_t pool = rs_req_slice(s, req);
	if (!p->len[pool]) {
		rs_reject(s, req);
		return;
	}
	int32_t w = p->members[p->start[pool] + p->cursor[pool]];
	p->cursor[pool] = (p->cursor[pool] + 1) % p->len[pool];
	v->cnt.dispatch_direct++;
	rs_dispatch(s, req, w, 1, 0, 0);
}

static void pa_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	(void)s, (void)w, (void)slice; /* push mode: workers send only replies */
}

const struct rs_policy rs_policy_pallas = {
	.name = "pallas",
	.init = pa_init,
	.fini = pa_fini,
	.task_arrive = pa_task,
	.token_arrive = pa_token,
};
