/* SPDX-License-Identifier: Apache-2.0
 *
 * rpc-client: an open-loop load generator for the synthetic RPC of rpc_proto.h over
 * many TCP connections (Rakaia's measured layer; the paper extends Lancet).
 *
 * The load is one arrival schedule (Poisson or constant), drawn ahead from the run's
 * start, never from when the last send left: a request is sent when its intended time
 * comes, whatever is outstanding, and its latency is measured from that intended time,
 * so a stall of the server or of the client cannot hide (coordinated omission). A send
 * that leaves more than --late-ns after its intended time is counted late, as
 * rain-client counts them. Each request's connection is drawn with it, uniformly or by
 * Zipf (connection k with weight 1 / (k + 1)^s).
 *
 * Threads, each on its own CPU of those the process may use, read the answers of the
 * connections c with c mod threads == their index, and every thread sends whichever
 * request is due next, on any connection (one sender at a time on each). So a thread
 * whose core is taken away (a hypervisor stalling one vCPU for 10 ms) delays only the
 * request it was sending: the threads that run send the rest on time.
 *
 * --protocol memcached speaks the memcached binary protocol instead (GET and SET of
 * --keys keys, --get-fraction of them GETs, SETs of --payload bytes), so that a real
 * memcached can be the server, as Lancet's users do; the request's opaque field carries
 * its sequence number, and a GET that misses is an answer like any other (counted).
 *
 * Output in --out, in rain-client's formats so that rainmaker reads a point of either
 * alike: latency.hlog and slowdown.hlog (HdrHistogram interval logs of the requests whose
 * intended time is in the measurement window, after --warmup, tagged with the --class
 * name; slowdown x 1000 is latency over the service time the request asked for) and
 * summary.json (rain-client's counters, totals and per class, and rpc-client's own).
 * The arrival processes, service distributions, random generator and histograms are
 * rain-client's own (hosts/dpdk/client/workload.c, hdr.c).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hdr.h"
#include "rpc_net.h"
#include "rpc_proto.h"
#include "workload.h"

#define MAX_THREADS 64
#define MAX_CONNECTIONS 100000
#define RING (1u << 20) /* outstanding requests a thread can track */

/* memcached's binary protocol (protocol_binary.h of memcached): a 24-byte header */
#define MC_REQ 0x80
#define MC_RESP 0x81
#define MC_GET 0x00
#define MC_SET 0x01
#define MC_HDR_LEN 24u
#define MC_MAX_VALUE 8192u
struct mc_hdr {
	uint8_t magic, opcode;
	uint16_t key_len;
	uint8_t extras_len, data_type;
	uint16_t status; /* request: vbucket */
	uint32_t body_len;
	uint32_t opaque;
	uint64_t cas;
} __attribute__((packed));

enum protocol { PROTO_RPC, PROTO_MEMCACHED };

static struct {
	struct sockaddr_in addr;
	int connections, threads;
	double rate, warmup_s, duration_s, interval_s, zipf_s;
	const struct arrival_ops *arrival;
	struct service service;
	uint32_t payload;
	uint64_t seed;
	int64_t late_ns, drain_ns;
	const char *out;
	int trace;		  /* --trace: every request to out/trace.csv */
	const char *cls;	  /* the class name: the logs' tag and summary.json's class */
	char service_arg[128];	  /* --service as given */
	enum protocol protocol;
	double get_fraction;
	uint32_t keys;
	uint32_t bufsize; /* a connection's receive buffer: room for at least two answers */
	int realtime;	  /* SCHED_FIFO priority of the load threads while the load runs (0: none) */
} cfg = {.cls = "rpc", .threads = 1, .interval_s = 0.1, .seed = 1, .late_ns = 20000, .drain_ns = 1000000000,
	 .get_fraction = 0.9, .keys = 10000, .bufsize = RPC_HDR_LEN * 64};

struct conn {
	int fd;
	uint32_t have;
	unsigned char *buf; /* cfg.bufsize */
	atomic_flag sending; /* any thread may send on it: one at a time */
};

/* One request in the trace (--trace), by sequence number: rain-client's columns. */
struct traced {
	int64_t intended, sent, latency; /* latency -1: never answered */
	uint64_t svc;
};

/* The schedule: one arrival process for the whole client, drawn ahead into a ring.
 * Every thread sends whichever request is due next, so a thread its core was taken
 * from (a hypervisor's stall of one vCPU, an interrupt storm) delays none but the
 * request it was sending; the others go out from the threads that run. */
#define SCHED_RING (1u << 16)
struct planned {
	int64_t due; /* intended send time, from start_ns */
	uint64_t svc;	 /* the service time it asks for (0: memcached) */
	uint32_t conn;	 /* the connection it goes on */
	uint32_t key;	 /* memcached: its key */
	int get;	 /* memcached: a GET, else a SET */
};
static struct {
	struct planned *ring;
	_Atomic uint64_t next;	   /* the first request no thread has taken */
	_Atomic uint64_t drawn;	   /* requests [0, drawn) are in the ring */
	pthread_mutex_t drawing;   /* held by the thread drawing more */
	struct rng rng;		   /* the drawer's */
	double mean, off, prev;	   /* the arrival process: ns between sends, the last two offsets */
	uint64_t k;
	double *cdf;		   /* the connections' cumulative weights (Zipf), or NULL: uniform */
	_Atomic uint64_t received; /* answers, of the `next` requests taken */
} sched = {.drawing = PTHREAD_MUTEX_INITIALIZER};

