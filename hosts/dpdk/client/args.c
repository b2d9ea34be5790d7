/* SPDX-License-Identifier: Apache-2.0
 *
 * The options after `--`. Parsed before the EAL starts, so a typo costs no port
 * set-up: every mistake gets a message naming the option and the fix, and exit 2.
 */
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

void rc_usage(FILE *f, const char *prog)
{
	fprintf(f,
"usage: %s EAL-OPTIONS -- OPTIONS\n"
"\n"
"An open-loop load generator for Rain: tasks leave at times drawn from the clock,\n"
"never paced by replies, and latency counts from each task's *intended* send time.\n"
"\n"
"Where tasks go (UDP port %u both ways; source MAC = the port's MAC):\n"
"  --src-ip A               this client's IPv4 address (required)\n"
"  --dst-mac M --dst-ip A   the switch's scheduling address, or a worker (required)\n"
"  --client-id H            client host id 0..255 (default 0); lcore i sends as H<<8|i\n"
"  --port N                 DPDK port id (default 0)\n"
"\n"
"When (the total rate is split evenly over the lcores):\n"
"  --rate RPS               a fixed rate, or\n"
"  --schedule T:RPS[:C+C],...  piecewise: from T seconds after start, RPS; T starts at 0,\n"
"                           e.g. \"0:1000,2.5:3000,4:1000\" (start = beginning of warm-up);\n"
"                           C+C: only these --class names in that piece, by their\n"
"                           weights (default: all), e.g. \"0:1000:short,1:1000:long\"\n"
"  --arrival poisson|constant   inter-arrival times (default poisson)\n"
"  --warmup S               seconds before measuring (default 1)\n"
"  --duration S             seconds measured (default 10); then a drain of up to the\n"
"                           timeout (twice it with --resubmit) for outstanding replies\n"
"\n"
"What (repeat --class for a mix; default task:1:0:exp:10000:8):\n"
"  --class NAME:WEIGHT:TYPE:SERVICE:PAYLOAD\n"
"      NAME     tag in the histogram logs ([A-Za-z0-9_.-])\n"
"      WEIGHT   relative frequency (> 0)\n"
"      TYPE     rain_hdr.task_type 0..255 (the switch's slice table keys on it)\n"
"      SERVICE  service time in ns, carried big-endian in rain_hdr.data:\n"
"               const:NS | exp:MEAN_NS | bimodal:NS1:NS2:P1 (P1 = probability of NS1)\n"
"               | keys-exp:MEAN_KEYS:NS_PER_KEY (key count geometric with that mean,\n"
"               service = keys * NS_PER_KEY, RocksDB-like)\n"
"               | kv-get:COUNT:KEYS | kv-scan:COUNT:KEYS (kv-get-exp, kv-scan-exp: COUNT\n"
"               geometric with that mean): a request for rain-worker --handler rocksdb,\n"
"               COUNT keys from a first key uniform over the database's KEYS, carried in\n"
"               rain_hdr.data (rain_kv.h); its service time is the one the worker answers\n"
"      PAYLOAD  8 = inline; more = a large task (RAIN_F_LARGE): a rain_slot_hdr, filler,\n"
"               then 4 zero bytes for the RoCE iCRC; max(PAYLOAD, 24) rounded up to 4,\n"
"               at most %u\n"
"  --large-fraction F       any class's inline task is sent large with probability F\n"
"  --large-bytes N          ... of N payload bytes (default 64)\n"
"  --dilation K             recorded in the summary, and scales the lateness threshold\n"
"                           (1 us of paper time); pass rates and service times\n"
"                           already dilated (emulated testbeds run k times slower)\n"
"\n"
"Admission and loss:\n"
"  --max-outstanding N      this client's share of Q_max; a task that finds N outstanding\n"
"                           waits in a local FIFO (its latency still counts from its\n"
"                           intended time) and leaves when a reply frees a slot\n"
"  --timeout-us T           per-request timeout (default 1000000)\n"
"  --resubmit               resend a timed-out or rejected request once (RAIN_F_RESUBMIT)\n"
"\n"
"Output and running:\n"
"  --out DIR                DIR/latency.hlog, DIR/slowdown.hlog (HdrHistogram interval\n"
"                           logs, one interval per second per class) and DIR/summary.json;\n"
"                           without it the summary goes to stdout\n"
"  --trace FILE             CSV of every first send: lcore, client_id, request_id,\n"
"                           class, intended_ns, sent_ns (ns since start), service_ns\n"
"                           (asked of the worker), latency_ns (-1: no answer) and large\n"
"                           (1: sent with a payload); the model beside a measurement\n"
"                           replays it\n"
"  --seed N                 random seed (default 1; lcore i uses N + i)\n"
"  --idle spin|yield|sleep[:NS]  when a poll finds nothing (default yield: on shared\n"
"                           cores spinning starves the switch and the workers)\n"
"  --tx-only                never read replies (generator benchmarks on net_null)\n"
"  --wait-start             after \"rain-client ready\", wait for SIGUSR1 before starting\n"
"                           (initialise while the switch is programmed)\n"
"  --epoch N                the point's identity 0..255 (default 0), the top 8 bits of\n"
"                           every request_id: an answer with another is a stale one from\n"
"                           another point, counted (other_point) and dropped; at most\n"
"                           2^24 requests per lcore per run\n"
"  --realtime PRIO          run the load lcores at SCHED_FIFO PRIO (1-99; 0: no) while\n"
"                           the load runs, not during start-up; a lcore that has run 1 ms\n"
"                           without sleeping sleeps 0.25 ms (on shared cores: it preempts\n"
"                           the pollers when a send is due, and never holds a core)\n"
"  --help                   this text\n"
"\n"
"Lcores: every EAL lcore (-l) is a load lcore with its own RX/TX queue pair, so the\n"
"port needs that many queues: on af_packet add qpairs=N to the vdev.\n"
"\n"
"Example (emulated host, 3 kRPS Poisson, 80%% short / 20%% long tasks):\n"
"  %s -l 0 --no-huge --no-pci --file-prefix=c0 --vdev=net_af_packet0,iface=dp0 -- \\\n"
"     --src-ip 10.81.0.1 --dst-mac 02:52:4d:aa:00:02 --dst-ip 10.81.0.2 --rate 3000 \\\n"
"     --class short:8:0:const:10000:8 --class long:2:1:const:100000:8 --out /tmp/run1\n"
"\n"
"Prints \"rain-client ready\" when the port is up and \"rain-client done\" at the end;\n"
"SIGINT/SIGTERM stop it early with what it has (\"partial\": true). Exit 2: bad options.\n",
		prog, RAIN_UDP_PORT, RC_MAX_PAYLOAD, prog);
}

