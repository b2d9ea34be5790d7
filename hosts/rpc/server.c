/* SPDX-License-Identifier: Apache-2.0
 *
 * rpc-server: the server models of Rakaia's measured layer, as plain TCP programs on
 * the kernel's own stack, one mode each (rpc_proto.h has the messages):
 *
 *   cp    TCP-CP: each worker thread owns the connections the acceptor hands it
 *         (round-robin) in its own epoll, and serves their messages in order.
 *   cs    TCP-CS: one epoll shared by every worker thread, each connection armed
 *         EPOLLONESHOT, so one thread at a time serves a connection; it keeps serving
 *         while messages of it are waiting, and re-arms the connection when none is.
 *         (EPOLLEXCLUSIVE is about several epoll instances on one file; with one shared
 *         instance ONESHOT is what hands a ready connection to exactly one thread.)
 *   pool  a userspace Worker Pool: I/O threads own the connections (round-robin) and
 *         parse messages into one shared queue; worker threads take the oldest, serve
 *         it and answer on its connection.
 *
 * Service is a sleep (clock_nanosleep to the deadline) or a spin of the message's
 * service_ns, as rain-worker's handler. Prints "rpc-server ready port=P" once
 * listening, and on SIGINT or SIGTERM "rpc-server done ..." with its counts.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rpc_net.h"
#include "rpc_proto.h"

#define MAX_THREADS 256

enum mode { MODE_CP, MODE_CS, MODE_POOL };

static struct {
	enum mode mode;
	int threads, io_threads, spin;
	struct sockaddr_in addr;
} cfg = {.threads = 1, .io_threads = 1};

static atomic_ullong n_served, n_conns, n_bad;

/* ---- a connection ----------------------------------------------------------------------- */
struct conn {
	int fd;
	atomic_int refs;           /* its reader, and each queued message (pool) */
	pthread_mutex_t wlock;     /* answers from several worker threads (pool) */
	uint32_t have;
	unsigned char buf[RPC_HDR_LEN + RPC_MAX_PAYLOAD];
};

static struct conn *conn_new(int fd)
{
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->fd = fd;
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->wlock, NULL);
	atomic_fetch_add(&n_conns, 1);
	return c;
}

static void conn_put(struct conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1) {
		close(c->fd);
		pthread_mutex_destroy(&c->wlock);
		free(c);
	}
}

struct msg {
	uint64_t id, service_ns;
};

/* Read what the socket holds and take the complete messages out of the buffer, up to
 * max of them into out. 0: fine (maybe none), -1: closed, failed or malformed. */
static int conn_read(struct conn *c, struct msg *out, int max, int *n)
{
	*n = 0;
	for (;;) {
		/* complete messages first */
		while (*n < max && c->have >= RPC_HDR_LEN) {
			struct rpc_hdr h;
			memcpy(&h, c->buf, sizeof h);
			uint32_t len = ntohl(h.len);
			if (ntohl(h.magic) != RPC_REQ || len > RPC_MAX_PAYLOAD) {
				atomic_fetch_add(&n_bad, 1);
				return -1;
			}
			if (c->have < RPC_HDR_LEN + len)
				break;
			out[(*n)++] = (struct msg){.id = be64toh(h.id), .service_ns = be64toh(h.service_ns)};
			memmove(c->buf, c->buf + RPC_HDR_LEN + len, c->have - RPC_HDR_LEN - len);
			c->have -= RPC_HDR_LEN + len;
		}
		if (*n == max)
			return 0;
		ssize_t r = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, 0);
		if (r > 0) {
			c->have += (uint32_t)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r < 0 && errno == EINTR)
			continue;
		return -1; /* closed by the peer, or an error */
	}
}

