/*
 * plain_loop.cdef.h: a whole plain aggregated run in one C call (runtime/plain_native.py
 * decides when a run is one and drives it; runtime/simulation.py's _run_plain with the
 * one-turn synthetic driver, round robin and unwatched C vLLM ranks is its twin).
 * Read by cffi as its cdef (no preprocessor lines). The ranks are aisim_vllm_rank
 * handles, given as void pointers because vllm_rank.cdef.h comes later in cffi's order.
 */

typedef struct aisim_plain aisim_plain;

/* How sessions become ready (workload/one_turn.py OneTurnDriver). */
enum aisim_plain_arrivals {
    AISIM_PLAIN_POISSON = 0,    /* first at 0, then exponential gaps of gap_ms (arrival_rng) */
    AISIM_PLAIN_CONSTANT = 1,   /* every gap_ms from 0 */
    AISIM_PLAIN_BURST = 2,      /* all at 0 */
    AISIM_PLAIN_CLOSED = 3,     /* closed loop: max_sessions at 0, the next at each terminal */
    AISIM_PLAIN_TRACE = 4       /* trace sessions (sessions.SessionDriver): by timestamps, or
                                   a closed loop of max_sessions (trace_closed); each turn
                                   after the first ready at its predecessor's terminal plus
                                   its delay */
};

/* aisim_plain_run's answers besides AISIM_OK and the negative errors: what Python must word
 * (the view says the details). */
enum aisim_plain_status {
    AISIM_PLAIN_LIVELOCK = 4,   /* LIVELOCK_PASSES effect-free zero-time passes in a row */
    AISIM_PLAIN_STALLED = 5,    /* nothing left to happen with requests in flight */
    AISIM_PLAIN_TIMING = 6,     /* a modeled time the C path cannot give (Python would
                                   raise, or need integers past 2^63) */
    AISIM_PLAIN_PROGRESS = 7,   /* progress_every steps more were taken: report progress,
                                   then call aisim_plain_run again to go on */
    AISIM_PLAIN_RECORDS = 8,    /* records_every records settled: take them (aisim_plain_
                                   records, then aisim_plain_clear_records), then call
                                   aisim_plain_run again to go on */
    /* with scaling (aisim_plain_set_cluster): a step paused where runtime/cluster.py acts;
     * Python applies it, tells the loop what changed (aisim_plain_add_worker, _set_rr,
     * _set_draining, _set_cluster), then calls aisim_plain_run again to go on */
    AISIM_PLAIN_CLUSTER = 9,    /* after the completions at now_ms: a worker's startup ends
                                   (ready_ms <= now_ms) or draining workers emptied (the
                                   view's emptied) */
    AISIM_PLAIN_TICK = 10,      /* after the arrivals at now_ms: the tick is due */
    AISIM_PLAIN_NO_WORKER = 11, /* a request arrived with no active worker (round robin's
                                   error; its uuid would be arrived + 1) */
    AISIM_PLAIN_NO_ENDPOINTS = 12   /* the kv_router had no candidate for an arrival */
};