static int fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "rain-client: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see --help)\n");
	return 2;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !isfinite(v) || v < lo || v > hi)
		return fail("%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
	*out = v;
	return 0;
}

static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	if (*s == '\0' || *s == '-')
		return fail("%s: '%s' is not an integer in [%llu, %llu]", opt, s, (unsigned long long)lo,
			    (unsigned long long)hi);
	unsigned long long v = strtoull(s, &end, 0);
	if (*end != '\0' || v < lo || v > hi)
		return fail("%s: '%s' is not an integer in [%llu, %llu]", opt, s, (unsigned long long)lo,
			    (unsigned long long)hi);
	*out = v;
	return 0;
}

/* Each schedule piece's classes, by name, once every --class is known: a bit mask over
 * cfg->cls (all of them when the piece names none). */
static int resolve_pieces(struct rc_config *cfg)
{
	for (unsigned i = 0; i < cfg->nseg; i++) {
		struct rc_segment *g = &cfg->seg[i];
		char buf[sizeof(g->cls_names)];
		g->cls_mask = 0;
		if (g->cls_names[0] == '\0') {
			g->cls_mask = cfg->ncls >= 32 ? UINT32_MAX : (1u << cfg->ncls) - 1;
			continue;
		}
		strcpy(buf, g->cls_names);
		for (char *save = NULL, *n = strtok_r(buf, "+", &save); n; n = strtok_r(NULL, "+", &save)) {
			unsigned c = 0;
			while (c < cfg->ncls && strcmp(cfg->cls[c].name, n) != 0)
				c++;
			if (c == cfg->ncls)
				return fail("--schedule: the piece at %g s names class '%s', which no --class defines",
					    g->t_s, n);
			g->cls_mask |= 1u << c;
		}
		if (g->cls_mask == 0)
			return fail("--schedule: the piece at %g s names no class", g->t_s);
	}
	return 0;
}

