/* SPDX-License-Identifier: Apache-2.0
 *
 * rain-worker: parses arguments, initialises the port, the control block and the
 * RDMA ring, launches the RX/TX loop and the worker threads, writes the registration
 * and says "rain-worker ready". The main thread then only waits for SIGINT/SIGTERM
 * and writes the statistics every --stats-period seconds (and once more at exit).
 *
 * Placement: the RX/TX loop and the N threads take the EAL worker lcores in order;
 * those left without one run on pthreads registered with EAL (rte_thread_register)
 * that inherit the main lcore's CPU set. So `-l 0` runs everything on CPU 0 and
 * `--lcores 0@0,1@1,2@1` puts RX on CPU 1 with thread 0. Shared CPUs are fine as
 * long as --idle is not spin.
 */
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf_dyn.h>

#include "rain_eal.h"
#include "worker.h"

static struct rw_ctx ctx;

static void usage(const char *prog)
{
	printf("usage: %s [EAL options] -- --switch-mac M --switch-ip A --src-ip A [options]\n"
	       "  --threads N          worker threads (default 1); global ids B..B+N-1\n"
	       "  --worker-base B      global worker id of thread 0 (default 0)\n"
	       "  --mode M             %s (default rain)\n"
	       "  --handler H          %s (default sleep)\n"
	       "  --idle I             spin|yield|sleep[:NS] when a loop finds nothing (default sleep)\n"
	       "  --quota Q            initial token quota n_w per thread (default 1)\n"
	       "  --slice S            initial slice stamped on tokens (default 0)\n"
	       "  --start-disabled     knobs.enabled = 0 until the agent enables the threads\n"
	       "  --port P             DPDK port id (default 0)\n"
	       "  --ring-slots N       RDMA ring slots per thread (default 64)\n"
	       "  --slot-size B        bytes per slot, a power of two >= %u (default 4096)\n"
	       "  --rkey K             rkey of the server's ring (default 0x52414e)\n"
	       "  --qpn-base Q         QPN of thread 0; thread i has Q+i (default 0x100)\n"
	       "  --psn P              initial PSN of every QP (default 0)\n"
	       "  --rdma R             %s: how the switch's RoCEv2 WRITEs reach the ring\n"
	       "                       (emulated: applied by the RX loop; ibverbs: by the NIC) (default emulated)\n"
	       "  --qp-type T          uc|rc: the WRITE ONLY opcode the switch sends (default uc)\n"
	       "  --icrc-check         the NIC checks the RoCEv2 iCRC, which the switch leaves zero (emulated:\n"
	       "                       the RX loop drops WRITEs with a wrong one as roce_icrc) (default off)\n"
	       "  --rdma-dev D         ibverbs: RDMA device (default: the one on the port's PCI function)\n"
	       "  --rdma-port N        ibverbs: port of the RDMA device (default 1)\n"
	       "  --gid-index N        ibverbs: RoCE v2 GID index (default: the GID of --src-ip)\n"
	       "  --rdma-mtu B         ibverbs: path MTU, 1024|2048|4096 (default 4096)\n"
	       "  --dscp N             ibverbs: DSCP of what the QPs send (RC ACKs) (default 26)\n"
	       "  --remote-qpn Q       ibverbs: the QPN the QPs are connected to; the switch has none (default 0xfffffe)\n"
	       "  --fifo-size N        per-thread FIFO entries, a power of two (default 1024)\n"
	       "  --mbufs N            mbuf pool size (default 8191)\n"
	       "  --max-service NS     longer synthetic tasks fail instead of running (default 10e9)\n"
	       "  --ctl PATH           create the shared control block there\n"
	       "  --registration PATH  write the registration JSON there once ready\n"
	       "  --stats PATH         write statistics JSON there periodically and at exit\n"
	       "  --stats-period S     seconds between statistics files (default 1)\n"
	       "  --dispatcher         one shared FIFO that idle threads take from, one task at a time (RackSched's\n"
	       "                       second layer: FCFS in the server); --mode report or push; REPORTs then carry\n"
	       "                       worker id B and the server's total queue\n"
	       "  --fetch-timeout NS   --mode pull: how long a thread waits for a large task's FETCH_REPLY before\n"
	       "                       answering it failed (default 10e6)\n"
	       "  --kv-path DIR        --handler rocksdb: the database folder; built once from the --kv-* options\n"
	       "                       below (its MANIFEST-rain names them), opened as it is afterwards\n"
	       "  --kv-keys N          items in the database, numbered 0..N-1 (default 100000)\n"
	       "  --kv-key-bytes B     key size, %u..%u (default 64)\n"
	       "  --kv-item-bytes B    value size, 1..%u (default 1024)\n"
	       "  --kv-seed S          seed of the values (default 1)\n"
	       "  --kv-dilation K      after each request, wait until K x its run time has passed (the emulated\n"
	       "                       testbed's time dilation; default 1)\n"
	       "  --kv-bench OP:COUNT[,COUNT...]\n"
	       "                       with --handler rocksdb: no network; open (or build) the database, time\n"
	       "                       the handler's OP (get|scan) of each COUNT (1..%u) from random starts,\n"
	       "                       print one JSON line and exit; up to %u times, run in order\n"
	       "  --kv-bench-requests N  measured requests per COUNT, after N/10 warm-up ones (default 1000)\n"
	       "                       (with --kv-dilation K > 1 each request is held as the handler holds it:\n"
	       "                       the costs a dilated testbed's workers see, timed by CPU time)\n"
	       "  --inline-rx          with --threads 1: the thread polls the port itself (run to\n"
	       "                       completion, no RX loop; L_w then misses time in the port queue)\n"
	       "  --bench S            benchmark for S seconds on a loopback port (net_ring): this\n"
	       "                       process plays the saturated switch; prints a JSON summary\n"
	       "  --bench-warmup S     seconds excluded from the benchmark (default 0.5)\n",
	       prog, rw_mode_names(), rw_handler_names(), RAIN_SLOT_HDR_LEN, rw_rdma_names(), RAIN_KV_MIN_KEY_BYTES,
	       RAIN_KV_MAX_KEY_BYTES, RAIN_KV_MAX_ITEM_BYTES, RAIN_KV_MAX_COUNT, RW_KV_BENCH_OPTS);
}

