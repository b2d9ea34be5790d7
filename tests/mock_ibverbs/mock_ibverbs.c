/* SPDX-License-Identifier: Apache-2.0
 *
 * A MOCK of a ConnectX behind libibverbs, for tests only: there is no RDMA hardware on
 * the machines that run the tests. It stands in for the verbs rain-worker calls (the
 * list is libibverbs.map; the test checks it covers every ibv_* symbol the binary
 * imports) and is interposed with LD_PRELOAD, not LD_LIBRARY_PATH: DPDK loads its mlx5
 * drivers as plugins at start-up, and they need the real libibverbs's private symbols,
 * so the real library stays loaded and these definitions, with the same symbol versions
 * (IBVERBS_1.1, IBVERBS_1.11), win the lookup.
 *
 * It fakes RDMA devices (MOCK_IBVERBS_DEVICES, default "mock_mlx5_0"; "" = none), each
 * with one active Ethernet port, and logs every call with its arguments as one JSON
 * line to MOCK_IBVERBS_LOG. What it checks, the way the kernel and a ConnectX would
 * refuse it (EINVAL unless said otherwise):
 *   - ibv_modify_qp: legal state transitions (RESET->INIT->RTR->RTS, any->RESET/ERR);
 *     the attribute mask each transition requires and allows for UC and RC
 *     (ibv_modify_qp(3), the kernel's qp_state_table); port 1, pkey index 0; a global
 *     AV (RoCE) whose sgid_index names a valid GID; path MTU <= the port's active MTU;
 *     24-bit QPN and PSN;
 *   - ibv_reg_mr: REMOTE_WRITE needs LOCAL_WRITE; every page of the range is mapped
 *     (EFAULT otherwise: the kernel could not pin it);
 *   - ibv_create_qp: CQs and PD of the same device; UC or RC only (EOPNOTSUPP);
 *   - teardown: ibv_destroy_cq EBUSY while a QP uses it, ibv_dealloc_pd EBUSY while an
 *     MR or QP holds it; ibv_close_device logs what was still open ("leaked").
 * What it does not do: move any data (no WRITE is ever applied; the emulated path and
 * the switch tests cover the data path), pin memory, resolve the switch's MAC, check
 * resource limits or provider-specific attributes, or look at access flags beyond the
 * rule above.
 *
 * Knobs: MOCK_IBVERBS_GIDS "i=v1|v2:ADDR,..." (the GID table of port 1, 16 entries,
 * the rest empty), MOCK_IBVERBS_ACTIVE_MTU (bytes, default 4096), MOCK_IBVERBS_PORT_DOWN,
 * MOCK_IBVERBS_LINK_IB (an InfiniBand port), MOCK_IBVERBS_FAIL "what=errno[@n],..."
 * (what: ibv_open_device, ibv_alloc_pd, ibv_reg_mr, ibv_create_cq, ibv_create_qp, init,
 * rtr; the n-th such call fails, every one if @n is left out).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#undef ibv_query_port
#undef ibv_reg_mr

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEV 4
#define GID_TBL 16
#define MOCK_QPN_BASE 0x00c3a0
#define MOCK_KEY_BASE 0x1b2c0d00

struct mock_dev {
	struct ibv_device dev;
	int idx;
};

struct mock_ctx {
	struct ibv_context ctx;
	int idx;
	int open_pds, open_mrs, open_cqs, open_qps;
};

struct mock_pd {
	struct ibv_pd pd;
	int id;
	int users; /* MRs and QPs */
};

struct mock_cq {
	struct ibv_cq cq;
	int id;
	int users;
};

struct mock_mr {
	struct ibv_mr mr;
	int id;
};

