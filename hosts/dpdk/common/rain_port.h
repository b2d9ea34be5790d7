/* SPDX-License-Identifier: Apache-2.0
 *
 * Port and memory set-up shared by the DPDK programs, and the idle strategy.
 * Only initialisation may rte_exit(); the hot path counts and goes on.
 */
#ifndef RAIN_PORT_H
#define RAIN_PORT_H

#include <stdint.h>
#include <time.h>

#include <rte_ethdev.h>
#include <rte_mempool.h>

struct rain_port_conf {
	uint16_t port_id;
	uint16_t nb_rxq;
	uint16_t nb_txq;
	uint16_t nb_desc;      /* per queue */
	uint32_t nb_mbufs;
	const char *pool_name;
};

/* Configure and start the port with nb_rxq/nb_txq queues; promiscuous so frames
 * addressed to the switch's or another MAC on a virtual port still arrive.
 * Returns the mbuf pool. rte_exit()s with a clear message on failure (init only). */
struct rte_mempool *rain_port_init(const struct rain_port_conf *c);

/* How a polling thread behaves when it finds nothing to do. On a testbed whose
 * cores are shared (the emulated one), spinning steals the CPU the switch and the
 * peers need, so the default there is to yield, and to sleep after a longer idle
 * spell (with 1 us timer slack set per thread, not the default 50 us). */
enum rain_idle_mode { RAIN_IDLE_SPIN, RAIN_IDLE_YIELD, RAIN_IDLE_SLEEP };

struct rain_idle {
	enum rain_idle_mode mode;
	uint32_t empty;        /* consecutive empty polls */
	uint32_t sleep_after;  /* empty polls before sleeping (RAIN_IDLE_SLEEP) */
	uint32_t sleep_ns;
	uint32_t long_naps;    /* naps of sleep_ns before the long nap (0: never) */
};

/* "spin" | "yield" | "sleep[:NS[:LONG_NS]]": after LONG_NS idle (default: RAIN_IDLE_LONG_NAPS
 * naps) a sleeping poller naps RAIN_IDLE_LONG_NAP_NS at a time */
int rain_idle_parse(const char *s, struct rain_idle *idle);
void rain_idle_thread_init(void);                             /* timer slack for this thread */
void rain_idle_wait(struct rain_idle *idle);                  /* call after an empty poll */
/* The same, for a loop with something due in due_ns (a send): a nap never runs past it.
 * Closer than RAIN_WAKE_NS (a sleeping thread's wake-up latency on shared cores, measured
 * 20-60 us) the thread stays on the CPU rather than wake up late. */
#define RAIN_WAKE_NS 30000u
/* A sleeping poller idle for long (LONG_NS of --idle; by default RAIN_IDLE_LONG_NAPS naps)
 * naps RAIN_IDLE_LONG_NAP_NS at a time. The runner sets LONG_NS from the dilated mean
 * task (100 of them, at least 100 ms), so that no load meets the long nap. */
#define RAIN_IDLE_LONG_NAPS 2000u
#define RAIN_IDLE_LONG_NAP_NS 2000000u
void rain_idle_wait_due(struct rain_idle *idle, uint64_t due_ns);

static inline void rain_idle_reset(struct rain_idle *idle) { idle->empty = 0; }

static inline uint64_t rain_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t rain_unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* RAIN_PORT_H */
