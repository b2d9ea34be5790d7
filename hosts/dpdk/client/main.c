/* SPDX-License-Identifier: Apache-2.0
 *
 * rain-client: parse the options, bring the port up, launch one load loop per
 * EAL lcore (the main lcore included), then merge and write the results.
 * See client.h for the design and `rain-client -- --help` for the options.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf_dyn.h>

#include "client.h"
#include "rain_eal.h"

struct rc_shared rc;
static struct rc_config cfg;
extern int rc_tsc_dynfield;

static void on_signal(int sig)
{
	(void)sig;
	rc.quit = 1; /* every loop polls it; the results are written with "partial": true */
}

static volatile sig_atomic_t go;

static void on_go(int sig)
{
	(void)sig;
	go = 1;
}

static int mkdir_p(const char *dir)
{
	char buf[4096];
	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return -1;
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return -1;
	return access(buf, W_OK);
}

/* Frames this client may have in flight at once, per lcore: RX ring, TX ring and
 * buffer, the hand-off ring, and the mempool cache. */
static uint32_t pool_size(unsigned nlcores)
{
	return nlcores * (2 * 512 + RC_TXB + 1024 + 256) + 2048;
}

/* A (TSC, CLOCK_MONOTONIC) pair read close together: the tightest of a few tries. */
static void tsc_and_ns(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 5; i++) {
		uint64_t a = rain_now_ns(), t = rte_rdtsc(), b = rain_now_ns();
		if (b - a < best) {
			best = b - a;
			*tsc = t;
			*ns = a + (b - a) / 2;
		}
	}
}