static int parse_schedule(const char *s, struct rc_config *cfg)
{
	char buf[1024];
	if (strlen(s) >= sizeof(buf))
		return fail("--schedule: too long");
	strcpy(buf, s);
	cfg->nseg = 0;
	for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(item, ':');
		if (colon == NULL)
			return fail("--schedule: '%s' is not T:RPS[:CLASS+CLASS...]", item);
		*colon = '\0';
		if (cfg->nseg == RC_MAX_SEGMENTS)
			return fail("--schedule: at most %d pieces", RC_MAX_SEGMENTS);
		struct rc_segment *g = &cfg->seg[cfg->nseg];
		char *names = strchr(colon + 1, ':');
		g->cls_names[0] = '\0';
		if (names != NULL) {
			*names++ = '\0';
			if (*names == '\0' || strlen(names) >= sizeof(g->cls_names))
				return fail("--schedule: piece at %s s: give its classes as NAME+NAME...", item);
			strcpy(g->cls_names, names);
		}
		if (parse_double("--schedule time", item, 0, 1e6, &g->t_s) ||
		    parse_double("--schedule rate", colon + 1, 0, 1e9, &g->rps))
			return 2;
		if (cfg->nseg == 0 && g->t_s != 0)
			return fail("--schedule: the first piece starts at 0, not %g", g->t_s);
		if (cfg->nseg > 0 && g->t_s <= cfg->seg[cfg->nseg - 1].t_s)
			return fail("--schedule: times must increase (%g after %g)", g->t_s, cfg->seg[cfg->nseg - 1].t_s);
		cfg->nseg++;
	}
	if (cfg->nseg == 0)
		return fail("--schedule: empty");
	return 0;
}

static int parse_class(const char *s, struct rc_config *cfg)
{
	char buf[256], err[160];
	char *tok[16];
	unsigned n = 0;
	if (cfg->ncls == RC_MAX_CLASSES)
		return fail("--class: at most %d classes", RC_MAX_CLASSES);
	if (strlen(s) >= sizeof(buf))
		return fail("--class: too long");
	strcpy(buf, s);
	for (char *p = buf;; p++) { /* split on ':' keeping empty fields, so they are reported */
		if (n == 16)
			return fail("--class '%s': too many fields", s);
		tok[n++] = p;
		p = strchr(p, ':');
		if (p == NULL)
			break;
		*p = '\0';
	}
	if (n < 5)
		return fail("--class '%s': expected NAME:WEIGHT:TYPE:SERVICE:PAYLOAD", s);
	struct rc_class *c = &cfg->cls[cfg->ncls];
	memset(c, 0, sizeof(*c));
	size_t len = strlen(tok[0]);
	if (len == 0 || len >= RC_NAME_LEN)
		return fail("--class '%s': NAME must have 1..%d characters", s, RC_NAME_LEN - 1);
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)tok[0][i]) && !strchr("_.-", tok[0][i]))
			return fail("--class '%s': NAME may use only letters, digits, '_', '.', '-'", s);
	for (unsigned i = 0; i < cfg->ncls; i++)
		if (strcmp(cfg->cls[i].name, tok[0]) == 0)
			return fail("--class: the name '%s' is used twice", tok[0]);
	strcpy(c->name, tok[0]);
	uint64_t type, payload;
	if (parse_double("--class WEIGHT", tok[1], 1e-12, 1e12, &c->weight) ||
	    parse_u64("--class TYPE", tok[2], 0, 255, &type) ||
	    parse_u64("--class PAYLOAD", tok[n - 1], RAIN_INLINE_BYTES, RC_MAX_PAYLOAD, &payload))
		return 2;
	c->task_type = (uint8_t)type;
	c->payload = (uint32_t)payload;
	if (service_parse(&tok[3], n - 4, &c->svc, err, sizeof(err)) != 0)
		return fail("--class '%s': %s", s, err);
	cfg->ncls++;
	return 0;
}