/* Write all of buf, waiting for room when the socket is full. */
static void serve(const struct msg *m)
{
	/* a sleep that ends up to the timer slack late (50 us by default) is not the service
	 * asked for: every thread asks for 1 ns of slack (main(), inherited) */
	int64_t end = rpc_now_ns() + (int64_t)m->service_ns;
	if (cfg.spin) {
		while (rpc_now_ns() < end)
			;
		return;
	}
	struct timespec t = {.tv_sec = end / 1000000000, .tv_nsec = end % 1000000000};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

static int answer(struct conn *c, const struct msg *m, int thread)
{
	struct rpc_hdr h = {.magic = htonl(RPC_RESP), .id = htobe64(m->id), .aux = htonl((uint32_t)thread)};
	/* counted before its answer leaves: a client that has every answer finds them all counted */
	atomic_fetch_add(&n_served, 1);
	pthread_mutex_lock(&c->wlock);
	int rc = rpc_write_all(c->fd, &h, sizeof h);
	pthread_mutex_unlock(&c->wlock);
	return rc;
}

/* ---- cp and cs: worker threads on epoll -------------------------------------------------- */
static int epfds[MAX_THREADS]; /* cp: one per worker (pool: per I/O thread); cs: epfds[0] shared */

struct worker_arg {
	int index;
};

#define BATCH 64

static void drop(int epfd, struct conn *c)
{
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	conn_put(c);
}

/* Serve every complete message c holds, reading more while there is. 0, or -1: drop it. */
static int serve_conn(struct conn *c, int thread)
{
	struct msg m[BATCH];
	int n;
	do {
		if (conn_read(c, m, BATCH, &n) < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			serve(&m[i]);
			if (answer(c, &m[i], thread) < 0)
				return -1;
		}
	} while (n > 0);
	return 0;
}

static void *worker_main(void *arg)
{
	int me = ((struct worker_arg *)arg)->index;
	int epfd = cfg.mode == MODE_CS ? epfds[0] : epfds[me];
	struct epoll_event ev[cfg.mode == MODE_CS ? 1 : 16];
	int max = (int)(sizeof ev / sizeof ev[0]);
	for (;;) {
		int n = epoll_wait(epfd, ev, max, -1);
		for (int i = 0; i < n; i++) {
			struct conn *c = ev[i].data.ptr;
			if (serve_conn(c, me) < 0) {
				drop(epfd, c);
				continue;
			}
			if (cfg.mode == MODE_CS) { /* none waiting: hand the connection back */
				struct epoll_event re = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
				if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &re) < 0)
					drop(epfd, c);
			}
		}
	}
	return NULL;
}

/* ---- pool: I/O threads feed one queue ----------------------------------------------------- */
struct job {
	struct conn *c;
	struct msg m;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t ready;
	struct job *v;
	size_t cap, head, len;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .ready = PTHREAD_COND_INITIALIZER};

static int q_push(struct conn *c, const struct msg *m)
{
	pthread_mutex_lock(&q.lock);
	if (q.len == q.cap) {
		size_t nc = q.cap ? q.cap * 2 : 1024;
		struct job *nv = malloc(sizeof *nv * nc);
		if (!nv) {
			pthread_mutex_unlock(&q.lock);
			return -1;
		}
		for (size_t i = 0; i < q.len; i++)
			nv[i] = q.v[(q.head + i) % q.cap];
		free(q.v);
		q.v = nv, q.cap = nc, q.head = 0;
	}
	atomic_fetch_add(&c->refs, 1);
	q.v[(q.head + q.len++) % q.cap] = (struct job){c, *m};
	pthread_cond_signal(&q.ready);
	pthread_mutex_unlock(&q.lock);
	return 0;
}

static void *pool_worker_main(void *arg)
{
	int me = ((struct worker_arg *)arg)->index;
	for (;;) {
		pthread_mutex_lock(&q.lock);
		while (!q.len)
			pthread_cond_wait(&q.ready, &q.lock);
		struct job j = q.v[q.head];
		q.head = (q.head + 1) % q.cap;
		q.len--;
		pthread_mutex_unlock(&q.lock);
		serve(&j.m);
		if (answer(j.c, &j.m, me) < 0)
			shutdown(j.c->fd, SHUT_RDWR); /* its I/O thread sees it end */
		conn_put(j.c);
	}
	return NULL;
}

static void *io_main(void *arg)
{
	int epfd = epfds[((struct worker_arg *)arg)->index];
	struct epoll_event ev[16];
	for (;;) {
		int n = epoll_wait(epfd, ev, 16, -1);
		for (int i = 0; i < n; i++) {
			struct conn *c = ev[i].data.ptr;
			struct msg m[BATCH];
			int k, rc;
			do {
				rc = conn_read(c, m, BATCH, &k);
				for (int x = 0; x < k && rc == 0; x++)
					rc = q_push(c, &m[x]);
			} while (rc == 0 && k == BATCH);
			if (rc < 0)
				drop(epfd, c);
		}
	}
	return NULL;
}

/* ---- accepting ---------------------------------------------------------------------------- */
static void *accept_main(void *arg)
{
	int lfd = *(int *)arg;
	unsigned next = 0;
	int owners = cfg.mode == MODE_POOL ? cfg.io_threads : cfg.threads;
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
				if (errno == EMFILE || errno == ENFILE)
					usleep(10000);
				continue;
			}
			perror("rpc-server: accept");
			exit(1);
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct conn *c = conn_new(fd);
		if (!c) {
			close(fd);
			continue;
		}
		int epfd = cfg.mode == MODE_CS ? epfds[0] : epfds[next++ % (unsigned)owners];
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (cfg.mode == MODE_CS ? EPOLLONESHOT : 0),
					 .data.ptr = c};
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			conn_put(c);
	}
	return NULL;
}