static uint64_t parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi)
		rte_exit(EXIT_FAILURE, "--%s %s: expected an integer in [%" PRIu64 ", %" PRIu64 "]\n", opt, s, lo, hi);
	return v;
}

static double parse_f64(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end != '\0' || !(v >= lo && v <= hi))
		rte_exit(EXIT_FAILURE, "--%s %s: expected a number in [%g, %g]\n", opt, s, lo, hi);
	return v;
}

static bool pow2(uint64_t x) { return x && (x & (x - 1)) == 0; }

/* --kv-bench OP:COUNT[,COUNT...]: appends its points; whether they fit --kv-keys is
 * checked once every option is read. */
static void parse_kv_bench(const char *s, struct rw_conf *c)
{
	const char *colon = strchr(s, ':');
	size_t oplen = colon ? (size_t)(colon - s) : strlen(s);
	uint8_t op;
	if (oplen == 3 && strncmp(s, "get", 3) == 0)
		op = RAIN_KV_GET;
	else if (oplen == 4 && strncmp(s, "scan", 4) == 0)
		op = RAIN_KV_SCAN;
	else
		rte_exit(EXIT_FAILURE, "--kv-bench %s: unknown op '%.*s'; expected get:COUNT[,COUNT...] or "
			 "scan:COUNT[,COUNT...] (like scan:100,200)\n", s, (int)oplen, s);
	if (colon == NULL)
		rte_exit(EXIT_FAILURE, "--kv-bench %s: no counts; expected %s:COUNT[,COUNT...] (like %s:100,200)\n", s, s, s);
	if (++c->kv_bench_opts > RW_KV_BENCH_OPTS)
		rte_exit(EXIT_FAILURE, "--kv-bench %s: at most %u --kv-bench options; fix: put more counts in one "
			 "(scan:100,200,300)\n", s, RW_KV_BENCH_OPTS);
	for (const char *p = colon + 1;; p++) {
		char *end = (char *)p;
		unsigned long v = 0;
		errno = 0;
		if (*p >= '0' && *p <= '9')
			v = strtoul(p, &end, 10);
		if (end == p || errno || v < 1 || v > RAIN_KV_MAX_COUNT || (*end != ',' && *end != '\0'))
			rte_exit(EXIT_FAILURE, "--kv-bench %s: counts are integers in [1, %u] separated by commas\n", s,
				 RAIN_KV_MAX_COUNT);
		if (c->kv_bench_points == RW_KV_BENCH_POINTS)
			rte_exit(EXIT_FAILURE, "--kv-bench %s: more than %u counts in all\n", s, RW_KV_BENCH_POINTS);
		c->kv_bench[c->kv_bench_points++] = (struct rw_kv_point){ .op = op, .count = (uint16_t)v };
		p = end;
		if (*p == '\0')
			break;
	}
}

