/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include <rte_debug.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "rain_port.h"

struct rte_mempool *rain_port_init(const struct rain_port_conf *c)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	int ret;

	if (!rte_eth_dev_is_valid_port(c->port_id))
		rte_exit(EXIT_FAILURE, "port %u does not exist: check the --vdev/-a EAL arguments\n", c->port_id);
	ret = rte_eth_dev_info_get(c->port_id, &info);
	if (ret != 0)
		rte_exit(EXIT_FAILURE, "port %u: cannot get device info: %s\n", c->port_id, rte_strerror(-ret));
	if (c->nb_rxq > info.max_rx_queues || c->nb_txq > info.max_tx_queues)
		rte_exit(EXIT_FAILURE, "port %u (%s) has %u rx / %u tx queues, %u / %u needed\n", c->port_id,
			 info.driver_name, info.max_rx_queues, info.max_tx_queues, c->nb_rxq, c->nb_txq);

	struct rte_mempool *mp = rte_pktmbuf_pool_create(c->pool_name, c->nb_mbufs, 256, 0,
							 RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
	if (mp == NULL)
		rte_exit(EXIT_FAILURE, "cannot create mbuf pool of %u: %s\n", c->nb_mbufs, rte_strerror(rte_errno));

	memset(&conf, 0, sizeof(conf));
	ret = rte_eth_dev_configure(c->port_id, c->nb_rxq, c->nb_txq, &conf);
	if (ret != 0)
		rte_exit(EXIT_FAILURE, "port %u: configure failed: %s\n", c->port_id, rte_strerror(-ret));
	uint16_t nrx = c->nb_desc, ntx = c->nb_desc;
	rte_eth_dev_adjust_nb_rx_tx_desc(c->port_id, &nrx, &ntx);
	for (uint16_t q = 0; q < c->nb_rxq; q++) {
		ret = rte_eth_rx_queue_setup(c->port_id, q, nrx, rte_eth_dev_socket_id(c->port_id), NULL, mp);
		if (ret != 0)
			rte_exit(EXIT_FAILURE, "port %u: rx queue %u: %s\n", c->port_id, q, rte_strerror(-ret));
	}
	for (uint16_t q = 0; q < c->nb_txq; q++) {
		ret = rte_eth_tx_queue_setup(c->port_id, q, ntx, rte_eth_dev_socket_id(c->port_id), NULL);
		if (ret != 0)
			rte_exit(EXIT_FAILURE, "port %u: tx queue %u: %s\n", c->port_id, q, rte_strerror(-ret));
	}
	ret = rte_eth_dev_start(c->port_id);
	if (ret != 0)
		rte_exit(EXIT_FAILURE, "port %u: start failed: %s\n", c->port_id, rte_strerror(-ret));
	rte_eth_promiscuous_enable(c->port_id); /* not every virtual PMD supports it; harmless */
	return mp;
}

int rain_idle_parse(const char *s, struct rain_idle *idle)
{
	memset(idle, 0, sizeof(*idle));
	/* Few yields before sleeping: each is a system call, and on shared cores a loop
	 * that never reaches its sleep (traffic every few hundred us keeps resetting the
	 * count) burns a whole CPU in sched_yield. */
	idle->sleep_after = 32;
	idle->sleep_ns = 20000;
	if (strcmp(s, "spin") == 0)
		idle->mode = RAIN_IDLE_SPIN;
	else if (strcmp(s, "yield") == 0)
		idle->mode = RAIN_IDLE_YIELD;
	else if (strncmp(s, "sleep", 5) == 0) {
		idle->mode = RAIN_IDLE_SLEEP;
		idle->long_ns = RAIN_IDLE_LONG_NS;
		if (s[5] == ':') {
			char *end;
			unsigned long ns = strtoul(s + 6, &end, 10);
			if ((*end != '\0' && *end != ':') || ns == 0 || ns > 10000000)
				return -1;
			idle->sleep_ns = (uint32_t)ns;
			if (*end == ':') {
				char *end2;
				unsigned long long long_ns = strtoull(end + 1, &end2, 10);
				if (*end2 != '\0' || end2 == end + 1 || long_ns > 3600000000000ull)
					return -1;
				idle->long_ns = long_ns;
			}
		} else if (s[5] != '\0')
			return -1;
	} else
		return -1;
	return 0;
}

void rain_idle_thread_init(void)
{
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* 1 us instead of 50 us */
}

void rain_idle_wait(struct rain_idle *idle)
{
	rain_idle_count(idle);
	switch (idle->mode) {
	case RAIN_IDLE_SPIN:
		rte_pause();
		break;
	case RAIN_IDLE_YIELD:
		sched_yield();
		break;
	case RAIN_IDLE_SLEEP:
		if (idle->empty < idle->sleep_after) {
			sched_yield();
		} else {
			/* Idle for long (between points, before the load): nap longer, so that an
			 * idle testbed costs its shared cores next to nothing. A load keeps every
			 * poller busier than that, so it never sees the longer nap. */
			long ns = idle->sleep_ns < RAIN_IDLE_LONG_NAP_NS && rain_idle_is_long(idle) ? RAIN_IDLE_LONG_NAP_NS
												 : idle->sleep_ns;
			struct timespec ts = {0, ns};
			nanosleep(&ts, NULL);
			rain_rt_slept(idle->rt);
		}
		break;
	}
}

void rain_idle_wait_due(struct rain_idle *idle, uint64_t due_ns)
{
	if (idle->mode != RAIN_IDLE_SLEEP || idle->empty + 1 < idle->sleep_after || due_ns >= idle->sleep_ns + RAIN_WAKE_NS) {
		rain_idle_wait(idle);
		return;
	}
	rain_idle_count(idle);
	if (due_ns <= RAIN_WAKE_NS) { /* too close to sleep through: stay on the CPU */
		sched_yield();
		return;
	}
	struct timespec ts = {0, (long)(due_ns - RAIN_WAKE_NS)};
	nanosleep(&ts, NULL);
	rain_rt_slept(idle->rt);
}

int rain_rt_enter(struct rain_rt *rt)
{
	if (rt->prio <= 0 || rt->on)
		return 0;
	struct sched_param sp = {.sched_priority = rt->prio};
	if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) { /* 0: this thread */
		rt->error = errno;
		return rt->error;
	}
	rt->on = true;
	rt->slice_tsc = RAIN_RT_SLICE_NS * rte_get_tsc_hz() / 1000000000ull;
	rt->awake_tsc = rte_rdtsc();
	return 0;
}

void rain_rt_leave(struct rain_rt *rt)
{
	if (!rt->on)
		return;
	struct sched_param sp = {.sched_priority = 0};
	sched_setscheduler(0, SCHED_OTHER, &sp);
	rt->on = false;
}

void rain_rt_rest(struct rain_rt *rt)
{
	struct timespec ts = {0, RAIN_RT_REST_NS};
	nanosleep(&ts, NULL);
	rt->rests++;
	rt->awake_tsc = rte_rdtsc();
}
