/* SPDX-License-Identifier: Apache-2.0
 *
 * Uniform random push: each task goes to a worker thread drawn uniformly at random
 * (the policy's own random stream); no tokens, no switch queue. Each worker is then
 * an M/G/1 queue fed by a thinned Poisson stream: the reference for the M/M/1 check.
 */
#include "policy.h"

static void random_task(struct rs_sim *s, uint32_t req)
{
	struct rs_sim_view *v = rs_view(s);
	v->cnt.dispatch_direct++;
	rs_dispatch(s, req, (int32_t)rs_below(&v->prng, (uint32_t)v->n_workers), 1, 0, 0);
}

static void random_token(struct rs_sim *s, int32_t w, int32_t slice)
{
	(void)s, (void)w, (void)slice; /* workers send none */
}

const struct rs_policy rs_policy_random = {
	.name = "random",
	.task_arrive = random_task,
	.token_arrive = random_token,
};