/* ---- the command line --------------------------------------------------------------------- */
static void usage(FILE *f)
{
	fprintf(f,
		"usage: rpc-server --listen ADDR:PORT --mode cp|cs|pool [--threads N] [--io-threads M]\n"
		"                  [--service sleep|spin]\n"
		"  --listen      the address and TCP port to listen on (port 0: any free one; the\n"
		"                ready line says which)\n"
		"  --mode        cp: a connection per worker thread's epoll; cs: one shared epoll,\n"
		"                EPOLLONESHOT; pool: I/O threads feed one queue of messages\n"
		"  --threads     worker threads, 1..%d (default 1)\n"
		"  --io-threads  pool: I/O threads, 1..%d (default 1)\n"
		"  --service     sleep (default) or spin for each message's service_ns\n",
		MAX_THREADS, MAX_THREADS);
}

/* A refused command line: what is wrong and how to give it, then the usage; status 2. */
static int bad(const char *what, const char *fix)
{
	fprintf(stderr, "rpc-server: %s\n  fix: %s\n", what, fix);
	usage(stderr);
	return 2;
}

static int parse_count(const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 1 || v > MAX_THREADS)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},  {"mode", required_argument, NULL, 'm'},
		{"threads", required_argument, NULL, 't'}, {"io-threads", required_argument, NULL, 'i'},
		{"service", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int have_listen = 0, have_mode = 0, o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'l':
			if (rpc_parse_addr(optarg, 0, &cfg.addr) < 0)
				return bad("--listen: not an IPv4 address and port", "e.g. --listen 10.0.0.2:7000");
			have_listen = 1;
			break;
		case 'm':
			if (!strcmp(optarg, "cp"))
				cfg.mode = MODE_CP;
			else if (!strcmp(optarg, "cs"))
				cfg.mode = MODE_CS;
			else if (!strcmp(optarg, "pool"))
				cfg.mode = MODE_POOL;
			else
				return bad("--mode: not a mode", "use cp, cs or pool");
			have_mode = 1;
			break;
		case 't':
			if (parse_count(optarg, &cfg.threads) < 0)
				return bad("--threads: not a thread count", "give 1 to 256");
			break;
		case 'i':
			if (parse_count(optarg, &cfg.io_threads) < 0)
				return bad("--io-threads: not a thread count", "give 1 to 256");
			break;
		case 's':
			if (!strcmp(optarg, "spin"))
				cfg.spin = 1;
			else if (strcmp(optarg, "sleep"))
				return bad("--service: not a service", "use sleep or spin");
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!have_listen)
		return bad("--listen is required", "e.g. --listen 127.0.0.1:0");
	if (!have_mode)
		return bad("--mode is required", "use cp, cs or pool");
	if (optind != argc)
		return bad("unexpected arguments", "every setting is an option");

	/* SIGINT and SIGTERM end the program from the main thread (every other thread has them blocked) */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* inherited by every thread: sleeps end when asked */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&cfg.addr, sizeof cfg.addr) < 0 || listen(lfd, 4096) < 0) {
		perror("rpc-server: listen");
		return 1;
	}
	struct sockaddr_in bound;
	socklen_t blen = sizeof bound;
	getsockname(lfd, (struct sockaddr *)&bound, &blen);

	int owners = cfg.mode == MODE_POOL ? cfg.io_threads : cfg.mode == MODE_CS ? 1 : cfg.threads;
	for (int i = 0; i < owners; i++)
		if ((epfds[i] = epoll_create1(EPOLL_CLOEXEC)) < 0) {
			perror("rpc-server: epoll_create1");
			return 1;
		}
	static struct worker_arg args[MAX_THREADS], io_args[MAX_THREADS];
	pthread_t t;
	for (int i = 0; i < cfg.threads; i++) {
		args[i].index = i;
		if (pthread_create(&t, NULL, cfg.mode == MODE_POOL ? pool_worker_main : worker_main, &args[i])) {
			fprintf(stderr, "rpc-server: cannot start worker thread %d\n", i);
			return 1;
		}
	}
	for (int i = 0; cfg.mode == MODE_POOL && i < cfg.io_threads; i++) {
		io_args[i].index = i;
		if (pthread_create(&t, NULL, io_main, &io_args[i])) {
			fprintf(stderr, "rpc-server: cannot start I/O thread %d\n", i);
			return 1;
		}
	}
	if (pthread_create(&t, NULL, accept_main, &lfd)) {
		fprintf(stderr, "rpc-server: cannot start the acceptor\n");
		return 1;
	}
	static const char *names[] = {"cp", "cs", "pool"};
	printf("rpc-server ready port=%u mode=%s threads=%d\n", ntohs(bound.sin_port), names[cfg.mode], cfg.threads);
	fflush(stdout);
	int sig;
	sigwait(&stop, &sig);
	printf("rpc-server done served=%llu connections=%llu malformed=%llu\n", (unsigned long long)n_served,
	       (unsigned long long)n_conns, (unsigned long long)n_bad);
	fflush(stdout);
	_exit(0);
}