static void parse_args(int argc, char **argv, struct rw_conf *c)
{
	enum { O_THREADS = 256, O_BASE, O_MODE, O_HANDLER, O_IDLE, O_QUOTA, O_SLICE, O_DISABLED, O_PORT,
	       O_SLOTS, O_SLOT_SIZE, O_RKEY, O_QPN, O_PSN, O_FIFO, O_MBUFS, O_MAXSVC, O_CTL, O_REG, O_STATS,
	       O_PERIOD, O_SMAC, O_SIP, O_SRC, O_INLINE, O_BENCH, O_BWARM, O_RDMA, O_QPTYPE, O_RDEV, O_RPORT, O_GID,
	       O_RMTU, O_DSCP, O_RQPN, O_ICRC, O_DISP, O_FETCH_TMO, O_KV_PATH, O_KV_KEYS, O_KV_KEYB, O_KV_ITEMB,
	       O_KV_SEED, O_KV_DIL, O_KV_BENCH, O_KV_BENCH_REQ, O_HELP };
	static const struct option opts[] = {
		{ "threads", 1, 0, O_THREADS }, { "worker-base", 1, 0, O_BASE }, { "mode", 1, 0, O_MODE },
		{ "handler", 1, 0, O_HANDLER }, { "idle", 1, 0, O_IDLE }, { "quota", 1, 0, O_QUOTA },
		{ "slice", 1, 0, O_SLICE }, { "start-disabled", 0, 0, O_DISABLED }, { "port", 1, 0, O_PORT },
		{ "ring-slots", 1, 0, O_SLOTS }, { "slot-size", 1, 0, O_SLOT_SIZE }, { "rkey", 1, 0, O_RKEY },
		{ "qpn-base", 1, 0, O_QPN }, { "psn", 1, 0, O_PSN }, { "fifo-size", 1, 0, O_FIFO },
		{ "mbufs", 1, 0, O_MBUFS }, { "max-service", 1, 0, O_MAXSVC }, { "ctl", 1, 0, O_CTL },
		{ "registration", 1, 0, O_REG }, { "stats", 1, 0, O_STATS }, { "stats-period", 1, 0, O_PERIOD },
		{ "switch-mac", 1, 0, O_SMAC }, { "switch-ip", 1, 0, O_SIP }, { "src-ip", 1, 0, O_SRC },
		{ "inline-rx", 0, 0, O_INLINE }, { "bench", 1, 0, O_BENCH }, { "bench-warmup", 1, 0, O_BWARM },
		{ "rdma", 1, 0, O_RDMA }, { "qp-type", 1, 0, O_QPTYPE }, { "rdma-dev", 1, 0, O_RDEV },
		{ "rdma-port", 1, 0, O_RPORT }, { "gid-index", 1, 0, O_GID }, { "rdma-mtu", 1, 0, O_RMTU },
		{ "dscp", 1, 0, O_DSCP }, { "remote-qpn", 1, 0, O_RQPN }, { "icrc-check", 0, 0, O_ICRC },
		{ "dispatcher", 0, 0, O_DISP }, { "fetch-timeout", 1, 0, O_FETCH_TMO },
		{ "kv-path", 1, 0, O_KV_PATH }, { "kv-keys", 1, 0, O_KV_KEYS }, { "kv-key-bytes", 1, 0, O_KV_KEYB },
		{ "kv-item-bytes", 1, 0, O_KV_ITEMB }, { "kv-seed", 1, 0, O_KV_SEED }, { "kv-dilation", 1, 0, O_KV_DIL },
		{ "kv-bench", 1, 0, O_KV_BENCH }, { "kv-bench-requests", 1, 0, O_KV_BENCH_REQ },
		{ "help", 0, 0, O_HELP },
		{ 0, 0, 0, 0 },
	};
	bool have_smac = false, have_sip = false, have_src = false, have_kv_req = false;
	const char *verbs_only = NULL; /* an ibverbs option given (for the emulated check) */

	memset(c, 0, sizeof(*c));
	c->threads = 1;
	c->mode = rw_mode_find("rain");
	c->handler = rw_handler_find("sleep");
	c->rdma = rw_rdma_find("emulated");
	c->quota = 1;
	c->ring_slots = 64;
	c->slot_size = 4096;
	c->rkey = 0x52414e;
	c->qpn_base = 0x100;
	c->qp_type = RW_QP_UC;
	c->gid_index = -1;
	c->rdma_port = 1;
	c->rdma_mtu = 4096;
	c->dscp = 26;
	c->remote_qpn = 0xfffffe;
	c->fifo_size = 1024;
	c->nb_mbufs = 8191;
	c->max_service_ns = 10000000000ull;
	c->stats_period_s = 1.0;
	c->fetch_timeout_ns = 10000000;
	c->bench_warmup_s = 0.5;
	c->kv_keys = 100000;
	c->kv_key_bytes = 64;
	c->kv_item_bytes = 1024;
	c->kv_seed = 1;
	c->kv_dilation = 1.0;
	c->kv_bench_requests = 1000;
	rain_idle_parse("sleep", &c->idle);

	optind = 1;
	int o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case O_THREADS: c->threads = (uint32_t)parse_u64("threads", optarg, 1, RW_MAX_THREADS); break;
		case O_BASE: c->worker_base = (uint32_t)parse_u64("worker-base", optarg, 0, 0xffff); break;
		case O_MODE:
			if ((c->mode = rw_mode_find(optarg)) == NULL)
				rte_exit(EXIT_FAILURE, "--mode %s: expected %s\n", optarg, rw_mode_names());
			break;
		case O_HANDLER:
			if ((c->handler = rw_handler_find(optarg)) == NULL)
				rte_exit(EXIT_FAILURE, "--handler %s: expected %s\n", optarg, rw_handler_names());
			break;
		case O_IDLE:
			if (rain_idle_parse(optarg, &c->idle) != 0)
				rte_exit(EXIT_FAILURE, "--idle %s: expected spin, yield or sleep[:NS]\n", optarg);
			break;
		case O_QUOTA: c->quota = (uint32_t)parse_u64("quota", optarg, 0, 0xffff); break;
		case O_SLICE: c->slice = (uint32_t)parse_u64("slice", optarg, 0, 0xffff); break;
		case O_DISABLED: c->start_disabled = true; break;
		case O_PORT: c->port_id = (uint16_t)parse_u64("port", optarg, 0, RTE_MAX_ETHPORTS - 1); break;
		case O_SLOTS: c->ring_slots = (uint32_t)parse_u64("ring-slots", optarg, 1, 1u << 20); break;
		case O_SLOT_SIZE: c->slot_size = (uint32_t)parse_u64("slot-size", optarg, RAIN_SLOT_HDR_LEN, 1u << 20); break;
		case O_RKEY: c->rkey = (uint32_t)parse_u64("rkey", optarg, 0, UINT32_MAX); c->rkey_given = true; break;
		case O_QPN:
			c->qpn_base = (uint32_t)parse_u64("qpn-base", optarg, 1, 0xffffff);
			c->qpn_base_given = true;
			break;
		case O_RDMA:
			if ((c->rdma = rw_rdma_find(optarg)) == NULL) {
				if (strcmp(optarg, "ibverbs") == 0)
					rte_exit(EXIT_FAILURE, "--rdma ibverbs: this rain-worker was built without ibverbs; fix: "
						 "install libibverbs-dev and rebuild (make -C hosts/dpdk)\n");
				rte_exit(EXIT_FAILURE, "--rdma %s: expected %s\n", optarg, rw_rdma_names());
			}
			break;
		case O_QPTYPE:
			if (strcmp(optarg, "uc") == 0)
				c->qp_type = RW_QP_UC;
			else if (strcmp(optarg, "rc") == 0)
				c->qp_type = RW_QP_RC;
			else
				rte_exit(EXIT_FAILURE, "--qp-type %s: expected uc or rc\n", optarg);
			break;
		case O_ICRC: c->icrc_check = true; break;
		case O_RDEV:
			if (optarg[0] == '\0' || strlen(optarg) >= 64 || strchr(optarg, '/') != NULL)
				rte_exit(EXIT_FAILURE, "--rdma-dev %s: not an RDMA device name (like mlx5_0)\n", optarg);
			c->rdma_dev = optarg;
			verbs_only = "--rdma-dev";
			break;
		case O_RPORT: c->rdma_port = (uint8_t)parse_u64("rdma-port", optarg, 1, 255); verbs_only = "--rdma-port"; break;
		case O_GID: c->gid_index = (int)parse_u64("gid-index", optarg, 0, 255); verbs_only = "--gid-index"; break;
		case O_RMTU:
			c->rdma_mtu = (uint32_t)parse_u64("rdma-mtu", optarg, 1024, 4096);
			if (c->rdma_mtu != 1024 && c->rdma_mtu != 2048 && c->rdma_mtu != 4096)
				rte_exit(EXIT_FAILURE, "--rdma-mtu %s: expected 1024, 2048 or 4096\n", optarg);
			verbs_only = "--rdma-mtu";
			break;
		case O_DSCP: c->dscp = (uint8_t)parse_u64("dscp", optarg, 0, 63); verbs_only = "--dscp"; break;
		case O_RQPN:
			c->remote_qpn = (uint32_t)parse_u64("remote-qpn", optarg, 2, 0xfffffe); /* 0, 1: special; 0xffffff: multicast */
			verbs_only = "--remote-qpn";
			break;
		case O_PSN: c->psn = (uint32_t)parse_u64("psn", optarg, 0, 0xffffff); break;
		case O_FIFO: c->fifo_size = (uint32_t)parse_u64("fifo-size", optarg, 2, 1u << 20); break;
		case O_MBUFS: c->nb_mbufs = (uint32_t)parse_u64("mbufs", optarg, 1023, 1u << 24); break;
		case O_MAXSVC: c->max_service_ns = parse_u64("max-service", optarg, 0, UINT64_MAX); break;
		case O_CTL: c->ctl_path = optarg; break;
		case O_REG: c->reg_path = optarg; break;
		case O_STATS: c->stats_path = optarg; break;
		case O_PERIOD: c->stats_period_s = parse_f64("stats-period", optarg, 0.01, 3600); break;
		case O_KV_PATH:
			if (optarg[0] == '\0' || strlen(optarg) >= 3800)
				rte_exit(EXIT_FAILURE, "--kv-path: expected a folder path\n");
			c->kv_path = optarg;
			break;
		case O_KV_KEYS: c->kv_keys = (uint32_t)parse_u64("kv-keys", optarg, 1, 1u << 31); break;
		case O_KV_KEYB:
			c->kv_key_bytes = (uint32_t)parse_u64("kv-key-bytes", optarg, RAIN_KV_MIN_KEY_BYTES, RAIN_KV_MAX_KEY_BYTES);
			break;
		case O_KV_ITEMB: c->kv_item_bytes = (uint32_t)parse_u64("kv-item-bytes", optarg, 1, RAIN_KV_MAX_ITEM_BYTES); break;
		case O_KV_SEED: c->kv_seed = parse_u64("kv-seed", optarg, 0, UINT64_MAX); break;
		case O_KV_DIL: c->kv_dilation = parse_f64("kv-dilation", optarg, 1.0, 1e6); break;
		case O_KV_BENCH: parse_kv_bench(optarg, c); break;
		case O_KV_BENCH_REQ:
			c->kv_bench_requests = (uint32_t)parse_u64("kv-bench-requests", optarg, 10, 10000000);
			have_kv_req = true;
			break;
		case O_SMAC:
			if (rain_parse_mac(optarg, &c->switch_mac) != 0)
				rte_exit(EXIT_FAILURE, "--switch-mac %s: not a MAC address\n", optarg);
			have_smac = true;
			break;
		case O_SIP:
			if (rain_parse_ipv4(optarg, &c->switch_ip) != 0)
				rte_exit(EXIT_FAILURE, "--switch-ip %s: not an IPv4 address\n", optarg);
			have_sip = true;
			break;
		case O_SRC:
			if (rain_parse_ipv4(optarg, &c->src_ip) != 0)
				rte_exit(EXIT_FAILURE, "--src-ip %s: not an IPv4 address\n", optarg);
			have_src = true;
			break;
		case O_INLINE: c->inline_rx = true; break;
		case O_DISP: c->dispatcher = true; break;
		case O_FETCH_TMO: c->fetch_timeout_ns = parse_u64("fetch-timeout", optarg, 1000, 60000000000ull); break;
		case O_BENCH: c->bench_s = parse_f64("bench", optarg, 0.1, 3600); break;
		case O_BWARM: c->bench_warmup_s = parse_f64("bench-warmup", optarg, 0, 3600); break;
		case O_HELP: case 'h': usage(argv[0]); exit(0);
		default: usage(argv[0]); rte_exit(EXIT_FAILURE, "bad arguments\n");
		}
	}
	if (optind != argc)
		rte_exit(EXIT_FAILURE, "unexpected argument '%s'\n", argv[optind]);
	if (c->bench_s > 0) { /* the loopback port needs no addresses */
		if (!have_smac)
			rte_ether_unformat_addr("02:00:00:00:00:fe", &c->switch_mac);
		if (!have_sip)
			rain_parse_ipv4("10.255.0.254", &c->switch_ip);
		if (!have_src)
			rain_parse_ipv4("10.255.0.1", &c->src_ip);
		have_smac = have_sip = have_src = true;
	}
	if (have_kv_req && c->kv_bench_points == 0)
		rte_exit(EXIT_FAILURE, "--kv-bench-requests goes with --kv-bench OP:COUNT[,COUNT...]\n");
	if (c->kv_bench_points > 0) { /* the handler alone: no port, no addresses */
		if (c->handler != &rw_kv_handler)
			rte_exit(EXIT_FAILURE, "--kv-bench measures the RocksDB handler; fix: add --handler rocksdb "
				 "--kv-path DIR\n");
		if (c->bench_s > 0)
			rte_exit(EXIT_FAILURE, "--kv-bench runs without a port: not with --bench\n");
		for (uint32_t i = 0; i < c->kv_bench_points; i++)
			if (c->kv_bench[i].count > c->kv_keys)
				rte_exit(EXIT_FAILURE, "--kv-bench %s:%u: %u items from one start do not fit --kv-keys %u; "
					 "fix: counts up to %u, or a larger --kv-keys\n",
					 c->kv_bench[i].op == RAIN_KV_GET ? "get" : "scan", c->kv_bench[i].count,
					 c->kv_bench[i].count, c->kv_keys, RTE_MIN(c->kv_keys, RAIN_KV_MAX_COUNT));
		have_smac = have_sip = have_src = true;
	}
	if (!have_smac || !have_sip || !have_src)
		rte_exit(EXIT_FAILURE, "--switch-mac, --switch-ip and --src-ip are required (see --help)\n");
	if (c->inline_rx && c->threads != 1)
		rte_exit(EXIT_FAILURE, "--inline-rx needs --threads 1 (one port queue, one poller)\n");
	/* Tokens, ring regions and pulls belong to one thread each: a shared FIFO would hand
	 * a thread's task to another. */
	if (c->dispatcher && strcmp(c->mode->name, "report") != 0 && strcmp(c->mode->name, "push") != 0)
		rte_exit(EXIT_FAILURE, "--dispatcher works with --mode report or push (RackSched-SW), not %s: "
			 "tokens and pulls are per thread; fix: drop --dispatcher or use --mode report\n", c->mode->name);
	if (c->dispatcher && (c->inline_rx || c->bench_s > 0))
		rte_exit(EXIT_FAILURE, "--dispatcher needs the RX loop (the dispatcher): not with %s\n",
			 c->inline_rx ? "--inline-rx" : "--bench");
	if (!pow2(c->slot_size))
		rte_exit(EXIT_FAILURE, "--slot-size %u: must be a power of two\n", c->slot_size);
	if (!pow2(c->fifo_size))
		rte_exit(EXIT_FAILURE, "--fifo-size %u: must be a power of two\n", c->fifo_size);
	if (c->worker_base + c->threads - 1 > 0xffff)
		rte_exit(EXIT_FAILURE, "--worker-base %u + --threads %u exceed 16-bit worker ids\n", c->worker_base, c->threads);
	if (c->qpn_base + c->threads - 1 > 0xffffff)
		rte_exit(EXIT_FAILURE, "--qpn-base %u + --threads %u exceed 24-bit QPNs\n", c->qpn_base, c->threads);
	if (c->rdma == &rw_rdma_emulated && verbs_only != NULL)
		rte_exit(EXIT_FAILURE, "%s is an option of --rdma ibverbs; the emulated RDMA path has no device\n", verbs_only);
	if (c->rdma != &rw_rdma_emulated && (c->rkey_given || c->qpn_base_given))
		rte_exit(EXIT_FAILURE, "%s is an option of --rdma emulated; with %s the NIC chooses the rkey and QPNs "
			 "(the registration reports them)\n", c->rkey_given ? "--rkey" : "--qpn-base", c->rdma->name);
	if (c->rdma != &rw_rdma_emulated && c->slot_size > c->rdma_mtu)
		fprintf(stderr, "rain-worker: warning: --slot-size %u exceeds --rdma-mtu %u: a pre-written task longer "
			"than %u B does not fit one WRITE (paper 6.2) and the NIC drops it\n", c->slot_size, c->rdma_mtu,
			c->rdma_mtu);
	if ((uint64_t)c->ring_slots * c->slot_size * c->threads > (1ull << 34))
		rte_exit(EXIT_FAILURE, "the RDMA ring (%u threads x %u slots x %u B) is over 16 GiB\n", c->threads,
			 c->ring_slots, c->slot_size);
}