struct thread {
	int index;
	int cpu;	     /* pinned to it, or -1 */
	struct conn *conns; /* the connections whose answers it reads */
	int nconns;
	uint64_t sent, received, late, in_window, overrun, stray;
	/* the sends whose intended time is in the window: how many, late, their service, worst lag */
	uint64_t sent_in_window, late_in_window, svc_in_window;
	int64_t max_lag_ns;
	int rt_error;	  /* errno of a refused SCHED_FIFO (0: granted or not asked) */
	uint64_t rests;	  /* times it had run RT_RUN_NS without sleeping and rested */
	uint64_t gets, sets, misses, errors; /* memcached */
	struct hdr_hist *hist; /* one per interval */
	struct hdr_hist *sd;   /* slowdown x 1000, one per interval */
	pthread_t tid;
};

static struct thread th[MAX_THREADS];
static struct conn **conns; /* every connection, by number */
static int64_t start_ns; /* time 0 of the schedule (CLOCK_MONOTONIC) */
static int nint;
static _Atomic int64_t *intended; /* RING: by sequence number; -1 once answered */
static uint64_t *svcs;		  /* RING: the service time each asked for (0: memcached) */
static struct traced *trace;	  /* --trace: by sequence number, up to trace_cap */
static uint64_t trace_cap;