enum {
	O_CLIENT_ID = 256, O_PORT, O_SRC_IP, O_DST_MAC, O_DST_IP, O_ARRIVAL, O_RATE, O_SCHEDULE, O_CLASS,
	O_LARGE_FRACTION, O_LARGE_BYTES, O_DILATION, O_WARMUP, O_DURATION, O_MAX_OUT, O_TIMEOUT, O_RESUBMIT,
	O_SEED, O_IDLE, O_OUT, O_TX_ONLY, O_WAIT_START, O_TRACE, O_EPOCH, O_REALTIME, O_HELP,
};

static const struct option longopts[] = {
	{"client-id", required_argument, NULL, O_CLIENT_ID},
	{"port", required_argument, NULL, O_PORT},
	{"src-ip", required_argument, NULL, O_SRC_IP},
	{"dst-mac", required_argument, NULL, O_DST_MAC},
	{"dst-ip", required_argument, NULL, O_DST_IP},
	{"arrival", required_argument, NULL, O_ARRIVAL},
	{"rate", required_argument, NULL, O_RATE},
	{"schedule", required_argument, NULL, O_SCHEDULE},
	{"class", required_argument, NULL, O_CLASS},
	{"large-fraction", required_argument, NULL, O_LARGE_FRACTION},
	{"large-bytes", required_argument, NULL, O_LARGE_BYTES},
	{"dilation", required_argument, NULL, O_DILATION},
	{"warmup", required_argument, NULL, O_WARMUP},
	{"duration", required_argument, NULL, O_DURATION},
	{"max-outstanding", required_argument, NULL, O_MAX_OUT},
	{"timeout-us", required_argument, NULL, O_TIMEOUT},
	{"resubmit", no_argument, NULL, O_RESUBMIT},
	{"seed", required_argument, NULL, O_SEED},
	{"idle", required_argument, NULL, O_IDLE},
	{"out", required_argument, NULL, O_OUT},
	{"tx-only", no_argument, NULL, O_TX_ONLY},
	{"wait-start", no_argument, NULL, O_WAIT_START},
	{"trace", required_argument, NULL, O_TRACE},
	{"epoch", required_argument, NULL, O_EPOCH},
	{"realtime", required_argument, NULL, O_REALTIME},
	{"help", no_argument, NULL, O_HELP},
	{NULL, 0, NULL, 0},
};