/* pthread trampoline for loops without an EAL lcore of their own. */
struct spawn {
	int (*fn)(void *);
	void *arg;
};

static void *pthread_body(void *p)
{
	struct spawn *s = p;
	if (rte_thread_register() != 0)
		fprintf(stderr, "rain-worker: rte_thread_register failed (%s): mbuf caches unused\n",
			rte_strerror(rte_errno));
	s->fn(s->arg);
	rte_thread_unregister();
	return NULL;
}

struct launched {
	bool is_pthread;
	unsigned int lcore;
	pthread_t tid;
	struct spawn sp;
};

static void launch(struct launched *l, unsigned int *next_lcore, int (*fn)(void *), void *arg, char *where, size_t n)
{
	unsigned int lc = rte_get_next_lcore(*next_lcore, 1, 0);
	if (lc < RTE_MAX_LCORE) {
		*next_lcore = lc;
		l->is_pthread = false;
		l->lcore = lc;
		snprintf(where, n, "lcore %u", lc);
		if (rte_eal_remote_launch(fn, arg, lc) != 0)
			rte_exit(EXIT_FAILURE, "cannot launch on lcore %u\n", lc);
		return;
	}
	*next_lcore = RTE_MAX_LCORE;
	l->is_pthread = true;
	l->sp.fn = fn;
	l->sp.arg = arg;
	snprintf(where, n, "pthread");
	int ret = pthread_create(&l->tid, NULL, pthread_body, &l->sp);
	if (ret != 0)
		rte_exit(EXIT_FAILURE, "pthread_create: %s\n", strerror(ret));
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Durations (L_w, T_w) must agree with CLOCK_MONOTONIC, which the sleep handler, the
 * agent and the peers use; EAL's nominal TSC rate can be off by 0.1 % in a VM. */
static uint64_t calibrate_tsc_hz(void)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	uint64_t c0 = rte_rdtsc();
	struct timespec d = { 0, 50 * 1000 * 1000 };
	nanosleep(&d, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	uint64_t c1 = rte_rdtsc();
	double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
	if (ns < 1e6 || c1 <= c0)
		return rte_get_tsc_hz();
	return (uint64_t)((double)(c1 - c0) * 1e9 / ns);
}

static void bench_report(struct rw_ctx *w, double secs, uint64_t tasks, uint64_t rx_busy, uint64_t th_busy,
			 uint64_t pkts)
{
	double ns_task = tasks ? secs * 1e9 / (double)tasks : 0;
	printf("{\"bench\": \"rain-worker\", \"mode\": \"%s\", \"handler\": \"%s\", \"threads\": %u, \"quota\": %u, "
	       "\"seconds\": %.3f, \"tasks\": %" PRIu64 ", \"tasks_per_s\": %.0f, \"ns_per_task\": %.1f, "
	       "\"rx_busy_ns_per_task\": %.1f, \"thread_busy_ns_per_task\": %.1f, \"packets_per_task\": %.2f, "
	       "\"rx_lcore\": \"%s\", \"thread0\": \"%s\"}\n",
	       w->c.mode->name, w->c.handler->name, w->c.threads, w->c.quota, secs, tasks,
	       secs > 0 ? (double)tasks / secs : 0, ns_task,
	       tasks ? (double)rw_cycles_to_ns(w, rx_busy) / (double)tasks : 0,
	       tasks ? (double)rw_cycles_to_ns(w, th_busy) / (double)tasks : 0,
	       tasks ? (double)pkts / (double)tasks : 0, w->rx_where, w->th[0].where);
	fflush(stdout);
}

static uint64_t sum_tasks(const struct rw_ctx *w)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < w->c.threads; i++)
		n += RW_LOAD(w->ctl->workers[i].stats.tasks_done);
	return n;
}