struct mock_qp {
	struct ibv_qp qp;
	struct mock_pd *pd;
	struct mock_cq *scq, *rcq;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *logf;
static struct mock_dev devs[MAX_DEV];
static struct ibv_device *dev_ptrs[MAX_DEV + 1];
static int ndevs = -1;
static struct { union ibv_gid gid; int type; int valid; } gids[GID_TBL];
static int next_pd, next_cq, next_mr, next_qp;
static int calls[16];

/* ---- the log ---------------------------------------------------------------------- */
static void log_line(const char *fmt, ...)
{
	if (logf == NULL) {
		const char *p = getenv("MOCK_IBVERBS_LOG");
		if (p == NULL || (logf = fopen(p, "a")) == NULL)
			return;
		setvbuf(logf, NULL, _IOLBF, 0);
	}
	va_list ap;
	va_start(ap, fmt);
	vfprintf(logf, fmt, ap);
	va_end(ap);
	fputc('\n', logf);
	fflush(logf);
}

static const char *state_name(enum ibv_qp_state s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN" };
	return (unsigned)s < 8 ? n[s] : "?";
}

static void gid_str(const union ibv_gid *g, char *buf, size_t n)
{
	if (inet_ntop(AF_INET6, g->raw, buf, (socklen_t)n) == NULL)
		snprintf(buf, n, "?");
}

/* ---- configuration ---------------------------------------------------------------- */
/* Returns the errno to fail with for this call of `what`, or 0. */
static int should_fail(const char *what, int slot)
{
	const char *spec = getenv("MOCK_IBVERBS_FAIL");
	int nth = ++calls[slot];
	if (spec == NULL)
		return 0;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (eq == NULL)
			continue;
		*eq = '\0';
		if (strcmp(tok, what) != 0)
			continue;
		char *at = strchr(eq + 1, '@');
		int when = at ? atoi(at + 1) : 0;
		if (when == 0 || when == nth)
			return atoi(eq + 1);
	}
	return 0;
}

enum { F_OPEN, F_PD, F_MR, F_CQ, F_QP, F_INIT, F_RTR };

static void setup(void)
{
	if (ndevs >= 0)
		return;
	const char *names = getenv("MOCK_IBVERBS_DEVICES");
	if (names == NULL)
		names = "mock_mlx5_0";
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", names);
	ndevs = 0;
	for (char *save, *tok = strtok_r(buf, ",", &save); tok && ndevs < MAX_DEV; tok = strtok_r(NULL, ",", &save)) {
		struct mock_dev *d = &devs[ndevs];
		d->idx = ndevs;
		d->dev.node_type = IBV_NODE_CA;
		d->dev.transport_type = IBV_TRANSPORT_IB;
		snprintf(d->dev.name, sizeof(d->dev.name), "%s", tok);
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", ndevs);
		snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", ndevs);
		snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", tok);
		dev_ptrs[ndevs] = &d->dev;
		ndevs++;
	}
	dev_ptrs[ndevs] = NULL;
	const char *g = getenv("MOCK_IBVERBS_GIDS");
	if (g == NULL)
		return;
	char gb[1024];
	snprintf(gb, sizeof(gb), "%s", g);
	for (char *save, *tok = strtok_r(gb, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int i = atoi(tok);
		char *eq = strchr(tok, '='), *colon = eq ? strchr(eq, ':') : NULL;
		if (i < 0 || i >= GID_TBL || colon == NULL)
			continue;
		*colon = '\0';
		if (inet_pton(AF_INET6, colon + 1, gids[i].gid.raw) != 1)
			continue;
		gids[i].type = strcmp(eq + 1, "v2") == 0 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
		gids[i].valid = 1;
	}
}

static enum ibv_mtu active_mtu(void)
{
	const char *m = getenv("MOCK_IBVERBS_ACTIVE_MTU");
	int b = m ? atoi(m) : 4096;
	return b >= 4096 ? IBV_MTU_4096 : b >= 2048 ? IBV_MTU_2048 : b >= 1024 ? IBV_MTU_1024 : IBV_MTU_512;
}

/* ---- devices ---------------------------------------------------------------------- */
EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	pthread_mutex_lock(&lock);
	setup();
	log_line("{\"call\": \"ibv_get_device_list\", \"devices\": %d}", ndevs);
	pthread_mutex_unlock(&lock);
	if (num)
		*num = ndevs;
	struct ibv_device **copy = calloc((size_t)ndevs + 1, sizeof(*copy));
	if (copy)
		memcpy(copy, dev_ptrs, ((size_t)ndevs + 1) * sizeof(*copy));
	return copy;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	pthread_mutex_lock(&lock);
	log_line("{\"call\": \"ibv_free_device_list\"}");
	pthread_mutex_unlock(&lock);
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct mock_dev *d = (struct mock_dev *)device;
	pthread_mutex_lock(&lock);
	int e = should_fail("ibv_open_device", F_OPEN);
	log_line("{\"call\": \"ibv_open_device\", \"device\": \"%s\", \"errno\": %d}", device->name, e);
	pthread_mutex_unlock(&lock);
	if (e) {
		errno = e;
		return NULL;
	}
	struct mock_ctx *c = calloc(1, sizeof(*c));
	c->ctx.device = device;
	c->ctx.cmd_fd = c->ctx.async_fd = -1;
	c->ctx.num_comp_vectors = 1;
	c->ctx.abi_compat = NULL; /* not an extended context: the inline wrappers use the exported calls */
	pthread_mutex_init(&c->ctx.mutex, NULL);
	c->idx = d->idx;
	return &c->ctx;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct mock_ctx *c = (struct mock_ctx *)context;
	pthread_mutex_lock(&lock);
	log_line("{\"call\": \"ibv_close_device\", \"device\": \"%s\", \"leaked\": {\"pd\": %d, \"mr\": %d, \"cq\": %d, "
		 "\"qp\": %d}}", context->device->name, c->open_pds, c->open_mrs, c->open_cqs, c->open_qps);
	pthread_mutex_unlock(&lock);
	free(c);
	return 0;
}

EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	/* The only caller is verbs.h's inline wrapper, with a zeroed struct ibv_port_attr;
	 * fill the fields the compat layout shares with it (all before port_cap_flags2). */
	struct ibv_port_attr *a = (struct ibv_port_attr *)port_attr;
	int rc = 0;
	pthread_mutex_lock(&lock);
	if (port_num != 1) {
		rc = EINVAL;
	} else {
		a->state = getenv("MOCK_IBVERBS_PORT_DOWN") ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
		a->max_mtu = IBV_MTU_4096;
		a->active_mtu = active_mtu();
		a->gid_tbl_len = GID_TBL;
		a->max_msg_sz = 1u << 30;
		a->pkey_tbl_len = 1;
		a->link_layer = getenv("MOCK_IBVERBS_LINK_IB") ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
		a->phys_state = 5; /* LinkUp */
	}
	log_line("{\"call\": \"ibv_query_port\", \"device\": \"%s\", \"port\": %u, \"ret\": %d}", context->device->name,
		 port_num, rc);
	pthread_mutex_unlock(&lock);
	return rc;
}

EXPORT const char *ibv_port_state_str(enum ibv_port_state state)
{
	static const char *const n[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER" };
	return (unsigned)state < 6 ? n[state] : "invalid state";
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
			     struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	int rc = 0;
	pthread_mutex_lock(&lock);
	setup();
	if (entry_size != sizeof(*entry) || flags != 0 || port_num != 1)
		rc = EINVAL;
	else if (gid_index >= GID_TBL || !gids[gid_index].valid)
		rc = ENODATA;
	else {
		memset(entry, 0, sizeof(*entry));
		entry->gid = gids[gid_index].gid;
		entry->gid_index = gid_index;
		entry->port_num = port_num;
		entry->gid_type = (uint32_t)gids[gid_index].type;
		entry->ndev_ifindex = 2;
	}
	log_line("{\"call\": \"ibv_query_gid_ex\", \"port\": %u, \"index\": %u, \"ret\": %d}", port_num, gid_index, rc);
	pthread_mutex_unlock(&lock);
	return rc;
}

/* ---- PD, MR, CQ ------------------------------------------------------------------- */
EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct mock_ctx *c = (struct mock_ctx *)context;
	pthread_mutex_lock(&lock);
	int e = should_fail("ibv_alloc_pd", F_PD);
	struct mock_pd *p = e ? NULL : calloc(1, sizeof(*p));
	if (p) {
		p->pd.context = context;
		p->id = ++next_pd;
		p->pd.handle = (uint32_t)p->id;
		c->open_pds++;
	}
	log_line("{\"call\": \"ibv_alloc_pd\", \"pd\": %d, \"errno\": %d}", p ? p->id : 0, e);
	pthread_mutex_unlock(&lock);
	errno = e;
	return p ? &p->pd : NULL;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct mock_pd *p = (struct mock_pd *)pd;
	pthread_mutex_lock(&lock);
	int rc = p->users ? EBUSY : 0;
	log_line("{\"call\": \"ibv_dealloc_pd\", \"pd\": %d, \"users\": %d, \"ret\": %d}", p->id, p->users, rc);
	if (rc == 0) {
		((struct mock_ctx *)pd->context)->open_pds--;
		free(p);
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Every page of [addr, addr + len) is mapped (mincore fails with ENOMEM otherwise). */
static int range_mapped(void *addr, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)(page - 1);
	uintptr_t hi = ((uintptr_t)addr + len + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
	size_t pages = (hi - lo) / (uintptr_t)page;
	unsigned char *vec = malloc(pages ? pages : 1);
	int ok = vec && mincore((void *)lo, hi - lo, vec) == 0;
	free(vec);
	return ok;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct mock_pd *p = (struct mock_pd *)pd;
	pthread_mutex_lock(&lock);
	int e = should_fail("ibv_reg_mr", F_MR);
	if (!e && (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		e = EINVAL;
	if (!e && (length == 0 || !range_mapped(addr, length)))
		e = EFAULT;
	struct mock_mr *m = e ? NULL : calloc(1, sizeof(*m));
	if (m) {
		m->id = ++next_mr;
		m->mr.context = pd->context;
		m->mr.pd = pd;
		m->mr.addr = addr;
		m->mr.length = length;
		m->mr.handle = (uint32_t)m->id;
		m->mr.lkey = MOCK_KEY_BASE + 2 * (uint32_t)m->id;
		m->mr.rkey = MOCK_KEY_BASE + 2 * (uint32_t)m->id + 1;
		p->users++;
		((struct mock_ctx *)pd->context)->open_mrs++;
	}
	log_line("{\"call\": \"ibv_reg_mr\", \"pd\": %d, \"addr\": %llu, \"length\": %zu, \"access\": %d, \"mr\": %d, "
		 "\"lkey\": %u, \"rkey\": %u, \"errno\": %d}", p->id, (unsigned long long)(uintptr_t)addr, length, access,
		 m ? m->id : 0, m ? m->mr.lkey : 0, m ? m->mr.rkey : 0, e);
	pthread_mutex_unlock(&lock);
	errno = e;
	return m ? &m->mr : NULL;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct mock_mr *m = (struct mock_mr *)mr;
	pthread_mutex_lock(&lock);
	log_line("{\"call\": \"ibv_dereg_mr\", \"mr\": %d, \"rkey\": %u, \"ret\": 0}", m->id, mr->rkey);
	((struct mock_pd *)mr->pd)->users--;
	((struct mock_ctx *)mr->context)->open_mrs--;
	free(m);
	pthread_mutex_unlock(&lock);
	return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	pthread_mutex_lock(&lock);
	int e = should_fail("ibv_create_cq", F_CQ);
	if (!e && (cqe < 1 || comp_vector < 0 || comp_vector >= context->num_comp_vectors))
		e = EINVAL;
	struct mock_cq *q = e ? NULL : calloc(1, sizeof(*q));
	if (q) {
		q->id = ++next_cq;
		q->cq.context = context;
		q->cq.channel = channel;
		q->cq.cq_context = cq_context;
		q->cq.cqe = cqe;
		q->cq.handle = (uint32_t)q->id;
		pthread_mutex_init(&q->cq.mutex, NULL);
		pthread_cond_init(&q->cq.cond, NULL);
		((struct mock_ctx *)context)->open_cqs++;
	}
	log_line("{\"call\": \"ibv_create_cq\", \"cqe\": %d, \"cq\": %d, \"errno\": %d}", cqe, q ? q->id : 0, e);
	pthread_mutex_unlock(&lock);
	errno = e;
	return q ? &q->cq : NULL;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct mock_cq *q = (struct mock_cq *)cq;
	pthread_mutex_lock(&lock);
	int rc = q->users ? EBUSY : 0;
	log_line("{\"call\": \"ibv_destroy_cq\", \"cq\": %d, \"users\": %d, \"ret\": %d}", q->id, q->users, rc);
	if (rc == 0) {
		((struct mock_ctx *)cq->context)->open_cqs--;
		free(q);
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* ---- QPs -------------------------------------------------------------------------- */
EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	pthread_mutex_lock(&lock);
	int e = should_fail("ibv_create_qp", F_QP);
	if (!e && (ia->send_cq == NULL || ia->recv_cq == NULL || ia->send_cq->context != pd->context ||
		   ia->recv_cq->context != pd->context || ia->srq != NULL))
		e = EINVAL;
	if (!e && ia->qp_type != IBV_QPT_UC && ia->qp_type != IBV_QPT_RC)
		e = EOPNOTSUPP;
	struct mock_qp *q = e ? NULL : calloc(1, sizeof(*q));
	if (q) {
		q->qp.context = pd->context;
		q->qp.qp_context = ia->qp_context;
		q->qp.pd = pd;
		q->qp.send_cq = ia->send_cq;
		q->qp.recv_cq = ia->recv_cq;
		q->qp.qp_num = MOCK_QPN_BASE + (uint32_t)next_qp++;
		q->qp.handle = q->qp.qp_num;
		q->qp.state = IBV_QPS_RESET;
		q->qp.qp_type = ia->qp_type;
		pthread_mutex_init(&q->qp.mutex, NULL);
		pthread_cond_init(&q->qp.cond, NULL);
		q->pd = (struct mock_pd *)pd;
		q->scq = (struct mock_cq *)ia->send_cq;
		q->rcq = (struct mock_cq *)ia->recv_cq;
		q->pd->users++;
		q->scq->users++;
		q->rcq->users++;
		((struct mock_ctx *)pd->context)->open_qps++;
	}
	log_line("{\"call\": \"ibv_create_qp\", \"pd\": %d, \"type\": \"%s\", \"send_cq\": %d, \"recv_cq\": %d, "
		 "\"max_send_wr\": %u, \"max_recv_wr\": %u, \"qpn\": %u, \"errno\": %d}", ((struct mock_pd *)pd)->id,
		 ia->qp_type == IBV_QPT_UC ? "UC" : ia->qp_type == IBV_QPT_RC ? "RC" : "other",
		 ia->send_cq ? ((struct mock_cq *)ia->send_cq)->id : 0, ia->recv_cq ? ((struct mock_cq *)ia->recv_cq)->id : 0,
		 ia->cap.max_send_wr, ia->cap.max_recv_wr, q ? q->qp.qp_num : 0, e);
	pthread_mutex_unlock(&lock);
	errno = e;
	return q ? &q->qp : NULL;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct mock_qp *q = (struct mock_qp *)qp;
	pthread_mutex_lock(&lock);
	log_line("{\"call\": \"ibv_destroy_qp\", \"qpn\": %u, \"state\": \"%s\", \"ret\": 0}", qp->qp_num,
		 state_name(qp->state));
	q->pd->users--;
	q->scq->users--;
	q->rcq->users--;
	((struct mock_ctx *)qp->context)->open_qps--;
	free(q);
	pthread_mutex_unlock(&lock);
	return 0;
}

/* Required and allowed attributes per transition (ibv_modify_qp(3); the kernel's
 * qp_state_table for UC and RC). */
static int check_mask(const struct ibv_qp *qp, enum ibv_qp_state to, int mask)
{
	enum ibv_qp_state from = qp->state;
	bool rc = qp->qp_type == IBV_QPT_RC;
	int req, opt;

	if (!(mask & IBV_QP_STATE))
		return EINVAL;
	if (to == IBV_QPS_RESET || to == IBV_QPS_ERR)
		return mask == IBV_QP_STATE ? 0 : EINVAL;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
		req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		opt = 0;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
		req = 0;
		opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
		if (rc)
			req |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	} else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		req = IBV_QP_SQ_PSN | (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC : 0);
		opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE | (rc ? IBV_QP_MIN_RNR_TIMER : 0);
	} else {
		return EINVAL; /* not a transition the QP state machine has */
	}
	int given = mask & ~IBV_QP_STATE;
	if ((given & req) != req || (given & ~(req | opt)) != 0)
		return EINVAL;
	return 0;
}

static int check_values(const struct ibv_qp *qp, const struct ibv_qp_attr *a, int mask)
{
	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > active_mtu()))
		return EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff)
		return EINVAL;
	if ((mask & IBV_QP_RQ_PSN) && a->rq_psn > 0xffffff)
		return EINVAL;
	if (mask & IBV_QP_AV) {
		const struct ibv_ah_attr *ah = &a->ah_attr;
		if (!ah->is_global || ah->port_num != 1 || ah->grh.sgid_index >= GID_TBL || !gids[ah->grh.sgid_index].valid)
			return EINVAL; /* RoCE: every AV is global and its source GID must exist */
	}
	(void)qp;
	return 0;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	pthread_mutex_lock(&lock);
	enum ibv_qp_state from = qp->state, to = a->qp_state;
	int rc = check_mask(qp, to, mask);
	if (rc == 0)
		rc = check_values(qp, a, mask);
	if (rc == 0 && to == IBV_QPS_INIT && from == IBV_QPS_RESET)
		rc = should_fail("init", F_INIT);
	if (rc == 0 && to == IBV_QPS_RTR)
		rc = should_fail("rtr", F_RTR);
	char dgid[INET6_ADDRSTRLEN] = "";
	if (mask & IBV_QP_AV)
		gid_str(&a->ah_attr.grh.dgid, dgid, sizeof(dgid));
	log_line("{\"call\": \"ibv_modify_qp\", \"qpn\": %u, \"type\": \"%s\", \"from\": \"%s\", \"to\": \"%s\", "
		 "\"mask\": %d, \"port\": %u, \"pkey_index\": %u, \"access\": %u, \"path_mtu\": %d, \"dest_qp_num\": %u, "
		 "\"rq_psn\": %u, \"max_dest_rd_atomic\": %u, \"min_rnr_timer\": %u, \"is_global\": %u, "
		 "\"dgid\": \"%s\", \"sgid_index\": %u, \"hop_limit\": %u, \"traffic_class\": %u, \"ah_port\": %u, "
		 "\"ret\": %d}",
		 qp->qp_num, qp->qp_type == IBV_QPT_RC ? "RC" : "UC", state_name(from), state_name(to), mask,
		 a->port_num, a->pkey_index, a->qp_access_flags, (int)a->path_mtu, a->dest_qp_num, a->rq_psn,
		 a->max_dest_rd_atomic, a->min_rnr_timer, a->ah_attr.is_global, dgid, a->ah_attr.grh.sgid_index,
		 a->ah_attr.grh.hop_limit, a->ah_attr.grh.traffic_class, a->ah_attr.port_num, rc);
	if (rc == 0)
		qp->state = to;
	pthread_mutex_unlock(&lock);
	return rc;
}