static uint32_t pick(void)
{
	if (!sched.cdf)
		return (uint32_t)(rng_next(&sched.rng) % (uint64_t)cfg.connections);
	double u = rng_unit(&sched.rng) * sched.cdf[cfg.connections - 1];
	int lo = 0, hi = cfg.connections - 1;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (sched.cdf[mid] >= u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (uint32_t)lo;
}

/* Draw the schedule ahead, up to a ring's worth past the first untaken request. One
 * thread draws at a time; one that finds another drawing goes on (half a ring is left). */
static void draw_ahead(int wait)
{
	if (wait ? pthread_mutex_lock(&sched.drawing) : pthread_mutex_trylock(&sched.drawing))
		return;
	uint64_t n = atomic_load_explicit(&sched.drawn, memory_order_relaxed);
	uint64_t limit = atomic_load_explicit(&sched.next, memory_order_acquire) + SCHED_RING;
	for (; n < limit && isfinite(sched.off); n++) {
		struct planned *p = &sched.ring[n % SCHED_RING];
		p->due = (int64_t)sched.off;
		p->svc = 0;
		if (cfg.protocol == PROTO_RPC) {
			uint32_t keys = 0;
			p->svc = cfg.service.ops->draw(&cfg.service, &sched.rng, &keys);
		} else {
			p->get = rng_unit(&sched.rng) < cfg.get_fraction;
			p->key = (uint32_t)(rng_next(&sched.rng) % cfg.keys);
		}
		p->conn = pick();
		sched.prev = sched.off;
		sched.off = cfg.arrival->next(&sched.rng, sched.mean, 0, ++sched.k, sched.prev);
		if (n % 256 == 255) /* the takers see it in batches */
			atomic_store_explicit(&sched.drawn, n + 1, memory_order_release);
	}
	atomic_store_explicit(&sched.drawn, n, memory_order_release);
	pthread_mutex_unlock(&sched.drawing);
}

/* The next request, if it is due by `now` (and in the load, before w1): 1 and it is
 * *p with sequence number *seq, taken by this thread alone; 0 and p->due the time the
 * next one is due (INT64_MAX: none). */
static int take(int64_t now, int64_t w1, struct planned *p, uint64_t *seq)
{
	for (;;) {
		uint64_t i = atomic_load_explicit(&sched.next, memory_order_acquire);
		uint64_t drawn = atomic_load_explicit(&sched.drawn, memory_order_acquire);
		if (drawn - i < SCHED_RING / 2)
			draw_ahead(i >= drawn);
		if (i >= atomic_load_explicit(&sched.drawn, memory_order_acquire)) {
			p->due = INT64_MAX; /* the arrival process ended */
			return 0;
		}
		/* Read before taking: the drawer rewrites this slot only once next is past i,
		 * and then the exchange below fails. */
		*p = sched.ring[i % SCHED_RING];
		int64_t due = start_ns + p->due;
		if (due >= w1) {
			p->due = INT64_MAX;
			return 0;
		}
		if (due > now) {
			p->due = due;
			return 0;
		}
		if (atomic_compare_exchange_weak_explicit(&sched.next, &i, i + 1, memory_order_acq_rel,
							  memory_order_relaxed)) {
			p->due = due;
			*seq = i;
			return 1;
		}
	}
}

/* One answer's sequence number from the front of buf (have bytes): its length, 0 if it
 * is not all there yet, or -1 if it is not an answer of the protocol. */
static int64_t answer_at(struct thread *t, const unsigned char *buf, uint32_t have, uint64_t *seq)
{
	if (cfg.protocol == PROTO_RPC) {
		struct rpc_hdr h;
		if (have < RPC_HDR_LEN)
			return 0;
		memcpy(&h, buf, sizeof h);
		if (ntohl(h.magic) != RPC_RESP)
			return -1;
		*seq = be64toh(h.id) & ((1ull << 48) - 1);
		return RPC_HDR_LEN;
	}
	struct mc_hdr h;
	if (have < MC_HDR_LEN)
		return 0;
	memcpy(&h, buf, sizeof h);
	uint32_t len = MC_HDR_LEN + ntohl(h.body_len);
	if (h.magic != MC_RESP || len > cfg.bufsize / 2)
		return -1;
	if (have < len)
		return 0;
	uint16_t status = ntohs(h.status);
	if (status == 1 && h.opcode == MC_GET) /* key not found: an answer all the same */
		t->misses++;
	else if (status != 0)
		t->errors++;
	*seq = ntohl(h.opaque);
	return len;
}

/* Answers on c: record each one's latency from its intended time. -1: the connection
 * failed or closed, -2: an answer not of the protocol (or over the buffer). */
static int drain(struct thread *t, struct conn *c, int64_t w0, int64_t w1)
{
	for (;;) {
		ssize_t r = recv(c->fd, c->buf + c->have, cfg.bufsize - c->have, 0);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return -1;
		if (r < 0)
			return 0;
		c->have += (uint32_t)r;
		int64_t now = rpc_now_ns();
		uint32_t off = 0;
		for (;;) {
			uint64_t seq;
			int64_t len = answer_at(t, c->buf + off, c->have - off, &seq);
			if (len < 0)
				return -2;
			if (len == 0)
				break;
			off += (uint32_t)len;
			int64_t at = atomic_exchange_explicit(&intended[seq % RING], -1, memory_order_acq_rel);
			if (at < 0) { /* no request outstanding: an answer to one answered already */
				t->stray++;
				continue;
			}
			t->received++;
			atomic_fetch_add_explicit(&sched.received, 1, memory_order_relaxed);
			if (trace && seq < trace_cap)
				trace[seq].latency = now - at;
			if (at >= w0 && at < w1) {
				int k = (int)((double)(at - w0) / 1e9 / cfg.interval_s);
				k = k < nint ? k : nint - 1;
				uint64_t lat = (uint64_t)(now - at > 0 ? now - at : 1), svc = svcs[seq % RING];
				hdr_record(&t->hist[k], lat);
				if (svc > 0) {
					uint64_t sd = (uint64_t)((double)lat * 1000.0 / (double)svc);
					hdr_record(&t->sd[k], sd > 0 ? sd : 1);
				}
				t->in_window++;
			}
		}
		memmove(c->buf, c->buf + off, c->have - off);
		c->have -= off;
	}
}

/* The request of sequence number seq, as planned, into req: its length. */
static uint32_t request(struct thread *t, unsigned char *req, uint64_t seq, const struct planned *p)
{
	if (cfg.protocol == PROTO_RPC) {
		struct rpc_hdr h = {
			.magic = htonl(RPC_REQ),
			.len = htonl(cfg.payload),
			.id = htobe64(((uint64_t)t->index << 48) | seq),
			.service_ns = htobe64(p->svc),
		};
		memcpy(req, &h, sizeof h);
		return RPC_HDR_LEN + cfg.payload;
	}
	char key[32];
	int klen = snprintf(key, sizeof key, "rm:%010u", (unsigned)p->key);
	uint8_t extras = p->get ? 0 : 8; /* SET: flags and expiry, both 0 */
	uint32_t value = p->get ? 0 : cfg.payload;
	struct mc_hdr h = {
		.magic = MC_REQ,
		.opcode = p->get ? MC_GET : MC_SET,
		.key_len = htons((uint16_t)klen),
		.extras_len = extras,
		.body_len = htonl(extras + (uint32_t)klen + value),
		.opaque = htonl((uint32_t)seq),
	};
	memcpy(req, &h, sizeof h);
	memset(req + MC_HDR_LEN, 0, extras);
	memcpy(req + MC_HDR_LEN + extras, key, (size_t)klen);
	memset(req + MC_HDR_LEN + extras + klen, 'v', value);
	if (p->get)
		t->gets++;
	else
		t->sets++;
	return MC_HDR_LEN + extras + (uint32_t)klen + value;
}

/* Sleeping until a send is due wakes up to the timer slack late (50 us by default):
 * the thread asks for 1 ns of slack, sleeps until SPIN_NS before the send and spins
 * the rest, a bounded slice, never longer. */
#define SPIN_NS 20000
/* With --realtime a thread that has run this long without sleeping rests RT_REST_NS: on
 * shared cores it preempts the rest when a send is due, and never holds a core. */
#define RT_RUN_NS 1000000
#define RT_REST_NS 250000

static void rest(struct thread *t, int64_t *awake_since)
{
	if (!cfg.realtime || rpc_now_ns() - *awake_since < RT_RUN_NS)
		return;
	struct timespec ts = {0, RT_REST_NS};
	nanosleep(&ts, NULL);
	t->rests++;
	*awake_since = rpc_now_ns();
}

/* Send the request taken (seq, as p planned it, due at p->due), counting its lag. */
static void send_one(struct thread *t, unsigned char *req, uint64_t seq, const struct planned *p, int64_t w0)
{
	if (seq >= RING && atomic_load_explicit(&intended[seq % RING], memory_order_relaxed) >= 0)
		t->overrun++; /* its slot's request never came back */
	uint32_t len = request(t, req, seq, p);
	svcs[seq % RING] = p->svc;
	atomic_store_explicit(&intended[seq % RING], p->due, memory_order_release);
	struct conn *c = conns[p->conn];
	while (atomic_flag_test_and_set_explicit(&c->sending, memory_order_acquire))
		; /* another thread is sending on it: a few microseconds */
	int64_t left = rpc_now_ns();
	int64_t lag = left - p->due; /* it leaves late: counted when it starts to leave */
	if (trace && seq < trace_cap)
		trace[seq] = (struct traced){p->due, left, -1, p->svc};
	int in_window = p->due >= w0;
	if (lag > cfg.late_ns) {
		t->late++;
		t->late_in_window += (uint64_t)in_window;
	}
	if (in_window) {
		t->sent_in_window++;
		t->svc_in_window += p->svc;
		t->max_lag_ns = lag > t->max_lag_ns ? lag : t->max_lag_ns;
	}
	int rc = rpc_write_all(c->fd, req, len);
	atomic_flag_clear_explicit(&c->sending, memory_order_release);
	if (rc < 0) {
		fprintf(stderr, "rpc-client: thread %d: a connection failed while sending\n", t->index);
		exit(1);
	}
	t->sent++;
}

static void *thread_main(void *arg)
{
	struct thread *t = arg;
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	if (t->cpu >= 0) { /* apart: a stall of one core leaves the others' timers and sends alone */
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(t->cpu, &one);
		pthread_setaffinity_np(pthread_self(), sizeof one, &one);
	}
	if (cfg.realtime) { /* the load only: connections were made before (start-up is not real-time) */
		struct sched_param sp = {.sched_priority = cfg.realtime};
		t->rt_error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	}
	int64_t awake_since = rpc_now_ns();
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < t->nconns; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &t->conns[i]};
		epoll_ctl(epfd, EPOLL_CTL_ADD, t->conns[i].fd, &ev);
	}
	int64_t w0 = start_ns + (int64_t)(cfg.warmup_s * 1e9), w1 = w0 + (int64_t)(cfg.duration_s * 1e9);
	unsigned char req[RPC_HDR_LEN + RPC_MAX_PAYLOAD];
	memset(req, 'x', sizeof req);
	struct epoll_event ev[64];
	for (;;) {
		int64_t now = rpc_now_ns();
		struct planned p;
		uint64_t seq;
		while (take(now, w1, &p, &seq)) {
			send_one(t, req, seq, &p, w0);
			rest(t, &awake_since);
			now = rpc_now_ns();
		}
		int64_t due = p.due; /* the next one's, or INT64_MAX: the load is over */
		int64_t until = due < w1 ? due : w1 + cfg.drain_ns;
		if (now >= w1 + cfg.drain_ns ||
		    (due >= w1 && atomic_load_explicit(&sched.received, memory_order_acquire) ==
					 atomic_load_explicit(&sched.next, memory_order_acquire))) /* taken: sent or about to be */
			break;
		struct timespec to = {0, 0};
		int64_t wake = until - (until == due ? SPIN_NS : 0);
		if (due >= w1 && wake > now + 1000000)
			wake = now + 1000000; /* the others' answers end the drain: look every ms */
		if (wake > now)
			to = (struct timespec){.tv_sec = (wake - now) / 1000000000, .tv_nsec = (wake - now) % 1000000000};
		int n = epoll_pwait2(epfd, ev, 64, &to, NULL);
		if (to.tv_sec || to.tv_nsec)
			awake_since = rpc_now_ns(); /* it slept */
		else
			rest(t, &awake_since);
		for (int i = 0; i < n; i++) {
			int rc = drain(t, ev[i].data.ptr, w0, w1);
			if (rc == -2) {
				fprintf(stderr, "rpc-client: thread %d: an answer that is not %s (or over %u bytes)\n",
					t->index, cfg.protocol == PROTO_RPC ? "rpc_proto.h's" : "memcached's binary protocol",
					cfg.bufsize / 2);
				exit(1);
			} else if (rc < 0) {
				fprintf(stderr, "rpc-client: thread %d: the server closed a connection\n", t->index);
				exit(1);
			}
		}
	}
	close(epfd);
	return NULL;
}

