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
 *   ms-user  Rakaia's discipline in userspace (its kernel module is not public): I/O
 *         threads parse messages as in pool, and place each in one of the worker
 *         threads' own FIFOs by power of two choices (the shorter of two sampled, a
 *         length counting the message in service). An empty chosen FIFO of an idle
 *         thread is a direct handoff; a thread whose FIFO is empty steals the oldest
 *         message of a non-empty one, found through a bitmap from a random place; and
 *         a message queued while some thread is idle wakes that thread with it (work
 *         conserving). The simulator's `rakaia` policy is the same discipline. One
 *         lock guards the placement: what is measured is the discipline, not the
 *         module's per-socket locking.
 *
 *   kcm   KCM-like: the kernel's Connection Multiplexor delimits each connection's
 *         messages with a BPF length parser (kcm.c), on a KCM socket of the
 *         connection's own; connections are dealt round-robin to worker threads as in
 *         cp, so a message is detached from its stream but stays on its connection's
 *         thread (local scheduling only). Needs a kernel with CONFIG_AF_KCM: where it
 *         is missing the mode refuses to start, naming it (--preflight says so too).
 *
 *   rakaia  not built: Rakaia's AF_RAKAIA sockets come from its kernel module, whose
 *         source is not public. The mode is named, and refused with the reason (exit
 *         1); where it slots in is hosts/rpc/README.md's "The AF_RAKAIA seam".
 *
 * Service is a sleep (clock_nanosleep to the deadline) or a spin of the message's
 * service_ns, as rain-worker's handler. Prints "rpc-server ready port=P" once
 * listening, and on SIGINT or SIGTERM "rpc-server done ..." with its counts.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
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

#include "kcm.h"
#include "rpc_net.h"
#include "rpc_proto.h"

#define MAX_THREADS 256

enum mode { MODE_CP, MODE_CS, MODE_POOL, MODE_MSU, MODE_KCM };
static const char *const mode_names[] = {"cp", "cs", "pool", "ms-user", "kcm"};
static int kcm_prog = -1; /* kcm: the length parser */

static struct {
	enum mode mode;
	int threads, io_threads, spin;
	struct sockaddr_in addr;
} cfg = {.threads = 1, .io_threads = 1};

static atomic_ullong n_served, n_conns, n_bad;

/* What the worker threads cost beyond the service asked: each thread's start, the time
 * it spent waiting for work (epoll_wait, the queue's condition) and since when it waits
 * now (0: busy). The done line gives their busy time and the service the requests
 * asked for; per request, the difference is the server's own cost (the wake-up, reads,
 * parsing, the answer, a sleep that ends late), which the model beside a point adds
 * to the service (orchestrator/experiment/model_beside.py). Only the thread itself
 * writes its own slot. */
static struct {
	atomic_llong start, waited, since;
} wt[MAX_THREADS];
static atomic_ullong asked_ns;

static void wait_begin(int me) { atomic_store_explicit(&wt[me].since, rpc_now_ns(), memory_order_relaxed); }

static void wait_end(int me)
{
	long long since = atomic_exchange_explicit(&wt[me].since, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&wt[me].waited, rpc_now_ns() - since, memory_order_relaxed);
}

static void thread_begin(int me)
{
	long long now = rpc_now_ns();
	atomic_store_explicit(&wt[me].waited, 0, memory_order_relaxed);
	atomic_store_explicit(&wt[me].since, 0, memory_order_relaxed);
	atomic_store_explicit(&wt[me].start, now, memory_order_relaxed);
}

/* The worker threads' busy time until now, all of them together. */
static unsigned long long busy_ns(void)
{
	long long now = rpc_now_ns(), busy = 0;
	for (int i = 0; i < cfg.threads && i < MAX_THREADS; i++) {
		long long start = atomic_load_explicit(&wt[i].start, memory_order_relaxed);
		if (!start)
			continue;
		long long since = atomic_load_explicit(&wt[i].since, memory_order_relaxed);
		long long b = now - start - atomic_load_explicit(&wt[i].waited, memory_order_relaxed) -
			      (since ? now - since : 0);
		busy += b > 0 ? b : 0;
	}
	return (unsigned long long)busy;
}
static unsigned long long n_handoff, n_queued, n_stolen; /* ms-user, under ms.lock */

