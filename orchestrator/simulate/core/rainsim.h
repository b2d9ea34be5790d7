/* SPDX-License-Identifier: Apache-2.0
 *
 * librainsim: the simulated testbed's discrete-event core. The C API, used from
 * Python through ctypes (orchestrator/simulate/engine.py mirrors these structs).
 *
 * Time is paper time in integer nanoseconds (int64) from the start of the run
 * (warm-up included); only rates are doubles.
 *
 *   struct rs_config cfg = {...};
 *   char err[256];
 *   struct rs_sim *s = rs_create(&cfg, err, sizeof err);   NULL: err says why
 *   while ((rc = rs_run_until(s, t)) == 0) {                 0: paused at t
 *       rs_take_samples(s, w, buf, 4096, &lost);             Algorithm 1 in Python
 *       rs_set_worker(s, w, quota, slice);
 *       t += interval;
 *   }                                                        1: finished, < 0: error
 *   rs_requests(s, ...); rs_counters(s, ...); rs_series(s, ...);
 *   rs_destroy(s);
 *
 * Every function returns an error as a code (< 0) and a message (rs_error); nothing
 * aborts the calling process.
 *
 * The model (what happens to one request):
 *   client --task--> switch --dispatch--> worker thread FIFO --run--> reply --> switch --> client
 *   Each packet: the sender's link (FIFO, serialisation bytes*8/link_gbps), one-way delay,
 *   the switch's per-packet pipeline latency, the receiver's link. A worker thread spends
 *   worker_pkt_ns on each packet it receives or sends (rx of the task, tx of the reply and
 *   of each token), run to completion, FIFO order.
 *   What the switch does with tasks and what workers send back is the policy's
 *   (policy.h; policy_rain.c, policy_random.c).
 *
 * Random draws, in this order, from two xoshiro256** streams of the seed:
 *   client stream (0), per request at its intended send time (a replay draws only
 *     `large`, and nothing when replay_large is given): class (one unit draw, only
 *     when the phase has more than one class), service time (bimodal: one unit;
 *     exp: one Exp(1); keys-exp: one unit when the mean is above 1), large (one unit, only
 *     when large_fraction > 0 and the class payload fits inline), then the next
 *     inter-arrival (Poisson: one Exp(1)).
 *   policy stream (1): the policy's own draws (random: one per task; racksched: two
 *     per task pass, none with one worker).
 */
#ifndef RAINSIM_H
#define RAINSIM_H

#include <stdint.h>

#define RS_MAX_CLASSES 32
#define RS_MAX_SLICES  16
#define RS_MAX_WORKERS 4096
#define RS_MAX_PARAMS  8
#define RS_SAMPLES     4096 /* per worker: a ring keeps the newest, as rain-worker's (rain_ctl.h) */

enum rs_service_kind { RS_SVC_CONST = 0, RS_SVC_EXP, RS_SVC_BIMODAL, RS_SVC_KEYS_CONST, RS_SVC_KEYS_EXP };
enum rs_arrival { RS_ARR_POISSON = 0, RS_ARR_CONSTANT };
enum rs_outcome { RS_ANSWERED = 0, RS_REJECTED, RS_TIMED_OUT, RS_NOT_SENT };

struct rs_network {
	int64_t client_switch_ns; /* one-way, client NIC <-> switch */
	int64_t switch_worker_ns; /* one-way, switch <-> worker NIC */
	int64_t switch_pkt_ns;    /* switch pipeline latency per packet */
	int64_t worker_pkt_ns;    /* worker thread cost per packet received or sent */
	double link_gbps;         /* every host link; <= 0: infinite (no serialisation) */
	int64_t prewrite_ns;      /* RDMA WRITE: extra time until the payload is in the ring */
};

struct rs_class {
	double weight;
	int32_t task_type;
	int32_t slice;            /* 0 .. RS_MAX_SLICES-1 */
	int32_t kind;             /* enum rs_service_kind */
	int32_t payload_bytes;    /* > 8: every task of the class is large */
	int64_t a_ns;             /* const: time; exp: mean; bimodal: mode a; keys-*: ns per key */
	int64_t b_ns;             /* bimodal: mode b */
	double p_a;               /* bimodal: P(a) */
	double keys;              /* keys-*: count, or mean count */
	double large_fraction;    /* share of inline tasks that carry large_bytes instead */
	int32_t large_bytes;
	int32_t pad_;
};

struct rs_phase {
	int64_t at_ns;
	double rate_rps;          /* 0: no arrivals in this phase */
	int32_t n_classes;
	uint8_t classes[RS_MAX_CLASSES]; /* indices into rs_config.classes */
	int32_t pad_;
};