typedef struct aisim_plain_config {
    /* sessions (one request each) */
    int32_t arrivals;           /* enum aisim_plain_arrivals */
    void *arrival_rng;          /* aisim_rng seeded with arrival_seed, nothing drawn (Poisson) */
    double gap_ms;
    int64_t sessions;
    int64_t max_sessions;       /* closed loop */
    /* prompts: session i's ids are its group prefix (shared blocks of a group drawn from
     * shape_rng, when groups > 0 and shared > 0) then `own` fresh blocks from fresh_base +
     * i * own, wrapped below 2^32 (synthetic.SyntheticSessions' layout) */
    int64_t isl;
    int64_t osl;
    int64_t trace_block;
    int64_t own;
    int64_t shared;
    int64_t fresh_base;
    int64_t groups;
    void *shape_rng;            /* aisim_rng (NULL: ungrouped) */
    /* trace sessions (AISIM_PLAIN_TRACE; `sessions` of them, their turns numbered session by
     * session): session i's turns are turn_base[i] .. turn_base[i + 1]; turn k's prompt is
     * the first ceil(turn_input[k] / trace_block) ids of ids[ids_off[k] ..], each repeated
     * trace_block times, cut at turn_input[k] (Prompt.from_hash_ids), its output
     * turn_output[k], its think time turn_delay[k]; timed sessions start at start_ms[i],
     * taken in start_order (by start, then index) */
    int32_t trace_closed;
    const int64_t *turn_base;
    const int64_t *turn_input;
    const int64_t *turn_output;
    const double *turn_delay;
    const int64_t *ids_off;
    const uint32_t *ids;
    const int64_t *start_order;
    const double *start_ms;
    int64_t max_input;          /* the longest turn_input */
    /* synthetic sessions of turns_per_session turns (AISIM_PLAIN_TRACE with it > 0:
     * synthetic.SyntheticSessions; no turn arrays): each turn's prompt is its session's
     * group prefix (drawn at its first turn) then `own` fresh blocks from fresh_base +
     * (session * turns_per_session + turn) * own, isl and osl long; each turn after the
     * first inter_turn_delay_ms after its predecessor's terminal; timed sessions start as
     * arrivals of kind start_kind (gap_ms, arrival_rng) would */
    int64_t turns_per_session;
    double inter_turn_delay_ms;
    int32_t start_kind;
    /* per-request records: gathered when keep_records (aisim_plain_records), handed over
     * (AISIM_PLAIN_RECORDS) once records_every are gathered (0: no bound), or once the oldest
     * gathered settled records_lag_ms of simulated time ago (0: no bound); else at the end */
    int32_t keep_records;
    int64_t records_every;
    double records_lag_ms;
    /* the deployment: dp_size aisim_vllm_ranks per worker, worker by worker (rank r of
     * worker w at w * dp_size + r) */
    size_t n_workers;
    size_t dp_size;
    void **ranks;
    const int32_t *rr_workers;  /* round robin's worker list, as worker indices */
    size_t n_rr;
    int64_t rr_cursor;
    const int64_t *rank_cursors;  /* round robin's next rank of each worker (NULL: 0) */
    /* kv_router placement instead (an aisim_kvr, borrowed; NULL: round robin; trace turns
     * only): each arrival placed by aisim_kvr_place_runs (with turn_priority and
     * turn_strict, NULL: 0), each pass completion reported (kvr_report:
     * AISIM_VLLM_REPORT_INDEX, or _KV with the pass's KV events to aisim_kvr_kv_event),
     * prefill completions and terminals notified (kvr_queue: the router has a pending
     * queue; a pass's signals go in running order and the requests they release are
     * delivered after the step's completions); its candidates are the loop's workers
     * (worker_id = index), set from Python */
    void *kvr;
    int32_t kvr_report;
    int32_t kvr_queue;
    const int64_t *turn_priority;
    const int64_t *turn_strict;
    /* the engine every rank shares */
    int64_t block_size;
    int64_t num_blocks;
    int64_t max_model_len;      /* -1: none */
    int32_t caching;
    int32_t no_evict;
    /* prefill timing (decode timing is the ranks' own): AISIM_DECODE_FIXED or _POLYNOMIAL */
    int32_t prefill_kind;
    double prefill_fixed_ms;
    double prefill_ratio;
    double cutoff_ms;           /* max_sim_time_ms (INFINITY: none) */
    int64_t livelock_passes;
    int64_t progress_every;     /* loop steps between progress reports (0: none) */
    /* the summary */
    double report_start_ms;
    int32_t has_ttft;
    int32_t has_itl;
    int32_t has_e2e;
    double sla_ttft_ms;
    double sla_itl_ms;
    double sla_e2e_ms;
} aisim_plain_config;

/* Kept current by aisim_plain_run: the simulation's counters and the summary's inputs
 * (report._Totals' fields, its samples in uuid order; the collector's fallback count). */
typedef struct aisim_plain_view {
    double now_ms;
    double next_ms;             /* the first event past the run (INFINITY: drained) */
    int64_t arrived;
    int64_t completed;
    int64_t in_flight;
    int64_t made;               /* sessions made into requests */
    double next_arrival_ms;     /* timed: the next session's start (INFINITY: none) */
    int64_t active;             /* closed loop: sessions started and not ended */
    int64_t next_pending;       /* closed loop: the next session to become ready */
    int64_t next_start;         /* timed trace: the sessions of start_order started */
    int64_t sessions_made;      /* trace: the sessions whose first turn was made */
    int64_t rr_cursor;
    double next_event_ms;       /* the first pass completion queued (INFINITY: none) */
    double next_ready_ms;       /* the first session ready (INFINITY: none) */
    size_t n_workers;           /* workers so far (scaling adds some) */
    const int32_t *emptied;     /* with AISIM_PLAIN_CLUSTER: the draining workers whose pass */
    size_t n_emptied;           /* completed and who hold nothing now */
    aisim_plain_summary summary;
    /* with AISIM_PLAIN_STALLED: the first rank that waits with nothing running (worker -1:
     * none) and its head; with AISIM_PLAIN_LIVELOCK: the worker and the time */
    int32_t stuck_worker;
    int32_t stuck_rank;
    int64_t stuck_uuid;
    int64_t stuck_prompt_len;
    int64_t stuck_generated;
    double stuck_ms;
    int64_t spins;
} aisim_plain_view;

/* The ranks and rngs are borrowed: they outlive the handle. */
int aisim_plain_new(aisim_plain **out, const aisim_plain_config *config);
int aisim_plain_free(aisim_plain *p);
int aisim_plain_view_of(const aisim_plain *p, const aisim_plain_view **out);
/* The whole run (or, with progress_every, the next steps of it). AISIM_OK, an
 * aisim_plain_status or an error (the rank's, or ENOMEM). */
