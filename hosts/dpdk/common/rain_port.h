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
	uint64_t long_ns;      /* idle this long (since the first empty poll), nap long (0: never) */
	uint64_t since_ns;     /* when the current run of empty polls began */
};

/* "spin" | "yield" | "sleep[:NS[:LONG_NS]]": after LONG_NS idle (default RAIN_IDLE_LONG_NS)
 * a sleeping poller naps RAIN_IDLE_LONG_NAP_NS at a time */
int rain_idle_parse(const char *s, struct rain_idle *idle);
void rain_idle_thread_init(void);                             /* timer slack for this thread */
void rain_idle_wait(struct rain_idle *idle);                  /* call after an empty poll */
/* The same, for a loop with something due in due_ns (a send): a nap never runs past it.
 * Closer than RAIN_WAKE_NS (a sleeping thread's wake-up latency on shared cores, measured
 * 20-60 us) the thread stays on the CPU rather than wake up late. */
#define RAIN_WAKE_NS 30000u
/* A sleeping poller idle for long (LONG_NS of --idle, wall-clock time since its last
 * frame) naps RAIN_IDLE_LONG_NAP_NS at a time. The runner sets LONG_NS from the dilated
 * mean task (100 of them, at least 100 ms), so that no load meets the long nap. 50 ms:
 * a wake-up of a napping thread costs 30-50 us of CPU on a 2-vCPU VM, so an idle
 * testbed's nine pollers at 10 ms naps took 3% of a core, half the idle testbed, and
 * 20 wakes a second take 0.6%. The first frame after a long idle (a point's first,
 * in its warm-up) waits up to one nap in the RX ring. */
#define RAIN_IDLE_LONG_NS 100000000ull
#define RAIN_IDLE_LONG_NAP_NS 50000000u
void rain_idle_wait_due(struct rain_idle *idle, uint64_t due_ns);

static inline void rain_idle_reset(struct rain_idle *idle) { idle->empty = 0; }

static inline uint64_t rain_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One more empty poll; the first of a run notes when the run began. */
static inline void rain_idle_count(struct rain_idle *idle)
{
	if (idle->empty++ == 0)
		idle->since_ns = rain_now_ns();
}

/* Idle for long: LONG_NS of wall-clock time since the run of empty polls began (time,
 * not a count of naps, whose length the wake-up latency stretches). */
static inline bool rain_idle_is_long(const struct rain_idle *idle)
{
	return idle->long_ns && rain_now_ns() - idle->since_ns >= idle->long_ns;
}

static inline uint64_t rain_unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* RAIN_PORT_H */