/* ---- set-up and report -------------------------------------------------------------------- */
static int bad(const char *what, const char *fix)
{
	fprintf(stderr, "rpc-client: %s\n  fix: %s\n", what, fix);
	fprintf(stderr, "usage: rpc-client --connect ADDR:PORT --connections N --rate RPS --service SPEC "
			"--duration S --out DIR [...]; --help says more\n");
	return 2;
}

static void usage(void)
{
	printf("usage: rpc-client --connect ADDR:PORT --connections N --rate RPS --service SPEC --duration S\n"
	       "                  --out DIR [--threads T] [--arrival poisson|constant] [--warmup S]\n"
	       "                  [--payload BYTES] [--spread uniform|zipf:S] [--seed X] [--late-ns NS]\n"
	       "                  [--interval S] [--protocol rpc|memcached] [--get-fraction F] [--keys N]\n"
	       "                  [--class NAME] [--realtime PRIO] [--drain S] [--trace]\n"
	       "  --connections  TCP connections to the server, 1..%d\n"
	       "  --threads      threads (1..%d, one per CPU allowed): each reads its share of the\n"
	       "                 connections' answers, and any of them sends whatever is due next\n"
	       "  --rate         requests per second, all connections together (open loop)\n"
	       "  --service      the service time each request asks for: const:NS, exp:MEAN_NS,\n"
	       "                 bimodal:NS1:NS2:P1 (rpc only: memcached does its own work)\n"
	       "  --protocol     rpc (rpc_proto.h, default) or memcached (its binary protocol:\n"
	       "                 GETs and SETs of --payload bytes, at most %u)\n"
	       "  --get-fraction memcached: the fraction of requests that are GETs (0.9)\n"
	       "  --keys         memcached: how many keys, drawn uniformly (10000)\n"
	       "  --warmup, --duration  seconds before the measurement window, and its length\n"
	       "  --spread       how requests spread over connections (default uniform)\n"
	       "  --late-ns      a send later than this after its intended time counts late (20000)\n"
	       "  --class        the class name in the logs' tags and summary.json (rpc)\n"
	       "  --drain        after the window, wait this long for the last answers (1 s); a\n"
	       "                 request of the window still unanswered then is lost\n"
	       "  --trace        every request into DIR/trace.csv, in rain-client's columns: when it\n"
	       "                 was meant to leave and left, its service time and its latency (the\n"
	       "                 model beside a point replays them; validity tests the sends' gaps)\n"
	       "  --realtime     run the load threads at SCHED_FIFO PRIO (1-99; 0: no) while the load\n"
	       "                 runs, not while connecting; a thread that has run 1 ms without\n"
	       "                 sleeping rests 0.25 ms (on shared cores it preempts the rest when a\n"
	       "                 send is due, and never holds a core)\n"
	       "  --out          latency.hlog and summary.json go here\n",
	       MAX_CONNECTIONS, MAX_THREADS, MC_MAX_VALUE);
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !isfinite(v) || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Counters in rain-client's names (client/report.c). sent and received count every
 * request, warm-up and drain too; the rest the requests whose intended time is in the
 * window: rpc-client never times a request out, refuses or resubmits one, and one the
 * server has not answered when the drain ends is lost. */
static void counters(FILE *f, uint64_t sent, uint64_t received, uint64_t sent_w, uint64_t got_w, uint64_t late_w,
		     int64_t lag, uint64_t svc_w)
{
	double d = cfg.duration_s;
	fprintf(f,
		"\"offered\": %llu, \"sent\": %llu, \"sent_in_window\": %llu, \"received\": %llu, \"failed\": 0,"
		" \"timed_out\": 0, \"rejected\": 0, \"resubmitted\": 0, \"late_reply\": 0, \"lost\": %llu,"
		" \"not_sent\": 0, \"waited_for_admission\": 0, \"late_sends\": %llu, \"max_lag_ns\": %lld,"
		" \"large\": 0, \"mean_service_ns\": %.1f, \"mean_keys\": 0.0, \"scheduled_rps\": %.3f,"
		" \"achieved_rps\": %.3f, \"received_rps\": %.3f",
		(unsigned long long)sent_w, (unsigned long long)sent, (unsigned long long)sent_w, (unsigned long long)received,
		(unsigned long long)(sent_w - got_w), (unsigned long long)late_w, (long long)lag,
		sent_w ? (double)svc_w / (double)sent_w : 0.0, (double)sent_w / d, (double)sent_w / d, (double)got_w / d);
}

static void hist_summary(FILE *f, const struct hdr_hist *h)
{
	fprintf(f, "{\"count\": %llu, \"mean\": %.1f, \"p50\": %llu, \"p99\": %llu, \"p999\": %llu, \"max\": %llu}",
		(unsigned long long)h->total, hdr_mean(h), (unsigned long long)hdr_percentile(h, 50.0),
		(unsigned long long)hdr_percentile(h, 99.0), (unsigned long long)hdr_percentile(h, 99.9),
		(unsigned long long)hdr_max(h));
}

/* trace.csv, in rain-client's columns (client/report.c) and time origin (the schedule's
 * start): one row per request sent, latency -1 for one never answered. */
static int write_trace(void)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/trace.csv", cfg.out);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	/* one schedule, whichever thread sent each request: its "lcore" is 0 */
	fprintf(f, "lcore,client_id,request_id,class,intended_ns,sent_ns,service_ns,latency_ns,large\n");
	uint64_t taken = atomic_load(&sched.next), n = taken < trace_cap ? taken : trace_cap;
	for (uint64_t s = 0; s < n; s++) {
		const struct traced *r = &trace[s];
		fprintf(f, "0,0,%llu,%s,%lld,%lld,%llu,%lld,0\n", (unsigned long long)s, cfg.cls,
			(long long)(r->intended - start_ns), (long long)(r->sent - start_ns), (unsigned long long)r->svc,
			(long long)r->latency);
	}
	int bad_write = ferror(f);
	return fclose(f) == 0 && !bad_write ? 0 : -1;
}