/* ---- a connection ----------------------------------------------------------------------- */
struct conn {
	int fd;                    /* what messages are read from and answers written to */
	int tcp;                   /* kcm: the TCP socket under fd (else -1) */
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
	c->tcp = -1;
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->wlock, NULL);
	atomic_fetch_add(&n_conns, 1);
	return c;
}

static void conn_put(struct conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1) {
		close(c->fd);
		if (c->tcp >= 0)
			close(c->tcp);
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
	atomic_fetch_add_explicit(&asked_ns, m->service_ns, memory_order_relaxed);
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

/* kcm: each read of the KCM socket is one whole message. 0 once none is waiting, or -1. */
static int serve_kcm(struct conn *c, int thread)
{
	for (;;) {
		ssize_t r = recv(c->fd, c->buf, sizeof c->buf, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		struct rpc_hdr h;
		if (r < (ssize_t)RPC_HDR_LEN) {
			atomic_fetch_add(&n_bad, 1);
			return -1;
		}
		memcpy(&h, c->buf, sizeof h);
		if (ntohl(h.magic) != RPC_REQ || ntohl(h.len) != (uint32_t)r - RPC_HDR_LEN) {
			atomic_fetch_add(&n_bad, 1);
			return -1;
		}
		struct msg m = {.id = be64toh(h.id), .service_ns = be64toh(h.service_ns)};
		serve(&m);
		if (answer(c, &m, thread) < 0)
			return -1;
	}
}

/* Serve every complete message c holds, reading more while there is. 0, or -1: drop it. */
static int serve_conn(struct conn *c, int thread)
{
	if (cfg.mode == MODE_KCM)
		return serve_kcm(c, thread);
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
	thread_begin(me);
	for (;;) {
		wait_begin(me);
		int n = epoll_wait(epfd, ev, max, -1);
		wait_end(me);
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
	thread_begin(me);
	for (;;) {
		pthread_mutex_lock(&q.lock);
		if (!q.len) {
			wait_begin(me);
			while (!q.len)
				pthread_cond_wait(&q.ready, &q.lock);
			wait_end(me);
		}
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

static int ms_place(struct conn *c, const struct msg *m);

static void *io_main(void *arg)
{
	int (*place)(struct conn *, const struct msg *) = cfg.mode == MODE_MSU ? ms_place : q_push;
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
					rc = place(c, &m[x]);
			} while (rc == 0 && k == BATCH);
			if (rc < 0)
				drop(epfd, c);
		}
	}
	return NULL;
}

/* ---- ms-user: power of two choices over per-thread FIFOs, handoff and stealing ----------- */
struct fifo {
	struct job *v;
	uint32_t cap, head, len;
};

static struct {
	pthread_mutex_t lock;
	struct fifo *q;          /* per worker thread */
	uint8_t *running;        /* per thread: a message in service, or handed to it */
	struct job *next;        /* per thread: the message handed to it while idle */
	pthread_cond_t *wake;    /* per thread */
	int *idle, n_idle;       /* the idle threads (a stack) */
	uint64_t bits[MAX_THREADS / 64]; /* the non-empty FIFOs */
	long waiting;
	uint64_t rng;
} ms = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint32_t ms_below(uint32_t n) /* xorshift64*: placement needs no quality beyond this */
{
	ms.rng ^= ms.rng >> 12, ms.rng ^= ms.rng << 25, ms.rng ^= ms.rng >> 27;
	return (uint32_t)(((ms.rng * 2685821657736338717ULL) >> 32) * n >> 32);
}

static int fifo_push(struct fifo *f, struct job j)
{
	if (f->len == f->cap) {
		uint32_t nc = f->cap ? f->cap * 2 : 256;
		struct job *nv = malloc(sizeof *nv * nc);
		if (!nv)
			return -1;
		for (uint32_t i = 0; i < f->len; i++)
			nv[i] = f->v[(f->head + i) % f->cap];
		free(f->v);
		f->v = nv, f->cap = nc, f->head = 0;
	}
	f->v[(f->head + f->len++) % f->cap] = j;
	return 0;
}

static struct job ms_pop(int w)
{
	struct fifo *f = &ms.q[w];
	struct job j = f->v[f->head];
	f->head = (f->head + 1) % f->cap;
	if (!--f->len)
		ms.bits[w / 64] &= ~(1ULL << (w % 64));
	ms.waiting--;
	return j;
}

static void ms_hand(int w, struct job j) /* to an idle thread, off the idle stack */
{
	for (int i = 0; i < ms.n_idle; i++)
		if (ms.idle[i] == w) {
			ms.idle[i] = ms.idle[--ms.n_idle];
			break;
		}
	ms.running[w] = 1;
	ms.next[w] = j;
	pthread_cond_signal(&ms.wake[w]);
}

static int ms_place(struct conn *c, const struct msg *m)
{
	int n = cfg.threads;
	atomic_fetch_add(&c->refs, 1);
	struct job j = {c, *m};
	pthread_mutex_lock(&ms.lock);
	int a = (int)ms_below((uint32_t)n), b = (int)ms_below((uint32_t)n - 1);
	b += b >= a; /* two distinct FIFOs */
	long la = ms.q[a].len + ms.running[a], lb = ms.q[b].len + ms.running[b];
	int w = lb < la ? b : a;
	if (!ms.running[w] && !ms.q[w].len) { /* empty, its thread idle: handoff */
		n_handoff++;
		ms_hand(w, j);
	} else if (fifo_push(&ms.q[w], j) < 0) {
		pthread_mutex_unlock(&ms.lock);
		conn_put(c);
		return -1;
	} else {
		n_queued++;
		ms.waiting++;
		ms.bits[w / 64] |= 1ULL << (w % 64);
		if (ms.n_idle) /* work-conserving: an idle thread takes it at once */
			ms_hand(ms.idle[ms.n_idle - 1], ms_pop(w));
	}
	pthread_mutex_unlock(&ms.lock);
	return 0;
}

/* A non-empty FIFO, the bitmap scanned from a random thread on; -1 if none. */
static int ms_victim(void)
{
	if (!ms.waiting)
		return -1;
	int n = cfg.threads, start = (int)ms_below((uint32_t)n);
	for (int i = 0; i < n; i++) {
		int w = (start + i) % n;
		if (ms.bits[w / 64] >> (w % 64) & 1)
			return w;
	}
	return -1;
}

static void *ms_worker_main(void *arg)
{
	int me = ((struct worker_arg *)arg)->index;
	thread_begin(me);
	pthread_mutex_lock(&ms.lock);
	for (;;) {
		if (!ms.running[me]) { /* idle (ms_init: every thread starts so) until handed a message */
			wait_begin(me);
			while (!ms.running[me])
				pthread_cond_wait(&ms.wake[me], &ms.lock);
			wait_end(me);
		}
		struct job j = ms.next[me];
		pthread_mutex_unlock(&ms.lock);
		serve(&j.m);
		if (answer(j.c, &j.m, me) < 0)
			shutdown(j.c->fd, SHUT_RDWR); /* its I/O thread sees it end */
		conn_put(j.c);
		pthread_mutex_lock(&ms.lock);
		int v;
		if (ms.q[me].len) { /* its own FIFO first, else a stolen message, else idle */
			ms.next[me] = ms_pop(me);
		} else if ((v = ms_victim()) >= 0) {
			n_stolen++;
			ms.next[me] = ms_pop(v);
		} else {
			ms.running[me] = 0;
			ms.idle[ms.n_idle++] = me;
		}
	}
	return NULL;
}

static int ms_init(int n)
{
	ms.q = calloc((size_t)n, sizeof *ms.q);
	ms.running = calloc((size_t)n, 1);
	ms.next = calloc((size_t)n, sizeof *ms.next);
	ms.wake = calloc((size_t)n, sizeof *ms.wake);
	ms.idle = calloc((size_t)n, sizeof *ms.idle);
	if (!ms.q || !ms.running || !ms.next || !ms.wake || !ms.idle)
		return -1;
	for (int i = 0; i < n; i++) {
		pthread_cond_init(&ms.wake[i], NULL);
		ms.idle[ms.n_idle++] = n - 1 - i;
	}
	ms.rng = (uint64_t)rpc_now_ns() | 1;
	return 0;
}

/* ---- accepting ---------------------------------------------------------------------------- */
static void *accept_main(void *arg)
{
	int lfd = *(int *)arg;
	unsigned next = 0;
	int owners = cfg.mode == MODE_POOL || cfg.mode == MODE_MSU ? cfg.io_threads : cfg.threads;
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
		if (cfg.mode == MODE_KCM) { /* the connection's messages come out of a KCM socket of its own */
			char err[512];
			int k = kcm_open(fd, kcm_prog, err, sizeof err);
			if (k < 0) {
				fprintf(stderr, "rpc-server: %s\n", err);
				close(fd);
				continue;
			}
			fcntl(k, F_SETFL, O_NONBLOCK);
			struct conn *c = conn_new(k);
			if (!c) {
				close(k);
				close(fd);
				continue;
			}
			c->tcp = fd;
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
			if (epoll_ctl(epfds[next++ % (unsigned)owners], EPOLL_CTL_ADD, k, &ev) < 0)
				conn_put(c);
			continue;
		}
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
		"usage: rpc-server --listen ADDR:PORT --mode cp|cs|pool|ms-user|kcm [--threads N]\n"
		"                  [--io-threads M]"
		" [--service sleep|spin] [--preflight]\n"
		"  --listen      the address and TCP port to listen on (port 0: any free one; the\n"
		"                ready line says which)\n"
		"  --mode        cp: a connection per worker thread's epoll; cs: one shared epoll,\n"
		"                EPOLLONESHOT; pool: I/O threads feed one queue of messages;\n"
		"                ms-user: I/O threads place each message in a worker thread's\n"
		"                own FIFO by power of two choices, idle threads steal (Rakaia's\n"
		"                discipline, in userspace); kcm: KCM delimits each connection's\n"
		"                messages (a BPF length parser), threads own connections as cp\n"
		"  --threads     worker threads, 1..%d (default 1; ms-user: at least 2)\n"
		"  --io-threads  pool and ms-user: I/O threads, 1..%d (default 1)\n"
		"  --service     sleep (default) or spin for each message's service_ns\n"
		"  --preflight   say whether the mode can run on this machine, and exit (0: it can)\n",
		MAX_THREADS, MAX_THREADS);
}

/* kcm: the length parser loaded and checked on a message, and KCM sockets offered by
 * the kernel. 0, or -1 having said why on f. */
static int kcm_ready(FILE *f)
{
	char err[4608];
	if (kcm_prog < 0 && (kcm_prog = kcm_parser_load(err, sizeof err)) < 0) {
		fprintf(f, "rpc-server: --mode kcm: %s\n", err);
		return -1;
	}
	static const uint32_t lens[] = {0, 100, RPC_MAX_PAYLOAD, RPC_MAX_PAYLOAD + 1};
	for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		struct rpc_hdr h = {.magic = htonl(RPC_REQ), .len = htonl(lens[i])};
		long got = kcm_parser_run(kcm_prog, &h, sizeof h, err, sizeof err);
		long want = lens[i] > RPC_MAX_PAYLOAD ? 0xFFFFFFFFL : (long)(RPC_HDR_LEN + lens[i]); /* -1 as a u32 */
		if (got != want) {
			fprintf(f, "rpc-server: --mode kcm: the length parser gives %ld for a header of len %u, not %ld%s%s\n",
				got, lens[i], want, got < 0 ? ": " : "", got < 0 ? err : "");
			return -1;
		}
	}
	fprintf(f,
		"rpc-server: kcm: the length parser gives a %u-byte header and 0, 100 or %u bytes their length, "
		"and refuses %u\n",
		RPC_HDR_LEN, RPC_MAX_PAYLOAD, RPC_MAX_PAYLOAD + 1);
	if (kcm_available(err, sizeof err) < 0) {
		fprintf(f, "rpc-server: --mode kcm: %s\n", err);
		return -1;
	}
	return 0;
}