int aisim_plain_run(aisim_plain *p);
/* After the run, rank `rank`'s (w * dp_size + r) pass end times (RankBase.pass_ends) and
 * its break gaps as (last pass before, first pass after) pairs, one per break of a finished
 * request in the order the Python rank counts them (NativeVllmRank._count_breaks). */
int aisim_plain_pass_ends(const aisim_plain *p, size_t rank, const double **out, size_t *n);
int aisim_plain_breaks(const aisim_plain *p, size_t rank, const int64_t **out,
                       size_t *n_pairs);
/* stats.exact_stats of sample array `which` (0 ttft, 1 e2e, 2 ttst, 3 tpot) into out[9]
 * (mean, min, max, median, p75, p90, p95, p99, std): the mean over the summary's order, the
 * rest over the ascending order, which the call leaves the array in (copy it first). */
int aisim_plain_sample_stats(aisim_plain *p, int32_t which, double *out);
/* Closed loop: the sessions ready and not made yet, in ready order (up to cap copied);
 * returns how many there are. Trace sessions: the turns ready and not made yet, in heap
 * order, each as session << 32 | turn. */
int aisim_plain_ready(aisim_plain *p, int64_t *index, double *ready_ms, size_t cap);
/* After the run: the pass completions still queued (a cutoff's), in pop order, as the
 * simulation's event queue holds them (ident = worker << 32 | generation); returns how many
 * (up to cap copied). And worker w's busy flag, generation, pass end and round robin's next
 * rank of it. */
int aisim_plain_events(aisim_plain *p, double *times, int64_t *idents, size_t cap);
int aisim_plain_worker(const aisim_plain *p, size_t w, int32_t *busy, uint32_t *generation,
                       double *pass_end_ms, int64_t *rank_cursor);
/* Scaling (runtime/cluster.py in Python, between the loop's pauses): the next tick and
 * worker ready (INFINITY: none), whose times the loop visits while work remains; round robin's
 * active workers as worker indices (n 0: none); worker w draining (no new work; its
 * completions report it once it holds nothing) or not; a worker added (its dp_size fresh
 * ranks, borrowed), numbered n_workers; the stall of a run Python must stop
 * (AISIM_PLAIN_STALLED's view fields). */
int aisim_plain_set_cluster(aisim_plain *p, double tick_ms, double ready_ms);
int aisim_plain_set_rr(aisim_plain *p, const int32_t *workers, size_t n);
int aisim_plain_set_draining(aisim_plain *p, size_t w, int32_t draining);
int aisim_plain_add_worker(aisim_plain *p, void **ranks);
int aisim_plain_find_stall(aisim_plain *p);
/* Frees a sample array once Python copied it (0 ttft, 1 e2e, 2 ttst, 3 tpot): the summary's
 * samples are held once, not twice, at the peak. */
int aisim_plain_drop_samples(aisim_plain *p, int32_t which);

/* The records gathered since the last aisim_plain_clear_records, in settlement (uuid)
 * order: n rows of 13 integers (uuid, input length, requested output, output length, most
 * reused tokens, first admission's reuse (-1: none), status (1 completed, 2 rejected), rank
 * (w * dp_size + r), session, turn, admissions, the first admission's reuse, flags: 1 first
 * token, 2 second token, 4 the first admission is a readmission) and of 6 doubles (arrival,
 * terminal, first, second and last token times, the first admission's time); the
 * admissions after each request's first as n_adm rows of (uuid, reused, readmission) and
 * their times; *rest_from: the first row settled behind a request still in flight when the
 * run ended (_ArrivalOrder.flush's; n when none). */
int aisim_plain_records(const aisim_plain *p, const int64_t **ints, const double **doubles,
                        size_t *n, const int64_t **adm_ints, const double **adm_at,
                        size_t *n_adm, size_t *rest_from);
int aisim_plain_clear_records(aisim_plain *p);
/* With kvr and keep_records: each request's (selected, best) overlap blocks at its
 * placement and (queued, released) times (NAN: placed at once), by uuid - 1 (n: at least
 * the requests placed). */
int aisim_plain_overlaps(const aisim_plain *p, const int64_t **out, const double **times,
                         size_t *n);
/* With kvr: a request the router released while the loop paused (Router.flush) delivered
 * now; and how many requests the router's queue holds. */
int aisim_plain_release(aisim_plain *p, int64_t uuid, int64_t worker_id, int64_t dp_rank,
                        int64_t overlap, int64_t best, double now_ms);
int aisim_plain_queued(const aisim_plain *p);

/* timing.StepTimer.prefill of the built-in models (decode_run.c): AISIM_OK with *out_ms, or
 * AISIM_DECODE_MISS when Python must compute it (or raise). */
int aisim_prefill_timing_eval(int32_t kind, double fixed_ms, double ratio, int64_t batch,
                              int64_t mean_isl, int64_t mean_prefix, double *out_ms);
