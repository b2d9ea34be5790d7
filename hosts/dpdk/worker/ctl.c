/* SPDX-License-Identifier: Apache-2.0
 *
 * The shared-memory control block (rain_ctl.h): a file the worker creates and maps
 * shared, so the scheduler agent (hosts/ctl.py) can map it too. Without --ctl the
 * same block lives in anonymous memory and nothing else changes.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rte_debug.h>

#include "worker.h"

void rw_ctl_create(struct rw_ctx *w)
{
	uint64_t size = rain_ctl_size(w->c.threads);
	void *p;

	if (w->c.ctl_path) {
		int fd = open(w->c.ctl_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			rte_exit(EXIT_FAILURE, "--ctl %s: %s\n", w->c.ctl_path, strerror(errno));
		if (ftruncate(fd, (off_t)size) != 0)
			rte_exit(EXIT_FAILURE, "--ctl %s: cannot size to %lu bytes: %s\n", w->c.ctl_path,
				 (unsigned long)size, strerror(errno));
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	} else {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (p == MAP_FAILED)
		rte_exit(EXIT_FAILURE, "cannot map the control block (%lu bytes): %s\n", (unsigned long)size,
			 strerror(errno));
	memset(p, 0, size);
	w->ctl = p;
	w->ctl_size = size;

	struct rain_ctl_header *h = &w->ctl->hdr;
	h->version = RAIN_CTL_VERSION;
	h->n_workers = w->c.threads;
	h->samples_per_worker = RAIN_CTL_SAMPLES;
	h->worker_base_id = w->c.worker_base;
	h->tsc_hz = w->tsc_hz;
	h->start_unix_ns = rain_unix_ns();
	h->pid = (uint32_t)getpid();
	h->ready = 0;
	for (uint32_t i = 0; i < w->c.threads; i++) {
		struct rain_ctl_knobs *k = &w->ctl->workers[i].knobs;
		k->quota = w->c.quota;
		k->enabled = w->c.start_disabled ? 0 : 1;
		k->slice = w->c.slice;
		k->generation = 0;
	}
	/* The magic last: a reader that sees it sees a filled header. */
	__atomic_store_n(&h->magic, RAIN_CTL_MAGIC, __ATOMIC_RELEASE);
	if (w->c.ctl_path)
		msync(p, size, MS_ASYNC);
}

void rw_ctl_ready(struct rw_ctx *w)
{
	__atomic_store_n(&w->ctl->hdr.ready, 1, __ATOMIC_RELEASE);
}