/* --preflight: can the mode run here? */
static int preflight_mode(void)
{
	if (cfg.mode == MODE_KCM && kcm_ready(stdout) < 0)
		return 1;
	printf("rpc-server: --mode %s can run on this machine\n", mode_names[cfg.mode]);
	return 0;
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
		{"preflight", no_argument, NULL, 'p'},	    {NULL, 0, NULL, 0},
	};
	int have_listen = 0, have_mode = 0, preflight = 0, o;
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
			else if (!strcmp(optarg, "ms-user"))
				cfg.mode = MODE_MSU;
			else if (!strcmp(optarg, "kcm"))
				cfg.mode = MODE_KCM;
			else if (!strcmp(optarg, "rakaia")) {
				fprintf(stderr, "rpc-server: --mode rakaia needs Rakaia's AF_RAKAIA sockets, from its kernel "
						"module, whose source is not public\n  fix: use --mode ms-user (its "
						"discipline in userspace), or build the mode against the module: "
						"hosts/rpc/README.md, \"The AF_RAKAIA seam\"\n");
				return 1;
			} else
				return bad("--mode: not a mode", "use cp, cs, pool, ms-user or kcm");
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
		case 'p':
			preflight = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!have_mode)
		return bad("--mode is required", "use cp, cs, pool, ms-user or kcm");
	if (preflight)
		return preflight_mode();
	if (!have_listen)
		return bad("--listen is required", "e.g. --listen 127.0.0.1:0");
	if (cfg.mode == MODE_KCM && kcm_ready(stderr) < 0)
		return 1;
	if (cfg.mode == MODE_MSU && cfg.threads < 2)
		return bad("--mode ms-user: power of two choices needs at least 2 worker threads", "give --threads 2 or more");
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

	int io = cfg.mode == MODE_POOL || cfg.mode == MODE_MSU;
	int owners = io ? cfg.io_threads : cfg.mode == MODE_CS ? 1 : cfg.threads;
	if (cfg.mode == MODE_MSU && ms_init(cfg.threads) < 0) {
		fprintf(stderr, "rpc-server: out of memory\n");
		return 1;
	}
	for (int i = 0; i < owners; i++)
		if ((epfds[i] = epoll_create1(EPOLL_CLOEXEC)) < 0) {
			perror("rpc-server: epoll_create1");
			return 1;
		}
	static struct worker_arg args[MAX_THREADS], io_args[MAX_THREADS];
	pthread_t t;
	for (int i = 0; i < cfg.threads; i++) {
		args[i].index = i;
		void *(*body)(void *) = cfg.mode == MODE_POOL  ? pool_worker_main
					: cfg.mode == MODE_MSU ? ms_worker_main
							       : worker_main;
		if (pthread_create(&t, NULL, body, &args[i])) {
			fprintf(stderr, "rpc-server: cannot start worker thread %d\n", i);
			return 1;
		}
	}
	for (int i = 0; io && i < cfg.io_threads; i++) {
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
	printf("rpc-server ready port=%u mode=%s threads=%d\n", ntohs(bound.sin_port), mode_names[cfg.mode], cfg.threads);
	fflush(stdout);
	int sig;
	sigwait(&stop, &sig);
	printf("rpc-server done served=%llu connections=%llu malformed=%llu busy_ns=%llu asked_ns=%llu",
	       (unsigned long long)n_served, (unsigned long long)n_conns, (unsigned long long)n_bad, busy_ns(),
	       (unsigned long long)asked_ns);
	if (cfg.mode == MODE_MSU) {
		pthread_mutex_lock(&ms.lock);
		printf(" handoffs=%llu queued=%llu stolen=%llu", n_handoff, n_queued, n_stolen);
		pthread_mutex_unlock(&ms.lock);
	}
	printf("\n");
	fflush(stdout);
	_exit(0);
}