static int write_summary(double elapsed_s)
{
	struct hdr_hist all, sd;
	if (hdr_init(&all) || hdr_init(&sd))
		return -1;
	uint64_t sent = 0, received = 0, late = 0, in_window = 0, overrun = 0, sent_w = 0, late_w = 0, svc_w = 0;
	int64_t lag = 0;
	for (int i = 0; i < cfg.threads; i++) {
		struct thread *t = &th[i];
		sent += t->sent, received += t->received, late += t->late;
		in_window += t->in_window, overrun += t->overrun;
		sent_w += t->sent_in_window, late_w += t->late_in_window, svc_w += t->svc_in_window;
		lag = t->max_lag_ns > lag ? t->max_lag_ns : lag;
		for (int k = 0; k < nint; k++) {
			hdr_add(&all, &t->hist[k]);
			hdr_add(&sd, &t->sd[k]);
		}
	}
	char path[4096], spread[32] = "uniform";
	if (cfg.zipf_s > 0)
		snprintf(spread, sizeof spread, "zipf:%g", cfg.zipf_s);
	snprintf(path, sizeof path, "%s/summary.json", cfg.out);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	const char *service = cfg.service.ops ? cfg.service_arg : "memcached";
	fprintf(f,
		"{\"tool\": \"rpc-client\", \"format\": 1, \"partial\": false, \"protocol\": \"%s\", \"connections\": %d,"
		" \"threads\": %d, \"arrival\": \"%s\",\n"
		" \"service\": \"%s\", \"payload\": %u, \"spread\": \"%s\", \"seed\": %llu,\n"
		" \"offered_rps\": %.3f, \"achieved_rps\": %.3f, \"warmup_s\": %g, \"duration_s\": %g, \"interval_s\": %g,"
		" \"intervals\": %d,\n"
		" \"elapsed_s\": %.6f, \"late_threshold_ns\": [%lld],\n"
		" \"totals\": {\"outstanding\": %llu, \"in_window\": %llu, \"overrun\": %llu, \"late_fraction\": %.6f,\n  ",
		cfg.protocol == PROTO_RPC ? "rpc" : "memcached", cfg.connections, cfg.threads, cfg.arrival->name, service,
		cfg.payload, spread, (unsigned long long)cfg.seed, cfg.rate, (double)sent_w / cfg.duration_s, cfg.warmup_s,
		cfg.duration_s, cfg.interval_s, nint, elapsed_s, (long long)cfg.late_ns,
		(unsigned long long)(sent - received), (unsigned long long)in_window, (unsigned long long)overrun,
		sent ? (double)late / (double)sent : 0.0);
	counters(f, sent, received, sent_w, in_window, late_w, lag, svc_w);
	fprintf(f, "},\n");
	fprintf(f, " \"classes\": {\"%s\": {\"task_type\": 0, \"weight\": 1, \"payload\": %u, \"service\": \"%s\","
		   " \"mean_service_ns_expected\": %.1f,\n  ",
		cfg.cls, cfg.payload, service, cfg.service.ops ? cfg.service.ops->mean(&cfg.service) : 0.0);
	counters(f, sent, received, sent_w, in_window, late_w, lag, svc_w);
	fprintf(f, ",\n  \"latency_ns\": ");
	hist_summary(f, &all);
	fprintf(f, ", \"slowdown\": ");
	hist_summary(f, &sd);
	fprintf(f, "}},\n \"latency_ns\": ");
	hist_summary(f, &all);
	if (cfg.protocol == PROTO_MEMCACHED) {
		uint64_t gets = 0, sets = 0, misses = 0, errors = 0;
		for (int i = 0; i < cfg.threads; i++)
			gets += th[i].gets, sets += th[i].sets, misses += th[i].misses, errors += th[i].errors;
		fprintf(f, ",\n \"memcached\": {\"gets\": %llu, \"sets\": %llu, \"misses\": %llu, \"errors\": %llu}",
			(unsigned long long)gets, (unsigned long long)sets, (unsigned long long)misses,
			(unsigned long long)errors);
	}
	int rt_granted = 0, rt_error = 0;
	uint64_t rests = 0;
	for (int i = 0; i < cfg.threads; i++) {
		rt_granted += cfg.realtime && !th[i].rt_error;
		rt_error = th[i].rt_error ? th[i].rt_error : rt_error;
		rests += th[i].rests;
	}
	/* the schedule, as rain-client's lcores' (validity's inter-arrival test): one
	 * arrival process at the whole rate, whichever thread sent each request */
	uint64_t taken = atomic_load(&sched.next), stray = 0;
	fprintf(f, ",\n \"lcores\": 1, \"schedule\": [[0, %.3f]]", cfg.rate);
	fprintf(f, ",\n \"run\": {\"trace_dropped\": %llu, \"sent_by_thread\": [",
		(unsigned long long)(cfg.trace && taken > trace_cap ? taken - trace_cap : 0));
	for (int i = 0; i < cfg.threads; i++) {
		fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)th[i].sent);
		stray += th[i].stray;
	}
	fprintf(f, "], \"stray_answers\": %llu}", (unsigned long long)stray);
	fprintf(f, ",\n \"realtime\": {\"priority\": %d, \"threads\": %d, \"rests\": %llu, \"error\": %s%s%s}",
		cfg.realtime, rt_granted, (unsigned long long)rests, rt_error ? "\"" : "",
		rt_error ? strerror(rt_error) : "null", rt_error ? "\"" : "");
	fprintf(f, "}\n");
	int bad_write = ferror(f);
	fclose(f);
	hdr_free(&all);
	hdr_free(&sd);
	return bad_write ? -1 : 0;
}