struct rs_config {
	const char *policy;       /* a name in the registry (sim.c): "rain", "random" */
	int32_t n_workers;        /* worker threads */
	int32_t threads_per_host; /* thread w is on host w / threads_per_host (shares its link) */
	const int32_t *worker_slices; /* n_workers initial slices */
	int32_t quota;            /* initial per-thread token quota */
	int32_t arrival;          /* enum rs_arrival */
	int64_t queue_capacity;   /* tasks a slice's switch queue holds */
	int32_t n_classes;
	int32_t n_phases;
	const struct rs_class *classes;
	const struct rs_phase *phases; /* at_ns increasing, the first at 0 */
	int64_t gen_end_ns;       /* the client schedules requests with intended time < this */
	int64_t timeout_ns;       /* > 0 */
	int64_t max_outstanding;  /* 0: no admission cap */
	int64_t sample_period_ns; /* time series period; 0: none */
	uint64_t seed;
	struct rs_network net;
	double params[RS_MAX_PARAMS]; /* the policy's parameters (policies.py names them) */
	/* A replay (n_replay > 0): these requests instead of drawn ones (the phases then only
	 * size the buffers):
	 * intended times (not decreasing, < gen_end_ns), service times, class indices, and
	 * which were sent large (NULL: drawn from the class's large_fraction). The model
	 * beside a measurement replays what the client drew (common random numbers). */
	int64_t n_replay;
	const int64_t *replay_at_ns;
	const int64_t *replay_service_ns;
	const uint8_t *replay_class;
	const uint8_t *replay_large;
};

/* One finished task, as rain-worker writes it to the control block (rain_ctl.h). */
struct rs_sample {
	uint32_t local_qdelay_ns;  /* L_w */
	uint32_t service_ns;       /* T_w */
	uint32_t switch_qdelay_ns; /* L_sw */
	uint32_t switch_qlen;      /* Q_sw */
};

struct rs_worker_info {
	int64_t busy_ns;          /* time spent running tasks */
	int64_t tasks_done;
	int64_t tokens_sent;
	int32_t quota;
	int32_t slice;
	int32_t enabled;
	int32_t fifo;             /* tasks in its FIFO, the running one included */
	int32_t outstanding;      /* tokens in the switch + tasks held */
	int32_t pad_;
};

/* The switch's event counters (names as the P4 program's EV_* counters). */
struct rs_counters {
	int64_t dispatch_direct;  /* EV_DISPATCH_DIRECT: a task met a waiting token */
	int64_t dispatch_queued;  /* EV_DISPATCH_QUEUED: a token met a waiting task */
	int64_t task_queued;      /* EV_TASK_QUEUED */
	int64_t token_queued;     /* EV_TOKEN_QUEUED */
	int64_t reject;           /* EV_REJECT */
	int64_t forwarded;        /* EV_FORWARDED: replies */
	int64_t prewrites;        /* large tasks pre-written */
	int64_t prewrite_bytes;   /* frame bytes the WRITE multicast put on switch->worker links */
	int64_t packets;          /* packets the switch received */
	int64_t events;           /* events processed */
	int64_t late_replies;     /* replies after their request timed out */
	int64_t waited;           /* requests held back by the admission cap for a while */
	int64_t max_tokens_waiting; /* largest token balance seen, over slices */
	int64_t max_held;         /* most tasks any worker held at once */
	int64_t end_ns;           /* simulated time at the end */
	int64_t samples_lost;     /* samples overwritten before a take (RS_SAMPLES ring) */
	int64_t recirculations;   /* task passes sent round again (r2p2) */
	int64_t empties;          /* pulls answered EMPTY (draconis) */
	int64_t fetches;          /* large payloads a worker fetched from the client (draconis) */
	int64_t reports;          /* worker REPORTs the switch received (r2p2, racksched) */
};

struct rs_sim;

struct rs_sim *rs_create(const struct rs_config *cfg, char *err, int errlen);
void rs_destroy(struct rs_sim *s);
const char *rs_error(const struct rs_sim *s);

/* Run every event before t_ns (or to the end). 0: paused at t_ns; 1: finished; < 0: error. */
int rs_run_until(struct rs_sim *s, int64_t t_ns);
int64_t rs_now(const struct rs_sim *s);

/* Per worker thread: its state; its samples since the last call (the newest
 * min(RS_SAMPLES, max), oldest first; the older ones counted in *lost); a new quota (>= 0)
 * and slice. */
int rs_worker(const struct rs_sim *s, int32_t w, struct rs_worker_info *out);
int rs_take_samples(struct rs_sim *s, int32_t w, struct rs_sample *out, int32_t max, int64_t *lost);
int rs_set_worker(struct rs_sim *s, int32_t w, int32_t quota, int32_t slice);

/* Results. rs_n_requests: requests the client scheduled so far. rs_requests copies them
 * (each pointer may be NULL to skip that column). */
int64_t rs_n_requests(const struct rs_sim *s);
int rs_requests(const struct rs_sim *s, int64_t *intended_ns, uint8_t *cls, uint8_t *outcome,
		int64_t *latency_ns, int64_t *service_ns, uint8_t *large, int16_t *worker);
int rs_counters(const struct rs_sim *s, struct rs_counters *out);

/* Time series: rs_n_series rows; row i: t_ns[i], balance[i * RS_MAX_SLICES + slice],
 * workers[(i * n_workers + w) * 7 + k] with k = fifo, outstanding, done, busy_ns, quota,
 * slice, enabled. */
int64_t rs_n_series(const struct rs_sim *s);
int rs_series(const struct rs_sim *s, int64_t *t_ns, int64_t *balance, int64_t *workers);

/* The policies this library has, comma-separated. */
const char *rs_policies(void);

/* sizeof the structs above, in order: network, class, phase, config, sample, worker_info,
 * counters (7 values), so a binding can check its mirror. */
void rs_sizes(int64_t *out);

#endif /* RAINSIM_H */
