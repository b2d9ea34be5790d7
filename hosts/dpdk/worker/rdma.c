/* SPDX-License-Identifier: Apache-2.0
 *
 * The RDMA ring (paper 3.2.2, 6.1) and the table of ways to fill it (--rdma):
 *   emulated  the RX loop applies the switch's RoCEv2 WRITEs itself (rdma_emu.c);
 *   ibverbs   the ConnectX writes the ring: one MR over it, one QP per thread
 *             (rdma_verbs.c; built only when libibverbs was found).
 *
 * Layout: one mapping per server, thread i owns [i*region, (i+1)*region), region =
 * slots * slot_size; VAs are real addresses of this process. The mapping is aligned
 * to its size rounded up to a power of two (at most 4 GiB): the switch adds a slot's
 * offset to the low 32 bits of the VA only (rdma_writer.p4), so no region may cross a
 * 4 GiB boundary, and a block aligned to its own size never does.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker.h"

static const struct rw_rdma_ops *const rdma_variants[] = {
	&rw_rdma_emulated,
#ifdef RAIN_HAVE_IBVERBS
	&rw_rdma_ibverbs,
#endif
};

const struct rw_rdma_ops *rw_rdma_find(const char *name)
{
	for (size_t i = 0; i < RTE_DIM(rdma_variants); i++)
		if (strcmp(rdma_variants[i]->name, name) == 0)
			return rdma_variants[i];
	return NULL;
}

const char *rw_rdma_names(void)
{
#ifdef RAIN_HAVE_IBVERBS
	return "emulated|ibverbs";
#else
	return "emulated (built without ibverbs)";
#endif
}

static uint64_t pow2_ceil(uint64_t x)
{
	uint64_t p = 1;
	while (p < x)
		p <<= 1;
	return p;
}

int rw_ring_map(struct rw_ctx *w)
{
	struct rw_ring *r = &w->ring;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	r->slots = w->c.ring_slots;
	r->slot_size = w->c.slot_size;
	r->region_size = (uint64_t)r->slots * r->slot_size;
	r->size = r->region_size * w->c.threads;
	r->psn = w->c.psn & 0xffffff;
	r->map_size = RTE_ALIGN_CEIL(r->size, page);
	uint64_t align = RTE_MIN(RTE_MAX(pow2_ceil(r->size), page), 1ull << 32);

	/* Reserve size + align of address space (not memory), keep the aligned part. */
	uint64_t span = r->map_size + align - page;
	uint8_t *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	uint8_t *a = (uint8_t *)RTE_ALIGN_CEIL((uintptr_t)p, align);
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (p + span > a + r->map_size)
		munmap(a + r->map_size, (size_t)(p + span - (a + r->map_size)));
	/* Populated, so the first WRITE faults in neither the RX loop nor the NIC. */
	void *m = mmap(a, r->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_POPULATE,
		       -1, 0);
	if (m == MAP_FAILED) {
		int e = errno;
		munmap(a, r->map_size);
		errno = e;
		return -1;
	}
	r->base = m;
	return 0;
}

void rw_ring_unmap(struct rw_ctx *w)
{
	if (w->ring.base)
		munmap(w->ring.base, w->ring.map_size);
	w->ring.base = NULL;
}