/* One interval log of every thread's histograms (`sd`: the slowdown ones), tagged with the class. */
static int write_log(const char *name, const char *comment, double max_ratio, int sd)
{
	struct hdr_hist **hs = calloc((size_t)nint, sizeof *hs);
	struct hdr_hist *merged = calloc((size_t)nint, sizeof *merged);
	if (!hs || !merged)
		return -1;
	for (int k = 0; k < nint; k++) {
		if (hdr_init(&merged[k]))
			return -1;
		for (int i = 0; i < cfg.threads; i++)
			hdr_add(&merged[k], sd ? &th[i].sd[k] : &th[i].hist[k]);
		hs[k] = &merged[k];
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", cfg.out, name);
	FILE *f = fopen(path, "w");
	int rc = -1;
	if (f) {
		const char *tags[] = {cfg.cls};
		double last = cfg.duration_s - (nint - 1) * cfg.interval_s;
		struct timespec rt;
		clock_gettime(CLOCK_REALTIME, &rt);
		rc = hdr_log_write(f, comment, (double)rt.tv_sec, max_ratio, 1, tags, (unsigned)nint, cfg.interval_s,
				   last, hs);
		fclose(f);
	}
	for (int k = 0; k < nint; k++)
		hdr_free(&merged[k]);
	free(merged);
	free(hs);
	return rc;
}

static int write_hlog(void)
{
	if (write_log("latency.hlog", "rpc-client latency from intended send times, ns", 1.0, 0) < 0)
		return -1;
	return write_log("slowdown.hlog", "rpc-client slowdown x1000 (latency / the service time asked for)", 1000.0, 1);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"connect", required_argument, NULL, 'c'}, {"connections", required_argument, NULL, 'n'},
		{"threads", required_argument, NULL, 't'}, {"rate", required_argument, NULL, 'r'},
		{"arrival", required_argument, NULL, 'a'}, {"service", required_argument, NULL, 's'},
		{"payload", required_argument, NULL, 'p'}, {"warmup", required_argument, NULL, 'w'},
		{"duration", required_argument, NULL, 'd'}, {"spread", required_argument, NULL, 'z'},
		{"seed", required_argument, NULL, 'e'}, {"late-ns", required_argument, NULL, 'l'},
		{"interval", required_argument, NULL, 'i'}, {"out", required_argument, NULL, 'o'},
		{"protocol", required_argument, NULL, 'P'}, {"get-fraction", required_argument, NULL, 'g'},
		{"keys", required_argument, NULL, 'k'}, {"class", required_argument, NULL, 'C'},
		{"realtime", required_argument, NULL, 'R'}, {"drain", required_argument, NULL, 'D'},
		{"trace", no_argument, NULL, 'T'}, {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	cfg.arrival = arrival_find("poisson");
	int have_service = 0, o;
	double v;
	char err[256];
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			if (rpc_parse_addr(optarg, 1, &cfg.addr) < 0)
				return bad("--connect: not an IPv4 address and port", "e.g. --connect 10.0.0.2:7000");
			break;
		case 'n':
			if (parse_num(optarg, 1, MAX_CONNECTIONS, &v) < 0 || v != floor(v))
				return bad("--connections: not a connection count", "give 1 to 100000");
			cfg.connections = (int)v;
			break;
		case 't':
			if (parse_num(optarg, 1, MAX_THREADS, &v) < 0 || v != floor(v))
				return bad("--threads: not a thread count", "give 1 to 64");
			cfg.threads = (int)v;
			break;
		case 'r':
			if (parse_num(optarg, 1e-3, 1e8, &cfg.rate) < 0)
				return bad("--rate: not a request rate", "give requests per second, e.g. 10000");
			break;
		case 'a':
			if (!(cfg.arrival = arrival_find(optarg)))
				return bad("--arrival: not an arrival process", "use poisson or constant");
			break;
		case 's': {
			char buf[128], *tok[4];
			unsigned n = 0;
			snprintf(buf, sizeof buf, "%s", optarg);
			for (char *p = strtok(buf, ":"); p && n < 4; p = strtok(NULL, ":"))
				tok[n++] = p;
			if (!n || service_parse(tok, n, &cfg.service, err, sizeof err) < 0 || cfg.service.ops->kv)
				return bad("--service: not a service distribution", "const:NS, exp:MEAN_NS or bimodal:NS1:NS2:P1");
			snprintf(cfg.service_arg, sizeof cfg.service_arg, "%s", optarg);
			have_service = 1;
			break;
		}
		case 'p':
			if (parse_num(optarg, 0, RPC_MAX_PAYLOAD, &v) < 0 || v != floor(v))
				return bad("--payload: not a payload size", "give 0 to 65536 bytes");
			cfg.payload = (uint32_t)v;
			break;
		case 'D':
			if (parse_num(optarg, 0, 3600, &v) < 0)
				return bad("--drain: not a duration", "give seconds, 0 to 3600");
			cfg.drain_ns = (int64_t)(v * 1e9);
			break;
		case 'R':
			if (parse_num(optarg, 0, 99, &v) < 0 || v != floor(v))
				return bad("--realtime: not a priority", "give 1 to 99 (SCHED_FIFO), or 0 for none");
			cfg.realtime = (int)v;
			break;
		case 'C':
			if (!*optarg || strlen(optarg) > 31 || strspn(optarg, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(optarg))
				return bad("--class: not a class name", "1 to 31 of a-z, 0-9, _ and -");
			cfg.cls = optarg;
			break;
		case 'w':
			if (parse_num(optarg, 0, 3600, &cfg.warmup_s) < 0)
				return bad("--warmup: not a duration", "give seconds, 0 to 3600");
			break;
		case 'd':
			if (parse_num(optarg, 1e-3, 3600, &cfg.duration_s) < 0)
				return bad("--duration: not a duration", "give seconds, 0.001 to 3600");
			break;
		case 'z':
			if (!strcmp(optarg, "uniform"))
				cfg.zipf_s = 0;
			else if (strncmp(optarg, "zipf:", 5) || parse_num(optarg + 5, 1e-6, 10, &cfg.zipf_s) < 0)
				return bad("--spread: not a spread", "use uniform, or zipf:S with 0 < S <= 10");
			break;
		case 'e': {
			char *end;
			errno = 0;
			cfg.seed = strtoull(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || *optarg == '-' || errno)
				return bad("--seed: not a seed", "give a whole number, 0 to 2^64 - 1");
			break;
		}
		case 'l':
			if (parse_num(optarg, 0, 1e12, &v) < 0)
				return bad("--late-ns: not a time", "give nanoseconds");
			cfg.late_ns = (int64_t)v;
			break;
		case 'i':
			if (parse_num(optarg, 1e-3, 3600, &cfg.interval_s) < 0)
				return bad("--interval: not a duration", "give seconds");
			break;
		case 'o':
			cfg.out = optarg;
			break;
		case 'P':
			if (!strcmp(optarg, "rpc"))
				cfg.protocol = PROTO_RPC;
			else if (!strcmp(optarg, "memcached"))
				cfg.protocol = PROTO_MEMCACHED;
			else
				return bad("--protocol: not a protocol", "use rpc or memcached");
			break;
		case 'g':
			if (parse_num(optarg, 0, 1, &cfg.get_fraction) < 0)
				return bad("--get-fraction: not a fraction", "give 0 to 1, e.g. 0.9");
			break;
		case 'k':
			if (parse_num(optarg, 1, 4e9, &v) < 0 || v != floor(v))
				return bad("--keys: not a key count", "give 1 to 4000000000");
			cfg.keys = (uint32_t)v;
			break;
		case 'T':
			cfg.trace = 1;
			break;
		case 'h':
			usage();
			return 0;
		default:
			return bad("unknown option", "see --help");
		}
	}
	if (cfg.protocol == PROTO_MEMCACHED) {
		if (have_service)
			return bad("--service with --protocol memcached: memcached does its own work",
				   "leave --service out, or use --protocol rpc");
		if (cfg.payload > MC_MAX_VALUE)
			return bad("--payload: over memcached's value limit here", "give at most 8192 bytes");
		cfg.bufsize = 2 * (MC_HDR_LEN + 4 + MC_MAX_VALUE);
		have_service = 1;
	}
	if (!cfg.addr.sin_family || !cfg.connections || !cfg.rate || !have_service || !cfg.duration_s || !cfg.out)
		return bad("--connect, --connections, --rate, --service (rpc), --duration and --out are required",
			   "see --help");
	if (cfg.threads > cfg.connections)
		cfg.threads = cfg.connections;
	if (mkdir(cfg.out, 0755) < 0 && errno != EEXIST) {
		perror("rpc-client: --out");
		return 1;
	}
	nint = (int)ceil(cfg.duration_s / cfg.interval_s - 1e-9);
	intended = malloc(sizeof *intended * RING);
	svcs = calloc(RING, sizeof *svcs);
	conns = calloc((size_t)cfg.connections, sizeof *conns);
	sched.ring = calloc(SCHED_RING, sizeof *sched.ring);
	if (!intended || !svcs || !conns || !sched.ring)
		return bad("out of memory", "fewer connections");
	for (uint32_t k = 0; k < RING; k++)
		atomic_init(&intended[k], -1);
	/* the threads apart, over the CPUs this process may use: one stalled core holds
	 * one thread, and the others send what is due */
	cpu_set_t allowed;
	int cpus[CPU_SETSIZE], ncpus = 0;
	if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &allowed))
				cpus[ncpus++] = c;
	for (int i = 0; i < cfg.threads; i++) {
		struct thread *t = &th[i];
		t->index = i;
		t->cpu = cfg.threads > 1 && ncpus > 1 ? cpus[i % ncpus] : -1; /* one thread: wherever there is room */
		t->nconns = (cfg.connections - i + cfg.threads - 1) / cfg.threads;
		t->conns = calloc((size_t)t->nconns, sizeof *t->conns);
		t->hist = calloc((size_t)nint, sizeof *t->hist);
		t->sd = calloc((size_t)nint, sizeof *t->sd);
		if (!t->conns || !t->hist || !t->sd)
			return bad("out of memory", "fewer connections or a shorter --duration");
		for (int k = 0; k < nint; k++)
			if (hdr_init(&t->hist[k]) || hdr_init(&t->sd[k]))
				return bad("out of memory", "a longer --interval");
	}
	/* the schedule: its random draws, the connections' weights (uniform: none) */
	rng_seed(&sched.rng, cfg.seed * 0x9E3779B97F4A7C15ull);
	if (cfg.zipf_s > 0) {
		if (!(sched.cdf = malloc(sizeof *sched.cdf * (size_t)cfg.connections)))
			return bad("out of memory", "fewer connections");
		double sum = 0;
		for (int c = 0; c < cfg.connections; c++)
			sched.cdf[c] = sum += pow(c + 1.0, -cfg.zipf_s);
	}
	sched.mean = 1e9 / cfg.rate;
	sched.off = cfg.arrival->next(&sched.rng, sched.mean, 0, 0, 0);
	if (cfg.trace) { /* room for the expected requests and a margin (Poisson counts vary) */
		trace_cap = (uint64_t)(cfg.rate * (cfg.warmup_s + cfg.duration_s) * 1.2 + 1024);
		if (!(trace = calloc(trace_cap, sizeof *trace)))
			return bad("out of memory for the trace", "leave --trace out, or a shorter --duration");
	}
	for (int c = 0; c < cfg.connections; c++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&cfg.addr, sizeof cfg.addr) < 0) {
			fprintf(stderr, "rpc-client: connection %d: %s\n", c, strerror(errno));
			return 1;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
			perror("rpc-client: fcntl");
			return 1;
		}
		struct conn *cn = &th[c % cfg.threads].conns[c / cfg.threads];
		cn->fd = fd;
		atomic_flag_clear(&cn->sending);
		conns[c] = cn;
		if (!(cn->buf = malloc(cfg.bufsize))) {
			fprintf(stderr, "rpc-client: out of memory for connection %d\n", c);
			return 1;
		}
	}
	draw_ahead(1);
	printf("rpc-client ready connections=%d threads=%d\n", cfg.connections, cfg.threads);
	fflush(stdout);
	start_ns = rpc_now_ns() + 10000000; /* every schedule from the same instant, 10 ms from now */
	for (int i = 0; i < cfg.threads; i++)
		if (pthread_create(&th[i].tid, NULL, thread_main, &th[i])) {
			fprintf(stderr, "rpc-client: cannot start thread %d\n", i);
			return 1;
		}
	for (int i = 0; i < cfg.threads; i++)
		pthread_join(th[i].tid, NULL);
	double elapsed = (double)(rpc_now_ns() - start_ns) / 1e9;
	/* Each connection ends with a reset, not a FIN: a FIN leaves it in TIME_WAIT on this
	 * host for 60 s, and a point measured in 10 s segments of 5,000 connections each used
	 * up the 28,232 ephemeral ports (connect: EADDRNOTAVAIL). The drain is over: every
	 * answer of the window is in or counted lost. */
	struct linger now = {.l_onoff = 1, .l_linger = 0};
	for (int i = 0; i < cfg.threads; i++)
		for (int j = 0; j < th[i].nconns; j++) {
			setsockopt(th[i].conns[j].fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
			close(th[i].conns[j].fd);
		}
	if (write_hlog() < 0 || write_summary(elapsed) < 0 || (cfg.trace && write_trace() < 0)) {
		perror("rpc-client: writing the results");
		return 1;
	}
	printf("rpc-client done\n");
	return 0;
}