static void wait_link(uint16_t port)
{
	struct rte_eth_link link;
	for (int i = 0; i < 200; i++) { /* up to 2 s: virtual ports are up at once */
		if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP)
			return;
		rte_delay_ms(10);
	}
	fprintf(stderr, "rain-client: warning: port %u link is still down; sending anyway\n", port);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--selftest-hdr") == 0) {
		if (argc != 4) {
			fprintf(stderr, "usage: rain-client --selftest-hdr VALUES_FILE OUT_HLOG\n");
			return 2;
		}
		return hdr_selftest(argv[2], argv[3]);
	}

	/* Our options come after `--`; parse them before the EAL so mistakes are cheap. */
	int sep = -1;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			sep = i;
			break;
		}
	if (sep < 0) {
		for (int i = 1; i < argc; i++)
			if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
				rc_usage(stdout, "rain-client");
				return 0;
			}
		fprintf(stderr, "rain-client: missing `--` between the EAL options and rain-client's own\n\n");
		rc_usage(stderr, "rain-client");
		return 2;
	}
	int r = rc_parse_args(argc - sep, argv + sep, &cfg);
	if (r != 0)
		return r;
	if (cfg.out_dir != NULL && mkdir_p(cfg.out_dir) != 0) {
		fprintf(stderr, "rain-client: --out %s: cannot create or write: %s\n", cfg.out_dir, strerror(errno));
		return 2;
	}

	if (rte_eal_init(sep, argv) < 0)
		rte_exit(EXIT_FAILURE, "EAL initialisation failed: %s\n", rte_strerror(rte_errno));

	rc.cfg = &cfg;
	rc.nlcores = rte_lcore_count();
	if (rc.nlcores > RC_MAX_LCORES)
		rte_exit(EXIT_FAILURE, "at most %d lcores\n", RC_MAX_LCORES);
	if (!rte_eth_dev_is_valid_port(cfg.port_id))
		rte_exit(EXIT_FAILURE, "port %u does not exist: give a --vdev (net_af_packet0,iface=X) or a PCI device\n",
			 cfg.port_id);
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(cfg.port_id, &info) != 0)
		rte_exit(EXIT_FAILURE, "port %u: no device info\n", cfg.port_id);
	if (info.max_rx_queues < rc.nlcores || info.max_tx_queues < rc.nlcores)
		rte_exit(EXIT_FAILURE,
			 "port %u (%s) has %u rx / %u tx queues but there are %u lcores, each with its own queue pair: "
			 "on af_packet add qpairs=%u to the vdev, or give fewer lcores (-l)\n",
			 cfg.port_id, info.driver_name, info.max_rx_queues, info.max_tx_queues, rc.nlcores, rc.nlcores);
	double peak = 0;
	for (unsigned i = 0; i < cfg.nseg; i++)
		peak = fmax(peak, cfg.seg[i].rps);
	double per_lcore = peak / rc.nlcores * (cfg.warmup_s + cfg.duration_s);
	if (per_lcore > (double)RC_SEQ_MASK)
		rte_exit(EXIT_FAILURE,
			 "up to %.0f requests per lcore in this run, more than the %u a request_id numbers under one "
			 "--epoch: give more lcores (-l) or a shorter --warmup/--duration\n",
			 per_lcore, RC_SEQ_MASK + 1);
	if (cfg.max_outstanding && cfg.max_outstanding < rc.nlcores)
		rte_exit(EXIT_FAILURE, "--max-outstanding %u is less than the %u lcores that share it\n",
			 cfg.max_outstanding, rc.nlcores);

	/* The TSC rate DPDK reports may be a rounded or nominal value (2.45 GHz for a
	 * 2.4454 GHz TSC on this kind of VM: 0.2% off every rate). Measure it against
	 * CLOCK_MONOTONIC over the port set-up below, at least 100 ms. */
	uint64_t cal_tsc0, cal_ns0;
	tsc_and_ns(&cal_tsc0, &cal_ns0);
	rc.nint = (unsigned)ceil(cfg.duration_s - 1e-9);
	if (rc.nint == 0)
		rc.nint = 1;
	for (unsigned s = 0; s < cfg.nseg; s++) {
		double cum = 0;
		for (unsigned c = 0; c < cfg.ncls; c++)
			rc.cls_cdf[s][c] = (cum += (cfg.seg[s].cls_mask >> c & 1) ? cfg.cls[c].weight : 0);
	}

	static const struct rte_mbuf_dynfield tsc_field = {
		.name = "rain_client_rx_tsc", .size = sizeof(uint64_t), .align = __alignof__(uint64_t),
	};
	rc_tsc_dynfield = rte_mbuf_dynfield_register(&tsc_field);
	if (rc_tsc_dynfield < 0)
		rte_exit(EXIT_FAILURE, "cannot register an mbuf field: %s\n", rte_strerror(rte_errno));

	struct rain_port_conf pc = {
		.port_id = cfg.port_id,
		.nb_rxq = (uint16_t)rc.nlcores,
		.nb_txq = (uint16_t)rc.nlcores,
		.nb_desc = 512,
		.nb_mbufs = pool_size(rc.nlcores),
		.pool_name = "rc_pool",
	};
	struct rte_mempool *mp = rain_port_init(&pc);
	wait_link(cfg.port_id);

	unsigned lid;
	RTE_LCORE_FOREACH(lid) {
		int idx = rte_lcore_index(lid);
		struct rc_lcore *lc = rte_zmalloc_socket("rc_lcore", sizeof(*lc), RTE_CACHE_LINE_SIZE,
							 rte_lcore_to_socket_id(lid));
		if (lc == NULL)
			rte_exit(EXIT_FAILURE, "out of memory for lcore %u\n", lid);
		rc.lc[idx] = lc;
	}
	uint64_t cal_tsc1, cal_ns1;
	while (rain_now_ns() - cal_ns0 < 100000000)
		rte_delay_us_sleep(1000);
	tsc_and_ns(&cal_tsc1, &cal_ns1);
	rc.hz = (uint64_t)((double)(cal_tsc1 - cal_tsc0) * 1e9 / (double)(cal_ns1 - cal_ns0));
	rc.timeout_tsc = (uint64_t)((double)cfg.timeout_us * 1e-6 * (double)rc.hz);
	RTE_LCORE_FOREACH(lid)
		rc_lcore_setup(rc.lc[rte_lcore_index(lid)], (unsigned)rte_lcore_index(lid), lid, mp);

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGUSR1, on_go);
	printf("rain-client ready\n");
	fflush(stdout);
	if (cfg.wait_start) {
		/* Initialised while the orchestrator programs the switch; SIGUSR1 starts the
		 * schedule (warm-up first), SIGINT/SIGTERM end it before it began. */
		while (!go && !rc.quit) /* the longest idle there is: the idle testbed's nap */
			rte_delay_us_sleep(RAIN_IDLE_LONG_NAP_NS / 1000);
		printf("rain-client started\n");
		fflush(stdout);
	}

	/* Everyone starts together, a little after now, so the first arrivals are not late. */
	uint64_t tsc_now = rte_rdtsc(), unix_now = rain_unix_ns();
	rc.t0 = tsc_now + rc.hz / 100;
	rc.tw = rc.t0 + (uint64_t)(cfg.warmup_s * (double)rc.hz);
	rc.te = rc.tw + (uint64_t)(cfg.duration_s * (double)rc.hz);
	rc.tdrain = rc.te + rc.timeout_tsc * (cfg.resubmit ? 2 : 1) + rc.hz / 1000;
	uint64_t start_unix = unix_now + (uint64_t)((double)(rc.t0 - tsc_now) * 1e9 / (double)rc.hz);
	uint64_t window_unix = start_unix + (uint64_t)(cfg.warmup_s * 1e9);

	rte_eal_mp_remote_launch(rc_lcore_main, NULL, CALL_MAIN);
	rte_eal_mp_wait_lcore();
	uint64_t t_end = rte_rdtsc();
	double elapsed = t_end > rc.t0 ? (double)(t_end - rc.t0) / (double)rc.hz : 0;

	bool partial = rc.quit != 0;
	int ret = rc_write_results(&cfg, partial, start_unix, window_unix, elapsed);
	rte_eth_dev_stop(cfg.port_id);
	rte_eth_dev_close(cfg.port_id);
	rain_eal_cleanup();
	printf("rain-client done%s\n", partial ? " (partial)" : "");
	fflush(stdout);
	return ret == 0 ? 0 : 1;
}