int rc_parse_args(int argc, char **argv, struct rc_config *cfg)
{
	bool have_src = false, have_dmac = false, have_dip = false, have_rate = false, have_sched = false;
	uint64_t u;
	int opt;

	memset(cfg, 0, sizeof(*cfg));
	cfg->arrival = arrival_find("poisson");
	cfg->large_bytes = 64;
	cfg->dilation = 1;
	cfg->warmup_s = 1;
	cfg->duration_s = 10;
	cfg->timeout_us = 1000000;
	cfg->seed = 1;
	rain_idle_parse("yield", &cfg->idle);
	cfg->src.port = cfg->dst.port = rte_cpu_to_be_16(RAIN_UDP_PORT);

	optind = 0; /* GNU getopt: start afresh */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		int rc = 0;
		switch (opt) {
		case O_CLIENT_ID:
			rc = parse_u64("--client-id", optarg, 0, 255, &u);
			cfg->client_host = (uint8_t)u;
			break;
		case O_PORT:
			rc = parse_u64("--port", optarg, 0, RTE_MAX_ETHPORTS - 1, &u);
			cfg->port_id = (uint16_t)u;
			break;
		case O_SRC_IP:
			if (rain_parse_ipv4(optarg, &cfg->src.ip) != 0)
				rc = fail("--src-ip: '%s' is not an IPv4 address", optarg);
			have_src = true;
			break;
		case O_DST_MAC:
			if (rain_parse_mac(optarg, &cfg->dst.mac) != 0)
				rc = fail("--dst-mac: '%s' is not a MAC address (xx:xx:xx:xx:xx:xx)", optarg);
			have_dmac = true;
			break;
		case O_DST_IP:
			if (rain_parse_ipv4(optarg, &cfg->dst.ip) != 0)
				rc = fail("--dst-ip: '%s' is not an IPv4 address", optarg);
			have_dip = true;
			break;
		case O_ARRIVAL:
			cfg->arrival = arrival_find(optarg);
			if (cfg->arrival == NULL)
				rc = fail("--arrival: '%s' is not poisson or constant", optarg);
			break;
		case O_RATE:
			rc = parse_double("--rate", optarg, 1e-3, 1e9, &cfg->seg[0].rps);
			cfg->seg[0].t_s = 0;
			cfg->nseg = 1;
			have_rate = true;
			break;
		case O_SCHEDULE:
			rc = parse_schedule(optarg, cfg);
			have_sched = true;
			break;
		case O_CLASS:
			rc = parse_class(optarg, cfg);
			break;
		case O_LARGE_FRACTION:
			rc = parse_double("--large-fraction", optarg, 0, 1, &cfg->large_fraction);
			break;
		case O_LARGE_BYTES:
			rc = parse_u64("--large-bytes", optarg, RAIN_INLINE_BYTES + 1, RC_MAX_PAYLOAD, &u);
			cfg->large_bytes = (uint32_t)u;
			break;
		case O_DILATION:
			rc = parse_double("--dilation", optarg, 1e-6, 1e6, &cfg->dilation);
			break;
		case O_WARMUP:
			rc = parse_double("--warmup", optarg, 0, 86400, &cfg->warmup_s);
			break;
		case O_DURATION:
			rc = parse_double("--duration", optarg, 0.001, 86400, &cfg->duration_s);
			break;
		case O_MAX_OUT:
			rc = parse_u64("--max-outstanding", optarg, 1, 1u << 24, &u);
			cfg->max_outstanding = (uint32_t)u;
			break;
		case O_TIMEOUT:
			rc = parse_u64("--timeout-us", optarg, 1, 3600ull * 1000000, &cfg->timeout_us);
			break;
		case O_RESUBMIT:
			cfg->resubmit = true;
			break;
		case O_SEED:
			rc = parse_u64("--seed", optarg, 0, UINT64_MAX, &cfg->seed);
			break;
		case O_IDLE:
			if (rain_idle_parse(optarg, &cfg->idle) != 0)
				rc = fail("--idle: '%s' is not spin, yield or sleep[:NS]", optarg);
			break;
		case O_OUT:
			cfg->out_dir = optarg;
			break;
		case O_WAIT_START:
			cfg->wait_start = true;
			break;
		case O_TX_ONLY:
			cfg->tx_only = true;
			break;
		case O_TRACE:
			cfg->trace = optarg;
			break;
		case O_EPOCH:
			rc = parse_u64("--epoch", optarg, 0, 255, &u);
			cfg->epoch = (uint8_t)u;
			break;
		case O_REALTIME:
			rc = parse_u64("--realtime", optarg, 0, 99, &u);
			cfg->realtime = (int)u;
			break;
		case O_HELP:
		case 'h':
			rc_usage(stdout, "rain-client");
			exit(0);
		case ':':
			return fail("%s needs a value", argv[optind - 1]);
		default:
			return fail("unknown option '%s'", argv[optind - 1]);
		}
		if (rc != 0)
			return rc;
	}
	if (optind < argc)
		return fail("unexpected argument '%s'", argv[optind]);
	if (!have_src || !have_dmac || !have_dip)
		return fail("--src-ip, --dst-mac and --dst-ip are required");
	if (have_rate == have_sched)
		return fail("give exactly one of --rate and --schedule");
	bool any = false;
	for (unsigned i = 0; i < cfg->nseg; i++)
		any |= cfg->seg[i].rps > 0;
	if (!any)
		return fail("--schedule: every rate is 0");
	if (cfg->ncls == 0) {
		char def[] = "task:1:0:exp:10000:8";
		if (parse_class(def, cfg) != 0)
			return 2;
	}
	return resolve_pieces(cfg);
}
