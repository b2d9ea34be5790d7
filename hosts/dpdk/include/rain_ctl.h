/* SPDX-License-Identifier: Apache-2.0
 *
 * The shared-memory control block between rain-worker and its scheduler agent,
 * declared once (paper section 3.3). The worker creates it as a file (mmap'ed by
 * both); hosts/ctl.py mirrors it with ctypes and tests/unit/test_proto_layout.py
 * checks the mirror against this header.
 *
 * Per worker thread, cache-line separated so no two writers share a line:
 *   knobs   (line 0): written by the agent, read by the worker (quota n_w, enable, slice)
 *   stats   (line 1): written by the worker (counters, idle polls)
 *   head    (line 2): number of samples the worker has written so far
 *   samples (ring):   one per finished task: local queuing delay, service time,
 *                     and the switch's INT values; the agent reads them every
 *                     control interval (Algorithm 1).
 * Host byte order: the block never leaves the machine.
 */
#ifndef RAIN_CTL_H
#define RAIN_CTL_H

#include <stdint.h>

#define RAIN_CTL_MAGIC        0x314c54434e494152ull /* "RAINCTL1" little-endian */
#define RAIN_CTL_VERSION      1u
#define RAIN_CTL_MAX_WORKERS  64u
#define RAIN_CTL_SAMPLES      4096u /* per worker, a power of two */
#define RAIN_CACHE_LINE       64u

struct rain_ctl_header {
	uint64_t magic;
	uint32_t version;
	uint32_t n_workers;
	uint32_t samples_per_worker;  /* RAIN_CTL_SAMPLES */
	uint32_t worker_base_id;      /* global id of thread 0 */
	uint64_t tsc_hz;
	uint64_t start_unix_ns;
	uint32_t pid;                 /* the worker process */
	uint32_t ready;               /* 1 once every thread runs */
	uint8_t  pad_[16];
} __attribute__((aligned(RAIN_CACHE_LINE)));

struct rain_ctl_knobs {
	uint32_t quota;       /* n_w: tokens in the switch + tasks in the FIFO stay <= quota */
	uint32_t enabled;     /* 0: issue no tokens (deregistered) */
	uint32_t slice;       /* stamped on this worker's tokens */
	uint32_t generation;  /* bumped by the agent on every change */
	uint8_t  pad_[48];
} __attribute__((aligned(RAIN_CACHE_LINE)));

struct rain_ctl_stats {
	uint64_t tasks_done;
	uint64_t tokens_sent;
	uint64_t polls;         /* FIFO polls of this worker thread */
	uint64_t empty_polls;   /* polls that found nothing: idle ratio = empty / polls */
	uint64_t desc_mismatch; /* descriptors refused: slot metadata did not match */
	uint64_t failed;        /* tasks answered with RAIN_F_FAILED */
	uint32_t fifo_len;      /* tasks waiting in the local FIFO now */
	uint32_t outstanding;   /* tokens in the switch + tasks in the FIFO now */
	uint64_t busy_ns;       /* time spent running tasks */
} __attribute__((aligned(RAIN_CACHE_LINE)));

struct rain_ctl_sample {
	uint32_t local_qdelay_ns;  /* L_w: arrival at the worker -> start of service */
	uint32_t service_ns;       /* T_w */
	uint32_t switch_qdelay_ns; /* L_sw: INT from the switch */
	uint32_t switch_qlen;      /* Q_sw: INT from the switch */
};

struct rain_ctl_worker {
	struct rain_ctl_knobs knobs;
	struct rain_ctl_stats stats;
	struct {
		uint64_t head;     /* samples written so far; slot = head % RAIN_CTL_SAMPLES */
		uint8_t  pad_[56];
	} __attribute__((aligned(RAIN_CACHE_LINE))) ring;
	struct rain_ctl_sample samples[RAIN_CTL_SAMPLES];
} __attribute__((aligned(RAIN_CACHE_LINE)));

struct rain_ctl {
	struct rain_ctl_header hdr;
	struct rain_ctl_worker workers[]; /* n_workers of them */
};

_Static_assert(sizeof(struct rain_ctl_header) == 64, "header is one line");
_Static_assert(sizeof(struct rain_ctl_knobs) == 64, "knobs are one line");
_Static_assert(sizeof(struct rain_ctl_stats) == 64, "stats are one line");
_Static_assert(sizeof(struct rain_ctl_sample) == 16, "a sample is 16 bytes");

static inline uint64_t rain_ctl_size(uint32_t n_workers)
{
	return sizeof(struct rain_ctl_header) + (uint64_t)n_workers * sizeof(struct rain_ctl_worker);
}

#endif /* RAIN_CTL_H */
