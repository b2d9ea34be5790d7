/* SPDX-License-Identifier: Apache-2.0
 *
 * Task handlers (--handler): what running a task means. The synthetic ones read the
 * service time the task carries (task->service_ns); rocksdb (kv.c) serves key-value
 * requests: init() opens the database, run() decodes the request and writes a result.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include <rte_pause.h>

#include "worker.h"

/* spin: hold the CPU for the service time, as the paper's synthetic workers do. */
static int spin_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	const struct rw_ctx *w = t->w;
	if (task->service_ns > w->c.max_service_ns)
		return -1;
	uint64_t end = rte_rdtsc() + (uint64_t)((double)task->service_ns * (double)w->tsc_hz / 1e9);
	while (rte_rdtsc() < end)
		rte_pause();
	return 0;
}

/* sleep: hold the worker without the CPU (time-dilated emulation on shared cores).
 * An absolute deadline keeps early wake-ups and EINTR from shortening the task; the
 * thread's timer slack is 1 us (rain_idle_thread_init). */
static int sleep_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	if (task->service_ns > t->w->c.max_service_ns)
		return -1;
	if (task->service_ns == 0)
		return 0;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + task->service_ns;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	return 0;
}

/* echo: return at once (per-task overhead measurements). */
static int echo_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	return 0;
}

/* digest: return at once with the payload's 64-bit FNV-1a, big-endian (8 bytes): the
 * sender can check that a large task's bytes arrived intact (ring, frame or fetch). */
static int digest_run(struct rw_thread *t, const struct rw_task *task, struct rw_result *out)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint32_t i = 0; i < task->payload_len; i++)
		h = (h ^ task->payload[i]) * 0x100000001b3ull;
	rain_put_u64(out->buf, h);
	out->len = 8;
	return 0;
}

static const struct rw_handler_ops handlers[] = {
	{ .name = "spin", .run = spin_run },
	{ .name = "sleep", .run = sleep_run },
	{ .name = "echo", .run = echo_run },
	{ .name = "digest", .run = digest_run },
};

const struct rw_handler_ops *rw_handler_find(const char *name)
{
	for (size_t i = 0; i < RTE_DIM(handlers); i++)
		if (strcmp(handlers[i].name, name) == 0)
			return &handlers[i];
	if (strcmp(rw_kv_handler.name, name) == 0)
		return &rw_kv_handler;
	return NULL;
}

const char *rw_handler_names(void)
{
	return "spin|sleep|echo|digest|rocksdb";
}