static uint64_t sum_thread_busy(const struct rw_ctx *w)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < w->c.threads; i++)
		n += RW_LOAD(w->th[i].loop_busy_cycles);
	return n;
}

int main(int argc, char **argv)
{
	struct rw_ctx *w = &ctx;
	sigset_t sigs;

	/* Block the stop signals before EAL creates threads, so every thread inherits the
	 * mask and only the main thread takes them (sigtimedwait below): a stop never
	 * interrupts a task or a syscall in the data path. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	int ret = rte_eal_init(argc, argv);
	if (ret < 0)
		rte_exit(EXIT_FAILURE, "EAL initialisation failed: %s\n", rte_strerror(rte_errno));
	argc -= ret;
	argv += ret;
	argv[0] = (char *)"rain-worker";
	parse_args(argc, argv, &w->c);
	const struct rw_conf *c = &w->c;
	if (c->kv_bench_points > 0) { /* no port, no threads: the handler alone, then exit */
		int rc = rw_kv_bench(w);
		rain_eal_cleanup();
		return rc < 0 ? EXIT_FAILURE : 0;
	}

	w->tsc_hz = calibrate_tsc_hz();
	w->start_tsc = rte_rdtsc();
	static const struct rte_mbuf_dynfield meta_desc = {
		.name = "rain_worker_meta", .size = sizeof(struct rw_meta), .align = __alignof__(struct rw_meta),
	};
	w->arrival_off = rte_mbuf_dynfield_register(&meta_desc);
	if (w->arrival_off < 0)
		rte_exit(EXIT_FAILURE, "cannot register the mbuf metadata field: %s\n", rte_strerror(rte_errno));

	struct rain_port_conf pc = { .port_id = c->port_id, .nb_rxq = 1, .nb_txq = 1, .nb_desc = 1024,
				     .nb_mbufs = c->nb_mbufs, .pool_name = "rw_pool" };
	w->mp = rain_port_init(&pc);
	if (rte_eth_macaddr_get(c->port_id, &w->self.mac) != 0)
		rte_exit(EXIT_FAILURE, "port %u: no MAC address\n", c->port_id);
	w->self.ip = c->src_ip;
	w->self.port = rte_cpu_to_be_16(RAIN_UDP_PORT);
	w->sw.mac = c->switch_mac;
	w->sw.ip = c->switch_ip;
	w->sw.port = rte_cpu_to_be_16(RAIN_UDP_PORT);

	rw_ctl_create(w);
	if (c->rdma->init(w) != 0) /* the variants exit with their own message; this is a backstop */
		rte_exit(EXIT_FAILURE, "RDMA ring (%s, %u x %u x %u B): %s\n", c->rdma->name, c->threads, c->ring_slots,
			 c->slot_size, strerror(errno));
	if (c->handler->init && c->handler->init(w) < 0)
		rte_exit(EXIT_FAILURE, "handler %s: initialisation failed\n", c->handler->name);
	/* A quota above what the FIFO or the ring can hold would overrun them (6.1). */
	w->quota_cap = RTE_MIN(c->fifo_size - 1, c->ring_slots);
	w->quota_cap = RTE_MIN(w->quota_cap, 0xffffu);
	if (c->quota > w->quota_cap)
		fprintf(stderr, "rain-worker: --quota %u is clamped to %u (FIFO/ring capacity)\n", c->quota, w->quota_cap);

	/* RTS producers: threads sharing a CPU can be preempted mid-enqueue without
	 * stalling the others (the classic MP ring waits for earlier producers). */
	w->tx_ring = rte_ring_create("rw_tx", 4096, rte_socket_id(), RING_F_MP_RTS_ENQ | RING_F_SC_DEQ);
	if (w->tx_ring == NULL)
		rte_exit(EXIT_FAILURE, "cannot create the TX ring: %s\n", rte_strerror(rte_errno));
	w->th = rte_zmalloc("rw_threads", sizeof(*w->th) * c->threads, RTE_CACHE_LINE_SIZE);
	if (w->th == NULL)
		rte_exit(EXIT_FAILURE, "cannot allocate thread state\n");
	if (c->dispatcher) { /* one producer (the RX loop), every thread consumes */
		w->shared_fifo = rte_ring_create("rw_shared", c->fifo_size, rte_socket_id(), RING_F_SP_ENQ);
		if (w->shared_fifo == NULL)
			rte_exit(EXIT_FAILURE, "cannot create the shared FIFO: %s\n", rte_strerror(rte_errno));
	}
	for (uint32_t i = 0; i < c->threads; i++) {
		struct rw_thread *t = &w->th[i];
		char name[RTE_RING_NAMESIZE];
		snprintf(name, sizeof(name), "rw_fifo%u", i);
		t->fifo = w->shared_fifo ? w->shared_fifo
					 : rte_ring_create(name, c->fifo_size, rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (t->fifo == NULL)
			rte_exit(EXIT_FAILURE, "cannot create FIFO %u: %s\n", i, rte_strerror(rte_errno));
		t->w = w;
		t->idx = i;
		t->worker_id = (uint16_t)(c->worker_base + i);
		t->report_id = (uint16_t)(c->dispatcher ? c->worker_base : t->worker_id);
		t->ctl = &w->ctl->workers[i];
		t->region = w->ring.base + (uint64_t)i * w->ring.region_size;
		t->qpn = w->ring.qpn[i];
		t->last_enabled = t->ctl->knobs.enabled;
		t->txq = c->inline_rx ? 0 : -1;
	}

	/* Launch: RX/TX loop first, then the threads. */
	struct launched *ls = calloc(c->threads + 1, sizeof(*ls));
	if (ls == NULL)
		rte_exit(EXIT_FAILURE, "out of memory\n");
	unsigned int next = (unsigned int)-1; /* rte_get_next_lcore starts after it */
	uint32_t nl = c->inline_rx ? 1 : c->threads + 1;
	if (c->inline_rx) {
		launch(&ls[0], &next, rw_inline_main, w, w->th[0].where, sizeof(w->th[0].where));
		snprintf(w->rx_where, sizeof(w->rx_where), "inline (%s)", w->th[0].where);
	} else {
		launch(&ls[0], &next, rw_rx_main, w, w->rx_where, sizeof(w->rx_where));
		for (uint32_t i = 0; i < c->threads; i++)
			launch(&ls[1 + i], &next, rw_thread_main, &w->th[i], w->th[i].where, sizeof(w->th[i].where));
	}

	double t_wait = mono_s();
	while (__atomic_load_n(&w->started, __ATOMIC_ACQUIRE) < c->threads + 1) {
		if (mono_s() - t_wait > 10)
			rte_exit(EXIT_FAILURE, "threads did not start within 10 s\n");
		usleep(1000);
	}
	rw_ctl_ready(w);
	if (c->reg_path && rw_write_registration(w) != 0)
		rte_exit(EXIT_FAILURE, "--registration %s: %s\n", c->reg_path, strerror(errno));
	if (c->stats_path && rw_write_stats(w, false) != 0) /* exists from "ready" on */
		rte_exit(EXIT_FAILURE, "--stats %s: %s\n", c->stats_path, strerror(errno));
	fprintf(stderr, "rain-worker: port %u, %u thread(s) %u..%u, mode %s, handler %s, rx on %s\n", c->port_id,
		c->threads, c->worker_base, c->worker_base + c->threads - 1, c->mode->name, c->handler->name, w->rx_where);
	printf("rain-worker ready\n");
	fflush(stdout);

	/* Main loop: signals and periodic statistics (and the benchmark clock). */
	double t0 = mono_s(), next_stats = t0 + c->stats_period_s;
	double bench_t0 = t0 + c->bench_warmup_s, bench_end = bench_t0 + c->bench_s;
	uint64_t b_tasks = 0, b_rx = 0, b_th = 0, b_pkts = 0;
	bool bench_started = false;
	for (;;) {
		double now = mono_s();
		if (c->bench_s > 0) {
			if (!bench_started && now >= bench_t0) {
				b_tasks = sum_tasks(w);
				b_rx = RW_LOAD(w->rx.busy_cycles);
				b_th = sum_thread_busy(w);
				b_pkts = RW_LOAD(w->rx.rx_packets) + RW_LOAD(w->rx.tx_packets);
				bench_t0 = now;
				bench_started = true;
			}
			if (bench_started && now >= bench_end) {
				bench_report(w, now - bench_t0, sum_tasks(w) - b_tasks, RW_LOAD(w->rx.busy_cycles) - b_rx,
					     sum_thread_busy(w) - b_th,
					     RW_LOAD(w->rx.rx_packets) + RW_LOAD(w->rx.tx_packets) - b_pkts);
				break;
			}
		}
		if (c->stats_path && now >= next_stats) {
			rw_write_stats(w, false);
			next_stats = now + c->stats_period_s;
		}
		double until = next_stats;
		if (c->bench_s > 0)
			until = RTE_MIN(until, bench_started ? bench_end : bench_t0);
		double dt = RTE_MAX(0.001, RTE_MIN(until - mono_s(), 1.0));
		struct timespec ts = { .tv_sec = (time_t)dt, .tv_nsec = (long)((dt - (double)(time_t)dt) * 1e9) };
		int sig = sigtimedwait(&sigs, NULL, &ts);
		if (sig == SIGINT || sig == SIGTERM) {
			fprintf(stderr, "rain-worker: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
			break;
		}
	}

	__atomic_store_n(&w->quit, 1, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < nl; i++) {
		if (ls[i].is_pthread)
			pthread_join(ls[i].tid, NULL);
		else
			rte_eal_wait_lcore(ls[i].lcore);
	}
	__atomic_store_n(&w->ctl->hdr.ready, 0, __ATOMIC_RELEASE); /* the agent sees we are gone */
	/* The final books are exact: a thread's last fifo_len was taken at its last task, and
	 * the RX loop may have queued more before it stopped, or the thread may have dropped
	 * the rest of a burst when it saw the stop. With every thread joined, what a thread
	 * received and never ran is its dispatched count less its finished one. */
	for (uint32_t i = 0; i < w->c.threads; i++) {
		uint64_t held = rw_held(&w->th[i]);
		RW_STORE(w->ctl->workers[i].stats.fifo_len, held > UINT32_MAX ? UINT32_MAX : (uint32_t)held);
	}
	if (c->stats_path && rw_write_stats(w, true) != 0)
		fprintf(stderr, "rain-worker: --stats %s: %s\n", c->stats_path, strerror(errno));
	rte_eth_dev_stop(c->port_id);
	rte_eth_dev_close(c->port_id);
	c->rdma->fini(w);
	munmap(w->ctl, w->ctl_size);
	free(ls);
	rain_eal_cleanup();
	return 0;
}
