/* SPDX-License-Identifier: Apache-2.0
 *
 * Port and memory set-up shared by the DPDK programs, and the idle strategy.
 * Only initialisation may rte_exit(); the hot path counts and goes on.
 */
#ifndef RAIN_PORT_H
#define RAIN_PORT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <rte_cycles.h>

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
	struct rain_rt *rt;    /* the thread's real-time state, told of every sleep (NULL: none) */
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

/* Real-time while measuring. On a testbed whose cores are shared (the emulated one) a
 * measuring thread may run at SCHED_FIFO, so a send that is due preempts the busy
 * pollers; but at SCHED_FIFO a sched_yield() yields to nothing of a lower class, and a
 * thread that never sleeps holds its core against sshd, the agents and everything
 * else (two testbeds' clients and switches once held both cores of a 2-core machine
 * for seconds). So a thread is real-time only between rain_rt_enter() and
 * rain_rt_leave() (the load, never start-up), and rain_rt_breathe() bounds how long it
 * runs without sleeping: after RAIN_RT_SLICE_NS on the CPU it sleeps RAIN_RT_REST_NS
 * whatever is due, at most 80% of a core. A send that rest delays is counted late, as
 * any other. */
#define RAIN_RT_SLICE_NS 1000000ull
#define RAIN_RT_REST_NS 250000u

struct rain_rt {
	int prio;             /* the SCHED_FIFO priority asked for; 0: never real-time */
	bool on;              /* the thread runs at it now */
	int error;            /* errno of a refused rain_rt_enter (0: none) */
	uint64_t slice_tsc;   /* RAIN_RT_SLICE_NS in TSC cycles */
	uint64_t awake_tsc;   /* when the thread last came back from a sleep */
	uint64_t rests;       /* times a slice ran out and the thread slept RAIN_RT_REST_NS */
};

/* This thread to SCHED_FIFO rt->prio (nothing if prio is 0); 0, or the errno of a
 * refusal (kept in rt->error: the thread then goes on in its normal class). */
int rain_rt_enter(struct rain_rt *rt);
/* This thread back to SCHED_OTHER (nothing if it never entered). */
void rain_rt_leave(struct rain_rt *rt);
/* The thread just slept (a nap, a wait): its slice starts again. */
static inline void rain_rt_slept(struct rain_rt *rt)
{
	if (rt != NULL && rt->on)
		rt->awake_tsc = rte_rdtsc();
}
void rain_rt_rest(struct rain_rt *rt);
/* Call once per round of a real-time loop: sleeps when the slice has run out. */
static inline void rain_rt_breathe(struct rain_rt *rt)
{
	if (unlikely(rt->on) && rte_rdtsc() - rt->awake_tsc > rt->slice_tsc)
		rain_rt_rest(rt);
}

static inline uint64_t rain_unix_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* RAIN_PORT_H */
